//! What `nbraid check` and `nbraidd --check` read of the write-hole log's rings: their word
//! on the life that stopped (`nbraid_core::ppl::last_life`), read as a dirty start reads it — the rings of
//! the members serving, by the records' places, through the start's own reader — with plain
//! reads (no lock, nothing written). After a crash in a life that did not log
//! (`write_hole = "off"`, mid-reshape), a dirty start with the log on is a dirty start
//! without it: a role out refused unless forced, the resync before serving. The records
//! alone cannot tell check so.

use nbraid_config::{Config, MemberStorage, Volume};
use nbraid_core::member::Member;
use nbraid_core::metadata::{AssembleError, Assembly, Probe};
use nbraid_core::ppl::{last_life_of, LastLife};
use nbraid_core::MemoryMember;
use nbraid_layout::Node;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

/// A member's ring, as the start's reader takes it: the member and (offset, length).
type Ring = (Arc<dyn Member>, (u64, u64));

/// What the rings say, as far as check can read them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Word {
    /// The start does not read them ([`LastLife::read_at_start`]): clean, the log off,
    /// mid-reshape, read-only.
    NotAsked,
    /// The word the start reads.
    Said(LastLife),
    /// Some serving member's ring is on an NBD server, not read here (its id).
    NotRead(String),
}

/// The rings' word on volume `v`'s last life, as its start would read it over `asm`
/// (`probes`: the config's members, spares, then members added at run time, whose paths
/// are `added`).
fn word(
    config: &Config,
    v: &Volume,
    (probes, added): (&[Probe], &[String]),
    asm: &Assembly,
) -> Word {
    let (clean, reshaping) = (asm.clean, asm.reshape.is_some());
    if !LastLife::read_at_start(clean, v.metadata.ppl, reshaping, !v.read_only) {
        return Word::NotAsked;
    }
    let positions: Vec<usize> = v.members.iter().chain(&v.heal.spares).copied().collect();
    let mut rings: Vec<Ring> = Vec::new();
    // The members serving: a stale one's or one being rebuilt's ring may be of an older
    // life (the start leaves them out too).
    for &p in asm.roles.iter().flatten() {
        let path = match positions.get(p) {
            Some(&m) if config.members[m].state == MemberStorage::Remote => {
                return Word::NotRead(config.members[m].id.clone());
            }
            Some(&m) => config.members[m].path.clone(),
            None => PathBuf::from(&added[p - positions.len()]),
        };
        let Some(area) = ring_area(&probes[p], &v.name) else {
            continue;
        };
        if let Some(ring) = read_ring(&path, area) {
            rings.push(ring);
        }
    }
    Word::Said(futures::executor::block_on(last_life_of(&rings)))
}

/// Volume `v`'s assembly as its start leaves it once it read the rings' word (`asm`: the
/// assembly from the superblocks, over `tree`, `probes` and `added` as
/// `nbraid_core::metadata::assemble_as_started` took them, `ids` the members' config ids):
/// after a life that did not log, assembled again as a dirty start without the log — a role
/// out that parity rebuilds refused. With the word, for the notes ([`unlogged_note`]).
pub fn as_started(
    config: &Config,
    v: &Volume,
    (tree, probes, added): (&Node, &[Probe], &[String]),
    ids: &[String],
    asm: Assembly,
) -> Result<(Assembly, Word), AssembleError> {
    let word = word(config, v, (probes, added), &asm);
    let asm = match &word {
        Word::Said(last) if !last.logged() => {
            last.assemble_after(&v.name, tree, probes, ids, v.metadata.ppl)?
        }
        _ => asm,
    };
    Ok((asm, word))
}

/// Where the record of volume `name` in `probe` places its log ring (offset, length).
fn ring_area(probe: &Probe, name: &str) -> Option<(u64, u64)> {
    let Probe::Superblock(sb, _) = probe else {
        return None;
    };
    let record = sb.volumes.iter().find(|x| x.name == name)?;
    record.ppl.map(|a| (a.offset, a.len))
}

/// The ring at `area` of the member file at `path`, copied into memory for the start's
/// reader; `None` where it cannot be read (its peers carry the same word, as at a start).
fn read_ring(path: &std::path::Path, (offset, len): (u64, u64)) -> Option<Ring> {
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = vec![0u8; usize::try_from(len).ok()?];
    file.read_exact_at(&mut bytes, offset).ok()?;
    let copy = MemoryMember::new(path.display().to_string(), len);
    copy.poke(0, &bytes);
    Some((Arc::new(copy) as Arc<dyn Member>, (0, len)))
}

/// What the start does after a crash the rings say was not logged, once it may start
/// (every role the volume's parity rebuilds is there): `None` where the rings do not
/// change what it does (nor over a tree without parity, `tree`).
pub fn unlogged_note(word: &Word, tree: &Node) -> Option<String> {
    note_over(word, !nbraid_core::ppl::parity_groups(tree).is_empty())
}

fn note_over(word: &Word, has_parity: bool) -> Option<String> {
    match word {
        Word::Said(last) if !last.logged() && has_parity => Some(
            "not shut down cleanly, and the write-hole log's rings do not say the life that stopped logged its writes (it ran with write_hole = \"off\" or mid-reshape, or was run by an nbraid that does not say): no log replay covers the rows its crash may have torn, so the start resyncs them before serving, as without the log; a member missing now would be refused unless forced".into(),
        ),
        Word::NotRead(id) if has_parity => Some(format!(
            "not shut down cleanly: whether the life that stopped logged its writes is in the write-hole log's rings, and {id}'s is on an NBD server, not read here; if it did not, the start resyncs before serving and refuses a member missing unless forced"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unlogged_word_over_parity_says_the_resync_comes_first() {
        let note = note_over(&Word::Said(LastLife::Unlogged), true).unwrap();
        assert!(note.contains("resyncs them before serving"), "{note}");
        assert!(note_over(&Word::Said(LastLife::Unknown), true).is_some());
        assert_eq!(note_over(&Word::Said(LastLife::Logged), true), None);
        assert_eq!(note_over(&Word::Said(LastLife::Unlogged), false), None);
        assert_eq!(note_over(&Word::NotAsked, true), None);
        let remote = note_over(&Word::NotRead("r1".into()), true).unwrap();
        assert!(remote.contains("r1's is on an NBD server"), "{remote}");
    }
}

//! What `nbraid check` and `nbraidd --check` read of the write-hole log's rings: their word
//! on the life that stopped (`nbraid_core::ppl::last_life`), read as a dirty start reads it — the rings of
//! the members serving, by the records' places, through the start's own reader — with plain
//! reads (no lock, nothing written). After a crash in a life that did not log
//! (`write_hole = "off"`, mid-reshape), a dirty start with the log on is a dirty start
//! without it: a role out refused unless forced, the resync before serving. The records
//! alone cannot tell check so.

use nbraid_config::{Config, MemberStorage, Volume};
use nbraid_core::member::Member;
use nbraid_core::metadata::{resync_order, Absence, AssembleError, Assembly, Probe, ResyncOrder};
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
/// out that parity rebuilds refused. With the word, for the notes ([`resync_note`]).
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

/// What a start of volume `v` assembled as `asm` does about a crash or a stale member, in a
/// sentence, by the start's own rule (`nbraid_core::metadata::resync_order`): whether it
/// replays the log, what it resyncs, and whether before serving or in the background, and
/// why. `None`: nothing to resync (clean, no stale member), or a read-only or mid-reshape
/// start (their own rules say what they do). `probes` give the records (the bitmap).
pub fn resync_note(
    config: &Config,
    v: &Volume,
    (asm, probes): (&Assembly, &[Probe]),
    word: &Word,
) -> Option<String> {
    let stale = (asm.roles.iter()).any(|r| matches!(r, Err(Absence::Stale { .. })));
    if (asm.clean && !stale) || v.read_only || asm.reshape.is_some() {
        return None;
    }
    let has_parity = !nbraid_core::ppl::parity_groups(&asm.tree).is_empty();
    if let (Word::NotRead(id), true) = (word, has_parity) {
        return Some(format!(
            "not shut down cleanly: whether the life that stopped logged its writes is in the write-hole log's rings, and {id}'s is on an NBD server, not read here; if it did not, the start resyncs before serving and refuses a member missing unless forced"
        ));
    }
    let ids = v.member_ids(config);
    let not_covered = nbraid_config::write_hole::unlogged_groups(&asm.tree, v.metadata.ppl, &ids);
    let life_unlogged = matches!(word, Word::Said(last) if !last.logged());
    let logged = not_covered.is_empty() && !life_unlogged;
    let recorded = |p: &Probe| match p {
        Probe::Superblock(sb, _) => {
            (sb.volumes.iter()).any(|r| r.name == v.name && r.bitmap.is_some())
        }
        _ => false,
    };
    let start = StartResync {
        clean: asm.clean,
        replays_log: has_parity && logged,
        bitmap: probes.iter().any(recorded),
        order: resync_order(&asm.tree, logged, stale, !asm.rebuilding.is_empty()),
        life_unlogged,
        log_off: !v.metadata.ppl,
        not_covered,
    };
    Some(start.text())
}

/// What a start resyncs, and when: [`resync_note`]'s facts.
struct StartResync {
    /// Shut down cleanly (then only a stale member is resynced).
    clean: bool,
    /// The log's entries are replayed first (parity, every group logged, a life that logged).
    replays_log: bool,
    /// The records keep a write-intent bitmap (else the whole volume is resynced).
    bitmap: bool,
    order: ResyncOrder,
    /// The rings say the life that stopped did not log.
    life_unlogged: bool,
    /// `write_hole = "off"`.
    log_off: bool,
    /// Parity groups the log does not cover, in the tree's notation.
    not_covered: Vec<String>,
}

impl StartResync {
    fn text(&self) -> String {
        let head = match (self.clean, self.replays_log) {
            (true, _) => "a member missed writes while out (stale): the start resyncs",
            (false, true) => {
                "not shut down cleanly: the start replays the write-hole log, then resyncs"
            }
            (false, false) => "not shut down cleanly: the start resyncs",
        };
        let what = match self.bitmap {
            true => "the regions the write-intent bitmap marks",
            false => "the whole volume (it has no write-intent bitmap)",
        };
        let when = match self.order {
            ResyncOrder::Background => {
                "in the background while serving (`nbraid status` shows its progress)".to_string()
            }
            ResyncOrder::BeforeServingRebuilding => "before serving: a member is being rebuilt, and it is trusted below its checkpoint only once the resync rewrote those regions onto it".into(),
            ResyncOrder::BeforeServingStale => "before serving: a stale member's chunks are rebuilt from parity the crash may have torn".into(),
            ResyncOrder::BeforeServingUnlogged if self.life_unlogged => "before serving: the write-hole log's rings do not say the life that stopped logged its writes (it ran with write_hole = \"off\" or mid-reshape, or was run by an nbraid that does not say), so no log replay covers the rows its crash may have torn, as without the log; a member missing now would be refused unless forced".into(),
            ResyncOrder::BeforeServingUnlogged if self.log_off => "before serving: with write_hole = \"off\" no log says which rows the crash may have torn".into(),
            ResyncOrder::BeforeServingUnlogged => format!(
                "before serving: the write-hole log does not cover {}",
                self.not_covered.join(", ")
            ),
        };
        format!("{head} {what} {when}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirty(order: ResyncOrder) -> StartResync {
        StartResync {
            clean: false,
            replays_log: order == ResyncOrder::Background,
            bitmap: true,
            order,
            life_unlogged: false,
            log_off: false,
            not_covered: Vec::new(),
        }
    }

    #[test]
    fn a_dirty_start_says_what_it_resyncs_and_when_by_the_starts_own_order() {
        let logged = dirty(ResyncOrder::Background).text();
        assert_eq!(logged, "not shut down cleanly: the start replays the write-hole log, then resyncs the regions the write-intent bitmap marks in the background while serving (`nbraid status` shows its progress)");
        let unlogged = StartResync {
            life_unlogged: true,
            ..dirty(ResyncOrder::BeforeServingUnlogged)
        };
        let text = unlogged.text();
        assert!(
            text.starts_with("not shut down cleanly: the start resyncs the regions"),
            "{text}"
        );
        assert!(
            text.contains("before serving: the write-hole log's rings do not say"),
            "{text}"
        );
        let off = StartResync {
            log_off: true,
            bitmap: false,
            ..dirty(ResyncOrder::BeforeServingUnlogged)
        };
        assert!(off.text().contains("the whole volume (it has no write-intent bitmap) before serving: with write_hole = \"off\""), "{}", off.text());
        let nested = StartResync {
            not_covered: vec!["raid5(m0 m1 m2)".into()],
            ..dirty(ResyncOrder::BeforeServingUnlogged)
        };
        assert!(nested
            .text()
            .ends_with("the write-hole log does not cover raid5(m0 m1 m2)"));
        let stale = StartResync {
            clean: true,
            ..dirty(ResyncOrder::BeforeServingStale)
        };
        assert!(stale
            .text()
            .starts_with("a member missed writes while out (stale)"));
        assert!(stale
            .text()
            .contains("before serving: a stale member's chunks"));
        let rebuilding = dirty(ResyncOrder::BeforeServingRebuilding).text();
        assert!(
            rebuilding.contains("before serving: a member is being rebuilt"),
            "{rebuilding}"
        );
    }
}

//! The refusals a start makes of a `read_only = true` volume, said by `nbraid check` and
//! `nbraidd --check` before any start: members with no array to open (a read-only start
//! creates nothing), and core's own (`metadata::read_only`: a reshape in progress, an
//! unclean parity volume with regions the write-intent bitmap marks). The bitmap is read
//! as the start reads it — the union of every current member's copy — with plain reads.

use nbraid_config::{Config, MemberStorage, Volume};
use nbraid_core::metadata::{read_only_refusal, Assembly, Probe, ReadOnlyFound};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

/// Why a read-only start refuses volume `name` whose members carry no array yet.
pub(crate) fn create_refusal(name: &str) -> String {
    format!(
        "volume `{name}` has read_only = true, but its members carry no array to open (new or \
         blank): a read-only start creates nothing — start it read-write once to create it"
    )
}

/// Why a read-only start refuses volume `v` as `asm` assembled it from `probes` (by
/// position: its members, its spares, then the `added` paths), if it does.
pub fn open_refusal(
    config: &Config,
    v: &Volume,
    asm: &Assembly,
    (probes, added): (&[Probe], &[String]),
) -> Option<String> {
    let capacity = asm.tree.capacity();
    let found = ReadOnlyFound {
        clean: asm.clean,
        unsynced_bytes: match asm.clean {
            // Clean: what the bitmap keeps does not matter (and is not read).
            true => 0,
            false => unsynced_bytes(config, v, asm, (probes, added)).unwrap_or(capacity),
        },
        has_parity: !nbraid_core::ppl::parity_groups(&asm.tree).is_empty(),
        reshaping: asm.reshape.is_some(),
    };
    read_only_refusal(&v.name, found)
}

/// The bytes of the volume the bitmap marks, as the start counts them: the union of the
/// current members' copies of the newest record's bitmap (`None`: there is no bitmap, or
/// none of it could be read — the whole volume, as the start counts it without one).
fn unsynced_bytes(
    config: &Config,
    v: &Volume,
    asm: &Assembly,
    (probes, added): (&[Probe], &[String]),
) -> Option<u64> {
    let record = |pos: usize| crate::records::record_of(probes.get(pos)?, &v.name, Some(asm.array));
    let newest_pos = *asm.roles.get(asm.newest_role)?.as_ref().ok()?;
    let newest = record(newest_pos)?.bitmap?;
    let positions: Vec<usize> = v.members.iter().chain(&v.heal.spares).copied().collect();
    let path_of = |pos: usize| -> Option<PathBuf> {
        match positions.get(pos) {
            Some(&m) if config.members[m].state == MemberStorage::Remote => None,
            Some(&m) => Some(config.members[m].path.clone()),
            None => added.get(pos - positions.len()).map(PathBuf::from),
        }
    };
    let len = usize::try_from(newest.area.len).ok()?;
    let mut union = vec![0u8; len];
    let mut read_any = false;
    for pos in asm.roles.iter().filter_map(|r| r.as_ref().ok().copied()) {
        let Some(area) = record(pos).and_then(|r| r.bitmap).map(|b| b.area) else {
            continue;
        };
        if area.len != newest.area.len {
            continue;
        }
        let Some(file) = path_of(pos).and_then(|p| std::fs::File::open(p).ok()) else {
            continue;
        };
        let mut bytes = vec![0u8; len];
        if file.read_exact_at(&mut bytes, area.offset).is_ok() {
            union.iter_mut().zip(&bytes).for_each(|(u, b)| *u |= b);
            read_any = true;
        }
    }
    if !read_any {
        return None;
    }
    let capacity = asm.tree.capacity();
    let intent =
        nbraid_core::metadata::intent::Intent::new(capacity, newest.chunk_bytes, union).ok()?;
    Some(intent.set_ranges(capacity).iter().map(|(a, b)| b - a).sum())
}

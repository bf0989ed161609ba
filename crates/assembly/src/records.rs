//! What a member's superblock says about one volume: its record ([`record_of`]), the array
//! the volume is ([`this_array`]: members outvote a file reused by another array's volume of
//! the same name), the members added at run time its newest record lists, and whether a
//! member carries this volume's records alone (a member shared with other volumes, Matrix,
//! must never be wiped or taken as a spare).

use crate::member::Opened;
use nbraid_core::metadata::{self, Probe, Uuid, VolumeRecord};

/// Volume `name`'s record in `probe` when it is of array `array` (of any array: `None`).
pub fn record_of<'a>(
    probe: &'a Probe,
    name: &str,
    array: Option<Uuid>,
) -> Option<&'a VolumeRecord> {
    match probe {
        Probe::Superblock(sb, _) => sb
            .volumes
            .iter()
            .find(|r| r.name == name && array.is_none_or(|a| r.array == a)),
        _ => None,
    }
}

/// [`record_of`] with the member's own id.
fn held_of<'a>(
    probe: &'a Probe,
    name: &str,
    array: Option<Uuid>,
) -> Option<(Uuid, &'a VolumeRecord)> {
    match probe {
        Probe::Superblock(sb, _) => record_of(probe, name, array).map(|r| (sb.member, r)),
        _ => None,
    }
}

/// The array volume `name` is, as the config's members and spares (`probes`) say: the id
/// most of their records of that name carry (ties: the newest record's). A file later used
/// by another array whose volume has the same name is outvoted by the members; `None` when
/// none carries a record.
pub fn this_array<'a>(probes: impl Iterator<Item = &'a Probe>, name: &str) -> Option<Uuid> {
    let records: Vec<&VolumeRecord> = probes.filter_map(|p| record_of(p, name, None)).collect();
    records
        .iter()
        .max_by_key(|r| {
            let votes = records.iter().filter(|o| o.array == r.array).count();
            (votes, r.events)
        })
        .map(|r| r.array)
}

/// Volume `name`'s newest record among `probes`, of the array most of them say it is
/// ([`this_array`]).
pub fn newest_record<'a>(probes: &'a [Probe], name: &str) -> Option<&'a VolumeRecord> {
    let array = this_array(probes.iter(), name);
    metadata::newest_record(probes.iter().filter_map(|p| held_of(p, name, array)))
}

/// The paths volume `name`'s (of array `array`) newest record among `probes` lists.
pub fn newest_added_paths<'a>(
    probes: impl Iterator<Item = &'a Probe>,
    name: &str,
    array: Option<Uuid>,
) -> Vec<String> {
    metadata::newest_record(probes.filter_map(|p| held_of(p, name, array)))
        .map(|r| r.added_paths.clone())
        .unwrap_or_default()
}

/// What volume `name`'s records (of array `array`, [`this_array`]) say about
/// member `o`: `None` when it carries none (blank, missing, unreadable), else whether every
/// record on it is this volume's. A record of another array is another volume's, whatever its
/// name.
pub fn only_this_volume(o: &Opened, name: &str, array: Option<Uuid>) -> Option<bool> {
    let probe = o.meta()?.probe();
    match probe {
        Probe::Superblock(sb, _) if record_of(probe, name, array).is_some() => Some(
            sb.volumes
                .iter()
                .all(|v| v.name == name && array.is_none_or(|a| v.array == a)),
        ),
        Probe::Superblock(..) => Some(false),
        _ => None,
    }
}

/// Member `o` carries a record of volume `name` of array `array` (perhaps beside other
/// volumes' records).
pub fn has_this_volume(o: &Opened, name: &str, array: Option<Uuid>) -> bool {
    o.meta()
        .is_some_and(|m| record_of(m.probe(), name, array).is_some())
}

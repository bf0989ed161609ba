//! Existing volumes placed where their records put them: the config places regions by its
//! own rules (reserves sized from the members), which move a grown member's region start;
//! the records never do. [`load`] reads the config, then every member's superblock with
//! plain reads (as `nbraid check` does: no lock, nothing written), and — where a recorded
//! region start differs from the config's — checks the config's text again with the
//! recorded starts pinned ([`nbraid_config::Pins`]), and likewise where a recorded block size
//! differs from the config's (the volume is served with the recorded one). Every binary that
//! compares a config with records loads it this way.

use crate::preflight::{read_probe, read_probe_past_end};
use crate::{records, reshape_plan};
use nbraid_config::{format_size, Config, ConfigError, MemberStorage, Pins, RecordedPlace, Volume};
use nbraid_core::metadata::Probe;
use nbraid_core::metadata::METADATA_AREA_BYTES;
use nbraid_layout::Node;
use std::path::Path;

/// The config at `path`, existing volumes' regions where their records start them. The
/// file is read once ([`nbraid_config::read_text`]: bounded, a regular file only).
pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
    let path = path.as_ref();
    parse(&nbraid_config::read_text(path)?, path)
}

/// [`load`] of config `text` read from `path` (named in errors; relative member paths are
/// resolved against its directory). Reads the members' superblocks, not the config again.
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    // Existing volumes that fit their members under the rules they were created with may
    // not fit today's (a fixed size near the members' end, before the 8 MiB log default):
    // their records are then found through the older placement.
    let (config, today) = match nbraid_config::parse(text, path) {
        Ok(c) => (c, true),
        Err(e) => match nbraid_config::parse_pinned(text, path, &Pins::before_default_log()) {
            Ok(c) => (c, false),
            Err(_) => return short_sized(text, path).ok_or(e),
        },
    };
    let pins = recorded_starts(&config);
    if today && (pins.is_empty() || agrees(&config, &pins)) {
        return Ok(config);
    }
    nbraid_config::parse_pinned(text, path, &pins)
}

/// The config whose members include one holding less than its `size` (truncated, or
/// another disk at its path) that records keep bytes on: read once taking such members as
/// short to find their records, then pinned to them — a member no record needs stays
/// refused. `None` when it still does not read.
fn short_sized(text: &str, path: &Path) -> Option<Config> {
    let finding = nbraid_config::parse_pinned(text, path, &Pins::finding_short_members()).ok()?;
    nbraid_config::parse_pinned(text, path, &recorded_starts(&finding)).ok()
}

/// Every volume's recorded region starts, by position in its `members`, read from its
/// members' superblocks (volumes on files and devices; none recorded yet: not pinned), and
/// the end of what the records keep on each member (a spare that took a role too).
pub fn recorded_starts(config: &Config) -> Pins {
    let mut pins = Pins::new();
    for v in &config.volumes {
        if let Some((places, log, block_size)) = volume_places(config, v) {
            for (&m, place) in v.members.iter().zip(&places) {
                if let Some(end) = place.map(|p| kept_end(&p)) {
                    pins.pin_member_need(&config.members[m].id, end);
                }
            }
            for (m, end) in spare_needs(config, v) {
                pins.pin_member_need(&config.members[m].id, end);
            }
            pins.pin_recorded(&v.name, places, log);
            if let Some(b) = block_size {
                pins.pin_block_size(&v.name, b);
            }
        }
    }
    pins
}

/// What volume `v`'s records keep that the config does not decide.
type Recorded = (Vec<Option<RecordedPlace>>, Option<u64>, Option<u32>);

/// Volume `v`'s recorded places by position (region, and the member's own checksum area),
/// its log's recorded reserve and its recorded block size (`None`: records from before it).
fn volume_places(config: &Config, v: &Volume) -> Option<Recorded> {
    // Only the config's members, each read where it can be (a file or device; a member on
    // an NBD server or in memory reads as missing here): a remote spare does not keep the
    // volume's file members from being pinned.
    let probes: Vec<Probe> = (v.members.iter().map(|&m| &config.members[m]))
        .map(|m| match m.state {
            MemberStorage::Memory | MemberStorage::Remote => Probe::Missing,
            _ => read_probe(&m.path, &m.id),
        })
        .collect();
    let probes = &probes[..];
    let (tree, roles) = reshape_plan::recorded(&v.name, probes)?;
    let newest = records::newest_record(probes, &v.name)?;
    // Mid-reshape the config says the shape the volume moves into: the reshape's tree places
    // every role, the added members' too (the old tree has none of them), and its areas are
    // the ones the records hold.
    let tree = (newest.reshape.as_ref()).map_or(tree, |r| r.new_tree.clone());
    let log = (newest.ppl).and_then(|a| (a.offset >= METADATA_AREA_BYTES).then_some(a.len));
    let array = records::this_array(probes.iter(), &v.name);
    let regions = regions_by_position(&tree, &roles, v.members.len());
    let places = (regions.into_iter().zip(probes))
        .map(|(region, probe)| {
            let (start, len) = region?;
            // The member's own checksum area, when it holds this role's record.
            let own = records::record_of(probe, &v.name, array)
                .filter(|r| region_of_role(&tree, r.role as usize) == Some((start, len)));
            let checksum_area = own.and_then(|r| r.checksums).map(|a| (a.offset, a.len));
            Some(RecordedPlace {
                start,
                len,
                checksum_area,
            })
        })
        .collect();
    Some((places, log, newest.block_size))
}

/// The end of what a member's record keeps: its region, and a checksum area after it.
/// Pure.
fn kept_end(place: &RecordedPlace) -> u64 {
    let region_end = place.start + place.len;
    place
        .checksum_area
        .map_or(region_end, |(offset, len)| region_end.max(offset + len))
}

/// The spares of volume `v` that took one of its roles (their record says which), each
/// with the end of that role's recorded region: what the spare must hold. A spare's record
/// is read whatever its length (one truncated since reads as unusable otherwise: its region
/// past its end).
fn spare_needs(config: &Config, v: &Volume) -> Vec<(usize, u64)> {
    let probes: Vec<Probe> = (v.members.iter().chain(&v.heal.spares))
        .map(|&m| match config.members[m].state {
            MemberStorage::Memory | MemberStorage::Remote => Probe::Missing,
            _ => read_probe_past_end(&config.members[m].path, &config.members[m].id),
        })
        .collect();
    let Some(newest) = records::newest_record(&probes, &v.name) else {
        return Vec::new();
    };
    let tree = (newest.reshape.as_ref()).map_or(&newest.tree, |r| &r.new_tree);
    (v.heal.spares.iter().zip(&probes[v.members.len()..]))
        .filter_map(|(&m, probe)| {
            let role = records::record_of(probe, &v.name, Some(newest.array))?.role;
            let (start, len) = region_of_role(tree, role as usize)?;
            Some((m, start + len))
        })
        .collect()
}

/// Role `role`'s region (start, length) in `tree`.
fn region_of_role(tree: &Node, role: usize) -> Option<(u64, u64)> {
    let mut out = None;
    tree.visit_members(&mut |m| {
        if m.index == role {
            out = Some((m.start, m.len));
        }
    });
    out
}

/// Position `p`'s region (start, length) in the recorded `tree`: its member's role's
/// (`roles[p]`), or — a member the records do not know (failed, replaced, missing) — role
/// `p`'s, where create put it, unless a member the records know serves that role; `None`
/// past the recorded roles or where role `p` is taken (a member being added). Pure.
pub fn regions_by_position(
    tree: &Node,
    roles: &[Option<usize>],
    positions: usize,
) -> Vec<Option<(u64, u64)>> {
    let mut of_role = vec![None; tree.member_count()];
    tree.visit_members(&mut |m| {
        if let Some(s) = of_role.get_mut(m.index) {
            *s = Some((m.start, m.len));
        }
    });
    let served = |r: usize| roles.iter().flatten().any(|&x| x == r);
    (0..positions)
        .map(|p| {
            let role = match roles.get(p).copied().flatten() {
                Some(r) => r,
                None if !served(p) => p,
                None => return None,
            };
            of_role.get(role).copied().flatten()
        })
        .collect()
}

/// Every pinned start is where the config already puts it, every pinned log where the
/// config places it, and every pinned block size the config's.
fn agrees(config: &Config, pins: &Pins) -> bool {
    config.volumes.iter().all(|v| {
        let starts = pins.starts(&v.name).is_none_or(|starts| {
            (v.regions.iter().zip(starts)).all(|(r, s)| s.is_none_or(|s| s == r.start))
        });
        let log = (pins.log_reserve_bytes(&v.name))
            .is_none_or(|l| !v.metadata.ppl || l == v.metadata.ppl_log_bytes);
        let block_size = pins.block_size(&v.name).is_none_or(|b| b == v.block_size);
        starts && log && block_size
    }) && (config.members.iter()).all(|m| pins.member_need(&m.id).is_none_or(|n| n <= m.size))
}

/// The members of volume `v` that hold less than the region their records keep (`probes`
/// by position, the volume's members first): a file truncated, or another disk at its path.
/// A config that sizes the volume by its members (no `size`) then shrinks every region with
/// the shortest, and the engine's comparison names the first region that differs — not the
/// member that shrank; this names it, for the refusal. `None` when none is short.
pub fn shrunk_members(config: &Config, v: &Volume, probes: &[Probe]) -> Option<String> {
    let n = v.members.len().min(probes.len());
    let newest = records::newest_record(&probes[..n], &v.name)?;
    // By position, the role its own record gives it (a member whose superblock no longer
    // reads has none: it is placed where create put it, as the pins place it).
    let roles: Vec<Option<usize>> = (probes[..n].iter())
        .map(|p| records::record_of(p, &v.name, Some(newest.array)).map(|r| r.role as usize))
        .collect();
    let regions = regions_by_position(&newest.tree, &roles, n);
    let short: Vec<String> = (v.members.iter().zip(regions))
        .filter_map(|(&m, region)| {
            let (start, len) = region?;
            let member = &config.members[m];
            let end = start + len;
            (member.size < end).then(|| {
                format!(
                    "member {} ({}) holds {}, less than the end of the region its records keep ({})",
                    member.id,
                    member.path_text,
                    format_size(member.size),
                    format_size(end)
                )
            })
        })
        .collect();
    (!short.is_empty()).then(|| {
        format!(
            "{}: it was truncated, or another disk is at its path — give it back its length (or the disk) and start again",
            short.join("; ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_layout::{Level, Region, Shape};

    fn tree(starts: &[u64]) -> Node {
        let regions: Vec<Region> = starts
            .iter()
            .map(|&start| Region {
                start,
                len: 1 << 20,
            })
            .collect();
        Shape::new(
            Level::Raid5,
            regions.len(),
            None,
            64 << 10,
            Default::default(),
        )
        .unwrap()
        .build(&regions)
        .unwrap()
    }

    #[test]
    fn positions_take_their_roles_regions_then_their_own_index_then_none() {
        let t = tree(&[10 << 20, 20 << 20, 30 << 20]);
        let mib = 1u64 << 20;
        // Position 0 serves role 2, position 1 is unknown (role 1 is free: its region),
        // position 2 serves role 0, position 3 is being added.
        let got = regions_by_position(&t, &[Some(2), None, Some(0), None], 4);
        let at = |s: u64| Some((s << 20, mib));
        assert_eq!(got, vec![at(30), at(20), at(10), None]);
        // An unknown member at a position whose role another member serves: not pinned.
        let got = regions_by_position(&t, &[None, Some(0), Some(1), Some(2)], 4);
        assert_eq!(got, vec![None, at(10), at(20), at(30)]);
    }

    #[test]
    fn a_member_keeps_its_region_and_a_checksum_area_after_it() {
        let mib = 1u64 << 20;
        let place = |checksum_area| RecordedPlace {
            start: 2 * mib,
            len: 20 * mib,
            checksum_area,
        };
        assert_eq!(kept_end(&place(None)), 22 * mib);
        // An area before the region (its reserve) ends nothing later; one after it does.
        assert_eq!(kept_end(&place(Some((mib, mib)))), 22 * mib);
        assert_eq!(kept_end(&place(Some((22 * mib, mib)))), 23 * mib);
    }
}

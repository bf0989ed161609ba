//! Existing volumes placed where their records put them: the config places regions by its
//! own rules (reserves sized from the members), which move a grown member's region start;
//! the records never do. [`load`] reads the config, then every member's superblock with
//! plain reads (as `nbraid check` does: no lock, nothing written), and — where a recorded
//! region start differs from the config's — reads the config again with the recorded
//! starts pinned ([`nbraid_config::Pins`]). Every binary that compares a config with
//! records loads it this way.

use crate::preflight::probes_with_added;
use crate::{records, reshape_plan};
use nbraid_config::{Config, ConfigError, Pins, Volume};
use nbraid_core::metadata::METADATA_AREA_BYTES;
use nbraid_layout::Node;
use std::path::Path;

/// The config at `path`, existing volumes' regions where their records start them.
pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
    let path = path.as_ref();
    let config = nbraid_config::load(path)?;
    let pins = recorded_starts(&config);
    if pins.is_empty() || agrees(&config, &pins) {
        return Ok(config);
    }
    nbraid_config::load_pinned(path, &pins)
}

/// Every volume's recorded region starts, by position in its `members`, read from its
/// members' superblocks (volumes on files and devices; none recorded yet: not pinned).
pub fn recorded_starts(config: &Config) -> Pins {
    let mut pins = Pins::new();
    for v in &config.volumes {
        if let Some((starts, log)) = volume_starts(config, v) {
            pins.pin(&v.name, starts, log);
        }
    }
    pins
}

/// Volume `v`'s recorded starts by position and its log's recorded reserve.
fn volume_starts(config: &Config, v: &Volume) -> Option<(Vec<Option<u64>>, Option<u64>)> {
    let (probes, _) = probes_with_added(config, v)?;
    let probes = &probes[..v.members.len()];
    let (tree, roles) = reshape_plan::recorded(&v.name, probes)?;
    let newest = records::newest_record(probes, &v.name)?;
    let log = (newest.ppl).and_then(|a| (a.offset >= METADATA_AREA_BYTES).then_some(a.len));
    Some((starts_by_position(&tree, &roles, v.members.len()), log))
}

/// Position `p`'s region start in the recorded `tree`: its member's role's (`roles[p]`), or
/// — a member the records do not know (failed, replaced, missing) — role `p`'s, where
/// create put it; `None` past the recorded roles (a member being added). Pure.
pub fn starts_by_position(
    tree: &Node,
    roles: &[Option<usize>],
    positions: usize,
) -> Vec<Option<u64>> {
    let mut start_of_role = vec![None; tree.member_count()];
    tree.visit_members(&mut |m| {
        if let Some(s) = start_of_role.get_mut(m.index) {
            *s = Some(m.start);
        }
    });
    (0..positions)
        .map(|p| {
            let role = roles.get(p).copied().flatten().unwrap_or(p);
            start_of_role.get(role).copied().flatten()
        })
        .collect()
}

/// Every pinned start is where the config already puts it, and every pinned log where the
/// config places it.
fn agrees(config: &Config, pins: &Pins) -> bool {
    config.volumes.iter().all(|v| {
        let starts = pins.starts(&v.name).is_none_or(|starts| {
            (v.regions.iter().zip(starts)).all(|(r, s)| s.is_none_or(|s| s == r.start))
        });
        let log = (pins.log_reserve_bytes(&v.name))
            .is_none_or(|l| !v.metadata.ppl || l == v.metadata.ppl_log_bytes);
        starts && log
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
    fn positions_take_their_roles_starts_then_their_own_index_then_none() {
        let t = tree(&[10 << 20, 20 << 20, 30 << 20]);
        // Position 0 serves role 2, position 1 is unknown (role 1's start), position 3 is
        // being added.
        let got = starts_by_position(&t, &[Some(2), None, Some(0), None], 4);
        assert_eq!(
            got,
            vec![Some(30 << 20), Some(20 << 20), Some(10 << 20), None]
        );
    }
}

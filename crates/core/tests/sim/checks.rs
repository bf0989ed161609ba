//! The rules checked after a power loss: every flushed write reads back, but where the
//! write-hole promise excuses it (a sector being written, in a stripe a crash may have torn,
//! rebuilt from parity); and copies and parity agree (every view that loses up to two more
//! members reads the same bytes).

use super::array::{read_volume, sim_members};
use super::case::{CrashCase, CrashStats};
use super::executor::drive;
use super::history::History;
use nbraid_core::metadata::Array;
use nbraid_core::{CacheMode, Member, Volume, VolumeOptions};
use nbraid_layout::{Geometry, StripeId};
use nbraid_sim::scheduled::{World, SECTOR_BYTES};
use nbraid_sim::Rng;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

const SECTOR: u64 = SECTOR_BYTES as u64;

/// Stripes written by requests not guaranteed durable (only when members were lost: a
/// healthy array never rebuilds from parity).
pub fn write_hole_exposure(
    g: &Geometry,
    h: &History,
    failed: &[usize],
) -> Option<HashSet<StripeId>> {
    if failed.is_empty() {
        return None;
    }
    let mut out = HashSet::new();
    for o in h.unguaranteed_writes() {
        let m = g.map(o.offset, o.len).expect("in range");
        out.extend(m.data.iter().filter_map(|e| e.stripe));
    }
    Some(out)
}

/// Whether sector `s` must be rebuilt from parity (every copy on a failed member) in a stripe
/// that a crash may have left with stale parity.
pub fn in_write_hole(g: &Geometry, exposed: &HashSet<StripeId>, failed: &[usize], s: u64) -> bool {
    let m = g.map(s * SECTOR, SECTOR).expect("in range");
    m.data.iter().all(|e| failed.contains(&e.member))
        && m.data
            .iter()
            .any(|e| e.stripe.is_some_and(|id| exposed.contains(&id)))
}

/// Sectors some write not guaranteed durable covers (a crash may have torn them).
pub(super) fn being_written(h: &History) -> HashSet<u64> {
    h.unguaranteed_writes()
        .iter()
        .flat_map(|o| o.offset / SECTOR..(o.offset + o.len).div_ceil(SECTOR))
        .collect()
}

/// Sectors a read may get wrong with `lost` roles rebuilt from parity: being written at the
/// last power loss, in a stripe it may have torn (the write-hole promise).
pub(super) fn write_hole_excuse(
    g: &Geometry,
    history: &History,
    lost: &[usize],
    capacity: u64,
) -> HashSet<u64> {
    let Some(exposed) = write_hole_exposure(g, history, lost) else {
        return HashSet::new();
    };
    let busy = being_written(history);
    (0..capacity / SECTOR)
        .filter(|s| busy.contains(s) && in_write_hole(g, &exposed, lost, *s))
        .collect()
}

/// What a read-back after a reopen checked, by sector.
#[derive(Default)]
pub(super) struct ReadBack {
    /// Sectors checked against the history.
    pub checked: u64,
    /// Sectors in the write hole left unchecked (excused).
    pub write_hole: u64,
    /// Sectors in the write hole checked all the same (not being written).
    pub write_hole_checked: u64,
    /// The sectors excused.
    pub excused: HashSet<u64>,
}

/// Every flushed write reads back from `image` after a reopen that rebuilds `rebuilt` roles
/// from parity; in the stripes a crash may have torn, a sector being written may read old
/// or new (md's PPL promise), and with `hole_unchecked` (no log, not strict) no sector there
/// is checked. `what` goes into the error.
pub(super) fn check_read_back(
    g: &Geometry,
    history: &History,
    image: &[u8],
    rebuilt: &[usize],
    hole_unchecked: bool,
    what: &str,
) -> Result<ReadBack, String> {
    let exposed = write_hole_exposure(g, history, rebuilt);
    let busy = being_written(history);
    let mut out = ReadBack::default();
    for (s, sector) in image.chunks(SECTOR_BYTES).enumerate() {
        let s = s as u64;
        if exposed
            .as_ref()
            .is_some_and(|e| in_write_hole(g, e, rebuilt, s))
        {
            if hole_unchecked || busy.contains(&s) {
                out.write_hole += 1;
                out.excused.insert(s);
                continue;
            }
            out.write_hole_checked += 1;
        }
        history
            .check_durable(s, sector)
            .map_err(|e| format!("{e} ({what}) at {:?}", g.map(s * SECTOR, SECTOR)))?;
        out.checked += 1;
    }
    Ok(out)
}

/// Sectors whose bytes no flushed write explains.
pub(super) fn unreadable(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    array: &Arc<Array>,
    history: &History,
) -> Result<HashSet<u64>, String> {
    let image = read_volume(world, rng, array)?;
    Ok(image
        .chunks(SECTOR_BYTES)
        .enumerate()
        .filter(|(s, sector)| history.check_durable(*s as u64, sector).is_err())
        .map(|(s, _)| s as u64)
        .collect())
}

/// Every flushed write reads back, but in the `excused` sectors.
pub(super) fn check_durable(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    array: &Arc<Array>,
    history: &History,
    stats: &mut CrashStats,
    excused: &HashSet<u64>,
    when: &str,
) -> Result<(), String> {
    let image = read_volume(world, rng, array)?;
    for (s, sector) in image.chunks(SECTOR_BYTES).enumerate() {
        if excused.contains(&(s as u64)) {
            continue;
        }
        history
            .check_durable(s as u64, sector)
            .map_err(|e| format!("{e} ({when})"))?;
        stats.sectors_checked += 1;
    }
    Ok(())
}

/// Every view of the members in `role_disks` that loses up to two more members than
/// `not_current` (within tolerance) reads the same bytes: copies and parity agree. Returns
/// the views checked; `what` goes into the error.
pub(super) fn redundancy_agrees(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    case: &CrashCase,
    role_disks: &[usize],
    not_current: &[usize],
    history: &History,
    what: &str,
) -> Result<u64, String> {
    let g = Geometry::from_tree(case.tree.clone());
    let n = case.members;
    let mut views_checked = 0;
    let others: Vec<usize> = (0..n).filter(|m| !not_current.contains(m)).collect();
    let mut views = Vec::new();
    for (i, &a) in others.iter().enumerate() {
        views.push(vec![a]);
        for &b in &others[i + 1..] {
            views.push(vec![a, b]);
        }
    }
    let baseline = read_view(world, rng, &g, case, role_disks, not_current)?;
    for v in views {
        let lost = [not_current.to_vec(), v].concat();
        if !g.survives(&lost) {
            continue;
        }
        let got = read_view(world, rng, &g, case, role_disks, &lost)?;
        if let Some(at) = (0..got.len()).find(|&i| got[i] != baseline[i]) {
            let disagree = disagreement(history, &got, &baseline, at, &lost, not_current);
            return Err(format!("{disagree} ({what})"));
        }
        views_checked += 1;
    }
    Ok(views_checked)
}

/// The error for views that read different bytes at `at`: the writers each saw and the ops
/// over the byte.
fn disagreement(
    history: &History,
    got: &[u8],
    baseline: &[u8],
    at: usize,
    lost: &[usize],
    not_current: &[usize],
) -> String {
    let s = at / SECTOR_BYTES * SECTOR_BYTES;
    let id = |b: &[u8]| u64::from_le_bytes(b[s..s + 8].try_into().expect("8"));
    let ops: Vec<String> = history
        .ops
        .iter()
        .enumerate()
        .filter(|(_, o)| o.offset <= at as u64 && (at as u64) < o.offset + o.len)
        .map(|(i, o)| format!("{i}:{o:?}"))
        .collect();
    format!(
        "writer ids seen {} vs {}; ops over the byte: {ops:?}; after the resync, the volume read without members {lost:?} differs at byte {at} from the read without {not_current:?}: copies or parity disagree",
        id(got),
        id(baseline)
    )
}

/// The volume's bytes as a plain volume over the same images reads them with `lost` failed.
fn read_view(
    world: &Arc<Mutex<World>>,
    rng: &mut Rng,
    g: &Geometry,
    case: &CrashCase,
    role_disks: &[usize],
    lost: &[usize],
) -> Result<Vec<u8>, String> {
    let disks = sim_members(
        world,
        role_disks
            .len()
            .max(*role_disks.iter().max().unwrap_or(&0) + 1),
        case.member_len,
    );
    let members: Vec<Arc<dyn Member>> = role_disks.iter().map(|&d| disks[d].clone()).collect();
    debug_assert_eq!(members.len(), case.members);
    let opts = VolumeOptions {
        members_known_zero: true, // read-only view: parity taken as written
        cache: CacheMode::WriteThrough,
        ..VolumeOptions::default()
    };
    let vol = Arc::new(Volume::new(g.clone(), members, opts).map_err(|e| e.to_string())?);
    for &m in lost {
        vol.fail_member(m, "view");
    }
    drive(world, rng, async move {
        let capacity = vol.capacity();
        let mut out = Vec::with_capacity(capacity as usize);
        let piece = 16 * 1024;
        let mut at = 0;
        while at < capacity {
            let b = vol
                .read(at, piece.min(capacity - at))
                .await
                .map_err(|e| format!("view read: {e}"))?;
            out.extend_from_slice(&b);
            at += piece;
        }
        Ok(out)
    })?
}

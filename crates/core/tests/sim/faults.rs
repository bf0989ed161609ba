//! The faults a schedule injects into its members: which members may fail (a set the tree
//! survives) and how each of them fails.

use super::array::disk_of;
use nbraid_core::metadata::Array;
use nbraid_layout::Geometry;
use nbraid_sim::scheduled::{DiskFaults, World};
use nbraid_sim::Rng;
use std::sync::{Arc, Mutex};

/// Members that may fail in this schedule: a random set the geometry survives.
pub fn choose_failures(rng: &mut Rng, g: &Geometry, n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut set = Vec::new();
    for m in order {
        if rng.chance(400) {
            set.push(m);
            if !g.survives(&set) {
                set.pop();
            }
        }
    }
    set
}

/// How a failing member fails over a schedule of `steps`: it dies at a random step (7 times
/// in 10), returns transient read errors (half the time) and flush errors (3 in 10).
pub fn draw_faults(rng: &mut Rng, steps: u64) -> DiskFaults {
    DiskFaults {
        dies_at_step: rng.chance(700).then(|| rng.below(steps)),
        read_error_per_mille: if rng.chance(500) { rng.below(60) } else { 0 },
        flush_error_per_mille: if rng.chance(300) { rng.below(100) } else { 0 },
    }
}

/// During a pass over a reopened array (a resync, a scrub), one more of its `members` may die
/// within 60 steps (3 times in 10) if the tree survives that with the `lost` roles; the
/// role that dies.
pub(super) fn one_more_death(
    rng: &mut Rng,
    world: &Arc<Mutex<World>>,
    array: &Array,
    (g, members): (&Geometry, usize),
    lost: &[usize],
) -> Option<usize> {
    if !rng.chance(300) {
        return None;
    }
    let m = (0..members)
        .find(|&m| !lost.contains(&m) && g.survives(&[lost.to_vec(), vec![m]].concat()))?;
    world.lock().expect("world").disks[disk_of(array, m)].faults = DiskFaults {
        dies_at_step: Some(rng.below(60)),
        ..DiskFaults::default()
    };
    Some(m)
}

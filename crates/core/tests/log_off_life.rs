//! A life with the write-hole log switched off leaves no batch of an earlier life to be
//! replayed. A logged run crashes mid-write (its ring keeps the entry); the next start has
//! `write_hole = "off"` and rewrites a chunk that entry's partial parity covers; that run
//! crashes too with nothing in flight; the start after it has the log on again and that
//! chunk's member missing. Replaying the first life's entry would rebuild the chunk from its
//! old partial parity — the bytes from before the log-off run's write. Every open that
//! finds log rings marks them with its life, logging or not, so none of it is replayed.

mod common;

use common::write_hole::{self, create_filled, lossy_disks, metas_without, pattern};
use common::{Lossy, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{Array, ArrayOptions, METADATA_AREA_BYTES};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const REGION: u64 = 2 * MIB;
const STRIP: u64 = 64 * KIB;

fn opts(ppl: bool) -> ArrayOptions {
    write_hole::opts(ppl, None)
}

/// A dirty start; with members `lost`, forced (after a life that did not log such a start
/// is refused unless forced: `unlogged_life.rs`).
fn open(t: &Node, disks: &[Arc<Lossy>], lost: &[usize], ppl: bool) -> Array {
    let o = ArrayOptions {
        force_assembly: !lost.is_empty(),
        ..opts(ppl)
    };
    let (a, report) = block_on(Array::open(
        "vol",
        t,
        metas_without(disks, lost),
        o,
        &|_, _| {},
    ))
    .expect("the dirty start");
    assert!(!report.was_clean, "{report:?}");
    a
}

#[test]
fn a_log_off_life_leaves_no_earlier_entry_to_replay() {
    for level in [Level::Raid5, Level::Raid6] {
        let n = 5;
        let disks = lossy_disks(n, METADATA_AREA_BYTES + REGION);
        let shape = Shape::new(level, n, None, STRIP, ParityLayout::LeftSymmetric).unwrap();
        let regions = vec![
            Region {
                start: METADATA_AREA_BYTES,
                len: REGION
            };
            n
        ];
        let t = shape.build(&regions).unwrap();
        let (a, capacity) = create_filled(&t, &disks, opts(true));
        let mut image = pattern(1, capacity as usize).to_vec();

        // Life 1, logged: 4 KiB into data chunk 0 of stripe 3, its parity writes lost.
        let (g, _) = nbraid_core::ppl::parity_groups(&t).remove(0);
        let stripe = 3u64;
        let roles = g.roles(stripe);
        let width = g.stripe_width();
        for m in std::iter::once(roles.p).chain(roles.q) {
            disks[m].lose.store(true, Ordering::SeqCst);
        }
        let at = (stripe * width + 8 * KIB) as usize;
        image[at..at + 4096].copy_from_slice(&pattern(9, 4096));
        block_on(a.write(at as u64, pattern(9, 4096), false)).expect("partial write");
        drop(a);
        for d in &disks {
            d.lose.store(false, Ordering::SeqCst);
        }

        // Life 2, the log off, every member there: data chunk 1 of that stripe rewritten
        // whole, then a crash with nothing in flight.
        let a = open(&t, &disks, &[], false);
        let chunk1 = (stripe * width + STRIP) as usize;
        image[chunk1..chunk1 + STRIP as usize].copy_from_slice(&pattern(5, STRIP as usize));
        block_on(a.write(chunk1 as u64, pattern(5, STRIP as usize), false)).expect("write");
        block_on(a.flush()).expect("flush");
        drop(a);

        // Life 3, logged again, chunk 1's member lost (forced: life 2 did not log): it is
        // rebuilt from parity that agrees with life 2's writes, not from life 1's partial
        // parity.
        let a = open(&t, &disks, &[roles.data[1]], true);
        let got = block_on(a.read(0, capacity)).expect("read back");
        let wrong = (0..capacity as usize)
            .step_by(4096)
            .filter(|&b| got[b..b + 4096] != image[b..b + 4096])
            .count();
        assert_eq!(wrong, 0, "{level:?}: 4 KiB blocks read back wrong");
    }
}

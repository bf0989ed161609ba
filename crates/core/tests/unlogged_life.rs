//! A dirty stop in a life that did not log, then a start that logs. A volume runs with
//! `write_hole = "off"` and crashes in the middle of a partial-stripe write (the data lands,
//! the parity does not, nothing is logged); the next start has the log on. Its rings hold
//! only the unlogged life's marker, so no replay makes that stripe's parity right: the start
//! must treat the crash as an unlogged one — a role out refused unless forced
//! (`AssembleError::DirtyDegradedUnlogged`), and the resync done before serving, never left
//! to a background pass while a member lost meanwhile is rebuilt from the torn parity.
//! RAID 5 and RAID 6, with and without the write-intent bitmap.

mod common;

use common::write_hole::{self, create_filled, lossy_disks, metas_without, pattern};
use common::{Lossy, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{Array, ArrayOptions, OpenReport, METADATA_AREA_BYTES};
use nbraid_core::ScrubControl;
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape, StripeRoles};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const REGION: u64 = 2 * MIB;
const STRIP: u64 = 64 * KIB;
const MEMBERS: usize = 5;
/// The stripe the torn write goes to.
const STRIPE: u64 = 3;

fn opts(ppl: bool, bitmap: bool) -> ArrayOptions {
    ArrayOptions {
        bitmap_chunk_bytes: bitmap.then_some(256 * KIB),
        ..write_hole::opts(ppl, None)
    }
}

/// How the start after the unlogged crash opens.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Start {
    /// `Array::open`: the resync before serving.
    Foreground,
    /// `Array::open_background`: serving at once where the volume may.
    Background,
}

/// The volume after a crash in a life with the log off: the disks, the tree, what every
/// byte should read (the 4 KiB being written at the crash, bytes `at..at + 4096`, may read
/// as before or as written, sector by sector), the stripe's roles.
struct Torn {
    disks: Vec<Arc<Lossy>>,
    t: Node,
    image: Vec<u8>,
    old: Vec<u8>,
    at: usize,
    roles: StripeRoles,
    bitmap: bool,
}

/// A volume of `level` over [`MEMBERS`] lossy disks, created and filled with the log on:
/// the disks, its tree and what every byte reads.
fn created(level: Level, bitmap: bool) -> (Vec<Arc<Lossy>>, Node, Vec<u8>) {
    let disks = lossy_disks(MEMBERS, METADATA_AREA_BYTES + REGION);
    let shape = Shape::new(level, MEMBERS, None, STRIP, ParityLayout::LeftSymmetric).unwrap();
    let region = Region {
        start: METADATA_AREA_BYTES,
        len: REGION,
    };
    let t = shape.build(&[region; MEMBERS]).unwrap();
    let (a, capacity) = create_filled(&t, &disks, opts(true, bitmap));
    drop(a);
    (disks, t, pattern(1, capacity as usize).to_vec())
}

/// Created and filled with the log on; then a life with the log off writes 4 KiB into data
/// chunk 0 of stripe [`STRIPE`] and crashes with the parity members' writes lost.
fn torn_in_an_unlogged_life(level: Level, bitmap: bool) -> Torn {
    let (disks, t, mut image) = created(level, bitmap);

    let a = block_on(Array::open(
        "vol",
        &t,
        metas_without(&disks, &[]),
        opts(false, bitmap),
        &|_, _| {},
    ))
    .expect("the life with the log off starts")
    .0;
    let (g, _) = nbraid_core::ppl::parity_groups(&t).remove(0);
    let roles = g.roles(STRIPE);
    for m in std::iter::once(roles.p).chain(roles.q) {
        disks[m].lose.store(true, Ordering::SeqCst);
    }
    let at = (STRIPE * g.stripe_width() + 8 * KIB) as usize;
    let old = image[at..at + 4096].to_vec();
    image[at..at + 4096].copy_from_slice(&pattern(9, 4096));
    block_on(a.write(at as u64, pattern(9, 4096), false)).expect("partial write");
    drop(a); // power lost: the parity writes never reached their members
    for d in &disks {
        d.lose.store(false, Ordering::SeqCst);
    }
    Torn {
        disks,
        t,
        image,
        old,
        at,
        roles,
        bitmap,
    }
}

impl Torn {
    /// Opens with the log on, the members in `lost` missing.
    fn open(&self, how: Start, lost: &[usize], force: bool) -> Result<(Array, OpenReport), String> {
        let o = ArrayOptions {
            force_assembly: force,
            ..opts(true, self.bitmap)
        };
        let metas = metas_without(&self.disks, lost);
        match how {
            Start::Foreground => block_on(Array::open("vol", &self.t, metas, o, &|_, _| {})),
            Start::Background => {
                block_on(Array::open_background("vol", &self.t, metas, o, &|_, _| {}))
            }
        }
        .map_err(|e| e.to_string())
    }

    /// How many 4 KiB blocks read back wrong (the block being written: a sector neither
    /// as before nor as written).
    fn wrong_blocks(&self, a: &Array) -> usize {
        let got = block_on(a.read(0, self.image.len() as u64)).expect("read back");
        let written = self.at..self.at + 4096;
        let torn_ok = (0..4096).step_by(512).all(|s| {
            let g = &got[self.at + s..self.at + s + 512];
            g == &self.old[s..s + 512] || g == &self.image[self.at + s..self.at + s + 512]
        });
        (0..self.image.len())
            .step_by(4096)
            .filter(|&b| match written.contains(&b) {
                true => !torn_ok,
                false => got[b..b + 4096] != self.image[b..b + 4096],
            })
            .count()
    }

    /// Fails the member of data chunk 1 (not being written at the crash) and counts the
    /// blocks read back wrong: its chunk is rebuilt from the stripe's parity.
    fn wrong_after_losing_chunk_1(&self, a: &Array) -> usize {
        let m = self.roles.data[1];
        a.volume()
            .fail_member(m, "the test loses a member nobody was writing");
        self.wrong_blocks(a)
    }
}

fn cases() -> Vec<(Level, bool)> {
    let levels = [Level::Raid5, Level::Raid6];
    levels
        .into_iter()
        .flat_map(|l| [(l, true), (l, false)])
        .collect()
}

/// A dirty degraded start with the log on after the unlogged crash: refused unless forced,
/// as with the log off (the log replays nothing of that life).
#[test]
fn a_dirty_degraded_start_after_an_unlogged_life_is_refused_unless_forced() {
    for (level, bitmap) in cases() {
        let torn = torn_in_an_unlogged_life(level, bitmap);
        let lost = [torn.roles.data[1]];
        for how in [Start::Foreground, Start::Background] {
            let refused = torn.open(how, &lost, false).err().unwrap_or_default();
            assert!(
                refused.contains("not shut down clean") && refused.contains("did not log"),
                "{level:?}, bitmap {bitmap}, {how:?}: {refused}"
            );
        }
        let (a, report) = torn.open(Start::Foreground, &lost, true).expect("forced");
        assert!(!report.was_clean, "{report:?}");
        drop(a);
    }
}

/// A whole start with the log on after the unlogged crash resyncs before serving (in the
/// background too): parity agrees with the data, and a member lost afterwards reads back.
#[test]
fn a_whole_start_after_an_unlogged_life_resyncs_before_serving() {
    for (level, bitmap) in cases() {
        for how in [Start::Foreground, Start::Background] {
            let torn = torn_in_an_unlogged_life(level, bitmap);
            let (a, report) = torn.open(how, &[], false).expect("a whole start");
            let what = format!("{level:?}, bitmap {bitmap}, {how:?}: {report:?}");
            // What a client sees first: parity agrees with the data (a scrub's view), and
            // a member lost now is rebuilt right from it.
            let scrub = block_on(a.scrub(&ScrubControl::new(false, 0))).expect("scrub");
            let wrong = torn.wrong_after_losing_chunk_1(&a);
            assert_eq!(
                (scrub.mismatches, wrong),
                (0, 0),
                "mismatches, wrong blocks: {what}"
            );
            assert!(!report.was_clean, "{what}");
            assert_eq!(report.background_bytes, 0, "{what}");
            assert!(report.resynced_bytes > 0, "{what}");
        }
    }
}

/// Once that start's resync is done its rings say it logs: its own crash mid-write is the
/// log's to close, so a dirty degraded start after it runs and reads back exactly.
#[test]
fn after_the_resync_a_crash_is_the_logs_again() {
    for (level, bitmap) in cases() {
        let mut torn = torn_in_an_unlogged_life(level, bitmap);
        let (a, _) = torn
            .open(Start::Foreground, &[], false)
            .expect("a whole start");
        // A logged partial write into the same 4 KiB, its parity writes lost.
        for m in std::iter::once(torn.roles.p).chain(torn.roles.q) {
            torn.disks[m].lose.store(true, Ordering::SeqCst);
        }
        let at = torn.at;
        torn.old = torn.image[at..at + 4096].to_vec();
        torn.image[at..at + 4096].copy_from_slice(&pattern(11, 4096));
        block_on(a.write(at as u64, pattern(11, 4096), false)).expect("partial write");
        drop(a);
        for d in &torn.disks {
            d.lose.store(false, Ordering::SeqCst);
        }
        let lost = [torn.roles.data[1]];
        let what = format!("{level:?}, bitmap {bitmap}");
        let (a, report) =
            (torn.open(Start::Foreground, &lost, false)).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(report.ppl.entries > 0, "{what}: {report:?}");
        assert_eq!(torn.wrong_blocks(&a), 0, "{what}");
    }
}

/// A quiet handover is no crash: a life that did not log (a reshape's, or the log off) whose
/// writes all completed and were flushed, stopped without its clean record (the daemon's
/// reopen after a reshape, when a resync or the checksums' refill is still pending), opens
/// again degraded with `quiet_handover` and reads back exactly — where the same open judged
/// as after a crash refuses it (`DirtyDegradedUnlogged`), which left the volume unserved
/// ("opening it again failed: restart nbraidd").
#[test]
fn a_quiet_handover_after_an_unlogged_life_opens_degraded() {
    for (level, bitmap) in cases() {
        let what = format!("{level:?}, bitmap {bitmap}");
        let (disks, t, mut image) = created(level, bitmap);
        let capacity = image.len() as u64;
        let metas = metas_without(&disks, &[]);
        let a = block_on(Array::open(
            "vol",
            &t,
            metas,
            opts(false, bitmap),
            &|_, _| {},
        ))
        .expect("the life with the log off starts")
        .0;
        let at = 3 * STRIP as usize + 8 * KIB as usize;
        image[at..at + 4096].copy_from_slice(&pattern(9, 4096));
        block_on(a.write(at as u64, pattern(9, 4096), false)).expect("partial write");
        block_on(a.flush()).expect("flush");
        drop(a); // stopped quiet, never recorded clean
        let lost = [1];
        let open = |quiet_handover: bool| {
            let o = ArrayOptions {
                quiet_handover,
                ..opts(true, bitmap)
            };
            let metas = metas_without(&disks, &lost);
            block_on(Array::open_background("vol", &t, metas, o, &|_, _| {}))
        };
        let refused = open(false).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(refused.contains("did not log"), "{what}: {refused}");
        let (a, report) = open(true).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(!report.was_clean, "{what}: {report:?}");
        let got = block_on(a.read(0, capacity)).expect("read back");
        assert!(got[..] == image[..], "{what}: every byte as written");
    }
}

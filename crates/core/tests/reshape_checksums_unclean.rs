//! Per-block checksums across a reshape whose two trees give a member regions of different
//! lengths at one start, over one checksum area: a member added smaller than the old ones
//! (the new regions shorter), or old members with room the new shape uses (longer). Each
//! tree's leaves once opened their own checksums of the region — their own header and entry
//! cache over the one area — so each header write dropped the bits the other tree had
//! marked, and each page written back dropped the entries the other had changed. After a
//! crash the old regions' tail past the new regions' end (its bits never in the new tree's
//! header) was trusted with entries older than its data: the restart found whole stripes
//! "bad" and the volume would not start ("lost children … checksum mismatch"). Now both
//! trees share one header and cache per member, sized for the longer region.
//!
//! Per move and strip: a volume of the old shape filled, the reshape cut about half-way,
//! then writes through both trees (the old tree's last stripe, the new tree's first); then
//! either a crash (nothing flushed) or a clean shutdown, the restart, the reshape finished.
//! Every byte must read back and no block may read as a checksum mismatch.

mod common;

use common::arrays::{create_first, metas, open_every, seeded, write_clean};
use common::{KIB, MIB};
use futures::executor::block_on;
use futures::future::join;
use nbraid_core::metadata::disk_rule::Consent;
use nbraid_core::metadata::{Array, ArrayOptions, METADATA_AREA_BYTES};
use nbraid_core::{Buf, MemoryMember, PassControl, PassState, VolumeOptions};
use nbraid_layout::{Level, Node};
use nbraid_sim::Rng;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Room for the checksum area before each region (a 6 MiB region's needs 16 KiB).
const SUM_RESERVE: u64 = 64 * KIB;
const REGION_START: u64 = METADATA_AREA_BYTES + SUM_RESERVE;
/// Free bytes after each member's region: the reshape's backup goes there.
const BACKUP_ROOM: u64 = 8 * MIB;

type Disk = Arc<MemoryMember>;

/// A reshape: the old shape (level, members, region length), the new one, the strip.
struct Move {
    name: &'static str,
    old: (Level, usize, u64),
    new: (Level, usize, u64),
}

impl Move {
    fn tree(&self, (level, members, len): (Level, usize, u64), strip: u64) -> Node {
        common::level_tree(level, members, strip, REGION_START, len)
    }

    /// Each member's bytes: the old ones hold the longer of their two regions, the added
    /// ones their new region (smaller members, when the new regions are shorter); each with
    /// room after it for the reshape's backup of 1 MiB strips.
    fn member_bytes(&self, i: usize) -> u64 {
        let (old, new) = (self.old.2, self.new.2);
        REGION_START + BACKUP_ROOM + if i < self.old.1 { old.max(new) } else { new }
    }
}

const MOVES: [Move; 4] = [
    Move {
        name: "raid5 3→4, the added member smaller",
        old: (Level::Raid5, 3, 6 * MIB),
        new: (Level::Raid5, 4, 4 * MIB),
    },
    Move {
        name: "raid6 4→6, the added members smaller",
        old: (Level::Raid6, 4, 6 * MIB),
        new: (Level::Raid6, 6, 3 * MIB),
    },
    Move {
        name: "raid5 3→4, the new regions longer",
        old: (Level::Raid5, 3, 4 * MIB),
        new: (Level::Raid5, 4, 6 * MIB),
    },
    Move {
        name: "raid5 4→raid6 5, the new regions longer",
        old: (Level::Raid5, 4, 4 * MIB),
        new: (Level::Raid6, 5, 6 * MIB),
    },
];

const STRIPS: [u64; 3] = [4 * KIB, 64 * KIB, MIB];

fn opts() -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions::default(),
        bitmap_chunk_bytes: Some(64 * KIB),
        ppl: false,
        bitmap_clear_delay: Duration::ZERO,
        checksum_area_before_region_bytes: Some(SUM_RESERVE),
        ..ArrayOptions::default()
    }
}

fn open(config: &Node, disks: &[Disk]) -> Result<(Array, bool), String> {
    open_every(config, disks, opts()).map(|(a, report)| (a, report.was_clean))
}

/// Checksum mismatches counted on every member.
fn mismatches(a: &Array) -> u64 {
    let Some(setup) = a.volume().options().checksums.as_ref() else {
        return 0;
    };
    (0..a.volume().member_count())
        .filter_map(|i| setup.counters(i))
        .map(|c| c.errors.load(Ordering::Relaxed))
        .sum()
}

fn same(a: &Array, want: &[u8], when: &str) -> Result<(), String> {
    let back = block_on(a.read(0, want.len() as u64)).map_err(|e| format!("{when}: {e}"))?;
    if let Some(at) = back.iter().zip(want).position(|(x, y)| x != y) {
        return Err(format!("{when}: byte {at} differs"));
    }
    match mismatches(a) {
        0 => Ok(()),
        n => Err(format!("{when}: {n} checksum mismatches")),
    }
}

/// Writes `len` seeded bytes at `at` through the array and into `want`; `fua`: durable when
/// acknowledged (its checksums are not), as a client's before a crash.
fn write(
    a: &Array,
    (at, len): (u64, u64),
    fua: bool,
    rng: &mut Rng,
    want: &mut [u8],
) -> Result<(), String> {
    let data = seeded(rng, len);
    block_on(a.write(at, Buf::copy_from(&data), fua)).map_err(|e| format!("write at {at}: {e}"))?;
    want[at as usize..(at + len) as usize].copy_from_slice(&data);
    Ok(())
}

/// One move at one strip: filled, cut half-way, written through both trees, then a crash
/// (`crash`) or a clean shutdown, the restart and the finish.
fn run(m: &Move, strip: u64, crash: bool) -> Result<(), String> {
    let (old, new) = (m.tree(m.old, strip), m.tree(m.new, strip));
    let disks: Vec<Disk> = (0..m.new.1)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), m.member_bytes(i))))
        .collect();
    let n_old = m.old.1;
    let created = create_first(&old, &disks, opts(), true)?;
    let cap = created.volume().capacity();
    let mut rng = Rng::new(strip);
    let mut want = seeded(&mut rng, cap);
    write_clean(&created, &want)?;
    let added = metas(&disks[n_old..]);
    block_on(created.start_reshape(new.clone(), added, &Consent::default()))
        .map_err(|e| format!("start: {e}"))?;
    drop(created);
    let (a, _) = open(&new, &disks)?;
    a.set_reshape_window_bytes(1);
    let ctl = PassControl::new(cap);
    block_on(join(a.reshape(&ctl), async {
        while ctl.position_bytes() < cap / 2 {
            nbraid_core::timer::sleep(Duration::from_millis(1)).await;
        }
        ctl.cancel();
    }))
    .0
    .map_err(|e| format!("the pass: {e}"))?;
    // The old tree's last stripe (the end of the old regions: past the new regions' end when
    // they are shorter), the new tree's first, then the old tree's again.
    let old_stripe = strip * (m.old.1 as u64 - parity_members(m.old.0));
    let new_stripe = strip * (m.new.1 as u64 - parity_members(m.new.0));
    // Before a clean shutdown plain writes (the flush makes them durable): the entry pages
    // both trees cache are written back then.
    for at in [
        (cap - old_stripe, old_stripe),
        (0, new_stripe),
        (cap - 2 * old_stripe, old_stripe),
    ] {
        write(&a, at, crash, &mut rng, &mut want)?;
    }
    same(&a, &want, "before the restart")?;
    if !crash {
        block_on(async {
            a.flush().await?;
            a.mark_clean().await.map(|_| ())
        })
        .map_err(|e| format!("clean shutdown: {e}"))?;
    }
    drop(a);
    let (a, clean) = open(&new, &disks).map_err(|e| format!("restart: {e}"))?;
    assert_eq!(clean, !crash, "{}: the restart's kind", m.name);
    let position = a.reshape_progress().map_or(cap, |p| p.0);
    same(&a, &want, "after the restart")?;
    let state = block_on(a.reshape(&PassControl::resume_at(0, position)))
        .map_err(|e| format!("finishing: {e}"))?;
    assert_eq!(state, PassState::Done);
    same(&a, &want, "at the end")?;
    block_on(a.mark_clean()).map_err(|e| format!("clean: {e}"))?;
    drop(a);
    let (a, _) = open(&new, &disks)?;
    same(&a, &want, "in the new shape alone")
}

fn parity_members(level: Level) -> u64 {
    match level {
        Level::Raid6 => 2,
        _ => 1,
    }
}

fn every_move(crash: bool) {
    let mut failures = Vec::new();
    for strip in STRIPS {
        for m in &MOVES {
            if let Err(e) = run(m, strip, crash) {
                failures.push(format!("{}, strip {} KiB: {e}", m.name, strip / KIB));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn a_crash_mid_reshape_over_regions_of_two_lengths_trusts_no_stale_checksum() {
    every_move(true);
}

#[test]
fn a_clean_restart_mid_reshape_over_regions_of_two_lengths_finds_every_checksum_right() {
    every_move(false);
}

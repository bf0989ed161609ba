//! Reshapes of arrays with big strips (128 KiB, 256 KiB, 1 MiB), whose windows back up more
//! rows than the 256 KiB backup area of a member's metadata area holds: a larger own area
//! where the metadata area has the room, else the pool on the added member
//! (`metadata/reshape_backup.rs`) — in the tail of its region for a growth (RAID 5 3→4),
//! after its region for RAID 5 → 6, whose every window is backed up.
//!
//! Per seed, as `reshape_array.rs`: the old shape filled, the reshape started, the power
//! lost at a random instant of the pass (crash-simulator members: unflushed writes lost, a
//! seeded subset kept, torn sectors), the array opened again — the recorded backup written
//! back — and finished; every acknowledged byte reads back after the restart, at the end,
//! and in the new shape alone. And a RAID 5 → 6 with no room for its pool is refused at the
//! start, naming the member and the bytes missing. `NBRAID_SEED=<n>` replays one seed.

mod common;

use common::arrays::{create_first, metas, open_every, seeded, write_clean};
use common::{KIB, MIB};
use futures::executor::block_on;
use futures::future::{select, Either};
use nbraid_core::metadata::disk_rule::Consent;
use nbraid_core::metadata::{Array, ArrayOptions, METADATA_AREA_BYTES};
use nbraid_core::{Buf, MemoryMember, PassControl, PassState, VolumeOptions};
use nbraid_layout::{Level, Node, ParityLayout, Region, Reshape, Shape};
use nbraid_sim::{Faulty, Rng};
use std::sync::Arc;
use std::time::Duration;

/// Requests the test makes at most (below the engine's limit per request).
const PIECE_BYTES: usize = 8 << 20;

type Disk = Arc<Faulty<MemoryMember>>;

/// A move over regions of `rows` strips, and each member's size.
struct Move {
    name: String,
    old: Node,
    new: Node,
    member_bytes: Vec<u64>,
}

fn tree(level: Level, members: usize, strip: u64, region: u64) -> Node {
    Shape::new(level, members, None, strip, ParityLayout::default())
        .unwrap()
        .build(&vec![
            Region {
                start: METADATA_AREA_BYTES,
                len: region
            };
            members
        ])
        .unwrap()
}

/// RAID 5 3→4 (equal members: the pool goes in the added member's region tail where the
/// metadata areas are too small) and RAID 5 of 4 → RAID 6 of 5 (the added member `extra`
/// bytes longer: room for a pool after its region).
fn moves(strip: u64) -> Vec<Move> {
    let region = 12 * strip;
    let member = METADATA_AREA_BYTES + region;
    let pool_room = 4 * (strip + 4 * KIB);
    vec![
        Move {
            name: format!("raid5 3→4, strip {} KiB", strip / KIB),
            old: tree(Level::Raid5, 3, strip, region),
            new: tree(Level::Raid5, 4, strip, region),
            member_bytes: vec![member; 4],
        },
        Move {
            name: format!("raid5 4 → raid6 5, strip {} KiB", strip / KIB),
            old: tree(Level::Raid5, 4, strip, region),
            new: tree(Level::Raid6, 5, strip, region),
            member_bytes: vec![member, member, member, member, member + pool_room],
        },
    ]
}

fn seeds() -> Vec<u64> {
    if let Some(s) = std::env::var("NBRAID_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![s];
    }
    let n = if std::env::var_os("NBRAID_SOAK").is_some() {
        40
    } else {
        3
    };
    (1..=n).collect()
}

/// The partial-parity log in the metadata area where it fits there (a 1 MiB strip's does
/// not: such a volume is given a reserve before its region or none), beside the backup.
fn opts(m: &Move) -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions::default(),
        ppl: m.new.full_stripe_width().is_some_and(|w| w < 3 * MIB),
        bitmap_chunk_bytes: Some(256 * KIB),
        bitmap_clear_delay: Duration::ZERO,
        ..ArrayOptions::default()
    }
}

fn open(m: &Move, config: &Node, disks: &[Disk]) -> Result<Array, String> {
    open_every(config, disks, opts(m)).map(|(a, _)| a)
}

fn same(a: &Array, want: &[u8], when: &str) -> Result<(), String> {
    for (i, piece) in want.chunks(PIECE_BYTES).enumerate() {
        let at = (i * PIECE_BYTES) as u64;
        let back = block_on(a.read(at, piece.len() as u64)).map_err(|e| format!("{when}: {e}"))?;
        if let Some(x) = back.iter().zip(piece).position(|(x, y)| x != y) {
            return Err(format!("{when}: byte {} differs", at + x as u64));
        }
    }
    Ok(())
}

fn disks(m: &Move, seed: u64) -> Vec<Disk> {
    (0..m.member_bytes.len())
        .map(|i| {
            let d = MemoryMember::new(format!("m{i}"), m.member_bytes[i]);
            Arc::new(Faulty::new(d, seed * 31 + i as u64).with_power_loss())
        })
        .collect()
}

/// Creates the old shape on the first members, fills it (flushed, clean) and starts the
/// reshape; the bytes written.
fn create_and_start(m: &Move, disks: &[Disk], rng: &mut Rng) -> Result<Vec<u8>, String> {
    let n_old = m.old.member_count();
    let created = create_first(&m.old, disks, opts(m), true)?;
    let want = seeded(rng, created.volume().capacity());
    write_clean(&created, &want)?;
    let added = metas(&disks[n_old..]);
    block_on(created.start_reshape(m.new.clone(), added, &Consent::default()))
        .map_err(|e| format!("start: {e}"))?;
    Ok(want)
}

/// One seed of one move; `Err` names what was lost.
fn run(m: &Move, seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let disks = disks(m, seed);
    let mut want = create_and_start(m, &disks, &mut rng)?;
    let cap = want.len() as u64;
    let a = open(m, &m.new, &disks).map_err(|e| format!("open mid-reshape: {e}"))?;
    let at = rng.below(cap / 4096) * 4096;
    let data = seeded(&mut rng, 4096);
    block_on(a.write(at, Buf::copy_from(&data), true)).map_err(|e| e.to_string())?;
    want[at as usize..at as usize + 4096].copy_from_slice(&data);
    for d in &disks {
        d.set_latency(Duration::from_micros(5), Duration::from_micros(60));
    }
    // The cut lands at a random instant of a random window: once the pass reaches a seeded
    // unit, within the next milliseconds (a window of these strips takes several).
    let unit = Reshape::new(m.old.clone(), m.new.clone()).unwrap().unit();
    if rng.coin() {
        a.set_reshape_window_bytes(1); // one unit at a time
    }
    let target = rng.below(cap / unit) * unit;
    let cut = Duration::from_micros(rng.below(15_000));
    let ctl = PassControl::new(0);
    let cut_at = async {
        while ctl.position_bytes() < target {
            nbraid_core::timer::sleep(Duration::from_micros(100)).await;
        }
        nbraid_core::timer::sleep(cut).await;
    };
    block_on(async {
        match select(Box::pin(a.reshape(&ctl)), Box::pin(cut_at)).await {
            Either::Left((r, _)) => r.map(|_| ()),
            Either::Right(_) => Ok(()),
        }
    })
    .map_err(|e| e.to_string())?;
    drop(a);
    // The power goes.
    for d in &disks {
        block_on(d.crash(rng.coin())).map_err(|e| e.to_string())?;
        d.set_latency(Duration::ZERO, Duration::ZERO);
    }
    let a = open(m, &m.new, &disks).map_err(|e| format!("open after the power loss: {e}"))?;
    let position = a.reshape_progress().map_or(cap, |p| p.0);
    same(&a, &want, &format!("after the restart at {position}"))?;
    let ctl = PassControl::resume_at(0, position);
    let state = block_on(a.reshape(&ctl)).map_err(|e| e.to_string())?;
    assert_eq!(state, PassState::Done);
    same(&a, &want, "at the end")?;
    drop(a);
    let a = open(m, &m.new, &disks).map_err(|e| format!("open in the new shape: {e}"))?;
    assert_eq!(a.reshape_progress(), None, "no reshape left");
    assert_eq!(a.volume().capacity(), m.new.capacity(), "the new size");
    same(&a, &want, "in the new shape alone")
}

fn run_all(strip: u64) {
    let mut failures = Vec::new();
    for m in moves(strip) {
        for seed in seeds() {
            if let Err(e) = run(&m, seed) {
                failures.push(format!("{}, seed {seed} (NBRAID_SEED={seed}): {e}", m.name));
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
fn reshapes_with_128_kib_strips_survive_power_losses() {
    run_all(128 * KIB);
}

#[test]
fn reshapes_with_256_kib_strips_survive_power_losses() {
    run_all(256 * KIB);
}

#[test]
fn reshapes_with_1_mib_strips_survive_power_losses() {
    run_all(MIB);
}

/// RAID 5 → 6 backs up every window: with members all alike there is no room for the pool
/// after the added member's region, and the start says so, naming the member and the bytes.
#[test]
fn a_same_width_move_without_room_for_its_backup_is_refused_by_name() {
    let mut m = moves(MIB).remove(1);
    let member = m.member_bytes[0];
    m.member_bytes[4] = member;
    let disks = disks(&m, 1);
    let e = create_and_start(&m, &disks, &mut Rng::new(1)).unwrap_err();
    assert!(e.contains("(m4)`"), "names the added member: {e}");
    assert!(e.contains("more bytes"), "says what is missing: {e}");
    open(&m, &m.old, &disks[..4]).expect("still the old shape after a refusal");
}

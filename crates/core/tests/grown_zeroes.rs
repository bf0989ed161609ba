//! Every byte a reshape adds past the old capacity reads as zero when the grown size is first
//! offered — whatever the added members held (a forced disk full of another volume's bytes)
//! and whatever the old members held past the rows the old shape used — with checksums and
//! parity that agree with the zeroes.
//!
//! Found broken by a hunt through the binaries: a RAID 5 of three members grown by a fourth
//! whose file was full of 0xAB offered 256 KiB past the old end holding stale copies of the
//! volume's own blocks and 16 blocks of the foreign disk's 0xAB; a RAID 6 4→5 at 1 MiB strips
//! offered 5 MiB of old P and Q rows; RAID 50 and 60 adding a span offered the user's data
//! from other offsets. The pass rewrote the reshape unit the old capacity cuts (and a short
//! last unit) from what the members held; it now zeroes their bytes past the capacity too
//! (`crates/core/src/reshape/grown.rs`). Grow-in-place cases (the old capacity always on a
//! unit) read zero before and are kept here.
//!
//! Per move: every member's bytes past its metadata area filled with a non-zero pattern
//! (0xAB on the added members), the old shape created and written in full, the reshape run
//! through the array to its end (once through a power loss at a random instant), the volume
//! opened again: the grown space reads zero, the old bytes read back, a check-only scrub
//! finds every stripe consistent, and the grown space still reads zero with any one member
//! lost (where the shape survives it).

mod common;

use futures::executor::block_on;
use futures::future::{select, Either};
use nbraid_core::metadata::{Array, ArrayOptions, METADATA_AREA_BYTES};
use nbraid_core::{Buf, Member, MemoryMember, PassControl, PassState, ScrubControl};
use nbraid_core::{Volume, VolumeOptions};
use nbraid_layout::{Geometry, Level, Node, ParityLayout, Region, Shape};
use nbraid_sim::{Faulty, Rng};
use std::sync::Arc;
use std::time::Duration;

use common::arrays::{create_first, forced, metas, open_every};
use common::{KIB, MIB};

/// The block-checksum reserve before every region (a region of up to about 30 MiB).
const SUM_RESERVE: u64 = 64 * KIB;
const START: u64 = METADATA_AREA_BYTES + SUM_RESERVE;
/// Bytes past every region, filled too: what the old shape never used.
const SLACK: u64 = 64 * KIB;

type Disk = Arc<Faulty<MemoryMember>>;

fn opts() -> ArrayOptions {
    // No partial-parity log: a 4 MiB strip's does not fit the metadata area, and the pass
    // writes the new tree unlogged anyway.
    ArrayOptions {
        ppl: false,
        bitmap_chunk_bytes: Some(64 * KIB),
        checksum_area_before_region_bytes: Some(SUM_RESERVE),
        ..ArrayOptions::default()
    }
}

/// `level` over members with regions of `lens` bytes at [`START`] (`spans` for RAID 50/60).
fn shaped(level: Level, spans: Option<usize>, strip: u64, lens: &[u64]) -> Node {
    let regions: Vec<Region> = (lens.iter())
        .map(|&len| Region { start: START, len })
        .collect();
    Shape::new(level, lens.len(), spans, strip, ParityLayout::default())
        .expect("shape")
        .build(&regions)
        .expect("tree")
}

/// `level` over `members` regions of `rows` strips each.
fn rows(level: Level, members: usize, strip: u64, rows: u64) -> Node {
    shaped(level, None, strip, &vec![rows * strip; members])
}

/// RAID 50/60 of `spans` spans of `width` members, regions of `rows` strips.
fn spans(level: Level, spans: usize, width: usize, strip: u64, rows: u64) -> Node {
    shaped(
        level,
        Some(spans),
        strip,
        &vec![rows * strip; spans * width],
    )
}

/// The moves that grow a volume: members added (flat and nested), level and strip changes,
/// members of unequal sizes, a small added member, regions grown in place; strips of
/// 4 KiB to 4 MiB. Most put the old capacity inside a reshape unit.
fn moves() -> Vec<(String, Node, Node)> {
    let mut out = Vec::new();
    for (strip, n) in [(4 * KIB, 52), (64 * KIB, 11), (MIB, 5), (4 * MIB, 5)] {
        out.push((
            format!("raid5 3→4, strip {} KiB", strip / KIB),
            rows(Level::Raid5, 3, strip, n),
            rows(Level::Raid5, 4, strip, n),
        ));
    }
    let s = 64 * KIB;
    let unequal: Vec<u64> = [11, 13, 12].iter().map(|r| r * s).collect();
    let mut with_added = unequal.clone();
    with_added.push(16 * s);
    let more = |v: &[u64]| v.iter().map(|&l| l + 2 * s).collect::<Vec<_>>();
    out.extend([
        (
            "raid6 4→5, strip 1 MiB".to_string(),
            rows(Level::Raid6, 4, MIB, 5),
            rows(Level::Raid6, 5, MIB, 5),
        ),
        (
            "raid6 4→5, strip 4 KiB".to_string(),
            rows(Level::Raid6, 4, 4 * KIB, 53),
            rows(Level::Raid6, 5, 4 * KIB, 53),
        ),
        (
            "raid6 5→7".to_string(),
            rows(Level::Raid6, 5, s, 7),
            rows(Level::Raid6, 7, s, 7),
        ),
        (
            "raid5 3 → raid6 5".to_string(),
            rows(Level::Raid5, 3, s, 7),
            rows(Level::Raid6, 5, s, 7),
        ),
        (
            "raid1 2 → raid5 3".to_string(),
            rows(Level::Raid1, 2, s, 9),
            rows(Level::Raid5, 3, s, 9),
        ),
        (
            "raid0 2→3".to_string(),
            rows(Level::Raid0, 2, s, 7),
            rows(Level::Raid0, 3, s, 7),
        ),
        (
            "raid50 2×3 → 3×3".to_string(),
            spans(Level::Raid50, 2, 3, s, 7),
            spans(Level::Raid50, 3, 3, s, 7),
        ),
        (
            "raid60 2×4 → 3×4".to_string(),
            spans(Level::Raid60, 2, 4, s, 7),
            spans(Level::Raid60, 3, 4, s, 7),
        ),
        (
            "raid5 3 at 64 KiB → 4 at 16 KiB".to_string(),
            rows(Level::Raid5, 3, s, 11),
            rows(Level::Raid5, 4, 16 * KIB, 44),
        ),
        (
            "raid5 of unequal members 3→4".to_string(),
            shaped(Level::Raid5, None, s, &unequal),
            shaped(Level::Raid5, None, s, &with_added),
        ),
        (
            "raid5 3→4, a small added member".to_string(),
            rows(Level::Raid5, 3, s, 11),
            shaped(Level::Raid5, None, s, &[11 * s, 11 * s, 11 * s, 9 * s]),
        ),
        (
            "raid5 grown in place".to_string(),
            shaped(Level::Raid5, None, s, &unequal),
            shaped(Level::Raid5, None, s, &more(&unequal)),
        ),
        (
            "raid6 grown in place".to_string(),
            rows(Level::Raid6, 4, s, 7),
            rows(Level::Raid6, 4, s, 10),
        ),
        (
            "raid1 grown in place".to_string(),
            rows(Level::Raid1, 2, s, 7),
            rows(Level::Raid1, 2, s, 10),
        ),
    ]);
    out
}

/// A non-zero byte for byte `i` of a member, different per member and per block.
fn junk(i: u64, salt: u64) -> u8 {
    0x80 | ((i / 4096 * 7 + i % 4096 / 512 + salt * 29) & 0x7f) as u8
}

/// The volume's byte `i`: never zero, different from block to block.
fn data(i: u64) -> u8 {
    1 | ((i % 4096) as u8 ^ (i / 4096) as u8)
}

/// Most bytes one request moves (below the engine's limit).
const PIECE: u64 = 16 * MIB;

/// Members long enough for `new`'s regions, each filled past its metadata area: the old
/// ones with [`junk`] (read as stale rows where the old shape never wrote), the added ones
/// with 0xAB (a forced disk of another volume). The added ones are longer by room for the
/// old members' shares of a window's backup (their metadata areas hold a large strip's
/// rows only there).
fn members(old: &Node, new: &Node, seed: u64) -> Vec<Disk> {
    let mut ends = Vec::new();
    new.visit_members(&mut |m| ends.push(m.start + m.len));
    let len = ends.iter().max().copied().unwrap_or(0) + SLACK;
    let n_old = old.member_count();
    let backup = n_old as u64 * (2 * old.full_stripe_width().unwrap_or(0) + SLACK);
    (0..new.member_count())
        .map(|i| {
            let (len, byte) = match i < n_old {
                true => (len, None),
                false => (len + backup, Some(0xAB)),
            };
            let m = MemoryMember::new(format!("m{i}"), len);
            let mut at = START;
            while at < len {
                let n = (len - at).min(PIECE);
                let fill: Vec<u8> = (at..at + n)
                    .map(|b| byte.unwrap_or_else(|| junk(b, i as u64)))
                    .collect();
                block_on(m.write(at, Buf::copy_from(&fill).freeze(), false)).unwrap();
                at += n;
            }
            Arc::new(Faulty::new(m, seed * 31 + i as u64).with_power_loss())
        })
        .collect()
}

/// `[offset, offset+len)` of the volume, read a piece at a time.
fn read_all(
    read: impl Fn(u64, u64) -> Result<Buf, String>,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(len as usize);
    let mut at = offset;
    while at < offset + len {
        let n = (offset + len - at).min(PIECE);
        out.extend_from_slice(&read(at, n)?);
        at += n;
    }
    Ok(out)
}

fn open(tree: &Node, disks: &[Disk]) -> Result<Array, String> {
    open_every(tree, disks, opts()).map(|(a, _)| a)
}

/// The first byte of `[from, to)` of the volume that is not zero, if any.
fn first_non_zero(read: &[u8], from: u64) -> Option<u64> {
    (read.iter().position(|&b| b != 0)).map(|at| from + at as u64)
}

/// Creates the old shape over its members, writes it in full and starts the reshape
/// (forced: the added members hold old bytes).
fn started(old: &Node, new: &Node, disks: &[Disk]) -> Result<(), String> {
    let n_old = old.member_count();
    let created = create_first(old, disks, opts(), false)?;
    block_on(async {
        let mut at = 0;
        while at < old.capacity() {
            let n = (old.capacity() - at).min(PIECE);
            let want: Vec<u8> = (at..at + n).map(data).collect();
            created.write(at, Buf::copy_from(&want), false).await?;
            at += n;
        }
        created.flush().await?;
        created.mark_clean().await.map(|_| ())
    })
    .map_err(|e| format!("fill: {e}"))?;
    block_on(created.start_reshape(new.clone(), metas(&disks[n_old..]), &forced()))
        .map_err(|e| format!("start: {e}"))
}

/// The new shape opened after the reshape: its size, the grown space zero, the old bytes
/// back, every stripe consistent, the grown space zero with any one member lost.
fn check_grown(old: &Node, new: &Node, disks: &[Disk]) -> Result<(), String> {
    let a = open(new, disks)?;
    if a.reshape_progress().is_some() {
        return Err("a reshape is still recorded".into());
    }
    let (cap, end) = (old.capacity(), new.capacity());
    if a.volume().capacity() != end {
        return Err(format!("offers {} bytes, not {end}", a.volume().capacity()));
    }
    let read = |at, n| block_on(a.read(at, n)).map_err(|e| format!("read: {e}"));
    let grown = read_all(read, cap, end - cap)?;
    if let Some(at) = first_non_zero(&grown, cap) {
        let n = grown.iter().filter(|&&b| b != 0).count();
        return Err(format!(
            "{n} byte(s) past the old capacity {cap} are not zero, the first at {at} (0x{:02x})",
            grown[(at - cap) as usize]
        ));
    }
    let back = read_all(read, 0, cap)?;
    if let Some(at) = (0..cap).find(|&i| back[i as usize] != data(i)) {
        return Err(format!("the old byte {at} differs"));
    }
    let report = block_on(a.scrub(&ScrubControl::new(false, 0))).map_err(|e| e.to_string())?;
    if report.mismatches > 0 {
        return Err(format!("{} stripe(s) inconsistent", report.mismatches));
    }
    drop(a);
    for lost in (0..new.member_count()).filter(|&m| new.survives(&|x| x == m)) {
        let v = Volume::new(
            Geometry::from_tree(new.clone()),
            disks.iter().map(|d| d.clone() as Arc<dyn Member>).collect(),
            VolumeOptions::default(),
        )
        .map_err(|e| e.to_string())?;
        v.fail_member(lost, "the test");
        let read = |at, n| block_on(v.read(at, n)).map_err(|e| e.to_string());
        let read = read_all(read, cap, end - cap)?;
        if let Some(at) = first_non_zero(&read, cap) {
            return Err(format!("with member {lost} lost, byte {at} is not zero"));
        }
    }
    Ok(())
}

/// One move, the reshape run to its end in one pass.
fn grow(old: &Node, new: &Node) -> Result<(), String> {
    let disks = members(old, new, 1);
    started(old, new, &disks)?;
    let a = open(new, &disks)?;
    let from = a.reshape_progress().map_or(0, |p| p.0);
    let state = block_on(a.reshape(&PassControl::resume_at(0, from))).map_err(|e| e.to_string())?;
    if state != PassState::Done {
        return Err(format!("the pass ended {state:?}"));
    }
    drop(a);
    check_grown(old, new, &disks)
}

#[test]
fn the_space_a_reshape_adds_reads_zero_when_it_is_offered() {
    let failures: Vec<String> = moves()
        .iter()
        .filter_map(|(what, old, new)| grow(old, new).err().map(|e| format!("{what}: {e}")))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
}

/// One move, the power lost at a random instant of the pass (unflushed writes lost, some
/// kept, torn sectors) — `in_grown`: of its walk of the grown space, after the copy — the
/// reshape finished after the restart. The position the restart found, if any.
fn grow_through_a_power_loss(
    old: &Node,
    new: &Node,
    seed: u64,
    in_grown: bool,
) -> Result<Option<u64>, String> {
    let mut rng = Rng::new(seed);
    let disks = members(old, new, seed);
    started(old, new, &disks)?;
    let a = open(new, &disks)?;
    for d in &disks {
        d.set_latency(Duration::from_micros(5), Duration::from_micros(60));
    }
    a.set_reshape_window_bytes(1); // one unit at a time: the cut lands mid-pass
    let cut = Duration::from_micros(rng.below(if in_grown { 1_500 } else { 20_000 }));
    let ctl = PassControl::new(0);
    let power = async {
        while in_grown && ctl.position_bytes() < old.capacity() {
            nbraid_core::timer::sleep(Duration::from_micros(10)).await;
        }
        nbraid_core::timer::sleep(cut).await
    };
    block_on(async {
        match select(Box::pin(a.reshape(&ctl)), Box::pin(power)).await {
            Either::Left((r, _)) => r.map(|_| ()),
            Either::Right(_) => Ok(()),
        }
    })
    .map_err(|e| e.to_string())?;
    drop(a);
    for d in &disks {
        block_on(d.crash(rng.coin())).map_err(|e| e.to_string())?;
        d.set_latency(Duration::ZERO, Duration::ZERO);
    }
    let a = open(new, &disks).map_err(|e| format!("after the power loss: {e}"))?;
    let restart = a.reshape_progress();
    if let Some((position, _)) = restart {
        let ctl = PassControl::resume_at(0, position);
        let state = block_on(a.reshape(&ctl)).map_err(|e| e.to_string())?;
        if state != PassState::Done {
            return Err(format!("the pass ended {state:?}"));
        }
    }
    drop(a);
    match check_grown(old, new, &disks) {
        Ok(()) => Ok(restart.map(|p| p.0)),
        Err(e) => Err(match restart {
            Some((at, _)) => format!("restarted at {at}: {e}"),
            None => format!("restarted after the reshape: {e}"),
        }),
    }
}

#[test]
fn the_space_a_reshape_adds_reads_zero_after_a_power_loss_mid_reshape() {
    let s = 64 * KIB;
    let cases = [
        (
            "raid5 3→4",
            rows(Level::Raid5, 3, s, 11),
            rows(Level::Raid5, 4, s, 11),
        ),
        (
            "raid6 4→5",
            rows(Level::Raid6, 4, s, 7),
            rows(Level::Raid6, 5, s, 7),
        ),
        (
            "raid50 2×3 → 3×3",
            spans(Level::Raid50, 2, 3, s, 7),
            spans(Level::Raid50, 3, 3, s, 7),
        ),
    ];
    let (mut failures, mut missed) = (Vec::new(), Vec::new());
    for (what, old, new) in &cases {
        let mut cut_in_grown = 0;
        for seed in 1..=12 {
            let in_grown = seed % 2 == 0;
            match grow_through_a_power_loss(old, new, seed, in_grown) {
                Ok(at) => cut_in_grown += usize::from(at == Some(old.capacity())),
                Err(e) => {
                    let when = if in_grown { ", in the grown space" } else { "" };
                    failures.push(format!("{what}, seed {seed}{when}: {e}"));
                }
            }
        }
        if cut_in_grown == 0 {
            missed.push(what);
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    // The power went while the grown space was walked at least once per move.
    assert!(
        missed.is_empty(),
        "no cut landed in the grown space: {missed:?}"
    );
}

//! A volume mid-reshape reads a reshape record and the critical section's backup from its
//! members: their bytes are hostile too. Volumes are stopped by a power cut in the middle of
//! a reshape (a RAID 5 → 6 move, every window backed up, and a RAID 5 growth), then one
//! member's reshape record is set to any value and re-encoded with a right checksum, its
//! superblock's bytes around the record overwritten and re-checksummed, or bytes of a backup
//! area overwritten; the volume is opened under the new tree: no panic, no allocation above
//! 64 MiB, and a refusal naming the volume or every byte as written — at the open and after
//! the reshape finishes.
//!
//! Bounded by time in the default run (~12 s); `NBRAID_SOAK=N` runs N times as long.

#[path = "common/capped_alloc.rs"]
mod capped_alloc;
mod common;

use capped_alloc::{largest_alloc_bytes, ALLOC_CAP_BYTES};
use common::KIB;
use futures::executor::block_on;
use futures::future::{select, BoxFuture, Either};
use futures::FutureExt;
use nbraid_core::metadata::disk_rule::Consent;
use nbraid_core::metadata::{
    Absence, Area, Array, ArrayOptions, BackupWindow, MemberMeta, OpenReport, RecordedState,
    Superblock, METADATA_AREA_BYTES, SLOT_BYTES,
};
use nbraid_core::{Buf, PassState};
use nbraid_core::{Member, MemberResult, MemoryMember, PassControl, SharedBuf, VolumeOptions};
use nbraid_layout::{Level, Node};
use proptest::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

const REGION: u64 = 384 * KIB;
const MEMBER_BYTES: u64 = METADATA_AREA_BYTES + REGION;

fn tree(level: Level, members: usize, strip: u64) -> Node {
    common::level_tree(level, members, strip, METADATA_AREA_BYTES, REGION)
}

fn opts() -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions::default(),
        bitmap_chunk_bytes: Some(64 * KIB),
        bitmap_clear_delay: Duration::ZERO,
        ..ArrayOptions::default()
    }
}

/// A memory member whose writes never end once the power is cut: the cut comes right after
/// the last member's `cut_after`-th superblock write (a commit reaches the members in role
/// order, so every record then stands at one event).
struct Cut {
    inner: MemoryMember,
    last: bool,
    power: Arc<Power>,
}

#[derive(Default)]
struct Power {
    superblock_writes: AtomicU64,
    /// Zero: never.
    cut_after: AtomicU64,
    cut: AtomicBool,
}

impl Member for Cut {
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        if self.power.cut.load(SeqCst) {
            return futures::future::pending().boxed();
        }
        if self.last && offset < 2 * SLOT_BYTES {
            let n = self.power.superblock_writes.fetch_add(1, SeqCst) + 1;
            if n == self.power.cut_after.load(SeqCst) {
                self.power.cut.store(true, SeqCst);
            }
        }
        self.inner.write(offset, data, fua)
    }
    common::pass_through!(inner; name len read flush trim write_zeroes counters);
}

/// A volume cut mid-reshape: its members' bytes, the new tree and what it holds.
struct Base {
    new: Node,
    members: Vec<Vec<u8>>,
    image: Vec<u8>,
}

fn metas_of(disks: &[Arc<dyn Member>]) -> Vec<Arc<MemberMeta>> {
    disks
        .iter()
        .map(|d| block_on(MemberMeta::load(d.clone())))
        .collect()
}

/// Runs the reshape of `old` into `new` until the power is cut after the last member's
/// `cut_after`-th superblock write of the pass.
fn base(old: Node, new: Node, cut_after: u64) -> Base {
    let power = Arc::new(Power::default());
    let cuts: Vec<Arc<Cut>> = (0..new.member_count())
        .map(|i| {
            Arc::new(Cut {
                inner: MemoryMember::new(format!("disk{i}"), MEMBER_BYTES),
                last: i + 1 == new.member_count(),
                power: power.clone(),
            })
        })
        .collect();
    let disks: Vec<Arc<dyn Member>> = cuts.iter().map(|c| c.clone() as Arc<dyn Member>).collect();
    let n_old = old.member_count();
    let (a, _) = block_on(Array::create(
        "vol",
        old,
        metas_of(&disks[..n_old]),
        opts(),
        true,
        &|_, _| {},
    ))
    .expect("create");
    let image = pattern(a.volume().capacity() as usize);
    block_on(a.write(0, Buf::copy_from(&image), false)).expect("fill");
    block_on(a.flush()).expect("flush");
    let added = metas_of(&disks[n_old..]);
    block_on(a.start_reshape(new.clone(), added, &Consent::default())).expect("start");
    drop(a);
    let m = metas_of(&disks).into_iter().map(Some).collect();
    let (a, _) = block_on(Array::open("vol", &new, m, opts(), &|_, _| {})).expect("open");
    a.set_reshape_window_bytes(1);
    // The cut counts from here: from the pass's first commit on.
    power.superblock_writes.store(0, SeqCst);
    power.cut_after.store(cut_after, SeqCst);
    let ctl = PassControl::new(0);
    let cut = futures::future::poll_fn(|_| {
        if power.cut.load(SeqCst) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    });
    let done = block_on(async {
        match select(Box::pin(a.reshape(&ctl)), Box::pin(cut)).await {
            Either::Left((r, _)) => r.map(|s| s == PassState::Done).unwrap_or(false),
            Either::Right(_) => false,
        }
    });
    assert!(
        !done,
        "the power was cut mid-reshape ({} superblock writes)",
        power.superblock_writes.load(SeqCst)
    );
    let members = cuts
        .iter()
        .map(|c| {
            let mut b = vec![0u8; MEMBER_BYTES as usize];
            c.inner.peek(0, &mut b);
            b
        })
        .collect();
    Base {
        new,
        members,
        image,
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4096 * 13) as u8).collect()
}

/// What one input does to one member.
#[derive(Clone, Debug)]
enum Mutation {
    /// A field of the reshape record of the newest superblock copy set from `value`,
    /// re-encoded (its checksum right).
    Field { field: u8, value: u64 },
    /// Bytes of the newest copy's record tail (the reshape record is its last part)
    /// overwritten, `back` bytes before its end, re-checksummed.
    TailBytes { back: usize, bytes: Vec<u8> },
    /// Bytes of the member's backup area overwritten (its header or rows).
    Backup { at: u64, bytes: Vec<u8> },
}

/// A multiple of every moved tree's full stripe (16, 24 and 48 KiB).
const UNIT: u64 = 48 * KIB;

fn value() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0..2 * MEMBER_BYTES,
        (0..20u64).prop_map(|k| k * UNIT),
        (0..64u32).prop_map(|s| 1u64 << s),
        Just(u64::MAX),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (0u8..13, value()).prop_map(|(field, value)| Mutation::Field { field, value }),
        1 => (1usize..400, proptest::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(back, bytes)| Mutation::TailBytes { back, bytes }),
        1 => (0u64..64 * KIB, proptest::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Backup { at, bytes }),
    ]
}

/// The newest valid superblock copy in `bytes` and its slot's offset.
fn newest_copy(bytes: &[u8]) -> Option<(Superblock, usize)> {
    let copies = [0, SLOT_BYTES as usize].map(|at| Superblock::decode(&bytes[at..]).ok());
    let sb = copies.into_iter().flatten().max_by_key(|s| s.generation)?;
    let slot = sb.slot_offset() as usize;
    Some((sb, slot))
}

/// Sets field `field` of the record's reshape from `x`; false when it does not apply.
fn set_field(sb: &mut Superblock, field: u8, x: u64) -> bool {
    let v = &mut sb.volumes[0];
    let old_tree = v.tree.clone();
    let Some(r) = v.reshape.as_mut() else {
        return false;
    };
    match field {
        0 => r.position_bytes = x,
        // A plausible position: on whole stripes of both trees.
        1 => r.position_bytes = x % (16 * UNIT) / UNIT * UNIT,
        2 => {
            r.backup_window = Some(BackupWindow {
                start_bytes: r.position_bytes,
                len_bytes: x,
            })
        }
        3 => {
            r.backup_window = Some(BackupWindow {
                start_bytes: x,
                len_bytes: x.rotate_left(17),
            })
        }
        4 => r.backup_window = None,
        5 => {
            r.backup_area = Some(Area {
                offset: x / 4096 * 4096,
                len: (x >> 40).max(1) * 4096,
            })
        }
        6 => r.backup_area = None,
        7 => v.reshape = None,
        8 => r.new_tree = old_tree,
        // Another new tree: the same members, another level or strip.
        9 => {
            let level = [Level::Raid5, Level::Raid6, Level::Raid0][(x % 3) as usize];
            let strip = 4096 << ((x >> 2) % 5);
            r.new_tree = tree(level, r.new_tree.member_count(), strip);
        }
        // The record looks one commit newer than its peers' (a torn commit), unchanged
        // otherwise. Its position moved forward too would be a commit its peers cannot
        // contradict (a window's length is not recorded): not covered; moved back, below.
        10 => v.events += 1,
        11 => {
            v.events += 1;
            v.reshape = None;
        }
        // One commit newer with the position moved back by whole stripes: refused.
        _ => {
            v.events += 1;
            r.position_bytes = r.position_bytes.saturating_sub((1 + x % 4) * UNIT);
        }
    }
    true
}

/// Applies `m` to a member's `bytes`; false when it does not apply (nothing changed).
fn apply(m: &Mutation, bytes: &mut [u8]) -> bool {
    let Some((mut sb, slot)) = newest_copy(bytes) else {
        return false;
    };
    match m {
        Mutation::Field { field, value } => {
            if !set_field(&mut sb, *field, *value) {
                return false;
            }
            let Ok(enc) = sb.encode() else { return false };
            bytes[slot..slot + enc.len()].copy_from_slice(&enc);
        }
        Mutation::TailBytes { back, bytes: b } => {
            let len = u32::from_le_bytes(bytes[slot + 12..slot + 16].try_into().unwrap()) as usize;
            let at = len - (back % (len - 64)).max(1);
            let n = b.len().min(len - at);
            bytes[slot + at..slot + at + n].copy_from_slice(&b[..n]);
            bytes[slot + 16..slot + 20].fill(0);
            let crc = nbraid_core::crc32c::crc32c(&bytes[slot..slot + len]);
            bytes[slot + 16..slot + 20].copy_from_slice(&crc.to_le_bytes());
        }
        Mutation::Backup { at, bytes: b } => {
            let reshape = sb.volumes[0].reshape.as_ref();
            let Some(area) = reshape.and_then(|r| r.backup_area) else {
                return false;
            };
            let at = (area.offset + at % area.len) as usize;
            let n = b.len().min((area.offset + area.len) as usize - at);
            bytes[at..at + n].copy_from_slice(&b[..n]);
        }
    }
    true
}

/// Reads the whole volume: every byte as written.
fn same(a: &Array, want: &[u8], when: &str) -> Result<(), TestCaseError> {
    let got = block_on(a.read(0, want.len() as u64))
        .map_err(|e| TestCaseError::fail(format!("{when}: a read failed: {e}")))?;
    let at = got.iter().zip(want).position(|(x, y)| x != y);
    prop_assert!(at.is_none(), "{when}: wrong bytes from {at:?}");
    Ok(())
}

/// Opens `base` with member `victim` mutated by `m` under the new tree: a refusal naming the
/// volume, or every byte as written, and again once the reshape finished.
fn check(base: &Base, victim: usize, m: &Mutation) -> Result<(), TestCaseError> {
    let mut bytes = base.members.clone();
    if !apply(m, &mut bytes[victim]) {
        return Ok(());
    }
    let disks: Vec<Arc<dyn Member>> = bytes
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let d = MemoryMember::new(format!("disk{i}"), b.len() as u64);
            d.poke(0, b);
            Arc::new(d) as Arc<dyn Member>
        })
        .collect();
    let metas = metas_of(&disks).into_iter().map(Some).collect();
    let a = match block_on(Array::open("vol", &base.new, metas, opts(), &|_, _| {})) {
        Ok((a, _)) => a,
        Err(e) => {
            let e = e.to_string();
            prop_assert!(e.contains("vol"), "a refusal that names no volume: {e}");
            return Ok(());
        }
    };
    same(&a, &base.image, "opened")?;
    if let Some((position, _)) = a.reshape_progress() {
        // The pass may refuse (a backup that fails its check fails roles); the bytes stay.
        let _ = block_on(a.reshape(&PassControl::resume_at(0, position)));
        same(&a, &base.image, "after the pass")?;
    }
    prop_assert!(largest_alloc_bytes() <= ALLOC_CAP_BYTES);
    Ok(())
}

fn bases() -> Vec<Base> {
    let to_raid6 = || {
        (
            tree(Level::Raid5, 3, 8 * KIB),
            tree(Level::Raid6, 4, 8 * KIB),
        )
    };
    let grow = || {
        (
            tree(Level::Raid5, 3, 4 * KIB),
            tree(Level::Raid5, 4, 4 * KIB),
        )
    };
    let mut out = Vec::new();
    for cut_after in [2, 3, 6] {
        let (old, new) = to_raid6();
        out.push(base(old, new, cut_after));
        let (old, new) = grow();
        out.push(base(old, new, cut_after));
    }
    out
}

#[test]
fn hostile_reshape_records_never_serve_wrong_bytes() {
    let bases = bases();
    let detail = || format!(", largest allocation {} bytes", largest_alloc_bytes());
    let budget = Duration::from_secs(12 * common::soak());
    let strategy = (0..bases.len(), 0usize..4, mutation());
    let what = "hostile reshape records";
    common::fuzz_for(
        (what, &detail),
        (budget, 50),
        &strategy,
        |(b, victim, m)| check(&bases[b], victim, &m),
    );
}

/// One member's record moved the reshape's position to another whole stripe, its event
/// count and checksum right: as the first newest record it said where the bytes live, and
/// bytes not yet copied were served as the new tree's (wrong bytes, no error). Records of
/// one event that disagree on the reshape are refused, naming the volume and both members.
#[test]
fn a_reshape_position_one_member_alone_records_is_refused() {
    let base = cut_raid5_to_raid6();
    let position = reshape_position(&base);
    let lie = Mutation::Field {
        field: 0,
        value: position + 8 * UNIT,
    };
    let e = open_with_lie(&base, 0, &lie);
    assert!(
        e.contains("vol") && e.contains("members 0 and 1") && e.contains("different reshapes"),
        "{e}"
    );
}

/// One member's record one commit ahead of its peers' with the reshape's position moved
/// back (its checksum right): trusted, it read bytes already copied from the old tree, where
/// the copy had written over them. A reshape only moves forward: refused, naming both.
#[test]
fn a_reshape_position_that_went_back_in_a_newer_record_is_refused() {
    let base = cut_raid5_to_raid6();
    assert!(
        reshape_position(&base) >= UNIT,
        "the cut is past the first stripes"
    );
    let lie = Mutation::Field {
        field: 12,
        value: 0,
    };
    let e = open_with_lie(&base, 2, &lie);
    assert!(
        e.contains("vol") && e.contains("member 2's record") && e.contains("behind member 0's"),
        "{e}"
    );
}

/// A RAID 5 of 3 → RAID 6 of 4 restripe cut after its 6th commit.
fn cut_raid5_to_raid6() -> Base {
    let (old, new) = (
        tree(Level::Raid5, 3, 8 * KIB),
        tree(Level::Raid6, 4, 8 * KIB),
    );
    base(old, new, 6)
}

fn reshape_position(base: &Base) -> u64 {
    let (sb, _) = newest_copy(&base.members[0]).expect("a superblock");
    let reshape = sb.volumes[0].reshape.as_ref();
    reshape.expect("mid-reshape").position_bytes
}

/// Opens `base` with member `victim`'s record changed by `lie`: the refusal's text.
fn open_with_lie(base: &Base, victim: usize, lie: &Mutation) -> String {
    let mut bytes = base.members.clone();
    assert!(apply(lie, &mut bytes[victim]));
    match open_bytes(&base.new, &bytes) {
        Ok(_) => panic!("opened with member {victim}'s lie"),
        Err(e) => e,
    }
}

/// Opens the volume over members holding `bytes`, `config` the config's tree.
fn open_bytes(config: &Node, bytes: &[Vec<u8>]) -> Result<(Array, OpenReport), String> {
    let disks: Vec<Arc<dyn Member>> = bytes
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let d = MemoryMember::new(format!("disk{i}"), b.len() as u64);
            d.poke(0, b);
            Arc::new(d) as Arc<dyn Member>
        })
        .collect();
    let metas = metas_of(&disks).into_iter().map(Some).collect();
    block_on(Array::open("vol", config, metas, opts(), &|_, _| {})).map_err(|e| e.to_string())
}

/// Rewrites the newest superblock copy in a member's `bytes` through `change`.
fn edit(bytes: &mut [u8], change: impl FnOnce(&mut Superblock)) {
    let (mut sb, slot) = newest_copy(bytes).expect("a superblock");
    change(&mut sb);
    let enc = sb.encode().expect("encodes");
    bytes[slot..slot + enc.len()].copy_from_slice(&enc);
}

/// A reshape checkpoint torn on member 0 alone (its record a stripe ahead), then a start
/// without it that recorded it rebuilding and resumed from the position before — its peers'
/// records of the same event as member 0's (the start's commit torn in turn), or one newer.
/// Member 0 is stale, not a liar: the volume opens without it, every byte as written. (The
/// first check of a position that went back refused this, naming member 0's peers.)
#[test]
fn a_member_ahead_by_a_torn_checkpoint_then_left_out_of_a_start_is_stale() {
    let base = cut_raid5_to_raid6();
    let position = reshape_position(&base);
    for peers_ahead_events in [0, 1] {
        let mut bytes = base.members.clone();
        let member0 = newest_copy(&bytes[0]).expect("a superblock").0.member;
        edit(&mut bytes[0], |sb| {
            let r = sb.volumes[0].reshape.as_mut().expect("mid-reshape");
            (r.position_bytes, r.backup_window) = (position + UNIT, None);
        });
        for b in &mut bytes[1..] {
            edit(b, |sb| {
                let v = &mut sb.volumes[0];
                v.events += peers_ahead_events;
                let m = v.members.iter_mut().find(|m| m.uuid == member0);
                m.expect("member 0 listed").state = RecordedState::Rebuilding {
                    checkpoint_bytes: 0,
                };
            });
        }
        let (a, report) = open_bytes(&base.new, &bytes).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            matches!(report.roles[0], Err(Absence::Stale { member: 0, .. })),
            "member 0 is stale: {:?}",
            report.roles
        );
        same(&a, &base.image, "opened without member 0").unwrap();
    }
}

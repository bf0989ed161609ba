//! A reshape's backup of the rows at risk on a checksummed volume never turns a bad block
//! into good data. The window whose new-tree writes land over its own old rows is backed up
//! first; after a power cut inside it the open writes the backup back through the leaves,
//! which give every block a fresh checksum. A block that was silently bad on a member (its
//! bytes no longer matching its checksum: redundancy would have mended it on any read) was
//! once backed up raw, so the restart wrote it back as good and the copy carried it into the
//! new shape: garbage served as data. Now the backup reads the rows checked, mends them from
//! the redundancy (a scrub of the window) when they do not check, and stops the reshape with
//! an error naming the volume and the block when nothing can mend them.
//!
//! Per move and strip: a volume of the old shape filled with seeded bytes, one 4 KiB block
//! overwritten behind the engine in the first window's rows at risk of each old member (a
//! different row on each, so every stripe keeps its redundancy: data and parity chunks
//! alike), the reshape started with one-unit windows and the power cut after the first
//! window's backup and copy, before its checkpoint (`Cut`); the restart writes the backup
//! back and finishes. Every byte must read back as written, mid-way, at the end and in the
//! new shape alone.

mod common;

use common::arrays::{load, never, same};

use common::KIB;
use futures::channel::oneshot;
use futures::executor::block_on;
use futures::future::{select, BoxFuture, Either};
use nbraid_core::metadata::disk_rule::Consent;
use nbraid_core::metadata::{Array, ArrayOptions, METADATA_AREA_BYTES};
use nbraid_core::{Buf, Member, MemberResult, MemoryMember, PassControl, PassState, SharedBuf};
use nbraid_core::{MemberCounters, VolumeOptions};
use nbraid_layout::{Level, MemberRange, Node, Reshape};
use nbraid_sim::{Faulty, Rng};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

/// Room for the checksum area before each region.
const SUM_RESERVE: u64 = 64 * KIB;
const REGION_START: u64 = METADATA_AREA_BYTES + SUM_RESERVE;
const REGION: u64 = 384 * KIB;
const MEMBER_BYTES: u64 = REGION_START + REGION;
/// How the backup of a window begins on its member (`metadata/reshape_run.rs`).
const BACKUP_MAGIC: &[u8] = b"NBRSHBK1";

type Disk = Arc<Faulty<MemoryMember>>;

fn tree(level: Level, members: usize, strip: u64) -> Node {
    common::level_tree(level, members, strip, REGION_START, REGION)
}

/// The moves that back windows up, with the old tree's strip: growing RAID 5 and RAID 6, a
/// new level with a member added (RAID 5 to 6, a mirror to RAID 5), a smaller strip.
fn moves(strip: u64) -> Vec<(String, Node, Node, u64)> {
    vec![
        (
            "raid5 3→4".into(),
            tree(Level::Raid5, 3, strip),
            tree(Level::Raid5, 4, strip),
            strip,
        ),
        (
            "raid6 4→5".into(),
            tree(Level::Raid6, 4, strip),
            tree(Level::Raid6, 5, strip),
            strip,
        ),
        (
            "raid5 3→raid6 4".into(),
            tree(Level::Raid5, 3, strip),
            tree(Level::Raid6, 4, strip),
            strip,
        ),
        (
            "raid1 2→raid5 3".into(),
            tree(Level::Raid1, 2, strip),
            tree(Level::Raid5, 3, strip),
            strip,
        ),
        (
            format!("raid5 4, strip {}→{} KiB", 4 * strip / KIB, strip / KIB),
            tree(Level::Raid5, 4, 4 * strip),
            tree(Level::Raid5, 4, strip),
            4 * strip,
        ),
    ]
}

const STRIPS: [u64; 2] = [4 * KIB, 16 * KIB];

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

/// Where the power goes, shared by the members of one array: once member 0 has taken a
/// write beginning with the backup's magic (the window's rows saved) and then a write into
/// its region (the window's copy), its next flush — the copy made durable, before the
/// checkpoint — never returns, and no op of any member reaches its disk after it.
#[derive(Default)]
struct Power {
    stage: Mutex<Stage>,
    cut: Mutex<Option<oneshot::Sender<()>>>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Stage {
    #[default]
    On,
    BackedUp,
    Copying,
    Off,
}

impl Power {
    fn is_off(&self) -> bool {
        *self.stage.lock() == Stage::Off
    }

    /// Member `index`'s write at `offset` beginning with `head`.
    fn wrote(&self, index: usize, offset: u64, head: &[u8]) {
        let mut stage = self.stage.lock();
        *stage = match *stage {
            Stage::On if index == 0 && head.starts_with(BACKUP_MAGIC) => Stage::BackedUp,
            Stage::BackedUp if index == 0 && offset >= REGION_START => Stage::Copying,
            s => s,
        };
    }

    /// Whether member `index`'s flush is the cut.
    fn flushing(&self, index: usize) -> bool {
        let mut stage = self.stage.lock();
        if index == 0 && *stage == Stage::Copying {
            *stage = Stage::Off;
            if let Some(tx) = self.cut.lock().take() {
                let _ = tx.send(());
            }
        }
        *stage == Stage::Off
    }
}

/// A member on [`Power`]: its ops never return once the power is off.
struct Cut {
    inner: Disk,
    index: usize,
    power: Arc<Power>,
}

impl Member for Cut {
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        match self.power.is_off() {
            true => never(),
            false => self.inner.read(offset, buf),
        }
    }
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        if self.power.is_off() {
            return never();
        }
        self.power.wrote(self.index, offset, &data[..]);
        self.inner.write(offset, data, fua)
    }
    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        match self.power.flushing(self.index) {
            true => never(),
            false => self.inner.flush(),
        }
    }
    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        match self.power.is_off() {
            true => never(),
            false => self.inner.trim(offset, len),
        }
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        match self.power.is_off() {
            true => never(),
            false => self.inner.write_zeroes(offset, len),
        }
    }
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn counters(&self) -> &MemberCounters {
        self.inner.counters()
    }
}

fn open_over(config: &Node, members: Vec<Arc<dyn Member>>) -> Result<Array, String> {
    let m = members.into_iter().map(|d| Some(load(d))).collect();
    block_on(Array::open("vol", config, m, opts(), &|_, _| {}))
        .map(|(a, _)| a)
        .map_err(|e| e.to_string())
}

fn as_members(disks: &[Disk]) -> Vec<Arc<dyn Member>> {
    disks.iter().map(|d| d.clone() as Arc<dyn Member>).collect()
}

/// The rows the first one-unit window of `old`→`new` backs up, by member.
fn first_rows_at_risk(old: &Node, new: &Node) -> Vec<MemberRange> {
    let layout = Reshape::new(old.clone(), new.clone()).expect("a reshape");
    let w = (layout.window(0, layout.unit()).expect("a window")).expect("not at the end");
    assert_eq!(
        w.rule,
        nbraid_layout::WindowRule::Backup,
        "the first window backs up"
    );
    layout.rows_at_risk(w).expect("rows")
}

/// Overwrites one 4 KiB block behind the engine on each old member, at its `m`-th chunk
/// row of the first window's rows at risk (old strip `strip`), where it has one: one bad
/// chunk per stripe. Returns the blocks (member, member offset).
fn corrupt_rows_at_risk(disks: &[Disk], old: &Node, new: &Node, strip: u64) -> Vec<(usize, u64)> {
    let mut bad = Vec::new();
    for r in first_rows_at_risk(old, new) {
        let at = r.offset + r.member as u64 * strip;
        if at + 4 * KIB > r.offset + r.len {
            continue;
        }
        let garbage = Buf::copy_from(&[0xA5; 4096]).freeze();
        block_on(disks[r.member].inner().write(at, garbage, false)).expect("corrupt");
        bad.push((r.member, at));
    }
    assert!(!bad.is_empty(), "a block corrupted in the rows at risk");
    bad
}

/// A volume of `old` filled with seeded bytes, the reshape into `new` started (the added
/// members on disks after the old ones); the disks and the bytes.
fn started(old: &Node, new: &Node, seed: u64) -> (Vec<Disk>, Vec<u8>) {
    let disks: Vec<Disk> = (0..new.member_count())
        .map(|i| {
            let m = MemoryMember::new(format!("m{i}"), MEMBER_BYTES);
            Arc::new(Faulty::new(m, seed * 31 + i as u64).with_power_loss())
        })
        .collect();
    let n_old = old.member_count();
    let metas: Vec<_> = as_members(&disks).into_iter().map(load).collect();
    let created = block_on(Array::create(
        "vol",
        old.clone(),
        metas[..n_old].to_vec(),
        opts(),
        true,
        &|_, _| {},
    ))
    .expect("create")
    .0;
    let mut rng = Rng::new(seed);
    let want: Vec<u8> = (0..created.volume().capacity())
        .map(|_| rng.next_u64() as u8)
        .collect();
    block_on(async {
        created.write(0, Buf::copy_from(&want), false).await?;
        created.flush().await?;
        created.mark_clean().await.map(|_| ())
    })
    .expect("fill");
    block_on(created.start_reshape(new.clone(), metas[n_old..].to_vec(), &Consent::default()))
        .expect("start");
    (disks, want)
}

/// One move: blocks corrupted in the first window's rows at risk, the power cut inside
/// that window, the restart, the finish. `Err` says what was lost.
fn cut_inside_the_backed_up_window(old: &Node, new: &Node, strip: u64) -> Result<(), String> {
    let (disks, want) = started(old, new, 7);
    let bad = corrupt_rows_at_risk(&disks, old, new, strip);
    let power = Arc::new(Power::default());
    let (tx, cut) = oneshot::channel();
    *power.cut.lock() = Some(tx);
    let cuts = disks.iter().enumerate().map(|(index, d)| {
        let inner = d.clone();
        let power = power.clone();
        Arc::new(Cut {
            inner,
            index,
            power,
        }) as Arc<dyn Member>
    });
    let a = open_over(new, cuts.collect())?;
    a.set_reshape_window_bytes(1); // one unit a window: the first one backs up
    let ctl = PassControl::new(0);
    let ended = block_on(async {
        match select(Box::pin(a.reshape(&ctl)), cut).await {
            Either::Left((r, _)) => Err(format!("the pass ended before the cut: {r:?}")),
            Either::Right(_) => Ok(()),
        }
    });
    ended?;
    drop(a);
    // The power goes: unflushed writes lost, a seeded subset kept.
    for d in &disks {
        block_on(d.crash(true)).map_err(|e| e.to_string())?;
    }
    let a = open_over(new, as_members(&disks)).map_err(|e| format!("open after the cut: {e}"))?;
    let position = a.reshape_progress().map_or(u64::MAX, |p| p.0);
    if position != 0 {
        return Err(format!(
            "the cut landed after the checkpoint (at {position})"
        ));
    }
    let when = |w: &str| format!("{w} (bad blocks {bad:?})");
    same(&a, &want, &when("after the restart"))?;
    let state = block_on(a.reshape(&PassControl::resume_at(0, position)))
        .map_err(|e| when(&format!("finishing: {e}")))?;
    assert_eq!(state, PassState::Done);
    same(&a, &want, &when("at the end"))?;
    drop(a);
    let a = open_over(new, as_members(&disks))?;
    assert_eq!(a.reshape_progress(), None, "no reshape left");
    same(&a, &want, &when("in the new shape alone"))
}

#[test]
fn a_bad_block_in_the_rows_at_risk_is_mended_not_restored_after_a_power_cut() {
    let mut failures = Vec::new();
    for strip in STRIPS {
        for (name, old, new, old_strip) in moves(strip) {
            if let Err(e) = cut_inside_the_backed_up_window(&old, &new, old_strip) {
                failures.push(format!("{name}, strip {} KiB: {e}", strip / KIB));
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

/// The copy itself reads through the old tree, whose reads check the blocks and mend a bad
/// one from the redundancy: without a cut, the same bad blocks never reach the new shape.
#[test]
fn a_bad_block_in_the_rows_at_risk_is_mended_by_an_uninterrupted_copy() {
    let mut failures = Vec::new();
    for strip in STRIPS {
        for (name, old, new, old_strip) in moves(strip) {
            let (disks, want) = started(&old, &new, 11);
            let bad = corrupt_rows_at_risk(&disks, &old, &new, old_strip);
            let run = || -> Result<(), String> {
                let a = open_over(&new, as_members(&disks))?;
                a.set_reshape_window_bytes(1);
                let state = block_on(a.reshape(&PassControl::new(0))).map_err(|e| e.to_string())?;
                assert_eq!(state, PassState::Done);
                same(&a, &want, "at the end")
            };
            if let Err(e) = run() {
                failures.push(format!(
                    "{name}, strip {} KiB, bad blocks {bad:?}: {e}",
                    strip / KIB
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Blocks beyond the redundancy (two chunks of a RAID 5 stripe, three of a RAID 6 one, both
/// copies of a mirror's block, one block of a RAID 0) in the first window's rows at risk:
/// nothing can mend them, so the reshape stops with an error naming the volume and a bad
/// block, before the backup is recorded — again after a restart, where a raw backup once
/// let the restart write them back as good and the reshape finish with them as data. The
/// volume never reads them as data.
#[test]
fn a_bad_block_beyond_the_redundancy_stops_the_reshape_by_name() {
    let strip = 4 * KIB;
    let row0 = REGION_START;
    let cases = [
        (
            "raid5 3→4",
            tree(Level::Raid5, 3, strip),
            tree(Level::Raid5, 4, strip),
            vec![(0, row0), (1, row0)],
        ),
        (
            "raid6 4→5",
            tree(Level::Raid6, 4, strip),
            tree(Level::Raid6, 5, strip),
            vec![(0, row0), (1, row0), (2, row0)],
        ),
        (
            "raid1 2→raid5 3",
            tree(Level::Raid1, 2, strip),
            tree(Level::Raid5, 3, strip),
            vec![(0, row0), (1, row0)],
        ),
        (
            "raid0 2→3",
            tree(Level::Raid0, 2, strip),
            tree(Level::Raid0, 3, strip),
            vec![(0, row0)],
        ),
    ];
    let mut failures = Vec::new();
    for (name, old, new, bad) in cases {
        let (disks, want) = started(&old, &new, 13);
        for &(m, at) in &bad {
            let garbage = Buf::copy_from(&[0xA5; 4096]).freeze();
            block_on(disks[m].inner().write(at, garbage, false)).expect("corrupt");
        }
        let run = || -> Result<(), String> {
            for when in ["the first run", "after a restart"] {
                let a = open_over(&new, as_members(&disks))?;
                a.set_reshape_window_bytes(1);
                let e = match block_on(a.reshape(&PassControl::new(0))) {
                    Ok(state) => return Err(format!("{when}: the reshape ended {state:?}")),
                    Err(e) => e.to_string(),
                };
                let named = bad
                    .iter()
                    .any(|(_, at)| e.contains(&format!("offset {at}")));
                let volume = e.contains("volume `vol`") || e.contains("volume vol");
                if !volume || !named {
                    return Err(format!(
                        "{when}: the error names no volume or bad block: {e}"
                    ));
                }
                if let Ok(back) = block_on(a.read(0, want.len() as u64)) {
                    if back[..] != want[..] {
                        return Err(format!("{when}: the volume reads a bad block as data"));
                    }
                }
            }
            Ok(())
        };
        if let Err(e) = run() {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

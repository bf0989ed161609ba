//! Every record commit of a reshape, torn: the power goes while one commit has reached some
//! members and not others. Swept deterministically — commit by commit from the reshape's
//! start to its end, each member alone missing the commit and each member alone getting it —
//! where `reshape_array.rs` cuts at random instants.
//!
//! A torn commit leaves some records one event behind the others, which assembly trusts
//! (FORMAT.md, "Event counter and assembly"), so the invariant is strict: after any one
//! torn commit every role is trusted at every later open (none absent or stale — RAID 0 has
//! no member to spare), every acknowledged byte reads back, the reshape finishes, and the
//! next opens serve the new shape with its new size.

use futures::executor::block_on;
use futures::future::{select, BoxFuture, Either};
use futures::task::AtomicWaker;
use futures::FutureExt;
use nbraid_core::metadata::disk_rule::Consent;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta, METADATA_AREA_BYTES, SLOT_BYTES};
use nbraid_core::{
    Buf, Member, MemberCounters, MemberResult, MemoryMember, PassControl, PassState, SharedBuf,
    VolumeOptions,
};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use nbraid_sim::{Faulty, Rng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const REGION: u64 = 192 * KIB;

/// Each member's region and whether the volume keeps a partial-parity log (a 1 MiB strip's
/// log does not fit the metadata area).
#[derive(Clone, Copy)]
struct Sizes {
    region: u64,
    ppl: bool,
}

const SMALL: Sizes = Sizes {
    region: REGION,
    ppl: true,
};

/// Where the power goes: once member 0 issues its `cut_at`-th superblock write (counted
/// from when armed), every write and flush of the `lost` members hangs — their share of
/// that commit never lands — while the other members' writes of the same commit complete.
#[derive(Default)]
struct Power {
    armed: AtomicBool,
    /// Superblock writes member 0 issued since armed: one per commit it takes part in.
    commits: AtomicU64,
    cut_at: AtomicU64,
    lost: Mutex<Vec<usize>>,
    cut: AtomicBool,
    waker: AtomicWaker,
}

impl Power {
    fn arm(&self, cut_at: Option<u64>, lost: &[usize]) {
        self.commits.store(0, SeqCst);
        self.cut_at.store(cut_at.unwrap_or(u64::MAX), SeqCst);
        *self.lost.lock().unwrap() = lost.to_vec();
        self.cut.store(false, SeqCst);
        self.armed.store(true, SeqCst);
    }

    fn disarm(&self) {
        self.armed.store(false, SeqCst);
        self.cut.store(false, SeqCst);
    }

    /// Counts a superblock write of member `index`; true when this write must hang.
    fn hangs(&self, index: usize, offset: u64) -> bool {
        if !self.armed.load(SeqCst) {
            return false;
        }
        if index == 0 && offset < 2 * SLOT_BYTES {
            let n = self.commits.fetch_add(1, SeqCst);
            if n == self.cut_at.load(SeqCst) {
                self.cut.store(true, SeqCst);
                self.waker.wake();
            }
        }
        self.cut.load(SeqCst) && self.lost.lock().unwrap().contains(&index)
    }

    /// Ready once the power is cut.
    fn cut(&self) -> impl std::future::Future<Output = ()> + '_ {
        futures::future::poll_fn(|cx| {
            self.waker.register(cx.waker());
            if self.cut.load(SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }
}

/// A crash-simulator member whose writes hang once [`Power`] says so.
struct Cutting {
    disk: Arc<Faulty<MemoryMember>>,
    index: usize,
    power: Arc<Power>,
}

impl Member for Cutting {
    fn name(&self) -> &str {
        self.disk.name()
    }
    fn len(&self) -> u64 {
        self.disk.len()
    }
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        self.disk.read(offset, buf)
    }
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        if self.power.hangs(self.index, offset) {
            return futures::future::pending().boxed();
        }
        self.disk.write(offset, data, fua)
    }
    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        if self.power.hangs(self.index, u64::MAX) {
            return futures::future::pending().boxed();
        }
        self.disk.flush()
    }
    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        if self.power.hangs(self.index, u64::MAX) {
            return futures::future::pending().boxed();
        }
        self.disk.trim(offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        if self.power.hangs(self.index, u64::MAX) {
            return futures::future::pending().boxed();
        }
        self.disk.write_zeroes(offset, len)
    }
    fn counters(&self) -> &MemberCounters {
        self.disk.counters()
    }
}

fn tree(level: Level, members: usize, strip: u64) -> Node {
    tree_of(level, members, strip, REGION)
}

fn tree_of(level: Level, members: usize, strip: u64, region: u64) -> Node {
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

fn opts(sizes: Sizes) -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions::default(),
        bitmap_chunk_bytes: Some(64 * KIB),
        ppl: sizes.ppl,
        bitmap_clear_delay: Duration::ZERO,
        ..ArrayOptions::default()
    }
}

async fn metas(members: &[Arc<Cutting>]) -> Vec<Arc<MemberMeta>> {
    let mut out = Vec::new();
    for m in members {
        out.push(MemberMeta::load(m.clone() as Arc<dyn Member>).await);
    }
    out
}

/// Opens the volume; refused when any role is untrusted (absent or resynced as stale).
async fn open(
    sizes: Sizes,
    config: &Node,
    members: &[Arc<Cutting>],
    when: &str,
) -> Result<Array, String> {
    let m = metas(members).await.into_iter().map(Some).collect();
    let (a, report) = Array::open("vol", config, m, opts(sizes), &|_, _| {})
        .await
        .map_err(|e| format!("{when}: {e}"))?;
    if !report.absent_roles.is_empty() || !report.resynced_roles.is_empty() {
        return Err(format!(
            "{when}: roles absent {:?}, stale {:?} after one torn commit ({:?})",
            report.absent_roles, report.resynced_roles, report.warnings
        ));
    }
    Ok(a)
}

/// What the volume must read: `want`, except that the client write cut before its
/// acknowledgement may read either way.
struct Expected {
    want: Vec<u8>,
    unacked: Option<(usize, Vec<u8>)>,
}

impl Expected {
    async fn check(&self, a: &Array, when: &str) -> Result<(), String> {
        let back = (a.read(0, self.want.len() as u64).await).map_err(|e| format!("{when}: {e}"))?;
        let differs = back.iter().zip(&self.want).position(|(x, y)| x != y);
        let Some(at) = differs else { return Ok(()) };
        if let Some((start, data)) = &self.unacked {
            let mut other = self.want.clone();
            other[*start..*start + data.len()].copy_from_slice(data);
            if back[..] == other[..] {
                return Ok(());
            }
        }
        Err(format!("{when}: byte {at} differs"))
    }
}

/// One reshape from `old` to `new` with the power cut at member 0's `cut_at`-th superblock
/// write since the reshape started (`None`: never), the `lost` members missing that commit.
/// Returns how many commits member 0 took part in.
fn run(
    sizes: Sizes,
    (old, new): (&Node, &Node),
    cut_at: Option<u64>,
    lost: &[usize],
) -> Result<u64, String> {
    let power = Arc::new(Power::default());
    let members: Vec<Arc<Cutting>> = (0..new.member_count())
        .map(|i| {
            let m = MemoryMember::new(format!("m{i}"), METADATA_AREA_BYTES + sizes.region);
            Arc::new(Cutting {
                disk: Arc::new(Faulty::new(m, 7 + i as u64).with_power_loss()),
                index: i,
                power: power.clone(),
            })
        })
        .collect();
    let n_old = old.member_count();
    let mut rng = Rng::new(cut_at.unwrap_or(0) * 8 + lost.len() as u64);
    let mut expected = Expected {
        want: Vec::new(),
        unacked: None,
    };
    block_on(async {
        let created = Array::create(
            "vol",
            old.clone(),
            metas(&members[..n_old]).await,
            opts(sizes),
            true,
            &|_, _| {},
        )
        .await
        .map_err(|e| e.to_string())?
        .0;
        let cap = created.volume().capacity();
        expected.want = (0..cap).map(|_| rng.next_u64() as u8).collect();
        created
            .write(0, Buf::copy_from(&expected.want), false)
            .await
            .map_err(|e| e.to_string())?;
        created.flush().await.map_err(|e| e.to_string())?;
        created.mark_clean().await.map_err(|e| e.to_string())?;
        let added = metas(&members[n_old..]).await;
        let at = (rng.below(cap / 4096) * 4096) as usize;
        let data: Vec<u8> = (0..4096).map(|_| rng.next_u64() as u8).collect();
        expected.unacked = Some((at, data.clone()));
        power.arm(cut_at, lost);
        let (expected, members) = (&mut expected, &members);
        let reshape = async move {
            created
                .start_reshape(new.clone(), added, &Consent::default())
                .await
                .map_err(|e| format!("start: {e}"))?;
            let a = open(sizes, new, members, "open mid-reshape").await?;
            a.write(at as u64, Buf::copy_from(&data), true)
                .await
                .map_err(|e| e.to_string())?;
            expected.want[at..at + 4096].copy_from_slice(&data);
            expected.unacked = None;
            a.set_reshape_window_bytes(1); // one unit a window: many checkpoints
            let at = a.reshape_progress().map_or(0, |p| p.0); // a grow in place: the end
            let state = a
                .reshape(&PassControl::resume_at(0, at))
                .await
                .map_err(|e| e.to_string())?;
            assert_eq!(state, PassState::Done);
            Ok::<_, String>(())
        };
        match select(Box::pin(reshape), Box::pin(power.cut())).await {
            Either::Left((r, _)) => r,
            Either::Right(_) => Ok(()),
        }
    })?;
    let commits = power.commits.load(SeqCst);
    power.disarm();
    for m in &members {
        block_on(m.disk.crash(false)).map_err(|e| e.to_string())?;
    }
    block_on(async {
        let a = match open(sizes, new, &members, "open after the torn commit").await {
            // A start that reached no member (a grow in place adds none to write first): the
            // volume is as it was, and the start is simply made again.
            Err(e)
                if cut_at == Some(0)
                    && n_old == new.member_count()
                    && e.contains("the superblocks record") =>
            {
                let a = open(sizes, old, &members[..n_old], "open in the old shape").await?;
                expected
                    .check(&a, "in the old shape after a start that reached no member")
                    .await?;
                (a.start_reshape(new.clone(), Vec::new(), &Consent::default())
                    .await)
                    .map_err(|e| format!("the start again: {e}"))?;
                drop(a);
                open(sizes, new, &members, "open after the start again").await?
            }
            other => other?,
        };
        expected.check(&a, "after the torn commit").await?;
        if let Some((position, _)) = a.reshape_progress() {
            a.set_reshape_window_bytes(64 * KIB);
            let state = a
                .reshape(&PassControl::resume_at(0, position))
                .await
                .map_err(|e| e.to_string())?;
            assert_eq!(state, PassState::Done);
        }
        drop(a);
        for when in ["open in the new shape", "open in the new shape again"] {
            let a = open(sizes, new, &members, when).await?;
            if a.reshape_progress().is_some() {
                return Err(format!("{when}: a reshape is still recorded"));
            }
            if a.volume().capacity() != new.capacity() {
                return Err(format!(
                    "{when}: capacity {} is not the new shape's",
                    a.volume().capacity()
                ));
            }
            expected.check(&a, when).await?;
        }
        Ok(commits)
    })
}

/// Every commit of the move, torn with each member alone missing it and each alone
/// getting it.
fn sweep(old: Node, new: Node) {
    sweep_sized(SMALL, old, new)
}

fn sweep_sized(sizes: Sizes, old: Node, new: Node) {
    let commits = run(sizes, (&old, &new), None, &[]).expect("the untorn reshape");
    assert!(
        commits >= 2,
        "a reshape commits its start (and checkpoints) and end"
    );
    let n = new.member_count();
    let mut failures = Vec::new();
    for cut_at in 0..commits {
        for member in 0..n {
            let others: Vec<usize> = (0..n).filter(|&m| m != member).collect();
            for lost in [vec![member], others] {
                if let Err(e) = run(sizes, (&old, &new), Some(cut_at), &lost) {
                    failures.push(format!("commit {cut_at}, members {lost:?} missed it: {e}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} torn commits failed:\n{}",
        failures.len(),
        commits * 2 * n as u64,
        failures.join("\n")
    );
}

#[test]
fn raid0_every_torn_commit_of_a_reshape_is_recovered() {
    sweep(
        tree(Level::Raid0, 2, 16 * KIB),
        tree(Level::Raid0, 3, 16 * KIB),
    );
}

#[test]
fn raid5_every_torn_commit_of_a_reshape_is_recovered() {
    sweep(
        tree(Level::Raid5, 3, 8 * KIB),
        tree(Level::Raid5, 4, 8 * KIB),
    );
}

/// Regions grown in place: the start records the position at the old capacity with no
/// member added, the pass zeroes the new space, the end commits the grown tree — each commit
/// torn (a member that missed the start holds the same member list and no reshape).
#[test]
fn raid5_every_torn_commit_of_a_grow_in_place_is_recovered() {
    sweep(
        tree_of(Level::Raid5, 3, 8 * KIB, REGION / 2),
        tree(Level::Raid5, 3, 8 * KIB),
    );
}

/// The data members stay as many: every window is backed up, so every backup commit is
/// torn too (a restart writes the backup back where the newest record names it).
#[test]
fn raid5_to_raid6_every_torn_commit_of_a_reshape_is_recovered() {
    sweep(
        tree(Level::Raid5, 3, 8 * KIB),
        tree(Level::Raid6, 4, 8 * KIB),
    );
}

/// A 512 KiB strip: the old members' shares of a window (two strips each) do not fit their
/// metadata areas, so they are backed up in the pool in the added member's region tail — every commit torn,
/// the start's included (an old member that missed it is given its home again at the open).
#[test]
fn raid5_with_512_kib_strips_every_torn_commit_of_a_pooled_reshape_is_recovered() {
    let (strip, region) = (512 * KIB, 6 * MIB);
    let sizes = Sizes { region, ppl: false };
    sweep_sized(
        sizes,
        tree_of(Level::Raid5, 3, strip, region),
        tree_of(Level::Raid5, 4, strip, region),
    );
}

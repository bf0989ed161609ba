//! A reshape goes on after a restart without a member recorded failed whose disk is gone.
//!
//! Each member keeps its own share of a window's backup. A failed member's share is never
//! needed: its role is degraded in both trees, its chunks rebuilt from the redundancy of
//! whichever tree serves them. A live run already went on past such a failure; after a
//! restart the reshape once stopped for good ("cannot go on after a restart without failed
//! role N"), and with rebuild and replace refused while a reshape is pending, the volume
//! stayed degraded with no way back to redundancy.
//!
//! Per move (RAID 5 3→4, RAID 6 4→5, RAID 5 3→RAID 6 4) and strip: a volume filled with
//! seeded bytes, the reshape started and its first window copied, then a member — one of the
//! old tree, or the added one — lost and recorded failed. The volume opens again without
//! it, the reshape resumes and finishes, every byte reads back, in the new shape alone too; a
//! fresh member rebuilt into the failed role brings it back to redundancy, and every byte
//! reads back with any one member lost after (and the failed disk, back, is not trusted).
//! Variants cut the power inside a backed-up window: after the failure (its share never
//! written), and with the member dying just after writing its share of the window (only the
//! survivors' shares written back at the restart). RAID 6 goes on without two.
//!
//! What still stops the reshape, by name: more roles out than a shape survives; a role
//! missing at the start, not recorded failed (it may come back with its data and its share;
//! an added role, or an old one whose share lives in the pool of 1 MiB strips, once did not
//! stop it, and the member back was taken as current in the new shape: garbage served as
//! data); and the pool's own member failed and gone (every share went with it).

mod common;

use common::arrays::{load, never, same};

use common::KIB;
use futures::channel::oneshot;
use futures::executor::block_on;
use futures::future::{select, BoxFuture, Either};
use futures::FutureExt;
use nbraid_core::metadata::disk_rule::Consent;
use nbraid_core::metadata::{Array, ArrayOptions, METADATA_AREA_BYTES};
use nbraid_core::{Buf, Member, MemberCounters, MemberError, MemberOp, MemberResult};
use nbraid_core::{MemoryMember, PassControl, PassState, SharedBuf, VolumeOptions};
use nbraid_layout::{Level, Node};
use nbraid_sim::{Faulty, Rng};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

const REGION: u64 = 384 * KIB;
const MEMBER_BYTES: u64 = METADATA_AREA_BYTES + REGION;
/// How the backup of a window begins on its member (`metadata/reshape_run.rs`).
const BACKUP_MAGIC: &[u8] = b"NBRSHBK1";
const STRIPS: [u64; 2] = [4 * KIB, 16 * KIB];
/// Bytes the test reads or writes at most in one request (below the engine's limit).
const PIECE_BYTES: usize = 4 << 20;

type Disk = Arc<Faulty<MemoryMember>>;

fn tree(level: Level, members: usize, strip: u64) -> Node {
    common::level_tree(level, members, strip, METADATA_AREA_BYTES, REGION)
}

/// The moves, each with the roles to fail: one of the old tree and the added one.
fn moves(strip: u64) -> Vec<(String, Node, Node)> {
    vec![
        (
            "raid5 3→4".into(),
            tree(Level::Raid5, 3, strip),
            tree(Level::Raid5, 4, strip),
        ),
        (
            "raid6 4→5".into(),
            tree(Level::Raid6, 4, strip),
            tree(Level::Raid6, 5, strip),
        ),
        (
            "raid5 3→raid6 4".into(),
            tree(Level::Raid5, 3, strip),
            tree(Level::Raid6, 4, strip),
        ),
    ]
}

/// The partial-parity log where it fits the metadata area (a 1 MiB strip's does not).
fn opts(tree: &Node) -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions::default(),
        bitmap_chunk_bytes: Some(64 * KIB),
        ppl: tree
            .full_stripe_width()
            .is_some_and(|w| w < 3 * common::MIB),
        bitmap_clear_delay: Duration::ZERO,
        ..ArrayOptions::default()
    }
}

fn disk(name: String, seed: u64) -> Disk {
    disk_of(name, seed, MEMBER_BYTES)
}

fn disk_of(name: String, seed: u64, bytes: u64) -> Disk {
    Arc::new(Faulty::new(MemoryMember::new(name, bytes), seed).with_power_loss())
}

/// What happens to the watched members' I/O (see [`Watched`]).
#[derive(Default)]
struct Trip {
    /// The member whose backup write and copy mark the stages (one that stays).
    watched: usize,
    stage: Mutex<Stage>,
    /// Cancelled at the watched member's first backup write: the pass stops after that window.
    cancel: Option<Arc<PassControl>>,
    /// Told when the power goes; `None`: the power never goes.
    cut: Mutex<Option<oneshot::Sender<()>>>,
    /// The role whose disk dies just after writing its share of a window's backup: its
    /// next flush fails, and every op after it.
    dies: Option<usize>,
    dead: Mutex<bool>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Stage {
    #[default]
    On,
    BackedUp,
    Copying,
    Off,
}

impl Trip {
    fn is_off(&self) -> bool {
        *self.stage.lock() == Stage::Off
    }

    fn is_dead(&self, index: usize) -> bool {
        self.dies == Some(index) && *self.dead.lock()
    }

    /// Member `index`'s write at `offset` beginning with `head`.
    fn wrote(&self, index: usize, offset: u64, head: &[u8]) {
        let backup = head.starts_with(BACKUP_MAGIC);
        if backup && self.dies == Some(index) {
            *self.dead.lock() = true; // from its next op on (the write itself lands)
        }
        let mut stage = self.stage.lock();
        *stage = match *stage {
            Stage::On if index == self.watched && backup => {
                if let Some(ctl) = &self.cancel {
                    ctl.cancel();
                }
                Stage::BackedUp
            }
            Stage::BackedUp if index == self.watched && offset >= METADATA_AREA_BYTES => {
                Stage::Copying
            }
            s => s,
        };
    }

    /// Whether member `index`'s flush is the cut: the watched member's first after a backup
    /// and a copy's write (the copy made durable, before the checkpoint).
    fn flushing(&self, index: usize) -> bool {
        let mut stage = self.stage.lock();
        let armed = self.cut.lock().is_some();
        if index == self.watched && *stage == Stage::Copying && armed {
            *stage = Stage::Off;
            if let Some(tx) = self.cut.lock().take() {
                let _ = tx.send(());
            }
        }
        *stage == Stage::Off
    }
}

/// A member whose ops follow a [`Trip`]: they never return once the power is off, and fail
/// once its disk died.
struct Watched {
    inner: Disk,
    index: usize,
    trip: Arc<Trip>,
}

impl Watched {
    fn dead<T: Send + 'static>(&self, op: MemberOp) -> BoxFuture<'static, MemberResult<T>> {
        let e = std::io::Error::other("the disk died (the test)");
        futures::future::ready(Err(MemberError::new(self.name(), op, 0, 0, e))).boxed()
    }
}

impl Member for Watched {
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        if self.trip.is_off() {
            return never();
        }
        if self.trip.is_dead(self.index) {
            return self.dead(MemberOp::Read);
        }
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        if self.trip.is_off() {
            return never();
        }
        if self.trip.is_dead(self.index) {
            return self.dead(MemberOp::Write);
        }
        self.trip.wrote(self.index, offset, &data[..]);
        self.inner.write(offset, data, fua)
    }
    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        if self.trip.flushing(self.index) {
            return never();
        }
        if self.trip.is_dead(self.index) {
            return self.dead(MemberOp::Flush);
        }
        self.inner.flush()
    }
    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        match self.trip.is_off() {
            true => never(),
            false => self.inner.trim(offset, len),
        }
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        match self.trip.is_off() {
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

/// Opens the volume over `disks` (in role order) without the roles in `gone`, each member
/// watched by `trip` when one is given.
fn open(config: &Node, disks: &[Disk], gone: &[usize], trip: Option<&Arc<Trip>>) -> Array {
    let metas = disks.iter().enumerate().map(|(index, d)| {
        let m: Arc<dyn Member> = match trip {
            Some(trip) => Arc::new(Watched {
                inner: d.clone(),
                index,
                trip: trip.clone(),
            }),
            None => d.clone(),
        };
        (!gone.contains(&index)).then(|| load(m))
    });
    let opened = Array::open("vol", config, metas.collect(), opts(config), &|_, _| {});
    block_on(opened).expect("opens").0
}

/// A volume of `old` filled with seeded bytes and the reshape into `new` started (the added
/// members on the disks after the old ones): the disks and the bytes.
fn started(old: &Node, new: &Node, seed: u64) -> (Vec<Disk>, Vec<u8>) {
    let disks: Vec<Disk> = (0..new.member_count())
        .map(|i| disk(format!("m{i}"), seed * 31 + i as u64))
        .collect();
    let want = started_over(old, new, &disks, seed);
    (disks, want)
}

/// [`started`] over `disks`: the bytes.
fn started_over(old: &Node, new: &Node, disks: &[Disk], seed: u64) -> Vec<u8> {
    let n_old = old.member_count();
    let metas: Vec<_> = disks.iter().map(|d| load(d.clone())).collect();
    let created = Array::create(
        "vol",
        old.clone(),
        metas[..n_old].to_vec(),
        opts(old),
        true,
        &|_, _| {},
    );
    let created = block_on(created).expect("create").0;
    let mut rng = Rng::new(seed);
    let want: Vec<u8> = (0..created.volume().capacity())
        .map(|_| rng.next_u64() as u8)
        .collect();
    block_on(async {
        for (i, piece) in want.chunks(PIECE_BYTES).enumerate() {
            let at = (i * PIECE_BYTES) as u64;
            created.write(at, Buf::copy_from(piece), false).await?;
        }
        created.flush().await?;
        created.mark_clean().await.map(|_| ())
    })
    .expect("fill");
    let added = metas[n_old..].to_vec();
    block_on(created.start_reshape(new.clone(), added, &Consent::default())).expect("start");
    want
}

/// How the failed member goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loss {
    /// Failed and recorded, then the volume opens again without it.
    Failed,
    /// As `Failed`, then the power goes inside the next backed-up window.
    FailedThenCut,
    /// Its disk dies just after writing its share of a window's backup, then the power
    /// goes before that window's checkpoint.
    DiesInsideTheWindow,
}

/// The reshape's first window copied (and checkpointed) with every member in place; the
/// position after it.
fn first_window(new: &Node, disks: &[Disk]) -> Result<u64, String> {
    let ctl = Arc::new(PassControl::new(0));
    let trip = Arc::new(Trip {
        cancel: Some(ctl.clone()),
        ..Trip::default()
    });
    let a = open(new, disks, &[], Some(&trip));
    a.set_reshape_window_bytes(1); // one unit a window
    let state = block_on(a.reshape(&ctl)).map_err(|e| format!("first window: {e}"))?;
    assert_eq!(
        state,
        PassState::Cancelled,
        "stopped after the first window"
    );
    let (position, cap) = a.reshape_progress().expect("reshaping");
    assert!(position > 0 && position < cap, "{position} of {cap}");
    Ok(position)
}

/// One move with the roles `gone` lost as `loss` (the first one dying, for
/// [`Loss::DiesInsideTheWindow`]); `Err` says what was lost.
fn degraded_restart(old: &Node, new: &Node, gone: &[usize], loss: Loss) -> Result<(), String> {
    let (mut disks, mut want) = started(old, new, 5 + gone[0] as u64);
    let cap = want.len() as u64;
    let mut position = first_window(new, &disks)?;
    let failed = gone[0];
    let watched = (0..).find(|r| !gone.contains(r)).expect("a member stays");
    if loss == Loss::DiesInsideTheWindow {
        let (tx, cut) = oneshot::channel();
        let trip = Arc::new(Trip {
            watched,
            cut: Mutex::new(Some(tx)),
            dies: Some(failed),
            ..Trip::default()
        });
        let a = open(new, &disks, &[], Some(&trip));
        a.set_reshape_window_bytes(1);
        cut_the_power(&a, position, cut, &disks, gone)?;
    } else {
        let a = open(new, &disks, &[], None);
        for &r in gone {
            a.volume().fail_member(r, "lost by the test");
        }
        block_on(a.record_failures()).map_err(|e| e.to_string())?;
        // Written while degraded, past the position (the old tree serves it).
        let at = (cap / 2 / 4096 * 4096) as usize;
        want[at..at + 8192].fill(0xa7);
        block_on(a.write(at as u64, Buf::copy_from(&want[at..at + 8192]), true))
            .map_err(|e| e.to_string())?;
        // Shut down clean: a dirty start with a role out is refused mid-reshape (its rows
        // may be torn; `tests/reshape_array.rs`).
        block_on(a.mark_clean()).map_err(|e| e.to_string())?;
        drop(a);
        if loss == Loss::FailedThenCut {
            let (tx, cut) = oneshot::channel();
            let trip = Arc::new(Trip {
                watched,
                cut: Mutex::new(Some(tx)),
                ..Trip::default()
            });
            let a = open(new, &disks, gone, Some(&trip));
            a.set_reshape_window_bytes(1);
            cut_the_power(&a, position, cut, &disks, gone)?;
        }
    }
    let a = open(new, &disks, gone, None);
    if loss != Loss::Failed {
        let now = a.reshape_progress().map_or(cap, |p| p.0);
        if now != position {
            return Err(format!(
                "the cut landed after the checkpoint ({now}, not {position})"
            ));
        }
        same(&a, &want, "after the power cut")?;
    }
    position = a.reshape_progress().map_or(cap, |p| p.0);
    let state = block_on(a.reshape(&PassControl::resume_at(0, position)))
        .map_err(|e| format!("resuming without roles {gone:?}: {e}"))?;
    assert_eq!(state, PassState::Done);
    same(&a, &want, "reshaped degraded")?;
    drop(a);
    let mut a = open(new, &disks, gone, None);
    assert_eq!(a.reshape_progress(), None, "no reshape left");
    assert_eq!(a.volume().capacity(), new.capacity(), "the new size");
    same(&a, &want, "in the new shape, degraded")?;
    if loss != Loss::DiesInsideTheWindow {
        // The failed members' disks back (in the old shape): recorded failed, never trusted.
        drop(a);
        let back = open(new, &disks, &[], None);
        let mut wanting = back.roles_wanting_a_member();
        wanting.sort_unstable();
        assert_eq!(wanting, gone.to_vec(), "still failed when back");
        same(&back, &want, "the failed members' disks back")?;
        drop(back);
        a = open(new, &disks, gone, None);
    }
    // Back to redundancy: a fresh member rebuilt into each failed role.
    for &r in gone {
        let fresh = disk(format!("m{r}-new"), 99);
        block_on(a.rebuild_onto(r, load(fresh.clone())))
            .map_err(|e| format!("rebuild onto: {e}"))?;
        disks[r] = fresh;
    }
    let report = block_on(a.rebuild(&PassControl::new(0))).map_err(|e| format!("rebuild: {e}"))?;
    let mut rebuilt = report.completed.clone();
    rebuilt.sort_unstable();
    assert_eq!(rebuilt, gone.to_vec(), "rebuilt");
    block_on(a.mark_clean()).map_err(|e| e.to_string())?;
    same(&a, &want, "rebuilt")?;
    drop(a);
    for r in 0..new.member_count() {
        let a = open(new, &disks, &[], None);
        assert_eq!(a.roles_wanting_a_member(), Vec::<usize>::new(), "healthy");
        a.volume().fail_member(r, "lost after by the test");
        same(&a, &want, &format!("healthy again, then member {r} lost"))?;
    }
    Ok(())
}

/// Runs `a`'s pass from `position` until `cut` says the power went, then the power goes on
/// every disk but those `gone` (unflushed writes lost, a seeded subset kept).
fn cut_the_power(
    a: &Array,
    position: u64,
    cut: oneshot::Receiver<()>,
    disks: &[Disk],
    gone: &[usize],
) -> Result<(), String> {
    let ctl = PassControl::resume_at(0, position);
    let ended = block_on(async {
        match select(Box::pin(a.reshape(&ctl)), cut).await {
            Either::Left((r, _)) => Err(format!("the pass ended before the cut: {r:?}")),
            Either::Right(_) => Ok(()),
        }
    });
    ended?;
    for (i, d) in disks.iter().enumerate() {
        if !gone.contains(&i) {
            block_on(d.crash(true)).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

fn every_move(losses: &[Loss], old_roles_only: bool) {
    let mut failures = Vec::new();
    for strip in STRIPS {
        for (name, old, new) in moves(strip) {
            let added = old.member_count();
            let roles = if old_roles_only {
                vec![1]
            } else {
                vec![1, added]
            };
            for failed in roles {
                for &loss in losses {
                    if let Err(e) = degraded_restart(&old, &new, &[failed], loss) {
                        failures.push(format!(
                            "{name}, strip {} KiB, role {failed} {loss:?}: {e}",
                            strip / KIB
                        ));
                    }
                }
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
fn a_reshape_goes_on_after_a_restart_without_a_failed_member() {
    every_move(&[Loss::Failed], false);
}

#[test]
fn a_power_cut_inside_a_backed_up_window_after_a_failure_is_recovered() {
    every_move(&[Loss::FailedThenCut], false);
}

/// Its share of the window was written, then lost with it: the survivors' shares rebuild
/// the old tree's view of the window (the failed role's chunks come from the redundancy).
#[test]
fn a_member_dying_inside_a_backed_up_window_is_not_needed_to_restore_it() {
    every_move(&[Loss::DiesInsideTheWindow], true);
}

/// RAID 6 survives two members lost in both shapes: one of the old tree and the added one,
/// or two of the old tree — the reshape goes on without both.
#[test]
fn a_raid6_reshape_goes_on_without_two_failed_members() {
    let mut failures = Vec::new();
    for strip in STRIPS {
        let (old, new) = (tree(Level::Raid6, 4, strip), tree(Level::Raid6, 5, strip));
        for gone in [[1, 4], [0, 2]] {
            for loss in [Loss::Failed, Loss::FailedThenCut] {
                if let Err(e) = degraded_restart(&old, &new, &gone, loss) {
                    failures.push(format!(
                        "strip {} KiB, roles {gone:?} {loss:?}: {e}",
                        strip / KIB
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A RAID 5 growing by one member, one of the old tree recorded failed and gone, and the
/// added one failing too before the copy resumes: the old shape serves the bytes not copied
/// yet, but the new one would lose two of four (the volume would not even open so) — the
/// reshape says so and copies nothing, and every byte still reads back from the old shape.
#[test]
fn a_reshape_without_more_members_than_a_shape_survives_says_so() {
    let (old, new) = (
        tree(Level::Raid5, 3, 4 * KIB),
        tree(Level::Raid5, 4, 4 * KIB),
    );
    let (disks, want) = started(&old, &new, 13);
    let a = open(&new, &disks, &[], None);
    a.volume().fail_member(1, "lost by the test");
    block_on(a.record_failures()).unwrap();
    drop(a);
    let a = open(&new, &disks, &[1], None);
    a.volume().fail_member(3, "lost by the test");
    let e = block_on(a.reshape(&PassControl::new(0)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("without roles 1, 3")
            && e.contains("more than the old or the new shape survives"),
        "{e}"
    );
    let cap = want.len() as u64;
    assert_eq!(a.reshape_progress(), Some((0, cap)), "nothing copied");
    same(&a, &want, "in the old shape, degraded").unwrap();
}

/// RAID 5 of 4 → RAID 6 of 5 with 1 MiB strips: a window's rows (a strip per member) fit no
/// metadata area, so every old role keeps its share in the pool after the added member's
/// region (`metadata/reshape_backup.rs`). The members (role 4 the pool's holder), and the
/// trees.
fn pooled(seed: u64) -> (Vec<Disk>, Vec<u8>, Node) {
    let strip = common::MIB;
    let region = 12 * strip;
    let member = METADATA_AREA_BYTES + region;
    let pool_room = 4 * (strip + 4 * KIB);
    let tree = |level, n| common::level_tree(level, n, strip, METADATA_AREA_BYTES, region);
    let (old, new) = (tree(Level::Raid5, 4), tree(Level::Raid6, 5));
    let disks: Vec<Disk> = (0..5)
        .map(|i| {
            let bytes = if i == 4 { member + pool_room } else { member };
            disk_of(format!("m{i}"), seed * 31 + i as u64, bytes)
        })
        .collect();
    let want = started_over(&old, &new, &disks, seed);
    (disks, want, new)
}

/// A role whose share is in the pool, recorded failed and gone: its slot is simply not
/// used, and the reshape goes on and finishes.
#[test]
fn a_pooled_role_failed_and_gone_is_skipped() {
    let (disks, want, new) = pooled(21);
    let a = open(&new, &disks, &[], None);
    a.volume().fail_member(1, "lost by the test");
    block_on(a.record_failures()).unwrap();
    drop(a);
    let a = open(&new, &disks, &[1], None);
    let state = block_on(a.reshape(&PassControl::new(0))).unwrap();
    assert_eq!(state, PassState::Done);
    same(&a, &want, "reshaped degraded").unwrap();
}

/// The pool's holder is the added member: recorded failed and gone, it took every old role's
/// share with it, and no window has a backup home. The reshape says so by name (not as if
/// the old roles were missing) and copies nothing; the volume serves every byte.
#[test]
fn the_pools_member_failed_and_gone_stops_the_reshape_by_name() {
    let (disks, want, new) = pooled(22);
    let a = open(&new, &disks, &[], None);
    a.volume().fail_member(4, "lost by the test");
    block_on(a.record_failures()).unwrap();
    drop(a);
    let a = open(&new, &disks, &[4], None);
    let e = block_on(a.reshape(&PassControl::new(0)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("roles 0, 1, 2, 3 keep their share")
            && e.contains("pool on the first added member"),
        "{e}"
    );
    same(&a, &want, "degraded, nothing copied").unwrap();
}

/// A role of the old tree missing at the start (not recorded failed) waits for its member
/// even when its share lives in the pool, on a member that is there: it may come back with
/// its data. (The pool once gave it a home, and the reshape went on without it.) With the
/// member back, the reshape finishes and every byte reads back, with any one member lost.
#[test]
fn a_pooled_role_missing_at_the_start_waits_for_its_member() {
    let (disks, want, new) = pooled(23);
    let a = open(&new, &disks, &[1], None);
    let e = block_on(a.reshape(&PassControl::new(0)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("without role 1"), "{e}");
    drop(a);
    let a = open(&new, &disks, &[], None);
    let state = block_on(a.reshape(&PassControl::new(0))).unwrap();
    assert_eq!(state, PassState::Done);
    same(&a, &want, "member 1 back, reshaped").unwrap();
    drop(a);
    for r in 0..new.member_count() {
        let a = open(&new, &disks, &[], None);
        a.volume().fail_member(r, "lost after by the test");
        same(&a, &want, &format!("member {r} lost after")).unwrap();
    }
}

/// An added member missing at a restart (not recorded failed) stops the copy as an old one
/// does: the copy's writes to it would go unwritten, unknown to the bitmap that resyncs it
/// when it comes back. (It once went on; the member back was taken as current in the new
/// shape, its chunks never written: garbage served as data.) With the member back (the
/// open leaves it out, recorded failed: nothing resyncs an added member mid-reshape) the
/// reshape finishes, the member is re-added and rebuilt in the new shape, and every byte
/// reads back with any one member lost.
#[test]
fn an_added_member_missing_at_a_restart_is_waited_for() {
    let (old, new) = (
        tree(Level::Raid5, 3, 4 * KIB),
        tree(Level::Raid5, 4, 4 * KIB),
    );
    let (disks, want) = started(&old, &new, 31);
    let a = open(&new, &disks, &[3], None);
    let e = block_on(a.reshape(&PassControl::new(0)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("without role 3"), "{e}");
    same(&a, &want, "without member 3").unwrap();
    drop(a);
    let a = open(&new, &disks, &[], None);
    let state = block_on(a.reshape(&PassControl::new(0))).unwrap();
    assert_eq!(state, PassState::Done);
    same(&a, &want, "member 3 back, reshaped").unwrap();
    drop(a);
    let a = open(&new, &disks, &[], None);
    for r in a.roles_wanting_a_member() {
        block_on(a.readd(r)).unwrap();
    }
    block_on(a.rebuild(&PassControl::new(0))).unwrap();
    block_on(a.mark_clean()).unwrap();
    assert_eq!(a.roles_wanting_a_member(), Vec::<usize>::new(), "healthy");
    drop(a);
    for r in 0..new.member_count() {
        let a = open(&new, &disks, &[], None);
        a.volume().fail_member(r, "lost after by the test");
        same(&a, &want, &format!("member {r} lost after")).unwrap();
    }
}

/// A member missing at the start whose disk is gone for good: the operator fails it
/// (`nbraid fail`), which records it failed, and the reshape goes on without it — in the
/// same run, and after a restart. (The fail of a member already out was recorded as
/// "rebuilding from 0", which still waited for it: nothing could finish the reshape.) The
/// disk found again later stays out; a fresh member rebuilt into its role brings the volume
/// back to redundancy, and every byte reads back with any one member lost. An old role and
/// the added one.
#[test]
fn a_missing_member_the_operator_fails_lets_the_reshape_go_on() {
    use nbraid_core::fail_cause::{Because, FailCause};
    let (old, new) = (
        tree(Level::Raid5, 3, 4 * KIB),
        tree(Level::Raid5, 4, 4 * KIB),
    );
    for (gone, restart) in [(1, false), (3, true)] {
        let (mut disks, want) = started(&old, &new, 41 + gone as u64);
        let a = open(&new, &disks, &[gone], None);
        let e = block_on(a.reshape(&PassControl::new(0))).unwrap_err();
        assert!(
            e.to_string().contains(&format!("without role {gone}")),
            "{e}"
        );
        let operator = Because(FailCause::Operator, "failed by the operator (nbraid fail)");
        a.volume().fail_member(gone, &operator);
        block_on(a.record_failures()).expect("recorded");
        let a = match restart {
            true => {
                drop(a);
                open(&new, &disks, &[gone], None)
            }
            false => a,
        };
        let state = block_on(a.reshape(&PassControl::new(0))).expect("goes on");
        assert_eq!(state, PassState::Done, "role {gone} gone");
        same(&a, &want, &format!("reshaped without role {gone}")).unwrap();
        drop(a);
        // The disk back: recorded failed, not read.
        let a = open(&new, &disks, &[], None);
        assert_eq!(a.roles_wanting_a_member(), vec![gone], "stays out");
        same(&a, &want, "its disk back").unwrap();
        drop(a);
        let a = open(&new, &disks, &[gone], None);
        disks[gone] = disk(format!("m{gone}-new"), 99);
        block_on(a.rebuild_onto(gone, load(disks[gone].clone()))).expect("fresh member");
        let report = block_on(a.rebuild(&PassControl::new(0))).unwrap();
        assert_eq!(report.completed, vec![gone], "rebuilt");
        block_on(a.mark_clean()).unwrap();
        drop(a);
        for r in 0..new.member_count() {
            let a = open(&new, &disks, &[], None);
            assert_eq!(a.roles_wanting_a_member(), Vec::<usize>::new(), "healthy");
            a.volume().fail_member(r, "lost after by the test");
            same(
                &a,
                &want,
                &format!("role {gone} rebuilt, member {r} lost after"),
            )
            .unwrap();
        }
    }
}

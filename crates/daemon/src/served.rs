//! The array a volume serves, swappable while it serves ([`ServedArray`]): an online reshape
//! starts by writing the records that start it and opening the volume again over the same
//! members (the engine serves a reshaping volume as two trees), and ends by opening it again
//! as the new tree alone, with its new size. Between the two the NBD export, the control
//! socket and every background task find the array here, never keep their own.
//!
//! Every NBD request holds the gate shared while it runs; a swap holds it exclusive, so it
//! waits for the requests in flight and new ones wait for it (a client sees a pause, not an
//! error). A swap that fails after the records changed leaves the volume out of service: the
//! records on disk say what the next start serves, and the old array must not write again.

use nbraid_core::metadata::{newest_record, Array, ArrayError, ArrayOptions, MemberMeta, Probe};
use nbraid_core::{CounterSnapshot, VolumeCounters, VolumeError};
use nbraid_layout::Node;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::{RwLock as Gate, RwLockReadGuard, RwLockWriteGuard};

/// One volume's array, and the gate requests pass.
pub struct ServedArray {
    current: RwLock<Arc<Array>>,
    /// `Some(why)`: a swap failed half-way; every request is refused with `why`.
    gate: Gate<Option<String>>,
    /// The engine options the volume was opened with, for opening it again.
    options: RwLock<ArrayOptions>,
    /// Arrays served since the first: a watcher tells a swap by it.
    swaps: AtomicU64,
    /// When the array served now was opened, and by what: its counters (I/O, read and
    /// checksum errors and repairs) count from then — they are not recorded on disk.
    opened: RwLock<(SystemTime, Opened)>,
    /// What the arrays served before the one served now counted and it does not go on
    /// from (added at each swap, when the old array is quiet): with the current array's,
    /// counts that never go back ([`Self::counts`]).
    earlier: parking_lot::Mutex<Counts>,
}

/// What opened the array a volume serves now ([`ServedArray::opened`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opened {
    /// The daemon's start.
    Start,
    /// Opened again while serving (a reshape's start or end, copies added).
    Reopen,
}

impl Opened {
    pub fn name(self) -> &'static str {
        match self {
            Opened::Start => "daemon start",
            Opened::Reopen => "volume opened again",
        }
    }
}

/// A request's pass through the gate: the array it runs on, held while it runs.
pub struct Entered<'a> {
    _held: RwLockReadGuard<'a, Option<String>>,
    pub array: Arc<Array>,
}

/// A swap's hold on the gate: nothing in flight, nothing starting.
pub struct Quiet<'a> {
    held: RwLockWriteGuard<'a, Option<String>>,
}

impl ServedArray {
    pub fn new(array: Arc<Array>, options: ArrayOptions) -> ServedArray {
        ServedArray {
            current: RwLock::new(array),
            gate: Gate::new(None),
            options: RwLock::new(options),
            swaps: AtomicU64::new(0),
            opened: RwLock::new((SystemTime::now(), Opened::Start)),
            earlier: parking_lot::Mutex::default(),
        }
    }

    /// Everything the volume counted since the daemon started: the array served now, plus
    /// what the arrays it replaced counted — counters that only grow, whatever reshape
    /// opened the volume again.
    pub fn counts(&self) -> Counts {
        // Under the lock a swap holds while it carries and replaces: never the new array
        // without its carry, nor the old one with it.
        let earlier = self.earlier.lock();
        earlier.plus(&Counts::of(&self.get()))
    }

    /// When the array served now was opened, and by what (its counters count from then).
    pub fn opened(&self) -> (SystemTime, Opened) {
        *self.opened.read()
    }

    /// How many times the volume was opened again (see the module).
    pub fn swaps(&self) -> u64 {
        self.swaps.load(Ordering::Acquire)
    }

    /// The array served now (the next swap may replace it: keep it for one step only).
    pub fn get(&self) -> Arc<Array> {
        self.current.read().clone()
    }

    /// Waits for any swap, then holds the gate shared for one request; refused when a swap
    /// failed half-way.
    pub async fn enter(&self) -> Result<Entered<'_>, VolumeError> {
        let held = self.gate.read().await;
        if let Some(why) = held.as_ref() {
            return Err(VolumeError::Unavailable {
                reason: why.clone(),
            });
        }
        Ok(Entered {
            _held: held,
            array: self.get(),
        })
    }

    /// Holds the gate exclusive: returns once no request is in flight.
    pub async fn quiet(&self) -> Quiet<'_> {
        Quiet {
            held: self.gate.write().await,
        }
    }

    /// Opens the volume again over `members` (by role; `None`: none there) from what their
    /// superblocks say now, and serves that array from here on. `quiet` must be this
    /// array's; on an error the volume stops serving (see the module).
    pub async fn reopen(
        &self,
        quiet: &mut Quiet<'_>,
        members: &[Option<Arc<MemberMeta>>],
        options: Option<ArrayOptions>,
    ) -> Result<Arc<Array>, ArrayError> {
        if let Some(o) = options {
            *self.options.write() = o;
        }
        let name = self.get().name().to_string();
        let opts = self.options.read().clone();
        match open_again(&name, members, opts).await {
            Ok(array) => {
                let array = Arc::new(array);
                // Quiet: the old array counts nothing more.
                let ended = Counts::of(&self.get());
                let mut earlier = self.earlier.lock();
                earlier.carry(&ended, &Counts::of(&array));
                *self.current.write() = array.clone();
                drop(earlier);
                *self.opened.write() = (SystemTime::now(), Opened::Reopen);
                self.swaps.fetch_add(1, Ordering::Release);
                Ok(array)
            }
            Err(e) => {
                *quiet.held = Some(format!(
                    "volume {name}: opening it again failed ({e}): restart nbraidd"
                ));
                Err(e)
            }
        }
    }
}

/// An array's counters at one moment: the volume's, and each member's by its name (its
/// path: it stays the member's whatever role it holds).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub volume: VolumeCounters,
    /// Requests and bytes sent to the member, and the read errors it returned.
    pub members: Vec<(String, CounterSnapshot, u64)>,
}

impl Counts {
    /// `array`'s counters now.
    pub fn of(array: &Array) -> Counts {
        let vol = array.volume();
        let members = (vol.member_health().into_iter().enumerate())
            .map(|(r, h)| (vol.member(r).name().to_string(), h.counters, h.read_errors))
            .collect();
        Counts {
            volume: vol.counters(),
            members,
        }
    }

    /// The counts of member `name`, if it has any.
    pub fn member(&self, name: &str) -> Option<(CounterSnapshot, u64)> {
        (self.members.iter())
            .find(|(n, _, _)| n == name)
            .map(|&(_, c, e)| (c, e))
    }

    /// These counts added to `now`'s (its members' by name; `in_flight` is `now`'s).
    pub fn plus(&self, now: &Counts) -> Counts {
        let members = (now.members.iter())
            .map(|(name, c, errors)| {
                let (before, before_errors) = self.member(name).unwrap_or_default();
                (name.clone(), add_member(*c, before), errors + before_errors)
            })
            .collect();
        Counts {
            volume: add_volume(now.volume, self.volume),
            members,
        }
    }

    /// Adds what array `ended` counted that `started`, the array opened in its place, does
    /// not go on counting from (a fresh volume starts at 0; a member's own counters may
    /// carry on): added to the array served now, the earlier arrays' counts never go back.
    pub fn carry(&mut self, ended: &Counts, started: &Counts) {
        let lost = |a: u64, b: u64| a.saturating_sub(b);
        self.volume = add_volume(self.volume, map_volume(ended.volume, started.volume, lost));
        for (name, c, errors) in &ended.members {
            let (now, now_errors) = started.member(name).unwrap_or_default();
            let gone = (map_member(*c, now, lost), lost(*errors, now_errors));
            match self.members.iter_mut().find(|(n, _, _)| n == name) {
                Some((_, c, e)) => (*c, *e) = (add_member(*c, gone.0), *e + gone.1),
                None => self.members.push((name.clone(), gone.0, gone.1)),
            }
        }
    }
}

/// `a` and `b` field by field through `f`.
fn map_volume(a: VolumeCounters, b: VolumeCounters, f: impl Fn(u64, u64) -> u64) -> VolumeCounters {
    VolumeCounters {
        reads: f(a.reads, b.reads),
        read_bytes: f(a.read_bytes, b.read_bytes),
        writes: f(a.writes, b.writes),
        write_bytes: f(a.write_bytes, b.write_bytes),
        flushes: f(a.flushes, b.flushes),
        trims: f(a.trims, b.trims),
        write_zeroes: f(a.write_zeroes, b.write_zeroes),
        errors: f(a.errors, b.errors),
        repairs: f(a.repairs, b.repairs),
    }
}

fn add_volume(a: VolumeCounters, b: VolumeCounters) -> VolumeCounters {
    map_volume(a, b, |x, y| x + y)
}

/// `a` and `b` field by field through `f`; `in_flight` is `a`'s (a gauge: not carried).
fn map_member(
    a: CounterSnapshot,
    b: CounterSnapshot,
    f: impl Fn(u64, u64) -> u64,
) -> CounterSnapshot {
    CounterSnapshot {
        reads: f(a.reads, b.reads),
        read_bytes: f(a.read_bytes, b.read_bytes),
        writes: f(a.writes, b.writes),
        write_bytes: f(a.write_bytes, b.write_bytes),
        flushes: f(a.flushes, b.flushes),
        trims: f(a.trims, b.trims),
        errors: f(a.errors, b.errors),
        in_flight: 0,
    }
}

fn add_member(a: CounterSnapshot, b: CounterSnapshot) -> CounterSnapshot {
    CounterSnapshot {
        in_flight: a.in_flight,
        ..map_member(a, b, |x, y| x + y)
    }
}

/// The members of `array` by role (its member table: added members included mid-reshape).
pub fn members_by_role(array: &Array) -> Vec<Option<Arc<MemberMeta>>> {
    (0..array.volume().member_count())
        .map(|r| array.member_meta(r))
        .collect()
}

/// Opens volume `name` over `members` by role, their superblocks read afresh (the tree to
/// open as: the reshape's new tree while one runs, else the recorded tree). Read again
/// through the members' `MemberMeta`s, never loaded anew: the other volumes on a member
/// (Matrix) hold the same records' state, and a second copy of it would write their
/// records back stale.
async fn open_again(
    name: &str,
    members: &[Option<Arc<MemberMeta>>],
    opts: ArrayOptions,
) -> Result<Array, ArrayError> {
    let mut metas: Vec<Option<Arc<MemberMeta>>> = Vec::with_capacity(members.len());
    for m in members {
        metas.push(match m {
            Some(m) => Some(m.reread().await),
            None => None,
        });
    }
    let tree = tree_to_open(name, &metas).ok_or_else(|| ArrayError::Metadata {
        volume: name.to_string(),
        detail: "no member carries a record of the volume any more".into(),
    })?;
    let progress = |_, _| {};
    // The array it replaces stopped under the requests' hold (`quiet`), flushed.
    let opts = ArrayOptions {
        quiet_handover: true,
        ..opts
    };
    let (array, report) = Array::open_background(name, &tree, metas, opts, &progress).await?;
    tracing::info!(
        volume = name,
        was_clean = report.was_clean,
        "opened again over the same members"
    );
    Ok(array)
}

/// The newest record's tree as a config would declare it (leaves by role): the reshape's
/// new tree while one runs.
fn tree_to_open(name: &str, metas: &[Option<Arc<MemberMeta>>]) -> Option<Node> {
    let newest = newest_record(metas.iter().flatten().filter_map(|m| match m.probe() {
        Probe::Superblock(sb, _) => {
            (sb.volumes.iter().find(|v| v.name == name)).map(|r| (sb.member, r))
        }
        _ => None,
    }))?;
    Some(match &newest.reshape {
        Some(r) => r.new_tree.clone(),
        None => newest.tree.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use nbraid_core::{Member, MemoryMember};

    const MIB: u64 = 1 << 20;

    /// What an array that ended counted is carried: a fresh volume's counters start at 0
    /// (all carried), a member's own counters may go on (only what the new array does not
    /// count from is carried); a member gone keeps its counts for when it serves again.
    #[test]
    fn an_ended_array_s_counts_are_carried_once() {
        let member = |reads, errors| {
            let c = CounterSnapshot {
                reads,
                in_flight: 3,
                ..Default::default()
            };
            (c, errors)
        };
        let counts = |writes, members: &[(&str, u64, u64)]| Counts {
            volume: VolumeCounters {
                writes,
                ..Default::default()
            },
            members: (members.iter())
                .map(|&(n, reads, errors)| {
                    let (c, e) = member(reads, errors);
                    (n.to_string(), c, e)
                })
                .collect(),
        };
        let ended = counts(10, &[("a", 7, 2), ("b", 5, 1)]);
        // The next array: a fresh volume, member a's own counters going on, read errors
        // (the array's) from 0; b is not in it.
        let started = counts(0, &[("a", 7, 0)]);
        let mut earlier = Counts::default();
        earlier.carry(&ended, &started);
        let now = earlier.plus(&counts(4, &[("a", 9, 1)]));
        assert_eq!(now.volume.writes, 14);
        let (a, a_errors) = now.member("a").unwrap();
        assert_eq!((a.reads, a_errors, a.in_flight), (9, 3, 3));
        assert!(now.member("b").is_none(), "not served now");
        assert_eq!(earlier.member("b").map(|(c, e)| (c.reads, e)), Some((5, 1)));
    }

    /// Two memory members, their superblocks loaded once (as a start shares them between
    /// the volumes on them).
    async fn two_members() -> Vec<Arc<MemberMeta>> {
        let mut metas = Vec::new();
        for i in 0..2 {
            let m: Arc<dyn Member> = Arc::new(MemoryMember::new(format!("m{i}"), 17 * MIB));
            metas.push(MemberMeta::load(m).await);
        }
        metas
    }

    /// Volume `name`, a RAID 1 of `metas` over 8 MiB regions from `start` on each.
    async fn mirror_on(name: &str, metas: &[Arc<MemberMeta>], start: u64) -> Array {
        let leaves = (0..2).map(|i| Node::member(i, start, 8 * MIB)).collect();
        let tree = Node::mirror(leaves).unwrap();
        let opts = ArrayOptions::default();
        let (a, _) = Array::create(name, tree, metas.to_vec(), opts, true, &|_, _| {})
            .await
            .unwrap();
        a
    }

    /// A RAID 1 of two memory members, created; its members by role.
    async fn mirror() -> (Array, Vec<Option<Arc<MemberMeta>>>) {
        let metas = two_members().await;
        let a = mirror_on("v", &metas, MIB).await;
        (a, metas.into_iter().map(Some).collect())
    }

    /// Matrix: a volume opened again (a reshape's start or end) reads its members' records
    /// again but keeps updating them together with the other volume on the members. Loaded
    /// anew, each kept its own copy of the superblock and wrote the other's record back
    /// stale: here the other volume's failed member came back as active.
    #[tokio::test]
    async fn a_volume_opened_again_does_not_write_back_the_records_of_another_volume_stale() {
        let metas = two_members().await;
        let v = mirror_on("v", &metas, MIB).await;
        let w = mirror_on("w", &metas, 9 * MIB).await;
        let served = ServedArray::new(Arc::new(v), ArrayOptions::default());
        let mut quiet = served.quiet().await;
        let by_role = members_by_role(&served.get());
        let again = served.reopen(&mut quiet, &by_role, None).await.unwrap();
        drop(quiet);
        // Member 1 fails in both volumes: each writes its record to member 0's superblock.
        w.volume().fail_member(1, "test");
        w.record_failures().await.unwrap();
        again.volume().fail_member(1, "test");
        again.record_failures().await.unwrap();
        let Probe::Superblock(sb, _) = MemberMeta::load(metas[0].member().clone())
            .await
            .probe()
            .clone()
        else {
            panic!("member 0 has its superblock");
        };
        let w_record = sb
            .volumes
            .iter()
            .find(|r| r.name == "w")
            .expect("w's record");
        assert!(
            !matches!(
                w_record.members[1].state,
                nbraid_core::metadata::RecordedState::Active
            ),
            "w's failure was overwritten: {:?}",
            w_record.members[1].state
        );
    }

    #[tokio::test]
    async fn a_swap_waits_for_requests_in_flight_and_serves_the_array_opened_again() {
        let (array, members) = mirror().await;
        let served = ServedArray::new(Arc::new(array), ArrayOptions::default());
        let before = served.get();
        let entered = served.enter().await.unwrap();
        assert!(
            served.quiet().now_or_never().is_none(),
            "a request in flight"
        );
        drop(entered);
        let mut quiet = served.quiet().now_or_never().expect("nothing in flight");
        assert!(served.enter().now_or_never().is_none(), "requests wait");
        let again = served.reopen(&mut quiet, &members, None).await.unwrap();
        drop(quiet);
        assert!(!Arc::ptr_eq(&before, &again) && Arc::ptr_eq(&served.get(), &again));
        assert_eq!(again.volume().capacity(), 8 * MIB);
        assert!(served.enter().await.is_ok());
    }

    #[tokio::test]
    async fn a_swap_that_fails_stops_the_volume_with_the_reason() {
        let (array, _) = mirror().await;
        let served = ServedArray::new(Arc::new(array), ArrayOptions::default());
        let mut quiet = served.quiet().await;
        // No member left to open it from.
        assert!(served
            .reopen(&mut quiet, &[None, None], None)
            .await
            .is_err());
        drop(quiet);
        let Err(e) = served.enter().await else {
            panic!("a volume whose swap failed serves nothing");
        };
        assert!(e.to_string().contains("restart nbraidd"), "{e}");
    }
}

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
use nbraid_core::VolumeError;
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
        }
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
                *self.current.write() = array.clone();
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

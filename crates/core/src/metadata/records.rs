//! The volume's records on its members, and the one way they are written ([`Records::commit`]).
//!
//! Shared with the member table as its failure recorder (`crate::failure_gate`), so that a
//! member write held back by a failure nobody has recorded yet can record it itself. That
//! happens even when the failure came from the write-back cache's destage, or from a resync
//! with no request waiting.

use super::heal::Heal;
use super::member_meta::MemberMeta;
use super::{MemberEntry, RecordedState, ScrubCheckpoint, Uuid};
use crate::error::{VolumeError, VolumeResult};
use crate::failure_gate::FailureRecorder;
use crate::node::MemberTable;
use futures::future::{join_all, BoxFuture};
use futures::lock::Mutex as AsyncMutex;
use futures::FutureExt;
use parking_lot::RwLock;
use std::sync::Arc;

/// The volume's state as its records say it.
pub(super) struct Recorded {
    pub(super) events: u64,
    pub(super) clean: bool,
    pub(super) members: Vec<MemberEntry>,
    /// An unfinished scrub (see `scrub.rs`).
    pub(super) scrub: Option<ScrubCheckpoint>,
    /// Members added at run time, by path (see `spare_list.rs`).
    pub(super) added_paths: Vec<String>,
}

pub(super) struct Records {
    pub(super) id: Uuid,
    pub(super) name: String,
    pub(super) table: Arc<MemberTable>,
    /// By role: the member's superblock (`None`: lost). Changes when a new member takes a
    /// role (rebuild, replace).
    pub(super) metas: RwLock<Vec<Option<Arc<MemberMeta>>>>,
    /// Held while the records change; a commit writes them.
    pub(super) recorded: AsyncMutex<Recorded>,
    /// Rebuild and replace state (see `heal.rs`): a member rebuilt into its role takes the
    /// records too.
    pub(super) heal: Arc<Heal>,
}

impl Records {
    fn is_failed(&self, r: usize) -> bool {
        self.table.slot(r).is_failed()
    }

    fn is_current(&self, r: usize) -> bool {
        self.table.slot(r).is_current()
    }

    fn fail(&self, r: usize, why: &str) {
        self.table.fail(r, &why);
    }

    /// Writes the recorded state (plus every member failed since) to every current member,
    /// bumping the event counter. A member that cannot take it is failed and the state
    /// written again, so the records always name every failed member.
    pub(super) async fn commit(&self, rec: &mut Recorded) -> VolumeResult<()> {
        let gate = self.table.failure_gate();
        loop {
            let metas = self.metas.read().clone();
            let generation = gate.generation();
            for (r, m) in rec.members.iter_mut().enumerate() {
                if !self.is_failed(r) || m.state == RecordedState::Failed {
                    continue;
                }
                m.state = if metas[r].is_some() {
                    RecordedState::Failed
                } else {
                    // Missing at assembly: when it comes back it is resynced before rejoining.
                    RecordedState::Rebuilding {
                        checkpoint_bytes: 0,
                    }
                };
            }
            rec.events += 1;
            // Current members, and members being rebuilt into their role (their records must
            // keep up; they say the role is rebuilding, so none is trusted early).
            let targets: Vec<usize> = (0..metas.len())
                .filter(|&r| {
                    metas[r].is_some()
                        && (self.is_current(r)
                            || (!self.is_failed(r) && self.heal.is_rebuilding(r)))
                })
                .collect();
            let (id, name) = (self.id, self.name.as_str());
            let results = join_all(targets.iter().map(|&r| {
                let (events, clean, members, scrub, added_paths) = (
                    rec.events,
                    rec.clean,
                    rec.members.clone(),
                    rec.scrub,
                    rec.added_paths.clone(),
                );
                metas[r].as_ref().expect("target").update(move |sb| {
                    if let Some(v) = sb
                        .volumes
                        .iter_mut()
                        .find(|v| v.array == id && v.name == name)
                    {
                        v.events = events;
                        v.clean = clean;
                        v.members = members;
                        v.scrub = scrub;
                        v.added_paths = added_paths;
                    }
                })
            }))
            .await;
            let mut first = None;
            for (&r, res) in targets.iter().zip(results) {
                if let Err(e) = res {
                    self.fail(r, &e.to_string());
                    first.get_or_insert((r, e));
                }
            }
            if gate.generation() == generation {
                gate.recorded_up_to(generation);
                return match first {
                    Some((r, e)) if targets.len() == 1 => Err(VolumeError::Unavailable {
                        reason: format!("member {r}: superblock write failed: {e}"),
                    }),
                    _ if targets.is_empty() => Err(VolumeError::Unavailable {
                        reason: "no member can take the superblock".into(),
                    }),
                    _ => Ok(()),
                };
            }
        }
    }

    /// Records members failed since the last commit (before any further member write, and
    /// before a request that may have seen them fail is acknowledged).
    pub(super) async fn record_failures(&self) -> VolumeResult<()> {
        let gate = self.table.failure_gate();
        if !gate.unrecorded() {
            return Ok(());
        }
        let mut rec = self.recorded.lock().await;
        if gate.unrecorded() {
            self.commit(&mut rec).await?;
        }
        Ok(())
    }
}

impl FailureRecorder for Records {
    fn record(&self) -> BoxFuture<'_, VolumeResult<()>> {
        self.record_failures().boxed()
    }
}

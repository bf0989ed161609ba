//! md's "superblock update pending" rule: once a member has failed, no member write is
//! issued until the superblocks of the members that remain record the failure.
//!
//! A write that skips a failed member leaves that member stale. If power is lost before the
//! failure is recorded, the next assembly trusts the stale member, and a chunk rebuilt from it
//! comes out as bytes nobody wrote. This is true whoever failed the member: a client write, the
//! write-back cache destaging with no client waiting, a resync, or a read repair. So the rule
//! is enforced where every region write passes ([`crate::node::LeafNode`]) and where the
//! partial-parity log writes its ring, not at the end of client requests.
//!
//! The gate counts failures. A recorder (the volume's records, installed by
//! `metadata::Array`) writes them out, and the first writer held back runs it. Volumes without
//! records have no recorder and are never held back. The check on the write path is two atomic
//! loads.

use crate::error::VolumeResult;
use futures::future::BoxFuture;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Weak;

/// Writes every member failure so far into the records of the members that remain.
pub trait FailureRecorder: Send + Sync {
    /// Returns once the records on disk name every member failed before the call (and
    /// [`FailureGate::recorded_up_to`] says so). Must not write through the engine tree.
    fn record(&self) -> BoxFuture<'_, VolumeResult<()>>;
}

/// Member failures counted, and how many of them the records hold.
#[derive(Default)]
pub struct FailureGate {
    /// Bumped by every member marked failed (never goes back: a member installed in a failed
    /// slot later does not undo the failure the records must hold).
    failures: AtomicU64,
    /// `failures` as the records last caught up with it.
    recorded: AtomicU64,
    recorder: RwLock<Option<Weak<dyn FailureRecorder>>>,
}

impl FailureGate {
    /// A member was marked failed.
    pub fn failed(&self) {
        self.failures.fetch_add(1, SeqCst);
    }

    /// Failures so far. A recorder reads it before it writes the records and passes it to
    /// [`FailureGate::recorded_up_to`] after.
    pub fn generation(&self) -> u64 {
        self.failures.load(SeqCst)
    }

    /// The records on disk hold every failure up to `generation`.
    pub fn recorded_up_to(&self, generation: u64) {
        self.recorded.fetch_max(generation, SeqCst);
    }

    /// Whether some failure is not in the records yet.
    pub fn unrecorded(&self) -> bool {
        self.failures.load(SeqCst) > self.recorded.load(SeqCst)
    }

    /// From now on, member writes wait for `recorder` to record failures.
    pub fn install(&self, recorder: Weak<dyn FailureRecorder>) {
        *self.recorder.write() = Some(recorder);
    }

    /// Before a member write: returns once every failure so far is recorded (at once when
    /// none is pending or no recorder is installed).
    pub async fn wait_recorded(&self) -> VolumeResult<()> {
        if !self.unrecorded() {
            return Ok(());
        }
        let recorder = self.recorder.read().as_ref().and_then(Weak::upgrade);
        match recorder {
            Some(r) => r.record().await,
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use futures::FutureExt;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    struct Counting {
        gate: Arc<FailureGate>,
        calls: AtomicUsize,
    }

    impl FailureRecorder for Counting {
        fn record(&self) -> BoxFuture<'_, VolumeResult<()>> {
            async move {
                self.calls.fetch_add(1, SeqCst);
                let g = self.gate.generation();
                self.gate.recorded_up_to(g);
                Ok(())
            }
            .boxed()
        }
    }

    #[test]
    fn a_write_after_a_failure_waits_for_the_recorder_once() {
        let gate = Arc::new(FailureGate::default());
        let rec = Arc::new(Counting {
            gate: gate.clone(),
            calls: AtomicUsize::new(0),
        });
        let weak: Weak<dyn FailureRecorder> = Arc::downgrade(&(rec.clone() as Arc<_>));
        gate.install(weak);
        block_on(gate.wait_recorded()).unwrap();
        assert_eq!(rec.calls.load(SeqCst), 0, "nothing failed: no record");
        gate.failed();
        assert!(gate.unrecorded());
        block_on(gate.wait_recorded()).unwrap();
        block_on(gate.wait_recorded()).unwrap();
        assert_eq!(rec.calls.load(SeqCst), 1);
        assert!(!gate.unrecorded());
    }

    #[test]
    fn without_a_recorder_nothing_waits() {
        let gate = FailureGate::default();
        gate.failed();
        block_on(gate.wait_recorded()).unwrap();
        assert!(gate.unrecorded());
    }

    #[test]
    fn a_record_of_an_older_generation_leaves_a_newer_failure_pending() {
        let gate = FailureGate::default();
        gate.failed();
        let g = gate.generation();
        gate.failed();
        gate.recorded_up_to(g);
        assert!(gate.unrecorded());
        gate.recorded_up_to(g + 1);
        assert!(!gate.unrecorded());
    }
}

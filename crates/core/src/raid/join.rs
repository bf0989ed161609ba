//! Write-through joining: partial-stripe writes that together fill a stripe are written as
//! one full-stripe write (no reads, no partial parity).
//!
//! Without a cache every partial-stripe write reads (RMW or RCW) and, with a partial-parity
//! log, logs. Sequential writers smaller than a stripe (a 128 KiB stream on a 192 KiB
//! stripe) then pay that for nearly every write although, together, they fill the stripes.
//! md holds partial stripes back while more I/O is being submitted for the same reason. A
//! writer here leaves its bytes on a stripe for the next writer of that stripe in two cases:
//! - **Queued:** an exclusive request already waits on the stripe's lock. The writer queues
//!   again at once, behind it.
//! - **Held:** the write continues the group's last write (a sequential stream), its bytes
//!   fill the stripe from its start, so the stream's next write would complete it, and other
//!   writes of the group are in flight (the client is not waiting for this one to send
//!   more). The writer waits until a write arrives in the group and holds its stripes, or
//!   until every write still in flight in the group is a held one; then it queues again.
//!
//! Either way, when it holds the stripe again, a later writer has written its bytes (and
//! answered it) or the bytes are still left and it writes them itself. So a lone writer
//! (queue depth 1) never waits, and nothing waits for a writer that may never come: a held
//! writer waits only while some write of the group that is not held is in flight.
//!
//! The union is built and written under the stripe's exclusive lock; a writer queues again
//! only after releasing every stripe it held (the writer it left bytes to may need them).
//! A writer is answered only after its bytes are on the members, as every write-through
//! write is; bytes left behind are not acknowledged, so reads, FLUSH and the crash rules need
//! nothing new (a read may see the stripe before them, as it may for any write in flight).

use super::cache::Entry;
use super::*;
use futures::channel::oneshot;

/// A write's answer, sent by the writer that put its bytes on the members.
pub(super) type Answer = oneshot::Receiver<VolumeResult<()>>;

/// Bytes writers left on one stripe for the next writer, and whom to answer.
struct Left {
    entry: Entry,
    fua: bool,
    waiters: Vec<oneshot::Sender<VolumeResult<()>>>,
}

/// Writes (pieces of one stripe) whose bytes another write put on the members, process-wide
/// (for benchmarks: `ppl_cost` prints it). Relaxed: a count may lag, never a correctness input.
static JOINED: AtomicU64 = AtomicU64::new(0);

/// [`JOINED`]: write-through stripe pieces another write carried to the members.
pub fn joined_writes() -> u64 {
    JOINED.load(Ordering::Relaxed)
}

/// The group's write-through writes in flight, for the hold rule.
#[derive(Default)]
struct Flow {
    /// Writes between [`Joins::arrive`] and the drop of its [`Arrival`].
    in_flight: usize,
    /// Held writers, woken by the next arrival or once only held writers are in flight.
    held: Vec<oneshot::Sender<()>>,
    /// Where the last write to arrive ends (a write starting there continues a stream).
    last_end: u64,
}

impl Flow {
    fn wake_held(&mut self) {
        for w in self.held.drain(..) {
            let _ = w.send(());
        }
    }
}

/// The stripes whose writers left bytes (write-through groups only), and the writes in flight.
#[derive(Default)]
pub(super) struct Joins {
    left: Mutex<HashMap<u64, Left>>,
    flow: Mutex<Flow>,
}

/// One write-through write in flight in the group (see [`Joins::arrive`]).
pub(super) struct Arrival<'a> {
    joins: &'a Joins,
    /// Whether it begins where the group's previous write ended.
    pub(super) continues: bool,
}

impl Drop for Arrival<'_> {
    /// A write leaving: if only held writers remain in flight, nobody is coming for them.
    fn drop(&mut self) {
        let mut f = self.joins.flow.lock();
        f.in_flight -= 1;
        if f.in_flight == f.held.len() {
            f.wake_held();
        }
    }
}

/// Why a writer left its bytes, and so what it waits for before it queues again.
pub(super) enum Wait {
    /// A writer waits on the stripe: queue again at once.
    Queued,
    /// Held: until the next write arrives (or only held writers are in flight).
    Held(oneshot::Receiver<()>),
}

/// What a write-through writer does with one stripe's bytes.
pub(super) enum Joined {
    /// Writes `segs` (its own over the bytes left before) and answers `waiters`.
    Write {
        segs: Segs,
        fua: bool,
        waiters: Vec<oneshot::Sender<VolumeResult<()>>>,
    },
    /// Left them for a later writer; the answer comes on the receiver.
    Leave(Answer, Wait),
}

/// Whether the bytes `e` holds fill the stripe from its start up to where they end, short of
/// its `width`: a stream's next write, beginning there, would complete it.
fn fills_forward(e: &Entry, width: u64) -> bool {
    let end = e.segs.last().map_or(0, |(o, d)| o + d.len() as u64);
    end > 0 && end < width && e.covers(0, end)
}

impl Joins {
    /// A write of `[offset, offset + len)` enters the group (until the guard drops).
    pub(super) fn arrive(&self, offset: u64, len: u64) -> Arrival<'_> {
        let mut f = self.flow.lock();
        f.in_flight += 1;
        let continues = f.last_end == offset;
        f.last_end = offset + len;
        Arrival {
            joins: self,
            continues,
        }
    }

    /// The write that arrived holds its stripes now: held writers may queue again (behind
    /// it, if it is the one to complete their stripes).
    pub(super) fn holding(&self) {
        let mut f = self.flow.lock();
        if !f.held.is_empty() {
            f.wake_held();
        }
    }

    /// Stripe `s`'s bytes left so far with `segs` over them: written, or left when they do not
    /// cover the stripe (`width` bytes) and `queued` (a writer waits on the stripe) or the
    /// hold rule allows it (`continues`: the write continues a stream). The caller holds the
    /// stripe's exclusive lock.
    pub(super) fn take(
        &self,
        s: u64,
        segs: Segs,
        fua: bool,
        width: u64,
        (queued, continues): (bool, bool),
    ) -> Joined {
        let mut left = self.left.lock();
        let mut union = left.remove(&s).unwrap_or_else(|| Left {
            entry: Entry::new(),
            fua: false,
            waiters: Vec::new(),
        });
        for (o, d) in segs {
            union.entry.insert(o, d, None);
        }
        union.fua |= fua;
        let wait = if union.entry.covers(0, width) {
            None
        } else if queued {
            Some(Wait::Queued)
        } else if continues && fills_forward(&union.entry, width) {
            self.hold()
        } else {
            None
        };
        let Some(wait) = wait else {
            return Joined::Write {
                segs: union.entry.segs,
                fua: union.fua,
                waiters: union.waiters,
            };
        };
        let (tx, rx) = oneshot::channel();
        union.waiters.push(tx);
        left.insert(s, union);
        Joined::Leave(rx, wait)
    }

    /// A hold, if a write of the group that is not held is in flight besides the caller's.
    fn hold(&self) -> Option<Wait> {
        let mut f = self.flow.lock();
        if f.in_flight <= f.held.len() + 1 {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        f.held.push(tx);
        Some(Wait::Held(rx))
    }
}

impl ParityCore {
    /// Writes a union [`Joins::take`] handed out and answers the writers who left bytes in
    /// it; the caller holds the stripe's exclusive lock.
    pub(super) async fn write_joined(
        &self,
        s: u64,
        segs: Segs,
        fua: bool,
        waiters: Vec<oneshot::Sender<VolumeResult<()>>>,
    ) -> VolumeResult<()> {
        let r = self.write_over_cache(s, segs, None, fua).await;
        for tx in waiters {
            // A writer that went away (its request dropped) needs no answer.
            let _ = tx.send(r.as_ref().map(|_| ()).map_err(VolumeError::duplicate));
        }
        r
    }

    /// Waits for the answer to bytes left on stripe `s`: after `wait`, queues for the stripe
    /// again and, if nobody wrote them meanwhile, writes them. The caller holds no stripe.
    pub(super) async fn finish_left(
        &self,
        s: u64,
        mut answer: Answer,
        wait: Wait,
    ) -> VolumeResult<()> {
        if let Wait::Held(woken) = wait {
            // Sent or dropped, either way it is time to look again.
            let _ = woken.await;
        }
        let _g = self.locks.lock(s, 1, true).await;
        match answer.try_recv() {
            Ok(Some(r)) => {
                JOINED.fetch_add(1, Ordering::Relaxed);
                r
            }
            Ok(None) => {
                // Still left (our own sender is among the waiters): write them now.
                let left = self.joins.left.lock().remove(&s);
                let left = left.expect("bytes left on a stripe stay until they are written");
                self.write_joined(s, left.entry.segs, left.fua, left.waiters)
                    .await
            }
            Err(oneshot::Canceled) => Err(VolumeError::Unavailable {
                reason: format!(
                    "stripe {s}: the write that took this write's bytes was abandoned before it answered"
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::Buf;

    fn entry(segs: &[(u64, usize)]) -> Entry {
        let mut e = Entry::new();
        for &(o, n) in segs {
            e.insert(o, Buf::zeroed(n).freeze(), None);
        }
        e
    }

    #[test]
    fn only_bytes_from_the_stripes_start_wait_for_a_stream_to_fill_it() {
        let w = 192 << 10;
        assert!(fills_forward(&entry(&[(0, 128 << 10)]), w));
        assert!(fills_forward(&entry(&[(0, 4096), (4096, 4096)]), w));
        // A gap, a tail, a full stripe, nothing.
        assert!(!fills_forward(&entry(&[(0, 4096), (8192, 4096)]), w));
        assert!(!fills_forward(&entry(&[(64 << 10, 128 << 10)]), w));
        assert!(!fills_forward(&entry(&[(0, 192 << 10)]), w));
        assert!(!fills_forward(&entry(&[]), w));
    }

    #[test]
    fn a_held_writer_is_woken_by_an_arrival_or_when_only_held_writers_remain() {
        let j = Joins::default();
        let a = j.arrive(8192, 4096);
        // Alone: no hold.
        assert!(j.hold().is_none());
        let b = j.arrive(12288, 4096);
        assert!(b.continues && !a.continues);
        let Some(Wait::Held(mut woken)) = j.hold() else {
            panic!("another write is in flight: held");
        };
        assert_eq!(woken.try_recv(), Ok(None));
        // `a` is held now: `b` may not be held too (only held writers would be in flight).
        assert!(j.hold().is_none());
        j.holding();
        assert_eq!(woken.try_recv(), Ok(Some(())));
        let Some(Wait::Held(mut woken)) = j.hold() else {
            panic!("held again");
        };
        drop(b);
        assert_eq!(
            woken.try_recv(),
            Ok(Some(())),
            "only the held writer remained"
        );
        drop(a);
    }
}

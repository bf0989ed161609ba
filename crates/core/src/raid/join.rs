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
//! - **Held:** the write belongs to a sequential stream (one of the group's last writes ended
//!   at most a stripe before it begins), its bytes are one run short of the stripe, so the
//!   stream's neighbouring writes would complete it, and other writes of the group are in
//!   flight (the client is not waiting for this one to send more). The writer waits until a
//!   later writer of the stripe answers it, until [`HOLD_ARRIVALS`] more writes have arrived
//!   in the group (a stream's writes reach the group a few places out of order: the daemon
//!   serves requests concurrently), or until every write still in flight in the group is a
//!   held one; then it queues again.
//!
//! Either way, when it holds the stripe again, a later writer has written its bytes (and
//! answered it) or the bytes are still left and it writes them itself. So a lone writer
//! (queue depth 1) never waits, and nothing waits for a writer that may never come: a held
//! writer waits only while some write of the group that is not held is in flight, and for
//! at most a few arrivals.
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

/// Write ends [`Flow`] remembers: a client's queue of sequential writes may reach the group
/// out of order (the daemon serves requests concurrently), so a stream's next write starts
/// at one of its last few ends, not always at the very last.
const RECENT_ENDS: usize = 16;

/// Writes that may arrive in the group while a writer holds its bytes before it gives up on
/// its stripe's other writers and writes alone: a stream's writes reach the group at most
/// a few places out of order.
const HOLD_ARRIVALS: u64 = 8;

/// The group's write-through writes in flight, for the hold rule.
#[derive(Default)]
struct Flow {
    /// Writes between [`Joins::arrive`] and the drop of its [`Arrival`].
    in_flight: usize,
    /// Held writers (the arrival count at which each gives up, and its wake), woken then or
    /// once only held writers are in flight.
    held: Vec<(u64, oneshot::Sender<()>)>,
    /// Writes arrived so far.
    arrivals: u64,
    /// Where the last writes to arrive end, newest at `next - 1` (a ring).
    recent_ends: [u64; RECENT_ENDS],
    next: usize,
}

impl Flow {
    /// Held writers answered meanwhile stopped waiting (their wake's receiver is gone).
    fn forget_answered(&mut self) {
        self.held.retain(|(_, w)| !w.is_canceled());
    }

    /// Wakes the held writers whose wait is over: all of them when only held writers are in
    /// flight, else those that saw their [`HOLD_ARRIVALS`] arrivals. Forgets writers answered
    /// meanwhile (they stopped waiting), so `held` counts exactly the writers still held.
    fn wake_held(&mut self) {
        self.forget_answered();
        let all = self.in_flight <= self.held.len();
        let arrivals = self.arrivals;
        for (_, w) in self.held.extract_if(.., |(at, _)| all || *at <= arrivals) {
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
    /// Whether one of the group's last writes ended at most a stripe before it begins: it
    /// belongs to a sequential stream, whose next or late writes fill its stripes.
    pub(super) streams: bool,
}

impl Drop for Arrival<'_> {
    /// A write leaving: if only held writers remain in flight, nobody is coming for them.
    fn drop(&mut self) {
        let mut f = self.joins.flow.lock();
        f.in_flight -= 1;
        f.wake_held();
    }
}

/// Why a writer left its bytes, and so what it waits for before it queues again.
pub(super) enum Wait {
    /// A writer waits on the stripe: queue again at once.
    Queued,
    /// Held: until its stripe's next writer answers it, [`HOLD_ARRIVALS`] more writes arrive
    /// in the group, or only held writers are in flight.
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

/// Whether the bytes `e` holds are one run short of the stripe's `width`: a stream's writes
/// before and after it (arriving late or next) would complete the stripe.
fn one_run(e: &Entry, width: u64) -> bool {
    let (Some((start, _)), Some((o, d))) = (e.segs.first(), e.segs.last()) else {
        return false;
    };
    let end = o + d.len() as u64;
    end - start < width && e.covers(*start, end)
}

impl Joins {
    /// A write of `[offset, offset + len)` enters the group of stripes `width` bytes wide
    /// (in flight until the guard drops).
    pub(super) fn arrive(&self, offset: u64, len: u64, width: u64) -> Arrival<'_> {
        let mut f = self.flow.lock();
        f.in_flight += 1;
        f.arrivals += 1;
        let streams = f
            .recent_ends
            .iter()
            .any(|&e| e <= offset && offset - e <= width);
        let at = f.next;
        f.recent_ends[at] = offset + len;
        f.next = (at + 1) % RECENT_ENDS;
        Arrival {
            joins: self,
            streams,
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
    /// hold rule allows it (`streams`: the write belongs to a stream). The caller holds the
    /// stripe's exclusive lock (asserted there: the joiner does not see the locks).
    pub(super) fn take(
        &self,
        s: u64,
        segs: Segs,
        fua: bool,
        width: u64,
        (queued, streams): (bool, bool),
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
        } else if streams && one_run(&union.entry, width) {
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

    /// Takes back the bytes still left on stripe `s`, to be written by the writer whose own
    /// bytes are among them (the caller holds the stripe's exclusive lock).
    pub(super) fn reclaim(&self, s: u64) -> Joined {
        let left = self.left.lock().remove(&s);
        let left = left.expect("bytes left on a stripe stay until they are written");
        Joined::Write {
            segs: left.entry.segs,
            fua: left.fua,
            waiters: left.waiters,
        }
    }

    /// Forgets the bytes left on stripes `[first, last)` — whole stripes zeroed over them,
    /// the caller holding their exclusive lock (asserted there) — and answers their writers: their writes and
    /// the zeroing were in flight together, so the zeroes may come last (as the write-back
    /// cache lets them). Bytes of a writer gone away never land after the zeroes. Not FUA
    /// bytes: their writers were promised durability, which the zeroes (not yet flushed)
    /// cannot give; those writers write their bytes after the zeroes.
    pub(super) fn superseded(&self, first: u64, last: u64) {
        let mut left = self.left.lock();
        let hit: Vec<u64> = left
            .iter()
            .filter(|(s, l)| (first..last).contains(*s) && !l.fua)
            .map(|(&s, _)| s)
            .collect();
        for s in hit {
            let l = left.remove(&s).expect("listed");
            for tx in l.waiters {
                let _ = tx.send(Ok(()));
            }
        }
    }

    /// A hold, if a write of the group that is not held is in flight besides the caller's.
    fn hold(&self) -> Option<Wait> {
        let mut f = self.flow.lock();
        f.forget_answered();
        if f.in_flight <= f.held.len() + 1 {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        let until = f.arrivals + HOLD_ARRIVALS;
        f.held.push((until, tx));
        Some(Wait::Held(rx))
    }
}

/// The answer of the writer that carried this write's bytes on stripe `s`.
pub(super) fn joined(
    s: u64,
    answer: Result<VolumeResult<()>, oneshot::Canceled>,
) -> VolumeResult<()> {
    JOINED.fetch_add(1, Ordering::Relaxed);
    answer.unwrap_or_else(|oneshot::Canceled| {
        Err(VolumeError::Unavailable {
            reason: format!(
                "stripe {s}: the write that took this write's bytes was abandoned before it answered"
            ),
        })
    })
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
    fn one_run_short_of_the_stripe_waits_for_a_stream_to_complete_it() {
        let w = 192 << 10;
        assert!(one_run(&entry(&[(0, 128 << 10)]), w));
        assert!(one_run(&entry(&[(64 << 10, 128 << 10)]), w));
        assert!(one_run(&entry(&[(0, 4096), (4096, 4096)]), w));
        // A gap, a full stripe, nothing.
        assert!(!one_run(&entry(&[(0, 4096), (8192, 4096)]), w));
        assert!(!one_run(&entry(&[(0, 192 << 10)]), w));
        assert!(!one_run(&entry(&[]), w));
    }

    #[test]
    fn a_write_near_a_recent_end_belongs_to_a_stream() {
        let j = Joins::default();
        let w = 192 << 10;
        let _a = j.arrive(10 * w, 4096, w);
        // Out of order: a stream's write a little after a recent end, and one far away.
        assert!(j.arrive(10 * w + 3 * 4096, 4096, w).streams);
        assert!(!j.arrive(20 * w, 4096, w).streams);
        assert!(
            !j.arrive(10 * w - 4096, 4096, w).streams,
            "before every end"
        );
    }

    #[test]
    fn a_held_writer_waits_for_a_few_arrivals_or_until_only_held_writers_remain() {
        let w = 192 << 10;
        let j = Joins::default();
        let a = j.arrive(8 * w, 4096, w);
        // Alone: no hold.
        assert!(j.hold().is_none());
        let b = j.arrive(9 * w, 4096, w);
        let Some(Wait::Held(mut woken)) = j.hold() else {
            panic!("another write is in flight: held");
        };
        // One held already: a second would leave only held writers in flight.
        assert!(j.hold().is_none());
        for i in 0..HOLD_ARRIVALS {
            assert_eq!(woken.try_recv(), Ok(None), "after {i} arrivals");
            drop(j.arrive(20 * w, 4096, w));
            j.holding();
        }
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
        // A writer answered meanwhile stops counting as held.
        let c = j.arrive(30 * w, 4096, w);
        let Some(Wait::Held(answered)) = j.hold() else {
            panic!("held");
        };
        drop(answered);
        assert!(matches!(j.hold(), Some(Wait::Held(_))));
        drop((a, c));
    }
}

//! Simulated members on a virtual clock, for benchmarks that reproduce the reviews' disk-count
//! charts without the disks: an HDD model (seek time growing with distance, rotational
//! position, command reordering over the queued commands, streaming of sequential runs) and an
//! SSD model (latency, IOPS and bandwidth caps).
//!
//! Time is virtual ([`crate::clock`]): a run is a function of its inputs alone, so two runs
//! give the same figures to the nanosecond and ratio checks in tests need no margin for
//! machine noise.

use futures::future::BoxFuture;
use futures::FutureExt;
use nbraid_core::member::check_range;
use nbraid_core::{Buf, Member, MemberCounters, MemberOp, MemberResult, MemoryMember, SharedBuf};
use parking_lot::Mutex;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::clock::SimClock;

/// A spinning disk. Defaults: a 15k rpm SAS drive of the review's era, calibrated so one disk
/// does about 393 random 4 KiB reads per second at queue depth 64 over its whole surface and
/// about 40% of that at depth 1, and about 327 random writes at depth 64 (seed 000).
#[derive(Clone, Debug, PartialEq)]
pub struct HddParams {
    pub rpm: f64,
    /// Seek to the next track.
    pub track_to_track_ms: f64,
    /// Seek across the whole surface; a seek over a share `s` of it costs
    /// `track_to_track + (full_stroke - track_to_track) × √s`.
    pub full_stroke_ms: f64,
    /// Extra settling before a write.
    pub write_settle_ms: f64,
    /// Per-command controller overhead.
    pub overhead_ms: f64,
    /// Media rate (bytes under the head per second).
    pub media_mb_s: f64,
    /// Commands the drive reorders among (NCQ/TCQ); later ones wait in arrival order.
    pub queue_depth: usize,
    /// A queued read or write starting at most this far past the head continues the stream:
    /// the drive reads (or skips) through the gap at the media rate and serves it before any
    /// other (sequential detection, as drives do), so streams with small holes — a parity
    /// strip — stay streams.
    pub readahead_kib: f64,
}

impl Default for HddParams {
    fn default() -> Self {
        HddParams {
            rpm: 15000.0,
            track_to_track_ms: 0.6,
            full_stroke_ms: 7.5,
            write_settle_ms: 0.45,
            overhead_ms: 0.2,
            media_mb_s: 160.0,
            queue_depth: 64,
            readahead_kib: 1024.0,
        }
    }
}

/// A flash drive: each command takes its latency plus its transfer, and the drive as a whole
/// sustains at most its IOPS and bandwidth caps per direction.
#[derive(Clone, Debug, PartialEq)]
pub struct SsdParams {
    pub read_latency_us: f64,
    pub write_latency_us: f64,
    pub read_iops: f64,
    pub write_iops: f64,
    pub read_mb_s: f64,
    pub write_mb_s: f64,
}

impl Default for SsdParams {
    fn default() -> Self {
        SsdParams {
            read_latency_us: 90.0,
            write_latency_us: 30.0,
            read_iops: 95_000.0,
            write_iops: 85_000.0,
            read_mb_s: 550.0,
            write_mb_s: 500.0,
        }
    }
}

/// Which device a simulated member behaves like.
#[derive(Clone, Debug, PartialEq)]
pub enum SimModel {
    Hdd(HddParams),
    Ssd(SsdParams),
}

impl SimModel {
    pub fn name(&self) -> &'static str {
        match self {
            SimModel::Hdd(_) => "hdd",
            SimModel::Ssd(_) => "ssd",
        }
    }

    /// The parameter names this model takes (for `set` and messages).
    pub fn keys(&self) -> &'static [&'static str] {
        match self {
            SimModel::Hdd(_) => &[
                "rpm",
                "track_to_track_ms",
                "full_stroke_ms",
                "write_settle_ms",
                "overhead_ms",
                "media_mb_s",
                "queue_depth",
                "readahead_kib",
            ],
            SimModel::Ssd(_) => &[
                "read_latency_us",
                "write_latency_us",
                "read_iops",
                "write_iops",
                "read_mb_s",
                "write_mb_s",
            ],
        }
    }

    /// Sets one parameter by name; the error says what is valid.
    pub fn set(&mut self, key: &str, value: f64) -> Result<(), String> {
        if !(value.is_finite() && value >= 0.0) {
            return Err(format!("{key} = {value}: must be a finite number ≥ 0"));
        }
        let positive = |v: f64| {
            if v > 0.0 {
                Ok(v)
            } else {
                Err(format!("{key} must be above 0"))
            }
        };
        let slot = match self {
            SimModel::Hdd(p) => match key {
                "rpm" => {
                    p.rpm = positive(value)?;
                    return Ok(());
                }
                "media_mb_s" => {
                    p.media_mb_s = positive(value)?;
                    return Ok(());
                }
                "queue_depth" => {
                    p.queue_depth = positive(value)?.round() as usize;
                    return Ok(());
                }
                "track_to_track_ms" => &mut p.track_to_track_ms,
                "full_stroke_ms" => &mut p.full_stroke_ms,
                "write_settle_ms" => &mut p.write_settle_ms,
                "overhead_ms" => &mut p.overhead_ms,
                "readahead_kib" => &mut p.readahead_kib,
                _ => return Err(self.unknown(key)),
            },
            SimModel::Ssd(p) => match key {
                "read_latency_us" => &mut p.read_latency_us,
                "write_latency_us" => &mut p.write_latency_us,
                "read_iops" => {
                    p.read_iops = positive(value)?;
                    return Ok(());
                }
                "write_iops" => {
                    p.write_iops = positive(value)?;
                    return Ok(());
                }
                "read_mb_s" => {
                    p.read_mb_s = positive(value)?;
                    return Ok(());
                }
                "write_mb_s" => {
                    p.write_mb_s = positive(value)?;
                    return Ok(());
                }
                _ => return Err(self.unknown(key)),
            },
        };
        *slot = value;
        Ok(())
    }

    fn unknown(&self, key: &str) -> String {
        format!(
            "unknown {} parameter `{key}` (known: {})",
            self.name(),
            self.keys().join(", ")
        )
    }
}

/// One command waiting in or served by a device.
struct Cmd {
    offset: u64,
    len: u64,
    write: bool,
    done: Arc<Done>,
}

/// Completion of one command: set by the clock, awaited by the member's future.
#[derive(Default)]
struct Done {
    fired: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Done {
    fn fire(&self) {
        self.fired.store(true, Ordering::Release);
        if let Some(w) = self.waker.lock().take() {
            w.wake();
        }
    }
}

struct DoneFuture(Arc<Done>);

impl Future for DoneFuture {
    type Output = ();
    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0.fired.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        *self.0.waker.lock() = Some(cx.waker().clone());
        if self.0.fired.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

/// The HDD's mechanical state: one actuator, so one command at a time.
#[derive(Default)]
struct HddState {
    queue: Vec<Cmd>,
    busy: bool,
    /// Byte offset under the head after the last command.
    head: u64,
}

#[derive(Default)]
struct SsdState {
    /// When the IOPS and bandwidth budgets are free again, per direction (ns).
    iops_free_ns: [u64; 2],
    bw_free_ns: [u64; 2],
}

enum DevState {
    Hdd(HddParams, HddState),
    Ssd(SsdParams, SsdState),
}

struct Device {
    clock: Arc<SimClock>,
    /// Bytes of the simulated surface (seek distances are shares of it).
    len: u64,
    /// The platter's angle at time 0, a share of a turn (see [`hdd_finish_ns`]).
    phase: f64,
    state: Mutex<DevState>,
}

const NS_PER_MS: f64 = 1e6;

/// When a command finishes if the HDD starts it at `now_ns` with the head at `head`: the
/// positioning (seek, settle, rotation) then the transfer. A command that starts where the
/// last one ended streams at the media rate (read-ahead and the write cache keep the head on
/// the run); after a gap the head waits for the platter to bring the bytes round. `phase`
/// (a share of a turn) is where this drive's platter stood at time 0: drives are not
/// spindle-synchronised, so a request split over two waits for the slower turn.
pub fn hdd_finish_ns(
    p: &HddParams,
    len: u64,
    now_ns: u64,
    head: u64,
    phase: f64,
    cmd: (u64, u64, bool),
) -> u64 {
    let (offset, bytes, write) = cmd;
    let rev_ns = 60.0 / p.rpm * 1e9;
    let media_b_per_ns = p.media_mb_s * 1e6 / 1e9;
    let transfer_ns = bytes as f64 / media_b_per_ns;
    let overhead_ns = p.overhead_ms * NS_PER_MS;
    // Read-ahead and the write cache keep the head streaming: the command's overhead
    // overlaps the transfer before it, and a small gap passes at the media rate (unless
    // moving the head there is quicker).
    let streamed = stream_gap(p, head, offset)
        .map(|gap| now_ns + ((gap as f64 + bytes as f64) / media_b_per_ns) as u64);
    if streamed.is_some() && offset == head {
        return streamed.unwrap_or(now_ns);
    }
    let track_bytes = (media_b_per_ns * rev_ns).max(1.0);
    let distance = offset.abs_diff(head) as f64;
    let mut arrive = now_ns as f64 + overhead_ns;
    if distance >= track_bytes {
        let share = (distance / len.max(1) as f64).min(1.0);
        arrive += (p.track_to_track_ms + (p.full_stroke_ms - p.track_to_track_ms) * share.sqrt())
            * NS_PER_MS;
    }
    if write {
        arrive += p.write_settle_ms * NS_PER_MS;
    }
    // The platter turns at a fixed rate; a byte sits at a fixed angle of its track.
    let target = (offset as f64 / track_bytes).fract();
    let angle = (arrive / rev_ns + phase).fract();
    let wait = (target - angle).rem_euclid(1.0) * rev_ns;
    let positioned = (arrive + wait + transfer_ns) as u64;
    streamed.map_or(positioned, |s| s.min(positioned))
}

/// A drive's spindle phase from its name (FNV-1a, mixed by SplitMix64's finaliser, as a
/// share of a turn): fixed per drive, so runs repeat, and unrelated between the drives of
/// an array.
fn spindle_phase(name: &str) -> f64 {
    let mut z = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// Bytes between the head and `offset` when `offset` continues the head's stream.
fn stream_gap(p: &HddParams, head: u64, offset: u64) -> Option<u64> {
    let gap = offset.checked_sub(head)?;
    (gap as f64 <= p.readahead_kib * 1024.0).then_some(gap)
}

impl Device {
    fn submit(self: &Arc<Self>, cmd: Cmd) {
        let now = self.clock.now_ns();
        let mut st = self.state.lock();
        match &mut *st {
            DevState::Hdd(_, h) => {
                h.queue.push(cmd);
                if !h.busy {
                    drop(st);
                    self.start_next(now);
                }
            }
            DevState::Ssd(p, s) => {
                let d = usize::from(cmd.write);
                let (lat_us, iops, mb_s) = if cmd.write {
                    (p.write_latency_us, p.write_iops, p.write_mb_s)
                } else {
                    (p.read_latency_us, p.read_iops, p.read_mb_s)
                };
                let transfer = (cmd.len as f64 / (mb_s * 1e6) * 1e9) as u64;
                let start_iops = now.max(s.iops_free_ns[d]);
                s.iops_free_ns[d] = start_iops + (1e9 / iops) as u64;
                let start_bw = now.max(s.bw_free_ns[d]);
                s.bw_free_ns[d] = start_bw + transfer;
                let at = start_iops.max(start_bw + transfer) + (lat_us * 1e3) as u64;
                let done = cmd.done;
                self.clock.schedule(at, Box::new(move |_| done.fire()));
            }
        }
    }

    /// Starts the queued command that finishes first (shortest positioning time first among
    /// the drive's queue), if any.
    fn start_next(self: &Arc<Self>, now: u64) {
        let mut st = self.state.lock();
        let DevState::Hdd(p, h) = &mut *st else {
            return;
        };
        if h.queue.is_empty() {
            h.busy = false;
            return;
        }
        let window = h.queue.len().min(p.queue_depth.max(1));
        let finish = |c: &Cmd| {
            hdd_finish_ns(
                p,
                self.len,
                now,
                h.head,
                self.phase,
                (c.offset, c.len, c.write),
            )
        };
        // A command continuing the stream goes first (the nearest one); else shortest
        // positioning time first.
        let stream = h.queue[..window]
            .iter()
            .enumerate()
            .filter_map(|(i, c)| stream_gap(p, h.head, c.offset).map(|g| (g, i)))
            .min();
        let (pick, at) = match stream {
            Some((_, i)) => (i, finish(&h.queue[i])),
            None => h.queue[..window]
                .iter()
                .enumerate()
                .map(|(i, c)| (i, finish(c)))
                .min_by_key(|&(i, at)| (at, i))
                .expect("queue is not empty"),
        };
        let cmd = h.queue.remove(pick);
        h.busy = true;
        h.head = cmd.offset + cmd.len;
        let me = self.clone();
        self.clock.schedule(
            at,
            Box::new(move |t| {
                cmd.done.fire();
                me.start_next(t);
            }),
        );
    }
}

/// A member whose operations take the model's virtual time on `clock`. With `keep_data` it
/// stores what is written (sparse, in memory); without, reads return the buffer as given and
/// writes are dropped, so sweeps over many large members cost no memory.
pub struct SimMember {
    device: Arc<Device>,
    data: Option<MemoryMember>,
    name: String,
    len: u64,
    counters: MemberCounters,
}

impl SimMember {
    pub fn new(
        name: impl Into<String>,
        len: u64,
        model: &SimModel,
        clock: Arc<SimClock>,
        keep_data: bool,
    ) -> SimMember {
        let name = name.into();
        let state = match model {
            SimModel::Hdd(p) => DevState::Hdd(p.clone(), HddState::default()),
            SimModel::Ssd(p) => DevState::Ssd(p.clone(), SsdState::default()),
        };
        SimMember {
            device: Arc::new(Device {
                clock,
                len,
                phase: spindle_phase(&name),
                state: Mutex::new(state),
            }),
            data: keep_data.then(|| MemoryMember::new(name.clone(), len)),
            name,
            len,
            counters: MemberCounters::default(),
        }
    }

    /// Waits the device time of one command.
    fn serve(&self, offset: u64, len: u64, write: bool) -> DoneFuture {
        let done = Arc::new(Done::default());
        self.device.submit(Cmd {
            offset,
            len,
            write,
            done: done.clone(),
        });
        DoneFuture(done)
    }

    fn op<T: Send + 'static>(
        &self,
        op: MemberOp,
        offset: u64,
        len: u64,
        then: impl FnOnce() -> MemberResult<T> + Send + 'static,
    ) -> BoxFuture<'_, MemberResult<T>>
    where
        Self: Sized,
    {
        let g = self.counters.start(op, len);
        let checked = check_range(&self.name, op, offset, len, self.len);
        let wait = checked
            .is_ok()
            .then(|| self.serve(offset, len, op == MemberOp::Write));
        async move {
            let r = match (checked, wait) {
                (Ok(()), Some(w)) => {
                    w.await;
                    then()
                }
                (Err(e), _) => Err(e),
                (Ok(()), None) => unreachable!("a checked range is served"),
            };
            g.finish(r)
        }
        .boxed()
    }
}

impl Member for SimMember {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        let len = buf.len() as u64;
        // Memory completes at once: take the bytes now, hand them over after the wait.
        // Without stored data the caller's buffer comes back as it was.
        let r = match &self.data {
            Some(m) => m
                .read(offset, buf)
                .now_or_never()
                .expect("memory members complete at once"),
            None => Ok(buf),
        };
        self.op(MemberOp::Read, offset, len, move || r)
    }

    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        let len = data.len() as u64;
        let stored = match &self.data {
            Some(m) => m
                .write(offset, data, fua)
                .now_or_never()
                .expect("memory members complete at once"),
            None => Ok(()),
        };
        self.op(MemberOp::Write, offset, len, move || stored)
    }

    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        let g = self.counters.start(MemberOp::Flush, 0);
        futures::future::ready(g.finish(Ok(()))).boxed()
    }

    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.zero(MemberOp::Trim, offset, len)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.zero(MemberOp::WriteZeroes, offset, len)
    }

    fn counters(&self) -> &MemberCounters {
        &self.counters
    }
}

impl SimMember {
    /// Trim and write-zeroes take no device time (the drive only updates its maps).
    fn zero(&self, op: MemberOp, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        let g = self.counters.start(op, len);
        let r =
            check_range(&self.name, op, offset, len, self.len).and_then(|()| match &self.data {
                Some(m) => {
                    let f = if op == MemberOp::Trim {
                        m.trim(offset, len)
                    } else {
                        m.write_zeroes(offset, len)
                    };
                    f.now_or_never().expect("memory members complete at once")
                }
                None => Ok(()),
            });
        futures::future::ready(g.finish(r)).boxed()
    }
}

#[cfg(test)]
#[path = "timed_tests.rs"]
mod tests;

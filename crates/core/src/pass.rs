//! One streaming pass over an address space, for every background pass (scrub, rebuild):
//! windows handed out in order with a few in flight, a rate limit that may change while it
//! runs, pause, cancel, progress and a measured rate — and a checkpoint hook, called with no
//! window in flight (so it may wait for anything a window's locks would hold up: a
//! superblock commit waits for the records' lock, whose holder may be flushing through the
//! very stripes a window holds). Memory is bounded by `inflight` windows whatever the
//! capacity.
//!
//! A [`PassControl`] is shared (an `Arc`) between the pass and whoever watches it. A
//! cancelled pass keeps its position: running it again with the same control resumes there.

use crate::error::VolumeResult;
use crate::pace::PassRate;
use futures::future::{BoxFuture, FutureExt};
use futures::stream::{FuturesOrdered, StreamExt};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// How often a paused pass looks at its control again.
const PAUSE_POLL: Duration = Duration::from_millis(20);

/// The longest slice a rate-limited pass waits before it looks at its control again.
const PACE_SLICE: Duration = Duration::from_millis(50);

/// The least time a rate is measured over before it is shown.
const RATE_SPAN_MIN: Duration = Duration::from_millis(500);

/// Where a pass is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassState {
    /// Not started.
    Idle,
    Running,
    Paused,
    /// Stopped before the end by a cancel; running it again with the same control resumes.
    Cancelled,
    Done,
    /// Stopped before the end by an error ([`PassControl::failure`] says which); running it
    /// again with the same control resumes.
    Failed,
}

impl PassState {
    pub fn name(self) -> &'static str {
        match self {
            PassState::Idle => "idle",
            PassState::Running => "running",
            PassState::Paused => "paused",
            PassState::Cancelled => "cancelled",
            PassState::Done => "done",
            PassState::Failed => "failed",
        }
    }
}

const STATES: [PassState; 6] = [
    PassState::Idle,
    PassState::Running,
    PassState::Paused,
    PassState::Cancelled,
    PassState::Done,
    PassState::Failed,
];

fn state_code(s: PassState) -> u64 {
    STATES.iter().position(|&x| x == s).expect("listed") as u64
}

/// A pass's shared control and progress.
#[derive(Debug, Default)]
pub struct PassControl {
    /// Bytes per second, 0 = unlimited.
    rate_bytes_per_s: AtomicU64,
    /// Yield to client I/O ([`crate::pace`]); the rate limit still caps the pass.
    adaptive: AtomicBool,
    paused: AtomicBool,
    cancelled: AtomicBool,
    /// The next byte to do (the resume point): every byte below it is done.
    position_bytes: AtomicU64,
    total_bytes: AtomicU64,
    /// `PassState` as a number (see `state_code`).
    state: AtomicU64,
    /// Bytes per second over the current run (0 until a window is done).
    measured_bytes_per_s: AtomicU64,
    /// When the pass reached `Done` (status stops showing a pass finished long ago).
    done_at: parking_lot::Mutex<Option<Instant>>,
    /// Why the last run stopped `Failed` (cleared when a run starts).
    failure: parking_lot::Mutex<Option<String>>,
}

impl PassControl {
    /// A control for a pass from byte 0 limited to `rate_bytes_per_s` (0: unlimited).
    pub fn new(rate_bytes_per_s: u64) -> PassControl {
        let c = PassControl::default();
        c.rate_bytes_per_s.store(rate_bytes_per_s, Relaxed);
        c
    }

    /// A control that resumes at `position_bytes`.
    pub fn resume_at(rate_bytes_per_s: u64, position_bytes: u64) -> PassControl {
        let c = PassControl::new(rate_bytes_per_s);
        c.position_bytes.store(position_bytes, Relaxed);
        c
    }

    pub fn set_rate(&self, bytes_per_s: u64) {
        self.rate_bytes_per_s.store(bytes_per_s, Relaxed);
    }

    pub fn rate_limit_bytes_per_s(&self) -> u64 {
        self.rate_bytes_per_s.load(Relaxed)
    }

    /// Adaptive mode: full speed while clients are idle, yielding while they do I/O.
    pub fn set_adaptive(&self, on: bool) {
        self.adaptive.store(on, Relaxed);
    }

    /// A control for a pass from byte 0 at `rate`.
    pub fn with_rate(rate: PassRate) -> PassControl {
        let c = PassControl::new(0);
        c.set_pass_rate(rate);
        c
    }

    /// Sets the limit and the adaptive mode together.
    pub fn set_pass_rate(&self, rate: PassRate) {
        self.set_rate(rate.limit_bytes_per_s);
        self.set_adaptive(rate.adaptive);
    }

    pub fn pass_rate(&self) -> PassRate {
        PassRate {
            limit_bytes_per_s: self.rate_limit_bytes_per_s(),
            adaptive: self.is_adaptive(),
        }
    }

    pub fn is_adaptive(&self) -> bool {
        self.adaptive.load(Relaxed)
    }

    pub fn pause(&self) {
        self.paused.store(true, Relaxed);
    }

    pub fn resume(&self) {
        self.paused.store(false, Relaxed);
    }

    /// Stops the pass after the windows in flight; the position is kept.
    pub fn cancel(&self) {
        self.cancelled.store(true, Relaxed);
    }

    pub fn is_paused(&self) -> bool {
        self.paused.load(Relaxed)
    }

    /// Whether a cancel was asked for and not yet cleared by a new run (the pass may still
    /// be finishing its windows in flight).
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Relaxed)
    }

    fn set_state(&self, s: PassState) {
        if s == PassState::Done && self.state() != PassState::Done {
            *self.done_at.lock() = Some(Instant::now());
        }
        self.state.store(state_code(s), Relaxed);
    }

    /// The last run stopped on `error`: the pass is `Failed`, saying why. Also for a pass
    /// whose owner could not start its run (a reshape that cannot go on without a member):
    /// it says stopped and why rather than `idle`.
    pub fn failed(&self, error: &impl std::fmt::Display) {
        *self.failure.lock() = Some(error.to_string());
        self.set_state(PassState::Failed);
    }

    /// Why the pass failed, while it is `Failed`.
    pub fn failure(&self) -> Option<String> {
        let why = self.failure.lock().clone();
        why.filter(|_| self.state() == PassState::Failed)
    }

    /// Seconds since the pass finished, once it is done.
    pub fn done_s_ago(&self) -> Option<u64> {
        let at = (*self.done_at.lock())?;
        (self.state() == PassState::Done).then(|| at.elapsed().as_secs())
    }

    pub fn state(&self) -> PassState {
        STATES[self.state.load(Relaxed) as usize]
    }

    /// A pass with nothing to do is done at once (watchers waiting for `Done` see it).
    pub(crate) fn nothing_to_do(&self) {
        self.set_state(PassState::Done);
    }

    pub fn position_bytes(&self) -> u64 {
        self.position_bytes.load(Relaxed)
    }

    /// Moves the resume point (a new pass over the same control, or a checkpoint read back).
    pub fn set_position(&self, position_bytes: u64) {
        self.position_bytes.store(position_bytes, Relaxed);
    }

    /// What the pass covers, known before it runs: until its run starts (a resumed pass
    /// may wait for a member, or stop before its first window) its progress is a share of
    /// the whole pass, not of 0 bytes.
    pub fn set_total(&self, total_bytes: u64) {
        self.total_bytes.store(total_bytes, Relaxed);
    }

    pub fn total_bytes(&self) -> u64 {
        self.total_bytes.load(Relaxed)
    }

    /// Measured over the current run.
    pub fn measured_bytes_per_s(&self) -> u64 {
        self.measured_bytes_per_s.load(Relaxed)
    }

    /// Seconds left at the measured rate, when it is known.
    pub fn eta_s(&self) -> Option<u64> {
        let rate = self.measured_bytes_per_s();
        (rate > 0 && self.state() == PassState::Running)
            .then(|| self.total_bytes().saturating_sub(self.position_bytes()) / rate)
    }
}

/// Whether a pass waiting `left` more for the limit `limit` it computed that wait with
/// waits on: not once it is cancelled or paused, nor under another limit (a new limit starts
/// a new measured run, owing nothing).
fn keeps_pacing(ctl: &PassControl, limit: u64, left: Duration) -> bool {
    !left.is_zero()
        && !ctl.is_cancelled()
        && !ctl.is_paused()
        && ctl.rate_limit_bytes_per_s() == limit
}

/// Waits `wait` for the rate limit `limit`, in slices: a cancel, a pause or a new limit
/// ends the wait at once. One window at a low limit is a long wait (4 MiB at 64 KiB/s: a
/// minute), and a cancel or a re-rate waited all of it before taking effect. (Work gone
/// stale is the runner's to notice after the wait, as before: a replace started again
/// meanwhile is taken by the same rebuild's next pass.)
async fn pace(ctl: &PassControl, wait: Duration, limit: u64) {
    let until = Instant::now() + wait;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if !keeps_pacing(ctl, limit, left) {
            return;
        }
        crate::timer::sleep(left.min(PACE_SLICE)).await;
    }
}

/// How long to wait so that `done_bytes` since `started` keep to `rate_bytes_per_s`.
pub fn rate_delay(done_bytes: u64, elapsed: Duration, rate_bytes_per_s: u64) -> Duration {
    if rate_bytes_per_s == 0 {
        return Duration::ZERO;
    }
    let due = Duration::from_secs_f64(done_bytes as f64 / rate_bytes_per_s as f64);
    due.saturating_sub(elapsed)
}

/// The stretch of a pass its rate is measured and limited over: since it (re)started running
/// at its current limit. A pause or a new limit starts a new one, so the measured rate and
/// ETA follow the new limit at once and a lowered limit is not "paid back" for bytes done
/// at the old one (nor a raised one spent as a burst).
#[derive(Clone, Copy, Debug)]
struct MeasuredRun {
    start: Instant,
    start_bytes: u64,
    limit_bytes_per_s: u64,
    /// Where and when the run's first window ended: the rate shown is measured from there.
    /// The first windows go out at once (the limit is kept by waiting after them), so the
    /// bytes of the first one over its few milliseconds read as a rate far above the limit
    /// — a resumed scrub at 2 MiB/s said 200 MB/s and an ETA of 0 s.
    first_end: Option<(Instant, u64)>,
}

impl MeasuredRun {
    fn new(start: Instant, start_bytes: u64, limit_bytes_per_s: u64) -> MeasuredRun {
        MeasuredRun {
            start,
            start_bytes,
            limit_bytes_per_s,
            first_end: None,
        }
    }

    /// The rate to show once a window ended at `end_bytes` at `now`: bytes per second since
    /// the run's first window ended, once [`RATE_SPAN_MIN`] has passed since (`None` before:
    /// windows that went out together end together, and a few milliseconds say no rate).
    fn shown_rate(&mut self, end_bytes: u64, now: Instant) -> Option<u64> {
        let Some((at, bytes)) = self.first_end else {
            self.first_end = Some((now, end_bytes));
            return None;
        };
        let elapsed = now.saturating_duration_since(at);
        (elapsed >= RATE_SPAN_MIN)
            .then(|| ((end_bytes - bytes) as f64 / elapsed.as_secs_f64()) as u64)
    }

    /// A window ended at `end_bytes`, at `now`, with the control's limit `limit_bytes_per_s`:
    /// the bytes done and the time taken since the run started, or `None` when the limit
    /// changed (the run starts again here, with nothing measured yet).
    fn window_done(
        &mut self,
        end_bytes: u64,
        now: Instant,
        limit_bytes_per_s: u64,
    ) -> Option<(u64, Duration)> {
        if limit_bytes_per_s != self.limit_bytes_per_s {
            *self = MeasuredRun::new(now, end_bytes, limit_bytes_per_s);
            return None;
        }
        Some((end_bytes - self.start_bytes, now - self.start))
    }
}

/// A checkpoint hook: called with the position, every byte below it done, none in flight.
pub type Checkpoint<'a> = Box<dyn FnMut(u64) -> BoxFuture<'a, VolumeResult<()>> + Send + 'a>;

/// Client requests completed so far (any count that grows with client I/O only): what the
/// adaptive mode watches.
pub type Activity<'a> = Box<dyn Fn() -> u64 + Send + Sync + 'a>;

/// Whether a pass's work changed under it ([`PassWork::stale`]).
pub type Stale<'a> = Box<dyn Fn() -> bool + Send + Sync + 'a>;

/// What a pass does: `window(at, len)` for each window in order (up to `inflight` at once);
/// every `checkpoint_bytes` (0: never) the windows in flight are drained and
/// `checkpoint(position)` is awaited before the next window is handed out.
pub(crate) struct PassWork<'a> {
    pub total_bytes: u64,
    pub window_bytes: u64,
    pub inflight: usize,
    #[allow(clippy::type_complexity)]
    pub window: Box<dyn Fn(u64, u64) -> BoxFuture<'a, VolumeResult<()>> + Send + Sync + 'a>,
    pub checkpoint_bytes: u64,
    pub checkpoint: Checkpoint<'a>,
    /// Client activity for the adaptive mode (`None`: the pass ignores the mode).
    pub activity: Option<Activity<'a>>,
    /// Whether the work changed under the pass (`None`: it never does). Once it says so the
    /// pass hands out no more windows and returns `Cancelled` when those in flight are done
    /// (its control not cancelled): the caller runs it again over the new work.
    pub stale: Option<Stale<'a>>,
}

/// Runs `work` from the control's position to the end, honouring its rate limit, pause and
/// cancel. On an error the windows in flight are finished first, then the error returns
/// (the position stays below the failed window).
pub(crate) async fn run(ctl: &PassControl, work: PassWork<'_>) -> VolumeResult<PassState> {
    assert!(work.window_bytes > 0 && work.inflight > 0, "a pass moves");
    let mut runner = Runner::start(ctl, work);
    let mut in_flight: InFlight<'_> = FuturesOrdered::new();
    loop {
        if runner.checkpoint_due() && in_flight.is_empty() {
            // Everything below `next` is done and nothing is in flight.
            runner.checkpoint().await?;
            continue;
        }
        let stale = runner.is_stale();
        if !stale {
            runner.hand_out(&mut in_flight);
        }
        match in_flight.next().await {
            None => {
                if let Some(stopped) = runner.nothing_in_flight(stale).await {
                    return Ok(stopped);
                }
            }
            Some(Ok(end)) => runner.window_done(end, stale).await,
            Some(Err(e)) => {
                while in_flight.next().await.is_some() {}
                // Stopped: watchers waiting for it to end see it end, and why.
                ctl.failed(&e);
                return Err(e);
            }
        }
    }
}

/// One run of a pass: where the next window starts, the last checkpoint's place, the
/// measured stretch and how many windows may be in flight.
struct Runner<'c, 'w> {
    ctl: &'c PassControl,
    work: PassWork<'w>,
    next_bytes: u64,
    last_checkpoint_bytes: u64,
    measured: MeasuredRun,
    /// Windows in flight: the adaptive mode decides after each window.
    inflight: usize,
    /// Client requests seen at the last window's end (the adaptive mode's baseline).
    ops_seen: u64,
}

impl<'c, 'w> Runner<'c, 'w> {
    fn start(ctl: &'c PassControl, work: PassWork<'w>) -> Runner<'c, 'w> {
        ctl.total_bytes.store(work.total_bytes, Relaxed);
        // A run again of a stopped pass clears the cancel that stopped it; a cancel asked of
        // a pass not yet run (between its start and its first window) holds.
        if ctl.state() != PassState::Idle {
            ctl.cancelled.store(false, Relaxed);
        }
        *ctl.failure.lock() = None;
        // A run measures its own rate (a resumed control's last one is of another run).
        ctl.measured_bytes_per_s.store(0, Relaxed);
        let at = ctl.position_bytes();
        let mut runner = Runner {
            ctl,
            measured: MeasuredRun::new(Instant::now(), at, ctl.rate_limit_bytes_per_s()),
            next_bytes: at,
            last_checkpoint_bytes: at,
            inflight: work.inflight,
            ops_seen: 0,
            work,
        };
        runner.ops_seen = runner.client_ops();
        ctl.set_state(PassState::Running);
        runner
    }

    fn client_ops(&self) -> u64 {
        self.work.activity.as_ref().map_or(0, |a| a())
    }

    fn is_stale(&self) -> bool {
        self.work.stale.as_ref().is_some_and(|s| s())
    }

    /// Whether a window starting at `next_bytes` would pass the checkpoint's place: none
    /// is handed out there (with several in flight the checkpoint would otherwise come up
    /// to `inflight - 1` windows late, or never on a short volume).
    fn checkpoint_due(&self) -> bool {
        let every = self.work.checkpoint_bytes;
        every > 0 && self.next_bytes - self.last_checkpoint_bytes >= every
    }

    async fn checkpoint(&mut self) -> VolumeResult<()> {
        if let Err(e) = (self.work.checkpoint)(self.next_bytes).await {
            self.ctl.failed(&e);
            return Err(e);
        }
        self.last_checkpoint_bytes = self.next_bytes;
        Ok(())
    }

    /// Hands out windows in order up to the width, unless the pass is stopping or a
    /// checkpoint is due.
    fn hand_out(&mut self, in_flight: &mut InFlight<'w>) {
        let ctl = self.ctl;
        if ctl.cancelled.load(Relaxed) || ctl.is_paused() {
            return;
        }
        let total = self.work.total_bytes;
        while in_flight.len() < self.inflight && self.next_bytes < total && !self.checkpoint_due() {
            let len = (total - self.next_bytes).min(self.work.window_bytes);
            let end = self.next_bytes + len;
            let window = (self.work.window)(self.next_bytes, len);
            in_flight.push_back(window.map(move |r| r.map(|()| end)).boxed());
            self.next_bytes = end;
        }
    }

    /// Nothing is in flight and nothing was handed out: the pass ended (`Some`: how), or
    /// it is paused (it waits a little and goes on).
    async fn nothing_in_flight(&mut self, stale: bool) -> Option<PassState> {
        let ctl = self.ctl;
        let at = ctl.position_bytes();
        let ended = match () {
            _ if at >= self.work.total_bytes => Some(PassState::Done),
            _ if ctl.cancelled.load(Relaxed) => Some(PassState::Cancelled),
            // Stopped, not cancelled: its caller runs it again over the new work.
            _ if stale => Some(PassState::Cancelled),
            _ => None,
        };
        if let Some(state) = ended {
            ctl.set_state(state);
            return Some(state);
        }
        ctl.set_state(PassState::Paused);
        crate::timer::sleep(PAUSE_POLL).await;
        // The rate is measured over running time only.
        self.measured = MeasuredRun::new(Instant::now(), at, ctl.rate_limit_bytes_per_s());
        if !ctl.is_paused() {
            ctl.set_state(PassState::Running);
        }
        None
    }

    /// The oldest window in flight ended at `end` (every byte below it done): the position,
    /// the measured rate and the adaptive width follow, then the wait the limit asks for.
    async fn window_done(&mut self, end: u64, stale: bool) {
        let ctl = self.ctl;
        ctl.position_bytes.store(end, Relaxed);
        let limit = ctl.rate_limit_bytes_per_s();
        let Some((done, elapsed)) = self.measured.window_done(end, Instant::now(), limit) else {
            // Re-rated: nothing measured at the new limit yet (status shows no rate or ETA
            // rather than the old ones).
            ctl.measured_bytes_per_s.store(0, Relaxed);
            return;
        };
        // Until a second window ends, nothing is measured: no rate nor ETA rather than the
        // first window's burst.
        let shown = self.measured.shown_rate(end, Instant::now()).unwrap_or(0);
        ctl.measured_bytes_per_s.store(shown, Relaxed);
        self.inflight = self.work.inflight;
        if ctl.is_adaptive() && self.work.activity.is_some() {
            let ops = self.client_ops();
            self.inflight = crate::pace::adaptive_inflight(ops - self.ops_seen, self.work.inflight);
            self.ops_seen = ops;
        }
        // A stopping pass hands out no more windows: the limit has nothing left to pace
        // (waiting here held a stop up by one window's time per window in flight).
        let wait = match stale || ctl.cancelled.load(Relaxed) {
            true => Duration::ZERO,
            false => rate_delay(done, elapsed, limit),
        };
        pace(ctl, wait, limit).await;
    }
}

/// The windows in flight, oldest first, each yielding where it ends.
type InFlight<'w> = FuturesOrdered<BoxFuture<'w, VolumeResult<u64>>>;

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use parking_lot::Mutex;

    /// A wait for the limit ends at a cancel, a pause or a new limit, not at the end of the
    /// window's time at the old limit.
    #[test]
    fn pacing_stops_at_a_cancel_a_pause_or_a_new_limit() {
        let minute = Duration::from_secs(60);
        let ctl = PassControl::new(64 << 10);
        assert!(keeps_pacing(&ctl, 64 << 10, minute));
        assert!(!keeps_pacing(&ctl, 64 << 10, Duration::ZERO));
        ctl.set_rate(1 << 30);
        assert!(!keeps_pacing(&ctl, 64 << 10, minute), "re-rated");
        ctl.set_rate(64 << 10);
        ctl.pause();
        assert!(!keeps_pacing(&ctl, 64 << 10, minute), "paused");
        ctl.resume();
        ctl.cancel();
        assert!(!keeps_pacing(&ctl, 64 << 10, minute), "cancelled");
    }

    #[test]
    fn rate_delay_keeps_to_the_limit() {
        assert_eq!(rate_delay(100, Duration::ZERO, 0), Duration::ZERO);
        assert_eq!(
            rate_delay(1000, Duration::from_millis(200), 1000),
            Duration::from_millis(800)
        );
        assert_eq!(
            rate_delay(1000, Duration::from_secs(2), 1000),
            Duration::ZERO
        );
    }

    /// A new limit starts a new measured run: what was done at the old limit neither delays
    /// (a lowered limit) nor speeds up (a raised one) the pass at the new one.
    #[test]
    fn a_new_limit_starts_a_new_measured_run() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut run = MeasuredRun::new(t0, 0, 1000);
        assert_eq!(run.window_done(1000, t0 + s, 1000), Some((1000, s)));
        // Lowered to 10 B/s after 2000 bytes in 2 s: a new run, nothing owed.
        assert_eq!(run.window_done(2000, t0 + 2 * s, 10), None);
        assert_eq!(run.window_done(2010, t0 + 3 * s, 10), Some((10, s)));
        assert_eq!(rate_delay(10, s, 10), Duration::ZERO);
    }

    /// The rate shown is measured from the first window's end, over half a second at
    /// least: the first windows go out at once and the limit is kept by waiting after them,
    /// so their bytes over the first milliseconds are no rate (a resumed scrub at 2 MiB/s
    /// showed 200 MB/s and an ETA of 0 s).
    #[test]
    fn the_first_window_s_burst_is_not_a_rate() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut run = MeasuredRun::new(t0, 1 << 30, 1000);
        assert_eq!(run.shown_rate((1 << 30) + 4000, t0 + ms(2)), None);
        assert_eq!(run.shown_rate((1 << 30) + 8000, t0 + ms(20)), None);
        assert_eq!(run.shown_rate((1 << 30) + 8000, t0 + ms(4002)), Some(1000));
    }

    /// A pass limited to 1000 B/s never shows more than about that, from its first window
    /// on (it showed the first window's bytes over its microseconds).
    #[test]
    fn a_limited_pass_never_shows_a_rate_above_its_limit() {
        let ctl = &PassControl::new(1000);
        let seen = Mutex::new(Vec::new());
        let seen = &seen;
        let work = PassWork {
            total_bytes: 1000,
            window_bytes: 250,
            inflight: 2,
            window: Box::new(move |_, _| {
                seen.lock().push(ctl.measured_bytes_per_s());
                futures::future::ready(Ok(())).boxed()
            }),
            checkpoint_bytes: 0,
            checkpoint: Box::new(|_| futures::future::ready(Ok(())).boxed()),
            activity: None,
            stale: None,
        };
        let s = futures::executor::block_on(run(ctl, work));
        assert_eq!(s.expect("runs"), PassState::Done);
        let seen = seen.lock().clone();
        assert!(seen.iter().all(|&r| r <= 1300), "{seen:?}");
    }

    /// Windows cover the range once, in order; checkpoints come every two windows with
    /// nothing in flight; a cancel from the hook stops the pass and a second run resumes
    /// where it stopped.
    #[test]
    fn windows_cover_once_and_resume_after_cancel() {
        let (seen, afters) = (Mutex::new(Vec::new()), Mutex::new(Vec::new()));
        let (seen, afters) = (&seen, &afters);
        let ctl = &PassControl::new(0);
        let work = |cancel_at: Option<u64>| PassWork {
            total_bytes: 10,
            window_bytes: 3,
            inflight: 2,
            window: Box::new(|at, len| {
                seen.lock().push((at, len));
                futures::future::ready(Ok(())).boxed()
            }),
            checkpoint_bytes: 6,
            checkpoint: Box::new(move |pos| {
                afters.lock().push(pos);
                if Some(pos) == cancel_at {
                    ctl.cancel();
                }
                futures::future::ready(Ok(())).boxed()
            }),
            activity: None,
            stale: None,
        };
        let s = futures::executor::block_on(run(ctl, work(Some(6))));
        assert_eq!(s.expect("runs"), PassState::Cancelled);
        assert_eq!(ctl.position_bytes(), 6);
        let s = futures::executor::block_on(run(ctl, work(None)));
        assert_eq!(s.expect("runs"), PassState::Done);
        assert_eq!(*seen.lock(), vec![(0, 3), (3, 3), (6, 3), (9, 1)]);
        assert_eq!(*afters.lock(), vec![6]);
    }

    /// A cancel asked between a pass's start and its first window (the slot's task still
    /// recording where it starts) stops it there: the pass ran anyway, to its end.
    #[test]
    fn a_cancel_before_the_first_window_holds_and_a_rerun_resumes() {
        let seen = Mutex::new(Vec::new());
        let seen = &seen;
        let ctl = &PassControl::new(0);
        let work = || PassWork {
            total_bytes: 10,
            window_bytes: 4,
            inflight: 1,
            window: Box::new(|at, len| {
                seen.lock().push((at, len));
                futures::future::ready(Ok(())).boxed()
            }),
            checkpoint_bytes: 0,
            checkpoint: Box::new(|_| futures::future::ready(Ok(())).boxed()),
            activity: None,
            stale: None,
        };
        ctl.cancel();
        let s = futures::executor::block_on(run(ctl, work()));
        assert_eq!(s.expect("runs"), PassState::Cancelled);
        assert_eq!(ctl.position_bytes(), 0);
        assert!(seen.lock().is_empty(), "no window after the cancel");
        let s = futures::executor::block_on(run(ctl, work()));
        assert_eq!(s.expect("runs"), PassState::Done);
        assert_eq!(*seen.lock(), vec![(0, 4), (4, 4), (8, 2)]);
    }

    /// A window's error stops the pass `failed`, saying why (it said `cancelled`, as if an
    /// admin had stopped it); a second run resumes and clears it.
    #[test]
    fn an_error_stops_the_pass_failed_with_its_reason_and_a_rerun_resumes() {
        let ctl = &PassControl::new(0);
        let work = |fail_at: Option<u64>| PassWork {
            total_bytes: 10,
            window_bytes: 3,
            inflight: 1,
            window: Box::new(move |at, _| {
                let r = match Some(at) == fail_at {
                    true => Err(crate::VolumeError::Unavailable {
                        reason: "stripe 1 unreadable".into(),
                    }),
                    false => Ok(()),
                };
                futures::future::ready(r).boxed()
            }),
            checkpoint_bytes: 0,
            checkpoint: Box::new(|_| futures::future::ready(Ok(())).boxed()),
            activity: None,
            stale: None,
        };
        let s = futures::executor::block_on(run(ctl, work(Some(3))));
        assert!(s.is_err());
        assert_eq!(ctl.state(), PassState::Failed);
        assert_eq!(ctl.state().name(), "failed");
        assert!(ctl
            .failure()
            .is_some_and(|w| w.contains("stripe 1 unreadable")));
        assert_eq!(ctl.position_bytes(), 3);
        let s = futures::executor::block_on(run(ctl, work(None)));
        assert_eq!(s.expect("runs"), PassState::Done);
        assert_eq!(ctl.failure(), None);
    }

    /// With more windows allowed in flight than fit between two checkpoints, a checkpoint
    /// still comes at each of its places, not windows later.
    #[test]
    fn checkpoints_keep_their_place_with_many_windows_in_flight() {
        let afters = Mutex::new(Vec::new());
        let afters = &afters;
        let work = PassWork {
            total_bytes: 10,
            window_bytes: 3,
            inflight: 4,
            window: Box::new(|_, _| futures::future::ready(Ok(())).boxed()),
            checkpoint_bytes: 3,
            checkpoint: Box::new(move |pos| {
                afters.lock().push(pos);
                futures::future::ready(Ok(())).boxed()
            }),
            activity: None,
            stale: None,
        };
        let s = futures::executor::block_on(run(&PassControl::new(0), work));
        assert_eq!(s.expect("runs"), PassState::Done);
        assert_eq!(*afters.lock(), vec![3, 6, 9]);
    }

    /// Adaptive: while clients complete requests (here during windows below 20) the pass
    /// keeps `BUSY_INFLIGHT` windows in flight; once they stop it goes back to its full depth.
    /// Without the mode it keeps its full depth throughout.
    #[test]
    fn adaptive_passes_keep_fewer_windows_while_clients_are_busy() {
        let run_with = |adaptive: bool| {
            let (live, ops) = (&AtomicU64::new(0), &AtomicU64::new(0));
            let created = Mutex::new(Vec::new());
            let created = &created;
            let ctl = PassControl::new(0);
            ctl.set_adaptive(adaptive);
            let work = PassWork {
                total_bytes: 40,
                window_bytes: 1,
                inflight: 4,
                window: Box::new(move |at, _| {
                    created.lock().push((at, live.fetch_add(1, Relaxed)));
                    async move {
                        if at < 20 {
                            ops.fetch_add(1, Relaxed);
                        }
                        live.fetch_sub(1, Relaxed);
                        Ok(())
                    }
                    .boxed()
                }),
                checkpoint_bytes: 0,
                checkpoint: Box::new(|_| futures::future::ready(Ok(())).boxed()),
                activity: Some(Box::new(move || ops.load(Relaxed))),
                stale: None,
            };
            let s = futures::executor::block_on(run(&ctl, work)).expect("runs");
            assert_eq!(s, PassState::Done);
            let c = created.lock().clone();
            c
        };
        let busy = |c: &[(u64, u64)]| -> Vec<u64> {
            c.iter()
                .filter(|&&(at, _)| (4..=20).contains(&at))
                .map(|&(_, l)| l)
                .collect()
        };
        let adaptive = run_with(true);
        let most = crate::pace::BUSY_INFLIGHT as u64 - 1;
        assert!(busy(&adaptive).iter().all(|&l| l <= most), "{adaptive:?}");
        assert!(
            adaptive.iter().any(|&(at, l)| at > 21 && l == 3),
            "{adaptive:?}"
        );
        let plain = run_with(false);
        assert!(busy(&plain).contains(&3), "{plain:?}");
    }
}

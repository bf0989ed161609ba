//! What an accept loop does when `accept` fails. The usual cause is EMFILE: the process is out
//! of file descriptors, and the connection that could not be taken stays queued, so the next
//! `accept` fails again at once. Retrying every few milliseconds then only fills the log
//! (dozens of lines a second) and burns a core; the pause doubles instead, up to
//! [`AcceptBackoff::PAUSE_MAX`], and the failure is logged at most once per
//! [`AcceptBackoff::LOG_EVERY`] with how many went unlogged.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// The state of one accept loop's failures (see the module).
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    /// Failures since the last accept that succeeded.
    failures: u32,
    /// When a failure was last logged (kept across successes: a loop alternating between
    /// the two logs no faster).
    logged_at: Option<Instant>,
    /// Failures since the last logged one.
    unlogged: u64,
}

/// After one failure: how long to pause, and whether to log it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffStep {
    pub pause: Duration,
    /// `Some(n)`: log this failure, `n` others having gone unlogged since the last one.
    pub log: Option<u64>,
}

impl AcceptBackoff {
    /// The pause after a first failure.
    pub const PAUSE_FIRST: Duration = Duration::from_millis(10);
    /// The longest pause: a connection queued meanwhile waits at most this long once
    /// descriptors are free again.
    pub const PAUSE_MAX: Duration = Duration::from_secs(1);
    /// At most one log line per this long.
    pub const LOG_EVERY: Duration = Duration::from_secs(10);

    pub fn new() -> AcceptBackoff {
        AcceptBackoff::default()
    }

    /// An accept succeeded: the next failure pauses briefly again.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// An accept failed at `now`: the pause, and whether to log. Pure (no clock, no sleep).
    pub fn failed(&mut self, now: Instant) -> BackoffStep {
        let pause = (Self::PAUSE_FIRST * 2u32.saturating_pow(self.failures)).min(Self::PAUSE_MAX);
        self.failures = self.failures.saturating_add(1);
        let due = self
            .logged_at
            .is_none_or(|t| now.saturating_duration_since(t) >= Self::LOG_EVERY);
        let log = due.then(|| {
            self.logged_at = Some(now);
            std::mem::take(&mut self.unlogged)
        });
        if log.is_none() {
            self.unlogged += 1;
        }
        BackoffStep { pause, log }
    }

    /// An accept on `listener` failed with `e`: logs it if due, then pauses.
    pub async fn pause_after(&mut self, listener: &(dyn Display + Sync), e: &std::io::Error) {
        let step = self.failed(Instant::now());
        match step.log {
            Some(0) => tracing::warn!("accept on {listener} failed: {e}; retrying"),
            Some(n) => tracing::warn!(
                "accept on {listener} failed: {e}; retrying ({n} more failures since the last report)"
            ),
            None => {}
        }
        tokio::time::sleep(step.pause).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_max_and_start_over_after_a_success() {
        let mut b = AcceptBackoff::new();
        let t = Instant::now();
        let pauses: Vec<u128> = (0..10).map(|_| b.failed(t).pause.as_millis()).collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
        b.succeeded();
        assert_eq!(b.failed(t).pause, AcceptBackoff::PAUSE_FIRST);
        // However long it lasts, the pause stays at the max (no overflow).
        let last = (0..100).map(|_| b.failed(t).pause).last();
        assert_eq!(last, Some(AcceptBackoff::PAUSE_MAX));
    }

    #[test]
    fn logs_once_per_period_counting_the_rest() {
        let mut b = AcceptBackoff::new();
        let t = Instant::now();
        assert_eq!(b.failed(t).log, Some(0));
        for i in 1..50 {
            assert_eq!(b.failed(t + Duration::from_millis(i * 100)).log, None);
        }
        b.succeeded();
        assert_eq!(b.failed(t + Duration::from_millis(9_999)).log, None);
        assert_eq!(b.failed(t + AcceptBackoff::LOG_EVERY).log, Some(50));
        assert_eq!(b.failed(t + AcceptBackoff::LOG_EVERY).log, None);
    }
}

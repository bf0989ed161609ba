//! The adaptive pace of a background pass (rebuild, scrub): full speed while clients are
//! idle, yielding while they do I/O — md's `speed_min`/`speed_max` idea, decided after every
//! window from what clients did meanwhile instead of from two fixed rates.
//!
//! Idle (no client request completed since the last window ended): every window the pass
//! allows in flight, no pause. Busy: one window at a time (a client waits behind at most
//! one locked window, and the members' queues hold at most one window's I/O), and after
//! each a pause as long as the window took, so the pass keeps about half the members' time
//! ([`BUSY_SHARE_PERCENT`]) — never longer than [`MAX_GAP`], so a pass always moves and
//! notices soon when clients stop. A rate limit, if set too, still caps the pass.

use std::time::Duration;

/// The share of time a pass keeps, in percent, while clients do I/O.
pub const BUSY_SHARE_PERCENT: u32 = 50;

/// The longest pause between two windows while clients do I/O.
pub const MAX_GAP: Duration = Duration::from_millis(100);

/// A pass's rate setting, as a config or an operator gives it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassRate {
    /// Bytes per second at most (0: no limit).
    pub limit_bytes_per_s: u64,
    /// Yield to client I/O ([`adaptive_pace`]).
    pub adaptive: bool,
}

impl PassRate {
    /// A plain limit (0: unlimited).
    pub fn limit(bytes_per_s: u64) -> PassRate {
        PassRate {
            limit_bytes_per_s: bytes_per_s,
            adaptive: false,
        }
    }
}

/// How the pass goes on after a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    /// Windows in flight at once.
    pub inflight: usize,
    /// Pause before the next window is handed out.
    pub gap: Duration,
}

/// The pace after a window that took `window` while clients completed `user_ops`
/// requests (since the previous window ended); `full_inflight` is the pass's own limit.
pub fn adaptive_pace(user_ops: u64, window: Duration, full_inflight: usize) -> Pace {
    if user_ops == 0 {
        return Pace {
            inflight: full_inflight,
            gap: Duration::ZERO,
        };
    }
    let yield_share = f64::from(100 - BUSY_SHARE_PERCENT) / f64::from(BUSY_SHARE_PERCENT);
    Pace {
        inflight: 1,
        gap: window.mul_f64(yield_share).min(MAX_GAP),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_clients_get_full_speed() {
        let p = adaptive_pace(0, Duration::from_millis(30), 4);
        assert_eq!(
            p,
            Pace {
                inflight: 4,
                gap: Duration::ZERO
            }
        );
    }

    /// Busy: one window at a time and a pause as long as the window (half the time each).
    #[test]
    fn busy_clients_get_one_window_and_an_equal_pause() {
        let p = adaptive_pace(7, Duration::from_millis(30), 4);
        assert_eq!(
            p,
            Pace {
                inflight: 1,
                gap: Duration::from_millis(30)
            }
        );
    }

    /// A slow window (members swamped) never stops the pass for long.
    #[test]
    fn the_pause_is_bounded() {
        let p = adaptive_pace(1, Duration::from_secs(3), 4);
        assert_eq!(p.gap, MAX_GAP);
        assert_eq!(p.inflight, 1);
    }
}

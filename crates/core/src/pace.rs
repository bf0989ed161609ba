//! The adaptive pace of a background pass (rebuild, scrub, resync): full speed while clients
//! are idle, a guaranteed share while they do I/O — md's `speed_min`/`speed_max` idea,
//! decided after every window from what clients did meanwhile instead of from two fixed rates.
//!
//! Idle (no client request completed since the last window ended): every window the pass
//! allows in flight. Busy: [`BUSY_INFLIGHT`] windows in flight, the next handed out as soon as
//! one ends — never a pause. A client waits behind at most that many locked windows and the
//! members' queues hold at most their I/O beside the clients', so clients keep most of the
//! members' time; and the pass always moves. (An earlier version also paused as long as each
//! window took: with clients busy all the time that halved the pace again; with one window
//! busy the rebuild under load fell below 0.3 of a member's write.) A rate limit, if set
//! too, still caps the pass.

/// Windows a pass keeps in flight while clients do I/O. Two, not one: `scripts/bench-rebuild-load`
/// (RAID 5 of 4, fio 4 KiB random I/O QD 16 through NBD, quiet machine, interleaved rounds)
/// rebuilt at 0.30 of a member's write on the root disk instead of 0.16-0.18 and at 0.26-0.36
/// on tmpfs instead of 0.24-0.28, while the clients kept 0.57-0.66 of their healthy IOPS
/// (one window: 0.63-0.76).
pub const BUSY_INFLIGHT: usize = 2;

/// A pass's rate setting, as a config or an operator gives it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassRate {
    /// Bytes per second at most (0: no limit).
    pub limit_bytes_per_s: u64,
    /// Yield to client I/O ([`adaptive_inflight`]).
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

/// Windows in flight after a window while clients completed `user_ops` requests (since the
/// previous window ended); `full_inflight` is the pass's own limit. The next window is
/// handed out at once either way.
pub fn adaptive_inflight(user_ops: u64, full_inflight: usize) -> usize {
    if user_ops == 0 {
        full_inflight
    } else {
        BUSY_INFLIGHT.min(full_inflight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_clients_get_full_speed() {
        assert_eq!(adaptive_inflight(0, 4), 4);
    }

    /// Busy: [`BUSY_INFLIGHT`] windows in flight, the next at once — a share the pass always
    /// keeps.
    #[test]
    fn busy_clients_leave_one_window_always_in_flight() {
        for ops in [1, 7, 1_000_000] {
            assert_eq!(adaptive_inflight(ops, 4), BUSY_INFLIGHT);
        }
        assert_eq!(adaptive_inflight(3, 1), 1);
    }
}

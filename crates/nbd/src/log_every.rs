//! One log line for a failure that can come in floods: a client opening connection after
//! connection and abandoning each handshake (a wrong CA, a port scanner, a wrong export
//! name), or connections refused over `max_connections`, wrote one INFO line each, 150
//! connections 150 lines. The first is said at once; those after it are counted and said as a
//! count at most once per period.

use std::time::{Duration, Instant};

/// When to log a failure that repeats (pure: the caller passes the time).
#[derive(Debug)]
pub(crate) struct LogEvery {
    /// At most one line per this long.
    period: Duration,
    /// When a line was last said.
    logged_at: Option<Instant>,
    /// Failures since then, not said.
    unlogged: u64,
}

impl LogEvery {
    pub(crate) fn new(period: Duration) -> LogEvery {
        LogEvery {
            period,
            logged_at: None,
            unlogged: 0,
        }
    }

    /// A failure at `now`: `Some(n)` to log it, `n` others having gone unsaid since the last
    /// line; `None` to count it only.
    pub(crate) fn offer(&mut self, now: Instant) -> Option<u64> {
        let due = (self.logged_at).is_none_or(|t| now.saturating_duration_since(t) >= self.period);
        if !due {
            self.unlogged += 1;
            return None;
        }
        self.logged_at = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

/// The text of an abandoned handshake's line: `e`, and how many went unsaid before it.
pub(crate) fn with_unsaid(e: &dyn std::fmt::Display, unsaid: u64) -> String {
    match unsaid {
        0 => format!("connection ended: {e}"),
        n => format!(
            "connection ended: {e} ({n} more connections ended in their handshake since the last report)"
        ),
    }
}

/// The text of a refusal's line (`max` connections open), with how many went unsaid.
pub(crate) fn refusal_line(max: usize, unsaid: u64) -> String {
    match unsaid {
        0 => format!("refusing a connection: {max} open already"),
        n => format!(
            "refusing a connection: {max} open already ({n} more refused since the last report)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_one_line_then_one_count_per_period() {
        let every = Duration::from_secs(10);
        let mut l = LogEvery::new(every);
        let t = Instant::now();
        assert_eq!(l.offer(t), Some(0), "the first is said at once");
        // 149 more within the period: counted, not said.
        let said = (1..150)
            .filter_map(|i| l.offer(t + Duration::from_millis(i * 50)))
            .count();
        assert_eq!(said, 0);
        assert_eq!(
            l.offer(t + every),
            Some(149),
            "then one line with the count"
        );
        assert_eq!(l.offer(t + every), None);
        // Quiet for longer than a period: the next is said at once, nothing unsaid.
        assert_eq!(l.offer(t + every * 5), Some(1));
        assert_eq!(l.offer(t + every * 7), Some(0));
    }

    #[test]
    fn a_clock_that_goes_back_does_not_say_more() {
        let mut l = LogEvery::new(Duration::from_secs(10));
        let t = Instant::now() + Duration::from_secs(60);
        assert_eq!(l.offer(t), Some(0));
        assert_eq!(l.offer(t - Duration::from_secs(30)), None);
    }

    #[test]
    fn the_line_says_the_count_when_there_is_one() {
        let e = "TLS handshake: bad certificate";
        assert_eq!(
            with_unsaid(&e, 0),
            "connection ended: TLS handshake: bad certificate"
        );
        assert!(with_unsaid(&e, 7)
            .ends_with("(7 more connections ended in their handshake since the last report)"));
        assert_eq!(
            refusal_line(16, 0),
            "refusing a connection: 16 open already"
        );
        assert!(refusal_line(16, 3).ends_with("(3 more refused since the last report)"));
    }
}

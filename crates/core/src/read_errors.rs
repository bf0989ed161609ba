//! md's limit on read errors (`max_read_errors`): a member whose reads the redundancy keeps
//! having to correct is dying, and is failed so that the operator replaces it and reads stop
//! paying for a reconstruction each.
//!
//! What counts: an I/O error of a member's read whose bytes the engine then served from the
//! redundancy (a mirror's other copy, a parity group's rebuild) — a client's read, or a
//! scrub's (md counts those too: a check is where a dying disk shows first). A read error nothing could
//! correct is not counted: the client got an error, and the member is the only source of
//! those bytes. A checksum mismatch is not counted either: it has its own limit
//! (`checksum_error_limit`, per 4 KiB block, where one bad sector run spans several) and
//! counting it here too would let twenty rotten blocks override that limit; md likewise
//! keeps integrity (protection information) errors out of this count.
//!
//! The count decays as md's does: it halves for each whole hour since the previous counted
//! error, so a disk that hits a bad spot now and then is kept, and one that answers errors
//! by the dozen within the hour is failed. Past the limit the member is failed unless the
//! volume cannot do without it ([`crate::node::MemberTable::read_error_corrected`]).

use crate::error::VolumeError;
use crate::member::MemberOp;
use parking_lot::Mutex;
use std::time::{Duration, Instant};

/// md's default `max_read_errors` (`MD_DEFAULT_MAX_CORRECTED_READ_ERRORS`).
pub const MAX_READ_ERRORS_DEFAULT: u32 = 20;

/// What a counted read error means for its member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Within the limit (or no limit): it keeps serving.
    Keep,
    /// Past the limit: it is failed, unless the volume cannot do without it.
    Fail,
}

/// `count` after `since_last` without a counted error: halved for each whole hour (md's
/// decay; zero after 32 hours or more, where the shift would pass the count's width).
pub fn decayed(count: u32, since_last: Duration) -> u32 {
    let hours = since_last.as_secs() / 3600;
    if hours >= u64::from(u32::BITS) {
        0
    } else {
        count >> hours
    }
}

/// One more corrected read error of a member whose count is `count`, `since_last` after the
/// previous one (`None`: its first): the count with it, and the verdict against `limit`
/// (0: read errors never fail a member). Pure.
pub fn judge(count: u32, since_last: Option<Duration>, limit: u32) -> (u32, Verdict) {
    let now = since_last
        .map_or(count, |d| decayed(count, d))
        .saturating_add(1);
    let verdict = match limit {
        0 => Verdict::Keep,
        l if now > l => Verdict::Fail,
        _ => Verdict::Keep,
    };
    (now, verdict)
}

/// The member whose read error `e` is, when it counts toward the limit: a member's I/O
/// error on a read, not a checksum mismatch (see the module docs).
pub fn counted_member(e: &VolumeError) -> Option<usize> {
    match e {
        VolumeError::Member { member, source }
            if source.op == MemberOp::Read && !crate::checksum::is_mismatch(source) =>
        {
            Some(*member)
        }
        _ => None,
    }
}

/// One member's count of corrected read errors and when the last one came.
#[derive(Debug, Default)]
pub struct ReadErrorCount {
    tally: Mutex<Tally>,
}

#[derive(Debug, Default)]
struct Tally {
    count: u32,
    /// When the last counted error came (`None`: none yet).
    last: Option<Instant>,
}

impl ReadErrorCount {
    /// Counts one corrected read error at `now`: the count with it and the verdict against
    /// `limit` ([`judge`]).
    pub fn note(&self, now: Instant, limit: u32) -> (u32, Verdict) {
        let mut t = self.tally.lock();
        let since = t.last.map(|at| now.saturating_duration_since(at));
        let (count, verdict) = judge(t.count, since, limit);
        *t = Tally {
            count,
            last: Some(now),
        };
        (count, verdict)
    }

    /// The count as of `now`, decayed (what the next error's count starts from).
    pub fn at(&self, now: Instant) -> u32 {
        let t = self.tally.lock();
        match t.last {
            Some(at) => decayed(t.count, now.saturating_duration_since(at)),
            None => t.count,
        }
    }

    /// Forgets every count (a new member took the slot).
    pub fn reset(&self) {
        *self.tally.lock() = Tally::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::MemberError;
    use std::io;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn the_error_past_the_limit_fails_the_one_at_it_keeps() {
        assert_eq!(judge(0, None, 20), (1, Verdict::Keep));
        assert_eq!(judge(19, Some(Duration::ZERO), 20), (20, Verdict::Keep));
        assert_eq!(judge(20, Some(Duration::ZERO), 20), (21, Verdict::Fail));
        assert_eq!(judge(0, None, 1), (1, Verdict::Keep));
        assert_eq!(judge(1, Some(Duration::ZERO), 1), (2, Verdict::Fail));
    }

    #[test]
    fn limit_zero_never_fails() {
        assert_eq!(judge(u32::MAX, Some(Duration::ZERO), 0).1, Verdict::Keep);
        assert_eq!(judge(1000, None, 0), (1001, Verdict::Keep));
    }

    #[test]
    fn the_count_halves_for_each_whole_hour_since_the_last_error() {
        // md's rule: less than an hour keeps it whole; each whole hour halves it.
        assert_eq!(decayed(20, HOUR - Duration::from_secs(1)), 20);
        assert_eq!(decayed(20, HOUR), 10);
        assert_eq!(decayed(20, 2 * HOUR + Duration::from_secs(1800)), 5);
        assert_eq!(decayed(u32::MAX, 31 * HOUR), 1);
        assert_eq!(decayed(u32::MAX, 32 * HOUR), 0);
        assert_eq!(decayed(7, 1000 * HOUR), 0);
        // An error an hour after the twentieth: 10 + 1, kept.
        assert_eq!(judge(20, Some(HOUR), 20), (11, Verdict::Keep));
    }

    #[test]
    fn a_member_count_decays_between_errors_and_resets() {
        let c = ReadErrorCount::default();
        let t0 = Instant::now();
        for k in 1..=20 {
            assert_eq!(c.note(t0, 20), (k, Verdict::Keep));
        }
        assert_eq!(c.at(t0 + HOUR / 2), 20);
        assert_eq!(c.at(t0 + 2 * HOUR), 5, "two hours later: a quarter");
        // The 21st two hours on is the 6th: kept; 15 more in that minute reach 21: failed.
        let t1 = t0 + 2 * HOUR;
        assert_eq!(c.note(t1, 20), (6, Verdict::Keep));
        for k in 7..=20 {
            assert_eq!(c.note(t1, 20), (k, Verdict::Keep));
        }
        assert_eq!(c.note(t1, 20), (21, Verdict::Fail));
        c.reset();
        assert_eq!(c.at(t1), 0);
        assert_eq!(c.note(t1 + 100 * HOUR, 20), (1, Verdict::Keep));
    }

    #[test]
    fn only_a_members_read_io_error_counts() {
        let err = |op, source: io::Error| VolumeError::Member {
            member: 3,
            source: MemberError::new("m3", op, 0, 4096, source),
        };
        let eio = || io::Error::from_raw_os_error(5);
        assert_eq!(counted_member(&err(MemberOp::Read, eio())), Some(3));
        assert_eq!(counted_member(&err(MemberOp::Write, eio())), None);
        let mismatch = crate::checksum::ChecksumMismatch {
            volume: "v".into(),
            member_offset: 0,
            stored: 1,
            computed: 2,
            bad_blocks: 1,
        };
        let bad_block = io::Error::other(mismatch);
        assert_eq!(counted_member(&err(MemberOp::Read, bad_block)), None);
        let gone = VolumeError::Unavailable { reason: "x".into() };
        assert_eq!(counted_member(&gone), None);
    }
}

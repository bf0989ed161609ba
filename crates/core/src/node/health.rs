//! Every member's health as the volume reports it: one [`MemberHealth`] per member, read
//! from its slot in the [`MemberTable`] in one place.
//!
//! Reports (status, metrics, the service's observer) read a member's state, failure, error
//! counts and I/O together from one snapshot, so what they show of a member is of one
//! moment — not a field read per walk of the table, each at another instant.

use super::members::{MemberSlot, MemberState, MemberTable, RegionIoSnapshot};
use crate::fail_cause::Failure;
use crate::member::CounterSnapshot;

/// One member's health at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberHealth {
    /// Failed (never read again) or not.
    pub state: MemberState,
    /// Neither failed nor resyncing: it holds every byte of its role.
    pub current: bool,
    /// Why it was failed, while it is (its cause and words).
    pub failure: Option<Failure>,
    /// Read errors it returned (repaired or not).
    pub read_errors: u64,
    /// Write-type errors it was kept through (the volume cannot do without it).
    pub write_errors: u64,
    /// Read errors the redundancy corrected, as `max_read_errors` counts them now (halved
    /// per hour without one; [`crate::read_errors`]).
    pub corrected_read_errors: u32,
    /// Past its bad-block limit but kept: it holds the only readable copy of some data.
    pub kept_past_limit: bool,
    /// Past `max_read_errors` but kept: the volume cannot do without it.
    pub kept_past_read_limit: bool,
    /// This volume's own reads and writes of the member's region (volumes sharing a member
    /// file count apart).
    pub region_io: RegionIoSnapshot,
    /// The member's own counters: the whole file, every volume on it and metadata included.
    pub counters: CounterSnapshot,
}

impl MemberSlot {
    /// The member's health now.
    pub fn health(&self) -> MemberHealth {
        let failed = self.is_failed();
        MemberHealth {
            state: if failed {
                MemberState::Failed
            } else {
                MemberState::Healthy
            },
            current: !failed && !self.is_resyncing(),
            failure: if failed { self.failure() } else { None },
            read_errors: self.read_errors(),
            write_errors: self.write_errors(),
            corrected_read_errors: self.corrected_read_errors(),
            kept_past_limit: self.kept_past_limit(),
            kept_past_read_limit: self.kept_past_read_limit(),
            region_io: self.region_io(),
            counters: self.member().counters().snapshot(),
        }
    }
}

impl MemberTable {
    /// Every member's health, by member index.
    pub fn health(&self) -> Vec<MemberHealth> {
        self.slots().iter().map(MemberSlot::health).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::Member;
    use crate::memory::MemoryMember;
    use std::sync::Arc;

    fn table(n: usize) -> MemberTable {
        let members = (0..n)
            .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), 1 << 20)) as Arc<dyn Member>)
            .collect();
        MemberTable::new(members)
    }

    #[test]
    fn a_fresh_member_is_healthy_current_and_counts_nothing() {
        let h = table(2).health();
        assert_eq!(h.len(), 2);
        for m in h {
            assert_eq!(m.state, MemberState::Healthy);
            assert!(m.current && m.failure.is_none());
            assert_eq!(
                (m.read_errors, m.write_errors, m.corrected_read_errors),
                (0, 0, 0)
            );
            assert!(!m.kept_past_limit && !m.kept_past_read_limit);
            assert_eq!(m.region_io, RegionIoSnapshot::default());
        }
    }

    #[test]
    fn a_failed_member_says_why_and_a_resyncing_one_is_not_current() {
        let t = table(3);
        t.fail(1, &"pulled by the test");
        t.set_resyncing(2, true);
        let h = t.health();
        assert_eq!(h[1].state, MemberState::Failed);
        assert!(!h[1].current);
        assert_eq!(h[1].failure.as_ref().unwrap().why, "pulled by the test");
        assert_eq!(h[2].state, MemberState::Healthy);
        assert!(!h[2].current && h[2].failure.is_none());
        assert!(h[0].current);
    }

    #[test]
    fn region_io_is_the_volumes_own_count() {
        let t = table(1);
        t.slot(0).count_read(4096);
        t.slot(0).count_write(512);
        let io = t.health()[0].region_io;
        assert_eq!(
            (io.reads, io.read_bytes, io.writes, io.write_bytes),
            (1, 4096, 1, 512)
        );
    }
}

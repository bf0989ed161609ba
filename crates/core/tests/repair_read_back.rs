//! A repair counts only once its rewrite reads back. A bad spot a disk remaps when it is
//! rewritten is repaired (by a client read or a `scrub --repair`); one that still fails after
//! the rewrite (a disk out of spare sectors) is served from the redundancy every time, but is
//! never called repaired: the scrub says "rewritten, but does not read back", the repair
//! counter stays where it was, and the member's read errors keep counting toward its limit.

mod common;

use common::*;
use futures::executor::block_on;
use nbraid_core::scrub::ScrubAction;
use nbraid_core::{
    Buf, CacheMode, MemberState, ReadPolicy, ScrubControl, ScrubState, Volume, VolumeOptions,
};
use nbraid_layout::Level;
use nbraid_sim::FaultOps;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const STRIP: u64 = 16 * KIB;
/// A 4 KiB spot inside the second strip of each member.
const SPOT: std::ops::Range<u64> = STRIP + 4 * KIB..STRIP + 8 * KIB;

/// A `level` volume of `n` over `members`: round-robin mirror reads (so both copies are
/// read), write-through, no background destage.
fn over(level: Level, n: usize, members: Vec<std::sync::Arc<dyn nbraid_core::Member>>) -> Volume {
    let opts = VolumeOptions {
        read_policy: ReadPolicy::RoundRobin,
        cache: CacheMode::WriteThrough,
        cache_max_age: None,
        ..VolumeOptions::default()
    };
    Volume::new(named(level, n, None, STRIP, MIB), members, opts).expect("volume")
}

/// A `level` volume of `n` faulty memory members, written with random bytes: the volume,
/// its members, the bytes.
fn volume(
    level: Level,
    n: usize,
) -> (
    Volume,
    Vec<std::sync::Arc<nbraid_sim::Faulty<nbraid_core::MemoryMember>>>,
    Vec<u8>,
) {
    let (faulty, members) = faulty_members(n, MIB, 77, false);
    let v = over(level, n, members);
    let mut data = vec![0u8; v.capacity() as usize];
    SmallRng::seed_from_u64(77).fill(&mut data[..]);
    block_on(v.write(0, Buf::copy_from(&data), false)).expect("write");
    (v, faulty, data)
}

/// Strip by strip: a read error in a longer read of a member makes every chunk of that read
/// suspect, and each is rewritten (md rewrites after any read error); one strip a read keeps
/// the counts to the bad spot's.
fn read_all(v: &Volume) -> Vec<u8> {
    let mut out = Vec::new();
    for at in (0..v.capacity()).step_by(STRIP as usize) {
        out.extend_from_slice(&block_on(v.read(at, STRIP)).expect("read"));
    }
    out
}

fn scrub(v: &Volume) -> (nbraid_core::ScrubReport, Vec<ScrubAction>) {
    let ctl = ScrubControl::new(true, 0);
    let r = block_on(v.scrub(&ctl)).expect("scrub");
    assert_eq!(r.state, ScrubState::Done);
    let actions = (ctl.findings().by_member.values())
        .flat_map(|m| m.first.iter().map(|f| f.action))
        .collect();
    (r, actions)
}

/// Everything, then the mirror's strip at `STRIP` twice more (round-robin mirrors reach copy
/// 1 within two reads of it).
fn read_twice(v: &Volume, data: &[u8], level: Level) {
    assert!(read_all(v) == data, "{level:?}: never the bad bytes");
    for _ in 0..2 {
        let got = block_on(v.read(STRIP, STRIP)).expect("read");
        assert!(
            got[..] == data[STRIP as usize..2 * STRIP as usize],
            "{level:?}"
        );
    }
}

const LEVELS: [(Level, usize); 3] = [(Level::Raid1, 2), (Level::Raid5, 4), (Level::Raid6, 5)];

#[test]
fn a_scrub_repair_that_does_not_read_back_is_not_called_repaired() {
    for (level, n) in LEVELS {
        let (v, faulty, data) = volume(level, n);
        faulty[1].fail_range(FaultOps::READ, SPOT);
        let (r, actions) = scrub(&v);
        assert_eq!(r.repaired, 0, "{level:?}: {r:?} {actions:?}");
        assert!(
            !actions.is_empty() && actions.iter().all(|a| *a == ScrubAction::RewriteDidNotHold),
            "{level:?}: {actions:?}"
        );
        assert!(!ScrubAction::RewriteDidNotHold.repaired());
        assert_eq!(v.counters().repairs, 0, "{level:?}");
        // Still served right from the redundancy.
        assert!(read_all(&v) == data, "{level:?}");
        assert_eq!(
            v.member_health()[1].state,
            MemberState::Healthy,
            "{level:?}"
        );
        // The disk remaps it after all: the next scrub's rewrite holds.
        faulty[1].clear_faults();
        faulty[1].fail_reads_until_written(SPOT);
        let (r, actions) = scrub(&v);
        assert!(r.repaired > 0, "{level:?}: {r:?}");
        assert!(
            actions.iter().all(|a| a.repaired()),
            "{level:?}: {actions:?}"
        );
        assert!(read_all(&v) == data, "{level:?}");
    }
}

#[test]
fn a_read_repair_that_does_not_read_back_is_not_counted() {
    for (level, n) in LEVELS {
        let (v, faulty, data) = volume(level, n);
        faulty[1].fail_range(FaultOps::READ, SPOT);
        read_twice(&v, &data, level);
        assert!(
            v.member_health()[1].read_errors >= 2,
            "{level:?}: {:?}",
            v.member_health()[1]
        );
        assert_eq!(
            v.counters().repairs,
            0,
            "{level:?}: a rewrite that did not hold"
        );
        assert_eq!(
            v.member_health()[1].state,
            MemberState::Healthy,
            "{level:?}"
        );
        // Remapped on the next rewrite: counted then.
        faulty[1].clear_faults();
        faulty[1].fail_reads_until_written(SPOT);
        read_twice(&v, &data, level);
        assert_eq!(v.counters().repairs, 1, "{level:?}");
    }
}

/// A read-only volume (`read_only = true`) refuses the repair a read error asks for: its
/// member is kept, not failed for that refusal, and the bytes are served from the others.
#[test]
fn a_read_only_volume_keeps_the_member_whose_repair_it_refused() {
    for (level, n) in LEVELS {
        let (v, faulty, data) = volume(level, n);
        drop(v);
        let members = (faulty.iter())
            .map(|f| {
                let m: std::sync::Arc<dyn nbraid_core::Member> = f.clone();
                std::sync::Arc::new(nbraid_core::ReadOnlyMember(m))
                    as std::sync::Arc<dyn nbraid_core::Member>
            })
            .collect();
        let v = over(level, n, members);
        faulty[1].fail_range(FaultOps::READ, SPOT);
        read_twice(&v, &data, level);
        assert!(v.member_health()[1].read_errors >= 1, "{level:?}");
        assert_eq!(
            v.member_health()[1].state,
            MemberState::Healthy,
            "{level:?}"
        );
        assert_eq!(v.counters().repairs, 0, "{level:?}");
    }
}

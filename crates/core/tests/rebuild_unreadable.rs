//! A rebuild whose only source of some bytes cannot read them (a bad sector on the last copy
//! of a mirror, on a stripe's survivor after one member is lost): the pass stops naming the
//! volume's bytes that cannot be rebuilt, not a 4 MiB member read; every other byte of the
//! volume still reads as written; writing the named bytes again (from a backup) lets the
//! next rebuild finish, after which the new member holds the data alone. A read error that
//! does not come back costs the pass nothing. Mirrors, RAID 5 with 4 KiB to 1 MiB strips,
//! RAID 50, RAID 10, write-through and write-back.

mod common;

use common::*;
use futures::executor::block_on;
use nbraid_core::{
    Buf, CacheMode, Member, MemoryMember, PassControl, PassState, Volume, VolumeError,
    VolumeOptions,
};
use nbraid_layout::Level;
use nbraid_sim::{FaultOps, Faulty};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::ops::Range;
use std::sync::Arc;

const BLOCK: u64 = 4096;

struct Case {
    level: Level,
    members: usize,
    spans: Option<usize>,
    strip: u64,
    /// The member lost and rebuilt onto a new one.
    failed: usize,
    /// The survivor with a bad block.
    bad: usize,
    cache: bool,
}

fn case(level: Level, members: usize, strip: u64, failed: usize, bad: usize) -> Case {
    Case {
        level,
        members,
        spans: None,
        strip,
        failed,
        bad,
        cache: false,
    }
}

struct Rig {
    faulty: Vec<Arc<Faulty<MemoryMember>>>,
    v: Volume,
    model: Vec<u8>,
    /// The bad block's range on its member.
    bad_range: Range<u64>,
}

/// The case's volume, filled, its `failed` member replaced by a new one and a bad block on
/// member `bad`, a few strips in (past the first rebuild window when strips are small).
fn rig(c: &Case) -> Rig {
    let member_len = (48 * c.strip).max(24 << 20);
    let g = named(c.level, c.members, c.spans, c.strip, member_len);
    let faulty: Vec<_> = (0..c.members)
        .map(|i| {
            Arc::new(Faulty::new(
                MemoryMember::new(format!("m{i}"), member_len),
                i as u64,
            ))
        })
        .collect();
    let mems: Vec<Arc<dyn Member>> = faulty.iter().map(|m| m.clone() as _).collect();
    let opts = VolumeOptions {
        block_size: 4096,
        members_known_zero: true,
        cache: if c.cache {
            CacheMode::WriteBack { bytes: 4 << 20 }
        } else {
            CacheMode::WriteThrough
        },
        cache_max_age: None,
        ..VolumeOptions::default()
    };
    let v = Volume::new(g, mems, opts).expect("volume");
    let mut model = vec![0u8; v.capacity() as usize];
    SmallRng::seed_from_u64(c.strip ^ c.members as u64).fill(&mut model[..]);
    block_on(async {
        for (i, piece) in model.chunks(1 << 20).enumerate() {
            v.write(i as u64 * (1 << 20), Buf::copy_from(piece), false)
                .await
                .expect("fill");
        }
        v.flush().await.expect("flush");
    });
    v.fail_member(c.failed, "test");
    let new = Arc::new(Faulty::new(MemoryMember::new("new", member_len), 99));
    v.install_member(c.failed, new as Arc<dyn Member>)
        .expect("install");
    let at = (5 << 20) + 3 * c.strip + BLOCK;
    let bad_range = at..at + BLOCK;
    Rig {
        faulty,
        v,
        model,
        bad_range,
    }
}

/// The volume's 4 KiB blocks a read cannot return; every other block must read as written.
fn unreadable_blocks(r: &Rig) -> Vec<u64> {
    let mut lost = Vec::new();
    for at in (0..r.v.capacity()).step_by(BLOCK as usize) {
        match block_on(r.v.read(at, BLOCK)) {
            Ok(b) => assert!(
                b[..] == r.model[at as usize..(at + BLOCK) as usize],
                "block {at} reads other bytes than written"
            ),
            Err(_) => lost.push(at),
        }
    }
    lost
}

/// The case's rebuild stops naming bytes that cover every block lost to a read, no more than
/// one stripe's worth (one block on a mirror); writing them again lets it finish.
fn stops_naming_the_bytes_and_finishes_once_they_are_written(c: Case) {
    let r = rig(&c);
    r.faulty[c.bad].fail_reads_until_written(r.bad_range.clone());
    let ctl = PassControl::new(0);
    let err = block_on(r.v.rebuild(&ctl)).expect_err("the bad block stops the rebuild");
    let text = err.to_string();
    let VolumeError::Unrebuildable { ranges, .. } = err else {
        panic!("{:?}: not the unrebuildable bytes: {text}", c.level);
    };
    assert!(text.contains("cannot be rebuilt"), "{text}");
    assert!(text.contains(&format!("{}+", ranges[0].start)), "{text}");
    let named: u64 = ranges.iter().map(|x| x.end - x.start).sum();
    let data_chunks = match c.level {
        Level::Raid1 | Level::Raid10 => 1,
        Level::Raid50 => c.members / c.spans.unwrap() - 1,
        _ => c.members - 1,
    } as u64;
    let most = if data_chunks == 1 {
        BLOCK
    } else {
        data_chunks * c.strip
    };
    assert!(
        named <= most,
        "{:?} strip {}: {named} bytes named, a stripe holds {most}: {ranges:?}",
        c.level,
        c.strip
    );
    let lost = unreadable_blocks(&r);
    assert!(!lost.is_empty(), "a block was lost to the read error");
    for b in &lost {
        assert!(
            ranges.iter().any(|x| x.contains(b)),
            "{:?}: lost block {b} is not among the named {ranges:?}",
            c.level
        );
    }
    // What an operator does: the named bytes written again from a backup.
    for x in &ranges {
        let bytes = &r.model[x.start as usize..x.end as usize];
        block_on(r.v.write(x.start, Buf::copy_from(bytes), false)).expect("rewrite");
    }
    let (state, done) = block_on(r.v.rebuild(&ctl)).expect("the rebuild finishes");
    assert_eq!((state, done), (PassState::Done, vec![c.failed]));
    assert!(unreadable_blocks(&r).is_empty());
    // The new member holds its bytes: the volume reads the same without the bad member.
    r.v.fail_member(c.bad, "test");
    assert!(unreadable_blocks(&r).is_empty());
}

#[test]
fn mirrors_name_the_one_block_no_copy_can_read() {
    stops_naming_the_bytes_and_finishes_once_they_are_written(case(
        Level::Raid1,
        2,
        64 << 10,
        1,
        0,
    ));
    stops_naming_the_bytes_and_finishes_once_they_are_written(case(
        Level::Raid1,
        2,
        64 << 10,
        0,
        1,
    ));
    stops_naming_the_bytes_and_finishes_once_they_are_written(case(
        Level::Raid10,
        4,
        64 << 10,
        2,
        3,
    ));
    stops_naming_the_bytes_and_finishes_once_they_are_written(Case {
        cache: true,
        ..case(Level::Raid1, 2, 64 << 10, 0, 1)
    });
}

#[test]
fn parity_groups_name_the_stripe_and_finish_after_it_is_rewritten() {
    for strip in [4 << 10, 64 << 10, 1 << 20] {
        stops_naming_the_bytes_and_finishes_once_they_are_written(case(
            Level::Raid5,
            4,
            strip,
            0,
            2,
        ));
    }
    stops_naming_the_bytes_and_finishes_once_they_are_written(Case {
        cache: true,
        ..case(Level::Raid5, 4, 64 << 10, 3, 1)
    });
    stops_naming_the_bytes_and_finishes_once_they_are_written(Case {
        spans: Some(2),
        ..case(Level::Raid50, 6, 64 << 10, 0, 1)
    });
}

/// A read error that does not come back: the failed window is rebuilt piece by piece and the
/// pass finishes as if nothing happened.
#[test]
fn a_read_error_that_goes_away_costs_the_pass_nothing() {
    for c in [
        case(Level::Raid1, 2, 64 << 10, 1, 0),
        case(Level::Raid5, 4, 64 << 10, 0, 2),
    ] {
        let r = rig(&c);
        r.faulty[c.bad].fail_range_times(FaultOps::READ, r.bad_range.clone(), 1);
        let (state, done) = block_on(r.v.rebuild(&PassControl::new(0))).expect("rebuild");
        assert_eq!(
            (state, done),
            (PassState::Done, vec![c.failed]),
            "{:?}",
            c.level
        );
        r.v.fail_member(c.bad, "test");
        assert!(unreadable_blocks(&r).is_empty(), "{:?}", c.level);
    }
}

/// RAID 6 loses one member and meets a bad block on another: it still has the parity to
/// rebuild through it, and does.
#[test]
fn raid6_rebuilds_through_a_bad_block() {
    let c = case(Level::Raid6, 5, 64 << 10, 0, 2);
    let r = rig(&c);
    r.faulty[c.bad].fail_reads_until_written(r.bad_range.clone());
    let (state, done) = block_on(r.v.rebuild(&PassControl::new(0))).expect("rebuild");
    assert_eq!((state, done), (PassState::Done, vec![0]));
    r.v.fail_member(1, "test");
    assert!(unreadable_blocks(&r).is_empty());
}

/// A write of one lost block alone cannot be planned (the stripe's other lost chunk is
/// needed for its parity) and is refused naming both children, the unreadable one too
/// (it named the failed member alone: "lost children [1], more than its 1 parity chunk").
#[test]
fn a_write_of_one_lost_block_is_refused_naming_the_unreadable_child() {
    // Member 1 holds data in the bad block's row: two of the row's chunks are lost.
    let c = case(Level::Raid5, 4, 64 << 10, 1, 2);
    let r = rig(&c);
    r.faulty[c.bad].fail_reads_until_written(r.bad_range.clone());
    block_on(r.v.rebuild(&PassControl::new(0))).expect_err("the bad block stops the rebuild");
    let lost = unreadable_blocks(&r);
    assert_eq!(lost.len(), 2, "{lost:?}");
    for b in lost {
        let bytes = Buf::copy_from(&r.model[b as usize..(b + BLOCK) as usize]);
        let e = block_on(r.v.write(b, bytes, false)).expect_err("refused");
        assert!(e.to_string().contains("lost children [1, 2]"), "{e}");
    }
}

//! Scrub of a RAID 6 with one member failed (it skipped every stripe: "0 checked, 120
//! skipped"): one syndrome is left, and it checks every stripe. Whichever role the failed
//! member holds in a stripe — P, Q or a data chunk — a chunk corrupted on any surviving
//! member behind the engine's back is found; repair regenerates the surviving parity (one
//! syndrome cannot say which chunk is wrong), which restores a corrupted parity chunk bit
//! for bit, and with checksums a corrupted block is named and rebuilt whatever it holds.
//! RAID 60 with one member out in one group checks the other group fully and that group
//! with its syndrome left. RAID 5 with one out and RAID 6 with two cannot check anything,
//! and say so: every stripe skipped for want of redundancy.

mod common;

use common::*;
use futures::executor::block_on;
use nbraid_core::checksum::{area_bytes, ChecksumArea, ChecksumSetup, BLOCK_BYTES};
use nbraid_core::scrub::{ScrubAction, ScrubFindings, ScrubFound};
use nbraid_core::{
    Buf, Member, MemoryMember, ScrubControl, ScrubReport, ScrubState, Volume, VolumeOptions,
};
use nbraid_layout::{Geometry, Level, ParityLayout, StripeRoles};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// Bytes of each member's data region.
const MEMBER: u64 = 2 * MIB;

/// The member every test fails.
const FAILED: usize = 1;

/// A volume over memory members, and the bytes it should hold.
struct Rig {
    v: Volume,
    mems: Vec<Arc<MemoryMember>>,
    model: Vec<u8>,
    rng: SmallRng,
}

/// A volume of `g` over `n` members of [`MEMBER`] bytes (and a checksum area after each
/// with `checksums`), filled with random bytes from `seed`.
fn rig(g: Geometry, n: usize, checksums: bool, seed: u64) -> Rig {
    let area = if checksums { area_bytes(MEMBER) } else { 0 };
    let mems: Vec<Arc<MemoryMember>> = (0..n)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), MEMBER + area)))
        .collect();
    let dyns = mems.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
    let areas = (0..n)
        .map(|_| {
            Some(ChecksumArea {
                offset_bytes: MEMBER,
                len_bytes: area,
            })
        })
        .collect();
    let opts = VolumeOptions {
        block_size: 4096,
        members_known_zero: true,
        cache_max_age: None,
        checksums: checksums.then(|| ChecksumSetup::new("t", areas, true).with_cache_pages(2)),
        ..VolumeOptions::default()
    };
    let v = Volume::new(g, dyns, opts).expect("volume");
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = vec![0u8; v.capacity() as usize];
    rng.fill(&mut model[..]);
    block_on(async {
        for (i, piece) in model.chunks(MIB as usize).enumerate() {
            v.write(i as u64 * MIB, Buf::copy_from(piece), false)
                .await
                .expect("write");
        }
        v.flush().await.expect("flush");
    });
    Rig {
        v,
        mems,
        model,
        rng,
    }
}

impl Rig {
    /// A whole scrub (checking, or `repair`ing): its report and findings.
    fn scrub(&self, repair: bool) -> (ScrubReport, ScrubFindings) {
        let ctl = ScrubControl::new(repair, 0);
        let r = block_on(self.v.scrub(&ctl)).expect("scrub");
        assert_eq!(r.state, ScrubState::Done);
        (r, ctl.findings())
    }

    fn peek(&self, m: usize, at: u64, len: u64) -> Vec<u8> {
        let mut b = vec![0; len as usize];
        self.mems[m].peek(at, &mut b);
        b
    }

    /// Flips bits of two bytes of member `m`'s chunk at `at` (`strip` bytes long).
    fn flip(&self, m: usize, at: u64, strip: u64) {
        for (off, bits) in [(strip / 3, 0x81u8), (strip - 1, 0x10)] {
            let mut b = [0u8];
            self.mems[m].peek(at + off, &mut b);
            self.mems[m].poke(at + off, &[b[0] ^ bits]);
        }
    }

    /// Overwrites block `block` of member `m` with random bytes.
    fn junk(&mut self, m: usize, block: u64) {
        let mut junk = vec![0u8; BLOCK_BYTES as usize];
        self.rng.fill(&mut junk[..]);
        self.mems[m].poke(block * BLOCK_BYTES, &junk);
    }

    /// The logical bytes at which the volume differs from the model: (first, last).
    fn differs(&self) -> Option<(u64, u64)> {
        let back = block_on(async {
            let mut out = Vec::with_capacity(self.model.len());
            while (out.len() as u64) < self.v.capacity() {
                let n = (self.v.capacity() - out.len() as u64).min(MIB);
                out.extend_from_slice(&self.v.read(out.len() as u64, n).await.expect("read"));
            }
            out
        });
        let bad = |(i, (x, y)): (usize, (&u8, &u8))| (x != y).then_some(i as u64);
        let first = back.iter().zip(&self.model).enumerate().find_map(bad)?;
        let last = back
            .iter()
            .zip(&self.model)
            .enumerate()
            .rev()
            .find_map(bad)?;
        Some((first, last))
    }

    /// Writes the model's bytes of `[at, at+len)` through the volume again.
    fn rewrite(&self, at: u64, len: u64) {
        let bytes = Buf::copy_from(&self.model[at as usize..(at + len) as usize]);
        block_on(self.v.write(at, bytes, false)).expect("rewrite");
    }
}

fn roles(n: usize, s: u64) -> StripeRoles {
    StripeRoles::md(ParityLayout::default(), n, 2, s)
}

/// The role a member holds in a stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    P,
    Q,
    Data,
}

fn role_of(r: &StripeRoles, m: usize) -> Role {
    match m {
        m if m == r.p => Role::P,
        m if Some(m) == r.q => Role::Q,
        _ => Role::Data,
    }
}

/// The surviving parity chunk a repair regenerates when `lost` is out: Q, or P when Q is
/// the one lost (a lost data chunk is rebuilt from P, so Q is the one that checks it).
fn regenerated(r: &StripeRoles, lost: Role) -> usize {
    match lost {
        Role::Q => r.p,
        Role::P | Role::Data => r.q.expect("RAID 6"),
    }
}

/// RAID 6 of 4 and 6 members, 4 KiB and 256 KiB strips, member 1 failed: stripes where it
/// held P, Q and a data chunk each get a chunk corrupted on every surviving member in turn.
/// The check finds exactly that stripe and changes nothing; repair regenerates the surviving
/// parity that checks the stripe (a finding on its member); a second check finds nothing.
/// Where the corrupted chunk is the one regenerated the volume reads as written; where it is
/// not (a data chunk, or the P a lost data chunk is rebuilt from), no syndrome is left to
/// say which chunk is wrong: only that stripe's bytes differ, and writing them again through
/// the volume makes the stripe whole.
#[test]
fn raid6_with_a_member_failed_checks_every_stripe_with_the_syndrome_left() {
    for n in [4, 6] {
        for strip in [4 * KIB, 256 * KIB] {
            let what = format!("RAID 6 x{n}, {} KiB strips", strip / KIB);
            let stripes = MEMBER / strip;
            let width = (n as u64 - 2) * strip;
            let r = rig(named(Level::Raid6, n, None, strip, MEMBER), n, false, 7);
            r.v.fail_member(FAILED, "test");
            let (clean, _) = r.scrub(false);
            let counts = (clean.checked, clean.mismatches, clean.skipped);
            assert_eq!(counts, (stripes, 0, 0), "{what}: {clean:?}");
            for lost in [Role::P, Role::Q, Role::Data] {
                let s = (0..n as u64)
                    .find(|&s| role_of(&roles(n, s), FAILED) == lost)
                    .expect("every role turns up within n stripes");
                let rs = roles(n, s);
                for victim in (0..n).filter(|&m| m != FAILED) {
                    let what = format!(
                        "{what}: stripe {s}, member {FAILED} ({lost:?}) failed, member {victim} ({:?}) corrupted",
                        role_of(&rs, victim)
                    );
                    let at = s * strip;
                    let before = r.peek(victim, at, strip);
                    r.flip(victim, at, strip);
                    let after = r.peek(victim, at, strip);
                    let (found, _) = r.scrub(false);
                    let counts = (
                        found.checked,
                        found.mismatches,
                        found.repaired,
                        found.skipped,
                    );
                    assert_eq!(counts, (stripes, 1, 0, 0), "{what}: {found:?}");
                    assert_eq!(
                        r.peek(victim, at, strip),
                        after,
                        "{what}: a check writes nothing"
                    );
                    let (fixed, findings) = r.scrub(true);
                    assert_eq!(
                        (fixed.mismatches, fixed.repaired),
                        (1, 1),
                        "{what}: {fixed:?}"
                    );
                    let fixer = regenerated(&rs, lost);
                    let named: Vec<usize> = findings.by_member.keys().copied().collect();
                    assert_eq!(named, vec![fixer], "{what}: {findings:?}");
                    let (again, _) = r.scrub(false);
                    assert_eq!(again.mismatches, 0, "{what}: {again:?}");
                    if victim == fixer {
                        assert_eq!(r.peek(victim, at, strip), before, "{what}: bit for bit");
                        assert_eq!(r.differs(), None, "{what}");
                        continue;
                    }
                    // Not provable: the data as read is kept, and only this stripe is off.
                    if let Some((lo, hi)) = r.differs() {
                        assert!(
                            lo >= s * width && hi < (s + 1) * width,
                            "{what}: {lo}..={hi}"
                        );
                    }
                    r.rewrite(s * width, width);
                    assert_eq!(r.differs(), None, "{what}: written again");
                    let (healed, _) = r.scrub(false);
                    assert_eq!(healed.mismatches, 0, "{what}: {healed:?}");
                }
            }
        }
    }
}

/// With checksums, a block of any surviving chunk overwritten behind the engine's back is
/// named by its checksum even with a member failed, rebuilt from what parity is left (the
/// failed member's chunk counts against it), checked against its checksum and rewritten:
/// the volume reads as written, whatever the failed member held in that stripe.
#[test]
fn raid6_with_a_member_failed_rebuilds_a_block_its_checksum_names() {
    for (n, strip) in [(4, 4 * KIB), (5, 64 * KIB), (6, 256 * KIB)] {
        let what = format!("RAID 6 x{n}, {} KiB strips", strip / KIB);
        let stripes = MEMBER / strip;
        let mut r = rig(named(Level::Raid6, n, None, strip, MEMBER), n, true, 11);
        r.v.fail_member(FAILED, "test");
        for lost in [Role::P, Role::Q, Role::Data] {
            let s = (0..n as u64)
                .find(|&s| role_of(&roles(n, s), FAILED) == lost)
                .expect("every role turns up within n stripes");
            for victim in (0..n).filter(|&m| m != FAILED) {
                let what = format!("{what}: stripe {s}, {lost:?} failed, member {victim} bad");
                let block = (s * strip + strip / 2) / BLOCK_BYTES;
                let before = r.peek(victim, block * BLOCK_BYTES, BLOCK_BYTES);
                r.junk(victim, block);
                let (found, _) = r.scrub(false);
                let counts = (found.checked, found.unreadable, found.mismatches);
                assert_eq!(counts, (stripes, 1, 0), "{what}: {found:?}");
                let (fixed, findings) = r.scrub(true);
                assert_eq!(
                    (fixed.unreadable, fixed.repaired),
                    (1, 1),
                    "{what}: {fixed:?}"
                );
                let named: Vec<usize> = findings.by_member.keys().copied().collect();
                assert_eq!(named, vec![victim], "{what}: {findings:?}");
                assert_eq!(findings.by_member[&victim].repaired, 1, "{what}");
                let now = r.peek(victim, block * BLOCK_BYTES, BLOCK_BYTES);
                assert!(now == before, "{what}: the block is restored");
                assert_eq!(r.differs(), None, "{what}");
                let (again, _) = r.scrub(false);
                assert_eq!(
                    (again.unreadable, again.mismatches),
                    (0, 0),
                    "{what}: {again:?}"
                );
            }
        }
    }
}

/// RAID 60 (two groups of four) with one member out in the first group: the second group
/// is checked fully — a corrupted data chunk there is located by both syndromes and
/// restored bit for bit — and the first with its syndrome left, its regenerated parity
/// restored; every stripe of both is checked, none skipped.
#[test]
fn raid60_with_a_member_out_checks_both_groups() {
    for strip in [4 * KIB, 256 * KIB] {
        let what = format!("RAID 60 x8, {} KiB strips", strip / KIB);
        let stripes = 2 * MEMBER / strip;
        let r = rig(named(Level::Raid60, 8, Some(2), strip, MEMBER), 8, false, 3);
        r.v.fail_member(FAILED, "test");
        // Group 0 (members 0..4): a stripe where the failed member holds P; Q checks it.
        let s0 = (0..4).find(|&s| roles(4, s).p == FAILED).expect("P turns");
        let q0 = roles(4, s0).q.expect("RAID 6");
        // Group 1 (members 4..8): a data chunk.
        let s1 = 2;
        let d1 = 4 + roles(4, s1).data[0];
        let (before_q, before_d) = (r.peek(q0, s0 * strip, strip), r.peek(d1, s1 * strip, strip));
        r.flip(q0, s0 * strip, strip);
        r.flip(d1, s1 * strip, strip);
        let (found, _) = r.scrub(false);
        let counts = (found.checked, found.mismatches, found.skipped);
        assert_eq!(counts, (stripes, 2, 0), "{what}: {found:?}");
        let (fixed, findings) = r.scrub(true);
        assert_eq!(
            (fixed.mismatches, fixed.repaired),
            (2, 2),
            "{what}: {fixed:?}"
        );
        let named: Vec<usize> = findings.by_member.keys().copied().collect();
        assert_eq!(named, vec![q0.min(d1), q0.max(d1)], "{what}: {findings:?}");
        assert_eq!(
            r.peek(q0, s0 * strip, strip),
            before_q,
            "{what}: Q restored"
        );
        assert_eq!(
            r.peek(d1, s1 * strip, strip),
            before_d,
            "{what}: data restored"
        );
        assert_eq!(r.differs(), None, "{what}");
        assert_eq!(r.scrub(false).0.mismatches, 0, "{what}");
    }
}

/// Nothing left to check with — RAID 5 with one member out, RAID 6 with two — is said, not
/// passed over: every stripe is skipped for want of redundancy and counted so, none checked.
#[test]
fn without_redundancy_left_every_stripe_is_skipped_and_says_why() {
    for (level, n, out) in [(Level::Raid5, 4, &[FAILED][..]), (Level::Raid6, 5, &[0, 3])] {
        let strip = 64 * KIB;
        let r = rig(named(level, n, None, strip, MEMBER), n, false, 5);
        for &m in out {
            r.v.fail_member(m, "test");
        }
        let (rep, _) = r.scrub(true);
        let stripes = MEMBER / strip;
        let counts = (
            rep.checked,
            rep.skipped,
            rep.skipped_no_redundancy,
            rep.skipped_stale,
        );
        assert_eq!(counts, (0, stripes, stripes, 0), "{level:?} x{n}: {rep:?}");
        assert_eq!(rep.repaired, 0);
    }
}

/// Without redundancy left the stripes are still read, through the checksums: a block
/// overwritten behind the engine's back on a surviving member is named (member, offset,
/// checksum mismatch) and counted unreadable — nothing can rebuild it, but the operator
/// learns where data is already lost, before a rebuild of the failed member trips on it —
/// and nothing is written, checking or repairing. (It was skipped unread: "0 unreadable".)
#[test]
fn without_redundancy_a_block_failing_its_checksum_is_still_named() {
    let cases = [
        (Level::Raid5, 4, &[FAILED][..], 64 * KIB),
        (Level::Raid5, 5, &[FAILED][..], 4 * KIB),
        (Level::Raid6, 5, &[0, 3][..], 256 * KIB),
    ];
    for (level, n, out, strip) in cases {
        let what = format!("{level:?} x{n}, {} KiB strips", strip / KIB);
        let stripes = MEMBER / strip;
        let mut r = rig(named(level, n, None, strip, MEMBER), n, true, 9);
        for &m in out {
            r.v.fail_member(m, "test");
        }
        let victim = (0..n).find(|m| !out.contains(m)).expect("a survivor");
        let block = (2 * strip + strip / 2) / BLOCK_BYTES;
        r.junk(victim, block);
        let junked = r.peek(victim, block * BLOCK_BYTES, BLOCK_BYTES);
        for repair in [false, true] {
            let what = format!("{what}, repair {repair}");
            let (rep, findings) = r.scrub(repair);
            let counts = (rep.checked, rep.skipped_no_redundancy, rep.unreadable);
            assert_eq!(counts, (0, stripes, 1), "{what}: {rep:?}");
            assert_eq!(rep.repaired, 0, "{what}");
            let named: Vec<usize> = findings.by_member.keys().copied().collect();
            assert_eq!(named, vec![victim], "{what}: {findings:?}");
            let f = &findings.by_member[&victim].first[0];
            let place = (f.member_offset_bytes, f.len_bytes, f.found, f.action);
            let expected = (
                block * BLOCK_BYTES,
                BLOCK_BYTES,
                ScrubFound::ChecksumMismatch,
                ScrubAction::Unrepairable,
            );
            assert_eq!(place, expected, "{what}");
            let now = r.peek(victim, block * BLOCK_BYTES, BLOCK_BYTES);
            assert!(now == junked, "{what}: nothing written");
        }
    }
}

//! What a scrub found where, and what it did about it: one [`ScrubFinding`] per bad block
//! (or chunk, or mirror block) of a member, kept per member up to
//! [`FINDINGS_PER_MEMBER_MAX`] and only counted past that, so a disk that returns garbage
//! everywhere costs a bounded report, not memory in proportion to its size.

use std::collections::BTreeMap;

/// Findings a scrub keeps per member; later ones are only counted.
pub const FINDINGS_PER_MEMBER_MAX: usize = 32;

/// What was wrong with a member's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScrubFound {
    /// The bytes read do not match the block's checksum.
    ChecksumMismatch,
    /// The member returned an I/O error.
    ReadError,
    /// RAID 6: the P and Q syndromes name this chunk (it read without an error).
    Syndrome,
    /// The parity does not match the data, and nothing names the wrong chunk (RAID 5, a
    /// RAID 6 stripe no single chunk explains, or parity not known in sync): the parity is
    /// taken as the wrong side, as md does.
    ParityMismatch,
    /// This copy's bytes differ from the copy the mirror takes as right (a majority, or the
    /// first copy of two).
    CopyDiffers,
}

impl ScrubFound {
    /// What a read error says about the bytes: a checksum that does not match, or an I/O
    /// error.
    pub(crate) fn of_read_error(e: &crate::error::VolumeError) -> ScrubFound {
        match e {
            crate::error::VolumeError::Member { source, .. }
                if crate::checksum::is_mismatch(source) =>
            {
                ScrubFound::ChecksumMismatch
            }
            _ => ScrubFound::ReadError,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ScrubFound::ChecksumMismatch => "checksum mismatch",
            ScrubFound::ReadError => "read error",
            ScrubFound::Syndrome => "named by the P/Q syndromes",
            ScrubFound::ParityMismatch => "parity does not match the data",
            ScrubFound::CopyDiffers => "copy differs",
        }
    }
}

/// What the scrub did with the bad bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScrubAction {
    /// Rewritten from another copy of a mirror.
    RepairedFromMirror,
    /// Rebuilt from the other chunks of its stripe and rewritten.
    RebuiltFromParity,
    /// RAID 6: the data chunk the syndromes named, corrected by the P syndrome and rewritten.
    RebuiltFromSyndrome,
    /// P recomputed from the data and rewritten.
    PRewritten,
    /// Q recomputed from the data and rewritten.
    QRewritten,
    /// A check (no `--repair`): found, left as it is.
    NotRepaired,
    /// Rewritten from the redundancy, but the rewrite did not read back as written (a bad
    /// spot the disk could not remap): not repaired.
    RewriteDidNotHold,
    /// Nothing to repair from: more bad blocks in the row than the redundancy covers, no
    /// majority among the copies, a member no redundancy covers (RAID 0, JBOD), or the
    /// rewrite failed.
    Unrepairable,
}

impl ScrubAction {
    pub fn name(self) -> &'static str {
        match self {
            ScrubAction::RepairedFromMirror => "repaired from another copy",
            ScrubAction::RebuiltFromParity => "rebuilt from parity",
            ScrubAction::RebuiltFromSyndrome => "rebuilt from the syndromes",
            ScrubAction::PRewritten => "P rewritten",
            ScrubAction::QRewritten => "Q rewritten",
            ScrubAction::NotRepaired => "not repaired (check only)",
            ScrubAction::RewriteDidNotHold => "rewritten, but does not read back: not repaired",
            ScrubAction::Unrepairable => "unrepairable",
        }
    }

    /// Whether the member holds the right bytes again.
    pub fn repaired(self) -> bool {
        !matches!(
            self,
            ScrubAction::NotRepaired | ScrubAction::Unrepairable | ScrubAction::RewriteDidNotHold
        )
    }
}

/// RAID 6's syndromes as a second opinion on a block the checksums (or the syndromes
/// themselves) named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrossCheck {
    /// The checksum named the block; with it rebuilt, P and Q match the row: both agree.
    Agrees,
    /// The checksum named the block, but with it rebuilt P and Q still do not match the row:
    /// another block of the row is wrong without its checksum saying so.
    Disagrees,
    /// Only the syndromes named the chunk; its checksum (where it has one) did not.
    SyndromeOnly,
}

impl CrossCheck {
    pub fn name(self) -> &'static str {
        match self {
            CrossCheck::Agrees => "checksum and syndrome agree",
            CrossCheck::Disagrees => "checksum and syndrome disagree",
            CrossCheck::SyndromeOnly => "syndrome only",
        }
    }
}

/// One bad place on a member and what became of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScrubFinding {
    pub member: usize,
    pub member_offset_bytes: u64,
    pub len_bytes: u64,
    pub found: ScrubFound,
    pub action: ScrubAction,
    /// RAID 6 only, where the syndromes could give an opinion.
    pub cross_check: Option<CrossCheck>,
}

/// One member's findings: the first [`FINDINGS_PER_MEMBER_MAX`] and how many in all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberFindings {
    /// Every finding, kept or not.
    pub total: u64,
    /// Of those, the ones whose bytes are right again.
    pub repaired: u64,
    /// The first findings, in the order the scrub made them.
    pub first: Vec<ScrubFinding>,
}

/// Every member's findings of one scrub, by member index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScrubFindings {
    pub by_member: BTreeMap<usize, MemberFindings>,
}

impl ScrubFindings {
    /// Records `f`: counted always, kept while its member has room.
    pub fn add(&mut self, f: ScrubFinding) {
        let m = self.by_member.entry(f.member).or_default();
        m.total += 1;
        m.repaired += u64::from(f.action.repaired());
        if m.first.len() < FINDINGS_PER_MEMBER_MAX {
            m.first.push(f);
        }
    }

    /// Findings of every member.
    pub fn total(&self) -> u64 {
        self.by_member.values().map(|m| m.total).sum()
    }

    /// Findings counted but not kept.
    pub fn dropped(&self) -> u64 {
        self.by_member
            .values()
            .map(|m| m.total - m.first.len() as u64)
            .sum()
    }
}

/// The log line of finding `f` of volume `volume`.
pub fn finding_line(volume: &str, f: &ScrubFinding) -> String {
    let cross = f
        .cross_check
        .map_or(String::new(), |c| format!(" ({})", c.name()));
    format!(
        "scrub of volume {volume}: member {} at member offset {} (+{} bytes): {}; {}{cross}",
        f.member,
        f.member_offset_bytes,
        f.len_bytes,
        f.found.name(),
        f.action.name()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(member: usize, at: u64, action: ScrubAction) -> ScrubFinding {
        ScrubFinding {
            member,
            member_offset_bytes: at,
            len_bytes: 4096,
            found: ScrubFound::ChecksumMismatch,
            action,
            cross_check: None,
        }
    }

    #[test]
    fn findings_are_kept_per_member_up_to_the_bound_and_counted_past_it() {
        let mut all = ScrubFindings::default();
        let n = FINDINGS_PER_MEMBER_MAX as u64 + 10;
        for i in 0..n {
            all.add(finding(3, i * 4096, ScrubAction::RebuiltFromParity));
        }
        all.add(finding(0, 0, ScrubAction::Unrepairable));
        let m3 = &all.by_member[&3];
        assert_eq!(m3.total, n);
        assert_eq!(m3.repaired, n);
        assert_eq!(m3.first.len(), FINDINGS_PER_MEMBER_MAX);
        assert_eq!(
            m3.first[0].member_offset_bytes, 0,
            "the first ones are kept"
        );
        // A rotten member does not crowd out the others.
        assert_eq!(all.by_member[&0].first.len(), 1);
        assert_eq!(all.by_member[&0].repaired, 0);
        assert_eq!(all.total(), n + 1);
        assert_eq!(all.dropped(), 10);
    }

    #[test]
    fn a_log_line_names_volume_member_offset_and_repair() {
        let mut f = finding(2, 65536, ScrubAction::RebuiltFromParity);
        f.cross_check = Some(CrossCheck::Agrees);
        assert_eq!(
            finding_line("r6", &f),
            "scrub of volume r6: member 2 at member offset 65536 (+4096 bytes): checksum mismatch; rebuilt from parity (checksum and syndrome agree)"
        );
        assert!(!ScrubAction::NotRepaired.repaired());
        assert!(ScrubAction::PRewritten.repaired());
    }
}

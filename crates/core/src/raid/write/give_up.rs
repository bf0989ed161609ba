//! What a stripe write does when no attempt can keep the stripe's redundancy (read errors
//! read again and again, children lost beyond the parity's tolerance, the log's refusal):
//! a pure decision over what is known then ([`give_up`]), so its cases read in one place.

use super::super::Stripes;

/// What is known when a run's attempts ran out.
#[derive(Clone, Copy, Debug)]
pub(super) struct GivingUp {
    /// Children whose reads failed (not failed members) are why there is no plan.
    pub read_errors: bool,
    /// Member writes of this run went out already: the parity disagrees with them anyway.
    pub wrote: bool,
    /// The volume can do without the members under the children whose reads failed.
    pub may_lose_unreadable: bool,
    /// The volume can do without the members under the stripe's children still alive:
    /// another copy (a mirror above) serves these bytes.
    pub may_lose_alive: bool,
}

/// The run's end ([`give_up`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GiveUp {
    /// Nothing written: the stripe keeps what it held, in agreement with its parity.
    Refuse(Refusal),
    /// The new bytes go on every data chunk that takes them, the parity marked stale
    /// (`StripeWriter::salvage`); children whose reads failed are failed first.
    Salvage,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Read errors on members the volume cannot do without: failing them (to record the
    /// lost redundancy) would take every byte away for one bad spot.
    Unreadable,
    /// The group is past its tolerance with no other copy: its survivors must keep
    /// agreeing with the parity a forced start rebuilds the lost chunks from — salvaged
    /// bytes beside the old parity rebuilt bytes nobody wrote wrong, silently. md's group
    /// past its tolerance takes no writes either.
    PastTolerance,
}

/// Refuse whenever nothing went out and salvaging would cost a member or a copy the volume
/// needs; salvage otherwise (writes went out already, or another copy serves the bytes and
/// this one's direct reads must not be stale). Pure.
pub(super) fn give_up(g: GivingUp) -> GiveUp {
    match (g.wrote, g.read_errors) {
        (true, _) => GiveUp::Salvage,
        (false, true) if !g.may_lose_unreadable => GiveUp::Refuse(Refusal::Unreadable),
        (false, false) if !g.may_lose_alive => GiveUp::Refuse(Refusal::PastTolerance),
        (false, _) => GiveUp::Salvage,
    }
}

/// Whether the volume can do without every member under `children` of the group at chunk
/// offset `at` at once (members failed or not current counted as gone already).
pub(super) fn may_lose(stripes: &Stripes, at: u64, children: &[usize]) -> bool {
    let members: Vec<usize> = (children.iter())
        .flat_map(|&c| stripes.chunks.children[c].members_at(at))
        .map(|(m, _)| m)
        .collect();
    (stripes.members.as_ref()).is_none_or(|t| t.may_lose_all(&members))
}

/// Whether stripe `s` takes no writes: lost beyond its parity's tolerance, with no other copy
/// of its bytes ([`Refusal::PastTolerance`]). The write-back cache asks before it takes
/// bytes it could never destage: they were acknowledged, and then lost.
pub(in crate::raid) fn refuses_writes(stripes: &Stripes, s: u64) -> bool {
    let g = &stripes.chunks;
    let lost = g.lost(s, 0, g.strip);
    if g.rebuildable(&lost) {
        return false;
    }
    let alive: Vec<usize> = (0..lost.len()).filter(|&c| !lost[c]).collect();
    !may_lose(stripes, g.layout.chunk_offset(s), &alive)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(read_errors: bool, wrote: bool, unreadable: bool, alive: bool) -> GiveUp {
        give_up(GivingUp {
            read_errors,
            wrote,
            may_lose_unreadable: unreadable,
            may_lose_alive: alive,
        })
    }

    #[test]
    fn nothing_is_written_where_salvage_would_cost_what_the_volume_needs() {
        use GiveUp::*;
        // A group past its tolerance through failed members, the volume's only copy.
        assert_eq!(g(false, false, true, false), Refuse(Refusal::PastTolerance));
        // The same under a mirror whose other copy serves the bytes.
        assert_eq!(g(false, false, true, true), Salvage);
        // A bad spot on a member the volume cannot do without.
        assert_eq!(g(true, false, false, false), Refuse(Refusal::Unreadable));
        // ... on one it can: failed, then salvaged.
        assert_eq!(g(true, false, true, false), Salvage);
        // Member writes went out: the parity disagrees already, whatever else holds.
        assert_eq!(g(false, true, false, false), Salvage);
        assert_eq!(g(true, true, false, false), Salvage);
    }
}

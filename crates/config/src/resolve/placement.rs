//! Where one volume goes on its members: its plan and requested size, the reserves before
//! its regions (the write-hole log's, the block checksums'), and the regions themselves.

use super::cx::R;
use super::least::Least;
use super::member::Small;
use super::meta_area::Areas;
use crate::allocate::{allocate, Usage};
use crate::error::{ErrorKind, Problem};
use crate::model::{Member, MemberStorage, VolumeSize};
use crate::raw::RawVolume;
use crate::size::format_size;
use crate::tree_spec::Plan;
use crate::volume_meta::{self, MetadataOptions};
use nbraid_layout::{Geometry, LayoutError, Region};

/// Where one volume goes: its plan and size over its members (in layout order).
pub(super) struct Placement<'a> {
    pub(super) who: &'a str,
    pub(super) plan: &'a Plan,
    pub(super) requested: VolumeSize,
    pub(super) idx: &'a [usize],
    pub(super) members: &'a [Member],
}

impl Placement<'_> {
    /// Refuses the volume's first member in `small` (too small for any volume), naming what
    /// the volume needs of it after the volumes before it (`usage`).
    pub(super) fn refuse_small(
        &self,
        small: &[Small],
        metadata: &MetadataOptions,
        usage: &[Usage],
    ) -> R<()> {
        for &m in self.idx {
            if let Some(s) = small.iter().find(|s| s.member == m) {
                let (plan, n) = (self.plan, self.idx.len());
                let least = Least::for_volume(plan, self.requested, n, usage[m].cursor, metadata);
                return Err(s.too_small_for(self.who, &least));
            }
        }
        Ok(())
    }

    /// A member of the volume is on an NBD server: its records cannot be read before a start
    /// (`nbraid_assembly::pins`), so nothing pins the volume and the config's placement is
    /// final.
    pub(super) fn remote(&self) -> bool {
        (self.idx.iter()).any(|&m| self.members[m].state == MemberStorage::Remote)
    }

    /// The reserve the volume's write-hole log takes before its region because some member's
    /// metadata area has no room left for it ([`Areas::log_reserve_for_room`]). Decided on
    /// the volume placed as it would be without that reserve (behind its checksum reserve,
    /// sized for those regions): the bitmap beside which the engine would look for room is
    /// that geometry's. (Regions placed without any reserve are larger with `size = "all"`,
    /// and their bitmap could be a block larger than the engine's: a reserve where none was
    /// needed, a volume near the members' end refused.)
    pub(super) fn log_reserve_for_room(
        &self,
        usage: &[Usage],
        metadata: &MetadataOptions,
    ) -> Option<u64> {
        let p = self;
        let mut trial = usage.to_vec();
        let sums = (metadata.checksums).then(|| p.checksum_reserve(usage, None));
        for &m in p.idx {
            trial[m].cursor += sums.flatten().unwrap_or(0);
        }
        let regions = allocate(
            p.who,
            p.plan.sizing(),
            p.requested,
            p.idx,
            p.members,
            &trial,
        )
        .ok()?;
        let g = p.plan.geometry(&regions).ok()?;
        Areas::new(p.who, p.idx, p.members, &g, metadata).log_reserve_for_room(usage)
    }

    /// The write-hole log reserve of the volume's geometry, tried on regions placed as if
    /// there were no reserve ([`volume_meta::default_log_reserve_bytes`]); `None` when it
    /// does not fit, needs none or logs nothing. Only parity logs, and parity gives every
    /// member the same length, which the reserves only shrink: the real regions are no
    /// larger than the trial's, so a reserve sized from the trial holds theirs (unlike
    /// [`Self::checksum_reserve`]'s, which a JBOD's regions can outgrow).
    pub(super) fn trial_log_reserve(&self, usage: &[Usage], default: bool) -> Option<u64> {
        let p = self;
        let regions =
            allocate(p.who, p.plan.sizing(), p.requested, p.idx, p.members, usage).ok()?;
        let g = p.plan.geometry(&regions).ok()?;
        nbraid_layout::volume_log_ring_bytes(g.root())?;
        let strips = nbraid_layout::log_reserve_bytes(g.root());
        // A volume with a member on an NBD server cannot have its records read before a
        // start (`nbraid_assembly::pins`), so it keeps the rule it was created under.
        if p.remote() || !default {
            return strips;
        }
        let largest = regions.iter().map(|r| r.len).max()?;
        volume_meta::default_log_reserve_bytes(strips, largest)
    }

    /// Whether the volume's regions place after a write-hole log reserve of `log_bytes`
    /// (and the checksum reserve `metadata` then asks for) on every member.
    pub(super) fn places_after_log(
        &self,
        usage: &[Usage],
        log_bytes: u64,
        metadata: &MetadataOptions,
    ) -> bool {
        let p = self;
        let sums = (metadata.checksums)
            .then(|| p.checksum_reserve(usage, Some(log_bytes)))
            .flatten();
        let mut trial = usage.to_vec();
        for &m in p.idx {
            trial[m].cursor += log_bytes + sums.unwrap_or(0);
        }
        let sizing = p.plan.sizing();
        allocate(p.who, sizing, p.requested, p.idx, p.members, &trial).is_ok()
    }

    /// The checksum reserve that holds the area of every region placed after it (and after
    /// the log's `log_bytes`); `None` when the volume does not fit even without it. Sized
    /// from a placement without reserves, then placed again with it until it holds the
    /// largest region: a JBOD's regions are unequal, and the reserve taken from a small
    /// first member pushes the volume onto the next, whose region grows past what the first
    /// reserve covered.
    /// Each round grows the reserve by at least 1 MiB, and a reserve past the members'
    /// free space does not place: it ends (kept, so the placement's error names it).
    pub(super) fn checksum_reserve(&self, usage: &[Usage], log_bytes: Option<u64>) -> Option<u64> {
        let p = self;
        let place = |before_bytes: u64| {
            let mut trial = usage.to_vec();
            for &m in p.idx {
                trial[m].cursor += before_bytes;
            }
            let regions = allocate(
                p.who,
                p.plan.sizing(),
                p.requested,
                p.idx,
                p.members,
                &trial,
            );
            regions.ok()?.iter().map(|r| r.len).max()
        };
        let mut reserve = volume_meta::checksum_reserve_bytes(place(0)?);
        loop {
            // Does not fit with the reserve: kept, so the placement says how much is missing.
            let Some(largest) = place(reserve + log_bytes.unwrap_or(0)) else {
                return Some(reserve);
            };
            let need = volume_meta::checksum_reserve_bytes(largest);
            if need <= reserve {
                return Some(reserve);
            }
            reserve = need;
        }
    }

    /// The checksum reserve comes first, before the log's and the region, on every member.
    pub(super) fn reserve_checksums(&self, name: &str, bytes: Option<u64>, usage: &mut [Usage]) {
        let Some(bytes) = bytes else { return };
        for &m in self.idx {
            usage[m].cursor += bytes;
            let what = format!("the block checksums of volume \"{name}\"");
            usage[m].users.push((what, bytes));
        }
    }

    /// The write-hole log's reserve comes before the volume's region on every member.
    pub(super) fn reserve_log(&self, name: &str, log_bytes: Option<u64>, usage: &mut [Usage]) {
        let Some(log_bytes) = log_bytes else { return };
        for &m in self.idx {
            usage[m].cursor += log_bytes;
            let what = format!("the write-hole log of volume \"{name}\"");
            usage[m].users.push((what, log_bytes));
        }
    }

    /// The volume's regions and their geometry, which must hold at least one stripe.
    pub(super) fn regions(&self, v: &RawVolume, usage: &mut [Usage]) -> R<(Vec<Region>, Geometry)> {
        let who = self.who;
        let size_span = v.size.as_ref().map_or(v.name.span(), |s| s.span());
        let regions = allocate(
            who,
            self.plan.sizing(),
            self.requested,
            self.idx,
            self.members,
            usage,
        )
        .map_err(|m| Problem::new(size_span.clone(), ErrorKind::Fit, m))?;
        let fit =
            |e: LayoutError| Problem::new(size_span.clone(), ErrorKind::Fit, format!("{who}: {e}"));
        let geometry = self.plan.geometry(&regions).map_err(fit)?;
        if geometry.capacity() == 0 {
            return Err(Problem::new(
                size_span.clone(),
                ErrorKind::Fit,
                format!(
                    "{who}: its members' regions ({} each) are too small to hold one stripe of the tree; give the members more room or a smaller strip",
                    format_size(regions.first().map_or(0, |r| r.len))
                ),
            ));
        }
        Ok((regions, geometry))
    }
}

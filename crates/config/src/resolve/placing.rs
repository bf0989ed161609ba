//! One volume placed on its members after the volumes before it: the reserves its settings
//! take there (the write-hole log's, the block checksums'), then its regions — where the
//! records put them for a volume they place, else after those reserves — and, when it does
//! not fit, the largest size that would.

use super::cx::R;
use super::{claim_regions, Placement};
use crate::allocate::{self, allocate, Usage};
use crate::error::ErrorKind;
use crate::model::VolumeSize;
use crate::pins::Pins;
use crate::raw::RawVolume;
use crate::volume_meta::MetadataOptions;
use nbraid_layout::{Geometry, Region};

/// Volume `name` being placed `at`, asking for `asked`.
pub(super) struct Placing<'a> {
    /// Its plan, requested size and members.
    pub at: Placement<'a>,
    pub name: &'a str,
    /// The metadata its settings ask for, before any reserve is sized.
    pub asked: MetadataOptions,
    /// Existing volumes' records: a volume they place keeps its recorded regions and log.
    pub pins: &'a Pins,
}

impl Placing<'_> {
    /// The records place this volume: its regions start where they were recorded.
    pub fn recorded(&self) -> bool {
        self.pins.starts(self.name).is_some()
    }

    /// The regions on each member: where the records put them, or for a new volume (and a
    /// recorded one whose settings the records contradict) after its reserves. `metadata`
    /// gains what the recorded placement keeps after the regions.
    pub fn place(
        &self,
        v: &RawVolume,
        metadata: &mut MetadataOptions,
        usage: &mut [Usage],
    ) -> R<(Vec<Region>, Geometry)> {
        if !self.recorded() {
            return self.place_new(v, metadata, usage);
        }
        let idx = self.at.idx;
        let kept: Vec<Usage> = idx.iter().map(|&m| usage[m].clone()).collect();
        match self.at.pinned(v, self.name, self.pins, metadata, usage) {
            Ok(placed) => Ok(placed),
            // Settings the records contradict (`checksums = "on"` over a volume created
            // without the reserve): placed as a new volume would be, so the start refuses
            // this volume alone, naming the way out, as it always did.
            Err(p) if p.kind == ErrorKind::Option => {
                idx.iter().zip(kept).for_each(|(&m, u)| usage[m] = u);
                self.place_new(v, metadata, usage)
            }
            Err(p) => Err(p),
        }
    }

    /// On each member: the checksum reserve, the log's reserve, then the region. A size that
    /// does not fit is refused suggesting the largest that does with the reserves it takes.
    fn place_new(
        &self,
        v: &RawVolume,
        metadata: &MetadataOptions,
        usage: &mut [Usage],
    ) -> R<(Vec<Region>, Geometry)> {
        let (at, name) = (&self.at, self.name);
        let before = usage.to_vec();
        at.reserve_checksums(name, metadata.checksum_reserve_bytes, usage);
        at.reserve_log(name, metadata.ppl_log_bytes, usage);
        let (regions, geometry) = at.regions(v, usage).map_err(|mut p| {
            // The size it suggests was measured without the reserves that size takes.
            if let VolumeSize::Bytes(_) = at.requested {
                p.message = allocate::suggesting(&p.message, self.largest_fitting(&before));
            }
            p
        })?;
        claim_regions(name, at.idx, &regions, usage);
        Ok((regions, geometry))
    }

    /// `asked` with the reserves the volume takes on its members after the volumes before it
    /// (`usage`): its write-hole log's and its block checksums'.
    pub fn with_reserves(&self, usage: &[Usage]) -> MetadataOptions {
        let at = &self.at;
        let mut metadata = self.asked;
        // A log whose ring the metadata area cannot hold (large strips) gets a reserve sized
        // from the strip, as if `write_hole_log_size` had asked for it: every parity volume
        // has its log (and large regions a larger one). The strips, hence the ring, do not
        // depend on where regions start. A volume the records place keeps its recorded log.
        if let (true, Some(recorded)) = (metadata.ppl, self.pins.log_reserve_bytes(self.name)) {
            metadata.ppl_log_bytes = recorded;
        } else if metadata.ppl && metadata.ppl_log_bytes.is_none() {
            let default = !self.pins.is_before_default_log();
            metadata.ppl_log_bytes = at.trial_log_reserve(usage, default);
            // Read to find the records (`Pins::before_default_log`): a reserve the members
            // cannot hold is left out, so the records are found and the config is read again
            // with them (`nbraid_assembly::pins`). Strips larger than the records' (a
            // reshape into them) need a larger ring than the one recorded; refused here, the
            // records were never read and the refusal named this reserve, which the volume
            // does not take (its log stays where recorded), instead of whether the new shape
            // fits its recorded regions.
            if !default {
                let fits = |log| at.places_after_log(usage, log, &metadata);
                metadata.ppl_log_bytes = metadata.ppl_log_bytes.filter(|&log| fits(log));
            }
            // A log whose ring fits the metadata area, but whose members' areas the volumes
            // before it filled (Matrix), gets a reserve too — not in the read for older
            // records (`nbraid_assembly::pins` falls back to it to find them): an existing
            // volume whose records hold no log area would get a reserve the full members
            // cannot hold, both reads would fail and its records would never be read.
            // Nor a volume with a member on an NBD server: nothing can pin it, so it keeps
            // the rule it was created under (as [`Placement::trial_log_reserve`]).
            if metadata.ppl_log_bytes.is_none() && default && !at.remote() {
                metadata.ppl_log_bytes = at.log_reserve_for_room(usage, &metadata);
            }
        }
        if metadata.checksums {
            metadata.checksum_reserve_bytes = at.checksum_reserve(usage, metadata.ppl_log_bytes);
        }
        metadata
    }

    /// The largest size the volume fits at with the reserves that size takes — a larger
    /// size takes no smaller reserves, so the sizes that fit are those below some bound,
    /// found by halving over whole strips of each member. `None`: not even one strip fits
    /// (or no size was asked for).
    fn largest_fitting(&self, usage: &[Usage]) -> Option<u64> {
        let at = &self.at;
        let VolumeSize::Bytes(_) = at.requested else {
            return None;
        };
        let sizing = at.plan.sizing();
        let strip = sizing.unit().max(1);
        let free = (at.idx.iter())
            .map(|&m| at.members[m].size.saturating_sub(usage[m].cursor))
            .min()?;
        let fits = |strips: u64| {
            let size = sizing.capacity_at(strips * strip);
            let trial = Placing {
                at: Placement {
                    requested: VolumeSize::Bytes(size),
                    ..*at
                },
                ..*self
            };
            let metadata = trial.with_reserves(usage);
            let mut placed = usage.to_vec();
            let (name, at) = (self.name, &trial.at);
            at.reserve_checksums(name, metadata.checksum_reserve_bytes, &mut placed);
            at.reserve_log(name, metadata.ppl_log_bytes, &mut placed);
            let sized = allocate(at.who, sizing, at.requested, at.idx, at.members, &placed);
            (size > 0 && sized.is_ok()).then_some(size)
        };
        // Invariant: `low` strips fit (or are 0), `high` do not.
        let (mut low, mut high) = (0, free / strip + 1);
        while high - low > 1 {
            let mid = low + (high - low) / 2;
            match fits(mid) {
                Some(_) => low = mid,
                None => high = mid,
            }
        }
        fits(low)
    }
}

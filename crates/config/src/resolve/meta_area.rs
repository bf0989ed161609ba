//! A volume's areas in its members' 1 MiB metadata areas (`crate::metadata_area`), placed
//! in file order as the engine places them at create ([`Areas`]). Matrix volumes share
//! those areas: a write-hole log that finds no room on some member gets a reserve before the
//! volume's region instead (as `write_hole_log_size` would give it); a bitmap that finds
//! none refuses the config, naming the member, the volumes there and what each takes.

use super::cx::R;
use crate::allocate::Usage;
use crate::error::{ErrorKind, Problem};
use crate::metadata_area::{self, no_room_text, Area, AreaAsk, AreaKind, Shortfall};
use crate::model::{Member, VOLUMES_PER_MEMBER_MAX};
use crate::raw::RawVolume;
use crate::volume_meta::MetadataOptions;
use nbraid_layout::Geometry;

/// How a volume's areas are claimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Claim {
    /// A new volume: no room for an area the engine must place refuses the config (unless
    /// the member holds a volume the records place: only the superblocks know its areas,
    /// and `nbraid check` reads them).
    New,
    /// A volume the records place: its areas exist; placed here only to budget the volumes
    /// after it, never refused.
    Recorded,
    /// Reading for older records (`Pins::before_default_log`): nothing is refused.
    Trial,
    /// A volume with a member on an NBD server: nothing pins it, and it may exist with areas
    /// placed under an older rule, so none is refused on this guess of the metadata area;
    /// where they do not fit, its members' areas are unknown, as a recorded volume's.
    Remote,
}

impl Claim {
    /// How the areas of a volume are claimed: one the records place (`recorded`) never
    /// refuses; nor does anything in the read for older records (`trial`), nor a volume
    /// with a member on an NBD server (`remote`); anything else is new.
    pub fn for_volume(recorded: bool, trial: bool, remote: bool) -> Claim {
        match (recorded, trial, remote) {
            (true, _, _) => Claim::Recorded,
            (false, true, _) => Claim::Trial,
            (false, false, true) => Claim::Remote,
            (false, false, false) => Claim::New,
        }
    }
}

/// The areas member usage `u` holds.
fn taken(u: &Usage) -> Vec<Area> {
    u.areas.iter().map(|(_, a)| *a).collect()
}

/// What one volume asks of its members' metadata areas (its bitmap, its log unless that has
/// a reserve), from its geometry and settings, and the members it asks it of.
pub(super) struct Areas<'a> {
    /// How messages name the volume.
    who: &'a str,
    /// Its members, by index in the config's `members`.
    idx: &'a [usize],
    members: &'a [Member],
    ask: AreaAsk,
}

impl<'a> Areas<'a> {
    /// The areas volume `who` over `idx` asks for with `geometry` and `metadata`.
    pub fn new(
        who: &'a str,
        idx: &'a [usize],
        members: &'a [Member],
        geometry: &Geometry,
        metadata: &MetadataOptions,
    ) -> Areas<'a> {
        let ask = AreaAsk::new(geometry.root(), geometry.capacity(), metadata);
        Areas {
            who,
            idx,
            members,
            ask,
        }
    }

    /// The reserve the volume's write-hole log takes before its region because some member's
    /// metadata area, after the volumes before it (`usage`), has no room left for it: its
    /// ring in whole MiB. `None`: it fits on every member, or it is not kept there (no log,
    /// `write_hole = "off"`, a reserve already). Asked of
    /// the areas of the geometry the volume has without that reserve (with one its regions,
    /// hence its bitmap, are no larger, and its log takes none of the metadata area).
    pub fn log_reserve_for_room(&self, usage: &[Usage]) -> Option<u64> {
        let log = self.ask.log.filter(|l| l.required)?;
        let short = |u: &Usage| match metadata_area::place(&taken(u), &self.ask) {
            Ok(_) => false,
            Err(s) if s.kind == AreaKind::Log => true,
            // No room for the bitmap (refused once placed): is there any for the log?
            Err(_) => {
                let alone = AreaAsk {
                    bitmap_bytes: None,
                    ..self.ask
                };
                metadata_area::place(&taken(u), &alone).is_err()
            }
        };
        let short = self.idx.iter().any(|&m| short(&usage[m]));
        short.then(|| log.least_bytes.next_multiple_of(1 << 20))
    }

    /// Places the areas in each member's metadata area after the volumes before it
    /// (`usage`), as the engine will at create; no room refuses the volume as `claim` says.
    pub fn claim(&self, v: &RawVolume, name: &str, claim: Claim, usage: &mut [Usage]) -> R<()> {
        for &m in self.idx {
            let u = &mut usage[m];
            u.recorded |= claim == Claim::Recorded;
            u.volumes += 1;
            if u.volumes > VOLUMES_PER_MEMBER_MAX && claim != Claim::Trial {
                return Err(self.too_many(v, m));
            }
            match metadata_area::place(&taken(u), &self.ask) {
                Ok(placed) => (u.areas).extend(placed.into_iter().map(|a| (name.to_string(), a))),
                Err(_) if claim == Claim::Remote => u.recorded = true,
                Err(_) if claim != Claim::New || u.recorded => {}
                Err(short) => return Err(self.no_room(v, m, short, &usage[m])),
            }
        }
        Ok(())
    }

    /// Member `m` would carry more volumes than its superblock holds records of.
    fn too_many(&self, v: &RawVolume, m: usize) -> Problem {
        let member = &self.members[m].id;
        let span = v.members.as_ref().map_or(v.name.span(), |s| s.span());
        Problem::new(
            span,
            ErrorKind::Fit,
            format!(
                "{}: it would be volume {} on member \"{member}\", whose superblock holds the records of at most {VOLUMES_PER_MEMBER_MAX}: put it on other members, or fewer volumes on \"{member}\"",
                self.who,
                VOLUMES_PER_MEMBER_MAX + 1
            ),
        )
    }

    /// Why member `m`'s metadata area (holding `u`) has no room for the volume's `short`,
    /// located at the key that sizes what did not fit.
    fn no_room(&self, v: &RawVolume, m: usize, short: Shortfall, u: &Usage) -> Problem {
        let span = match short.kind {
            AreaKind::Bitmap => v.bitmap_chunk.as_ref().map(|s| s.span()),
            _ => v.write_hole.as_ref().map(|s| s.span()),
        };
        let why = no_room_text(&self.members[m].id, short, &u.areas);
        let span = span.unwrap_or(v.name.span());
        Problem::new(span, ErrorKind::Fit, format!("{}: {why}", self.who))
    }
}

#[cfg(test)]
mod tests {
    use super::Claim;

    #[test]
    fn a_recorded_volume_claims_as_recorded_whatever_else_holds() {
        for (trial, remote) in [(false, false), (true, false), (false, true), (true, true)] {
            assert_eq!(Claim::for_volume(true, trial, remote), Claim::Recorded);
        }
    }

    #[test]
    fn an_unrecorded_volume_is_new_unless_a_trial_read_or_remote() {
        assert_eq!(Claim::for_volume(false, true, true), Claim::Trial);
        assert_eq!(Claim::for_volume(false, true, false), Claim::Trial);
        assert_eq!(Claim::for_volume(false, false, true), Claim::Remote);
        assert_eq!(Claim::for_volume(false, false, false), Claim::New);
    }
}

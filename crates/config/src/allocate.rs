//! Where each volume's regions go on its members: after the regions earlier volumes took,
//! with messages that say how much is needed and how much is free.

use super::size::{format_size, format_size_exact};
use crate::metadata_area::Area;
use crate::model::{Member, VolumeSize, JBOD_ALIGN, METADATA_RESERVED};
use nbraid_layout::{Level, Region, Shape};

/// What allocation needs to know of a volume's layout: a named level's [`Shape`] or a declared
/// tree.
pub(super) trait Sizing {
    /// `raid5`, `the tree`: for messages.
    fn name(&self) -> String;
    /// JBOD: members give unequal amounts, filled in order.
    fn concatenates_members(&self) -> bool;
    /// Every member's region is a whole number of these.
    fn unit(&self) -> u64;
    /// Its unit is a strip that `strip_size` sets (raid0, raid5...): not a mirror's or a
    /// concatenation's (they have no strips), nor a declared tree's (its nodes set theirs).
    fn has_strips(&self) -> bool;
    /// Volume capacity when every member gives `member_len` bytes (a multiple of `unit`).
    fn capacity_at(&self, member_len: u64) -> u64;
    /// Bytes each member gives for a volume of at least `capacity` bytes (a multiple of
    /// `unit`; more than any member has when it cannot be done).
    fn member_len_for(&self, capacity: u64) -> u64;
}

impl Sizing for Shape {
    fn name(&self) -> String {
        self.level.to_string()
    }

    fn concatenates_members(&self) -> bool {
        self.level == Level::Jbod
    }

    fn unit(&self) -> u64 {
        self.strip
    }

    fn has_strips(&self) -> bool {
        !matches!(self.level, Level::Raid1 | Level::Jbod)
    }

    fn capacity_at(&self, member_len: u64) -> u64 {
        member_len / self.strip * self.strip * self.data_members() as u64
    }

    fn member_len_for(&self, capacity: u64) -> u64 {
        Shape::member_len_for(self, capacity)
    }
}

/// Where a member's free space begins and who took the space before it; `tail_bytes` kept
/// free at the member's end for the volume being placed (a checksum area after its region).
#[derive(Clone, Default)]
pub(super) struct Usage {
    pub(super) cursor: u64,
    pub(super) users: Vec<(String, u64)>,
    pub(super) tail_bytes: u64,
    /// The member's metadata area as the engine fills it at create (`metadata_area`), each
    /// area with the name of its volume.
    pub(super) areas: Vec<(String, Area)>,
    /// A volume the records place is on the member: its areas are where its records say
    /// (`nbraid check` reads them), not necessarily in `areas`.
    pub(super) recorded: bool,
    /// Volumes placed on the member: each keeps a record in its superblock.
    pub(super) volumes: usize,
}

/// "4 GiB, minus the 1 MiB metadata reserve, minus 2 GiB used by volume "a"" — or, where
/// what is taken exceeds the member, how much more than it has.
fn describe_free(m: &Member, u: &Usage) -> String {
    let mut taken = format!("the {} metadata reserve", format_size(METADATA_RESERVED));
    for (what, len) in &u.users {
        taken.push_str(&format!(", minus {} used by {what}", format_size(*len)));
    }
    match u.cursor > m.size {
        true => format!(
            "none free: {} minus {taken} is {} short",
            format_size(m.size),
            format_size(u.cursor - m.size)
        ),
        false => format!(
            "{} free: {} minus {taken}",
            format_size(m.size - u.cursor),
            format_size(m.size)
        ),
    }
}

/// The least region a volume gives on each member, in words: "one 64 KiB strip" — or,
/// for a layout without strips (`has_strips` false: a mirror, a declared tree), "one 64 KiB
/// unit", what its regions are whole multiples of. Pure.
pub(super) fn least_region_words(unit: u64, has_strips: bool) -> String {
    let word = if has_strips { "strip" } else { "unit" };
    format!("one {} {word}", format_size(unit))
}

/// The volume being placed, as [`no_strip_fits`] names it: its level (`raid5`, `the tree`),
/// the unit its regions are whole multiples of, and whether that unit is a strip.
pub(super) struct Unit {
    pub level: String,
    pub bytes: u64,
    pub has_strips: bool,
}

impl Unit {
    fn of(shape: &dyn Sizing) -> Unit {
        Unit {
            level: shape.name(),
            bytes: shape.unit(),
            has_strips: shape.has_strips(),
        }
    }
}

/// Why not even one unit (a strip, for striped levels) of `unit.level` fits on member `m`
/// (`u`: what is taken on it), and what would: the member size that holds one unit (or
/// `more`, the bytes a requested size needs on each member) after what is taken, however
/// short the member already is; with no size requested and a level with strips, the largest
/// power-of-two strip (at least 4 KiB) that fits as is — a mirror or a tree has no
/// `strip_size` to lower.
fn no_strip_fits(who: &str, unit: &Unit, m: &Member, u: &Usage, more: u64) -> String {
    let strip = unit.bytes;
    let free = (m.size.saturating_sub(u.cursor)).saturating_sub(u.tail_bytes);
    let size = u.cursor + u.tail_bytes + strip.max(more);
    // A smaller strip never makes a requested size fit: it needs `more` on the member.
    let smaller = (unit.has_strips && free >= 4096 && more <= free).then(|| 1u64 << free.ilog2());
    let or_strip = match smaller.filter(|&s| s < strip) {
        Some(s) => format!(", or strip_size = \"{}\" or smaller", format_size_exact(s)),
        None => String::new(),
    };
    format!(
        "{who}: no room for {} of {} on member \"{}\" ({}): give it size = \"{}\" or more{or_strip}",
        least_region_words(strip, unit.has_strips),
        unit.level,
        m.id,
        describe_free(m, u),
        format_size_exact(size),
    )
}

/// Places a volume's regions after the regions already taken on its members. The error is a
/// message saying how much is needed and how much is there.
pub(super) fn allocate(
    who: &str,
    shape: &dyn Sizing,
    requested: VolumeSize,
    idx: &[usize],
    members: &[Member],
    usage: &[Usage],
) -> Result<Vec<Region>, String> {
    let space = FreeSpace {
        who,
        idx,
        members,
        usage,
    };
    if shape.concatenates_members() {
        let lens = space.concatenated_lens(requested)?;
        return Ok(space.regions(lens));
    }
    let len = space.equal_len(shape, requested)?;
    Ok(space.regions(idx.iter().map(|_| len)))
}

/// The members a volume is being placed on (`idx` into `members`) and what the volumes
/// placed before it left free on them.
struct FreeSpace<'a> {
    who: &'a str,
    idx: &'a [usize],
    members: &'a [Member],
    usage: &'a [Usage],
}

impl FreeSpace<'_> {
    /// Bytes member `i` can give this volume: after earlier volumes, before its tail.
    fn free_bytes(&self, i: usize) -> u64 {
        let u = &self.usage[i];
        (self.members[i].size.saturating_sub(u.cursor)).saturating_sub(u.tail_bytes)
    }

    /// Member `i`'s free space explained, for messages.
    fn describe(&self, i: usize) -> String {
        describe_free(&self.members[i], &self.usage[i])
    }

    /// One region per member, `lens` long, where the member's free space begins.
    fn regions(&self, lens: impl IntoIterator<Item = u64>) -> Vec<Region> {
        self.idx
            .iter()
            .zip(lens)
            .map(|(&i, len)| Region {
                start: self.usage[i].cursor,
                len,
            })
            .collect()
    }

    /// JBOD: how much each member gives, members filled in order, each in whole
    /// [`JBOD_ALIGN`] units.
    fn concatenated_lens(&self, requested: VolumeSize) -> Result<Vec<u64>, String> {
        let who = self.who;
        let aligned: Vec<u64> = self
            .idx
            .iter()
            .map(|&i| self.free_bytes(i) / JBOD_ALIGN * JBOD_ALIGN)
            .collect();
        let total: u64 = aligned.iter().sum();
        let want = match requested {
            VolumeSize::All => {
                if let Some(at) = aligned.iter().position(|&a| a == 0) {
                    let i = self.idx[at];
                    return Err(format!(
                        "{who}: no room left on member \"{}\" ({}); jbod with size = \"all\" takes at least 4 KiB of every member",
                        self.members[i].id,
                        self.describe(i)
                    ));
                }
                total
            }
            VolumeSize::Bytes(b) => {
                let want = b.div_ceil(JBOD_ALIGN) * JBOD_ALIGN;
                if want > total {
                    let each: Vec<String> = self
                        .idx
                        .iter()
                        .map(|&i| format!("\"{}\" {}", self.members[i].id, self.describe(i)))
                        .collect();
                    return Err(format!(
                        "{who}: does not fit: jbod needs {} ({want} bytes) in total, but its members have only {} ({total} bytes) free; members: {}",
                        format_size(want),
                        format_size(total),
                        each.join("; ")
                    ));
                }
                want
            }
        };
        let lens = fill_in_order(&aligned, want);
        self.check_every_member_gives(&aligned, &lens)?;
        Ok(lens)
    }

    /// JBOD: every listed member holds part of the volume. A member given 0 bytes would
    /// have a region its record cannot describe (the volume would be created once and
    /// never assemble again), and dropping a listed member silently is worse than saying so.
    fn check_every_member_gives(&self, aligned: &[u64], lens: &[u64]) -> Result<(), String> {
        let empty: Vec<usize> = (lens.iter().enumerate())
            .filter(|(_, &len)| len == 0)
            .map(|(at, _)| at)
            .collect();
        if empty.is_empty() {
            return Ok(());
        }
        if let Some(&at) = empty.iter().find(|&&at| aligned[at] == 0) {
            let i = self.idx[at];
            return Err(format!(
                "{}: no room left on member \"{}\" ({}); jbod takes at least 4 KiB of every listed member",
                self.who,
                self.members[i].id,
                self.describe(i)
            ));
        }
        let id = |at: usize| format!("\"{}\"", self.members[self.idx[at]].id);
        let quoted = |ats: &mut dyn Iterator<Item = usize>| ats.map(id).collect::<Vec<_>>();
        let given = quoted(&mut (0..lens.len()).filter(|at| lens[*at] > 0));
        let left_out = quoted(&mut empty.iter().copied());
        // The smallest size that reaches the last listed member: every member before it
        // full, one unit on it.
        let reach: u64 = aligned[..lens.len() - 1].iter().sum::<u64>() + JBOD_ALIGN;
        Err(format!(
            "{}: its size is held by member(s) {} alone; member(s) {} would hold none of it, and jbod uses every listed member; list fewer members (members = [{}]) or give a larger size (at least {}, size = \"{}\")",
            self.who,
            given.join(", "),
            left_out.join(", "),
            given.join(", "),
            format_size(reach),
            format_size_exact(reach)
        ))
    }

    /// Every other level: the length every member gives, whole strips, bounded by the
    /// member with the least free space.
    fn equal_len(&self, shape: &dyn Sizing, requested: VolumeSize) -> Result<u64, String> {
        let (who, unit) = (self.who, Unit::of(shape));
        let (level, strip) = (&unit.level, unit.bytes);
        let (tightest, min_free) = self
            .idx
            .iter()
            .map(|&i| (i, self.free_bytes(i)))
            .min_by_key(|&(_, f)| f)
            .expect("a shape has members");
        match requested {
            VolumeSize::All => {
                let len = min_free / strip * strip;
                if len == 0 {
                    let m = &self.members[tightest];
                    let u = &self.usage[tightest];
                    return Err(no_strip_fits(who, &unit, m, u, 0));
                }
                Ok(len)
            }
            VolumeSize::Bytes(b) => {
                let need = shape.member_len_for(b);
                if need > min_free {
                    let fits = shape.capacity_at(min_free / strip * strip);
                    if fits == 0 {
                        let m = &self.members[tightest];
                        let u = &self.usage[tightest];
                        return Err(format!(
                            "{}; size {} needs {} on each member",
                            no_strip_fits(who, &unit, m, u, need),
                            format_size(b),
                            format_size(need),
                        ));
                    }
                    return Err(format!(
                        "{who}: size {} does not fit: {level} over {} members needs {} ({need} bytes) on each member, but member \"{}\" has only {}; at most {} fits (size = \"{}\")",
                        format_size(b),
                        self.idx.len(),
                        format_size(need),
                        self.members[tightest].id,
                        self.describe(tightest),
                        format_size(fits),
                        format_size_exact(fits)
                    ));
                }
                Ok(need)
            }
        }
    }
}

/// `message` of a size that does not fit, its "at most ... fits" suggestion replaced by
/// `fits_bytes`: what fits once that size's own reserves (checksums, write-hole log) are
/// taken too (`None`: no size does) — the suggestion [`FreeSpace::equal_len`] makes counts
/// only the free space, so a size it offered was then refused. A message without one is kept.
pub(super) fn suggesting(message: &str, fits_bytes: Option<u64>) -> String {
    let Some(at) = message.rfind("; at most ") else {
        return message.to_string();
    };
    let head = &message[..at];
    match fits_bytes {
        Some(fits) => format!(
            "{head}; at most {} fits with its reserves (size = \"{}\")",
            format_size(fits),
            format_size_exact(fits)
        ),
        None => format!("{head}; no size fits once its reserves (block checksums, write-hole log) are taken: give the members more room or the volume a smaller strip"),
    }
}

/// How much of `want` bytes each member gives when members are filled in order, each
/// giving at most what it has (`available`): the first ones full, the rest what is left
/// (nothing, once `want` is covered: [`FreeSpace::check_every_member_gives`] refuses that).
fn fill_in_order(available: &[u64], want: u64) -> Vec<u64> {
    let mut left = want;
    available
        .iter()
        .map(|&a| {
            let len = a.min(left);
            left -= len;
            len
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_without_room_for_one_strip_is_told_the_size_or_strip_that_fits() {
        let m = Member {
            id: "d0".into(),
            path_text: "d0.img".into(),
            path: "d0.img".into(),
            size: 8 << 20,
            sized_by_path: false,
            state: crate::model::MemberStorage::Missing,
            remote: Default::default(),
        };
        let used = |cursor: u64| Usage {
            cursor,
            ..Usage::default()
        };
        // size = "all": 7 MiB free after the 1 MiB reserve; a 4 MiB strip fits as is.
        let raid0 = Unit {
            level: "raid0".into(),
            bytes: 16 << 20,
            has_strips: true,
        };
        let all = no_strip_fits("volume \"v\"", &raid0, &m, &used(1 << 20), 0);
        assert_eq!(
            all,
            "volume \"v\": no room for one 16 MiB strip of raid0 on member \"d0\" (7 MiB free: 8 MiB minus the 1 MiB metadata reserve): give it size = \"17MiB\" or more, or strip_size = \"4MiB\" or smaller"
        );
        // A requested size needing 32 MiB per member: no smaller strip makes it fit.
        let sized = no_strip_fits("v", &raid0, &m, &used(1 << 20), 32 << 20);
        assert!(
            sized.contains("give it size = \"33MiB\" or more"),
            "{sized}"
        );
        assert!(!sized.contains("strip_size"), "{sized}");
        // Earlier volumes take 3 MiB more than the member has: the size covers them too.
        let raid1 = Unit {
            level: "raid1".into(),
            bytes: 64 << 10,
            has_strips: false,
        };
        let short = no_strip_fits("v", &raid1, &m, &used(11 << 20), 0);
        assert!(
            short.contains("is 3 MiB short): give it size = \"11328KiB\" or more"),
            "{short}"
        );
        assert!(!short.contains("strip_size"), "{short}");
        let u = Usage {
            cursor: (1 + 1 + 65) << 20,
            users: vec![
                ("volume \"a\"".into(), 65 << 20),
                ("the log".into(), 1 << 20),
            ],
            ..Usage::default()
        };
        let big = Member {
            size: 64 << 20,
            ..m
        };
        let said = describe_free(&big, &u);
        assert_eq!(said, "none free: 64 MiB minus the 1 MiB metadata reserve, minus 65 MiB used by volume \"a\", minus 1 MiB used by the log is 3 MiB short");
    }

    /// A mirror, a concatenation or a declared tree has no strips: its least region is a
    /// unit, and no `strip_size` (refused for them) is offered as a way out.
    #[test]
    fn a_layout_without_strips_is_not_said_to_have_one() {
        let m = Member {
            id: "a".into(),
            path_text: "a.img".into(),
            path: "a.img".into(),
            size: 1050 << 10,
            sized_by_path: true,
            state: crate::model::MemberStorage::File { len: 1050 << 10 },
            remote: Default::default(),
        };
        let used = Usage {
            cursor: 1 << 20,
            ..Usage::default()
        };
        for level in [Level::Raid1, Level::Jbod] {
            let shape = Shape::new(level, 2, None, 64 << 10, Default::default()).unwrap();
            assert!(!shape.has_strips(), "{level}");
        }
        let raid5 = Shape::new(Level::Raid5, 3, None, 64 << 10, Default::default()).unwrap();
        assert!(raid5.has_strips());
        let said = no_strip_fits(
            "volume \"m\"",
            &Unit::of(&Shape::new(Level::Raid1, 2, None, 64 << 10, Default::default()).unwrap()),
            &m,
            &used,
            0,
        );
        assert_eq!(
            said,
            "volume \"m\": no room for one 64 KiB unit of raid1 on member \"a\" (26 KiB free: 1.02 MiB minus the 1 MiB metadata reserve): give it size = \"1088KiB\" or more"
        );
        let said = no_strip_fits("volume \"m\"", &Unit::of(&raid5), &m, &used, 0);
        assert!(said.contains("one 64 KiB strip of raid5"), "{said}");
        assert!(
            said.ends_with("or strip_size = \"16KiB\" or smaller"),
            "{said}"
        );
        assert_eq!(least_region_words(4096, false), "one 4 KiB unit");
    }

    #[test]
    fn a_suggested_size_is_replaced_by_what_fits_with_its_reserves() {
        let said = "volume \"v\": size 200 MiB does not fit: raid5 over 3 members needs 100 MiB (104857600 bytes) on each member, but member \"d0\" has only 63 MiB free; at most 126 MiB fits (size = \"126MiB\")";
        assert_eq!(
            suggesting(said, Some(124 << 20)),
            "volume \"v\": size 200 MiB does not fit: raid5 over 3 members needs 100 MiB (104857600 bytes) on each member, but member \"d0\" has only 63 MiB free; at most 124 MiB fits with its reserves (size = \"124MiB\")"
        );
        assert_eq!(suggesting("no room", Some(1 << 20)), "no room");
        assert!(suggesting(said, None).ends_with("has only 63 MiB free; no size fits once its reserves (block checksums, write-hole log) are taken: give the members more room or the volume a smaller strip"));
    }

    #[test]
    fn members_fill_in_order_and_the_last_ones_get_what_is_left() {
        assert_eq!(fill_in_order(&[4, 4, 4], 12), [4, 4, 4]);
        assert_eq!(fill_in_order(&[4, 4, 4], 6), [4, 2, 0]);
        assert_eq!(fill_in_order(&[0, 8, 4], 10), [0, 8, 2]);
        assert_eq!(fill_in_order(&[], 0), Vec::<u64>::new());
    }
}

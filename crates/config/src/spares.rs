//! A volume's healing keys: `spares` (whole members standing by: when a member fails, the
//! daemon rebuilds its place onto one by itself) and `rebuild_rate` (the rate such a rebuild
//! runs at; `nbraid rebuild --rate` changes it while it runs).
//!
//! ```toml
//! [[volume]]
//! name = "db"
//! level = "raid6"
//! members = ["d0", "d1", "d2", "d3"]
//! spares = ["s0"]
//! rebuild_rate = "200MiB"   # bytes per second ("200MiB/s" too); "off" = unlimited (default)
//! # rebuild_rate = "adaptive"  # full speed while clients are idle, yielding while they do I/O
//! ```
//!
//! A spare is a `[[member]]` no volume takes a region of, standing by for one volume only
//! (it is written whole when it takes a place), at least as large as the volume's members
//! need, for a volume with redundancy. Checked after every volume is placed, each problem
//! located at the spare's name.

use super::error::{ErrorKind, Problem};
use super::raw::{RawSize, RawVolume};
use super::size::{format_size, format_size_exact, no_unit, parse_rate, SIZE_UNITS_HELP};
use crate::model::{HealOptions, Member, Volume};
use serde_spanned::Spanned;
use std::ops::Range;

/// Fills every volume's [`HealOptions`](crate::model::HealOptions) from its raw table (`raw[k]` is `volumes[k]`).
/// `sizes_checked` false: a spare smaller than the volume's members is not refused — the
/// config is read to find the records (`crate::Pins::finding_short_members`), which may say
/// the spare took a role and was truncated since (then short, left out, not a typo).
pub(crate) fn resolve(
    raw: &[&RawVolume],
    volumes: &mut [Volume],
    members: &[Member],
    sizes_checked: bool,
) -> Result<(), Problem> {
    let mut stand_by = StandBy::new(members.len());
    for (k, rv) in raw.iter().enumerate() {
        let who = format!("volume \"{}\"", volumes[k].name);
        resolve_rate(rv.rebuild_rate.as_ref(), &mut volumes[k].heal, &who)?;
        let Some(list) = &rv.spares else { continue };
        if !list.get_ref().is_empty() {
            require_redundancy(&volumes[k], list.span(), &who)?;
        }
        let need_bytes = match sizes_checked {
            true => members_need_bytes(&volumes[k]),
            false => 0,
        };
        for s in list.get_ref() {
            let id = s.get_ref();
            let m = (stand_by.take(k, id, need_bytes, volumes, members)).map_err(|refusal| {
                let msg = format!("{who}: spares: {}", refusal.text(id));
                Problem::new(s.span(), refusal.kind(), msg)
            })?;
            volumes[k].heal.spares.push(m);
        }
    }
    Ok(())
}

/// `rebuild_rate` into `heal`: adaptive, a limit, or (absent) left as it is.
fn resolve_rate(
    raw: Option<&Spanned<RawSize>>,
    heal: &mut HealOptions,
    who: &str,
) -> Result<(), Problem> {
    match raw {
        None => {}
        Some(r) if is_adaptive(r.get_ref()) => heal.rebuild_adaptive = true,
        Some(r) => heal.rebuild_rate_bytes_per_s = rate(r, who)?,
    }
    Ok(())
}

/// Refuses spares (listed at `at`) on a volume with no redundancy: nothing could be rebuilt
/// onto them.
fn require_redundancy(v: &Volume, at: Range<usize>, who: &str) -> Result<(), Problem> {
    if v.geometry.fault_tolerance().best > 0 {
        return Ok(());
    }
    let level = match v.level() {
        Some(l) => l.to_string(),
        None => "this tree".to_string(),
    };
    Err(Problem::new(
        at,
        ErrorKind::Option,
        format!(
            "{who}: spares do not apply to {level} (it has no redundancy: nothing can be \
             rebuilt onto a spare); remove spares, or use a level with redundancy"
        ),
    ))
}

/// The size a spare of volume `v` needs: the end of its furthest region on a member.
fn members_need_bytes(v: &Volume) -> u64 {
    v.regions.iter().map(|r| r.start + r.len).max().unwrap_or(0)
}

/// Which volume each member stands by for, as the volumes' spares are taken in order.
struct StandBy {
    /// By member index: the volume it is a spare of.
    spare_of: Vec<Option<usize>>,
}

impl StandBy {
    fn new(member_count: usize) -> StandBy {
        StandBy {
            spare_of: vec![None; member_count],
        }
    }

    /// Takes member `id` as a spare of `volumes[k]` (whose members need `need_bytes`): its
    /// index, or why it cannot stand by for that volume.
    fn take<'a>(
        &mut self,
        k: usize,
        id: &str,
        need_bytes: u64,
        volumes: &'a [Volume],
        members: &'a [Member],
    ) -> Result<usize, Refusal<'a>> {
        let Some(m) = members.iter().position(|x| x.id == id) else {
            let defined = members.iter().map(|x| x.id.as_str()).collect();
            return Err(Refusal::UnknownMember { defined });
        };
        let candidate = Candidate {
            listed: volumes[k].heal.spares.contains(&m),
            member_of: (volumes.iter().find(|v| v.members.contains(&m))).map(|v| v.name.as_str()),
            spare_of: self.spare_of[m].map(|o| volumes[o].name.as_str()),
            // A short spare (one that took a role, truncated since) is left out as short,
            // not refused for its size.
            size_bytes: match members[m].short_len_bytes() {
                Some(_) => u64::MAX,
                None => members[m].size,
            },
        };
        if let Some(refusal) = refusal(&volumes[k].name, &candidate, need_bytes) {
            return Err(refusal);
        }
        self.spare_of[m] = Some(k);
        Ok(m)
    }
}

/// What the tables say about a member named as a spare of one volume.
struct Candidate<'a> {
    /// Already among that volume's spares.
    listed: bool,
    /// The volume that takes a region of it, if one does.
    member_of: Option<&'a str>,
    /// The volume it already stands by for, if any.
    spare_of: Option<&'a str>,
    size_bytes: u64,
}

/// Why a member cannot be a spare of a volume.
#[derive(Debug, PartialEq, Eq)]
enum Refusal<'a> {
    UnknownMember {
        defined: Vec<&'a str>,
    },
    ListedTwice,
    /// One of the volume's own members.
    OwnMember,
    MemberOf {
        volume: &'a str,
    },
    SpareOf {
        volume: &'a str,
    },
    TooSmall {
        size_bytes: u64,
        need_bytes: u64,
    },
}

/// The first rule `c` breaks as a spare of volume `volume` whose members need `need_bytes`
/// (`None`: it may stand by for it).
fn refusal<'a>(volume: &str, c: &Candidate<'a>, need_bytes: u64) -> Option<Refusal<'a>> {
    if c.listed {
        return Some(Refusal::ListedTwice);
    }
    match c.member_of {
        Some(user) if user == volume => return Some(Refusal::OwnMember),
        Some(user) => return Some(Refusal::MemberOf { volume: user }),
        None => {}
    }
    if let Some(other) = c.spare_of {
        return Some(Refusal::SpareOf { volume: other });
    }
    (c.size_bytes < need_bytes).then_some(Refusal::TooSmall {
        size_bytes: c.size_bytes,
        need_bytes,
    })
}

impl Refusal<'_> {
    fn kind(&self) -> ErrorKind {
        match self {
            Refusal::UnknownMember { .. } => ErrorKind::UnknownMember,
            Refusal::TooSmall { .. } => ErrorKind::Size,
            Refusal::ListedTwice
            | Refusal::OwnMember
            | Refusal::MemberOf { .. }
            | Refusal::SpareOf { .. } => ErrorKind::Duplicate,
        }
    }

    /// For people, after "spares: ", of member `id`.
    fn text(&self, id: &str) -> String {
        match self {
            Refusal::UnknownMember { defined } => {
                format!(
                    "unknown member \"{id}\"; defined members: {}",
                    defined.join(", ")
                )
            }
            Refusal::ListedTwice => format!("member \"{id}\" is listed twice"),
            Refusal::OwnMember => format!(
                "member \"{id}\" is one of its members; a spare stands by outside the volume"
            ),
            Refusal::MemberOf { volume } => format!(
                "member \"{id}\" is a member of volume \"{volume}\"; a spare must be a whole \
                 member no volume uses"
            ),
            Refusal::SpareOf { volume } => format!(
                "member \"{id}\" is already a spare of volume \"{volume}\"; a spare stands by \
                 for one volume"
            ),
            Refusal::TooSmall {
                size_bytes,
                need_bytes,
            } => format!(
                "member \"{id}\" has {} ({size_bytes} bytes); the volume's members need {} \
                 (size = \"{}\" or more)",
                format_size(*size_bytes),
                format_size(*need_bytes),
                format_size_exact(*need_bytes)
            ),
        }
    }
}

fn is_adaptive(r: &RawSize) -> bool {
    matches!(r, RawSize::Text(t) if t.trim().eq_ignore_ascii_case("adaptive"))
}

/// `rebuild_rate`: a size per second (`"200MiB"`, `"200MiB/s"`, bytes), or `"off"`.
fn rate(r: &Spanned<RawSize>, who: &str) -> Result<u64, Problem> {
    let bad = |msg: String| {
        Problem::new(
            r.span(),
            ErrorKind::Size,
            format!(
                "{who}: rebuild_rate {msg}; give bytes per second (\"200MiB\", \"200MiB/s\") or \
                 \"off\" for unlimited or \"adaptive\" to yield to clients' I/O; {SIZE_UNITS_HELP}"
            ),
        )
    };
    match r.get_ref() {
        RawSize::Int(i) if *i > 0 => Err(bad(no_unit(*i))),
        RawSize::Int(i) => Err(bad(format!("{i} is not a rate"))),
        RawSize::Text(t) if t.trim().eq_ignore_ascii_case("off") => Ok(0),
        RawSize::Text(t) => match parse_rate(t) {
            Ok(0) => Err(bad(format!("\"{t}\" is zero"))),
            Ok(b) => Ok(b),
            Err(e) => Err(bad(e.to_string())),
        },
    }
}

#[cfg(test)]
mod tests {
    use crate::{parse, ErrorKind};
    use std::path::Path;

    fn config(volume_extra: &str, more: &str) -> Result<crate::Config, crate::ConfigError> {
        let mut text = String::new();
        for (id, size) in [("a", "8MiB"), ("b", "8MiB"), ("s", "8MiB"), ("t", "4MiB")] {
            text += &format!("[[member]]\nid = \"{id}\"\npath = \"memory:\"\nsize = \"{size}\"\n");
        }
        text += &format!(
            "[[volume]]\nname = \"v\"\nlevel = \"raid1\"\nmembers = [\"a\", \"b\"]\n{volume_extra}\n{more}"
        );
        parse(&text, Path::new("t.toml"))
    }

    #[test]
    fn a_spare_is_refused_by_the_first_rule_it_breaks() {
        use super::{refusal, Candidate, Refusal};
        let free = Candidate {
            listed: false,
            member_of: None,
            spare_of: None,
            size_bytes: 8 << 20,
        };
        assert_eq!(refusal("v", &free, 8 << 20), None);
        let small = Candidate {
            size_bytes: 4 << 20,
            ..free
        };
        assert_eq!(
            refusal("v", &small, 8 << 20),
            Some(Refusal::TooSmall {
                size_bytes: 4 << 20,
                need_bytes: 8 << 20
            })
        );
        // Listed twice is said before anything else the second naming breaks.
        let again = Candidate {
            listed: true,
            spare_of: Some("v"),
            ..small
        };
        assert_eq!(refusal("v", &again, 8 << 20), Some(Refusal::ListedTwice));
        let own = Candidate {
            member_of: Some("v"),
            spare_of: Some("w"),
            ..small
        };
        assert_eq!(refusal("v", &own, 8 << 20), Some(Refusal::OwnMember));
        assert_eq!(
            refusal("x", &own, 8 << 20),
            Some(Refusal::MemberOf { volume: "v" })
        );
        let taken = Candidate {
            spare_of: Some("w"),
            ..small
        };
        assert_eq!(
            refusal("v", &taken, 8 << 20),
            Some(Refusal::SpareOf { volume: "w" })
        );
    }

    #[test]
    fn spares_and_rate_resolve() {
        let c = config("spares = [\"s\"]\nrebuild_rate = \"200MiB/s\"", "").unwrap();
        let h = &c.volumes[0].heal;
        assert_eq!(h.spares, vec![2]);
        assert_eq!(h.rebuild_rate_bytes_per_s, 200 << 20);
        let c = config("rebuild_rate = \"adaptive\"", "").unwrap();
        assert!(c.volumes[0].heal.rebuild_adaptive);
        assert_eq!(c.volumes[0].heal.rebuild_rate_bytes_per_s, 0);
        let c = config("rebuild_rate = \"off\"", "").unwrap();
        assert_eq!(c.volumes[0].heal, Default::default());
        // A bare number could be B/s or MB/s: refused with the spellings meant.
        let e = config("rebuild_rate = 1000000", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no unit: write \"1000000B\" or \"1MB\""), "{e}");
        let s = config("spares = [\"s\"]", "").unwrap().summary();
        assert_eq!(s.volumes[0].spares, vec!["s".to_string()]);
        assert_eq!(s.members[2].spare_of.as_deref(), Some("v"));
        let text = s.to_string();
        assert!(text.contains("spare of v"), "{text}");
        assert!(text.contains("spares s"), "{text}");
    }

    #[test]
    fn bad_spares_are_located_and_explained() {
        let other = "[[volume]]\nname = \"w\"\nlevel = \"raid1\"\nmembers = [\"s\", \"t\"]\nsize = \"1MiB\"\n";
        let second =
            "[[volume]]\nname = \"w\"\nlevel = \"jbod\"\nmembers = [\"t\"]\nspares = [\"s\"]\n";
        for (extra, more, kind, says) in [
            (
                "spares = [\"x\"]",
                "",
                ErrorKind::UnknownMember,
                "unknown member \"x\"",
            ),
            (
                "spares = [\"s\", \"s\"]",
                "",
                ErrorKind::Duplicate,
                "listed twice",
            ),
            (
                "spares = [\"a\"]",
                "",
                ErrorKind::Duplicate,
                "one of its members",
            ),
            (
                "spares = [\"s\"]",
                other,
                ErrorKind::Duplicate,
                "member of volume \"w\"",
            ),
            (
                "spares = [\"t\"]",
                "",
                ErrorKind::Size,
                "the volume's members need",
            ),
            (
                "spares = [\"s\"]",
                second,
                ErrorKind::Option,
                "no redundancy",
            ),
            (
                "rebuild_rate = \"fast\"",
                "",
                ErrorKind::Size,
                "rebuild_rate",
            ),
            ("rebuild_rate = 0", "", ErrorKind::Size, "not a rate"),
        ] {
            let e = config(extra, more).expect_err(extra);
            assert_eq!(e.kind(), Some(kind), "{extra}: {e}");
            let text = e.to_string();
            assert!(text.contains(says), "{extra}: {text}");
            assert!(text.contains("t.toml:"), "{extra}: {text}");
        }
        // Two volumes cannot share a spare.
        let twice = "[[member]]\nid = \"c\"\npath = \"memory:\"\nsize = \"8MiB\"\n\
                     [[member]]\nid = \"d\"\npath = \"memory:\"\nsize = \"8MiB\"\n\
                     [[volume]]\nname = \"w\"\nlevel = \"raid1\"\nmembers = [\"c\", \"d\"]\nspares = [\"s\"]\n";
        let e = config("spares = [\"s\"]", twice).unwrap_err().to_string();
        assert!(e.contains("already a spare of volume \"v\""), "{e}");
    }
}

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
use crate::model::{Member, Volume};
use serde_spanned::Spanned;

/// Fills every volume's [`HealOptions`](crate::model::HealOptions) from its raw table (`raw[k]` is `volumes[k]`).
pub(crate) fn resolve(
    raw: &[&RawVolume],
    volumes: &mut [Volume],
    members: &[Member],
) -> Result<(), Problem> {
    // Which volume each member is a spare of, with the name's span.
    let mut spare_of: Vec<Option<usize>> = vec![None; members.len()];
    for (k, rv) in raw.iter().enumerate() {
        let who = format!("volume \"{}\"", volumes[k].name);
        let heal = &mut volumes[k].heal;
        match &rv.rebuild_rate {
            None => {}
            Some(r) if is_adaptive(r.get_ref()) => heal.rebuild_adaptive = true,
            Some(r) => heal.rebuild_rate_bytes_per_s = rate(r, &who)?,
        }
        let Some(list) = &rv.spares else { continue };
        if !list.get_ref().is_empty() && volumes[k].geometry.fault_tolerance().best == 0 {
            return Err(Problem::new(
                list.span(),
                ErrorKind::Option,
                format!(
                    "{who}: spares do not apply to {} (it has no redundancy: nothing can be \
                     rebuilt onto a spare); remove spares, or use a level with redundancy",
                    match volumes[k].level() {
                        Some(l) => l.to_string(),
                        None => "this tree".to_string(),
                    }
                ),
            ));
        }
        let need = volumes[k]
            .regions
            .iter()
            .map(|r| r.start + r.len)
            .max()
            .unwrap_or(0);
        for s in list.get_ref() {
            let id = s.get_ref();
            let at = |kind, msg: String| Err(Problem::new(s.span(), kind, format!("{who}: {msg}")));
            let Some(m) = members.iter().position(|x| &x.id == id) else {
                let defined: Vec<&str> = members.iter().map(|x| x.id.as_str()).collect();
                return at(
                    ErrorKind::UnknownMember,
                    format!(
                        "spares: unknown member \"{id}\"; defined members: {}",
                        defined.join(", ")
                    ),
                );
            };
            if volumes[k].heal.spares.contains(&m) {
                return at(
                    ErrorKind::Duplicate,
                    format!("spares: member \"{id}\" is listed twice"),
                );
            }
            if let Some(user) = volumes.iter().find(|v| v.members.contains(&m)) {
                let why = if user.name == volumes[k].name {
                    "is one of its members; a spare stands by outside the volume".to_string()
                } else {
                    format!(
                        "is a member of volume \"{}\"; a spare must be a whole member no volume uses",
                        user.name
                    )
                };
                return at(
                    ErrorKind::Duplicate,
                    format!("spares: member \"{id}\" {why}"),
                );
            }
            if let Some(other) = spare_of[m] {
                return at(
                    ErrorKind::Duplicate,
                    format!(
                        "spares: member \"{id}\" is already a spare of volume \"{}\"; a spare \
                         stands by for one volume",
                        volumes[other].name
                    ),
                );
            }
            if members[m].size < need {
                return at(
                    ErrorKind::Size,
                    format!(
                        "spares: member \"{id}\" has {} ({} bytes); the volume's members need {} \
                         (size = \"{}\" or more)",
                        format_size(members[m].size),
                        members[m].size,
                        format_size(need),
                        format_size_exact(need)
                    ),
                );
            }
            spare_of[m] = Some(k);
            volumes[k].heal.spares.push(m);
        }
    }
    Ok(())
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

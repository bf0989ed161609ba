//! The notes `status` gives for the state a volume is in now, as `nbraid check` (and the
//! next start) would give them: who holds which role is decided again from the running
//! volume ([`live_notes`]), so a spare that took a role after the start yields the same
//! "update the config" note the next start will. The start's other notes (spares missing or
//! unusable, a forced assembly) stay as they were said.

use nbraid_assembly::adopt::{is_role_note, role_notes};
use nbraid_core::metadata::Absence;

/// A volume as its config declares it: member ids, then spare ids, by position.
#[derive(Clone, Debug, Default)]
pub struct ConfigIds {
    pub ids: Vec<String>,
    /// How many of `ids` are members (the rest are spares).
    pub members: usize,
}

/// Who holds a role now: its id and its path (said for a member added at run time).
pub(super) struct Holder {
    pub id: String,
    pub path: String,
}

/// The notes for a volume whose roles are held by `holders` — present or missing, as the
/// start named them (`None`: no member can be named),
/// replacing the role notes among `start_notes`. `no_role(id)`, for a config member holding
/// no role: `None` when it carries no record of the volume (missing, or standing by as a
/// spare), else whether it carries no other volume's records (it may be wiped).
pub(super) fn live_notes(
    volume: &str,
    config: &ConfigIds,
    holders: &[Option<Holder>],
    start_notes: &[String],
    no_role: &dyn Fn(&str) -> Option<bool>,
) -> Vec<String> {
    let configured = config.ids.len();
    let mut ids = config.ids.clone();
    let mut added_paths = Vec::new();
    let roles: Vec<Result<usize, Absence>> = holders
        .iter()
        .map(|h| {
            let Some(h) = h else {
                return Err(Absence::Lost);
            };
            Ok(match config.ids.iter().position(|id| *id == h.id) {
                Some(p) => p,
                // Added at run time: after the config's members and spares, as a start
                // names them.
                None => {
                    ids.push(h.id.clone());
                    added_paths.push(h.path.clone());
                    ids.len() - 1
                }
            })
        })
        .collect();
    // A role no holder is named for stays unnamed: nothing here tells which file it was.
    let by_role: Vec<Option<usize>> = roles.iter().map(|r| r.as_ref().ok().copied()).collect();
    let mut notes = role_notes(
        volume,
        (&ids, &added_paths),
        (config.members, configured),
        (&roles, &by_role),
        &|p| no_role(&ids[p]),
    );
    notes.extend(start_notes.iter().filter(|n| !is_role_note(n)).cloned());
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ConfigIds {
        let ids = ["d0", "d1", "d2", "s0"].map(String::from).to_vec();
        ConfigIds { ids, members: 3 }
    }

    fn holders(ids: &[&str]) -> Vec<Option<Holder>> {
        ids.iter()
            .map(|id| {
                Some(Holder {
                    id: id.to_string(),
                    path: format!("/srv/{id}.img"),
                })
            })
            .collect()
    }

    #[test]
    fn a_spare_that_took_a_role_after_the_start_is_noted_as_the_next_start_would() {
        let start = vec!["spare s9 is missing: not standing by".to_string()];
        let now = live_notes(
            "db",
            &config(),
            &holders(&["d0", "s0", "d2"]),
            &start,
            &|id| (id == "d1").then_some(true),
        );
        assert_eq!(now.len(), 3, "{now:?}");
        assert_eq!(
            now[0],
            r#"member s0 (listed in spares) now holds role 1; update the config: members = ["d0", "s0", "d2"]"#
        );
        assert!(now[1].starts_with("member d1 no longer holds a role in volume db"));
        assert_eq!(now[2], start[0]);
    }

    #[test]
    fn role_notes_of_the_start_that_no_longer_hold_are_dropped() {
        let start = vec![
            r#"member s0 (listed in spares) now holds role 1; update the config: members = ["d0", "s0", "d2"]"#.to_string(),
        ];
        // s0 was replaced by a member added at run time since.
        let now = live_notes(
            "db",
            &config(),
            &holders(&["d0", "new", "d2"]),
            &start,
            &|_| None,
        );
        assert_eq!(now.len(), 1, "{now:?}");
        assert!(
            now[0].starts_with("member new (added at run time: /srv/new.img) holds role 1"),
            "{now:?}"
        );
        // Nothing changed since the start: nothing to say.
        let now = live_notes("db", &config(), &holders(&["d0", "d1", "d2"]), &[], &|_| {
            None
        });
        assert!(now.is_empty(), "{now:?}");
    }
}

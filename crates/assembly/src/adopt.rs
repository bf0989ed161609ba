//! After a volume started: which member serves which role, the spares standing by, and what
//! the operator must hear about both.
//!
//! - **Assembly over members and spares.** The config's spares that carry this volume's
//!   record join assembly after the members (positions `members.len()..`): a spare that took
//!   a role serves it by its superblock although the config still lists the member it
//!   replaced, and that old member (its id no longer named) is ignored. Both are said loudly,
//!   with the `members = [...]` line that matches the superblocks.
//! - **Standing by.** Spares no role claims are handed to the array
//!   ([`Array::add_spare`]) when they are blank (missing files were created sparse), or carry
//!   only an old record of this volume. So is a member listed in `members` that is blank and
//!   claims no role: a wiped old member, or a new disk put at a lost member's path.
//!   Anything else (another array's records, non-zero bytes where the superblock goes) is
//!   never overwritten: warned about and left alone.
//!
//! While the volume is served, spares are put in failed roles by the daemon (its `heal`).

use crate::added::{added_id, declared, Added};
use crate::member::Opened;
use crate::records::{has_this_volume, only_this_volume};
use nbraid_config::{self as config, Config};
use nbraid_core::metadata::disk_rule::{may_write, Refused, Writer};
use nbraid_core::metadata::{Absence, Array, MemberMeta, OpenReport, Probe, Uuid};
use nbraid_core::Member;
use std::sync::Arc;

/// A member or spare the daemon knows by its config id (or, added at run time, its path).
#[derive(Clone)]
pub struct Known {
    pub id: String,
    pub member: Arc<dyn Member>,
}

/// The write rule (`nbraid_core::metadata::disk_rule`) for a spare taken at start: blank, or
/// carrying this array's record; never forced.
fn spare_rule(meta: &MemberMeta, array: &Array) -> Result<(), Refused> {
    let writer = Writer {
        array: Some(array.id()),
        siblings: Vec::new(),
    };
    may_write(&meta.contents(), &writer, false).map(|_| ())
}

/// Volume `v`'s spares as assembly sees them (after the members): those carrying the
/// volume's record (of array `array`), the others as missing (a blank spare holds no role).
pub fn spares_for_assembly(
    v: &config::Volume,
    opened: &[Opened],
    array: Option<Uuid>,
) -> Vec<Option<Arc<MemberMeta>>> {
    v.heal
        .spares
        .iter()
        .map(|&m| match only_this_volume(&opened[m], &v.name, array) {
            Some(true) => opened[m].meta().cloned(),
            _ => None,
        })
        .collect()
}

/// The ids of assembly's positions: the config's members, then its spares (config ids),
/// then the members added at run time that the records list (their paths).
pub fn position_ids(config: &Config, v: &config::Volume, added_paths: &[String]) -> Vec<String> {
    let mut ids: Vec<String> = v
        .members
        .iter()
        .chain(&v.heal.spares)
        .map(|&m| config.members[m].id.clone())
        .collect();
    // Added members go by an id no config member has (their snippet must paste), or by the
    // config's, where it has declared the file since.
    let mut taken: Vec<String> = config.members.iter().map(|m| m.id.clone()).collect();
    for path in added_paths {
        if let Some(m) = declared(config, path) {
            ids.push(config.members[m].id.clone());
            continue;
        }
        let id = added_id(path, &taken);
        taken.push(id.clone());
        ids.push(id);
    }
    ids
}

/// The config lines that name a member added at run time: a `[[member]]` to paste, since
/// its id is not the config's yet.
pub fn member_snippet(id: &str, path: &str) -> String {
    format!("[[member]]\nid = \"{id}\"\npath = \"{path}\"")
}

/// Positions (members, then spares) that serve or are recorded in some role.
fn claimed(roles: &[Result<usize, Absence>]) -> Vec<usize> {
    roles
        .iter()
        .filter_map(|r| match r {
            Ok(p) => Some(*p),
            Err(a) => a.member(),
        })
        .collect()
}

/// Whether a file found at some position shows no member's identity (missing, blank,
/// unreadable, unreachable), so that it may be the member a lost role's records name. A file
/// carrying a superblock is the member of its own id: had the records put that id in a role,
/// assembly would have found it there.
pub fn unidentified(probe: Option<&Probe>) -> bool {
    !matches!(probe, Some(Probe::Superblock(..)))
}

/// [`unidentified`] for each of volume `v`'s assembly positions (members, spares, then the
/// members added at run time, as [`position_ids`] names them).
pub fn unidentified_positions(v: &config::Volume, opened: &[Opened], added: &[Added]) -> Vec<bool> {
    let config = (v.members.iter().chain(&v.heal.spares))
        .map(|&m| unidentified(opened[m].meta().map(|meta| meta.probe())));
    let added = added.iter().map(|a| {
        let meta = a.opened.as_ref().ok().and_then(Opened::meta);
        unidentified(meta.map(|meta| meta.probe()))
    });
    config.chain(added).collect()
}

/// The position holding each role, present or not: the one assembly found in it (serving,
/// stale, failed), or for a lost role a missing member's — one no role claims whose file
/// shows no identity (`unidentified`, by position), the config's members first, then the
/// members added at run time, then the spares. Never a member whose file carries another
/// identity: a stale former holder of another role is not the lost role's. A lost role no
/// such file can be (its member removed, its file kept) is the one the config declares for
/// it, when no role claims that member: the id and path the operator wrote, and the ones
/// status, the start's `members = [...]` line and `check` all give. `None`: no position can
/// be it. Positions are `0..n` members, `n..configured` spares, then added.
pub fn holders(
    roles: &[Result<usize, Absence>],
    (n, configured): (usize, usize),
    unidentified: &[bool],
) -> Vec<Option<usize>> {
    let claimed = claimed(roles);
    let order = (0..n)
        .chain(configured..unidentified.len())
        .chain(n..configured.min(unidentified.len()));
    let mut candidates =
        order.filter(|p| !claimed.contains(p) && unidentified.get(*p) != Some(&false));
    let mut held: Vec<Option<usize>> = roles
        .iter()
        .map(|r| match r {
            Ok(p) => Some(*p),
            Err(a) => a.member().or_else(|| candidates.next()),
        })
        .collect();
    for role in 0..held.len().min(n) {
        if held[role].is_none() && !claimed.contains(&role) && !held.contains(&Some(role)) {
            held[role] = Some(role);
        }
    }
    held
}

/// The id of each role's holder ([`holders`]); `?` where none can be named.
pub fn ids_by_role(ids: &[String], holders: &[Option<usize>]) -> Vec<String> {
    (holders.iter())
        .map(|h| h.and_then(|p| ids.get(p)).map_or("?".into(), Clone::clone))
        .collect()
}

/// The phrases that mark [`role_notes`]' notes (and only theirs): a running daemon replaces
/// them when who holds which role changes ([`is_role_note`]).
const ROLE_NOTE_MARKS: [&str; 3] = [
    ") holds role ",
    " (listed in spares) now holds role ",
    " no longer holds a role in volume ",
];

/// Whether `note` is one [`role_notes`] writes (about who holds which role), as opposed to
/// the other notes of a start (spares missing or unusable, a forced assembly).
pub fn is_role_note(note: &str) -> bool {
    note.starts_with("member ") && ROLE_NOTE_MARKS.iter().any(|m| note.contains(m))
}

/// What the operator must hear about where members stand after assembly: a spare (position
/// `n..configured`) serving a role, with the `members = [...]` line matching the superblocks;
/// a member added at run time (position `configured..`) serving one; a member of the config
/// carrying the volume's record that no role claims (rebuilt over, replaced or removed).
/// `record(p)`: `None` when position `p` carries no record of the volume, else whether it
/// carries no other volume's (a member shared with other volumes must not be wiped).
/// `holders`: by role, the position holding it ([`holders`]).
pub fn role_notes(
    volume: &str,
    (ids, added_paths): (&[String], &[String]),
    (n, configured): (usize, usize),
    (roles, holders): (&[Result<usize, Absence>], &[Option<usize>]),
    record: &dyn Fn(usize) -> Option<bool>,
) -> Vec<String> {
    let by_role = ids_by_role(ids, holders);
    let line = by_role
        .iter()
        .map(|i| format!("\"{i}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let mut notes = Vec::new();
    for (role, r) in roles.iter().enumerate() {
        match r {
            Ok(p) if *p >= configured => {
                let path = added_paths.get(*p - configured).map_or("?", String::as_str);
                notes.push(format!(
                    "member {} (added at run time: {path}) holds role {role}, opened by the path the records keep; to name it in the config, add\n{}\nand set members = [{line}]",
                    ids[*p],
                    member_snippet(&ids[*p], path)
                ))
            }
            Ok(p) if *p >= n => notes.push(format!(
                "member {} (listed in spares) now holds role {role}; update the config: members = [{line}]",
                ids[*p]
            )),
            _ => {}
        }
    }
    let claimed = claimed(roles);
    // A member named for a lost role ([`holders`]) is that role's, however old its record.
    let named = |p: &usize| claimed.contains(p) || holders.contains(&Some(*p));
    for p in (0..n).filter(|p| !named(p)) {
        let advice = match record(p) {
            None => continue,
            Some(true) => "remove it from the config, or wipe its first MiB to make it a spare",
            Some(false) => "take it out of this volume's members (it carries other volumes' records: do not wipe it)",
        };
        notes.push(format!(
            "member {} no longer holds a role in volume {volume} (rebuilt over, replaced or removed): ignored — {advice}",
            ids[p]
        ));
    }
    notes
}

/// The start's note for config spare `id` missing then: `status` drops it once `nbraid add`
/// has it standing by.
pub fn missing_spare_note(id: &str) -> String {
    format!("spare {id} is missing: not standing by")
}

/// The start's note on config member `id`, blank and in no role: taken as a spare. True
/// while it stands by; once a lost role was rebuilt onto it, `status` no longer says it.
pub fn blank_member_note(id: &str) -> String {
    format!("member {id} is blank and holds no role: it stands by as a spare (a lost role is rebuilt onto it)")
}

/// After the volume started: hands every usable spare (and blank unclaimed member) to the
/// array, and returns what the operator must hear ([`role_notes`], spares that cannot be
/// used) and every member and spare known by id.
pub async fn adopt(
    array: &Array,
    config: &Config,
    v: &config::Volume,
    (opened, added): (&[Opened], &[Added]),
    report: &OpenReport,
) -> (Vec<String>, Vec<Known>) {
    let n = v.members.len();
    let configured = n + v.heal.spares.len();
    let mut claimed = claimed(&report.roles);
    // A replacement whose copy goes on is neither a spare nor a member to warn about.
    claimed.extend(report.replacing.iter().map(|x| x.position));
    let this = Some(array.id());
    let paths: Vec<String> = added.iter().map(|a| a.path.clone()).collect();
    let ids = position_ids(config, v, &paths);
    let unidentified = unidentified_positions(v, opened, added);
    let holders = holders(&report.roles, (n, configured), &unidentified);
    let notes = role_notes(
        &v.name,
        (&ids, &paths),
        (n, configured),
        (&report.roles, &holders),
        &|p| {
            let o = &opened[v.members[p]];
            has_this_volume(o, &v.name, this)
                .then(|| only_this_volume(o, &v.name, this) == Some(true))
        },
    );
    let mut adoption = Adoption {
        array,
        volume: &v.name,
        notes,
        known: Vec::new(),
    };
    let positions = v.members.iter().chain(&v.heal.spares).enumerate();
    for (p, &m) in positions {
        let id = &config.members[m].id;
        adoption.configured(id, &opened[m], p < n, claimed.contains(&p));
    }
    for (i, a) in added.iter().enumerate() {
        let p = configured + i;
        adoption.added(&ids[p], a, claimed.contains(&p));
    }
    (adoption.notes, adoption.known)
}

/// What [`adopt`] gathers over the volume's members and spares.
struct Adoption<'a> {
    array: &'a Array,
    /// The volume's name.
    volume: &'a str,
    /// What the operator must hear, in order.
    notes: Vec<String>,
    /// Every member and spare that opened, by id.
    known: Vec<Known>,
}

impl Adoption<'_> {
    /// Config member (`member`) or spare `id`, opened as `o`: known by id when it opened,
    /// and handed to the array as a spare when no role claims it (`claimed`) and the spares'
    /// rules allow.
    fn configured(&mut self, id: &str, o: &Opened, member: bool, claimed: bool) {
        let Some(meta) = o.meta() else {
            if !member {
                self.notes.push(missing_spare_note(id));
            }
            return;
        };
        self.known.push(Known {
            id: id.to_string(),
            member: meta.member().clone(),
        });
        // An old member whose id the records no longer name: `role_notes` says it.
        if claimed || (member && has_this_volume(o, self.volume, Some(self.array.id()))) {
            return;
        }
        let what = if member { "member" } else { "spare" };
        match not_a_spare(self.array, self.volume, o, meta) {
            Some(NotSpare::Refused(why)) => self.notes.push(format!("{what} {id} {why} — not used as a spare; wipe its first MiB if its data is no longer wanted")),
            Some(NotSpare::OtherVolumes) => self.notes.push(format!(
                "{what} {id} carries another volume's records: not used as a spare — wipe its first MiB if its data is no longer wanted"
            )),
            None => match self.array.add_spare(meta.clone()) {
                Ok(()) if member => self.notes.push(blank_member_note(id)),
                Ok(()) => {}
                Err(e) => self.notes.push(format!("spare {id}: {e}")),
            },
        }
    }

    /// Member `id` added at run time: known when a role claims it (`claimed`) and it opened;
    /// else kept as a spare when the records list it and the rules allow
    /// ([`adopt_recorded`]).
    fn added(&mut self, id: &str, a: &Added, claimed: bool) {
        let member = match claimed {
            true => (a.opened.as_ref().ok())
                .and_then(|o| o.meta())
                .map(|meta| meta.member().clone()),
            false => adopt_recorded(self.array, self.volume, a, &mut self.notes),
        };
        if let Some(member) = member {
            self.known.push(Known {
                id: id.to_string(),
                member,
            });
        }
    }
}

/// Why a member or spare no role claims cannot stand by as a spare.
#[derive(Debug, PartialEq)]
enum NotSpare {
    /// The write rule refuses it (another array's records, data where the superblock goes,
    /// unreadable).
    Refused(Refused),
    /// It carries other volumes' records beside this one's: never wiped for a spare.
    OtherVolumes,
}

/// Why `meta` (opened as `o`), claimed by no role of volume `volume`, cannot stand by as a
/// spare of `array`, if it cannot.
fn not_a_spare(array: &Array, volume: &str, o: &Opened, meta: &MemberMeta) -> Option<NotSpare> {
    spare_refusal(spare_rule(meta, array), || {
        only_this_volume(o, volume, Some(array.id()))
    })
}

/// A spare's refusal from the write rule's answer `rule`, then from whether it carries this
/// volume's records only (`only_ours`, asked only when the rule allows).
fn spare_refusal(
    rule: Result<(), Refused>,
    only_ours: impl FnOnce() -> Option<bool>,
) -> Option<NotSpare> {
    match rule {
        Err(why) => Some(NotSpare::Refused(why)),
        Ok(()) => (only_ours() == Some(false)).then_some(NotSpare::OtherVolumes),
    }
}

/// A member added at run time that the records list and no role claims: kept as a spare by
/// the config's spares' rules (blank, or only an old record of this volume); else said, and
/// left alone. `None` when it is not standing by.
fn adopt_recorded(
    array: &Array,
    volume: &str,
    added: &Added,
    notes: &mut Vec<String>,
) -> Option<Arc<dyn Member>> {
    let path = &added.path;
    let o = match &added.opened {
        Ok(o) => o,
        Err(e) => {
            notes.push(format!(
                "{path} (added at run time, recorded) cannot be opened: neither serving nor standing by ({e}); `nbraid remove {volume} {path}` forgets it"
            ));
            return None;
        }
    };
    let meta = o.meta()?.clone();
    let found = match not_a_spare(array, volume, o, &meta) {
        Some(NotSpare::Refused(why)) => Some(why.to_string()),
        Some(NotSpare::OtherVolumes) => Some("carries other volumes' records".to_string()),
        None => None,
    };
    if let Some(found) = found {
        notes.push(format!(
            "{path} (added at run time, recorded) holds no role and {found}: not used as a spare — `nbraid remove {volume} {path}` forgets it (`--offline` while no daemon runs; or wipe its first MiB if its data is no longer wanted)"
        ));
        return None;
    }
    match array.add_spare(meta.clone()) {
        Ok(()) => Some(meta.member().clone()),
        Err(e) => {
            notes.push(format!("recorded spare {path}: {e}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// Role holders where every position's file is unidentified (the old guess's ground).
    fn held(roles: &[Result<usize, Absence>], n: usize, positions: usize) -> Vec<Option<usize>> {
        holders(roles, (n, positions), &vec![true; positions])
    }

    #[test]
    fn a_spare_in_a_role_and_the_member_it_replaced_are_named() {
        // Config: members d0..d3, spare s0; s0 holds role 1, d1 carries an old record.
        let pos = ids(&["d0", "d1", "d2", "d3", "s0"]);
        let roles = vec![Ok(0), Ok(4), Ok(2), Ok(3)];
        let h = held(&roles, 4, 5);
        assert_eq!(ids_by_role(&pos, &h), ids(&["d0", "s0", "d2", "d3"]));
        let notes = role_notes("v", (&pos, &[]), (4, 5), (&roles, &h), &|p| {
            (p != 4).then_some(true)
        });
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains(r#"s0 (listed in spares) now holds role 1; update the config: members = ["d0", "s0", "d2", "d3"]"#));
        assert!(notes[1].starts_with("member d1 no longer holds a role in volume v"));
    }

    #[test]
    fn a_member_added_at_run_time_in_a_role_gets_an_id_and_a_snippet_to_paste() {
        // Config: members d0..d2, no spares; /x/new.img (added at run time) holds role 2.
        let pos = ids(&["d0", "d1", "d2", "new"]);
        let roles = vec![Ok(0), Ok(1), Ok(3)];
        let h = held(&roles, 3, 3);
        assert_eq!(ids_by_role(&pos, &h), ids(&["d0", "d1", "new"]));
        let notes = role_notes(
            "v",
            (&pos, &ids(&["/x/new.img"])),
            (3, 3),
            (&roles, &h),
            &|_| Some(true),
        );
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert_eq!(
            notes[0],
            "member new (added at run time: /x/new.img) holds role 2, opened by the path the records keep; to name it in the config, add\n[[member]]\nid = \"new\"\npath = \"/x/new.img\"\nand set members = [\"d0\", \"d1\", \"new\"]"
        );
        assert!(notes[1].starts_with("member d2 no longer holds a role in volume v"));
        assert!(
            notes[1].ends_with("or wipe its first MiB to make it a spare"),
            "{notes:?}"
        );
        // Shared with other volumes (Matrix): never told to wipe it.
        let notes = role_notes("v", (&pos, &[]), (3, 3), (&roles, &h), &|_| Some(false));
        assert!(
            notes[1].ends_with("(it carries other volumes' records: do not wipe it)"),
            "{notes:?}"
        );
    }

    #[test]
    fn lost_roles_take_the_unclaimed_members_in_order() {
        let pos = ids(&["a", "b", "c", "s"]);
        // Members swapped by superblock, role 2 lost: the unclaimed member c is presumed it.
        let roles = vec![Ok(1), Ok(0), Err(Absence::Lost)];
        let h = held(&roles, 3, 4);
        assert_eq!(ids_by_role(&pos, &h), ids(&["b", "a", "c"]));
        // A blank member with no record is not an "old member".
        assert!(
            role_notes("v", (&pos, &[]), (3, 4), (&roles, &h), &|p| (p != 2)
                .then_some(true))
            .is_empty()
        );
        let failed = vec![Ok(0), Err(Absence::Failed { member: 1 }), Ok(2)];
        assert_eq!(
            ids_by_role(&pos, &held(&failed, 3, 4)),
            ids(&["a", "b", "c"])
        );
    }

    /// RAID 5 of d0..d3: d1 failed and was rebuilt onto new1 (added at run time), then
    /// d2's file was lost. Role 2's holder is d2 — not d1, which carries its own superblock
    /// (a stale former role-1 member) and comes first in the config.
    #[test]
    fn a_lost_role_is_its_missing_member_s_never_a_stale_member_s_with_another_identity() {
        let pos = ids(&["d0", "d1", "d2", "d3", "new1"]);
        let roles = vec![Ok(0), Ok(4), Err(Absence::Lost), Ok(3)];
        let unidentified = [false, false, true, false, false];
        let h = holders(&roles, (4, 4), &unidentified);
        assert_eq!(h, vec![Some(0), Some(4), Some(2), Some(3)]);
        assert_eq!(ids_by_role(&pos, &h), ids(&["d0", "new1", "d2", "d3"]));
        let notes = role_notes(
            "v",
            (&pos, &ids(&["/x/new1.img"])),
            (4, 4),
            (&roles, &h),
            &|p| (p == 1).then_some(true),
        );
        assert!(
            notes[0].ends_with(r#"and set members = ["d0", "new1", "d2", "d3"]"#),
            "{notes:?}"
        );
        assert!(
            notes[1].starts_with("member d1 no longer holds a role"),
            "{notes:?}"
        );
        // Every other file carries an identity (d2 its own, removed from the role): the
        // config's member for the role is named, as status and the start name it.
        let known = [false, false, false, false, false];
        assert_eq!(holders(&roles, (4, 4), &known)[2], Some(2));
        assert_eq!(ids_by_role(&pos, &holders(&roles, (4, 4), &known))[2], "d2");
    }

    /// A removed role whose member's file kept its old record: the config's member for the
    /// role names it in the `members = [...]` line, and it is not told to leave the config.
    /// Only a position no role claims is named: never one serving another role.
    #[test]
    fn a_removed_role_is_named_by_the_config_s_member_for_it() {
        // Config: d0..d3, spare s0; s0 took role 1, d2 was removed; d1 and d2 keep records.
        let pos = ids(&["d0", "d1", "d2", "d3", "s0"]);
        let roles = vec![Ok(0), Ok(4), Err(Absence::Lost), Ok(3)];
        let h = holders(&roles, (4, 5), &[false; 5]);
        assert_eq!(ids_by_role(&pos, &h), ids(&["d0", "s0", "d2", "d3"]));
        let notes = role_notes("v", (&pos, &[]), (4, 5), (&roles, &h), &|_| Some(true));
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].ends_with(r#"members = ["d0", "s0", "d2", "d3"]"#));
        assert!(notes[1].starts_with("member d1 no longer holds a role"));
        // Members swapped by superblock: d2 serves role 3, so role 2 cannot be named d2.
        let roles = vec![Ok(0), Ok(1), Err(Absence::Lost), Ok(2)];
        let h = holders(&roles, (4, 4), &[false; 4]);
        assert_eq!(h[2], None);
    }

    /// A member added at run time that held a role and is gone is named before a config
    /// spare standing by (blank, it too shows no identity).
    #[test]
    fn a_lost_role_of_a_missing_added_member_names_it_before_a_blank_spare() {
        // Members d0..d2, spare s0 (blank), new (added at run time, missing) held role 1.
        let pos = ids(&["d0", "d1", "d2", "s0", "new"]);
        let roles = vec![Ok(0), Err(Absence::Lost), Ok(2)];
        let h = holders(&roles, (3, 4), &[false, false, false, true, true]);
        assert_eq!(ids_by_role(&pos, &h), ids(&["d0", "new", "d2"]));
    }

    #[test]
    fn role_notes_are_known_apart_from_the_other_notes_of_a_start() {
        let pos = ids(&["d0", "d1", "d2", "new", "s0"]);
        let roles = [Ok(0), Ok(4), Ok(2)];
        let h = held(&roles, 3, 5);
        let spare = role_notes("v", (&pos, &[]), (3, 5), (&roles, &h), &|_| Some(true));
        let roles = [Ok(0), Ok(1), Ok(3)];
        let h = held(&roles, 3, 3);
        let added = role_notes(
            "v",
            (&pos, &ids(&["/x/new.img"])),
            (3, 3),
            (&roles, &h),
            &|_| Some(false),
        );
        assert_eq!(spare.len() + added.len(), 4, "{spare:?} {added:?}");
        assert!(spare.iter().chain(&added).all(|n| is_role_note(n)));
        for other in [
            "spare s1 is missing: not standing by",
            "member d3 is blank and holds no role: it stands by as a spare (a lost role is rebuilt onto it)",
            "assembled by force: d5 took role 5 back (recorded failed at event 60 of 61)",
        ] {
            assert!(!is_role_note(other), "{other}");
        }
    }

    /// The write rule's refusal comes first (the records are not looked at then); a spare
    /// it allows is refused only when it carries other volumes' records.
    #[test]
    fn a_spare_is_refused_by_the_write_rule_then_by_other_volumes_records() {
        let unreadable = || Err(Refused::Unknown("EIO".into()));
        assert_eq!(
            spare_refusal(unreadable(), || unreachable!("not asked once refused")),
            Some(NotSpare::Refused(Refused::Unknown("EIO".into())))
        );
        assert_eq!(
            spare_refusal(Ok(()), || Some(false)),
            Some(NotSpare::OtherVolumes)
        );
        assert_eq!(spare_refusal(Ok(()), || Some(true)), None);
        assert_eq!(spare_refusal(Ok(()), || None), None, "blank");
    }
}

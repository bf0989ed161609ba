//! Assembly by superblock, as a pure decision: given what each member the config names was
//! found to hold, which member plays which role, which roles are lost or stale, and whether
//! the volume may start at all. Superblocks are trusted over the config's order: members whose
//! paths were swapped still take their recorded roles. Nothing here reads or writes a member.

use super::{MetadataError, RecordedState, Superblock, Uuid, VolumeRecord};
use nbraid_layout::Node;

mod arrays;
mod error;
mod forced;
mod geometry;
mod peer_records;
mod reshape_records;
mod tolerance;
mod torn_rows;

pub use error::AssembleError;
pub use forced::{pick_forced, pick_forced_with};
use tolerance::{warn_absent, Out};

/// What the member at one position of the config holds.
#[derive(Clone, Debug)]
pub enum Probe {
    /// The member (file or device) is not there.
    Missing,
    /// There, but neither superblock copy carries nbraid's magic.
    Blank,
    /// Its newest valid superblock (and the damage found in the other copy, if any).
    Superblock(Superblock, Option<MetadataError>),
    /// Both copies unusable, or the member could not be read.
    Unreadable(String),
    /// A remote member whose server did not answer (refused, timed out): what it holds is
    /// unknown. It is never taken for blank; its role is presumed from its position and
    /// served degraded ([`Absence::Unreachable`]) until it answers and is re-added.
    Unreachable(String),
}

/// Why a role has no trusted member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Absence {
    /// No member the config names carries this role (missing, blank or unreadable).
    Lost,
    /// Its member's record has fewer events than the newest: it missed writes.
    Stale { member: usize, events: u64 },
    /// Recorded failed by its peers.
    Failed { member: usize },
    /// Its member (presumed by position) did not answer at start: served degraded and
    /// recorded failed, re-added once it answers.
    Unreachable { member: usize },
    /// Its new member is being rebuilt, current only below `checkpoint_bytes` of the volume:
    /// written, not read, until the rebuild completes. Named only when the volume cannot
    /// start ([`AssembleError::BeyondTolerance`]); the role itself is held.
    Rebuilding {
        member: usize,
        checkpoint_bytes: u64,
    },
}

impl Absence {
    /// The position of the member held in the role while it is absent, if any.
    pub fn member(&self) -> Option<usize> {
        match self {
            Absence::Lost => None,
            Absence::Stale { member, .. }
            | Absence::Failed { member }
            | Absence::Unreachable { member }
            | Absence::Rebuilding { member, .. } => Some(*member),
        }
    }
}

/// How to start the volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assembly {
    pub array: Uuid,
    /// The recorded geometry (roles are its member indices).
    pub tree: Node,
    /// Per role: the config position of the member that serves it, or why none does.
    pub roles: Vec<Result<usize, Absence>>,
    /// The newest event counter among the members.
    pub events: u64,
    /// Every trusted member recorded a clean shutdown (no resync needed).
    pub clean: bool,
    /// Things to say loudly at start: damaged superblock copies, lost or stale members.
    pub warnings: Vec<String>,
    /// Roles whose member is being rebuilt into them (a new member: the records and its own
    /// record say so), with the bytes of the volume current on it — its checkpoint, or 0
    /// when it missed commits. They are written, not read, while the rebuild resumes online.
    /// (A returning member whose role is recorded rebuilding because it went missing is
    /// not listed: it is stale, resynced over the bitmap's regions.)
    pub rebuilding: Vec<(usize, u64)>,
    /// Roles a forced assembly ([`assemble_forced`]) took back past the volume's tolerance:
    /// served as current without a resync, so bytes written after they dropped out may be
    /// stale on them. Empty for an ordinary assembly.
    pub forced: Vec<ForcedRole>,
    /// A reshape in progress, as the newest record says it (`tree` is the old shape; the
    /// config was checked against the new one).
    pub reshape: Option<super::ReshapeRecord>,
    /// The role whose record the volume starts from ([`super::newest_record_checked`]): the
    /// open takes that role's record (read again: enabling checksums rewrites it in place)
    /// rather than choosing again among fewer members.
    pub newest_role: usize,
}

/// A role a forced assembly trusts although its member missed writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForcedRole {
    pub role: usize,
    /// The config position of the member taken back.
    pub member: usize,
    /// Its record's event counter, and the newest one: the commits it missed.
    pub events: u64,
    pub newest_events: u64,
    /// Why it was out: recorded failed by its peers, or stale.
    pub was_failed: bool,
    /// The newest record says it failed with nothing acknowledged durable since
    /// ([`super::MemberEntry::missed_nothing_acked`]): it dropped out together with the
    /// members whose loss stopped the volume and missed nothing the array promised. It comes
    /// back current, and the volume's dirty regions are resynced with it as after a crash.
    pub missed_nothing_acked: bool,
}

impl Assembly {
    /// Roles without a trusted member (served degraded).
    pub fn absent(&self) -> impl Iterator<Item = (usize, &Absence)> {
        self.roles
            .iter()
            .enumerate()
            .filter_map(|(r, m)| m.as_ref().err().map(|a| (r, a)))
    }
}

/// Decides how volume `name`, declared by `config_tree` over the config's members (leaf
/// indices are config positions), assembles from what `probes[i]` found at position `i`.
pub fn assemble(
    name: &str,
    config_tree: &Node,
    probes: &[Probe],
) -> Result<Assembly, AssembleError> {
    assemble_with(name, config_tree, probes, Start::default(), &Names(&[]))
}

/// [`assemble`], its messages naming the member at each config position by `ids` (the
/// config's member ids, as the open's [`crate::metadata::ArrayOptions::member_ids`]; a
/// position past them is "member N"): `nbraid check` and `nbraidd --check` say what the
/// start says.
pub fn assemble_named(
    name: &str,
    config_tree: &Node,
    probes: &[Probe],
    ids: &[String],
) -> Result<Assembly, AssembleError> {
    assemble_with(name, config_tree, probes, Start::default(), &Names(ids))
}

/// [`assemble_named`] for a start that keeps the write-hole log (`write_hole_log`, the
/// volume's `write_hole` option) or not: a dirty degraded start the log does not cover is
/// refused ([`AssembleError::DirtyDegradedUnlogged`]), as the start itself refuses it.
pub fn assemble_as_started(
    name: &str,
    config_tree: &Node,
    probes: &[Probe],
    ids: &[String],
    write_hole_log: bool,
) -> Result<Assembly, AssembleError> {
    let start = Start {
        write_hole_log,
        ..Start::default()
    };
    assemble_with(name, config_tree, probes, start, &Names(ids))
}

/// What the start asks of assembly.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Start {
    /// `--force-assemble`: past the tolerance take members back; a dirty degraded start
    /// is served as it is.
    pub(crate) force: bool,
    /// The start keeps the partial-parity log (`ArrayOptions::ppl`; on by default).
    pub(crate) write_hole_log: bool,
    /// The rings say the life that stopped logged its writes (`crate::ppl::last_life`; the
    /// start reads them once assembly has placed the roles, and asks again if not).
    pub(crate) last_life_logged: bool,
}

impl Default for Start {
    fn default() -> Start {
        Start {
            force: false,
            write_hole_log: true,
            last_life_logged: true,
        }
    }
}

/// [`assemble`], and where more roles are absent than the volume survives, takes back every
/// member recorded failed with nothing acknowledged since (they dropped out together: none
/// missed a write the array promised), then the freshest other members that carry this
/// array's records (failed or stale ones, the most recent event counter first) until it
/// survives — mdadm's `--assemble --force`. What it took back is in [`Assembly::forced`]:
/// the latter's bytes written after they dropped out may be stale. Members of another
/// array, blank or unreadable ones are never taken.
pub fn assemble_forced(
    name: &str,
    config_tree: &Node,
    probes: &[Probe],
) -> Result<Assembly, AssembleError> {
    let start = Start {
        force: true,
        ..Start::default()
    };
    assemble_with(name, config_tree, probes, start, &Names(&[]))
}

/// How messages name the member at each config position: its config id where the caller
/// gave one ([`crate::metadata::ArrayOptions::member_ids`]), else "member N".
pub(crate) struct Names<'a>(pub(crate) &'a [String]);

impl Names<'_> {
    pub(super) fn member(&self, i: usize) -> String {
        self.0
            .get(i)
            .map_or_else(|| format!("member {i}"), |id| format!("member {id}"))
    }

    /// Member `i`'s id (its position where none is known).
    pub(super) fn id(&self, i: usize) -> String {
        self.0.get(i).map_or_else(|| i.to_string(), String::clone)
    }
}

pub(crate) fn assemble_with(
    name: &str,
    config_tree: &Node,
    probes: &[Probe],
    start: Start,
    names: &Names,
) -> Result<Assembly, AssembleError> {
    let force = start.force;
    let volume = name.to_string();
    let Gathered {
        records,
        newest,
        mut warnings,
    } = gather(name, probes, names, force)?;
    peer_records::records_agree(&volume, &records, probes, newest, names)?;
    reshape_records::reshapes_agree(&volume, &records, probes, newest)?;
    reshape_records::reshape_moves_forward(&volume, &records, probes, newest)?;
    // Mid-reshape the config says the shape the volume is moving into (`nbraid apply`'s).
    let reshape = newest.reshape.clone();
    let config_shape = reshape.as_ref().map_or(&newest.tree, |r| &r.new_tree);
    let role_name = |role: usize| geometry::role_name(role, newest, &records, probes, names);
    geometry::check_geometry(
        &volume,
        config_tree,
        config_shape,
        newest.members.len(),
        &role_name,
    )
    .map_err(|e| placed_before_checksums(e, newest.checksums.is_none()))
    .map_err(region_grown)
    .map_err(|e| geometry::mid_reshape(e, reshape.is_some()))?;
    let (mut roles, resuming) =
        place_roles(&volume, newest, &records, probes, names, &mut warnings)?;
    presume_unreachable(
        config_tree,
        config_shape,
        probes,
        names,
        &mut roles,
        &mut warnings,
    );
    newest_failed_wins(newest, &mut roles);
    warn_apart(newest, &records, &roles, names, &mut warnings);
    let out = Out {
        tree: &newest.tree,
        new_tree: reshape.as_ref().map(|r| &r.new_tree),
        resuming: &resuming,
    };
    let (failed, forced) = out.roles_out(&volume, force, (newest, &records), &mut roles)?;
    warn_absent(&roles, &forced, names, &mut warnings);
    // Members back from a failure together hold old bytes where writes were in flight: the
    // dirty regions are resynced with them, as after a crash with every member there.
    let clean = records
        .iter()
        .flatten()
        .filter(|r| r.events == newest.events)
        .all(|r| r.clean)
        && !forced.iter().any(|f| f.missed_nothing_acked);
    let trees = (&newest.tree, reshape.as_ref().map(|r| &r.new_tree));
    let found = (&records[..], &roles[..], &failed[..]);
    torn_rows::check(&volume, (clean, start), trees, found, &role_name)?;
    Ok(Assembly {
        array: newest.array,
        tree: newest.tree.clone(),
        roles,
        events: newest.events,
        clean,
        warnings,
        rebuilding: resuming,
        forced,
        reshape,
        newest_role: newest.role as usize,
    })
}

/// The newest record's view of member states wins: a member its peers recorded failed
/// stays failed (never resynced back in), whatever its own record says.
fn newest_failed_wins(newest: &VolumeRecord, roles: &mut [Result<usize, Absence>]) {
    for (role, m) in newest.members.iter().enumerate() {
        if m.state == RecordedState::Failed {
            if let Ok(i) | Err(Absence::Stale { member: i, .. }) = roles[role] {
                roles[role] = Err(Absence::Failed { member: i });
            }
        }
    }
}

/// The records of one volume, as the members hold them.
struct Gathered<'a> {
    /// By config position.
    records: Vec<Option<&'a VolumeRecord>>,
    /// The record with the highest event counter.
    newest: &'a VolumeRecord,
    warnings: Vec<String>,
}

/// Every member's record of volume `name`; refused when a member holds none (another
/// array's, or none at all), when no member does, or when they name different arrays.
/// Under `force` (the operator's `--force-assemble`: the disk was taken by another array,
/// `nbraid add`/`create --force`) a member holding no record of it is left out, its role
/// lost, as a missing member's is: nothing is written to it.
fn gather<'a>(
    name: &str,
    probes: &'a [Probe],
    names: &Names,
    force: bool,
) -> Result<Gathered<'a>, AssembleError> {
    let volume = name.to_string();
    let mut records: Vec<Option<&VolumeRecord>> = vec![None; probes.len()];
    let mut warnings = Vec::new();
    // Members whose superblock has no record of this volume: (position, what they hold).
    let mut foreign: Vec<(usize, String)> = Vec::new();
    for (i, p) in probes.iter().enumerate() {
        match p {
            Probe::Superblock(sb, damage) => {
                if let Some(d) = damage {
                    warnings.push(format!(
                        "{}: one superblock copy is damaged ({d}); the other serves",
                        names.member(i)
                    ));
                }
                match sb.volumes.iter().find(|v| v.name == name) {
                    Some(r) => records[i] = Some(r),
                    None => foreign.push((i, holdings(sb))),
                }
            }
            Probe::Unreadable(e) => warnings.push(format!(
                "{}: superblock unreadable ({e}); treated as lost",
                names.member(i)
            )),
            Probe::Missing | Probe::Blank | Probe::Unreachable(_) => {}
        }
    }
    let held: Vec<(Uuid, &VolumeRecord)> = (records.iter().zip(probes))
        .filter_map(|(r, p)| match (r, p) {
            (Some(r), Probe::Superblock(sb, _)) => Some((sb.member, *r)),
            _ => None,
        })
        .collect();
    // Every record must name the same array: which side is this volume cannot be told.
    if let Some(sides) = arrays::sides(&records) {
        return Err(AssembleError::ArraysDisagree {
            volume,
            sides: arrays::describe(&sides, &|i| names.id(i)),
        });
    }
    let ours = held.first().map(|(_, r)| r.array);
    let Some(ours) = ours else {
        return Err(match foreign.first() {
            Some((member, theirs)) => foreign_member(&volume, *member, theirs, None, names),
            None => AssembleError::Uninitialized { volume },
        });
    };
    let newest = match super::newest_record_checked(held) {
        Ok(newest) => newest.expect("a record of this volume"),
        Err(split) => {
            let on = |r: &&VolumeRecord| r.events == split.events;
            return Err(AssembleError::RecordsSplit {
                volume,
                events: split.events,
                members: (records.iter().enumerate())
                    .filter(|(_, r)| r.as_ref().is_some_and(on))
                    .map(|(i, _)| names.member(i))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
    };
    if let Some((member, theirs)) = foreign.first() {
        let left_out = match (force, every_role_held(newest, &records)) {
            (_, true) => "every role of this volume is held by another member",
            (true, false) => "started without it, as forced",
            (false, false) => {
                return Err(foreign_member(&volume, *member, theirs, Some(ours), names));
            }
        };
        warnings.extend(foreign.iter().map(|(i, theirs)| {
            format!(
                "{} carries no record of this volume (its superblock holds {theirs}): {left_out}; \
                 nothing is written to it",
                names.member(*i)
            )
        }));
    }
    Ok(Gathered {
        records,
        newest,
        warnings,
    })
}

/// Whether every role of `newest` is held by a member whose record is as new: a disk of
/// another array among the config's members is then not this volume's missing one (a new
/// disk took its role: `nbraid add`), and is left out without the operator's `--force`.
fn every_role_held(newest: &VolumeRecord, records: &[Option<&VolumeRecord>]) -> bool {
    let current = |role: usize| {
        (records.iter().flatten()).any(|r| r.role as usize == role && r.events == newest.events)
    };
    (0..newest.members.len()).all(current)
}

/// The refusal of a member that holds no record of volume `volume` (`theirs`: what it
/// holds) among members of array `ours` (none: no member carries this volume's record).
fn foreign_member(
    volume: &str,
    member: usize,
    theirs: &str,
    ours: Option<Uuid>,
    names: &Names,
) -> AssembleError {
    AssembleError::Foreign {
        volume: volume.to_string(),
        member: names.member(member),
        ours: ours.map_or("no member carries this volume's record".into(), |a| {
            format!("its other members are array {a}'s")
        }),
        theirs: theirs.to_string(),
    }
}

/// What a superblock without this volume's record holds, for the refusal.
fn holdings(sb: &Superblock) -> String {
    let theirs: Vec<String> = sb
        .volumes
        .iter()
        .map(|v| format!("volume `{}` of array {}", v.name, v.array))
        .collect();
    if theirs.is_empty() {
        "no volume at all".into()
    } else {
        theirs.join(", ")
    }
}

/// Each record's member in its recorded role: current, or stale when it missed writes; and
/// the roles being rebuilt with the checkpoint they resume from.
/// Per role: the config position serving it, or why none does.
type Roles = Vec<Result<usize, Absence>>;

fn place_roles(
    volume: &str,
    newest: &VolumeRecord,
    records: &[Option<&VolumeRecord>],
    probes: &[Probe],
    names: &Names,
    warnings: &mut Vec<String>,
) -> Result<(Roles, Vec<(usize, u64)>), AssembleError> {
    let n = newest.members.len();
    let mut roles: Roles = vec![Err(Absence::Lost); n];
    let mut resuming = Vec::new();
    for (i, r) in records.iter().enumerate() {
        let Some(r) = r else { continue };
        let role = r.role as usize;
        // A member whose id the records no longer name in its role was replaced (or rebuilt
        // over): it holds nothing the volume needs. A replacement whose copy was under way is
        // not placed either; the open decides whether its copy goes on (`replace_resume.rs`).
        if let (Probe::Superblock(sb, _), Some(m)) = (&probes[i], newest.members.get(role)) {
            let replacing = (newest.replacements.iter())
                .any(|x| x.role as usize == role && x.member == sb.member);
            if sb.member != m.uuid && replacing {
                continue;
            }
            if sb.member != m.uuid {
                warnings.push(format!(
                    "{}: its role {role} now belongs to another member; ignored",
                    names.member(i)
                ));
                continue;
            }
        }
        let one_commit_short = super::reshape::missed_only_the_start(newest, r)
            || super::mirror_copies::missed_only_the_copies(newest, r);
        if role >= n || (r.members.len() != n && !one_commit_short) {
            return Err(AssembleError::GeometryChanged {
                volume: volume.to_string(),
                what: "member count",
                config: n.to_string(),
                recorded: r.members.len().to_string(),
            });
        }
        if let Ok(other) = roles[role] {
            return Err(AssembleError::DuplicateRole {
                volume: volume.to_string(),
                role,
                a: other,
                b: i,
            });
        }
        let stale = is_stale(newest, r);
        roles[role] = if stale {
            Err(Absence::Stale {
                member: i,
                events: r.events,
            })
        } else {
            Ok(i)
        };
        if let (
            RecordedState::Rebuilding { checkpoint_bytes },
            Some(RecordedState::Rebuilding { .. }),
        ) = (
            newest.members[role].state,
            r.members.get(role).map(|m| m.state),
        ) {
            resuming.push((role, if stale { 0 } else { checkpoint_bytes }));
        }
    }
    Ok((roles, resuming))
}

/// Whether the member holding `r` missed writes the newest record `newest` covers. One event
/// behind is a torn update of the last commit (no acknowledged write follows a commit before
/// every current member has it); a role the newest record says is being rebuilt missed
/// writes whatever its counter says — unless its own record says so too at the newest event
/// (a new member resuming its rebuild, [`place_roles`]).
fn is_stale(newest: &VolumeRecord, r: &VolumeRecord) -> bool {
    let theirs = newest.members[r.role as usize].state;
    let rebuilding = matches!(
        theirs,
        RecordedState::Rebuilding { .. } | RecordedState::Spare
    );
    // Its peers ran without it even at its own event: a commit torn on it alone, then a
    // start without it whose commit recorded it rebuilding ([`super::newest_record`]).
    let own = r.members.get(r.role as usize).map(|m| m.state);
    let left_out = rebuilding && own == Some(RecordedState::Active);
    r.events + 1 < newest.events || (rebuilding && r.events < newest.events) || left_out
}

/// A warning per member set out (recorded failed, or stale) whose own record sets out a
/// member the volume holds active ([`super::ran_apart_from`]): it may have been started on
/// its own elsewhere (split brain), and what it was written there is not the volume's (a
/// re-add rebuilds it whole, the open's resync covers what every bitmap marks); `--force`
/// would serve it as it is.
fn warn_apart(
    newest: &VolumeRecord,
    records: &[Option<&VolumeRecord>],
    roles: &[Result<usize, Absence>],
    names: &Names,
    warnings: &mut Vec<String>,
) {
    for role in roles {
        let (Err(Absence::Failed { member: i }) | Err(Absence::Stale { member: i, .. })) = *role
        else {
            continue;
        };
        let Some(peer) = records[i].and_then(|r| super::ran_apart_from(&newest.members, r)) else {
            continue;
        };
        warnings.push(format!(
            "{}: its own record has role {peer} out, which the volume holds active: it may have been started on its own elsewhere (split brain) — or it left while role {peer} was out; anything written on it since it left is not the volume's",
            names.member(i)
        ));
    }
}

/// Gives each unreachable member (its superblock unknown) the lost role at its position in
/// the tree (the config's leaf order is the records'), or the one lost role left when one
/// unreachable member is left; a wrong guess is caught when it answers (its records must
/// name the role). Unplaced ones stay out, with a warning.
fn presume_unreachable(
    config_tree: &Node,
    recorded: &Node,
    probes: &[Probe],
    names: &Names,
    roles: &mut [Result<usize, Absence>],
    warnings: &mut Vec<String>,
) {
    let mut leaves = Vec::new();
    config_tree.visit_members(&mut |m| leaves.push(m.index));
    let mut k = 0;
    let mut at_leaf = Vec::new();
    recorded.visit_members(&mut |m| {
        at_leaf.push((leaves.get(k).copied(), m.index));
        k += 1;
    });
    let unreachable: Vec<(usize, &String)> = probes
        .iter()
        .enumerate()
        .filter_map(|(i, p)| match p {
            Probe::Unreachable(e) => Some((i, e)),
            _ => None,
        })
        .collect();
    let mut unplaced = Vec::new();
    for &(i, e) in &unreachable {
        let role = at_leaf
            .iter()
            .find(|&&(p, _)| p == Some(i))
            .map(|&(_, r)| r)
            .filter(|&r| roles.get(r) == Some(&Err(Absence::Lost)));
        match role {
            Some(r) => roles[r] = Err(Absence::Unreachable { member: i }),
            None => unplaced.push((i, e)),
        }
    }
    let lost: Vec<usize> = (0..roles.len())
        .filter(|&r| roles[r] == Err(Absence::Lost))
        .collect();
    if let ([(i, _)], [r]) = (unplaced.as_slice(), lost.as_slice()) {
        roles[*r] = Err(Absence::Unreachable { member: *i });
        unplaced.clear();
    }
    for (i, e) in unplaced {
        warnings.push(format!(
            "{}: unreachable ({e}); no lost role to presume it in: left out",
            names.member(i)
        ));
    }
    for &(i, e) in &unreachable {
        if let Some(r) = roles
            .iter()
            .position(|x| *x == Err(Absence::Unreachable { member: i }))
        {
            warnings.push(format!(
                "{}: unreachable ({e}); presumed to hold role {r}: served degraded, recorded failed, re-added when it answers",
                names.member(i)
            ));
        }
    }
}

fn describe(a: &Absence, names: &Names) -> String {
    match a {
        Absence::Lost => {
            "no member carries it (missing, blank or unreadable): served degraded".into()
        }
        Absence::Stale { member, events } => {
            format!(
                "{} is stale (events {events}): not read until resynced",
                names.member(*member)
            )
        }
        Absence::Failed { member } => format!("{} is recorded failed", names.member(*member)),
        Absence::Unreachable { member } => {
            format!("{} is unreachable: served degraded", names.member(*member))
        }
        Absence::Rebuilding {
            member,
            checkpoint_bytes,
        } => format!(
            "{} is being rebuilt (current below byte {checkpoint_bytes}): not read until done",
            names.member(*member)
        ),
    }
}

/// A region the config places later than the records say, on a volume whose records have no
/// checksum area, is most likely a volume created before per-block checksums existed: the
/// config now reserves their area before each region. Say so, and the way to serve it as it is.
fn placed_before_checksums(e: AssembleError, recorded_without_checksums: bool) -> AssembleError {
    match e {
        AssembleError::GeometryChanged {
            volume,
            what: "member region",
            config,
            recorded,
        } if recorded_without_checksums && region_start(&config) > region_start(&recorded) => {
            AssembleError::PlacedWithoutChecksums {
                volume,
                config,
                recorded,
            }
        }
        e => e,
    }
}

/// A region the config asks to be larger than recorded, at the same start: a member that grew
/// and a config that asks for the growth (a pinned `size`); only `nbraid apply` grows a volume.
fn region_grown(e: AssembleError) -> AssembleError {
    match e {
        AssembleError::GeometryChanged {
            volume,
            what: "member region",
            config,
            recorded,
        } if region_start(&config) == region_start(&recorded)
            && region_len(&config) > region_len(&recorded) =>
        {
            AssembleError::RegionGrown {
                volume,
                grown_bytes: region_len(&config) - region_len(&recorded),
                config,
                recorded,
            }
        }
        e => e,
    }
}

/// The start of a region written `start+len`.
fn region_start(text: &str) -> u64 {
    text.split('+')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The length of a region written `start+len` (perhaps followed by ` for member …`).
fn region_len(text: &str) -> u64 {
    (text.split('+').nth(1))
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

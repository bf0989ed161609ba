//! Whether the volume can start with the roles it holds: the roles out (absent, or their
//! new member being rebuilt), a forced start's taking back past the tolerance, and the
//! refusal that names each role out and why. Pure, as the rest of the assembly.

use super::forced::force_roles;
use super::{describe, Absence, AssembleError, ForcedRole, Names, VolumeRecord};
use nbraid_layout::Node;

/// The shapes the roles out must leave readable (mid-reshape: the old and the new), and the
/// roles whose new member is being rebuilt.
pub(super) struct Out<'a> {
    pub(super) tree: &'a Node,
    pub(super) new_tree: Option<&'a Node>,
    /// (role, checkpoint) of each role whose new member is being rebuilt.
    pub(super) resuming: &'a [(usize, u64)],
}

impl Out<'_> {
    /// The roles out: absent ones, and those whose new member is being rebuilt — written,
    /// not read, until the rebuild completes: for what the volume can serve, out like an
    /// absent one (md does not run an array whose recovering devices leave it past its
    /// tolerance either).
    fn lost(&self, roles: &[Result<usize, Absence>]) -> Vec<usize> {
        (0..roles.len())
            .filter(|&r| roles[r].is_err() || self.rebuilt().contains(&r))
            .collect()
    }

    fn rebuilt(&self) -> Vec<usize> {
        self.resuming.iter().map(|&(r, _)| r).collect()
    }

    /// Whether every shape still reads with `failed` out.
    fn survives(&self, failed: &[usize]) -> bool {
        let out = |m: usize| failed.contains(&m);
        self.tree.survives(&out) && self.new_tree.is_none_or(|t| t.survives(&out))
    }

    /// The roles out and what a forced start (`force`) took back when the volume would not
    /// start without it; the refusal when it cannot start even so.
    pub(super) fn roles_out(
        &self,
        volume: &str,
        force: bool,
        (newest, records): (&VolumeRecord, &[Option<&VolumeRecord>]),
        roles: &mut [Result<usize, Absence>],
    ) -> Result<(Vec<usize>, Vec<ForcedRole>), AssembleError> {
        let mut forced = Vec::new();
        if force && !self.survives(&self.lost(roles)) {
            forced = force_roles(newest, records, roles, &self.rebuilt());
        }
        let failed = self.lost(roles);
        if !self.survives(&failed) {
            return Err(beyond_tolerance(
                volume.to_string(),
                roles,
                &failed,
                self.resuming,
            ));
        }
        Ok((failed, forced))
    }
}

/// The refusal of volume `volume` with the roles `failed` out (each why: its absence, or
/// its member being rebuilt, listed in `resuming`).
fn beyond_tolerance(
    volume: String,
    roles: &[Result<usize, Absence>],
    failed: &[usize],
    resuming: &[(usize, u64)],
) -> AssembleError {
    AssembleError::BeyondTolerance {
        why: (failed.iter())
            .map(|&r| match &roles[r] {
                Err(a) => (r, a.clone()),
                Ok(member) => (r, rebuilding_absence(*member, r, resuming)),
            })
            .collect(),
        volume,
        absent: (failed.iter().map(usize::to_string))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// Why role `role`, held by `member` and listed in `resuming` (role, checkpoint), is out.
fn rebuilding_absence(member: usize, role: usize, resuming: &[(usize, u64)]) -> Absence {
    let at = resuming.iter().find(|x| x.0 == role);
    Absence::Rebuilding {
        member,
        checkpoint_bytes: at.map_or(0, |x| x.1),
    }
}

/// A warning per absent role, and per role a forced assembly took back.
pub(super) fn warn_absent(
    roles: &[Result<usize, Absence>],
    forced: &[ForcedRole],
    names: &Names,
    warnings: &mut Vec<String>,
) {
    for (role, m) in roles.iter().enumerate() {
        if let Err(a) = m {
            warnings.push(format!("role {role}: {}", describe(a, names)));
        }
    }
    for f in forced.iter().filter(|f| f.missed_nothing_acked) {
        warnings.push(format!(
            "role {}: taken back by force as current ({}, recorded failed at event {} of {} together with the members the volume lost: no write was acknowledged durable after it failed, so it missed nothing the array promised); the dirty regions are resynced with it",
            f.role,
            names.member(f.member),
            f.events,
            f.newest_events
        ));
    }
    for f in forced.iter().filter(|f| !f.missed_nothing_acked) {
        warnings.push(format!(
            "role {}: FORCED back in ({}, {} at event {} of {}): served as current without a resync; bytes written after it dropped out may be stale on it",
            f.role,
            names.member(f.member),
            if f.was_failed { "recorded failed" } else { "stale" },
            f.events,
            f.newest_events
        ));
    }
}

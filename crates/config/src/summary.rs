//! What a checked config amounts to, for people (`Display`: tables) and scripts (`Serialize`).

use crate::model::{Config, MemberStorage, Volume, VolumeSize, METADATA_RESERVED};
use crate::size::format_size;
use crate::tree::any_node;
use crate::write_hole;
use nbraid_layout::{FaultTolerance, Level, Node, Region};
use serde::Serialize;
use std::fmt;

/// Everything `nbraid check` reports.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub file: String,
    pub listen: Vec<String>,
    /// Bytes at the start of each member kept for metadata.
    pub metadata_reserved_bytes: u64,
    pub members: Vec<MemberSummary>,
    pub volumes: Vec<VolumeSummary>,
    /// Volumes a start refuses (their records do not assemble: [`Summary::refusing`]); the
    /// config alone cannot tell, and scripts read it from the records' own report.
    #[serde(skip)]
    pub refused_volumes: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemberSummary {
    pub id: String,
    /// Resolved path.
    pub path: String,
    pub size_bytes: u64,
    /// Bytes given to volumes.
    pub used_bytes: u64,
    /// Bytes after the last volume's region, free for more volumes.
    pub free_bytes: u64,
    pub state: MemberStorage,
    /// A remote member's `timeout` and `connections` as configured (`null`: the default).
    pub remote: crate::remote_member::RemoteSettings,
    /// Missing, and every volume on it is new: assembly creates it (sparse). A missing member
    /// of a volume with data is not created; the volume runs degraded without it.
    pub will_create: bool,
    /// Volumes with a region on this member, in allocation order.
    pub volumes: Vec<String>,
    /// The volume this member stands by for as a spare.
    pub spare_of: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct VolumeMemberSummary {
    pub id: String,
    /// Absolute byte offset of the volume's region on the member.
    pub region_start_bytes: u64,
    pub region_len_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct VolumeSummary {
    pub name: String,
    /// `None` for a volume that declares its tree.
    pub level: Option<Level>,
    /// The tree on one line (named levels too): `mirror(raid5:64KiB(d0 d1 d2), ...)`.
    pub tree: String,
    /// Spans (raid10: mirror groups) for the levels striped over spans, else `None`.
    pub spans: Option<usize>,
    pub members: Vec<VolumeMemberSummary>,
    /// `None` for the levels without strips (jbod, raid1).
    pub strip_size_bytes: Option<u64>,
    /// `None` for the levels without parity.
    pub parity_layout: Option<String>,
    pub data_members: usize,
    pub capacity_bytes: u64,
    /// The capacity for people, e.g. `15.99 GiB`.
    pub capacity: String,
    /// `None` for the size the config asked for when it was `"all"`.
    pub requested_bytes: Option<u64>,
    pub full_stripe_width_bytes: Option<u64>,
    pub fault_tolerance: FaultTolerance,
    /// `None` for the levels without mirrors.
    pub read_policy: Option<String>,
    /// The cache mode the config gives; it applies to parity groups only (`has_parity`).
    pub cache: String,
    /// `None` for write-through.
    pub cache_size_bytes: Option<u64>,
    /// The tree has a parity group: only those have a stripe cache and a write-hole log.
    pub has_parity: bool,
    /// `write_hole_log_size`: the log's reserve before the region on every member (`None`:
    /// the log, if any, lives in the metadata area).
    pub write_hole_log_bytes: Option<u64>,
    /// Parity groups the write-hole log does not cover, each on one line (the tree's
    /// notation): groups whose children are not member regions (over mirrors, stripes or
    /// other groups), or every group with `write_hole = "off"`. Empty: every group is logged
    /// (or there is none).
    pub unlogged_parity_groups: Vec<String>,
    /// What those groups risk, in a sentence (`None`: every group is logged).
    pub write_hole_note: Option<String>,
    pub read_only: bool,
    pub block_size: u32,
    /// Ids of the members standing by as spares.
    pub spares: Vec<String>,
    /// Bytes per second an automatic rebuild runs at (0: unlimited).
    pub rebuild_rate_bytes_per_s: u64,
    /// The automatic rebuild yields to clients' I/O.
    pub rebuild_adaptive: bool,
    /// `max_read_errors`: corrected read errors (halved per hour) that fail a member; 0:
    /// none do.
    pub max_read_errors: u32,
}

impl Summary {
    pub fn of(config: &Config) -> Summary {
        let mut members: Vec<MemberSummary> = (0..config.members.len())
            .map(|i| MemberSummary::of(config, i))
            .collect();
        for v in &config.volumes {
            for (&m, r) in v.members.iter().zip(&v.regions) {
                members[m].add_region(config.members[m].size, v, r);
            }
        }
        Summary {
            file: config.file.display().to_string(),
            listen: config.listen.iter().map(|l| l.to_string()).collect(),
            metadata_reserved_bytes: METADATA_RESERVED,
            members,
            volumes: config
                .volumes
                .iter()
                .map(|v| VolumeSummary::of(config, v))
                .collect(),
            refused_volumes: Vec::new(),
        }
    }

    /// The summary of a config a start refuses `volumes` of (their records do not assemble):
    /// the members' table then says so of a member they miss, where it would otherwise say
    /// the volume runs degraded without it.
    pub fn refusing(mut self, volumes: &[String]) -> Summary {
        self.refused_volumes = volumes.to_vec();
        self
    }
}

impl MemberSummary {
    /// Member `i` of `config` before any volume's region is counted on it.
    fn of(config: &Config, i: usize) -> MemberSummary {
        let m = &config.members[i];
        MemberSummary {
            will_create: config.may_create(i),
            id: m.id.clone(),
            path: m.path.display().to_string(),
            size_bytes: m.size,
            used_bytes: 0,
            free_bytes: m.size.saturating_sub(METADATA_RESERVED),
            state: m.state,
            remote: m.remote,
            volumes: Vec::new(),
            spare_of: (config.volumes.iter())
                .find(|v| v.heal.spares.contains(&i))
                .map(|v| v.name.clone()),
        }
    }

    /// Volume `v`'s region `r` on this member (`size_bytes` long), with the reserves before
    /// and after it.
    fn add_region(&mut self, size_bytes: u64, v: &Volume, r: &Region) {
        let m = &v.metadata;
        let after = m.checksum_after_region_bytes;
        let reserves = m.ppl_log_bytes.unwrap_or(0) + m.checksum_reserve_bytes.unwrap_or(0) + after;
        self.used_bytes += r.len + reserves;
        self.free_bytes = size_bytes.saturating_sub(r.start + r.len + after);
        if r.len > 0 {
            self.volumes.push(v.name.clone());
        }
    }
}

impl VolumeSummary {
    fn of(config: &Config, v: &Volume) -> VolumeSummary {
        let ids = v.member_ids(config);
        let root = v.geometry.root();
        let unlogged = write_hole::unlogged_groups(root, v.metadata.ppl, &ids);
        let groups = write_hole::parity_groups(root);
        let write_hole_note = write_hole::note(&unlogged, groups, v.metadata.ppl);
        let shape = v.shape.as_ref();
        let striped = shape.filter(|s| !matches!(s.level, Level::Jbod | Level::Raid1));
        VolumeSummary {
            name: v.name.clone(),
            level: v.level(),
            tree: v.tree_text(config),
            spans: shape.filter(|s| s.level.has_spans()).map(|s| s.spans),
            members: (v.members.iter().zip(&v.regions))
                .map(|(&m, r)| VolumeMemberSummary {
                    id: config.members[m].id.clone(),
                    region_start_bytes: r.start,
                    region_len_bytes: r.len,
                })
                .collect(),
            strip_size_bytes: striped.map(|s| s.strip),
            parity_layout: (shape.filter(|s| s.level.parity() > 0))
                .map(|s| s.parity_layout.to_string()),
            data_members: v.geometry.data_members(),
            capacity_bytes: v.capacity(),
            capacity: format_size(v.capacity()),
            requested_bytes: match v.requested {
                VolumeSize::All => None,
                VolumeSize::Bytes(b) => Some(b),
            },
            full_stripe_width_bytes: v.geometry.full_stripe_width(),
            fault_tolerance: v.geometry.fault_tolerance(),
            read_policy: any_node(root, &|n| matches!(n, Node::Mirror(_)))
                .then(|| v.read_policy.to_string()),
            cache: v.cache.to_string(),
            cache_size_bytes: v.cache.cache_bytes(),
            has_parity: any_node(root, &|n| matches!(n, Node::Parity(_))),
            write_hole_log_bytes: v.metadata.ppl_log_bytes,
            unlogged_parity_groups: unlogged,
            write_hole_note,
            read_only: v.read_only,
            block_size: v.block_size,
            spares: (v.heal.spares.iter())
                .map(|&m| config.members[m].id.clone())
                .collect(),
            rebuild_rate_bytes_per_s: v.heal.rebuild_rate_bytes_per_s,
            rebuild_adaptive: v.heal.rebuild_adaptive,
            max_read_errors: v.metadata.max_read_errors,
        }
    }
}

/// Left-aligned columns separated by two spaces, headers first.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(&width).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                l.push_str(&format!("{c:<w$}  "));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
    out
}

impl fmt::Display for Summary {
    /// The config's file and listeners, the members' table, the volumes' table, then each
    /// volume's options on a line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "config  {}", self.file)?;
        writeln!(f, "listen  {}", self.listen.join(", "))?;
        writeln!(f)?;
        let rows: Vec<Vec<String>> = (self.members.iter())
            .map(|m| member_row(m, &self.refused_volumes))
            .collect();
        f.write_str(&table(
            &["MEMBER", "PATH", "SIZE", "USED", "FREE", "STATE", "VOLUMES"],
            &rows,
        ))?;
        writeln!(f)?;
        let rows: Vec<Vec<String>> = self.volumes.iter().map(volume_row).collect();
        f.write_str(&table(
            &[
                "VOLUME",
                "LEVEL",
                "SPANS",
                "MEMBERS",
                "STRIP",
                "DATA",
                "CAPACITY",
                "FULL STRIPE",
                "FAULT TOLERANCE",
            ],
            &rows,
        ))?;
        for v in &self.volumes {
            write!(f, "\n{}: {}", v.name, volume_options(v).join(", "))?;
            if let Some(note) = &v.write_hole_note {
                write!(f, "\n{}: {note}", v.name)?;
            }
        }
        writeln!(f)
    }
}

/// A member's row of the members' table (`refused`: the volumes a start refuses).
fn member_row(m: &MemberSummary, refused: &[String]) -> Vec<String> {
    vec![
        m.id.clone(),
        m.path.clone(),
        format_size(m.size_bytes),
        format_size(m.used_bytes),
        format_size(m.free_bytes),
        match m.state {
            MemberStorage::Missing => missing_text(m, refused),
            // Less than its records keep (or its size says): left out of its volumes.
            MemberStorage::File { len } | MemberStorage::BlockDevice { len }
                if len < m.size_bytes =>
            {
                format!("SHORT: holds {}, left out", format_size(len))
            }
            MemberStorage::File { .. } => "file".into(),
            MemberStorage::BlockDevice { .. } => "block device".into(),
            MemberStorage::Memory => "memory (lost at exit)".into(),
            MemberStorage::Remote => remote_text(&m.remote),
        },
        match &m.spare_of {
            Some(v) => format!("spare of {v}"),
            None if m.volumes.is_empty() => "-".into(),
            None => m.volumes.join(", "),
        },
    ]
}

/// What a missing member's absence means: a new one is created; a spare's absence costs no
/// redundancy, only the stand-in (`nbraid add` takes it once its device is there); a
/// volume's member is missed by its volumes — each runs degraded without it, unless a start
/// refuses the volume (`refused`: its records do not assemble, e.g. past its tolerance or
/// after a crash no log covers); one no volume uses is missed by nothing.
fn missing_text(m: &MemberSummary, refused: &[String]) -> String {
    match &m.spare_of {
        _ if m.will_create => "missing: created sparse on assembly".into(),
        Some(v) => format!(
            "MISSING: not standing by for {v} until it is there (then: nbraid add {v} {})",
            m.id
        ),
        None if m.volumes.is_empty() => "missing: no volume uses it".into(),
        None => {
            let (stopped, degraded): (Vec<&String>, Vec<&String>) =
                (m.volumes.iter()).partition(|v| refused.contains(v));
            let mut said = Vec::new();
            if !degraded.is_empty() {
                said.push(volumes_then(&degraded, "runs", "run") + " degraded without it");
            }
            if !stopped.is_empty() {
                said.push(
                    volumes_then(&stopped, "is", "are") + " refused at start (see why below)",
                );
            }
            format!("MISSING: {}", said.join("; "))
        }
    }
}

/// "volume v runs" or "volumes v, w run".
fn volumes_then(volumes: &[&String], one: &str, many: &str) -> String {
    let names: Vec<&str> = volumes.iter().map(|v| v.as_str()).collect();
    match names.as_slice() {
        [v] => format!("volume {v} {one}"),
        vs => format!("volumes {} {many}", vs.join(", ")),
    }
}

/// A volume's row of the volumes' table: its members grouped by span.
fn volume_row(v: &VolumeSummary) -> Vec<String> {
    let per_span = v.members.len() / v.spans.unwrap_or(1).max(1);
    let members: Vec<String> = v
        .members
        .chunks(per_span.max(1))
        .map(|c| {
            c.iter()
                .map(|m| m.id.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    vec![
        v.name.clone(),
        v.level.map_or("tree", Level::name).to_string(),
        v.spans.map_or("-".into(), |s| s.to_string()),
        members.join(" | "),
        v.strip_size_bytes.map_or("-".into(), format_size),
        v.data_members.to_string(),
        format!("{} ({} bytes)", v.capacity, v.capacity_bytes),
        v.full_stripe_width_bytes.map_or("-".into(), format_size),
        format!(
            "{} worst, {} best",
            v.fault_tolerance.worst, v.fault_tolerance.best
        ),
    ]
}

/// A volume's options line: tree, parity, reads, cache, log, blocks, read-only, spares.
fn volume_options(v: &VolumeSummary) -> Vec<String> {
    let mut opts = Vec::new();
    if v.level.is_none() {
        opts.push(format!("tree {}", v.tree));
    }
    if let Some(p) = &v.parity_layout {
        opts.push(format!("parity {p}"));
    }
    if let Some(r) = &v.read_policy {
        opts.push(format!("reads {r}"));
    }
    match (v.has_parity, v.cache_size_bytes) {
        (false, _) => opts.push("no stripe cache (no parity)".into()),
        (true, Some(c)) => opts.push(format!("cache {} ({})", v.cache, format_size(c))),
        (true, None) => opts.push(format!("cache {}", v.cache)),
    }
    if let Some(b) = v.write_hole_log_bytes {
        opts.push(format!("write-hole log {} per member", format_size(b)));
    }
    opts.push(format!("{}-byte blocks", v.block_size));
    if v.read_only {
        opts.push("read-only".into());
    }
    match v.max_read_errors {
        crate::volume_meta::MAX_READ_ERRORS_DEFAULT => {}
        0 => opts.push("read errors never fail a member".into()),
        n => opts.push(format!("a member fails past {n} corrected read errors")),
    }
    if !v.spares.is_empty() {
        opts.push(format!("spares {}", v.spares.join(" ")));
        opts.push(match v.rebuild_rate_bytes_per_s {
            _ if v.rebuild_adaptive => "rebuilds adaptive".into(),
            0 => "rebuilds unlimited".into(),
            r => format!("rebuilds at {}/s", format_size(r)),
        });
    }
    opts
}

/// "remote NBD export", with the connection keys the config sets.
fn remote_text(r: &crate::remote_member::RemoteSettings) -> String {
    let mut keys = Vec::new();
    if let Some(t) = r.timeout {
        keys.push(format!("timeout {}", crate::limits::format_duration(t)));
    }
    if let Some(n) = r.connections {
        keys.push(format!("up to {n} connections"));
    }
    if keys.is_empty() {
        "remote NBD export".into()
    } else {
        format!("remote NBD export ({})", keys.join(", "))
    }
}

impl Config {
    /// Facts per member and volume, for `nbraid check --json` and for printing.
    pub fn summary(&self) -> Summary {
        Summary::of(self)
    }

    /// The human summary (tables of members and volumes) that `nbraid check` and `nbraidd`
    /// print.
    pub fn explain(&self) -> String {
        self.summary().to_string()
    }

    /// [`Config::explain`] for a start that refuses `volumes` (the checks read the records:
    /// [`Summary::refusing`]).
    pub fn explain_refusing(&self, volumes: &[String]) -> String {
        self.summary().refusing(volumes).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The members' table's STATE cell of missing member `id`.
    fn missing_state(id: &str, spare_of: Option<&str>, will_create: bool) -> String {
        let volumes = match spare_of {
            Some(_) => vec![],
            None => vec!["v".into()],
        };
        missing_in(id, spare_of, will_create, volumes, &[])
    }

    /// [`missing_state`] of a member that `volumes` use.
    fn missing_in(
        id: &str,
        spare_of: Option<&str>,
        will_create: bool,
        volumes: Vec<String>,
        refused: &[String],
    ) -> String {
        let m = MemberSummary {
            id: id.into(),
            path: format!("/dev/{id}"),
            size_bytes: 8 << 20,
            used_bytes: 0,
            free_bytes: 0,
            state: MemberStorage::Missing,
            remote: Default::default(),
            will_create,
            volumes,
            spare_of: spare_of.map(Into::into),
        };
        member_row(&m, refused).swap_remove(5)
    }

    /// An absent spare leaves its volume as redundant as it was: it only stands by for
    /// nothing. Before, it was said to leave "its volumes" degraded.
    #[test]
    fn an_absent_spare_is_said_not_standing_by_and_a_member_degraded() {
        let spare = missing_state("s0", Some("v"), false);
        assert_eq!(
            spare,
            "MISSING: not standing by for v until it is there (then: nbraid add v s0)"
        );
        assert!(!spare.contains("degraded"), "{spare}");
        let member = missing_state("d0", None, false);
        assert_eq!(member, "MISSING: volume v runs degraded without it");
        let shared = missing_in("d0", None, false, vec!["v".into(), "w".into()], &[]);
        assert_eq!(shared, "MISSING: volumes v, w run degraded without it");
        // Declared, used by no volume: nothing runs degraded for it.
        let unused = missing_in("d9", None, false, vec![], &[]);
        assert_eq!(unused, "missing: no volume uses it");
        let new = missing_state("d1", None, true);
        assert_eq!(new, "missing: created sparse on assembly");
    }

    /// A volume a start refuses does not run degraded without its missing member: it does
    /// not run. Before, the table said "runs degraded" beside the records' "refused".
    #[test]
    fn a_member_of_a_refused_volume_is_not_said_to_leave_it_degraded() {
        let refused = ["v".to_string()];
        let alone = missing_in("d0", None, false, vec!["v".into()], &refused);
        assert_eq!(
            alone,
            "MISSING: volume v is refused at start (see why below)"
        );
        let both = missing_in("d0", None, false, vec!["v".into(), "w".into()], &refused);
        assert_eq!(
            both,
            "MISSING: volume w runs degraded without it; volume v is refused at start (see why below)"
        );
        let all = ["v".to_string(), "w".to_string()];
        let none_run = missing_in("d0", None, false, vec!["v".into(), "w".into()], &all);
        assert_eq!(
            none_run,
            "MISSING: volumes v, w are refused at start (see why below)"
        );
    }
}

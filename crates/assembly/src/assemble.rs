//! From a checked [`Config`] to running arrays: opens every member once through io_uring,
//! reads its superblock, and opens or creates each volume through
//! [`nbraid_core::metadata::Array`] — assembly by superblock, not by config order. Members are
//! held exclusively ([`nbraid_core::exclusive`]), so the volumes on one member share its one
//! open file (and its one superblock), and a second daemon on the same members is refused
//! with the holder named.
//!
//! Whether a volume is opened or created is [`plan::plan`]'s pure decision (`create = "auto"`
//! creates arrays only on new or blank members). A member file that is missing while its
//! peers carry superblocks is never recreated: the volume starts degraded without it (within
//! its fault tolerance), with a loud warning; so does a remote member whose server does not
//! answer (`unreachable.rs`: re-added once it answers). A dirty array is resynced before
//! anything is served (only the regions its write-intent bitmap marks).

use crate::added::{open_added, Added};
use crate::adopt::{
    adopt, holders, ids_by_role, position_ids, spares_for_assembly, unidentified_positions, Known,
};
use crate::beyond_tolerance::BeyondTolerance;
use crate::describe::describe;
use crate::member::{load, member_error, AssembleError, Opened};
use crate::plan::{self, Found, Plan};
use crate::records::this_array;
use crate::remote::{self, open_remote};
use nbraid_config::{self as config, Config, CreatePolicy, MemberStorage};
use nbraid_core::metadata::{
    Absence, Array, ArrayError, ArrayOptions, MemberMeta, OpenReport, Probe, METADATA_AREA_BYTES,
};
use nbraid_core::{
    Member, MemoryMember, PassRate, ReadOnlyMember, UringError, UringFile, VolumeOptions,
};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

// The config keeps exactly the engine's metadata area free of volume regions.
const _: () = assert!(config::METADATA_RESERVED == METADATA_AREA_BYTES);

/// A volume ready to serve, with what the config and its superblocks said about it.
pub struct Assembled {
    pub name: String,
    pub array: Arc<Array>,
    pub read_only: bool,
    pub description: String,
    /// By role (the volume's member index): the config id of the member serving it; for a
    /// role no member serves, the config member presumed to be it.
    pub members: Vec<String>,
    /// By role: the file its member was found at, or for a missing one the file it is
    /// missing from (`None`: no member can be named).
    pub paths: Vec<Option<String>>,
    /// By role: what assembly found — "new", "active", "missing", "stale" (resynced before
    /// serving), "failed" (recorded failed by its peers) or "unreachable" (a remote member
    /// whose server did not answer).
    pub at_start: Vec<&'static str>,
    /// The superblocks were written by this start.
    pub created: bool,
    pub report: OpenReport,
    /// Record the volume clean after this long without writes.
    pub clean_delay: Option<Duration>,
    /// Members and spares by config id, and what the start must say about them
    /// ([`adopt`]).
    pub known: Vec<Known>,
    pub notes: Vec<String>,
    /// The rate of rebuilds the daemon starts by itself.
    pub rebuild_rate: nbraid_core::PassRate,
}

/// How the start treats volumes beyond their tolerance.
#[derive(Clone, Debug, Default)]
pub struct StartOptions {
    /// Volumes to assemble by force ([`nbraid_core::metadata::assemble_forced`]): past
    /// their tolerance, the freshest failed or stale members are taken back.
    pub force_assemble: Vec<String>,
}

/// Opens every member and opens or creates every volume (blocking until resyncs are done).
pub fn assemble(config: &Config) -> Result<Vec<Assembled>, AssembleError> {
    assemble_with(config, &StartOptions::default())
}

/// [`assemble`] with `opts`; a volume named for a forced assembly must be in the config.
pub fn assemble_with(
    config: &Config,
    opts: &StartOptions,
) -> Result<Vec<Assembled>, AssembleError> {
    for name in &opts.force_assemble {
        if !config.volumes.iter().any(|v| &v.name == name) {
            return Err(AssembleError::Refused(format!(
                "--force-assemble {name}: the config has no volume `{name}` (volumes: {})",
                config
                    .volumes
                    .iter()
                    .map(|v| v.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    futures::executor::block_on(async {
        let mut opened = open_members(config).await?;
        let plans = plans(config, &opened, None, false);
        let mut sure = Vec::with_capacity(plans.len());
        for p in plans {
            sure.push(p?);
        }
        let plans: Vec<Option<Plan>> = sure.into_iter().map(Some).collect();
        create_members(config, &mut opened, &plans).await?;
        let mut out = Vec::with_capacity(config.volumes.len());
        for (v, plan) in config.volumes.iter().zip(plans) {
            let progress = Progress::new(&v.name);
            let report = |done, total| progress.report(done, total);
            let plan = plan.expect("planned");
            let force = opts.force_assemble.contains(&v.name);
            out.push(start_volume_with(config, v, plan, &opened, &report, force).await?);
        }
        Ok(out)
    })
}

/// Opens every member that is there (held exclusively) and reads its superblock, all at
/// once: a remote server that does not answer costs its timeout once, not once per member
/// after it. The first error in config order is returned.
pub async fn open_members(config: &Config) -> Result<Vec<Opened>, AssembleError> {
    futures::future::join_all(config.members.iter().map(|m| open_member(config, m)))
        .await
        .into_iter()
        .collect()
}

/// Every volume's [`Plan`] (or why it cannot start), by `create` from the config unless
/// `policy` overrides it (`nbraid create` is the operator's consent); `force` is `nbraid
/// create --force`: members the disk write rule refuses (data, another array's records) are
/// written over, as `nbraid add --force` does ([`take_off_forced_records`] first).
pub fn plans(
    config: &Config,
    opened: &[Opened],
    policy: Option<CreatePolicy>,
    force: bool,
) -> Vec<Result<Plan, AssembleError>> {
    config
        .volumes
        .iter()
        .map(|v| {
            let found: Vec<Found> = v
                .members
                .iter()
                .map(|&m| found(config, opened, m, &v.name, force))
                .collect();
            let policy = policy.unwrap_or(v.metadata.create);
            plan::plan_volume(config, v, policy, &found).map_err(|r| AssembleError::Refused(r.0))
        })
        .collect()
}

/// Creates the missing member files whose every volume is to be created (`plans[k]`:
/// `None` for a volume that will not start); returns their paths. A missing member that a
/// volume with data uses is never recreated; a volume to be created on it is refused.
pub async fn create_members(
    config: &Config,
    opened: &mut [Opened],
    plans: &[Option<Plan>],
) -> Result<Vec<PathBuf>, AssembleError> {
    let mut paths = Vec::new();
    let created = |k: usize| matches!(plans[k], Some(Plan::Create { .. }));
    for (i, m) in config.members.iter().enumerate() {
        if opened[i].meta.is_some() {
            continue;
        }
        let on_it: Vec<usize> = (0..config.volumes.len())
            .filter(|&k| config.volumes[k].members.contains(&i))
            .collect();
        if config.awaits_device(i) {
            continue;
        }
        if on_it.iter().all(|&k| created(k)) {
            opened[i] = create_member(m).await?;
            paths.push(m.path.clone());
        } else if let Some(&k) = on_it.iter().find(|&&k| created(k)) {
            let keeper = on_it.iter().find(|&&k| !created(k)).expect("one");
            let (v, keeper) = (&config.volumes[k].name, &config.volumes[*keeper].name);
            return Err(AssembleError::Refused(format!(
                "volume `{v}`: member {} ({}) is missing and volume `{keeper}` on it is not \
                 being created (it has data, or cannot start), so it is not recreated; `{v}` \
                 cannot be created without it — restore the file",
                m.id, m.path_text
            )));
        }
    }
    Ok(paths)
}

/// Opens member `m` if it is there and reads its superblock.
async fn open_member(config: &Config, m: &config::Member) -> Result<Opened, AssembleError> {
    if let Some(why) = crate::member::short_text(m) {
        return Ok(crate::member::open_short(m, why));
    }
    let member: Arc<dyn Member> = match m.state {
        MemberStorage::Memory => Arc::new(MemoryMember::new(&m.id, m.size)),
        MemberStorage::Remote => match open_remote(config, m).await {
            Ok(member) => Arc::new(member),
            Err(e) => return remote::at_start(config, m, e),
        },
        MemberStorage::Missing => return Ok(Opened::missing()),
        // Every volume on it writes nothing: opened O_RDONLY, so a device with its ro flag
        // set or a file the process cannot write opens, and no write can reach it.
        _ if read_only_member(config, m) => Arc::new(
            UringFile::open_read_only(&m.path, Some(m.size))
                .map_err(|source| member_error(m, source))?,
        ),
        _ => Arc::new(
            UringFile::open_or_create(&m.path, m.size).map_err(|source| member_error(m, source))?,
        ),
    };
    // A remote (or memory) member of read-only volumes: its writes are refused here, as a
    // file's are by its O_RDONLY descriptor.
    let member: Arc<dyn Member> = match read_only_member(config, m) {
        true => Arc::new(ReadOnlyMember(member)),
        false => member,
    };
    load(member).await
}

/// Whether member `m` is used by volumes and every one of them is `read_only` (a member
/// shared with a read-write volume is opened read-write: that volume writes its records).
pub fn read_only_member(config: &Config, m: &config::Member) -> bool {
    let Some(i) = config.members.iter().position(|x| x.id == m.id) else {
        return false;
    };
    let mut on_it = (config.volumes.iter())
        .filter(|v| v.members.contains(&i) || v.heal.spares.contains(&i))
        .peekable();
    on_it.peek().is_some() && on_it.all(|v| v.read_only)
}

/// Creates member `m`'s file, sparse (all zeroes), and its directory.
async fn create_member(m: &config::Member) -> Result<Opened, AssembleError> {
    if let Some(dir) = m.path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            member_error(
                m,
                UringError::Open {
                    path: dir.to_path_buf(),
                    source: e,
                },
            )
        })?;
    }
    let file = UringFile::open_or_create(&m.path, m.size).map_err(|e| member_error(m, e))?;
    let mut opened = load(Arc::new(file)).await?;
    opened.created = true;
    Ok(opened)
}

/// `nbraid create --force` of volume `v`: takes the records of other arrays off its members
/// (said on stderr per member), so those arrays find their members gone instead of
/// assembling over this volume's bytes — as `nbraid add --force` does.
pub async fn take_off_forced_records(
    config: &Config,
    opened: &[Opened],
    v: &config::Volume,
) -> Result<Vec<String>, AssembleError> {
    let mut said = Vec::new();
    for &m in &v.members {
        let Some(meta) = opened[m].meta.as_ref().filter(|_| !opened[m].created) else {
            continue;
        };
        let gone = plan::forced_records(config, m, meta.probe(), &meta.contents());
        if gone.is_empty() {
            continue;
        }
        let member = &config.members[m];
        meta.take_off_records(&gone).await.map_err(|e| {
            AssembleError::Refused(format!(
                "volume `{}`: member {} ({}): cannot take the other array's records off: {e}",
                v.name, member.id, member.path_text
            ))
        })?;
        let arrays: Vec<String> = gone.iter().map(|u| u.to_string()).collect();
        said.push(format!(
            "volume {}: member {} ({}): records of array {} taken off as forced",
            v.name,
            member.id,
            member.path_text,
            arrays.join(", ")
        ));
    }
    Ok(said)
}

/// What member `m` holds, as volume `name`'s plan sees it (`force`: `nbraid create --force`).
fn found(config: &Config, opened: &[Opened], m: usize, name: &str, force: bool) -> Found {
    let Some(meta) = &opened[m].meta else {
        return Found::Missing;
    };
    if opened[m].created {
        // Created by this start: zeroes, as it was found.
        return Found::Missing;
    }
    if config.members[m].state == MemberStorage::Memory {
        return Found::Memory;
    }
    plan::found_on(config, m, name, meta.probe(), &meta.contents(), force)
}

/// Opens or creates volume `v` over its members (`progress(done, total)` bytes of a sync).
pub async fn start_volume(
    config: &Config,
    v: &config::Volume,
    plan: Plan,
    opened: &[Opened],
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<Assembled, AssembleError> {
    start_volume_with(config, v, plan, opened, progress, false).await
}

/// [`start_volume`]; with `force`, a volume past its tolerance is assembled by force.
///
/// The stages, in order: the members added at run time are opened (an opened volume's
/// records list them), the array is opened by its superblocks or created, the roles are
/// named, spares are adopted, and everything the operator must hear is logged.
pub async fn start_volume_with(
    config: &Config,
    v: &config::Volume,
    plan: Plan,
    opened: &[Opened],
    progress: &(dyn Fn(u64, u64) + Sync),
    force: bool,
) -> Result<Assembled, AssembleError> {
    let start = VolumeStart {
        config,
        v,
        opened,
        force,
    };
    let (added, tree, grown) = start.starting_point(plan).await;
    let (array, report, created) = start.open_or_create(plan, &tree, &added, progress).await?;
    // report.warnings: logged once by the engine as it found them.
    if resynced_before_serving(created, &report) {
        tracing::warn!(volume = %v.name, resynced_bytes = report.resynced_bytes, "the array was not shut down cleanly: resynced before serving");
    }
    let roles = start.role_names(&added, &report, created);
    if let Some(msg) = degraded_warning(&v.name, &roles.members, &roles.at_start) {
        tracing::warn!("{msg}");
    }
    let (mut notes, known) = adopt(&array, config, v, (opened, &added), &report).await;
    notes.extend(grown);
    notes.extend(short_notes(config, v));
    notes.extend(forced_notes(&report, &roles.members));
    start.log_notes(&notes, created);
    Ok(Assembled {
        name: v.name.clone(),
        array: Arc::new(array),
        read_only: v.read_only,
        description: describe(config, v),
        members: roles.members,
        paths: roles.paths,
        at_start: roles.at_start,
        created,
        report,
        clean_delay: v.metadata.clean_delay,
        known,
        notes,
        rebuild_rate: PassRate {
            limit_bytes_per_s: v.heal.rebuild_rate_bytes_per_s,
            adaptive: v.heal.rebuild_adaptive,
        },
    })
}

/// An opened array that was not shut down cleanly and was resynced before serving (not in
/// the background). A create's sync is not a recovery: only an opened array can have been
/// left dirty. Pure.
fn resynced_before_serving(created: bool, report: &OpenReport) -> bool {
    !created && !report.was_clean && report.background_bytes == 0
}

/// By role, the names [`Assembled`] gives: the config member serving it, the file it was
/// found at or is missing from, and what assembly found.
struct RoleNames {
    members: Vec<String>,
    paths: Vec<Option<String>>,
    at_start: Vec<&'static str>,
}

/// By position (the volume's members, its spares, then the members added at run time):
/// the file each is at.
fn position_paths(config: &Config, v: &config::Volume, added_paths: &[String]) -> Vec<String> {
    let config_path = |&m: &usize| config.members[m].path.to_string_lossy().into_owned();
    (v.members.iter().chain(&v.heal.spares))
        .map(config_path)
        .chain(added_paths.iter().cloned())
        .collect()
}

/// By role: the file of the position holding it (`holders`; `None`: no position can be
/// named). Pure.
fn paths_by_role(paths: &[String], holders: &[Option<usize>]) -> Vec<Option<String>> {
    (holders.iter())
        .map(|h| paths.get((*h)?).cloned())
        .collect()
}

/// The engine's options for volume `v`'s array (`member_ids`: by position, for its
/// messages; `force`: assembled by force past its tolerance). The daemon opens a volume
/// again with them when an online reshape starts and ends.
pub fn array_options(v: &config::Volume, member_ids: Vec<String>, force: bool) -> ArrayOptions {
    ArrayOptions {
        volume: volume_options(v),
        bitmap_chunk_bytes: v.metadata.bitmap_chunk_bytes,
        ppl: v.metadata.ppl,
        // A region is recorded clean after the same quiet time as the whole volume.
        bitmap_clear_delay: v
            .metadata
            .clean_delay
            .unwrap_or(nbraid_core::metadata::intent::DEFAULT_CLEAR_DELAY),
        ppl_area_before_region_bytes: v.metadata.ppl_log_bytes,
        checksum_area_before_region_bytes: v.metadata.checksum_reserve_bytes,
        checksum_errors_to_fail: Some(v.metadata.checksum_error_limit),
        enable_checksums: v.metadata.checksums_enable,
        force_assembly: force,
        member_ids,
        // A start from the config follows whatever stop came before.
        quiet_handover: false,
    }
}

/// One volume's start: what it is started from.
struct VolumeStart<'a> {
    config: &'a Config,
    v: &'a config::Volume,
    opened: &'a [Opened],
    /// Assembled by force past its tolerance (`nbraidd --force-assemble`).
    force: bool,
}

impl VolumeStart<'_> {
    /// The volume's member ids by position, for the engine's messages.
    fn member_ids(&self) -> Vec<String> {
        let ids = self.v.members.iter();
        ids.map(|&m| self.config.members[m].id.clone()).collect()
    }

    /// The engine's options for the array.
    fn array_options(&self) -> ArrayOptions {
        array_options(self.v, self.member_ids(), self.force)
    }

    /// What the array starts from: the members added at run time (an opened volume's
    /// records list them), the tree its records last grew it to, and notes on that growth.
    /// A created array starts from the config's tree alone.
    async fn starting_point(&self, plan: Plan) -> (Vec<Added>, nbraid_layout::Node, Vec<String>) {
        let (config, v) = (self.config, self.v);
        match plan {
            Plan::Open => {
                let added = open_added(config, v, self.opened).await;
                let (tree, grown) = crate::grown::start_tree(config, v, &self.probes());
                (added, tree, grown)
            }
            Plan::Create { .. } => (Vec::new(), v.geometry.root().clone(), Vec::new()),
        }
    }

    /// By role: who holds it (config member ids; spares that took a role by their own id),
    /// the file each holder was found at or is missing from, and what assembly found.
    fn role_names(&self, added: &[Added], report: &OpenReport, created: bool) -> RoleNames {
        let (config, v) = (self.config, self.v);
        let added_paths: Vec<String> = added.iter().map(|a| a.path.clone()).collect();
        let (n, configured) = (v.members.len(), v.members.len() + v.heal.spares.len());
        let unidentified = unidentified_positions(v, self.opened, added);
        let holders = holders(&report.roles, (n, configured), &unidentified);
        RoleNames {
            members: ids_by_role(&position_ids(config, v, &added_paths), &holders),
            paths: paths_by_role(&position_paths(config, v, &added_paths), &holders),
            at_start: role_states(&report.roles, created),
        }
    }

    /// Logs the start's `notes`, and for an opened volume the settings the config writes
    /// otherwise than the records keep (the config is loaded pinned to them): the records'
    /// are served; said at every start until the config agrees.
    fn log_notes(&self, notes: &[String], created: bool) {
        let v = self.v;
        for n in notes {
            tracing::warn!(volume = %v.name, "{n}");
        }
        if !created {
            for c in crate::settings::fixed_at_create(v) {
                tracing::warn!(volume = %v.name, "setting: {}", c.text());
            }
        }
    }

    /// The volume's members by position, as the engine's messages number them:
    /// `0 = d0 (d0.img), 1 = d1 (d1.img)`.
    fn legend(&self) -> String {
        (self.v.members.iter().enumerate())
            .map(|(i, &m)| {
                let m = &self.config.members[m];
                format!("{i} = {} ({})", m.id, m.path_text)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The members whose servers did not answer, each with why, after the words that say
    /// they were not used; empty when every member answered.
    fn unreachable(&self) -> String {
        let found = (self.v.members.iter())
            .filter_map(|&m| Some((m, self.opened[m].meta.as_ref()?.probe())));
        crate::beyond_tolerance::not_used(self.config, found)
    }

    /// What the volume's members, then its spares, were found to hold.
    fn probes(&self) -> Vec<Probe> {
        (self.v.members.iter().chain(&self.v.heal.spares))
            .map(|&m| {
                self.opened[m]
                    .meta()
                    .map_or(Probe::Missing, |x| x.probe().clone())
            })
            .collect()
    }

    /// Creates the array over `tree` or opens it by its superblocks (the members, then the
    /// spares, then the members added at run time); returns it, the engine's report and
    /// whether it was created.
    async fn open_or_create(
        &self,
        plan: Plan,
        tree: &nbraid_layout::Node,
        added: &[Added],
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(Array, OpenReport, bool), AssembleError> {
        let (v, opened) = (self.v, self.opened);
        let metas: Vec<Option<Arc<MemberMeta>>> =
            v.members.iter().map(|&m| opened[m].meta.clone()).collect();
        let (opts, tree) = (self.array_options(), tree.clone());
        match plan {
            Plan::Create { assume_clean } => {
                let metas = metas.into_iter().map(|m| m.expect("created")).collect();
                if !assume_clean {
                    tracing::info!(volume = %v.name, "creating the array: syncing copies and parity from the members' data");
                }
                let (a, r) = Array::create(&v.name, tree, metas, opts, assume_clean, progress)
                    .await
                    .map_err(|e| self.array_error(e))?;
                tracing::info!(volume = %v.name, array = %a.id(), "created the array (superblocks written)");
                Ok((a, r, true))
            }
            Plan::Open => {
                // Spares that took a role are found by their superblocks, after the members;
                // so are the members added at run time that the records list (`added.rs`).
                // By array id: a file later used by another array's volume of the same name
                // is not this volume's.
                let this = this_array(
                    v.members
                        .iter()
                        .chain(&v.heal.spares)
                        .filter_map(|&m| Some(opened[m].meta()?.probe())),
                    &v.name,
                );
                let metas = metas
                    .into_iter()
                    .chain(spares_for_assembly(v, opened, this))
                    .chain(added.iter().map(|a| a.for_assembly(&v.name, this)))
                    .collect();
                // Resync in the background while serving (some volumes before serving —
                // without the log, with a stale or rebuilding member, mixed trees:
                // `core::metadata::resync`).
                let opened = if v.read_only {
                    // Writes nothing: no records, no resync (`core::metadata::read_only`).
                    Array::open_read_only(&v.name, &tree, metas, opts).await
                } else {
                    Array::open_background(&v.name, &tree, metas, opts, progress).await
                };
                let (a, r) = opened.map_err(|e| self.array_error(e))?;
                tracing::info!(volume = %v.name, array = %a.id(), was_clean = r.was_clean, resynced_bytes = r.resynced_bytes, "assembled by superblock");
                Ok((a, r, false))
            }
        }
    }

    /// The engine's refusal in the config's words: beyond tolerance, the members by id and
    /// what can bring the volume back; else the members by position.
    fn array_error(&self, source: ArrayError) -> AssembleError {
        let (config, v, opened) = (self.config, self.v, self.opened);
        let ArrayError::Assemble(nbraid_core::metadata::AssembleError::BeyondTolerance {
            why, ..
        }) = source
        else {
            let changed = matches!(
                source,
                ArrayError::Assemble(nbraid_core::metadata::AssembleError::GeometryChanged { .. })
            );
            let shrunk = changed
                .then(|| crate::pins::shrunk_members(config, v, &self.probes()))
                .flatten();
            if let Some(shrunk) = shrunk {
                return AssembleError::Refused(format!("volume `{}`: {shrunk} ({source})", v.name));
            }
            return AssembleError::Array {
                name: v.name.clone(),
                legend: self.legend(),
                source: Box::new(source),
            };
        };
        // Name the config's members that carry no record of the volume.
        let gone: Vec<&str> = v
            .members
            .iter()
            .filter(|&&m| found(config, opened, m, &v.name, false) != Found::HasThis)
            // A short member carries its record; it is left out (`unreachable` says why).
            .filter(|&&m| config.members[m].short_len_bytes().is_none())
            .map(|&m| config.members[m].id.as_str())
            .collect();
        let unreachable = self.unreachable();
        // By position: the members, then the spares (one may be rebuilding a role).
        let ids: Vec<&str> = (v.members.iter().chain(&v.heal.spares))
            .map(|&m| config.members[m].id.as_str())
            .collect();
        AssembleError::Refused(
            BeyondTolerance {
                name: &v.name,
                kind: v.kind_name(),
                worst: v.geometry.fault_tolerance().worst,
                why: &why,
                no_record: &gone,
                unreachable: &unreachable,
                ids: &ids,
                forced: self.force,
            }
            .text(),
        )
    }
}

/// By role, what assembly found ([`Assembled::at_start`]).
fn role_states(roles: &[Result<usize, Absence>], created: bool) -> Vec<&'static str> {
    roles
        .iter()
        .map(|r| match r {
            Ok(_) if created => "new",
            Ok(_) => "active",
            Err(Absence::Stale { .. }) => "stale",
            Err(Absence::Failed { .. }) => "failed",
            Err(Absence::Lost) => "missing",
            Err(Absence::Unreachable { .. }) => "unreachable",
            Err(Absence::Rebuilding { .. }) => "rebuilding",
        })
        .collect()
}

/// The loud warning for a volume serving without some of its members (`None`: it has them
/// all); `members` and `at_start` by role.
fn degraded_warning(volume: &str, members: &[String], at_start: &[&str]) -> Option<String> {
    let lost: Vec<&str> = members
        .iter()
        .zip(at_start)
        .filter(|(_, s)| matches!(**s, "missing" | "failed" | "unreachable"))
        .map(|(m, _)| m.as_str())
        .collect();
    (!lost.is_empty()).then(|| {
        format!(
            "volume {volume}: serving DEGRADED: members {} missing, unreachable or failed (never recreated blank); restore or replace them",
            lost.join(", ")
        )
    })
}

/// Why volume `v`'s short members and spares are left out (`member::short_text`), one
/// note each: status says it beside the failed role.
fn short_notes(config: &Config, v: &config::Volume) -> Vec<String> {
    (v.members.iter().chain(&v.heal.spares))
        .filter_map(|&m| crate::member::short_text(&config.members[m]))
        .collect()
}

/// What a forced assembly took back, one note per member (`members`: ids by role).
fn forced_notes(report: &OpenReport, members: &[String]) -> Vec<String> {
    (report.forced.iter())
        .map(|f| {
            let id = members.get(f.role).map_or("?", String::as_str);
            forced_note(f, id, report.background_bytes > 0)
        })
        .collect()
}

/// Which member came back (`id`), and why: one that failed with nothing acknowledged since
/// is current, one that missed acknowledged writes may be stale. `in_background`: the
/// volume's resync goes on while it serves (else it was done before serving).
fn forced_note(f: &nbraid_core::metadata::ForcedRole, id: &str, in_background: bool) -> String {
    if f.missed_nothing_acked {
        let resync = match in_background {
            true => "are being resynced with it in the background (status shows how far)",
            false => "were resynced with it before serving",
        };
        return format!(
            "assembled by force: {id} took role {} back as current (recorded failed at event {} \
             of {}, and no write was acknowledged durable after it failed: it dropped out \
             together with the members the volume lost and missed nothing acknowledged); the \
             volume's dirty regions {resync}, as after a crash",
            f.role, f.events, f.newest_events
        );
    }
    format!(
        "assembled by force: {id} took role {} back ({} at event {} of {}); bytes written \
         after it dropped out may be stale on it — check the data (fsck) before trusting it",
        f.role,
        if f.was_failed {
            "recorded failed"
        } else {
            "stale"
        },
        f.events,
        f.newest_events
    )
}

/// Logs a sync's progress every 10%.
struct Progress<'a> {
    volume: &'a str,
    next_pct: AtomicU64,
}

impl<'a> Progress<'a> {
    fn new(volume: &'a str) -> Self {
        Progress {
            volume,
            next_pct: AtomicU64::new(10),
        }
    }

    fn report(&self, done: u64, total: u64) {
        let pct = done.saturating_mul(100) / total.max(1);
        let next = self.next_pct.load(Ordering::Relaxed);
        if pct >= next {
            self.next_pct.store(pct / 10 * 10 + 10, Ordering::Relaxed);
            tracing::info!(volume = %self.volume, "sync {pct}% ({done} of {total} bytes)");
        }
    }
}

/// The engine's options for a config volume.
pub fn volume_options(v: &config::Volume) -> VolumeOptions {
    VolumeOptions {
        block_size: u64::from(v.block_size),
        read_policy: v.read_policy,
        cache: v.cache,
        max_read_errors: v.metadata.max_read_errors,
        ..VolumeOptions::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_named_by_what_assembly_found_and_the_lost_ones_warned_about() {
        let roles = vec![
            Ok(0),
            Err(Absence::Failed { member: 1 }),
            Err(Absence::Lost),
            Err(Absence::Stale {
                member: 3,
                events: 7,
            }),
        ];
        let states = role_states(&roles, false);
        assert_eq!(states, ["active", "failed", "missing", "stale"]);
        assert_eq!(role_states(&roles[..1], true), ["new"]);
        let ids: Vec<String> = ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
        let msg = degraded_warning("v", &ids, &states).expect("degraded");
        assert!(
            msg.starts_with("volume v: serving DEGRADED: members b, c missing"),
            "{msg}"
        );
        assert_eq!(degraded_warning("v", &ids, &["active", "stale"]), None);
    }

    #[test]
    fn only_an_opened_dirty_array_resynced_in_the_foreground_is_said_to_be() {
        let dirty = OpenReport::default();
        assert!(resynced_before_serving(false, &dirty));
        // A create's sync is not a recovery.
        assert!(!resynced_before_serving(true, &dirty));
        let clean = OpenReport {
            was_clean: true,
            ..OpenReport::default()
        };
        assert!(!resynced_before_serving(false, &clean));
        // Resyncing while serving: not before.
        let background = OpenReport {
            background_bytes: 1 << 20,
            ..OpenReport::default()
        };
        assert!(!resynced_before_serving(false, &background));
    }

    #[test]
    fn a_role_is_named_by_the_file_of_the_position_holding_it() {
        // Positions: two members, a spare, a member added at run time.
        let paths: Vec<String> = ["/d0", "/d1", "/s0", "/added"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let holders = [Some(0), Some(2), None, Some(3), Some(9)];
        assert_eq!(
            paths_by_role(&paths, &holders),
            [
                Some("/d0".to_string()),
                Some("/s0".to_string()),
                None,
                Some("/added".to_string()),
                None
            ]
        );
    }

    #[test]
    fn a_forced_note_says_which_member_came_back_current_and_why() {
        let mut f = nbraid_core::metadata::ForcedRole {
            role: 2,
            member: 2,
            events: 6,
            newest_events: 8,
            was_failed: true,
            missed_nothing_acked: true,
        };
        let note = forced_note(&f, "d2", false);
        for part in [
            "d2 took role 2 back as current",
            "no write was acknowledged durable after it failed",
            "dirty regions were resynced with it before serving",
        ] {
            assert!(note.contains(part), "{note}");
        }
        assert!(!note.contains("stale"), "{note}");
        // A resync still going on is not said to be done.
        let note = forced_note(&f, "d2", true);
        assert!(
            note.contains("dirty regions are being resynced with it in the background"),
            "{note}"
        );
        f.missed_nothing_acked = false;
        let note = forced_note(&f, "d2", true);
        assert!(
            note.contains("d2 took role 2 back (recorded failed"),
            "{note}"
        );
        assert!(note.contains("may be stale"), "{note}");
    }
}

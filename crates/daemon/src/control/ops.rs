//! What the control requests do to the daemon's volumes.

use super::proto::{ok_reply, Refusal, Request};
use crate::heal::Known;
use nbraid_core::metadata::disk_rule::{may_write, Allowed, Consent, Writer};
use nbraid_core::metadata::{Array, MemberMeta};
use nbraid_core::{
    Member, MemberState, PassControl, PassRate, PassState, ScrubControl, ScrubReport, ScrubState,
    UringFile,
};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;

/// One served volume as the control socket sees it.
pub struct ControlVolume {
    pub name: String,
    /// The level's name (`raid6`).
    pub level: String,
    pub array: Arc<Array>,
    /// Config member ids, by the volume's member index (its role in the superblocks).
    pub members: Vec<String>,
    /// By member index: what assembly found in the superblocks ("new", "active", "missing",
    /// "stale", "failed", "unreachable").
    pub at_start: Vec<&'static str>,
    /// What the start did: created the array, found it clean, bytes resynced before serving.
    pub start: StartReport,
    /// The latest scrub (running or finished).
    scrub: Mutex<Option<Arc<ScrubControl>>>,
    /// The latest rebuild (running or finished), and whether its task has returned (the
    /// pass says done before the rebuilt members are committed current).
    rebuild: Mutex<Option<(Arc<PassControl>, Arc<AtomicBool>)>>,
    /// The rate of rebuilds (and background resyncs) the daemon starts by itself; a reload
    /// (SIGHUP) may change it.
    rebuild_rate: Mutex<PassRate>,
    /// The background resync after an unclean start, if there was one.
    pub resync: Mutex<Option<Arc<PassControl>>>,
    /// The latest resync of re-added members (`returning.rs`), running or finished.
    pub readd: Mutex<Option<Arc<PassControl>>>,
    /// Every member and spare known by id (config ids; paths for those added at run time).
    known: Mutex<Vec<Known>>,
    /// What the start found that the operator must hear (spares holding roles, old members
    /// ignored, spares that cannot be used).
    pub notes: Vec<String>,
    /// `nbraid pause` holds the volume's background work until `nbraid resume` — passes
    /// that start later too (md's `frozen`), so every pass is made by [`Self::new_pass`].
    held: AtomicBool,
}

impl ControlVolume {
    pub fn new(
        name: String,
        level: String,
        array: Arc<Array>,
        members: Vec<String>,
        at_start: Vec<&'static str>,
        start: StartReport,
    ) -> Self {
        ControlVolume {
            name,
            level,
            array,
            members,
            at_start,
            start,
            scrub: Mutex::new(None),
            rebuild: Mutex::new(None),
            rebuild_rate: Mutex::new(PassRate::default()),
            resync: Mutex::new(None),
            readd: Mutex::new(None),
            known: Mutex::new(Vec::new()),
            notes: Vec::new(),
            held: AtomicBool::new(false),
        }
    }

    /// The rate of rebuilds (and background resyncs) the daemon starts by itself.
    pub fn rebuild_rate(&self) -> PassRate {
        *self.rebuild_rate.lock()
    }

    /// Sets [`Self::rebuild_rate`] (a reload); passes running keep theirs.
    pub fn set_rebuild_rate(&self, rate: PassRate) {
        *self.rebuild_rate.lock() = rate;
    }

    /// Whether `nbraid pause` holds this volume's background work.
    pub fn is_held(&self) -> bool {
        self.held.load(SeqCst)
    }

    /// A control for a new background pass at `rate`: paused from its start while the
    /// volume is held.
    pub fn new_pass(&self, rate: PassRate) -> Arc<PassControl> {
        let c = Arc::new(PassControl::with_rate(rate));
        if self.is_held() {
            c.pause();
        }
        c
    }

    /// A control for a new scrub: paused from its start while the volume is held.
    pub fn new_scrub(&self, repair: bool, rate: PassRate) -> Arc<ScrubControl> {
        let c = Arc::new(ScrubControl::new(repair, 0));
        c.pass.set_pass_rate(rate);
        if self.is_held() {
            c.pause();
        }
        c
    }

    /// With the spares' side: the automatic rebuild's rate, the members and spares known by
    /// id, what the start must say.
    pub fn with_heal(mut self, rate: PassRate, known: Vec<Known>, notes: Vec<String>) -> Self {
        self.rebuild_rate = Mutex::new(rate);
        self.known = Mutex::new(known);
        self.notes = notes;
        self
    }

    /// The id of whatever serves each role now (a spare that took a role goes by its own
    /// id); roles with no known member keep the id they had at start.
    pub fn member_ids(&self) -> Vec<String> {
        let known = self.known.lock();
        let vol = self.array.volume();
        (0..vol.member_count())
            .map(|r| {
                let m = vol.member(r);
                known
                    .iter()
                    .find(|k| Arc::ptr_eq(&k.member, &m))
                    .map_or_else(|| self.members[r].clone(), |k| k.id.clone())
            })
            .collect()
    }

    /// The id of a member or spare (its path when unknown).
    fn id_of(&self, member: &Arc<dyn Member>) -> String {
        let known = self.known.lock();
        known
            .iter()
            .find(|k| Arc::ptr_eq(&k.member, member))
            .map_or_else(|| member.name().to_string(), |k| k.id.clone())
    }

    /// Remembers a member added at run time by its id ([`Controls::added_id`]).
    fn learn(&self, id: &str, member: &Arc<dyn Member>) {
        let mut known = self.known.lock();
        if known.iter().any(|k| Arc::ptr_eq(&k.member, member)) {
            return; // one it let go and took back keeps its id
        }
        known.push(Known {
            id: id.to_string(),
            member: member.clone(),
        });
    }

    fn rebuild(&self) -> Option<Arc<PassControl>> {
        self.rebuild.lock().as_ref().map(|(c, _)| c.clone())
    }

    /// A rebuild task is running (its pass may already report done).
    fn rebuild_running(&self) -> bool {
        let slot = self.rebuild.lock();
        slot.as_ref()
            .is_some_and(|(_, finished)| !finished.load(SeqCst))
    }

    /// The latest rebuild's state; `running` until its task returned.
    fn rebuild_state(&self) -> Option<PassState> {
        let slot = self.rebuild.lock();
        let (c, finished) = slot.as_ref()?;
        Some(match c.state() {
            PassState::Done | PassState::Cancelled if !finished.load(SeqCst) => PassState::Running,
            s => s,
        })
    }

    /// The member index `member` names (a config id, or an index).
    fn member_index(&self, member: &str) -> Result<usize, Refusal> {
        let ids = self.member_ids();
        ids.iter()
            .position(|m| *m == member)
            .or_else(|| member.parse::<usize>().ok().filter(|&i| i < ids.len()))
            .ok_or_else(|| {
                Refusal::new(
                    "not-found",
                    format!(
                        "volume \"{}\" has no member \"{member}\" (members: {})",
                        self.name,
                        ids.join(", ")
                    ),
                )
            })
    }

    /// Starts the rebuild task unless one runs (then only its rate changes).
    fn start_rebuild(&self, rate: PassRate) -> Arc<PassControl> {
        self.rebuild_task(rate, true)
    }

    /// Starts the rebuild task unless one runs (which is left as it is).
    pub fn ensure_rebuild(&self, rate: PassRate) -> Arc<PassControl> {
        self.rebuild_task(rate, false)
    }

    fn rebuild_task(&self, rate: PassRate, set_rate: bool) -> Arc<PassControl> {
        let mut slot = self.rebuild.lock();
        if let Some((c, finished)) = slot.as_ref() {
            if !finished.load(SeqCst) {
                if set_rate {
                    c.set_pass_rate(rate);
                }
                return c.clone();
            }
        }
        let ctl = self.new_pass(rate);
        let finished = Arc::new(AtomicBool::new(false));
        *slot = Some((ctl.clone(), finished.clone()));
        let (array, task_ctl, name) = (self.array.clone(), ctl.clone(), self.name.clone());
        tokio::spawn(async move {
            let r = array.rebuild(&task_ctl).await;
            finished.store(true, SeqCst);
            match r {
                Ok(r) => tracing::info!(
                    "rebuild of {name} {}: roles {:?} current",
                    r.state.name(),
                    r.completed
                ),
                Err(e) => tracing::error!("rebuild of {name} failed: {e}"),
            }
        });
        ctl
    }

    fn scrub(&self) -> Option<Arc<ScrubControl>> {
        self.scrub.lock().clone()
    }

    /// The latest scrub, for the service's observer (`service::observe`).
    pub fn scrub_pass(&self) -> Option<Arc<ScrubControl>> {
        self.scrub()
    }

    /// The latest rebuild and its state (`running` until its task returned), for the
    /// service's observer.
    pub fn rebuild_pass(&self) -> Option<(Arc<PassControl>, PassState)> {
        Some((self.rebuild()?, self.rebuild_state()?))
    }

    /// Scrubs the volume under `ctl` (from its position: a resumed scrub starts at its
    /// checkpoint), recording its progress in the superblocks; refused while one runs.
    pub fn start_scrub(&self, ctl: Arc<ScrubControl>) -> Result<(), Refusal> {
        let mut slot = self.scrub.lock();
        if let Some(c) = slot.as_ref() {
            if matches!(c.state(), ScrubState::Running | ScrubState::Paused) {
                return Err(Refusal::new(
                    "busy",
                    format!(
                        "volume \"{}\" is already being scrubbed (cancel it first)",
                        self.name
                    ),
                ));
            }
        }
        *slot = Some(ctl.clone());
        let (array, name) = (self.array.clone(), self.name.clone());
        tokio::spawn(async move {
            match array.scrub(&ctl).await {
                Ok(r) => tracing::info!(
                    "scrub of {name} {}: {} checked, {} mismatches, {} repaired, {} unreadable, {} skipped",
                    r.state.name(), r.checked, r.mismatches, r.repaired, r.unreadable, r.skipped
                ),
                Err(e) => tracing::error!("scrub of {name} failed: {e}"),
            }
        });
        Ok(())
    }
}

/// What the daemon already does with a path offered to `add`/`replace`.
enum Offered {
    /// Nothing: opened anew.
    New,
    /// A member let go (removed, replaced) but still open.
    LetGo(Arc<dyn Member>),
    /// A member of another volume ("member d0 of volume \"r10\"") on the same file
    /// (Matrix), with its shared superblock.
    Shared(Arc<MemberMeta>, String),
}

/// Opens an existing member file for `add`/`replace` (or takes the daemon's open one,
/// `open`) and reads its superblock.
async fn open_newcomer(
    path: &str,
    open: Option<Arc<dyn Member>>,
) -> Result<Arc<MemberMeta>, Refusal> {
    let member = match open {
        Some(m) => m,
        None => Arc::new(
            UringFile::open_with(path, None, Default::default())
                .map_err(|e| Refusal::new("bad-request", format!("opening `{path}`: {e}")))?,
        ) as Arc<dyn Member>,
    };
    Ok(MemberMeta::load(member).await)
}

/// Whether the member named `name` (a path; remote members' URIs never match) is the file or
/// device `new` describes.
fn same_file(name: &str, new: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    std::fs::metadata(name).is_ok_and(|m| {
        (m.dev() == new.dev() && m.ino() == new.ino())
            || (m.file_type().is_block_device()
                && new.file_type().is_block_device()
                && m.rdev() == new.rdev())
    })
}

fn refused(e: impl std::fmt::Display) -> Refusal {
    Refusal::new("refused", e.to_string())
}

fn rebuild_json(v: &ControlVolume) -> Value {
    let Some(c) = v.rebuild() else {
        return Value::Null;
    };
    let state = v.rebuild_state().unwrap_or(c.state());
    let roles: Vec<usize> = v.array.rebuilding().iter().map(|(r, _)| *r).collect();
    json!({
        "state": state.name(),
        "moves": moves(v, &roles),
        "roles": roles,
        "done_s_ago": c.done_s_ago(),
        "position_bytes": c.position_bytes(),
        "total_bytes": c.total_bytes(),
        "rate_bytes_per_s": c.measured_bytes_per_s(),
        "rate_limit_bytes_per_s": c.rate_limit_bytes_per_s(),
        "adaptive": c.is_adaptive(),
        "eta_s": c.eta_s(),
        "spares": v.array.spare_count(),
    })
}

/// For each role a pass fills: who held it at start and who is written now (a spare or a
/// replacement by its id; the same id when a member comes back into its own role).
fn moves(v: &ControlVolume, roles: &[usize]) -> Vec<Value> {
    let ids = v.member_ids();
    let vol = v.array.volume();
    roles
        .iter()
        .map(|&r| {
            let (from, to) = match vol.replacement(r) {
                Some(rep) => (ids[r].clone(), v.id_of(&rep)),
                None => (v.members[r].clone(), ids[r].clone()),
            };
            json!({ "role": r, "from": from, "to": to })
        })
        .collect()
}

/// A member's path as the operator can use it anywhere: relative paths are the daemon's
/// (its working directory); URIs and `memory:` stay as they are.
fn absolute_path(name: &str) -> String {
    if name.contains("://") || name.starts_with("memory:") || name.starts_with("nbd+") {
        return name.to_string();
    }
    std::path::absolute(name).map_or_else(|_| name.to_string(), |p| p.display().to_string())
}

/// The re-add resync (`returning.rs`): its pass, and the roles it brings back.
fn readd_json(v: &ControlVolume) -> Value {
    let Some(c) = v.readd.lock().clone() else {
        return Value::Null;
    };
    let roles: Vec<usize> = v.array.returning().iter().map(|(r, _)| *r).collect();
    json!({
        "state": c.state().name(),
        "moves": moves(v, &roles),
        "roles": roles,
        "done_s_ago": c.done_s_ago(),
        "position_bytes": c.position_bytes(),
        "total_bytes": c.total_bytes(),
        "rate_bytes_per_s": c.measured_bytes_per_s(),
        "rate_limit_bytes_per_s": c.rate_limit_bytes_per_s(),
        "eta_s": c.eta_s(),
    })
}

/// What starting a volume did.
#[derive(Clone, Copy, Debug, Default)]
pub struct StartReport {
    pub created: bool,
    pub was_clean: bool,
    pub resynced_bytes: u64,
    /// Bytes left to resync in the background while serving.
    pub background_bytes: u64,
}

/// The daemon's volumes.
pub struct Controls {
    pub volumes: Vec<ControlVolume>,
}

fn scrub_json(r: &ScrubReport) -> Value {
    json!({
        "state": r.state.name(),
        "repair": r.repair,
        "position_bytes": r.position_bytes,
        "total_bytes": r.total_bytes,
        "rate_bytes_per_s": r.rate_bytes_per_s,
        "rate_limit_bytes_per_s": r.rate_limit_bytes_per_s,
        "adaptive": r.adaptive,
        "eta_s": r.eta_s(),
        "checked": r.checked,
        "mismatches": r.mismatches,
        "repaired": r.repaired,
        "unreadable": r.unreadable,
        "skipped": r.skipped,
    })
}

impl Controls {
    fn find(&self, name: &str) -> Result<&ControlVolume, Refusal> {
        self.volumes.iter().find(|v| v.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.volumes.iter().map(|v| v.name.as_str()).collect();
            Refusal::new(
                "not-found",
                format!("no volume \"{name}\" (volumes: {})", names.join(", ")),
            )
        })
    }

    /// What this daemon already does with the file or device at `path`, offered as a new
    /// spare or replacement of volume `volume`: refused when it serves this volume — a
    /// member, a spare standing by (a spare stands by for one volume, as in the config), a
    /// replacement being rebuilt in; opening it again would only meet the daemon's own lock.
    /// A member of *another* volume (Matrix: member files carry several) is handed over with
    /// its superblock, which the volumes share ([`Offered::Shared`]). A member let go but
    /// still open (removed, or replaced) is handed back to be used again.
    fn already_open(&self, volume: &str, path: &str) -> Result<Offered, Refusal> {
        let Ok(new) = std::fs::metadata(path) else {
            return Ok(Offered::New); // opening it says what is wrong
        };
        let in_use = |what: String| {
            Refusal::new(
                "in-use",
                format!("`{path}` is {what}; a member or spare serves one place at a time"),
            )
        };
        let mut shared = None;
        for v in &self.volumes {
            let vol = v.array.volume();
            for (r, id) in v.member_ids().iter().enumerate() {
                if same_file(vol.member(r).name(), &new) {
                    if v.name != volume {
                        let what = format!("member {id} of volume \"{}\"", v.name);
                        shared = shared.or(v.array.member_meta(r).map(|m| (m, what)));
                        continue;
                    }
                    let hint = match vol.member_is_failed(r) {
                        true => " (failed: `nbraid remove` it first, then add it to rebuild it)",
                        false => "",
                    };
                    return Err(in_use(format!(
                        "member {id} of volume \"{}\"{hint}",
                        v.name
                    )));
                }
                if vol
                    .replacement(r)
                    .is_some_and(|m| same_file(m.name(), &new))
                {
                    return Err(in_use(format!(
                        "replacing member {id} of volume \"{}\"",
                        v.name
                    )));
                }
            }
            if v.array
                .spares()
                .iter()
                .any(|m| same_file(m.member().name(), &new))
            {
                return Err(in_use(format!("a spare of volume \"{}\"", v.name)));
            }
        }
        if let Some((meta, other)) = shared {
            return Ok(Offered::Shared(meta, other));
        }
        let let_go = self.volumes.iter().find_map(|v| {
            let known = v.known.lock();
            known
                .iter()
                .find(|k| same_file(k.member.name(), &new))
                .map(|k| k.member.clone())
        });
        Ok(let_go.map_or(Offered::New, Offered::LetGo))
    }

    /// The member at `path` for `add`/`replace` of volume `v`, and the consent the write
    /// rule hears (`--force`). A member file another volume serves (Matrix) is taken only
    /// when it carries this volume's own record (a member of it, removed and added back):
    /// then only this volume's region is rebuilt; never forced.
    async fn newcomer(
        &self,
        v: &ControlVolume,
        path: &str,
        force: bool,
    ) -> Result<(Arc<MemberMeta>, Consent), Refusal> {
        let consent = Consent {
            force,
            siblings: Vec::new(),
        };
        let open = match self.already_open(&v.name, path)? {
            Offered::Shared(meta, other) => {
                let writer = Writer {
                    array: Some(v.array.id()),
                    siblings: Vec::new(),
                };
                if may_write(&meta.contents(), &writer, false) != Ok(Allowed::Ours) {
                    return Err(Refusal::new(
                        "in-use",
                        format!(
                            "`{path}` is {other} and carries no record of volume \"{}\"; a member or spare serves one place at a time",
                            v.name
                        ),
                    ));
                }
                return Ok((meta, consent));
            }
            Offered::LetGo(m) => Some(m),
            Offered::New => None,
        };
        Ok((open_newcomer(path, open).await?, consent))
    }

    /// The id a member added at run time from `path` goes by: no volume's member or known
    /// member has it ([`crate::added::added_id`], as a restart names it).
    fn added_id(&self, path: &str) -> String {
        let taken: Vec<String> = self
            .volumes
            .iter()
            .flat_map(|v| {
                let known: Vec<String> = v.known.lock().iter().map(|k| k.id.clone()).collect();
                v.members.iter().cloned().chain(known)
            })
            .collect();
        crate::added::added_id(path, &taken)
    }

    /// The volumes a request names (`None`: all of them).
    fn select(&self, name: &Option<String>) -> Result<Vec<&ControlVolume>, Refusal> {
        match name {
            Some(n) => Ok(vec![self.find(n)?]),
            None => Ok(self.volumes.iter().collect()),
        }
    }

    /// Carries out one request; the reply's fields, or why not.
    pub async fn handle(&self, req: Request) -> Result<Value, Refusal> {
        match req {
            // Streamed by the server (`server.rs`), which holds the events.
            Request::Events { .. } => Err(Refusal::new(
                "unsupported",
                "events are served by the control server",
            )),
            Request::Status { volume } => {
                let vols: Vec<Value> = self.select(&volume)?.iter().map(|v| status(v)).collect();
                Ok(ok_reply(json!({ "volumes": vols })))
            }
            Request::Fail {
                volume,
                member,
                force,
            } => {
                let v = self.find(&volume)?;
                let index = v.member_index(&member)?;
                let vol = v.array.volume();
                let tree = vol.geometry().root();
                let unreadable = |m: usize| m < vol.member_count() && !vol.member_is_current(m);
                if let Some(why) = super::fail::refuse_fail(tree, &unreadable, index, force) {
                    return Err(Refusal::new(
                        "would-lose-data",
                        format!("volume \"{volume}\": {why}"),
                    ));
                }
                vol.fail_member(index, "failed by the operator (nbraid fail)");
                // Into the superblocks now, not at the next write: a restart keeps it failed.
                let array = v.array.clone();
                tokio::spawn(async move {
                    if let Err(e) = array.record_failures().await {
                        tracing::error!("recording a failed member of {}: {e}", array.name());
                    }
                });
                Ok(ok_reply(json!({
                    "volume": volume,
                    "member": v.member_ids()[index],
                    "index": index,
                    "degraded": vol.is_degraded(),
                    "available": vol.is_available(),
                })))
            }
            Request::Scrub {
                volume,
                repair,
                rate,
            } => {
                let v = self.find(&volume)?;
                let ctl = v.new_scrub(repair, rate);
                v.start_scrub(ctl.clone())?;
                Ok(ok_reply(
                    json!({ "volume": volume, "scrub": scrub_json(&ctl.report()) }),
                ))
            }
            Request::Add {
                volume,
                path,
                force,
            } => {
                let v = self.find(&volume)?;
                let (meta, consent) = self.newcomer(v, &path, force).await?;
                v.learn(&self.added_id(&path), meta.member());
                // Recorded: a restart still knows it.
                v.array
                    .add_recorded_spare(meta, &consent)
                    .await
                    .map_err(refused)?;
                // A failed role takes it at once.
                let roles = v.array.use_spares().await.map_err(refused)?;
                if !roles.is_empty() {
                    // At the volume's rate, as if the daemon had started it.
                    v.ensure_rebuild(v.rebuild_rate());
                }
                Ok(ok_reply(json!({
                    "volume": volume,
                    "rebuilding_roles": roles,
                    "rebuild": rebuild_json(v),
                })))
            }
            Request::Replace {
                volume,
                member,
                path,
                force,
            } => {
                let v = self.find(&volume)?;
                let index = v.member_index(&member)?;
                let (meta, consent) = self.newcomer(v, &path, force).await?;
                v.learn(&self.added_id(&path), meta.member());
                v.array
                    .replace_with(index, meta, &consent)
                    .await
                    .map_err(refused)?;
                v.ensure_rebuild(v.rebuild_rate());
                Ok(ok_reply(
                    json!({ "volume": volume, "index": index, "rebuild": rebuild_json(v) }),
                ))
            }
            Request::Rebuild { volume, rate } => {
                let v = self.find(&volume)?;
                v.array.use_spares().await.map_err(refused)?;
                // No role waits for a rebuild and none runs: a new pass would be done at once,
                // its empty report replacing the last rebuild's. Say so instead.
                if v.array.rebuilding().is_empty() && !v.rebuild_running() {
                    return Ok(ok_reply(json!({
                        "volume": volume, "rebuild": rebuild_json(v), "nothing_to_rebuild": true,
                        "roles_without_a_member": v.array.roles_wanting_a_member(),
                    })));
                }
                match rate {
                    Some(r) => v.start_rebuild(r),
                    None => v.ensure_rebuild(v.rebuild_rate()),
                };
                Ok(ok_reply(
                    json!({ "volume": volume, "rebuild": rebuild_json(v) }),
                ))
            }
            Request::Remove { volume, member } => {
                let v = self.find(&volume)?;
                Ok(ok_reply(remove(v, &member).await?))
            }
            Request::Pause { volume } => self.pause_resume(&volume, true),
            Request::Resume { volume } => self.pause_resume(&volume, false),
            Request::Cancel { volume } => {
                let v = self.find(&volume)?;
                let scrub = v.scrub();
                let readd = crate::returning::cancel_resync(v);
                let Some(c) = scrub else {
                    if readd {
                        return Ok(ok_reply(
                            json!({ "volume": volume, "readd": readd_json(v) }),
                        ));
                    }
                    return Err(Refusal::new(
                        "not-found",
                        format!("volume \"{volume}\" has no scrub or re-add resync"),
                    ));
                };
                c.cancel();
                c.resume();
                Ok(ok_reply(json!({
                    "volume": volume, "scrub": scrub_json(&c.report()), "readd": readd_json(v),
                })))
            }
        }
    }

    fn pause_resume(&self, volume: &Option<String>, pause: bool) -> Result<Value, Refusal> {
        let mut touched = Vec::new();
        for v in self.select(volume)? {
            v.held.store(pause, SeqCst);
            let (scrub, rebuild) = (v.scrub(), v.rebuild());
            let resync = v.resync.lock().clone();
            let readd = v.readd.lock().clone();
            let passes = [
                scrub.as_ref().map(|c| &c.pass),
                rebuild.as_deref(),
                resync.as_deref(),
                readd.as_deref(),
            ];
            let mut any = false;
            for c in passes.into_iter().flatten() {
                if pause {
                    c.pause();
                } else {
                    c.resume();
                }
                any = true;
            }
            // A cancelled re-add resync runs again (its members are written, not read).
            if !pause && !v.array.returning().is_empty() {
                crate::returning::start_resync(v);
            }
            if any {
                touched.push(v.name.clone());
            }
        }
        let held: Vec<&str> = self
            .select(volume)?
            .iter()
            .map(|v| v.name.as_str())
            .collect();
        Ok(ok_reply(
            json!({ "volumes": touched, "held": pause, "selected": held }),
        ))
    }
}

/// Everything `status` says about one volume.
fn status(v: &ControlVolume) -> Value {
    let vol = v.array.volume();
    let states = vol.member_states();
    let counters = vol.member_counters();
    let region_io = vol.member_region_io();
    let read_errors = vol.member_read_errors();
    let ids = v.member_ids();
    let members: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let (c, file) = (&region_io[i], &counters[i]);
            json!({
                "id": id,
                "index": i,
                "path": absolute_path(vol.member(i).name()),
                "state": match (states[i], v.at_start.get(i).copied()) {
                    (MemberState::Healthy, _) if !vol.member_is_current(i) => "rebuilding",
                    (MemberState::Healthy, _) => "healthy",
                    (MemberState::Failed, _) if !v.array.has_member(i) && v.at_start[i] != "missing" => "removed",
                    (MemberState::Failed, Some("missing")) => "missing",
                    (MemberState::Failed, _) => "failed",
                },
                "at_start": v.at_start.get(i).copied().unwrap_or("?"),
                "read_errors": read_errors[i],
                "reads": c.reads,
                "writes": c.writes,
                "read_bytes": c.read_bytes,
                "write_bytes": c.write_bytes,
                // The whole file's, every volume on it and the metadata included.
                "file_io": {
                    "reads": file.reads, "writes": file.writes,
                    "read_bytes": file.read_bytes, "write_bytes": file.write_bytes,
                    "flushes": file.flushes,
                },
            })
        })
        .collect();
    let c = vol.counters();
    let cache = vol.cache_usage();
    let state = if !vol.is_available() {
        "failed"
    } else if vol.is_degraded() {
        "degraded"
    } else {
        "healthy"
    };
    json!({
        "name": v.name,
        "level": v.level,
        "capacity_bytes": vol.capacity(),
        "state": state,
        "degraded": vol.is_degraded(),
        "available": vol.is_available(),
        "held": v.is_held(),
        "rebuild_rate": { "limit_bytes_per_s": v.rebuild_rate().limit_bytes_per_s, "adaptive": v.rebuild_rate().adaptive },
        "members": members,
        "metadata": {
            "array": v.array.id().to_string(),
            "dirty": v.array.is_dirty(),
            "bitmap_chunk_bytes": v.array.bitmap_chunk_bytes(),
            "created_at_start": v.start.created,
            "clean_at_start": v.start.was_clean,
            "resynced_bytes_at_start": v.start.resynced_bytes,
            "background_resync_bytes_at_start": v.start.background_bytes,
        },
        "io": {
            "reads": c.reads, "read_bytes": c.read_bytes,
            "writes": c.writes, "write_bytes": c.write_bytes,
            "flushes": c.flushes, "trims": c.trims, "write_zeroes": c.write_zeroes,
            "errors": c.errors, "repairs": c.repairs,
        },
        "cache": {
            "dirty_bytes": cache.dirty_bytes,
            "pinned_bytes": cache.pinned_bytes,
            "bound_bytes": cache.bound_bytes,
        },
        "scrub": v.scrub().map(|s| scrub_json(&s.report())),
        "rebuild": rebuild_json(v),
        "resync": v.resync.lock().as_ref().map(|c| json!({
            "state": c.state().name(),
            "done_s_ago": c.done_s_ago(),
            "position_bytes": c.position_bytes(),
            "total_bytes": c.total_bytes(),
            "remaining_bytes": v.array.background_bytes(),
            "rate_bytes_per_s": c.measured_bytes_per_s(),
            "rate_limit_bytes_per_s": c.rate_limit_bytes_per_s(),
            "eta_s": c.eta_s(),
        })),
        "returning": v.array.returning().iter().map(|&(i, b)| json!({ "index": i, "resync_bytes": b })).collect::<Vec<_>>(),
        "readd": readd_json(v),
        "spares": v.array.spares().iter().map(|m| v.id_of(m.member())).collect::<Vec<_>>(),
        "notes": v.notes,
    })
}

/// `remove`: a spare (by id or path) leaves the spares; a failed member (by id or index)
/// leaves its role (the array refuses an active one).
async fn remove(v: &ControlVolume, member: &str) -> Result<Value, Refusal> {
    let spare = v
        .array
        .spares()
        .into_iter()
        .find(|m| v.id_of(m.member()) == member || m.member().name() == member);
    if let Some(s) = spare {
        v.array.remove_spare(&s);
        v.array
            .forget_added_path(s.member().name())
            .await
            .map_err(refused)?;
        return Ok(json!({ "volume": v.name, "member": member, "removed": "spare" }));
    }
    let index = match v.member_index(member) {
        Ok(index) => index,
        // A path the records keep that is neither a spare nor a member here (it could not be
        // opened at start, or is no longer blank): forgotten, so no later start opens it.
        Err(e) => {
            return match v.array.forget_added_path(member).await.map_err(refused)? {
                true => {
                    Ok(json!({ "volume": v.name, "member": member, "removed": "recorded path" }))
                }
                false => Err(e),
            };
        }
    };
    let id = v.member_ids()[index].clone();
    v.array.remove_member(index).await.map_err(refused)?;
    Ok(json!({
        "volume": v.name,
        "member": id,
        "index": index,
        "removed": "member",
        "degraded": v.array.volume().is_degraded(),
    }))
}

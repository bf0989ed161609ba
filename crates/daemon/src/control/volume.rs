//! One served volume as the control socket sees it ([`ControlVolume`]): its members by id,
//! and the background passes on it (scrub, rebuild, the resync of re-added members), each
//! started, held and cancelled here, in one place.

use super::departed::{Departed, Departures};
use super::known::KnownMembers;
use super::notes::ConfigIds;
use super::paths::absolute_path;
use super::task_slot::{restart, Restart, Run, TaskSlot};
use crate::served::{Counts, ServedArray};
use futures::future::{BoxFuture, FutureExt};
use nbraid_assembly::adopt::Known;
use nbraid_control::Refusal;
use nbraid_core::metadata::{Array, ArrayError};
use nbraid_core::{Member, PassControl, PassRate, PassState, ScrubControl};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;

/// A finished rebuild (its control) and the roles it made current.
type Rebuilt = (Arc<PassControl>, Vec<usize>);

/// One served volume as the control socket sees it.
pub struct ControlVolume {
    pub name: String,
    /// The level's name (`raid6`); an online reshape may change it.
    level: Mutex<String>,
    /// The array it serves, swapped by an online reshape (use [`Self::array`]).
    pub served: Arc<ServedArray>,
    /// Config member ids, by the volume's member index (its role in the superblocks).
    pub members: Vec<String>,
    /// By member index: the file the start found its member at, or that it is missing from
    /// (`None`: unknown) — a missing member's last known path.
    start_paths: Vec<Option<String>>,
    /// By member index: what assembly found in the superblocks ("new", "active", "missing",
    /// "stale", "failed", "unreachable").
    pub at_start: Vec<&'static str>,
    /// What the start did: created the array, found it clean, bytes resynced before serving.
    pub start: StartReport,
    /// The latest scrub (running or finished).
    pub(super) scrub: TaskSlot<ScrubControl>,
    /// The latest rebuild (running or finished); its task outlives the pass (the pass says
    /// done before the rebuilt members are committed current).
    pub(super) rebuild: TaskSlot<PassControl>,
    /// The roles the latest finished rebuild made current, with its control (`status`
    /// tells a done rebuild whose member failed since from one whose roles still serve).
    rebuilt: Arc<Mutex<Option<Rebuilt>>>,
    /// The rate of rebuilds (and background resyncs) the daemon starts by itself; a reload
    /// (SIGHUP) may change it.
    rebuild_rate: Mutex<PassRate>,
    /// The background resync after an unclean start, if there was one.
    pub resync: TaskSlot<PassControl>,
    /// The latest resync of re-added members ([`Self::start_readd_resync`]), running or
    /// finished.
    pub readd: TaskSlot<PassControl>,
    /// The reshape pass, when the volume started mid-reshape (`reshape.rs`).
    pub reshape: TaskSlot<PassControl>,
    /// The pass computing the checksums of a volume that enabled them
    /// (`checksum_fill.rs`), when one started.
    pub checksum_fill: TaskSlot<nbraid_core::metadata::FillControl>,
    /// The pass giving back the checksums an unclean start dropped
    /// (`checksum_refill.rs`), when one started.
    pub checksum_refill: TaskSlot<nbraid_core::metadata::RefillControl>,
    /// Every member and spare known by id (config ids; paths for those added at run time);
    /// it holds none open (`known.rs`).
    pub(super) known: Mutex<KnownMembers>,
    /// Failed members whose role a spare took: shown until removed or added back.
    pub(super) departed: Departures,
    /// What the start found that the operator must hear (spares holding roles, old members
    /// ignored, spares that cannot be used). `status` says who holds which role afresh
    /// (`notes.rs`).
    pub notes: Vec<String>,
    /// The config's member and spare ids, for the notes `status` gives; `None`: only the
    /// start's notes are said.
    pub(super) config_ids: Option<ConfigIds>,
    /// `nbraid pause` holds the volume's background work until `nbraid resume` — passes
    /// that start later too (md's `frozen`), so every pass is made by [`Self::new_pass`].
    pub(super) held: AtomicBool,
    /// Taken by every request that changes the volume, from its checks to its last change
    /// ([`Self::operations`]): the runtime runs requests in parallel, and two `fail`s could
    /// both pass the tolerance check, or a request take the array a reshape is replacing.
    operations: Arc<tokio::sync::Mutex<()>>,
}

impl ControlVolume {
    pub fn new(
        name: String,
        level: String,
        served: Arc<ServedArray>,
        members: Vec<String>,
        at_start: Vec<&'static str>,
        start: StartReport,
    ) -> Self {
        ControlVolume {
            name,
            level: Mutex::new(level),
            served,
            members,
            start_paths: Vec::new(),
            at_start,
            start,
            scrub: TaskSlot::default(),
            rebuild: TaskSlot::default(),
            rebuilt: Arc::default(),
            rebuild_rate: Mutex::new(PassRate::default()),
            resync: TaskSlot::default(),
            readd: TaskSlot::default(),
            reshape: TaskSlot::default(),
            checksum_fill: TaskSlot::default(),
            checksum_refill: TaskSlot::default(),
            known: Mutex::default(),
            departed: Departures::default(),
            notes: Vec::new(),
            config_ids: None,
            held: AtomicBool::new(false),
            operations: Arc::default(),
        }
    }

    /// Waits for the volume's other changes (requests, a reshape reopening it) to finish; the
    /// volume is this caller's to check and change until the guard drops. Never held across
    /// a pass: only around checking and starting it.
    pub(crate) async fn operations(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.operations_lock().lock_owned().await
    }

    /// The lock [`Self::operations`] takes, for a background task that changes the volume
    /// (a reshape reopening it when done).
    pub(super) fn operations_lock(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.operations.clone()
    }

    /// The array served now; an online reshape's start and end replace it, so keep it for
    /// one step only.
    pub fn array(&self) -> Arc<Array> {
        self.served.get()
    }

    /// Everything the volume counted since the daemon started (I/O, errors, repairs; each
    /// member's requests and read errors): the arrays an online reshape replaced included,
    /// so a counter never goes back ([`ServedArray::counts`]).
    pub fn counts(&self) -> Counts {
        self.served.counts()
    }

    /// The level's name (`raid6`).
    pub fn level(&self) -> String {
        self.level.lock().clone()
    }

    /// The level's name once an online reshape started into another.
    pub(super) fn set_level(&self, level: &str) {
        *self.level.lock() = level.to_string();
    }

    /// The rate of rebuilds (and background resyncs) the daemon starts by itself.
    pub fn rebuild_rate(&self) -> PassRate {
        *self.rebuild_rate.lock()
    }

    /// Sets [`Self::rebuild_rate`] (a reload). The passes that run at the volume's rate
    /// follow it — those just spawned and not at their first window yet included; a scrub
    /// keeps the rate it was asked for.
    pub fn set_rebuild_rate(&self, rate: PassRate) {
        *self.rebuild_rate.lock() = rate;
        for slot in [&self.rebuild, &self.resync, &self.readd, &self.reshape] {
            if let Some(c) = slot.alive() {
                c.set_pass_rate(rate);
            }
        }
        if let Some(c) = self.checksum_fill.alive() {
            c.set_pass_rate(rate);
        }
        if let Some(c) = self.checksum_refill.alive() {
            c.pass.set_pass_rate(rate);
        }
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
        self.known = Mutex::new(KnownMembers::new(known));
        self.notes = notes;
        self
    }

    /// With the config's member and spare ids: `status` gives the notes `check` would give
    /// for the volume as it is now.
    pub fn with_config_ids(mut self, ids: Option<ConfigIds>) -> Self {
        self.config_ids = ids;
        self
    }

    /// With the file each role's member was found at or is missing from, by the start.
    pub fn with_start_paths(mut self, paths: Vec<Option<String>>) -> Self {
        self.start_paths = paths;
        self
    }

    /// For role `r` while the array has no member in it and its member is still the one the
    /// start named: the file that member is missing from (the array holds a placeholder
    /// named after the role).
    pub fn missing_from(&self, r: usize) -> Option<String> {
        if self.array().has_member(r) || self.member_ids().get(r) != Some(&self.start_id(r)) {
            return None;
        }
        let path = self.start_paths.get(r).cloned().flatten()?;
        Some(absolute_path(&path))
    }

    /// The file of role `r`'s member as the operator can find it: the one serving it, or
    /// the one its missing member is missing from ([`Self::missing_from`]).
    pub fn member_path(&self, r: usize) -> String {
        self.missing_from(r)
            .unwrap_or_else(|| absolute_path(self.array().volume().member(r).name()))
    }

    /// The path of the member or spare known by `id` (open or let go), if one is.
    pub(super) fn known_path(&self, id: &str) -> Option<String> {
        self.known.lock().path_of(id).map(str::to_string)
    }

    /// The id of whatever serves each role now (a spare that took a role goes by its own
    /// id); roles with no known member keep the id they had at start.
    pub fn member_ids(&self) -> Vec<String> {
        let known = self.known.lock();
        let array = self.array();
        let vol = array.volume();
        (0..vol.member_count())
            .map(|r| {
                let m = vol.member(r);
                known
                    .id_of(&m)
                    .map_or_else(|| self.start_id(r), str::to_string)
            })
            .collect()
    }

    /// The id role `r` had at start (`role r` for a role added since, by a reshape, whose
    /// member is not known by id).
    pub(super) fn start_id(&self, r: usize) -> String {
        (self.members.get(r).cloned()).unwrap_or_else(|| format!("role {r}"))
    }

    /// The id of a member or spare (its path when unknown).
    pub(crate) fn id_of(&self, member: &Arc<dyn Member>) -> String {
        let known = self.known.lock();
        known
            .id_of(member)
            .map_or_else(|| member.name().to_string(), str::to_string)
    }

    /// Runs `join` (the array taking `newcomers`) with each already known by its id:
    /// `status`, which reads the array and then the ids, never lists one by its path (or
    /// role) in between. A refused join leaves no new id behind.
    pub(super) async fn joining<T, E>(
        &self,
        newcomers: &[(&str, &Arc<dyn Member>)],
        join: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let new_entries: Vec<bool> = {
            let mut known = self.known.lock();
            newcomers.iter().map(|(id, m)| known.learn(id, m)).collect()
        };
        let joined = join.await;
        if joined.is_err() {
            let mut known = self.known.lock();
            for ((_, m), _) in newcomers.iter().zip(new_entries).filter(|(_, new)| *new) {
                known.unlearn(m);
            }
        }
        joined
    }

    /// Puts spares in failed roles ([`Array::use_spares`]); the failed members they push
    /// out are kept as departed (for `status` and `remove`). Each role taken, with the ids
    /// of the member that left it and of the spare that took it.
    pub async fn take_spares(&self) -> Result<Vec<(usize, String, String)>, ArrayError> {
        let array = self.array();
        let vol = array.volume();
        let before: Vec<(String, Option<Arc<dyn Member>>)> = self
            .member_ids()
            .into_iter()
            .enumerate()
            .map(|(r, id)| (id, self.array().has_member(r).then(|| vol.member(r))))
            .collect();
        let roles = self.array().use_spares().await?;
        let after = self.member_ids();
        let mut taken = Vec::with_capacity(roles.len());
        for r in roles {
            let (id, left) = before[r].clone();
            // A role left empty (removed, missing at start) pushes nobody out.
            if let Some(member) = left.filter(|m| !Arc::ptr_eq(m, &vol.member(r))) {
                self.departed.record(Departed {
                    id: id.clone(),
                    role: r,
                    path: absolute_path(member.name()),
                    member,
                });
            }
            taken.push((r, id, after[r].clone()));
        }
        Ok(taken)
    }

    pub(super) fn rebuild(&self) -> Option<Arc<PassControl>> {
        self.rebuild.latest()
    }

    /// The roles rebuild `ctl` made current, once its task returned (empty before, or when
    /// it was not the latest finished one).
    pub(super) fn rebuilt_roles(&self, ctl: &Arc<PassControl>) -> Vec<usize> {
        match &*self.rebuilt.lock() {
            Some((c, roles)) if Arc::ptr_eq(c, ctl) => roles.clone(),
            _ => Vec::new(),
        }
    }

    /// A rebuild task is running (its pass may already report done).
    pub(super) fn rebuild_running(&self) -> bool {
        self.rebuild.task_alive()
    }

    /// The latest rebuild's state; `running` until its task returned.
    pub(super) fn rebuild_state(&self) -> Option<PassState> {
        self.rebuild.state()
    }

    /// The member index `member` names (a config id, or an index).
    pub(super) fn member_index(&self, member: &str) -> Result<usize, Refusal> {
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
    pub(super) fn start_rebuild(&self, rate: PassRate) -> Arc<PassControl> {
        self.rebuild_task(rate, true)
    }

    /// Starts the rebuild task unless one runs (which is left as it is).
    pub fn ensure_rebuild(&self, rate: PassRate) -> Arc<PassControl> {
        self.rebuild_task(rate, false)
    }

    fn rebuild_task(&self, rate: PassRate, set_rate: bool) -> Arc<PassControl> {
        let mut running = None;
        let started = self.rebuild.start(
            |latest| match latest {
                // One runs: its task outlives the pass until the members are committed. A
                // role it does not rebuild stops it and a new pass starts for every role
                // (`RebuildTask::run`).
                Some((c, true)) => {
                    if set_rate {
                        c.set_pass_rate(rate);
                    }
                    running = Some(c.clone());
                    None
                }
                _ => Some(self.new_pass(rate)),
            },
            |ctl| self.rebuild_runner().run(ctl),
        );
        (started.or(running)).expect("a rebuild started, or one runs")
    }

    fn rebuild_runner(&self) -> RebuildTask {
        RebuildTask {
            slot: self.rebuild.clone(),
            array: self.array(),
            name: self.name.clone(),
            rebuilt: self.rebuilt.clone(),
        }
    }

    pub(super) fn scrub(&self) -> Option<Arc<ScrubControl>> {
        self.scrub.latest()
    }

    /// The recent scrubs, oldest first, for the service's observer (`service::observe`).
    pub fn scrub_runs(&self) -> Vec<Run<ScrubControl>> {
        self.scrub.runs()
    }

    /// The latest reshape's control (the copy into a new shape, then the grown space's
    /// sync), for pause and resume and the service's observer.
    pub fn reshape_pass(&self) -> Option<Arc<PassControl>> {
        self.reshape.latest()
    }

    /// The recent rebuilds, oldest first (each `running` until its task returned), for the
    /// service's observer.
    pub fn rebuild_runs(&self) -> Vec<Run<PassControl>> {
        self.rebuild.runs()
    }

    /// Scrubs the volume under `ctl` (from its position: a resumed scrub starts at its
    /// checkpoint), recording its progress in the superblocks; refused while one runs.
    pub fn start_scrub(&self, ctl: Arc<ScrubControl>) -> Result<(), Refusal> {
        let (array, name) = (self.array(), self.name.clone());
        // A cancelled scrub's task may still drain its windows and record its checkpoint:
        // the new one starts after it returned (the slot's rule). One spawned but not yet at
        // its first window (idle, recording its start) is on its way: a second start (the
        // start's resume of the checkpoint it just recorded) would queue behind it and run
        // the volume again at another rate.
        let started = self.scrub.start(
            |latest| match latest.map(|(c, alive)| restart(Some((c.state(), alive)))) {
                Some(Restart::Leave) => None,
                _ => Some(ctl),
            },
            |ctl| async move {
                match array.scrub(&ctl).await {
                    Ok(r) => tracing::info!(
                        "scrub of {name} {}: {} checked, {} mismatches, {} repaired, {} unreadable, {} skipped",
                        r.state.name(), r.checked, r.mismatches, r.repaired, r.unreadable, r.skipped
                    ),
                    Err(e) => tracing::error!("scrub of {name} failed: {e}"),
                }
            },
        );
        match started {
            Some(_) => Ok(()),
            None => Err(Refusal::new(
                "busy",
                format!(
                    "volume \"{}\" is already being scrubbed (cancel it first: nbraid cancel {})",
                    self.name, self.name
                ),
            )),
        }
    }

    /// Runs the resync of this volume's re-added members in the background under the volume's re-add
    /// control ([`Self::readd`]: progress in `status`, pause/resume/cancel like other
    /// background work). A pass that was cancelled starts again under the same control (a new
    /// one when there is none, or the last one finished); one already running is left alone.
    pub fn start_readd_resync(&self) {
        let (array, name) = (self.array(), self.name.clone());
        self.readd.start(
            |latest| {
                // A cancel asked for but not yet seen by the pass counts as done: the pass
                // will stop, and this start is what runs it again.
                let seen = latest.map(|(c, alive)| {
                    let state = if c.is_cancelled() {
                        PassState::Cancelled
                    } else {
                        c.state()
                    };
                    (state, alive)
                });
                let ctl = match restart(seen) {
                    Restart::Leave => return None,
                    Restart::Resume => latest.expect("a pass to resume").0.clone(),
                    Restart::New => self.new_pass(self.rebuild_rate()),
                };
                if !self.is_held() {
                    ctl.resume();
                }
                Some(ctl)
            },
            |ctl| async move {
                match array.resync_returned(&ctl).await {
                    Ok(s) => tracing::info!("resync of {name}'s returning members {}", s.name()),
                    Err(e) => tracing::error!("resync of {name}'s returning members: {e}"),
                }
            },
        );
    }

    /// Cancels the re-add resync if it runs (or is paused): its members stay written and
    /// unread until `resume` runs it again. Whether there was one to cancel.
    pub fn cancel_readd_resync(&self) -> bool {
        let Some(c) = self.readd.latest() else {
            return false;
        };
        if !matches!(c.state(), PassState::Running | PassState::Paused) {
            return false;
        }
        c.cancel();
        c.resume();
        true
    }
}

/// What a rebuild run needs: its slot (to start the next run), the array, where its
/// outcome goes.
struct RebuildTask {
    slot: TaskSlot<PassControl>,
    array: Arc<Array>,
    name: String,
    rebuilt: Arc<Mutex<Option<Rebuilt>>>,
}

impl RebuildTask {
    /// Runs the rebuild under `ctl`. A role that needs rebuilding meanwhile (a spare took a
    /// failed role, a replace began) stops it at its next window, and a new run starts at
    /// once over every role, each from its own checkpoint: watchers see it start, and no
    /// role waits for a whole pass it is no part of.
    fn run(self, ctl: Arc<PassControl>) -> BoxFuture<'static, ()> {
        async move { self.run_once(ctl).await }.boxed()
    }

    async fn run_once(self, ctl: Arc<PassControl>) {
        // Where the roles' checkpoints are, of the whole volume: a rebuild resumed after a
        // restart shows its share from its first report, not 0% until its run reads them.
        let resume_at = (self.array.rebuilding().iter()).map(|&(_, at)| at).min();
        if ctl.state() == PassState::Idle {
            ctl.set_position(resume_at.unwrap_or(0));
            ctl.set_total(self.array.volume().capacity());
        }
        let name = &self.name;
        match self.array.rebuild_or_restart(&ctl).await {
            Ok(r) if r.restart => {
                tracing::info!("rebuild of {name}: a role needs rebuilding: a new pass starts");
                let next = Arc::new(PassControl::with_rate(ctl.pass_rate()));
                if ctl.is_paused() {
                    next.pause();
                }
                *self.rebuilt.lock() = Some((ctl, r.completed));
                let slot = self.slot.clone();
                slot.start(|_| Some(next), |c| self.run(c));
            }
            Ok(r) => {
                tracing::info!(
                    "rebuild of {name} {}: roles {:?} current",
                    r.state.name(),
                    r.completed
                );
                *self.rebuilt.lock() = Some((ctl, r.completed));
            }
            Err(e) => tracing::error!("rebuild of {name} failed: {e}"),
        }
    }
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

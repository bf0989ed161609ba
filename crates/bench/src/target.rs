//! What a benchmark runs against, behind one trait: a volume of the engine in-process (a
//! config's array on its members, assembled as the daemon assembles it, or a volume on
//! simulated members with virtual time), or an NBD server.

use anyhow::{anyhow, bail, Context, Result};
use futures::future::LocalBoxFuture;
use futures::FutureExt;
use nbraid_assembly::assemble::{self, Assembled};
use nbraid_assembly::plan::Plan;
use nbraid_config::{Config, MemberStorage};
use nbraid_core::metadata::{Array, CleanMark};
use nbraid_core::{Buf, PassControl, PassState, Volume};
use nbraid_sim::clock::{run_virtual, SimClock};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub trait Target {
    /// A short name for tables and charts.
    fn name(&self) -> &str;
    fn len_bytes(&self) -> u64;
    /// Requests must be aligned to this.
    fn block_bytes(&self) -> u64;
    fn read(&self, offset: u64, buf: Buf) -> LocalBoxFuture<'_, Result<Buf>>;
    /// Writes `buf` and hands it back for reuse.
    fn write(&self, offset: u64, buf: Buf) -> LocalBoxFuture<'_, Result<Buf>>;
    fn flush(&self) -> LocalBoxFuture<'_, Result<()>>;
    /// Time on the target's clock (virtual for simulated members).
    fn now(&self) -> Duration;
    /// Drives `work` to completion (on the target's executor and clock).
    fn block_on(&self, work: LocalBoxFuture<'_, Result<()>>) -> Result<()>;
    /// Ends the run (after the last cell, or an error): what the target must record.
    fn close(&self) -> LocalBoxFuture<'_, Result<()>> {
        async { Ok(()) }.boxed_local()
    }
}

/// A volume of the engine in this process.
pub struct VolumeTarget {
    name: String,
    volume: Arc<Volume>,
    /// Simulated members' clock; `None`: real members, wall-clock time.
    clock: Option<Arc<SimClock>>,
    start: Instant,
}

impl VolumeTarget {
    pub fn new(name: String, volume: Arc<Volume>, clock: Option<Arc<SimClock>>) -> VolumeTarget {
        VolumeTarget {
            name,
            volume,
            clock,
            start: Instant::now(),
        }
    }

    /// The same target under another name.
    pub fn named(mut self, name: String) -> VolumeTarget {
        self.name = name;
        self
    }

    pub fn volume(&self) -> &Volume {
        &self.volume
    }
}

/// Fails the members `fail` names before a run (`--fail-member`): a config member id (`ids`
/// holds them by role) or a role number. Refused, failing none, when the volume would not
/// survive them all (with the members already failed).
pub fn degrade(volume: &Volume, ids: &[String], fail: &[String], name: &str) -> Result<()> {
    let mut roles = Vec::with_capacity(fail.len());
    for f in fail {
        let role = match ids.iter().position(|id| id == f) {
            Some(r) => r,
            None => match f.parse::<usize>() {
                Ok(r) if r < ids.len() => r,
                _ => bail!(
                    "--fail-member {f}: volume {name}'s members are {} (or roles 0..{})",
                    ids.join(", "),
                    ids.len().saturating_sub(1)
                ),
            },
        };
        roles.push(role);
    }
    let failed: Vec<usize> = (0..volume.member_count())
        .filter(|&m| roles.contains(&m) || !volume.member_is_current(m))
        .collect();
    if !volume.geometry().survives(&failed) {
        bail!(
            "--fail-member {}: volume {name} would not survive members {failed:?} failed (beyond its tolerance)",
            fail.join(",")
        );
    }
    for r in roles {
        volume.fail_member(r, "failed by nbraid bench --fail-member");
        eprintln!(
            "nbraid bench: volume {name}: member {} (role {r}) failed: the run measures it degraded",
            ids.get(r).map_or("?", |s| s.as_str())
        );
    }
    Ok(())
}

impl Target for VolumeTarget {
    fn name(&self) -> &str {
        &self.name
    }

    fn len_bytes(&self) -> u64 {
        self.volume.capacity()
    }

    fn block_bytes(&self) -> u64 {
        self.volume.block_size()
    }

    fn read(&self, offset: u64, buf: Buf) -> LocalBoxFuture<'_, Result<Buf>> {
        async move { Ok(self.volume.read_into(offset, buf).await?) }.boxed_local()
    }

    fn write(&self, offset: u64, buf: Buf) -> LocalBoxFuture<'_, Result<Buf>> {
        async move { Ok(self.volume.write(offset, buf, false).await?) }.boxed_local()
    }

    fn flush(&self) -> LocalBoxFuture<'_, Result<()>> {
        async move { Ok(self.volume.flush().await?) }.boxed_local()
    }

    fn now(&self) -> Duration {
        match &self.clock {
            Some(c) => c.now(),
            None => self.start.elapsed(),
        }
    }

    fn block_on(&self, work: LocalBoxFuture<'_, Result<()>>) -> Result<()> {
        match &self.clock {
            Some(c) => run_virtual(c, work).map_err(|e| anyhow!(e))?,
            // Real members: this thread submits and reaps its own member ops.
            None => nbraid_core::uring::block_on(work),
        }
    }
}

/// The volume `name` of `config` (read from `file`), or an error listing the volumes.
pub fn find_volume<'a>(
    config: &'a nbraid_config::Config,
    file: &Path,
    name: &str,
) -> Result<&'a nbraid_config::Volume> {
    config.volume(name).with_context(|| {
        let names: Vec<_> = config.volumes.iter().map(|v| v.name.as_str()).collect();
        format!(
            "{}: no volume `{name}` (volumes: {})",
            file.display(),
            names.join(", ")
        )
    })
}

/// A config volume in this process, assembled as `nbraidd` assembles it, every request
/// through its [`Array`]: writes mark the records dirty and set their write-intent bits
/// first, parity writes log partial parity, reads resync what an unclean start left unsynced,
/// and [`Target::close`] records the volume clean, as the daemon's orderly stop does.
pub struct ArrayTarget {
    name: String,
    array: Arc<Array>,
    /// The config says `read_only`: writes are refused, as the daemon's export refuses them.
    read_only: bool,
    start: Instant,
}

impl Target for ArrayTarget {
    fn name(&self) -> &str {
        &self.name
    }

    fn len_bytes(&self) -> u64 {
        self.array.volume().capacity()
    }

    fn block_bytes(&self) -> u64 {
        self.array.volume().block_size()
    }

    fn read(&self, offset: u64, buf: Buf) -> LocalBoxFuture<'_, Result<Buf>> {
        async move { Ok(self.array.read_into(offset, buf).await?) }.boxed_local()
    }

    fn write(&self, offset: u64, buf: Buf) -> LocalBoxFuture<'_, Result<Buf>> {
        async move {
            if self.read_only {
                bail!(
                    "volume {} is read_only in the config: a write workload would change it",
                    self.name
                );
            }
            Ok(self.array.write(offset, buf, false).await?)
        }
        .boxed_local()
    }

    fn flush(&self) -> LocalBoxFuture<'_, Result<()>> {
        async move { Ok(self.array.flush().await?) }.boxed_local()
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn block_on(&self, work: LocalBoxFuture<'_, Result<()>>) -> Result<()> {
        // This thread submits and reaps its own member ops (no ring thread between).
        nbraid_core::uring::block_on(work)
    }

    fn close(&self) -> LocalBoxFuture<'_, Result<()>> {
        async move {
            match self.array.mark_clean().await {
                Ok(CleanMark::Recorded) => Ok(()),
                // Only a request cut off by an error leaves one in flight; the resync ran to
                // its end before the first cell.
                Ok(why) => bail!(
                    "volume {}: not recorded clean ({why}): the next start resyncs it",
                    self.name
                ),
                Err(e) => Err(anyhow!(e).context(format!(
                    "volume {}: recording it clean (the next start resyncs it)",
                    self.name
                ))),
            }
        }
        .boxed_local()
    }
}

/// Volume `name` of the config at `file`, on its members, in this process: opened by its
/// superblocks through the daemon's own assembly ([`nbraid_assembly::assemble`]; roles by
/// superblock whatever the config's order, recorded failed and stale members as recorded, a
/// geometry the superblocks disagree with refused), or created where the daemon would create
/// it (`create = "auto"` over new or blank members, as `nbraid create` does). Members are
/// held exclusively, so a daemon serving them is refused. What an unclean stop left to
/// resync is resynced before the bench starts, so it measures the volume, not the resync.
/// The members `fail` names are failed then ([`degrade`]).
pub fn config_volume(file: &Path, name: &str, fail: &[String]) -> Result<ArrayTarget> {
    let config = nbraid_assembly::pins::load(file)?;
    let v = find_volume(&config, file, name)?;
    let a = futures::executor::block_on(assemble_volume(&config, v))?;
    degrade(a.array.volume(), &a.members, fail, name)?;
    Ok(ArrayTarget {
        name: name.to_string(),
        array: a.array,
        read_only: a.read_only,
        start: Instant::now(),
    })
}

async fn assemble_volume(config: &Config, v: &nbraid_config::Volume) -> Result<Assembled> {
    let k = config
        .volumes
        .iter()
        .position(|x| x.name == v.name)
        .context("a volume of the config")?;
    let mut opened = assemble::open_members(config).await?;
    // The config's `create` decides, as at a daemon start. Every volume is planned, as
    // `nbraid create --volume` plans them: a missing member file is created (sparse) only
    // where every volume on it is to be created, never under a volume with data.
    let mut plans = Vec::with_capacity(config.volumes.len());
    for (i, p) in assemble::plans(config, &opened, None, false)
        .into_iter()
        .enumerate()
    {
        match p {
            Ok(p) => plans.push(Some(p)),
            Err(e) if i == k => return Err(e.into()),
            Err(_) => plans.push(None),
        }
    }
    let plan = plans[k].context("planned")?;
    for p in assemble::create_members(config, &mut opened, &plans).await? {
        eprintln!("nbraid bench: created {}", p.display());
    }
    // Memory members are new at every start: creating their array goes without saying.
    let in_memory = v
        .members
        .iter()
        .any(|&m| config.members[m].state == MemberStorage::Memory);
    if let (Plan::Create { assume_clean }, false) = (plan, in_memory) {
        let sync = if assume_clean {
            ""
        } else {
            ", syncing its copies and parity first"
        };
        eprintln!(
            "nbraid bench: volume {}: no member carries its superblock: creating the array as nbraidd would (create = \"auto\"){sync}",
            v.name
        );
    }
    let a = assemble::start_volume(config, v, plan, &opened, &|_, _| {}).await?;
    if a.array.background_pending() {
        eprintln!(
            "nbraid bench: volume {}: not shut down cleanly: resyncing {} before the bench",
            v.name,
            nbraid_config::format_size(a.array.background_bytes())
        );
        let state = a.array.background_resync(&PassControl::new(0)).await?;
        if state != PassState::Done || a.array.background_pending() {
            bail!(
                "volume {}: the resync ended {}, not done: not benchmarking a volume whose copies or parity may disagree",
                v.name,
                state.name()
            );
        }
    }
    Ok(a)
}

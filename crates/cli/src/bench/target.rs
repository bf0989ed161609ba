//! What a benchmark runs against, behind one trait: a volume of the engine in-process (on
//! its config's members, or on simulated members with virtual time), or an NBD server.

use anyhow::{anyhow, bail, Context, Result};
use futures::future::LocalBoxFuture;
use futures::FutureExt;
use nbraid_config::MemberStorage;
use nbraid_core::simulated::{run_virtual, SimClock};
use nbraid_core::{Buf, FileOptions, Member, MemoryMember, UringFile, Volume, VolumeOptions};
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
            None => futures::executor::block_on(work),
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

/// The engine's options for a config volume.
pub fn volume_options(v: &nbraid_config::Volume) -> VolumeOptions {
    VolumeOptions {
        block_size: u64::from(v.block_size),
        read_policy: v.read_policy,
        cache: v.cache,
        ..VolumeOptions::default()
    }
}

/// The volume `name` of the config at `file`, on its members, in this process. Members are
/// held exclusively (a daemon serving them is refused) and must exist (`nbraid create`).
pub fn config_volume(file: &Path, name: &str) -> Result<VolumeTarget> {
    let config = nbraid_config::load(file)?;
    let v = find_volume(&config, file, name)?;
    let members = v
        .members
        .iter()
        .map(|&i| {
            let m = &config.members[i];
            Ok(match m.state {
                MemberStorage::Memory => {
                    Arc::new(MemoryMember::new(m.id.clone(), m.size)) as Arc<dyn Member>
                }
                MemberStorage::Remote => crate::remote_member::open(&config, m)?,
                MemberStorage::Missing => bail!(
                    "member {} ({}) does not exist; `nbraid create {}` makes it",
                    m.id,
                    m.path.display(),
                    file.display()
                ),
                _ => Arc::new(
                    UringFile::open_with(&m.path, Some(m.size), FileOptions::default())
                        .with_context(|| format!("member {} ({})", m.id, m.path.display()))?,
                ) as Arc<dyn Member>,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut opts = volume_options(v);
    if config.volume_is_new(v) {
        // Memory members start zeroed: parity is in sync.
        opts.members_known_zero = true;
    }
    let volume = Volume::new(v.geometry.clone(), members, opts)
        .with_context(|| format!("assembling volume {name}"))?;
    Ok(VolumeTarget::new(name.to_string(), Arc::new(volume), None))
}

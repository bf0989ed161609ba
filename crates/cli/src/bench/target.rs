//! What a benchmark runs against, behind one trait: a volume of the engine in-process (on
//! its config's members, or on simulated members with virtual time), or an NBD server.

use anyhow::{anyhow, Context, Result};
use futures::future::LocalBoxFuture;
use futures::FutureExt;
use nbraid_core::simulated::{run_virtual, SimClock};
use nbraid_core::{Buf, Volume};
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

/// The volume `name` of the config at `file`, assembled on its members as the daemon would
/// (members are held exclusively: a running daemon on them is refused).
pub fn config_volume(file: &std::path::Path, name: &str) -> Result<VolumeTarget> {
    let config = nbraid_daemon::config::load(file)?;
    if !config.volumes.iter().any(|v| v.name == name) {
        let names: Vec<_> = config.volumes.iter().map(|v| v.name.as_str()).collect();
        anyhow::bail!(
            "{}: no volume `{name}` (volumes: {})",
            file.display(),
            names.join(", ")
        );
    }
    let assembled = nbraid_daemon::assemble::assemble(&config)
        .with_context(|| format!("assembling {}", file.display()))?;
    let a = assembled
        .into_iter()
        .find(|a| a.name == name)
        .expect("every config volume is assembled");
    Ok(VolumeTarget::new(name.to_string(), a.volume, None))
}

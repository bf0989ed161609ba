//! `nbraidd --config FILE`: load, assemble, listen, serve until SIGTERM/SIGINT, then drain
//! and flush. Shared by the `nbraidd` binary and `nbraid serve`.

use crate::assemble::assemble;
use crate::config::{self, Config, Listener as ConfigListener};
use crate::export::VolumeExport;
use crate::nbd::{Export, Listener, Server};
use anyhow::{Context, Result};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How long in-flight requests may take to finish once a stop was asked for.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// Runs the daemon on the config at `path`; returns when stopped by a signal.
pub fn run(path: &Path) -> Result<()> {
    let config = config::load(path)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("nbraidd")
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(serve(config))
}

async fn serve(config: Config) -> Result<()> {
    let volumes = assemble(&config)?;
    let exports: Vec<(String, Arc<dyn Export>)> = volumes
        .into_iter()
        .map(|a| {
            let export = VolumeExport::new(a.volume, a.read_only, a.description);
            (a.name, Arc::new(export) as Arc<dyn Export>)
        })
        .collect();
    let names: Vec<String> = exports.iter().map(|(n, _)| n.clone()).collect();
    let server = Server::with_limits(exports, config.limits)?;

    // Bind everything before serving anything, so a taken port fails the start.
    let mut listeners = Vec::new();
    for l in &config.listen {
        let bound = match l {
            ConfigListener::Unix(path) => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                }
                Listener::bind_unix(path)?
            }
            ConfigListener::Tcp(addr) => Listener::bind_tcp(*addr).await?,
        };
        listeners.push(bound);
    }
    println!(
        "nbraidd: serving {} from {}",
        names.len(),
        config.file.display()
    );
    for name in &names {
        let uris: Vec<String> = listeners.iter().map(|l| l.uri(name)).collect();
        println!("  {name}: {}", uris.join("  "));
    }

    let tasks: Vec<_> = listeners
        .into_iter()
        .map(|l| {
            let s = server.clone();
            tokio::spawn(async move { s.serve(l).await })
        })
        .collect();

    wait_for_stop().await?;
    tracing::info!("stopping: draining requests and flushing volumes");
    server.shutdown_with_grace(SHUTDOWN_GRACE).await?;
    for t in tasks {
        t.await.context("listener task")?;
    }
    println!("nbraidd: stopped cleanly");
    Ok(())
}

async fn wait_for_stop() -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

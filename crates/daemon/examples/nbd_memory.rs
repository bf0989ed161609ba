//! Serves in-memory exports over NBD, for tests and benchmarks.
//!
//! ```text
//! cargo run --release -p nbraid-daemon --example nbd_memory -- \
//!     [--unix PATH]... [--tcp ADDR]... [--threads N] NAME:SIZE[:min=N][:pref=N][:ro]...
//! ```
//! Prints one URI per export and listener, then `ready`; SIGINT/SIGTERM shut it down
//! gracefully. SIZE takes K/M/G/T suffixes (powers of 1024).

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use nbraid_daemon::nbd::{Export, Listener, MemoryExport, Server};

fn parse_size(s: &str) -> Result<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        Some('T' | 't') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let n: u64 = num.parse().with_context(|| format!("bad size {s:?}"))?;
    n.checked_mul(mult).context("size overflows")
}

fn parse_export(spec: &str) -> Result<(String, Arc<dyn Export>)> {
    let mut parts = spec.split(':');
    let name = parts.next().unwrap_or_default().to_string();
    let size = parse_size(parts.next().context("export needs NAME:SIZE")?)?;
    let (mut min, mut pref, mut ro) = (512u32, 4096u32, false);
    for p in parts {
        if let Some(v) = p.strip_prefix("min=") {
            min = parse_size(v)?.try_into()?;
        } else if let Some(v) = p.strip_prefix("pref=") {
            pref = parse_size(v)?.try_into()?;
        } else if p == "ro" {
            ro = true;
        } else {
            bail!("unknown export attribute {p:?}");
        }
    }
    let e = MemoryExport::new(size)
        .with_block_sizes(min, pref)
        .with_read_only(ro)
        .with_description(format!("memory export of {size} bytes"));
    Ok((name, Arc::new(e)))
}

fn main() -> Result<()> {
    let mut unix = Vec::new();
    let mut tcp = Vec::new();
    let mut exports = Vec::new();
    let mut threads = 2usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--unix" => unix.push(args.next().context("--unix PATH")?),
            "--tcp" => tcp.push(args.next().context("--tcp ADDR")?),
            "--threads" => threads = args.next().context("--threads N")?.parse()?,
            "-h" | "--help" => {
                println!("nbd_memory [--unix PATH]... [--tcp ADDR]... [--threads N] NAME:SIZE[:min=N][:pref=N][:ro]...");
                return Ok(());
            }
            _ => exports.push(parse_export(&a)?),
        }
    }
    if exports.is_empty() {
        bail!("no exports given (NAME:SIZE)");
    }
    if unix.is_empty() && tcp.is_empty() {
        bail!("no listener given (--unix PATH or --tcp ADDR)");
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let server = Server::new(exports)?;
        let mut listeners = Vec::new();
        for p in &unix {
            listeners.push(Listener::bind_unix(p)?);
        }
        for a in &tcp {
            listeners.push(Listener::bind_tcp(a.parse().context("bad TCP address")?).await?);
        }
        for l in &listeners {
            for name in server.export_names() {
                println!("{}", l.uri(name));
            }
        }
        let mut tasks = Vec::new();
        for l in listeners {
            let s = server.clone();
            tasks.push(tokio::spawn(async move { s.serve(l).await }));
        }
        println!("ready");
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        eprintln!("shutting down");
        server.shutdown().await?;
        for t in tasks {
            let _ = t.await;
        }
        Ok(())
    })
}

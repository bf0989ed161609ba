//! An NBD server as a target, through nbraid's async client (many requests in flight per
//! connection), on a single-threaded tokio runtime that drives the benchmark too. Requests
//! go round the target's connections in turn.

use super::target::Target;
use anyhow::{Context, Result};
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use futures::FutureExt;
use nbraid_core::Buf;
use nbraid_nbd::client::Client;
use std::cell::Cell;
use std::time::{Duration, Instant};

pub struct NbdTarget {
    name: String,
    rt: tokio::runtime::Runtime,
    conns: Vec<Client>,
    next: Cell<usize>,
    start: Instant,
}

impl NbdTarget {
    /// Connects `connections` times to `uri` (`nbd://host[:port]/export`,
    /// `nbd+unix:///export?socket=PATH`).
    pub fn connect(uri: &str, connections: usize) -> Result<NbdTarget> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the NBD client's runtime")?;
        let conns = rt.block_on(async {
            let mut v = Vec::new();
            for _ in 0..connections.max(1) {
                v.push(
                    Client::connect(uri)
                        .await
                        .with_context(|| format!("connecting to {uri}"))?,
                );
            }
            anyhow::Ok(v)
        })?;
        Ok(NbdTarget {
            name: uri.to_string(),
            rt,
            conns,
            next: Cell::new(0),
            start: Instant::now(),
        })
    }

    fn conn(&self) -> &Client {
        let i = self.next.get();
        self.next.set((i + 1) % self.conns.len());
        &self.conns[i]
    }
}

impl Drop for NbdTarget {
    fn drop(&mut self) {
        let conns = std::mem::take(&mut self.conns);
        self.rt.block_on(async {
            for c in &conns {
                c.disconnect().await;
            }
        });
    }
}

impl Target for NbdTarget {
    fn name(&self) -> &str {
        &self.name
    }

    fn len_bytes(&self) -> u64 {
        self.conns[0].size()
    }

    fn block_bytes(&self) -> u64 {
        u64::from(self.conns[0].info().min_block.max(1))
    }

    fn read(&self, offset: u64, mut buf: Buf) -> LocalBoxFuture<'_, Result<Buf>> {
        let c = self.conn();
        async move {
            let data = c.read(offset, buf.len()).await?;
            buf.copy_from_slice(&data);
            Ok(buf)
        }
        .boxed_local()
    }

    fn write(&self, offset: u64, buf: Buf) -> LocalBoxFuture<'_, Result<Buf>> {
        let c = self.conn();
        async move {
            c.write(offset, Bytes::copy_from_slice(&buf)).await?;
            Ok(buf)
        }
        .boxed_local()
    }

    fn flush(&self) -> LocalBoxFuture<'_, Result<()>> {
        // Every connection's writes: a flush covers only its own connection's.
        async move {
            futures::future::try_join_all(self.conns.iter().map(|c| c.flush())).await?;
            Ok(())
        }
        .boxed_local()
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn block_on(&self, work: LocalBoxFuture<'_, Result<()>>) -> Result<()> {
        self.rt.block_on(work)
    }
}

//! An NBD server as a target, through nbraid's async client (many requests in flight per
//! connection), on a single-threaded tokio runtime that drives the benchmark too. Requests
//! go round the target's connections in turn.
//!
//! Unless the run verifies data, the target does what fio's nbd engine does per request and
//! no more: read data is received into a buffer kept for reuse (not copied on into the
//! caller's), and a write sends one shared copy of the caller's bytes per length (the
//! driver's buffers hold the same fill then) instead of copying them each time. A 1 MiB
//! request otherwise paid two memcpys of its own on top of the socket's.

use super::target::Target;
use anyhow::{Context, Result};
use bytes::{Bytes, BytesMut};
use futures::future::LocalBoxFuture;
use futures::FutureExt;
use nbraid_core::Buf;
use nbraid_nbd::client::Client;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::time::{Duration, Instant};

pub struct NbdTarget {
    name: String,
    rt: tokio::runtime::Runtime,
    conns: Vec<Client>,
    next: Cell<usize>,
    start: Instant,
    /// Copy read data into the caller's buffer and send each write's own bytes (--verify).
    keep_data: bool,
    /// Without `keep_data`: the bytes sent for writes of each length.
    write_data: RefCell<HashMap<usize, Bytes>>,
    /// Buffers the client receives read data into, by length, reused.
    read_bufs: RefCell<HashMap<usize, Vec<BytesMut>>>,
}

impl NbdTarget {
    /// Connects `connections` times to `uri` (`nbd://host[:port]/export`,
    /// `nbd+unix:///export?socket=PATH`). `keep_data`: reads fill the caller's buffer and
    /// writes send its bytes (needed to verify); else see the module's note.
    pub fn connect(uri: &str, connections: usize, keep_data: bool) -> Result<NbdTarget> {
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
            keep_data,
            write_data: RefCell::default(),
            read_bufs: RefCell::default(),
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
        let len = buf.len();
        let dest = self.read_bufs.borrow_mut().get_mut(&len).and_then(Vec::pop);
        let dest = dest.unwrap_or_else(|| BytesMut::zeroed(len));
        async move {
            let data = c.read_into(offset, dest).await?;
            if self.keep_data {
                buf.copy_from_slice(&data);
            }
            self.read_bufs
                .borrow_mut()
                .entry(len)
                .or_default()
                .push(data);
            Ok(buf)
        }
        .boxed_local()
    }

    fn write(&self, offset: u64, buf: Buf) -> LocalBoxFuture<'_, Result<Buf>> {
        let c = self.conn();
        let data = if self.keep_data {
            Bytes::copy_from_slice(&buf)
        } else {
            self.write_data
                .borrow_mut()
                .entry(buf.len())
                .or_insert_with(|| Bytes::copy_from_slice(&buf))
                .clone()
        };
        async move {
            c.write(offset, data).await?;
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

//! An NBD server as a target, through nbraid's async client (many requests in flight per
//! connection), on a single-threaded tokio runtime that drives the benchmark too. Requests
//! go round the target's connections in turn.
//!
//! Unless the run verifies data, the target does what fio's nbd engine does per request and
//! no more: read data is received and dropped (not copied into the caller's buffer), and a
//! write sends one shared copy of the caller's bytes per length (the driver's buffers hold
//! the same fill then) instead of copying them each time. A 1 MiB request otherwise paid two
//! memcpys of its own on top of the socket's.

use super::target::Target;
use anyhow::{Context, Result};
use bytes::Bytes;
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
}

impl NbdTarget {
    /// Connects `connections` times to `uri` (`nbd://host[:port]/export`,
    /// `nbd+unix:///export?socket=PATH`). `keep_data`: reads fill the caller's buffer and
    /// writes send its bytes (needed to verify); else see the module's note.
    pub fn connect(uri: &str, connections: usize, keep_data: bool) -> Result<NbdTarget> {
        keep_large_buffers();
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
        })
    }

    fn conn(&self) -> &Client {
        let i = self.next.get();
        self.next.set((i + 1) % self.conns.len());
        &self.conns[i]
    }
}

/// The NBD client receives each read reply into a fresh buffer. glibc serves blocks of 128 KiB
/// and more by mmap until a free raises its threshold, and trims the heap's top, so 1 MiB
/// reads kept faulting in new pages: 320–375 µs of CPU per read against fio's 250; with large
/// blocks kept on the heap 148–162 µs (`nbraid bench seq-read --bs 1MiB --qd 8` on nbdkit's
/// memory plugin, three alternated pairs).
fn keep_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets glibc allocator thresholds (it takes the allocator's lock).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
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
            if self.keep_data {
                buf.copy_from_slice(&data);
            }
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

//! Exports the protocol tests share: one that holds reads at offset 0 until released, one
//! that answers some requests inline and others as tasks.

use super::*;

/// Wraps a memory export; reads at offset 0 wait for `release`, others pass.
pub(super) struct GatedExport {
    pub(super) inner: MemoryExport,
    /// `notify_one` lets one held read through; `open_all` every one, now and later.
    pub(super) release: Notify,
    pub(super) open: std::sync::atomic::AtomicBool,
    pub(super) barrier: Option<Barrier>,
    pub(super) active: AtomicUsize,
    pub(super) max_active: AtomicUsize,
}

impl Export for GatedExport {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Bytes>> {
        Box::pin(async move {
            let n = self.active.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_active.fetch_max(n, Ordering::SeqCst);
            if let Some(b) = &self.barrier {
                b.wait().await;
            }
            if offset == 0 && !self.open.load(Ordering::SeqCst) {
                let notified = self.release.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if !self.open.load(Ordering::SeqCst) {
                    notified.await;
                }
            }
            self.active.fetch_sub(1, Ordering::SeqCst);
            self.inner.read(offset, len).await
        })
    }
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, io::Result<()>> {
        self.inner.write(offset, data, fua)
    }
    fn flush(&self) -> BoxFuture<'_, io::Result<()>> {
        self.inner.flush()
    }
    fn write_zeroes(&self, o: u64, l: u32, f: ZeroFlags) -> BoxFuture<'_, io::Result<()>> {
        self.inner.write_zeroes(o, l, f)
    }
}

impl GatedExport {
    pub(super) fn open_all(&self) {
        self.open.store(true, Ordering::SeqCst);
        self.release.notify_waiters();
    }
}

pub(super) fn gated(barrier: Option<usize>) -> Arc<GatedExport> {
    Arc::new(GatedExport {
        inner: MemoryExport::new(4 * MIB),
        release: Notify::new(),
        open: std::sync::atomic::AtomicBool::new(false),
        barrier: barrier.map(Barrier::new),
        active: AtomicUsize::new(0),
        max_active: AtomicUsize::new(0),
    })
}

/// Odd 4 KiB blocks answer after a few yields (their requests run as tasks); the others
/// complete on the first poll, in the reader. Writes arrive in buffers from `incoming_write`.
pub(super) struct MixedExport {
    pub(super) inner: MemoryExport,
    pub(super) own_buffers: AtomicUsize,
}

/// A payload received into a `MixedExport`'s own buffer.
pub(super) struct TestIncoming {
    pub(super) export: Arc<MixedExport>,
    pub(super) offset: u64,
    pub(super) buf: Vec<u8>,
}

impl IncomingWrite for TestIncoming {
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf
    }
    fn write(self: Box<Self>, fua: bool) -> BoxFuture<'static, io::Result<()>> {
        Box::pin(async move {
            let TestIncoming {
                export,
                offset,
                buf,
            } = *self;
            export.own_buffers.fetch_add(1, Ordering::SeqCst);
            export.inner.write(offset, Bytes::from(buf), fua).await
        })
    }
}

impl Export for MixedExport {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Bytes>> {
        Box::pin(async move {
            if (offset / 4096) % 2 == 1 {
                for _ in 0..(offset / 4096) % 7 + 1 {
                    tokio::task::yield_now().await;
                }
            }
            self.inner.read(offset, len).await
        })
    }
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, io::Result<()>> {
        self.inner.write(offset, data, fua)
    }
    fn incoming_write(self: Arc<Self>, offset: u64, len: usize) -> Option<Box<dyn IncomingWrite>> {
        Some(Box::new(TestIncoming {
            export: self,
            offset,
            buf: vec![0; len],
        }))
    }
    fn flush(&self) -> BoxFuture<'_, io::Result<()>> {
        self.inner.flush()
    }
    fn write_zeroes(&self, o: u64, l: u32, f: ZeroFlags) -> BoxFuture<'_, io::Result<()>> {
        self.inner.write_zeroes(o, l, f)
    }
}

//! Writes longer than the inline limit of other requests: the reader polls them once itself
//! (`Session::dispatch`), and one whose export waits runs on as a task.

use super::*;

/// A memory export whose writes at offset 0 wait until released; everything else at once.
struct HeldAtZero {
    inner: MemoryExport,
    released: Notify,
    open: std::sync::atomic::AtomicBool,
}

impl Export for HeldAtZero {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Bytes>> {
        self.inner.read(offset, len)
    }
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move {
            while offset == 0 && !self.open.load(Ordering::SeqCst) {
                let released = self.released.notified();
                tokio::pin!(released);
                released.as_mut().enable();
                if self.open.load(Ordering::SeqCst) {
                    break;
                }
                released.await;
            }
            self.inner.write(offset, data, fua).await
        })
    }
    fn flush(&self) -> BoxFuture<'_, io::Result<()>> {
        self.inner.flush()
    }
    fn write_zeroes(&self, o: u64, l: u32, f: ZeroFlags) -> BoxFuture<'_, io::Result<()>> {
        self.inner.write_zeroes(o, l, f)
    }
}

/// Reads one simple reply; a read's (`cookie` in `reads`) with its `len` bytes of data.
async fn reply(c: &mut Client, reads: &[u64], len: usize) -> (u64, Option<Vec<u8>>) {
    let (err, cookie) = c.simple().await;
    assert_eq!(err, 0, "cookie {cookie} failed");
    if !reads.contains(&cookie) {
        return (cookie, None);
    }
    let mut data = vec![0u8; len];
    bounded(c.s.read_exact(&mut data)).await.unwrap();
    (cookie, Some(data))
}

/// A 1 MiB write whose export waits holds up neither the 1 MiB write behind it (done by the
/// reader at once) nor a read of what that one wrote; released, it completes, and its bytes
/// read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_long_write_holds_up_neither_long_writes_nor_reads_behind_it() {
    const LEN: usize = MIB as usize;
    let e = Arc::new(HeldAtZero {
        inner: MemoryExport::new(4 * MIB),
        released: Notify::new(),
        open: std::sync::atomic::AtomicBool::new(false),
    });
    let server = server_with(vec![("a", e.clone())]);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    let (first, second) = (pattern(LEN, 3), pattern(LEN, 7));
    c.write(1, 0, &first).await;
    c.write(2, MIB, &second).await;
    c.request(0, CMD_READ, 3, MIB, LEN as u32).await;
    let mut got = vec![
        reply(&mut c, &[3], LEN).await,
        reply(&mut c, &[3], LEN).await,
    ];
    got.sort_by_key(|(cookie, _)| *cookie);
    assert_eq!(got, vec![(2, None), (3, Some(second.clone()))]);
    assert_eq!(
        e.inner.contents(0, LEN),
        vec![0; LEN],
        "the first write waits"
    );
    e.open.store(true, Ordering::SeqCst);
    e.released.notify_waiters();
    assert_eq!(reply(&mut c, &[], 0).await, (1, None));
    c.request(0, CMD_READ, 4, 0, LEN as u32).await;
    assert_eq!(reply(&mut c, &[4], LEN).await, (4, Some(first)));
}

/// Many long writes in a row, each sent before the last one's reply was read, all land: what
/// a reply says is written reads back, whether the reader or a task wrote it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_writes_back_to_back_all_land() {
    const LEN: usize = 256 * 1024;
    let e = mem(16 * MIB);
    let server = server_with(vec![("a", e.clone())]);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    for i in 0..64u64 {
        c.write(i, (i % 64) * LEN as u64, &pattern(LEN, i as u8))
            .await;
    }
    let mut seen = std::collections::HashSet::new();
    for _ in 0..64 {
        let (cookie, _) = reply(&mut c, &[], 0).await;
        assert!(seen.insert(cookie), "cookie {cookie} answered twice");
    }
    for i in 0..64u64 {
        let at = i * LEN as u64;
        assert_eq!(e.contents(at, LEN), pattern(LEN, i as u8), "write {i}");
    }
}

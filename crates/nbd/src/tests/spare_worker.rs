//! Long reads and writes on a spare worker: a server given two single-threaded runtimes
//! (as the daemon's I/O workers) runs a connection alone on one and its long requests on the
//! other; with a connection on each, or with the limit off, every request stays on its
//! connection's worker. The bytes read back in every case.

use std::sync::Mutex;

use super::*;
use crate::client::Client as NbdClient;

/// A memory export that notes which thread served each read and write, and how long it was.
struct Noting {
    inner: MemoryExport,
    seen: Mutex<Vec<(u32, String)>>,
}

impl Noting {
    fn note(&self, len: usize) {
        let thread = std::thread::current().name().unwrap_or("").to_string();
        self.seen.lock().unwrap().push((len as u32, thread));
    }

    /// The thread of every request of `len` bytes.
    fn threads_of(&self, len: usize) -> Vec<String> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(l, _)| *l as usize == len)
            .map(|(_, t)| t.clone())
            .collect()
    }
}

impl Export for Noting {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Bytes>> {
        self.note(len as usize);
        self.inner.read(offset, len)
    }
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, io::Result<()>> {
        self.note(data.len());
        self.inner.write(offset, data, fua)
    }
    fn flush(&self) -> BoxFuture<'_, io::Result<()>> {
        self.inner.flush()
    }
    fn write_zeroes(&self, o: u64, l: u32, f: ZeroFlags) -> BoxFuture<'_, io::Result<()>> {
        self.inner.write_zeroes(o, l, f)
    }
}

/// Two threads named `worker-0` and `worker-1`, each running a current-thread runtime until
/// the returned senders are dropped.
fn two_workers() -> (
    Vec<tokio::runtime::Handle>,
    Vec<tokio::sync::oneshot::Sender<()>>,
) {
    let mut handles = Vec::new();
    let mut stops = Vec::new();
    for i in 0..2 {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(format!("worker-{i}"))
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                ready_tx.send(rt.handle().clone()).unwrap();
                rt.block_on(async {
                    let _ = stopped.await;
                });
            })
            .unwrap();
        handles.push(ready_rx.recv().unwrap());
        stops.push(stop);
    }
    (handles, stops)
}

const LONG: usize = MIB as usize;
const SHORT: usize = 4096;

/// Serves one `Noting` export on two workers with `limits`; runs `clients` connections at
/// once, each writing a long and a short request and reading both back (checked). Returns
/// the export, for its notes.
async fn run(limits: Limits, clients: usize) -> Arc<Noting> {
    let e = Arc::new(Noting {
        inner: MemoryExport::new(16 * MIB),
        seen: Mutex::new(Vec::new()),
    });
    let server =
        Server::with_limits(vec![("a".into(), e.clone() as Arc<dyn Export>)], limits).unwrap();
    let (runtimes, stops) = two_workers();
    server.run_connections_on(runtimes);
    let dir = tempfile::tempdir().unwrap();
    let listener = Listener::bind_unix(dir.path().join("s.sock")).unwrap();
    let uri = listener.uri("a");
    let s = server.clone();
    let serving = tokio::spawn(async move { s.serve(listener).await });
    // All connected before any request: each is counted on its worker from the start.
    let mut conns = Vec::new();
    for _ in 0..clients {
        conns.push(bounded(NbdClient::connect(&uri)).await.unwrap());
    }
    for (i, c) in conns.iter().enumerate() {
        let base = i as u64 * 4 * MIB;
        let long = Bytes::from(pattern(LONG, i as u8));
        let short = Bytes::from(pattern(SHORT, 100 + i as u8));
        bounded(c.write(base, long.clone())).await.unwrap();
        bounded(c.write(base + 2 * MIB, short.clone()))
            .await
            .unwrap();
        assert_eq!(
            bounded(c.read(base, LONG)).await.unwrap(),
            long,
            "long, client {i}"
        );
        let back = bounded(c.read(base + 2 * MIB, SHORT)).await.unwrap();
        assert_eq!(back, short, "short, client {i}");
    }
    drop(conns);
    bounded(server.shutdown()).await.unwrap();
    bounded(serving).await.unwrap();
    drop(stops);
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_connections_long_requests_run_on_the_spare_worker() {
    let e = run(Limits::default(), 1).await;
    let short = e.threads_of(SHORT);
    let long = e.threads_of(LONG);
    assert_eq!(short.len(), 2, "{short:?}");
    assert_eq!(long.len(), 2, "{long:?}");
    assert_eq!(
        short[0], short[1],
        "short requests stay on their connection's worker"
    );
    assert!(short[0].starts_with("worker-"), "{short:?}");
    for t in &long {
        assert!(
            t.starts_with("worker-") && *t != short[0],
            "long on {t}, short on {short:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_limit_off_long_requests_stay_on_their_connections_worker() {
    let limits = Limits {
        spare_worker_min_len: None,
        ..Limits::default()
    };
    let e = run(limits, 1).await;
    let mut all = e.threads_of(SHORT);
    all.extend(e.threads_of(LONG));
    assert_eq!(all.len(), 4);
    assert!(
        all.iter().all(|t| *t == all[0] && t.starts_with("worker-")),
        "{all:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_connection_on_every_worker_none_is_spare() {
    let e = run(Limits::default(), 2).await;
    let short = e.threads_of(SHORT);
    let long = e.threads_of(LONG);
    // Client i's requests come in order: its long write, short write, long read, short read.
    assert_eq!((short.len(), long.len()), (4, 4));
    assert_eq!(long[0], short[0], "client 0's long write on its own worker");
    assert_eq!(long[1], short[0], "client 0's long read on its own worker");
    assert_eq!(long[2], short[2], "client 1's long write on its own worker");
    assert_eq!(long[3], short[2], "client 1's long read on its own worker");
    assert_ne!(short[0], short[2], "one connection on each worker");
}

//! The async client against this crate's server, in-process (pipes and a Unix socket): every
//! command, both reply styles, many requests in flight with out-of-order completion, the
//! server's block sizes, splitting of long requests, and errors that name what went wrong.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use nbraid_nbd::client::{list_exports, Client, ClientError, ConnectOptions, Negotiation};
use nbraid_nbd::proto::{EIO, ENOTSUP, STATE_HOLE, STATE_ZERO};
use nbraid_nbd::{Export, Extent, Listener, MemoryExport, Server, ZeroFlags};
use rand::{Rng, SeedableRng};
use tokio::sync::Notify;

const MIB: u64 = 1 << 20;
const WAIT: Duration = Duration::from_secs(30);

async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(WAIT, f)
        .await
        .expect("no answer in time")
}

fn server(exports: Vec<(&str, Arc<dyn Export>)>) -> Server {
    Server::new(
        exports
            .into_iter()
            .map(|(n, e)| (n.to_string(), e))
            .collect(),
    )
    .unwrap()
}

async fn pipe(server: &Server, export: &str, how: Negotiation) -> Result<Client, ClientError> {
    let (a, b) = tokio::io::duplex(4 << 20);
    server.spawn_connection(b);
    let opts = ConnectOptions {
        negotiation: how,
        ..ConnectOptions::default()
    };
    bounded(Client::handshake(a, export, &opts)).await
}

fn pattern(len: usize, seed: u64) -> Bytes {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    Bytes::from(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_with_and_without_structured_replies() {
    let mem = Arc::new(MemoryExport::new(8 * MIB).with_description("scratch"));
    let srv = server(vec![("m", mem.clone())]);
    for structured in [true, false] {
        let how = Negotiation {
            structured,
            ..Negotiation::default()
        };
        let c = pipe(&srv, "m", how).await.unwrap();
        let info = c.info();
        assert_eq!(
            (info.size, info.min_block, info.structured),
            (8 * MIB, 512, structured)
        );
        assert!(info.block_size_negotiated);
        assert_eq!(info.description, "scratch");
        assert_eq!(info.base_allocation.is_some(), structured);

        let data = pattern(256 << 10, 1);
        c.write(MIB, data.clone()).await.unwrap();
        c.write_fua(2 * MIB, data.slice(..4096)).await.unwrap();
        assert_eq!(c.read(MIB, data.len()).await.unwrap(), data);
        assert_eq!(mem.contents(2 * MIB, 4096), data[..4096]);
        c.flush().await.unwrap();
        c.trim(MIB, 64 << 10).await.unwrap();
        c.write_zeroes(MIB + (64 << 10), 4096, ZeroFlags::default())
            .await
            .unwrap();
        let no_hole = ZeroFlags {
            may_trim: false,
            fua: true,
            fast_only: false,
        };
        c.write_zeroes(MIB + (128 << 10), 4096, no_hole)
            .await
            .unwrap();
        let back = c.read(MIB, 256 << 10).await.unwrap();
        assert!(back[64 << 10..(68 << 10)].iter().all(|&b| b == 0));
        assert!(back[128 << 10..(132 << 10)].iter().all(|&b| b == 0));
        assert_eq!(back[132 << 10..], data[132 << 10..]);
        c.cache(0, MIB).await.unwrap();
        assert_eq!(c.read(0, 0).await.unwrap().len(), 0);
        c.disconnect().await;
        assert!(matches!(
            c.read(0, 512).await,
            Err(ClientError::Disconnected(_))
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_status_reports_holes_and_data() {
    let mem = Arc::new(MemoryExport::new(4 * MIB));
    let srv = server(vec![("m", mem.clone())]);
    let c = pipe(&srv, "m", Negotiation::default()).await.unwrap();
    c.write(MIB, pattern(64 << 10, 2)).await.unwrap();
    let ex = c.block_status(0, 4 * MIB).await.unwrap();
    assert_eq!(
        ex[0],
        Extent {
            length: MIB as u32,
            flags: STATE_HOLE | STATE_ZERO
        }
    );
    assert_eq!(ex[1].flags, 0);
    assert!(ex.iter().map(|e| u64::from(e.length)).sum::<u64>() <= 4 * MIB);
    let plain = pipe(
        &srv,
        "m",
        Negotiation {
            structured: false,
            ..Negotiation::default()
        },
    )
    .await
    .unwrap();
    assert!(matches!(
        plain.block_status(0, 4096).await,
        Err(ClientError::Unsupported("base:allocation"))
    ));
}

/// Reads of offset 0 wait until released; everything else answers at once.
struct Held {
    inner: MemoryExport,
    open: AtomicBool,
    release: Notify,
}

impl Export for Held {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Bytes>> {
        Box::pin(async move {
            if offset == 0 {
                while !self.open.load(Ordering::SeqCst) {
                    let n = self.release.notified();
                    tokio::pin!(n);
                    n.as_mut().enable();
                    if self.open.load(Ordering::SeqCst) {
                        break;
                    }
                    n.await;
                }
            }
            if offset == 512 {
                return Err(io::Error::from_raw_os_error(libc_eio()));
            }
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

fn libc_eio() -> i32 {
    5
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_complete_out_of_order_on_one_connection() {
    let held = Arc::new(Held {
        inner: MemoryExport::new(4 * MIB),
        open: AtomicBool::new(false),
        release: Notify::new(),
    });
    held.inner.fill(4096, &pattern(64 * 4096, 3));
    let srv = server(vec![("h", held.clone())]);
    let c = pipe(&srv, "h", Negotiation::default()).await.unwrap();
    let first = tokio::spawn({
        let c = c.clone();
        async move { c.read(0, 4096).await }
    });
    // 64 reads issued after the held one all complete while it waits.
    let reads = (1..=64u64).map(|i| {
        let c = c.clone();
        async move { (i, c.read(i * 4096, 4096).await.unwrap()) }
    });
    for (i, got) in bounded(futures::future::join_all(reads)).await {
        assert_eq!(got, held.inner.contents(i * 4096, 4096));
    }
    assert!(!first.is_finished());
    // A server error reaches its own request, and only it.
    let err = c.read(512, 512).await.unwrap_err();
    assert_eq!(err.errno(), Some(EIO), "{err}");
    assert!(err.to_string().contains("READ at 512+512"), "{err}");
    held.open.store(true, Ordering::SeqCst);
    held.release.notify_waiters();
    assert_eq!(
        bounded(first).await.unwrap().unwrap(),
        held.inner.contents(0, 4096)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_against_a_model() {
    let size = 16 * MIB;
    let mem = Arc::new(MemoryExport::new(size).with_block_sizes(4096, 65536));
    let srv = server(vec![("m", mem.clone())]);
    let c = pipe(&srv, "m", Negotiation::default()).await.unwrap();
    // Each task owns its own 1 MiB region, so the model is exact whatever the interleaving.
    let tasks = (0..16u64).map(|t| {
        let c = c.clone();
        tokio::spawn(async move {
            let base = t * MIB;
            let mut model = vec![0u8; MIB as usize];
            let mut rng = rand::rngs::SmallRng::seed_from_u64(t);
            for step in 0..200 {
                let off = rng.gen_range(0..256u64) * 4096;
                let len = rng.gen_range(1..=(256 - off / 4096).min(16)) * 4096;
                let (o, l) = (off as usize, len as usize);
                match rng.gen_range(0..4) {
                    0 | 1 => {
                        let d = pattern(l, t * 1000 + step);
                        model[o..o + l].copy_from_slice(&d);
                        c.write(base + off, d).await.unwrap();
                    }
                    2 => {
                        model[o..o + l].fill(0);
                        c.write_zeroes(base + off, len, ZeroFlags::default())
                            .await
                            .unwrap();
                    }
                    _ => {
                        let got = c.read(base + off, l).await.unwrap();
                        assert_eq!(got[..], model[o..o + l], "task {t} step {step}");
                    }
                }
            }
            assert_eq!(c.read(base, MIB as usize).await.unwrap()[..], model[..]);
        })
    });
    for t in bounded(futures::future::join_all(tasks)).await {
        t.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_requests_are_split_and_block_sizes_honoured() {
    let mem = Arc::new(MemoryExport::new(80 * MIB).with_block_sizes(4096, 4096));
    let ro = Arc::new(MemoryExport::new(MIB).with_read_only(true));
    let srv = server(vec![("m", mem.clone()), ("ro", ro)]);
    let c = pipe(&srv, "m", Negotiation::default()).await.unwrap();
    assert_eq!((c.info().min_block, c.info().max_block), (4096, 32 << 20));
    // 70 MiB: three requests on the wire, one result.
    let big = pattern(70 << 20, 4);
    c.write(4096, big.clone()).await.unwrap();
    assert!(mem.contents(4096, 1 << 20) == big[..1 << 20]);
    assert_eq!(c.read(4096, big.len()).await.unwrap(), big);
    c.trim(0, 80 * MIB).await.unwrap();

    let e = c.read(100, 4096).await.unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Unaligned {
                min_block: 4096,
                ..
            }
        ),
        "{e}"
    );
    let e = c
        .write(80 * MIB, Bytes::from_static(&[0; 4096]))
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::OutOfRange { .. }), "{e}");
    assert!(e.to_string().contains("past the end"), "{e}");

    let r = pipe(&srv, "ro", Negotiation::default()).await.unwrap();
    assert!(r.info().read_only());
    assert!(matches!(
        r.write(0, Bytes::from_static(&[1; 512])).await,
        Err(ClientError::ReadOnly)
    ));
    assert!(matches!(r.trim(0, 512).await, Err(ClientError::ReadOnly)));
    let e = pipe(&srv, "nope", Negotiation::default())
        .await
        .unwrap_err();
    assert!(
        matches!(e, ClientError::UnknownExport(ref n) if n == "nope"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_name_handshake_and_fast_zero_refusal() {
    let mem = Arc::new(MemoryExport::new(4 * MIB));
    let srv = server(vec![("m", mem.clone())]);
    let how = Negotiation {
        export_name_only: true,
        ..Negotiation::default()
    };
    let c = pipe(&srv, "m", how).await.unwrap();
    assert!(!c.info().block_size_negotiated);
    assert_eq!(c.info().min_block, 1);
    c.write(0, pattern(4096, 5)).await.unwrap();
    assert_eq!(c.read(0, 4096).await.unwrap(), pattern(4096, 5));
    let e = pipe(&srv, "nope", how_export_name()).await.unwrap_err();
    assert!(matches!(e, ClientError::UnknownExport(_)), "{e}");

    /// An export whose zeroing is never fast.
    struct Slow(MemoryExport);
    impl Export for Slow {
        fn size(&self) -> u64 {
            self.0.size()
        }
        fn read(&self, o: u64, l: u32) -> BoxFuture<'_, io::Result<Bytes>> {
            self.0.read(o, l)
        }
        fn write(&self, o: u64, d: Bytes, f: bool) -> BoxFuture<'_, io::Result<()>> {
            self.0.write(o, d, f)
        }
        fn flush(&self) -> BoxFuture<'_, io::Result<()>> {
            self.0.flush()
        }
        fn write_zeroes(&self, o: u64, l: u32, f: ZeroFlags) -> BoxFuture<'_, io::Result<()>> {
            if f.fast_only {
                return Box::pin(async { Err(io::ErrorKind::Unsupported.into()) });
            }
            self.0.write_zeroes(o, l, f)
        }
    }
    let srv = server(vec![("s", Arc::new(Slow(MemoryExport::new(MIB))))]);
    let c = pipe(&srv, "s", Negotiation::default()).await.unwrap();
    let fast = ZeroFlags {
        fast_only: true,
        ..ZeroFlags::default()
    };
    let e = c.write_zeroes(0, 4096, fast).await.unwrap_err();
    assert_eq!(e.errno(), Some(ENOTSUP), "{e}");
}

fn how_export_name() -> Negotiation {
    Negotiation {
        export_name_only: true,
        ..Negotiation::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_uri_list_and_server_going_away() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let a = Arc::new(MemoryExport::new(MIB).with_description("first"));
    let b = Arc::new(MemoryExport::new(2 * MIB));
    let srv = server(vec![("a", a), ("b", b)]);
    let l = Listener::bind_unix(&sock).unwrap();
    let uri = l.uri("b");
    let task = tokio::spawn({
        let s = srv.clone();
        async move { s.serve(l).await }
    });
    let listed = list_exports(&uri).await.unwrap();
    let names: Vec<_> = listed
        .iter()
        .map(|e| (e.name.as_str(), e.description.as_str()))
        .collect();
    assert_eq!(names, [("a", "first"), ("b", "")]);
    let c = Client::connect(&uri).await.unwrap();
    assert_eq!(c.size(), 2 * MIB);
    c.write(0, pattern(8192, 6)).await.unwrap();
    // Dropping request futures half way leaves the connection usable.
    for _ in 0..50 {
        let _ = tokio::time::timeout(Duration::from_micros(1), c.read(0, 8192)).await;
    }
    assert_eq!(c.read(0, 8192).await.unwrap(), pattern(8192, 6));
    let e = Client::connect("nbd+unix:///b?socket=/nonexistent/x.sock")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("/nonexistent/x.sock"), "{e}");
    // The server shuts down: a request after that fails naming why, it does not hang.
    bounded(srv.shutdown()).await.unwrap();
    bounded(task).await.unwrap();
    let e = bounded(c.read(0, 4096)).await.unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Disconnected(_) | ClientError::Server { .. } | ClientError::Io(_)
        ),
        "{e}"
    );
}

#[tokio::test]
async fn unix_listener_uris_are_absolute() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = std::env::current_dir().unwrap();
    // A path relative to the working directory, as a config's `./nbd.sock` resolves to.
    let rel = pathdiff(dir.path(), &cwd).join("rel.sock");
    assert!(rel.is_relative());
    let l = Listener::bind_unix(&rel).unwrap();
    let uri = l.uri("vol");
    let sock = uri.split("socket=").nth(1).unwrap();
    assert!(sock.starts_with('/'), "{uri}");
    assert_eq!(std::path::Path::new(sock), dir.path().join("rel.sock"));
}

/// `to` relative to `from` (both absolute), with `..` steps.
fn pathdiff(to: &std::path::Path, from: &std::path::Path) -> std::path::PathBuf {
    let ups = from.components().count() - 1;
    let mut p: std::path::PathBuf = (0..ups).map(|_| "..").collect();
    p.push(to.strip_prefix("/").unwrap());
    p
}

/// `read_into` receives into the caller's buffer — split requests each into their part, holes
/// as zeroes over whatever the buffer held — and hands back the same allocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_into_fills_the_callers_buffer() {
    for structured in [false, true] {
        let mem = Arc::new(MemoryExport::new(48 * MIB).with_block_sizes(4096, 4096));
        let srv = server(vec![("m", mem.clone())]);
        let how = Negotiation {
            structured,
            ..Negotiation::default()
        };
        let c = pipe(&srv, "m", how).await.unwrap();
        // 40 MiB: two requests of the 32 MiB maximum and less.
        let data = pattern(40 << 20, 7);
        c.write(4096, data.clone()).await.unwrap();
        let buf = BytesMut::from(&vec![0xee; data.len()][..]);
        let at = buf.as_ptr();
        let got = bounded(c.read_into(4096, buf)).await.unwrap();
        assert!(got[..] == data[..], "structured {structured}");
        assert_eq!(got.as_ptr(), at, "the caller's buffer comes back");

        c.trim(0, 64 << 10).await.unwrap();
        let buf = BytesMut::from(&[0xee; 128 << 10][..]);
        let got = c.read_into(0, buf).await.unwrap();
        assert_eq!(got[..], c.read(0, 128 << 10).await.unwrap()[..]);
        assert!(got[..64 << 10].iter().all(|&b| b == 0));
        assert!(got[64 << 10..] == data[(64 << 10) - 4096..(128 << 10) - 4096]);
        let e = c.read_into(100, BytesMut::zeroed(4096)).await.unwrap_err();
        assert!(matches!(e, ClientError::Unaligned { .. }), "{e}");
    }
}

/// Panics on a write at 4 KiB and on a read at 1 MiB (a bug in an export); else memory.
struct Buggy(MemoryExport);

impl Export for Buggy {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Bytes>> {
        Box::pin(async move {
            // After a wait, as a request that runs as its own task does.
            tokio::task::yield_now().await;
            assert!(offset != MIB, "an export bug on a read");
            self.0.read(offset, len).await
        })
    }
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, io::Result<()>> {
        assert!(offset != 4096, "an export bug on a write");
        self.0.write(offset, data, fua)
    }
    fn flush(&self) -> BoxFuture<'_, io::Result<()>> {
        self.0.flush()
    }
    fn write_zeroes(&self, o: u64, l: u32, f: ZeroFlags) -> BoxFuture<'_, io::Result<()>> {
        self.0.write_zeroes(o, l, f)
    }
}

/// A request whose export panics is answered `EIO` (the client is not left waiting), and the
/// connection serves the next requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_export_panics_fails_with_eio_and_the_connection_goes_on() {
    let buggy = Arc::new(Buggy(MemoryExport::new(4 * MIB)));
    let srv = server(vec![("b", buggy.clone())]);
    for structured in [true, false] {
        let how = Negotiation {
            structured,
            ..Negotiation::default()
        };
        let c = pipe(&srv, "b", how).await.unwrap();
        let err = bounded(c.write(4096, pattern(4096, 1))).await.unwrap_err();
        assert_eq!(err.errno(), Some(EIO), "{err}");
        let err = bounded(c.read(MIB, 256 << 10)).await.unwrap_err();
        assert_eq!(err.errno(), Some(EIO), "{err}");
        let data = pattern(8192, 2);
        bounded(c.write(2 * MIB, data.clone())).await.unwrap();
        assert_eq!(bounded(c.read(2 * MIB, 8192)).await.unwrap(), data);
    }
}

//! Clients that negotiated no block size (`EXPORT_NAME`, or `GO` without
//! `NBD_INFO_BLOCK_SIZE`) may send requests unaligned to the export's 4 KiB block: the server
//! read-modify-writes the partial blocks, and neighbouring writes from many connections at
//! once never tear each other. Clients: this crate's client told not to negotiate block sizes,
//! and the crates.io `nbd` crate (`EXPORT_NAME`, reads and writes of any length).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use nbraid_nbd::client::{Client, ConnectOptions, Negotiation};
use nbraid_nbd::{Export, Extent, Listener, MemoryExport, Server, ZeroFlags};
use rand::{Rng, SeedableRng};

const MIB: u64 = 1 << 20;

/// A 4 KiB-block memory export whose reads take a while: a read-modify-write's window between
/// reading a block and writing it back is wide open to anything that could tear it.
struct Slow(MemoryExport);

impl Export for Slow {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn min_block(&self) -> u32 {
        4096
    }
    fn can_block_status(&self) -> bool {
        true
    }
    fn read(&self, o: u64, l: u32) -> BoxFuture<'_, io::Result<Bytes>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_micros(300)).await;
            self.0.read(o, l).await
        })
    }
    fn write(&self, o: u64, d: Bytes, f: bool) -> BoxFuture<'_, io::Result<()>> {
        assert_eq!(
            (o % 4096, d.len() % 4096),
            (0, 0),
            "unaligned write reached the export"
        );
        self.0.write(o, d, f)
    }
    fn flush(&self) -> BoxFuture<'_, io::Result<()>> {
        self.0.flush()
    }
    fn trim(&self, o: u64, l: u32, f: bool) -> BoxFuture<'_, io::Result<()>> {
        assert_eq!(
            (o % 4096, l % 4096),
            (0, 0),
            "unaligned trim reached the export"
        );
        self.0.trim(o, l, f)
    }
    fn write_zeroes(&self, o: u64, l: u32, f: ZeroFlags) -> BoxFuture<'_, io::Result<()>> {
        assert_eq!(
            (o % 4096, l % 4096),
            (0, 0),
            "unaligned zeroing reached the export"
        );
        self.0.write_zeroes(o, l, f)
    }
    fn block_status(&self, o: u64, l: u32) -> BoxFuture<'_, io::Result<Vec<Extent>>> {
        self.0.block_status(o, l)
    }
}

fn slow(size: u64) -> Arc<Slow> {
    Arc::new(Slow(MemoryExport::new(size).with_block_sizes(4096, 4096)))
}

struct Fixture {
    server: Server,
    uri: String,
    _dir: tempfile::TempDir,
}

async fn serve(export: Arc<dyn Export>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::new(vec![("e".into(), export)]).unwrap();
    let l = Listener::bind_unix(dir.path().join("s.sock")).unwrap();
    let uri = l.uri("e");
    tokio::spawn({
        let s = server.clone();
        async move { s.serve(l).await }
    });
    Fixture {
        server,
        uri,
        _dir: dir,
    }
}

async fn byte_client(uri: &str) -> Client {
    let opts = ConnectOptions {
        negotiation: Negotiation {
            block_size: false,
            ..Negotiation::default()
        },
        ..ConnectOptions::default()
    };
    let c = Client::connect_with(&nbraid_nbd::client::Uri::parse(uri).unwrap(), &opts)
        .await
        .unwrap();
    assert!(!c.info().block_size_negotiated);
    c
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rand::rngs::SmallRng::seed_from_u64(seed).fill(&mut v[..]);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neighbouring_unaligned_writes_from_many_connections_never_tear() {
    let fx = serve(slow(MIB)).await;
    // 16 KiB cut into 100-byte runs; run r belongs to task r % 8. Every block holds runs of
    // every task, so each write's edge read-modify-write races all the others.
    const AREA: usize = 16 << 10;
    const RUN: usize = 100;
    let tasks = (0..8usize).map(|t| {
        let uri = fx.uri.clone();
        tokio::spawn(async move {
            let c = byte_client(&uri).await;
            let mut mine = vec![0u8; AREA];
            let mut rng = rand::rngs::SmallRng::seed_from_u64(t as u64);
            let runs: Vec<usize> = (0..AREA / RUN).filter(|r| r % 8 == t).collect();
            let writes = (0..40).map(|i| {
                let r = runs[rng.gen_range(0..runs.len())];
                let d = pattern(RUN, (t * 1000 + i) as u64);
                mine[r * RUN..(r + 1) * RUN].copy_from_slice(&d);
                (r, d)
            });
            // Several of this task's writes in flight at once too.
            let writes: Vec<_> = writes.collect();
            for group in writes.chunks(4) {
                let f = group
                    .iter()
                    .map(|(r, d)| c.write((r * RUN) as u64, Bytes::from(d.clone())));
                for res in futures::future::join_all(f).await {
                    res.unwrap();
                }
            }
            (t, mine, runs)
        })
    });
    let results = futures::future::join_all(tasks).await;
    let c = byte_client(&fx.uri).await;
    let all = c.read(0, AREA).await.unwrap();
    for res in results {
        let (t, mine, runs) = res.unwrap();
        for r in runs {
            let at = r * RUN;
            assert!(
                all[at..at + RUN] == mine[at..at + RUN],
                "task {t}'s run {r} was torn"
            );
        }
    }
    fx.server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unaligned_io_against_a_model() {
    let mem = slow(8 * MIB);
    let fx = serve(mem.clone()).await;
    let c = byte_client(&fx.uri).await;
    let mut model = vec![0u8; 8 * MIB as usize];
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    for step in 0..300u64 {
        let off = rng.gen_range(0..8 * MIB - 300_000);
        let len = match rng.gen_range(0..3) {
            0 => rng.gen_range(1..600),
            1 => rng.gen_range(1..20_000),
            _ => rng.gen_range(1..300_000),
        };
        let (o, l) = (off as usize, len as usize);
        match rng.gen_range(0..4) {
            0 | 1 => {
                let d = pattern(l, step);
                model[o..o + l].copy_from_slice(&d);
                c.write(off, Bytes::from(d)).await.unwrap();
            }
            2 => {
                model[o..o + l].fill(0);
                c.write_zeroes(off, len as u64, ZeroFlags::default())
                    .await
                    .unwrap();
            }
            _ => {
                let got = c.read(off, l).await.unwrap();
                assert!(got[..] == model[o..o + l], "step {step}: read {off}+{len}");
            }
        }
    }
    assert!(mem.0.contents(0, model.len()) == model);

    // A trim leaves the partial edge blocks alone.
    c.write(0, Bytes::from(vec![9u8; 3 * 4096])).await.unwrap();
    c.trim(100, 2 * 4096).await.unwrap();
    let back = c.read(0, 3 * 4096).await.unwrap();
    assert!(back[..4096].iter().all(|&b| b == 9));
    assert!(back[2 * 4096..].iter().all(|&b| b == 9));

    // Block status of an unaligned range starts at the offset asked for.
    let punch = ZeroFlags {
        may_trim: true,
        ..ZeroFlags::default()
    };
    c.write_zeroes(2 * MIB, MIB, punch).await.unwrap();
    c.write(3 * MIB, Bytes::from(vec![1u8; 4096]))
        .await
        .unwrap();
    let ex = c.block_status(2 * MIB + 1000, MIB).await.unwrap();
    assert_eq!(u64::from(ex[0].length), MIB - 1000, "{ex:?}");
    assert_ne!(ex[0].flags & nbraid_nbd::proto::STATE_ZERO, 0, "{ex:?}");
    assert_eq!(ex[1].flags, 0, "{ex:?}");
    assert!(ex.iter().map(|e| u64::from(e.length)).sum::<u64>() <= MIB);

    // Fast zeroing of a partial block is refused at once.
    let fast = ZeroFlags {
        fast_only: true,
        ..ZeroFlags::default()
    };
    let e = c.write_zeroes(10, 100, fast).await.unwrap_err();
    assert_eq!(e.errno(), Some(nbraid_nbd::proto::ENOTSUP), "{e}");
    fx.server.shutdown().await.unwrap();
}

/// A 4 KiB-block memory export that holds every request open around the moment it touches the
/// data: a read copies the data first and answers `HOLD` later; a write waits `HOLD` and then
/// stores. A read-modify-write therefore reads its block long before it writes it back, and an
/// aligned write stays in flight long after it began: any write landing in between would be
/// lost unless the server keeps them apart.
struct Holding {
    mem: MemoryExport,
    read_began: tokio::sync::Notify,
    write_began: tokio::sync::Notify,
}

const HOLD: Duration = Duration::from_millis(100);

impl Export for Holding {
    fn size(&self) -> u64 {
        self.mem.size()
    }
    fn min_block(&self) -> u32 {
        4096
    }
    fn read(&self, o: u64, l: u32) -> BoxFuture<'_, io::Result<Bytes>> {
        Box::pin(async move {
            let data = self.mem.read(o, l).await;
            self.read_began.notify_one();
            tokio::time::sleep(HOLD).await;
            data
        })
    }
    fn write(&self, o: u64, d: Bytes, f: bool) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move {
            self.write_began.notify_one();
            tokio::time::sleep(HOLD).await;
            self.mem.write(o, d, f).await
        })
    }
    fn flush(&self) -> BoxFuture<'_, io::Result<()>> {
        self.mem.flush()
    }
    fn write_zeroes(&self, o: u64, l: u32, f: ZeroFlags) -> BoxFuture<'_, io::Result<()>> {
        self.mem.write_zeroes(o, l, f)
    }
}

/// Which of the two racing writes reaches the export first.
#[derive(Clone, Copy, Debug)]
enum First {
    /// The read-modify-write has read its block when the aligned write arrives.
    Unaligned,
    /// The aligned write is in flight when the read-modify-write arrives.
    Aligned,
}

/// An aligned client writes block 0 whole while a byte-granular client writes bytes
/// `[1000, 1100)` of it: whatever their order, every byte of the block outside those 100 is the
/// aligned write's (the read-modify-write must never put old bytes back over it).
async fn race_aligned_and_unaligned_writes(first: First) {
    let export = Arc::new(Holding {
        mem: MemoryExport::new(MIB).with_block_sizes(4096, 4096),
        read_began: tokio::sync::Notify::new(),
        write_began: tokio::sync::Notify::new(),
    });
    let fx = serve(export.clone()).await;
    let aligned = Client::connect(&fx.uri).await.unwrap();
    assert!(aligned.info().block_size_negotiated);
    let bytes = byte_client(&fx.uri).await;
    let whole = Bytes::from(vec![0xAA; 4096]);
    let part = Bytes::from(vec![0x55; 100]);

    let (unaligned_done, aligned_done) = match first {
        First::Unaligned => {
            let u = tokio::spawn(async move { bytes.write(1000, part).await });
            export.read_began.notified().await;
            let a = tokio::spawn(async move { aligned.write(0, whole).await });
            (u.await.unwrap(), a.await.unwrap())
        }
        First::Aligned => {
            let a = tokio::spawn(async move { aligned.write(0, whole).await });
            export.write_began.notified().await;
            let u = tokio::spawn(async move { bytes.write(1000, part).await });
            (u.await.unwrap(), a.await.unwrap())
        }
    };
    unaligned_done.unwrap();
    aligned_done.unwrap();

    let block = export.mem.contents(0, 4096);
    let outside = block[..1000].iter().chain(&block[1100..]);
    assert!(
        outside.into_iter().all(|&b| b == 0xAA),
        "{first:?} first: the read-modify-write put old bytes back over the aligned write"
    );
    let inside = &block[1000..1100];
    assert!(
        inside.iter().all(|&b| b == 0x55) || inside.iter().all(|&b| b == 0xAA),
        "{first:?} first: the patched bytes are torn"
    );
    fx.server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aligned_write_arriving_during_a_read_modify_write_is_not_lost() {
    race_aligned_and_unaligned_writes(First::Unaligned).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_modify_write_arriving_during_an_aligned_write_does_not_undo_it() {
    race_aligned_and_unaligned_writes(First::Aligned).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbd_crate_unaligned_reads_and_writes_from_two_connections() {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mem = slow(4 * MIB);
    let fx = serve(mem.clone()).await;
    let path = fx.uri.split("socket=").nth(1).unwrap().to_string();
    // Two threads, each its own connection, write interleaved 333-byte runs of one area.
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let path = path.clone();
            tokio::task::spawn_blocking(move || {
                let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
                let export = nbd::client::handshake(&mut s, b"e").unwrap();
                let mut c = nbd::client::NbdClient::new(&mut s, &export);
                let mut mine = Vec::new();
                for i in 0..60u64 {
                    let at = (2 * i + t) * 333 + 77;
                    let d = pattern(333, t * 100 + i);
                    c.seek(SeekFrom::Start(at)).unwrap();
                    c.write_all(&d).unwrap();
                    mine.push((at, d));
                }
                // Reads of odd lengths at odd places.
                for (at, d) in &mine {
                    let mut back = vec![0u8; 111];
                    c.seek(SeekFrom::Start(at + 5)).unwrap();
                    c.read_exact(&mut back).unwrap();
                    assert!(back[..] == d[5..116]);
                }
                mine
            })
        })
        .collect();
    for t in threads {
        for (at, d) in t.await.unwrap() {
            assert!(mem.0.contents(at, d.len()) == d, "run at {at} torn");
        }
    }
    fx.server.shutdown().await.unwrap();
}

fn run_tool(cmd: &mut std::process::Command) -> String {
    let name = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{name} is required (scripts/test installs it): {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name} failed: {text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libnbd_without_block_size_and_qemu_io_write_unaligned() {
    let mem = slow(4 * MIB);
    let fx = serve(mem.clone()).await;
    // libnbd told not to request block sizes: GO without NBD_INFO_BLOCK_SIZE.
    // Debian's python3-libnbd, with the system interpreter (PATH may name another).
    let script = r#"
import nbd
h = nbd.NBD()
h.set_request_block_size(False)
h.set_strict_mode(0)
h.connect_uri(uri)
h.pwrite(b"\x11" * 1000, 100)
h.pwrite(b"\x22" * 5000, 4000)
assert h.pread(1000, 100) == b"\x11" * 1000
assert h.pread(5000, 4000) == b"\x22" * 5000
assert h.pread(10, 95) == bytes(5) + b"\x11" * 5
h.zero(50, 4050)
assert h.pread(60, 4040) == b"\x22" * 10 + bytes(50)
h.shutdown()
"#;
    let uri = fx.uri.clone();
    tokio::task::spawn_blocking(move || {
        let code = format!("uri = {uri:?}\n{script}");
        run_tool(std::process::Command::new("/usr/bin/python3").args(["-c", &code]))
    })
    .await
    .unwrap();
    assert!(mem.0.contents(4050, 50) == vec![0u8; 50]);
    assert!(mem.0.contents(4100, 4900) == vec![0x22u8; 4900]);
    // qemu-io negotiates the 4 KiB block and does its own read-modify-write.
    let uri = fx.uri.clone();
    tokio::task::spawn_blocking(move || {
        run_tool(std::process::Command::new("qemu-io").args([
            "-f",
            "raw",
            "-c",
            "write -P 0x33 12345 777",
            "-c",
            "read -P 0x33 12345 777",
            &uri,
        ]))
    })
    .await
    .unwrap();
    assert!(mem.0.contents(12345, 777) == vec![0x33u8; 777]);
    fx.server.shutdown().await.unwrap();
}

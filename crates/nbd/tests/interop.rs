//! Interoperability with NBD implementations we did not write: this crate's async client
//! against `nbdkit` (memory plugin, on a Unix socket and on loopback TCP, with and without
//! block-size constraints), and the crates.io `nbd` crate's synchronous client against this
//! crate's server and against nbdkit. A missing nbdkit fails the test (scripts/test installs
//! it).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nbraid_nbd::client::{list_exports, Client, ClientError};
use nbraid_nbd::proto::{STATE_HOLE, TFLAG_SEND_FAST_ZERO};
use nbraid_nbd::{Export, Listener, MemoryExport, Server, ZeroFlags};
use rand::{Rng, SeedableRng};

const MIB: u64 = 1 << 20;

/// An `nbdkit` child, killed on drop.
struct Nbdkit {
    child: Child,
    uri: String,
    _dir: tempfile::TempDir,
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn require_nbdkit() {
    let ok = Command::new("nbdkit")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "nbdkit is required (apt-get install nbdkit; scripts/test installs it)"
    );
}

/// Starts `nbdkit [filters] memory SIZE [params]` on a Unix socket or a loopback port.
async fn nbdkit(tcp: bool, filters: &[&str], size: &str, params: &[&str]) -> Nbdkit {
    require_nbdkit();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kit.sock");
    let mut cmd = Command::new("nbdkit");
    cmd.args(["--foreground", "--exit-with-parent"]);
    let uri = if tcp {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        cmd.args(["-i", "127.0.0.1", "-p", &port.to_string()]);
        format!("nbd://127.0.0.1:{port}/")
    } else {
        cmd.arg("-U").arg(&sock);
        format!("nbd+unix:///?socket={}", sock.display())
    };
    for f in filters {
        cmd.arg(format!("--filter={f}"));
    }
    cmd.args(["memory", size]).args(params);
    let child = cmd
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting nbdkit");
    let kit = Nbdkit {
        child,
        uri,
        _dir: dir,
    };
    wait_ready(&kit.uri, if tcp { None } else { Some(sock.as_path()) }).await;
    kit
}

async fn wait_ready(uri: &str, sock: Option<&Path>) {
    for _ in 0..200 {
        if sock.is_none_or(|s| s.exists()) && list_exports(uri).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("nbdkit did not come up at {uri}");
}

fn pattern(len: usize, seed: u64) -> Bytes {
    let mut v = vec![0u8; len];
    rand::rngs::SmallRng::seed_from_u64(seed).fill(&mut v[..]);
    Bytes::from(v)
}

/// Random concurrent I/O from 8 tasks, each in its own region, checked against a model.
async fn model_run(c: &Client, seed: u64) {
    let region = c.size() / 8;
    let tasks = (0..8u64).map(|t| {
        let c = c.clone();
        tokio::spawn(async move {
            let base = t * region;
            let blocks = region / 4096;
            let mut model = vec![0u8; region as usize];
            // Start from a known state.
            c.write_zeroes(base, region, ZeroFlags::default())
                .await
                .unwrap();
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed + t);
            for step in 0..150u64 {
                let b = rng.gen_range(0..blocks);
                let n = rng.gen_range(1..=(blocks - b).min(32));
                let (o, l) = ((b * 4096) as usize, (n * 4096) as usize);
                match rng.gen_range(0..5) {
                    0 | 1 => {
                        let d = pattern(l, seed * 7 + t * 1000 + step);
                        model[o..o + l].copy_from_slice(&d);
                        c.write(base + o as u64, d).await.unwrap();
                    }
                    2 => {
                        model[o..o + l].fill(0);
                        c.write_zeroes(base + o as u64, l as u64, ZeroFlags::default())
                            .await
                            .unwrap();
                    }
                    3 => c.flush().await.unwrap(),
                    _ => {
                        let got = c.read(base + o as u64, l).await.unwrap();
                        assert!(got[..] == model[o..o + l], "task {t} step {step}");
                    }
                }
            }
            let all = c.read(base, region as usize).await.unwrap();
            assert!(all[..] == model[..], "task {t} at the end");
        })
    });
    for t in futures::future::join_all(tasks).await {
        t.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_against_nbdkit_memory_on_unix_and_tcp() {
    for tcp in [false, true] {
        let kit = nbdkit(tcp, &[], "64M", &[]).await;
        let c = Client::connect(&kit.uri).await.unwrap();
        let info = c.info().clone();
        assert_eq!(info.size, 64 * MIB);
        assert!(
            info.structured && info.base_allocation.is_some(),
            "{info:?}"
        );
        assert!(info.has(TFLAG_SEND_FAST_ZERO));
        model_run(&c, 10 + tcp as u64).await;

        // Holes: nbdkit's memory plugin reports trimmed space as holes.
        c.trim(0, 64 * MIB).await.unwrap();
        c.write(8 * MIB, pattern(1 << 20, 1)).await.unwrap();
        let ex = c.block_status(0, 64 * MIB).await.unwrap();
        assert_ne!(ex[0].flags & STATE_HOLE, 0, "{ex:?}");
        assert_eq!(u64::from(ex[0].length), 8 * MIB, "{ex:?}");
        let data = c.block_status(8 * MIB, MIB).await.unwrap();
        assert_eq!(data[0].flags & STATE_HOLE, 0, "{data:?}");
        let e = c.read(64 * MIB, 4096).await.unwrap_err();
        assert!(matches!(e, ClientError::OutOfRange { .. }), "{e}");
        c.disconnect().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_honours_nbdkit_block_sizes() {
    // Minimum 4 KiB, maximum 64 KiB: unaligned requests are refused before they are sent,
    // and a 1 MiB write goes out as 16 requests.
    let kit = nbdkit(
        false,
        &["blocksize-policy"],
        "16M",
        &[
            "blocksize-minimum=4096",
            "blocksize-preferred=65536",
            "blocksize-maximum=65536",
            "blocksize-error-policy=error",
        ],
    )
    .await;
    let c = Client::connect(&kit.uri).await.unwrap();
    let info = c.info();
    assert_eq!(
        (info.min_block, info.preferred_block, info.max_block),
        (4096, 65536, 65536)
    );
    let e = c.read(512, 4096).await.unwrap_err();
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
    let d = pattern(1 << 20, 2);
    c.write(4096, d.clone()).await.unwrap();
    assert_eq!(c.read(4096, d.len()).await.unwrap(), d);
}

/// The crates.io `nbd` crate: synchronous, one request at a time, `NBD_OPT_EXPORT_NAME`
/// only, simple replies only. Used here as an independent second client.
fn nbd_crate_round_trip(stream: std::os::unix::net::UnixStream, name: &str, seed: u64) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut s = stream;
    let export = nbd::client::handshake(&mut s, name.as_bytes()).unwrap();
    assert!(export.size >= 4 * MIB);
    let mut c = nbd::client::NbdClient::new(&mut s, &export);
    let data = pattern(256 << 10, seed);
    c.seek(SeekFrom::Start(MIB)).unwrap();
    c.write_all(&data).unwrap();
    c.flush().unwrap();
    let mut back = vec![0u8; data.len()];
    c.seek(SeekFrom::Start(MIB)).unwrap();
    c.read_exact(&mut back).unwrap();
    assert!(back == data[..]);
    back
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nbd_crate_client_against_our_server_and_nbdkit() {
    // Our server, written by the nbd crate, read back by our client.
    let dir = tempfile::tempdir().unwrap();
    let sock: PathBuf = dir.path().join("ours.sock");
    let mem = Arc::new(MemoryExport::new(8 * MIB));
    let server = Server::new(vec![("m".into(), mem.clone() as Arc<dyn Export>)]).unwrap();
    let l = Listener::bind_unix(&sock).unwrap();
    let uri = l.uri("m");
    let task = tokio::spawn({
        let s = server.clone();
        async move { s.serve(l).await }
    });
    let s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    let written = tokio::task::spawn_blocking(move || nbd_crate_round_trip(s, "m", 3))
        .await
        .unwrap();
    let c = Client::connect(&uri).await.unwrap();
    assert_eq!(c.read(MIB, written.len()).await.unwrap(), written);
    server.shutdown().await.unwrap();
    task.await.unwrap();

    // nbdkit, written by the nbd crate, read back by our client.
    let kit = nbdkit(false, &[], "8M", &[]).await;
    let path = kit.uri.split("socket=").nth(1).unwrap().to_string();
    let s = std::os::unix::net::UnixStream::connect(path).unwrap();
    let written = tokio::task::spawn_blocking(move || nbd_crate_round_trip(s, "", 4))
        .await
        .unwrap();
    let c = Client::connect(&kit.uri).await.unwrap();
    assert_eq!(c.read(MIB, written.len()).await.unwrap(), written);
}

//! The client's own cost: N requests kept in flight through one `Client` against
//! `nbdkit memory` on a Unix socket (a separate process, so this process's CPU time is the
//! client's alone), reporting requests/s and this process's CPU µs per request.
//!
//! ```text
//! cargo run --release -p nbraid-nbd --example client_load -- [SECS] [URI]
//! ```
//!
//! Without a URI it starts `nbdkit memory 1G` itself. Every (operation, queue depth) cell is
//! 4 KiB at random aligned offsets; CPU per request is what to trust on a loaded machine.

use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nbraid_nbd::client::Client;

const BLOCK: usize = 4096;

/// This process's user + system CPU time in µs.
fn cpu_us() -> u64 {
    // SAFETY: getrusage only writes the struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

struct Nbdkit {
    child: Child,
    dir: std::path::PathBuf,
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn start_nbdkit() -> (Nbdkit, String) {
    let dir = std::env::temp_dir().join(format!("client_load.{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let sock = dir.join("nbd.sock");
    let child = Command::new("nbdkit")
        .args(["-f", "--exit-with-parent", "-U"])
        .arg(&sock)
        .args(["memory", "1G"])
        .spawn()
        .expect("nbdkit must be installed (apt-get install nbdkit)");
    let uri = format!("nbd+unix:///?socket={}", sock.display());
    let kit = Nbdkit { child, dir };
    for _ in 0..200 {
        if Client::connect(&uri).await.is_ok() {
            return (kit, uri);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("nbdkit did not start");
}

/// Runs `qd` loops of 4 KiB requests for `secs`; returns (requests, CPU µs).
async fn cell(c: &Client, write: bool, qd: usize, secs: f64) -> (u64, u64) {
    let blocks = c.size() / BLOCK as u64;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let data = Bytes::from(vec![0x5au8; BLOCK]);
    let cpu0 = cpu_us();
    let tasks: Vec<_> = (0..qd)
        .map(|i| {
            let (c, stop, done, data) = (c.clone(), stop.clone(), done.clone(), data.clone());
            tokio::spawn(async move {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ i as u64;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let at = (x % blocks) * BLOCK as u64;
                    if write {
                        c.write(at, data.clone()).await.expect("write");
                    } else {
                        c.read(at, BLOCK).await.expect("read");
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("load task");
    }
    (done.load(Ordering::Relaxed), cpu_us() - cpu0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().map_or(3.0, |s| s.parse().expect("SECS"));
    let (_kit, uri) = match args.next() {
        Some(u) => (None, u),
        None => {
            let (k, u) = start_nbdkit().await;
            (Some(k), u)
        }
    };
    let c = Client::connect(&uri).await.expect("connect");
    println!("op     qd   req/s   cpu_us/req");
    for (write, qd) in [(false, 1), (true, 1), (false, 32), (true, 32)] {
        let t = Instant::now();
        let (n, cpu) = cell(&c, write, qd, secs).await;
        let rate = n as f64 / t.elapsed().as_secs_f64();
        let op = if write { "write" } else { "read" };
        println!(
            "{op:<6} {qd:>2} {rate:>8.0} {:>9.2}",
            cpu as f64 / n.max(1) as f64
        );
    }
    c.disconnect().await;
}

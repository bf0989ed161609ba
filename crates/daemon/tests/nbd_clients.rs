//! The NBD server against real clients: nbdinfo, nbdcopy, qemu-img, qemu-io, fio and
//! nbdfuse + ext4. The server runs in-process on a Unix socket in a temporary directory (and on
//! a loopback TCP port). A missing tool fails the test (scripts/test installs them).
//!
//! Every `check_*` function talks to the export only through NBD, so the same checks run
//! against any [`Export`]: memory exports here, the engine's RAID volumes once plugged in
//! (`Fixture::new(vec![("r5", volume)])`, then `check_all(&fx, "r5")`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::{report_on_stall, require, run, run_output, OnStall};

#[path = "nbd_clients/checks.rs"]
mod checks;
#[path = "nbd_clients/raid.rs"]
mod raid;
use checks::*;

use nbraid_daemon::nbd::{advertised_preferred, Export, Listener, MemoryExport, Server};
use rand::{Rng, RngCore, SeedableRng};

const MIB: u64 = 1024 * 1024;
struct Fixture {
    rt: tokio::runtime::Runtime,
    server: Server,
    dir: tempfile::TempDir,
    sock: PathBuf,
    tcp: SocketAddr,
    /// (name, size, minimum block, advertised preferred block, read-only) of each export.
    info: Vec<(String, u64, u32, u32, bool)>,
    /// What is printed if an external client hangs (see `common::report_on_stall`).
    on_stall: Vec<OnStall>,
}

impl Fixture {
    fn new(exports: Vec<(&str, Arc<dyn Export>)>) -> Fixture {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        Self::start(rt, dir, exports)
    }

    /// The exports `make` builds (inside the runtime) from files in the fixture's directory.
    fn build(make: impl FnOnce(&Path) -> Vec<(String, Arc<dyn Export>)>) -> Fixture {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let exports = rt.block_on(async { make(dir.path()) });
        let exports = exports
            .iter()
            .map(|(n, e)| (n.as_str(), e.clone()))
            .collect();
        Self::start(rt, dir, exports)
    }

    fn start(
        rt: tokio::runtime::Runtime,
        dir: tempfile::TempDir,
        exports: Vec<(&str, Arc<dyn Export>)>,
    ) -> Fixture {
        let sock = dir.path().join("nbd.sock");
        let info = exports
            .iter()
            .map(|(n, e)| {
                let pref = advertised_preferred(e.min_block(), e.preferred_block());
                (n.to_string(), e.size(), e.min_block(), pref, e.read_only())
            })
            .collect();
        let list = exports
            .into_iter()
            .map(|(n, e)| (n.to_string(), e))
            .collect();
        let server = Server::new(list).unwrap();
        let (unix, tcp) = rt.block_on(async {
            let unix = Listener::bind_unix(&sock).unwrap();
            let tcp = Listener::bind_tcp("127.0.0.1:0".parse().unwrap())
                .await
                .unwrap();
            (unix, tcp)
        });
        let tcp_addr = tcp.tcp_addr().unwrap();
        for l in [unix, tcp] {
            let s = server.clone();
            rt.spawn(async move { s.serve(l).await });
        }
        let s = server.clone();
        let on_stall = vec![report_on_stall(move || {
            format!(
                "NBD server: {} connections, {} requests in flight",
                s.connections(),
                s.requests_in_flight()
            )
        })];
        Fixture {
            rt,
            server,
            dir,
            sock,
            tcp: tcp_addr,
            info,
            on_stall,
        }
    }

    fn uri(&self, name: &str) -> String {
        format!("nbd+unix:///{name}?socket={}", self.sock.display())
    }

    fn tcp_uri(&self, name: &str) -> String {
        format!("nbd://{}/{name}", self.tcp)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn export(&self, name: &str) -> (u64, u32, u32, bool) {
        let (_, size, min, pref, ro) = self
            .info
            .iter()
            .find(|e| e.0 == name)
            .unwrap_or_else(|| panic!("no export {name}"));
        (*size, *min, *pref, *ro)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let r = self.rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(60), self.server.shutdown()).await
        });
        if !std::thread::panicking() {
            r.expect("server shutdown hung")
                .expect("flush at shutdown failed");
        }
    }
}

fn random_file(path: &Path, len: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut data = vec![0u8; len];
    rng.fill_bytes(&mut data);
    std::fs::write(path, &data).unwrap();
    data
}

/// FNV-1a, to report checksums.
fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn json_after_noise(out: &str) -> serde_json::Value {
    let start = out.find('{').unwrap_or_else(|| panic!("no JSON in {out}"));
    serde_json::from_str(&out[start..]).unwrap_or_else(|e| panic!("bad JSON ({e}): {out}"))
}

// ------------------------------------------------------------------ memory exports

fn mem(size: u64, min: u32, pref: u32) -> Arc<MemoryExport> {
    Arc::new(MemoryExport::new(size).with_block_sizes(min, pref))
}

fn dynify(v: Vec<(&str, Arc<MemoryExport>)>) -> Vec<(&str, Arc<dyn Export>)> {
    v.into_iter()
        .map(|(n, e)| (n, e as Arc<dyn Export>))
        .collect()
}

#[test]
fn nbdinfo_lists_exports_with_sizes_and_block_sizes() {
    let stripe = Arc::new(
        MemoryExport::new(96 * MIB)
            .with_block_sizes(4096, 192 * 1024)
            .with_description("raid5 3+1"),
    );
    let ro = Arc::new(MemoryExport::new(2 * MIB).with_read_only(true));
    let fx = Fixture::new(dynify(vec![
        ("stripe", stripe),
        ("small", mem(MIB, 512, 4096)),
        ("ro", ro),
    ]));
    for name in ["stripe", "small", "ro"] {
        check_nbdinfo(&fx, name);
    }
    let nbdinfo = require("nbdinfo", "libnbd-bin");
    let out = run(Command::new(&nbdinfo)
        .arg("--list")
        .arg("--json")
        .arg(format!("nbd+unix:///?socket={}", fx.sock.display())));
    let v = json_after_noise(&out);
    assert_eq!(v["exports"].as_array().unwrap().len(), 3, "{out}");
    let s = &v["exports"][0];
    assert_eq!(s["export-name"], "stripe");
    // 192 KiB full stripe → advertised as the next power of two.
    assert_eq!(s["block_size_preferred"], 262144);
    assert_eq!(s["description"], "raid5 3+1");
    assert_eq!(s["can_cache"], true);
    assert_eq!(s["can_df"], true);
    assert_eq!(s["contexts"][0], "base:allocation");
}

#[test]
fn nbdcopy_in_and_out_with_one_and_four_connections() {
    let a = mem(48 * MIB, 512, 4096);
    let b = mem(48 * MIB, 4096, 65536);
    let fx = Fixture::new(dynify(vec![("a", a.clone()), ("b", b.clone())]));
    check_nbdcopy(&fx, "a", 100);
    check_nbdcopy(&fx, "b", 200);
    // The last copy in (4 connections) is what the export holds.
    let mut rng = rand::rngs::StdRng::seed_from_u64(204);
    let mut want = vec![0u8; 48 * MIB as usize];
    rng.fill_bytes(&mut want);
    assert!(b.contents(0, want.len()) == want);
}

#[test]
fn qemu_img_compare_sees_equal_and_different_contents() {
    let fx = Fixture::new(dynify(vec![
        ("a", mem(16 * MIB, 512, 4096)),
        ("k", mem(24 * MIB, 4096, 1 << 20)),
    ]));
    check_qemu_img(&fx, "a", 7);
    check_qemu_img(&fx, "k", 8);
}

#[test]
fn qemu_io_writes_and_pattern_reads() {
    let a = mem(64 * MIB, 512, 4096);
    let ro = Arc::new(MemoryExport::new(4 * MIB).with_read_only(true));
    let fx = Fixture::new(dynify(vec![
        ("a", a.clone()),
        ("k", mem(16 * MIB, 4096, 1 << 20)),
        ("ro", ro.clone()),
    ]));
    check_qemu_io(&fx, "a");
    check_qemu_io(&fx, "k");
    assert!(a.contents(0, MIB as usize).iter().all(|&b| b == 0xab));
    assert!(a.contents(MIB, 65536).iter().all(|&b| b == 0xcd));

    // The read-only export refuses writes.
    let qemu_io = require("qemu-io", "qemu-utils");
    let o = run_output(
        Command::new(&qemu_io)
            .args(["-f", "raw", "-c", "write -P 1 0 4k"])
            .arg(fx.uri("ro")),
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!o.status.success(), "{text}");
    assert!(ro.contents(0, 4096).iter().all(|&b| b == 0));
    let nbdcopy = require("nbdcopy", "libnbd-bin");
    let src = fx.path("ro-in.bin");
    random_file(&src, 4 * MIB as usize, 1);
    let o = run_output(Command::new(&nbdcopy).arg(&src).arg(fx.uri("ro")));
    assert!(!o.status.success(), "{o:?}");
}

#[test]
fn fio_random_writes_verify_crc32c() {
    let fx = Fixture::new(dynify(vec![
        ("a", mem(64 * MIB, 512, 4096)),
        ("k", mem(64 * MIB, 4096, 65536)),
    ]));
    check_fio(&fx, "a");
    check_fio(&fx, "k");
}

#[test]
fn ext4_on_nbdfuse_and_loop_survives_fsck_and_remount() {
    let a = mem(128 * MIB, 512, 4096);
    let fx = Fixture::new(dynify(vec![
        ("fs512", a.clone()),
        ("fs4k", mem(128 * MIB, 4096, 256 * 1024)),
    ]));
    check_ext4(&fx, "fs512");
    check_ext4(&fx, "fs4k");
    assert!(a.allocated_bytes() > 0);
}

#[test]
fn every_check_against_one_export() {
    // What a RAID volume will go through.
    let fx = Fixture::new(dynify(vec![("vol", mem(64 * MIB, 4096, 192 * 1024))]));
    check_all(&fx, "vol", 1000);
}

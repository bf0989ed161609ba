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
use common::{require, run, run_output};

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
        Fixture {
            rt,
            server,
            dir,
            sock,
            tcp: tcp_addr,
            info,
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

// ------------------------------------------------------------------ checks, any export

/// `nbdinfo --list --json` reports the export with its size, block sizes and flags, over the
/// Unix socket and over TCP.
fn check_nbdinfo(fx: &Fixture, name: &str) {
    let nbdinfo = require("nbdinfo", "libnbd-bin");
    let (size, min, pref, ro) = fx.export(name);
    for base in [
        format!("nbd+unix:///?socket={}", fx.sock.display()),
        format!("nbd://{}", fx.tcp),
    ] {
        let out = run(Command::new(&nbdinfo)
            .arg("--list")
            .arg("--json")
            .arg(&base));
        let v = json_after_noise(&out);
        assert_eq!(v["protocol"], "newstyle-fixed", "{out}");
        let e = v["exports"]
            .as_array()
            .expect("exports array")
            .iter()
            .find(|e| e["export-name"] == name)
            .unwrap_or_else(|| panic!("export {name} missing: {out}"))
            .clone();
        assert_eq!(e["export-size"], size, "{out}");
        assert_eq!(e["block_size_minimum"], min, "{out}");
        assert_eq!(e["block_size_preferred"], pref, "{out}");
        assert_eq!(e["block_size_maximum"], 32 * MIB, "{out}");
        assert_eq!(e["is_read_only"], ro, "{out}");
        assert_eq!(e["can_flush"], true, "{out}");
        assert_eq!(e["can_fua"], true, "{out}");
        assert_eq!(e["can_multi_conn"], true, "{out}");
        assert_eq!(e["can_trim"], !ro, "{out}");
        assert_eq!(e["can_zero"], !ro, "{out}");
        assert_eq!(e["can_fast_zero"], !ro, "{out}");
    }
    // INFO for one export (via GO) agrees with the listing.
    for uri in [fx.uri(name), fx.tcp_uri(name)] {
        let one = run(Command::new(&nbdinfo).arg("--size").arg(&uri));
        assert_eq!(one.trim(), size.to_string(), "{uri}");
    }
}

/// nbdcopy random data in and back out, with 1 and 4 connections; checksums equal.
fn check_nbdcopy(fx: &Fixture, name: &str, seed: u64) {
    let nbdcopy = require("nbdcopy", "libnbd-bin");
    let (size, ..) = fx.export(name);
    for conns in [1, 4] {
        let src = fx.path(&format!("{name}-in{conns}.bin"));
        let dst = fx.path(&format!("{name}-out{conns}.bin"));
        let data = random_file(&src, size as usize, seed + conns);
        run(Command::new(&nbdcopy)
            .arg(format!("--connections={conns}"))
            .arg(&src)
            .arg(fx.uri(name)));
        run(Command::new(&nbdcopy)
            .arg(format!("--connections={conns}"))
            .arg(fx.uri(name))
            .arg(&dst));
        let back = std::fs::read(&dst).unwrap();
        assert_eq!(back.len(), data.len());
        assert_eq!(
            checksum(&back),
            checksum(&data),
            "{name} with {conns} connection(s): checksums differ"
        );
        assert!(back == data);
        std::fs::remove_file(&src).unwrap();
        std::fs::remove_file(&dst).unwrap();
    }
}

/// `qemu-img compare` finds a copy identical, and a changed copy different at the right
/// offset.
fn check_qemu_img(fx: &Fixture, name: &str, seed: u64) {
    let qemu_img = require("qemu-img", "qemu-utils");
    let qemu_io = require("qemu-io", "qemu-utils");
    let nbdcopy = require("nbdcopy", "libnbd-bin");
    let (size, ..) = fx.export(name);
    let src = fx.path(&format!("{name}-img.bin"));
    random_file(&src, size as usize, seed);
    run(Command::new(&nbdcopy).arg(&src).arg(fx.uri(name)));
    let out = run(Command::new(&qemu_img)
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&src)
        .arg(fx.uri(name)));
    assert!(out.contains("Images are identical"), "{out}");
    let at = size / 2 / MIB * MIB;
    run(Command::new(&qemu_io)
        .args(["-f", "raw", "-c", &format!("write -P 0x5a {at} 4k")])
        .arg(fx.uri(name)));
    let o = run_output(
        Command::new(&qemu_img)
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(&src)
            .arg(fx.uri(name)),
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(&format!("Content mismatch at offset {at}")),
        "{text}"
    );
    std::fs::remove_file(&src).unwrap();
}

/// qemu-io writes (plain, FUA, zeroes, async, discard) and `-P` pattern reads; a wrong
/// pattern is caught. Needs an export of at least 16 MiB.
fn check_qemu_io(fx: &Fixture, name: &str) {
    let qemu_io = require("qemu-io", "qemu-utils");
    let (size, ..) = fx.export(name);
    assert!(size >= 16 * MIB, "check_qemu_io needs 16 MiB");
    let out = run(Command::new(&qemu_io)
        .args(["-f", "raw"])
        .args([
            "-c",
            "write -P 0xab 0 1M",
            "-c",
            "write -P 0xcd 1M 64k",
            "-c",
            "write -z 2M 1M",
            "-c",
            "write -f -P 0x11 4M 8M",
            "-c",
            "aio_write -P 0x22 13M 4k",
            "-c",
            "aio_write -P 0x33 14M 4k",
            "-c",
            "aio_flush",
            "-c",
            "discard 15M 1M",
            "-c",
            "flush",
            "-c",
            "read -P 0xab 0 1M",
            "-c",
            "read -P 0xcd 1M 64k",
            "-c",
            "read -P 0 2M 1M",
            "-c",
            "read -P 0x11 4M 8M",
            "-c",
            "read -P 0x22 13M 4k",
            "-c",
            "read -P 0x33 14M 4k",
        ])
        .arg(fx.uri(name)));
    assert!(!out.contains("failed"), "{name}: {out}");
    // Negative control: a wrong pattern is reported and fails.
    let o = run_output(
        Command::new(&qemu_io)
            .args(["-f", "raw", "-c", "read -P 0xcd 0 4k"])
            .arg(fx.uri(name)),
    );
    assert!(!o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("Pattern verification failed"),
        "{o:?}"
    );
}

/// fio's nbd engine: random writes of 4–64 KiB at queue depth 32, verified with crc32c.
fn check_fio(fx: &Fixture, name: &str) {
    let fio = require("fio", "fio");
    let (size, min, ..) = fx.export(name);
    let span = size.min(32 * MIB);
    let out = run(Command::new(&fio)
        .current_dir(fx.dir.path())
        .arg(format!("--name=verify-{name}"))
        .arg("--ioengine=nbd")
        .arg(format!("--uri={}", fx.uri(name)))
        .arg(format!("--size={span}"))
        .arg(format!("--bsrange={}-64k", min.max(4096)))
        .args([
            "--rw=randwrite",
            "--iodepth=32",
            "--numjobs=1",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--verify_state_save=0",
            "--output-format=json",
        ]));
    let v = json_after_noise(&out);
    let job = &v["jobs"][0];
    assert_eq!(job["error"], 0, "{out}");
    assert!(job["write"]["io_bytes"].as_u64().unwrap() >= span, "{out}");
    assert!(
        job["read"]["io_bytes"].as_u64().unwrap() > 0,
        "verify phase read nothing"
    );
}

/// Cleans up mounts, loop devices and the FUSE mount even when the test fails.
struct FuseStack {
    fuse_dir: PathBuf,
    mnt: PathBuf,
    loopdev: Option<String>,
    mounted: bool,
    fuse_mounted: bool,
    nbdfuse: Option<Child>,
}

impl FuseStack {
    fn umount(&mut self) {
        if self.mounted {
            run(Command::new("umount").arg(&self.mnt));
            self.mounted = false;
        }
    }
}

impl Drop for FuseStack {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
        if let Some(l) = self.loopdev.take() {
            let _ = Command::new("losetup").arg("-d").arg(&l).status();
        }
        if self.fuse_mounted {
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.fuse_dir)
                .status();
        }
        if let Some(mut c) = self.nbdfuse.take() {
            for _ in 0..500 {
                if c.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn make_tree(root: &Path, seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for d in 0..6 {
        let dir = root.join(format!("dir{d}")).join(format!("sub{}", d % 3));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..12 {
            let len = match f % 4 {
                0 => 0,
                1 => rng.gen_range(1..4096),
                2 => rng.gen_range(4096..100_000),
                _ => rng.gen_range(200_000..600_000),
            };
            let mut data = vec![0u8; len];
            rng.fill_bytes(&mut data);
            std::fs::write(dir.join(format!("file{f}.bin")), data).unwrap();
        }
    }
    std::os::unix::fs::symlink("dir0/sub0/file1.bin", root.join("link")).unwrap();
}

/// nbdfuse exposes the export as a file; losetup (sector = the export's minimum block, at
/// least 512) + mkfs.ext4 + mount, a tree copied in, unmounted, `e2fsck -fn` clean, remounted
/// and compared. Needs root, FUSE and loop devices, and an export of at least 32 MiB.
fn check_ext4(fx: &Fixture, name: &str) {
    let nbdfuse = require("nbdfuse", "libnbd-bin");
    require("fusermount3", "fuse3");
    require("mkfs.ext4", "e2fsprogs");
    require("e2fsck", "e2fsprogs");
    require("losetup", "mount");
    require("mount", "mount");
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: this test needs FUSE"
    );
    let (size, min, _, ro) = fx.export(name);
    assert!(
        size >= 32 * MIB && !ro,
        "check_ext4 needs a writable export of 32 MiB"
    );
    let sector = min.max(512);
    let base = fx.path(&format!("fs-{name}"));
    let fuse_dir = base.join("fuse");
    let mnt = base.join("mnt");
    let src = base.join("src");
    for d in [&fuse_dir, &mnt, &src] {
        std::fs::create_dir_all(d).unwrap();
    }
    make_tree(&src, u64::from(sector));

    let child = Command::new(&nbdfuse)
        .arg(fuse_dir.join("nbd"))
        .arg(fx.uri(name))
        .stdin(Stdio::null())
        .spawn()
        .expect("start nbdfuse");
    let mut st = FuseStack {
        fuse_dir: fuse_dir.clone(),
        mnt: mnt.clone(),
        loopdev: None,
        mounted: false,
        fuse_mounted: true,
        nbdfuse: Some(child),
    };
    let file = fuse_dir.join("nbd");
    let mut ready = false;
    for _ in 0..1000 {
        if std::fs::metadata(&file)
            .map(|m| m.len() > 0)
            .unwrap_or(false)
        {
            ready = true;
            break;
        }
        if let Some(s) = st.nbdfuse.as_mut().unwrap().try_wait().unwrap() {
            panic!("nbdfuse exited early: {s}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(ready, "nbdfuse did not expose {}", file.display());

    let dev = run(Command::new("losetup")
        .arg("--sector-size")
        .arg(sector.to_string())
        .arg("-f")
        .arg("--show")
        .arg(&file))
    .trim()
    .to_string();
    st.loopdev = Some(dev.clone());
    run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&dev));
    run(Command::new("mount")
        .args(["-t", "ext4"])
        .arg(&dev)
        .arg(&mnt));
    st.mounted = true;
    run(Command::new("cp")
        .arg("-a")
        .arg(src.join("."))
        .arg(mnt.join("tree")));
    st.umount();
    let fsck = run_output(Command::new("e2fsck").args(["-f", "-n"]).arg(&dev));
    assert!(
        fsck.status.success(),
        "e2fsck -fn found problems ({}):\n{}{}",
        fsck.status,
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );
    run(Command::new("mount")
        .args(["-t", "ext4"])
        .arg(&dev)
        .arg(&mnt));
    st.mounted = true;
    run(Command::new("diff")
        .arg("-r")
        .arg("--no-dereference")
        .arg(&src)
        .arg(mnt.join("tree")));
    st.umount();
    run(Command::new("losetup").arg("-d").arg(&dev));
    st.loopdev = None;
    run(Command::new("fusermount3").arg("-u").arg(&fuse_dir));
    st.fuse_mounted = false;
    drop(st);
}

fn check_all(fx: &Fixture, name: &str, seed: u64) {
    check_nbdinfo(fx, name);
    check_nbdcopy(fx, name, seed);
    check_qemu_img(fx, name, seed + 10);
    check_qemu_io(fx, name);
    check_fio(fx, name);
    check_ext4(fx, name);
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

// ------------------------------------------------------------------ RAID volumes

/// A volume of `level` over `members` file-backed members of 40 MiB, assembled from a config
/// the way `nbraidd` does it, served under the name of the level.
fn raid_fixture(level: &str, members: usize, extra: &[&str]) -> Fixture {
    Fixture::build(|dir| {
        let mut text = String::new();
        let mut ids = Vec::new();
        for i in 0..members {
            let path = dir.join(format!("m{i}.img"));
            text += &format!(
                "[[member]]\nid = \"m{i}\"\npath = \"{}\"\nsize = \"40MiB\"\n\n",
                path.display()
            );
            ids.push(format!("\"m{i}\""));
        }
        text += &format!(
            "[[volume]]\nname = \"{level}\"\nlevel = \"{level}\"\nmembers = [{}]\nsize = \"all\"\n",
            ids.join(", ")
        );
        for line in extra {
            text += line;
            text += "\n";
        }
        let file = dir.join("nbraid.toml");
        std::fs::write(&file, &text).unwrap();
        let config = nbraid_config::parse(&text, &file)
            .unwrap_or_else(|e| panic!("config rejected: {e}\n{text}"));
        nbraid_daemon::assemble::assemble(&config)
            .unwrap_or_else(|e| panic!("assembly failed: {e}"))
            .into_iter()
            .map(|a| {
                let e =
                    nbraid_daemon::export::VolumeExport::array(a.array, a.read_only, a.description);
                (a.name, Arc::new(e) as Arc<dyn Export>)
            })
            .collect()
    })
}

#[test]
fn raid0_volume_with_every_client() {
    let fx = raid_fixture("raid0", 4, &["strip_size = \"128KiB\""]);
    check_all(&fx, "raid0", 2000);
}

#[test]
fn raid1_volume_with_every_client() {
    let fx = raid_fixture("raid1", 3, &["block_size = 512"]);
    check_all(&fx, "raid1", 2100);
}

#[test]
fn raid5_volume_with_every_client() {
    let fx = raid_fixture(
        "raid5",
        4,
        &[
            "strip_size = \"64KiB\"",
            "cache = \"write-back\"",
            "cache_size = \"8MiB\"",
        ],
    );
    check_all(&fx, "raid5", 2200);
}

#[test]
fn raid6_volume_with_every_client() {
    let fx = raid_fixture("raid6", 6, &["strip_size = \"64KiB\""]);
    check_all(&fx, "raid6", 2300);
}

#[test]
fn raid10_volume_with_every_client() {
    let fx = raid_fixture("raid10", 4, &["spans = 2", "strip_size = \"64KiB\""]);
    check_all(&fx, "raid10", 2400);
}

#[test]
fn raid50_volume_with_every_client() {
    let fx = raid_fixture(
        "raid50",
        6,
        &[
            "spans = 2",
            "strip_size = \"64KiB\"",
            "cache = \"write-back\"",
            "cache_size = \"8MiB\"",
        ],
    );
    check_all(&fx, "raid50", 2500);
}

/// `base:allocation` on a RAID 5 volume: what was trimmed reads as holes to `nbdinfo --map`,
/// what was written as data, and `nbdcopy` copies it into a sparse file with the right bytes.
#[test]
fn raid5_holes_for_nbdinfo_map_and_nbdcopy() {
    use nbraid_daemon::nbd::client::Client;
    let nbdinfo = require("nbdinfo", "libnbd-bin");
    let nbdcopy = require("nbdcopy", "libnbd-bin");
    let fx = raid_fixture("raid5", 4, &["strip_size = \"64KiB\""]);
    let (size, ..) = fx.export("raid5");
    let data = fx.rt.block_on(async {
        let c = Client::connect(&fx.uri("raid5")).await.unwrap();
        c.trim(0, size).await.unwrap();
        let mut data = vec![0u8; MIB as usize];
        rand::rngs::StdRng::seed_from_u64(9).fill_bytes(&mut data);
        c.write(8 * MIB, data.clone().into()).await.unwrap();
        c.write(50 * MIB, data[..65536].to_vec().into())
            .await
            .unwrap();
        c.flush().await.unwrap();
        c.disconnect().await;
        data
    });
    let out = run(Command::new(&nbdinfo)
        .arg("--map")
        .arg("--json")
        .arg(fx.uri("raid5")));
    let at = out.find('[').unwrap_or_else(|| panic!("no map: {out}"));
    let map: serde_json::Value =
        serde_json::from_str(out[at..].trim()).unwrap_or_else(|e| panic!("bad JSON ({e}): {out}"));
    let extents: Vec<(u64, u64, u64)> = map
        .as_array()
        .unwrap_or_else(|| panic!("not a map: {out}"))
        .iter()
        .map(|e| {
            let n = |k: &str| e[k].as_u64().unwrap_or_else(|| panic!("{k} in {out}"));
            (n("offset"), n("length"), n("type"))
        })
        .collect();
    let want = [
        (0, 8 * MIB, 3),
        (8 * MIB, MIB, 0),
        (9 * MIB, 41 * MIB, 3),
        (50 * MIB, 65536, 0),
        (50 * MIB + 65536, size - 50 * MIB - 65536, 3),
    ];
    assert_eq!(extents, want, "{out}");

    let dst = fx.path("copy.img");
    run(Command::new(&nbdcopy).arg(fx.uri("raid5")).arg(&dst));
    let back = std::fs::read(&dst).unwrap();
    assert_eq!(back.len() as u64, size);
    assert!(back[8 * MIB as usize..9 * MIB as usize] == data[..]);
    assert!(back[50 * MIB as usize..50 * MIB as usize + 65536] == data[..65536]);
    assert!(back[..8 * MIB as usize].iter().all(|&b| b == 0));
    use std::os::unix::fs::MetadataExt;
    let allocated = std::fs::metadata(&dst).unwrap().blocks() * 512;
    assert!(
        allocated < 8 * MIB,
        "nbdcopy wrote {allocated} bytes of a {size}-byte volume with 1 MiB of data"
    );
}

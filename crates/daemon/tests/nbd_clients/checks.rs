//! The checks of `nbd_clients`, for any export: each talks to it only through NBD, with a real
//! client.

use super::*;

/// `nbdinfo --list --json` reports the export with its size, block sizes and flags, over the
/// Unix socket and over TCP.
pub(super) fn check_nbdinfo(fx: &Fixture, name: &str) {
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
pub(super) fn check_nbdcopy(fx: &Fixture, name: &str, seed: u64) {
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
pub(super) fn check_qemu_img(fx: &Fixture, name: &str, seed: u64) {
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
pub(super) fn check_qemu_io(fx: &Fixture, name: &str) {
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
pub(super) fn check_fio(fx: &Fixture, name: &str) {
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
pub(super) fn check_ext4(fx: &Fixture, name: &str) {
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

pub(super) fn check_all(fx: &Fixture, name: &str, seed: u64) {
    check_nbdinfo(fx, name);
    check_nbdcopy(fx, name, seed);
    check_qemu_img(fx, name, seed + 10);
    check_qemu_io(fx, name);
    check_fio(fx, name);
    check_ext4(fx, name);
}

//! Members on real files through io_uring: O_DIRECT on a disk file system, buffered on tmpfs,
//! sparse creation, flush/FUA, trim by hole punching, volumes over files, the model check
//! over files, and use from several OS threads at once.

mod common;

use common::*;
use futures::executor::block_on;
use futures::future::join_all;
use nbraid_core::{
    Buf, DirectIo, Engine, FileOptions, Member, MemberState, UringError, UringFile, Volume,
    VolumeOptions,
};
use nbraid_layout::Level;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

fn engine() -> Arc<Engine> {
    Engine::global().unwrap_or_else(|e| panic!("io_uring must work for these tests: {e}"))
}

fn open(path: &Path, size: u64, direct: DirectIo) -> UringFile {
    UringFile::open_with(
        path,
        Some(size),
        FileOptions {
            direct,
            engine: Some(engine()),
        },
    )
    .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

fn exercise(m: &UringFile) {
    let data: Vec<u8> = (0..3 * 65536u32).map(|i| (i % 253) as u8).collect();
    // Aligned (direct when available) and unaligned-by-512 (buffered path) writes.
    block_on(m.write(65536, Buf::copy_from(&data).freeze(), false)).unwrap();
    block_on(m.write(512, Buf::copy_from(&data[..1024]).freeze(), true)).unwrap();
    let got = block_on(m.read(65536, Buf::new(data.len()))).unwrap();
    assert!(got[..] == data[..]);
    let got = block_on(m.read(512, Buf::new(1024))).unwrap();
    assert_eq!(&got[..], &data[..1024]);
    block_on(m.flush()).unwrap();
    // Trim punches a hole that reads as zeroes; write-zeroes likewise.
    block_on(m.trim(65536, 65536)).unwrap();
    block_on(m.write_zeroes(2 * 65536 + 4096, 4096)).unwrap();
    let got = block_on(m.read(65536, Buf::new(data.len()))).unwrap();
    assert!(got[..65536].iter().all(|&b| b == 0));
    assert!(got[65536..65536 + 4096] == data[65536..65536 + 4096]);
    assert!(got[65536 + 4096..65536 + 8192].iter().all(|&b| b == 0));
    assert!(got[65536 + 8192..] == data[65536 + 8192..]);
    // Past the end: a clear error, no I/O.
    let e = block_on(m.read(m.len() - 512, Buf::new(4096))).unwrap_err();
    assert!(e.to_string().contains("past the member"), "{e}");
    // Many in flight at once from one task.
    let futs =
        (0..64u64).map(|i| m.write(i * 4096, Buf::copy_from(&[i as u8; 4096]).freeze(), false));
    for r in block_on(join_all(futs)) {
        r.unwrap();
    }
    let futs = (0..64u64).map(|i| m.read(i * 4096, Buf::new(4096)));
    for (i, r) in block_on(join_all(futs)).into_iter().enumerate() {
        assert!(r.unwrap().iter().all(|&b| b == i as u8));
    }
    let c = m.counters().snapshot();
    assert_eq!(c.in_flight, 0);
    assert!(c.writes >= 66 && c.reads >= 67, "{c:?}");
    assert_eq!(c.errors, 1);
}

#[test]
fn file_member_on_disk_with_o_direct() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("m0.img");
    let m = open(&path, 8 * MIB, DirectIo::Auto);
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), 8 * MIB, "created at the asked size");
    assert!(meta.blocks() * 512 < MIB, "created sparse");
    eprintln!("{}: direct = {}", path.display(), m.is_direct());
    exercise(&m);
    drop(m);
    // Reopening keeps the data; a larger size than the file is refused.
    let m = open(&path, 8 * MIB, DirectIo::Auto);
    let got = block_on(m.read(5 * 4096, Buf::new(4096))).unwrap();
    assert!(got.iter().all(|&b| b == 5));
    drop(m);
    let e = UringFile::open_or_create(&path, 16 * MIB).err().unwrap();
    assert!(matches!(e, UringError::WrongSize { .. }), "{e}");
    assert!(e.to_string().contains("8388608 bytes but 16777216"), "{e}");
    let e = UringFile::open(dir.path().join("missing.img"))
        .err()
        .unwrap();
    assert!(e.to_string().contains("missing.img"), "{e}");
}

#[test]
fn file_member_buffered_on_tmpfs() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let forced = open(&dir.path().join("b.img"), 4 * MIB, DirectIo::Off);
    assert!(!forced.is_direct());
    exercise(&forced);
    // Auto on tmpfs: direct if this kernel's tmpfs allows it, else buffered with a warning.
    let auto = open(&dir.path().join("a.img"), 4 * MIB, DirectIo::Auto);
    eprintln!("tmpfs auto: direct = {}", auto.is_direct());
    exercise(&auto);
}

#[test]
fn raid10_volume_on_files_matches_a_model() {
    files_model(
        Level::Raid10,
        4,
        Some(2),
        "raid10_volume_on_files_matches_a_model",
    );
}

#[test]
fn parity_volumes_on_files_match_a_model() {
    files_model(
        Level::Raid5,
        4,
        None,
        "parity_volumes_on_files_match_a_model",
    );
    files_model(
        Level::Raid6,
        5,
        None,
        "parity_volumes_on_files_match_a_model",
    );
}

fn files_model(level: Level, n: usize, spans: Option<usize>, test: &'static str) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for seed in seeds(&format!("uring_model/{level}"), 1) {
        let _g = SeedGuard { test, seed };
        let mut rng = SmallRng::seed_from_u64(seed);
        let members: Vec<Arc<dyn Member>> = (0..n)
            .map(|i| {
                let p = dir.path().join(format!("{seed}-{i}.img"));
                Arc::new(open(&p, 2 * MIB, DirectIo::Auto)) as Arc<dyn Member>
            })
            .collect();
        let v = Volume::new(
            named(level, n, spans, 16 * KIB, 2 * MIB),
            members,
            VolumeOptions {
                members_known_zero: true,
                ..VolumeOptions::default()
            },
        )
        .unwrap();
        let cap = v.capacity();
        let mut model = vec![0u8; cap as usize];
        for _round in 0..40 {
            // Disjoint concurrent writes, then concurrent reads of random ranges.
            let mut writes = Vec::new();
            for k in 0..8u64 {
                let slot = cap / 8;
                let len = rng.gen_range(1..=slot / 512 / 2) * 512;
                let off = k * slot + rng.gen_range(0..(slot - len) / 512) * 512;
                let mut d = vec![0u8; len as usize];
                rng.fill(&mut d[..]);
                writes.push((off, d));
            }
            let futs = writes
                .iter()
                .map(|(o, d)| v.write(*o, Buf::copy_from(d), rng.gen_bool(0.1)));
            for r in block_on(join_all(futs)) {
                r.unwrap();
            }
            for (o, d) in &writes {
                model[*o as usize..*o as usize + d.len()].copy_from_slice(d);
            }
            if rng.gen_bool(0.3) {
                let len = rng.gen_range(1..64u64) * 4096;
                let off = rng.gen_range(0..(cap - len) / 4096) * 4096;
                block_on(v.trim(off, len)).unwrap();
                model[off as usize..(off + len) as usize].fill(0);
            }
            if rng.gen_bool(0.3) {
                block_on(v.flush()).unwrap();
            }
            let reads: Vec<(u64, u64)> = (0..8)
                .map(|_| {
                    let len = rng.gen_range(1..=512u64) * 512;
                    (rng.gen_range(0..=(cap - len) / 512) * 512, len)
                })
                .collect();
            let futs = reads.iter().map(|&(o, l)| v.read(o, l));
            for ((o, l), r) in reads.iter().zip(block_on(join_all(futs))) {
                let got = r.unwrap();
                assert!(
                    got[..] == model[*o as usize..(*o + *l) as usize],
                    "read {o}+{l}"
                );
            }
        }
        assert_eq!(
            v.member_health()
                .iter()
                .map(|h| h.state)
                .collect::<Vec<_>>(),
            vec![MemberState::Healthy; n]
        );
        let got = block_on(v.read(0, cap)).unwrap();
        assert!(got[..] == model[..]);
    }
}

#[test]
fn volume_on_files_from_many_threads() {
    // The futures complete from the ring threads: any thread may await them.
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let members: Vec<Arc<dyn Member>> = (0..3)
        .map(|i| {
            Arc::new(open(
                &dir.path().join(format!("t{i}")),
                4 * MIB,
                DirectIo::Auto,
            )) as Arc<dyn Member>
        })
        .collect();
    let v = Arc::new(
        Volume::new(
            named(Level::Raid0, 3, None, 4 * KIB, 4 * MIB),
            members,
            VolumeOptions::default(),
        )
        .unwrap(),
    );
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let v = v.clone();
            std::thread::spawn(move || {
                let base = t * 2 * MIB;
                for i in 0..32u64 {
                    let off = base + i * 64 * KIB;
                    block_on(v.write(
                        off,
                        Buf::copy_from(&vec![(t * 32 + i) as u8; 64 * 1024]),
                        false,
                    ))
                    .unwrap();
                }
                block_on(v.flush()).unwrap();
                for i in 0..32u64 {
                    let got = block_on(v.read(base + i * 64 * KIB, 64 * KIB)).unwrap();
                    assert!(got.iter().all(|&b| b == (t * 32 + i) as u8));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let c = v
        .member_health()
        .iter()
        .map(|h| h.counters)
        .collect::<Vec<_>>();
    assert!(
        c.iter().all(|c| c.flushes >= 1 && c.in_flight == 0),
        "{c:?}"
    );
    // Each 64 KiB request puts 5 or 6 strips, contiguous on the member, on every member: one
    // vectored operation per member and request, not one per strip.
    assert!(c.iter().all(|c| c.writes == 128 && c.reads == 128), "{c:?}");
}

#[test]
fn power_loss_over_files_keeps_flushed_writes() {
    use nbraid_sim::Faulty;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for seed in seeds("uring_power_loss", 2) {
        let _g = SeedGuard {
            test: "power_loss_over_files_keeps_flushed_writes",
            seed,
        };
        let faulty: Vec<Arc<Faulty<UringFile>>> = (0..2)
            .map(|i| {
                let p = dir.path().join(format!("pl-{seed}-{i}.img"));
                Arc::new(Faulty::new(open(&p, MIB, DirectIo::Auto), seed + i).with_power_loss())
            })
            .collect();
        let members: Vec<Arc<dyn Member>> = faulty
            .iter()
            .map(|f| f.clone() as Arc<dyn Member>)
            .collect();
        let geometry = named(Level::Raid1, 2, None, 64 * KIB, MIB);
        let v = Volume::new(geometry.clone(), members.clone(), VolumeOptions::default()).unwrap();
        block_on(v.write(0, Buf::copy_from(&[1; 65536]), false)).unwrap();
        block_on(v.flush()).unwrap();
        block_on(v.write(65536, Buf::copy_from(&[2; 65536]), true)).unwrap();
        block_on(v.write(0, Buf::copy_from(&[3; 4096]), false)).unwrap();
        block_on(v.write(131072, Buf::copy_from(&[4; 4096]), false)).unwrap();
        drop(v);
        for f in &faulty {
            block_on(f.crash(true)).unwrap();
        }
        let v = Volume::new(geometry, members, VolumeOptions::default()).unwrap();
        let got = block_on(v.read(0, 3 * 65536)).unwrap();
        assert!(
            got[4096..65536].iter().all(|&b| b == 1),
            "flushed write lost"
        );
        assert!(got[65536..131072].iter().all(|&b| b == 2), "FUA write lost");
        for s in got[..4096].chunks(512) {
            assert!(s.iter().all(|&b| b == 1) || s.iter().all(|&b| b == 3));
        }
        for s in got[131072..135168].chunks(512) {
            assert!(s.iter().all(|&b| b == 0) || s.iter().all(|&b| b == 4));
        }
    }
}

/// A member is held exclusively while open: a second open of the same file (another daemon,
/// or this process by mistake) is refused with the holder named, and succeeds once the first
/// is closed.
#[test]
fn a_member_file_is_opened_exclusively() {
    for dir in [
        tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap(),
        tempfile::tempdir_in("/dev/shm").unwrap(),
    ] {
        let path = dir.path().join("x.img");
        let first = open(&path, MIB, DirectIo::Auto);
        for direct in [DirectIo::Auto, DirectIo::Off] {
            let e = UringFile::open_with(
                &path,
                Some(MIB),
                FileOptions {
                    direct,
                    engine: Some(engine()),
                },
            )
            .err()
            .expect("a second open of a held member must be refused");
            let UringError::InUse { holder_pid, .. } = &e else {
                panic!("wrong error: {e}");
            };
            assert_eq!(*holder_pid, Some(std::process::id()), "{e}");
            let msg = e.to_string();
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            assert!(
                msg.contains(&format!("in use by process {} (", std::process::id())),
                "{msg}"
            );
        }
        // A tool holding the member (nbraid create) is refused the same way, and vice versa.
        let e = nbraid_core::exclusive::open_exclusive(&path, false).unwrap_err();
        assert!(matches!(e, UringError::InUse { .. }), "{e}");
        drop(first);
        let tool = nbraid_core::exclusive::open_exclusive(&path, false).unwrap();
        let e = UringFile::open(&path).err().unwrap();
        assert!(matches!(e, UringError::InUse { .. }), "{e}");
        drop(tool);
        let again = UringFile::open(&path).unwrap();
        assert_eq!(again.len(), MIB);
    }
}

/// `read_only = true`'s members: a file even root cannot open for writing (immutable, as a
/// file system remounted read-only) opens read-only, reads, and refuses every write, trim and
/// write-zeroes before any I/O — its bytes stay as they were; a flush has nothing to sync.
/// It is held exclusively as a writer's is. Before, a member could only be opened
/// read-write, which such a file refuses.
#[test]
fn a_member_opened_read_only_reads_and_refuses_every_write() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("ro.img");
    let data: Vec<u8> = (0..MIB as u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    let chattr = |flag: &str| {
        let st = std::process::Command::new("chattr")
            .arg(flag)
            .arg(&path)
            .status()
            .expect("chattr (e2fsprogs)");
        assert!(st.success(), "chattr {flag}");
    };
    chattr("+i");
    let rw = UringFile::open_or_create(&path, MIB);
    let m = UringFile::open_read_only(&path, Some(MIB));
    chattr("-i");
    assert!(rw.is_err(), "an immutable file does not open read-write");
    let m = m.unwrap_or_else(|e| panic!("opens read-only: {e}"));
    assert!(m.is_read_only());
    assert_eq!(m.len(), MIB);
    let got = block_on(m.read(4096, Buf::new(8192))).unwrap();
    assert_eq!(&got[..], &data[4096..4096 + 8192]);
    let one = Buf::copy_from(&[7u8; 4096]).freeze();
    let refused = [
        block_on(m.write(0, one.clone(), false)),
        block_on(m.write(0, one.clone(), true)),
        block_on(m.write_vectored(0, vec![one.clone(), one], false)),
        block_on(m.trim(0, 4096)),
        block_on(m.write_zeroes(0, 4096)),
    ];
    for r in refused {
        let e = r.expect_err("refused");
        assert!(e.to_string().contains("read_only = true"), "{e}");
    }
    block_on(m.flush()).expect("nothing to sync");
    // Held as a writer holds it.
    let e = UringFile::open(&path).err().expect("held");
    assert!(matches!(e, UringError::InUse { .. }), "{e}");
    drop(m);
    assert!(
        std::fs::read(&path).unwrap() == data,
        "not one byte written"
    );
}

/// A loop device over a file in `dir`, detached when the last descriptor of it closes
/// (LO_FLAGS_AUTOCLEAR), so a failed test leaves nothing attached.
struct Loop {
    path: std::path::PathBuf,
    /// Holds the device attached until the test is done with it.
    _fd: std::fs::File,
}

fn loop_device(dir: &Path, len: u64) -> Loop {
    use std::os::fd::AsRawFd;
    const LOOP_SET_FD: libc::c_ulong = 0x4C00;
    const LOOP_SET_STATUS64: libc::c_ulong = 0x4C04;
    const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
    const LO_FLAGS_AUTOCLEAR: u32 = 4;
    /// `struct loop_info64` from <linux/loop.h>.
    #[repr(C)]
    struct LoopInfo64 {
        device: u64,
        inode: u64,
        rdevice: u64,
        offset: u64,
        sizelimit: u64,
        number: u32,
        encrypt_type: u32,
        encrypt_key_size: u32,
        flags: u32,
        file_name: [u8; 64],
        crypt_name: [u8; 64],
        encrypt_key: [u8; 32],
        init: [u64; 2],
    }
    let backing_path = dir.join("loop-backing.img");
    let backing = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&backing_path)
        .unwrap();
    backing.set_len(len).unwrap();
    let ctl = std::fs::File::open("/dev/loop-control").unwrap_or_else(|e| {
        panic!("this test needs loop devices (/dev/loop-control, run as root): {e}")
    });
    for _ in 0..16 {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a device number.
        let n = unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_GET_FREE) };
        assert!(
            n >= 0,
            "no free loop device: {}",
            std::io::Error::last_os_error()
        );
        let path = std::path::PathBuf::from(format!("/dev/loop{n}"));
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (this test needs loop devices)", path.display()));
        // SAFETY: LOOP_SET_FD takes the backing file's descriptor by value.
        if unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_SET_FD, backing.as_raw_fd()) } != 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(e.raw_os_error(), Some(libc::EBUSY), "LOOP_SET_FD: {e}");
            continue; // another process took it first
        }
        // SAFETY: `LoopInfo64` is plain old data; zeroed is valid.
        let mut info: LoopInfo64 = unsafe { std::mem::zeroed() };
        info.flags = LO_FLAGS_AUTOCLEAR;
        // SAFETY: LOOP_SET_STATUS64 reads one `struct loop_info64` through the pointer.
        let r = unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_SET_STATUS64, &info) };
        assert_eq!(
            r,
            0,
            "LOOP_SET_STATUS64: {}",
            std::io::Error::last_os_error()
        );
        return Loop { path, _fd: dev };
    }
    panic!("could not attach a loop device");
}

/// A block device member is opened with O_EXCL as well as locked: refused while this process
/// holds it as a member (holder named) or while something opened it exclusively (say so).
#[test]
fn a_block_device_member_is_opened_exclusively() {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dev = loop_device(dir.path(), 8 * MIB);
    let m = UringFile::open(&dev.path).unwrap();
    assert!(m.is_block_device());
    assert_eq!(m.len(), 8 * MIB);
    let e = UringFile::open(&dev.path).err().unwrap();
    let UringError::InUse { holder_pid, .. } = &e else {
        panic!("wrong error: {e}")
    };
    assert_eq!(*holder_pid, Some(std::process::id()), "{e}");
    // The kernel's own exclusivity: another O_EXCL open is refused.
    let busy = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(&dev.path)
        .unwrap_err();
    assert_eq!(busy.raw_os_error(), Some(libc::EBUSY));
    drop(m);
    // Held exclusively by something that takes no lock (a mount, md, another tool).
    let other = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(&dev.path)
        .unwrap();
    let e = UringFile::open(&dev.path).err().unwrap();
    assert!(
        matches!(
            e,
            UringError::InUse {
                holder_pid: None,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("in use by another process (or it is mounted"),
        "{e}"
    );
    drop(other);
    let m = UringFile::open(&dev.path).unwrap();
    block_on(m.write(0, Buf::copy_from(&[9; 4096]).freeze(), true)).unwrap();
    block_on(m.flush()).unwrap();
    drop(m);
    // As a config's member: opened with the size the config gives it (what assembly does),
    // not created (O_CREAT with O_EXCL failed with EEXIST on every device).
    let m = UringFile::open_or_create(&dev.path, 8 * MIB)
        .unwrap_or_else(|e| panic!("a device member with its size: {e}"));
    assert!(m.is_block_device());
    assert_eq!(m.len(), 8 * MIB);
    let got = block_on(m.read(0, Buf::zeroed(4096))).unwrap();
    assert_eq!(&got[..], &[9; 4096][..]);
}

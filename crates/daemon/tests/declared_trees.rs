//! Declared trees end to end: `nbraidd` on configs/raid5-of-mirrors.toml (members shrunk, in a
//! temporary directory) creates the array with the tree in every superblock, serves it to
//! nbdcopy, refuses a changed tree naming both, and reads everything back with a whole mirror
//! and one more member gone; a mirror of RAID 5 groups and a concat of mirrors sharing members
//! resync after a SIGKILL (copies made to disagree behind the daemon agree again, parity is
//! consistent), assemble by superblock with member paths swapped and read back with a member
//! lost.

mod common;
use common::{require, run, run_output, Daemon};

use nbraid_core::metadata::{newest, Superblock, SLOT_BYTES};
use nbraid_layout::Node;
use std::path::{Path, PathBuf};
use std::process::Command;

const MIB: u64 = 1 << 20;

/// The example config, its member files in `dir` at 33 MiB (32 MiB after the metadata
/// reserve), listening on a Unix socket there.
fn example(dir: &Path) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(repo.join("configs/raid5-of-mirrors.toml")).unwrap();
    let text = text
        .replace("data/raid5-of-mirrors/", "")
        // 1 MiB of metadata, 1 MiB of block checksums, a 32 MiB region.
        .replace("size = \"1GiB\"", "size = \"34MiB\"")
        .replace(
            "listen = [\"unix:/run/nbraid/nbd.sock\", \"tcp:127.0.0.1:10809\"]",
            "listen = [\"unix:nbd.sock\"]",
        );
    assert!(text.contains("unix:nbd.sock") && text.contains("34MiB"));
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// Starts nbraidd and waits for its control-socket line (printed after the URIs).
fn start(config: &Path) -> Daemon {
    Daemon::start(config, "warn", true, |l| {
        l.starts_with("nbraidd: control socket")
    })
}

fn uri(d: &Daemon, export: &str) -> String {
    let line = d
        .printed
        .iter()
        .find(|l| l.trim_start().starts_with(&format!("{export}: ")))
        .unwrap_or_else(|| panic!("no URI for {export} in {:?}", d.printed));
    line.split_whitespace().nth(1).unwrap().to_string()
}

/// `len` bytes no two 8-byte words of which are alike, seeded.
fn pattern(len: u64, seed: u64) -> Vec<u8> {
    (0..len / 8)
        .flat_map(|i| {
            (i ^ (seed << 48))
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .to_le_bytes()
        })
        .collect()
}

/// Copies `data` into the export through nbdcopy.
fn put(dir: &Path, uri: &str, data: &[u8]) {
    let nbdcopy = require("nbdcopy", "libnbd-bin");
    let src = dir.join("src.bin");
    std::fs::write(&src, data).unwrap();
    run(Command::new(nbdcopy).arg(&src).arg(uri));
    std::fs::remove_file(src).unwrap();
}

/// Reads the whole export back through nbdcopy.
fn get(dir: &Path, uri: &str) -> Vec<u8> {
    let nbdcopy = require("nbdcopy", "libnbd-bin");
    let back = dir.join("back.bin");
    run(Command::new(nbdcopy).arg(uri).arg(&back));
    let data = std::fs::read(&back).unwrap();
    std::fs::remove_file(back).unwrap();
    data
}

fn size(uri: &str) -> u64 {
    let nbdinfo = require("nbdinfo", "libnbd-bin");
    run(Command::new(nbdinfo).args(["--size", uri]))
        .trim()
        .parse()
        .unwrap()
}

/// The newest superblock of a member file.
fn superblock(path: &Path) -> Superblock {
    let bytes = std::fs::read(path).unwrap();
    let slot = |i: u64| Superblock::decode(&bytes[(i * SLOT_BYTES) as usize..]);
    newest([slot(0), slot(1)]).unwrap().0
}

fn same(a: &[u8], b: &[u8], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: length");
    if let Some(i) = a.iter().zip(b).position(|(x, y)| x != y) {
        panic!("{what}: first difference at byte {i}");
    }
}

#[test]
fn raid5_over_mirrors_records_its_tree_refuses_a_changed_one_and_survives_a_mirror_and_a_half() {
    let dir = tempfile::tempdir().unwrap();
    let config = example(dir.path());
    let d = start(&config);
    let vault = uri(&d, "vault");
    // raid5 over three mirrors of 32 MiB: two data children.
    assert_eq!(size(&vault), 64 * MIB);
    let data = pattern(64 * MIB, 1);
    put(dir.path(), &vault, &data);
    d.stop();

    // Every member records the tree the config declares, itself at its place in it.
    let c = nbraid_config::load(&config).unwrap();
    let v = c.volume("vault").unwrap();
    assert!(matches!(v.geometry.root(), Node::Parity(_)));
    for (role, &m) in v.members.iter().enumerate() {
        let sb = superblock(&c.members[m].path);
        let rec = sb.volumes.iter().find(|r| r.name == "vault").unwrap();
        assert_eq!(&rec.tree, v.geometry.root(), "{}", c.members[m].id);
        assert_eq!(rec.role as usize, role);
    }

    // A changed tree is refused with both kinds named; nothing is reinterpreted.
    let text = std::fs::read_to_string(&config).unwrap();
    let changed = text.replace(
        "tree = { raid5 = [\n    { mirror = [\"d0\", \"d1\"] },\n    { mirror = [\"d2\", \"d3\"] },\n    { mirror = [\"d4\", \"d5\"] },\n], strip = \"64KiB\", parity_layout = \"left-symmetric\" }",
        "tree = { mirror = [{ raid5 = [\"d0\", \"d1\", \"d2\"] }, { raid5 = [\"d3\", \"d4\", \"d5\"] }] }",
    );
    assert_ne!(changed, text, "the example's tree is as this test expects");
    std::fs::write(&config, &changed).unwrap();
    let o = run_output(
        Command::new(env!("CARGO_BIN_EXE_nbraidd"))
            .arg("--config")
            .arg(&config),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a changed tree started: {err}");
    assert!(
        err.contains("the config says level a mirror (RAID 1), the superblocks record a parity group (RAID 5)"),
        "{err}"
    );
    std::fs::write(&config, &text).unwrap();

    // A whole mirror (d2, d3) and one half of another (d4) gone: still every byte.
    for id in ["d2", "d3", "d4"] {
        std::fs::remove_file(dir.path().join(format!("{id}.img"))).unwrap();
    }
    let d = start(&config);
    same(&get(dir.path(), &uri(&d, "vault")), &data, "vault degraded");
    let stderr = d.stop();
    assert!(stderr.contains("DEGRADED"), "{stderr}");
}

/// `len` bytes of member file `i` from `at`.
fn member_bytes(dir: &Path, i: usize, at: u64, len: u64) -> Vec<u8> {
    let bytes = std::fs::read(dir.join(format!("d{i}.img"))).unwrap();
    bytes[at as usize..(at + len) as usize].to_vec()
}

/// Overwrites 4 KiB of member file `i` at `at` behind the daemon's back.
fn scribble(dir: &Path, i: usize, at: u64) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(format!("d{i}.img")))
        .unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&[0xa5; 4096]).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn mirror_of_raid5_and_concat_of_mirrors_resync_after_a_crash_assemble_by_superblock_and_survive_a_lost_member(
) {
    let dir = tempfile::tempdir().unwrap();
    let write = |swap: bool| {
        let mut t = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n".to_string();
        for i in 0..6 {
            // Swapped: d0 and d3 name each other's files.
            let file = match (swap, i) {
                (true, 0) => 3,
                (true, 3) => 0,
                _ => i,
            };
            t +=
                &format!("[[member]]\nid = \"d{i}\"\npath = \"d{file}.img\"\nsize = \"33MiB\"\n\n");
        }
        // Dirty from the first write until shutdown, without a bitmap: a crash resyncs all.
        t += "[[volume]]\nname = \"m5\"\nsize = \"16MiB\"\nclean_delay = \"off\"\nbitmap_chunk = \"off\"\nchecksums = \"off\"\n\
              tree = { mirror = [{ raid5 = [\"d0\", \"d1\", \"d2\"] }, { raid5 = [\"d3\", \"d4\", \"d5\"] }] }\n\n\
              [[volume]]\nname = \"cm\"\nclean_delay = \"off\"\nbitmap_chunk = \"off\"\nchecksums = \"off\"\n\
              tree = { concat = [{ mirror = [\"d0\", \"d1\"] }, { mirror = [\"d2\", \"d3\"] }] }\n";
        let file = dir.path().join("arrays.toml");
        std::fs::write(&file, t).unwrap();
        file
    };
    let config = write(false);
    let mut d = start(&config);
    let (m5, cm) = (uri(&d, "m5"), uri(&d, "cm"));
    assert_eq!(size(&m5), 16 * MIB);
    // Each mirror of the concat: what is left of 32 MiB after m5's 8 MiB.
    assert_eq!(size(&cm), 2 * 24 * MIB);
    let (a, b) = (pattern(16 * MIB, 2), pattern(48 * MIB, 3));
    put(dir.path(), &m5, &a);
    put(dir.path(), &cm, &b);
    d.child.kill().unwrap();
    d.child.wait().unwrap();

    // The second copies disagree with the first (as a crash between copies can leave them):
    // m5's second RAID 5 group on d3, cm's first mirror on d1.
    let (m5_at, cm_at) = (MIB, 9 * MIB);
    scribble(dir.path(), 3, m5_at + 100 * 1024);
    scribble(dir.path(), 1, cm_at + 5 * MIB);

    // Restarted dirty with d0 and d3 swapped in the config: assembled by superblock, resynced
    // through the nested nodes, every byte as written.
    let config = write(true);
    let d = start(&config);
    same(
        &get(dir.path(), &uri(&d, "m5")),
        &a,
        "m5 with paths swapped",
    );
    same(
        &get(dir.path(), &uri(&d, "cm")),
        &b,
        "cm with paths swapped",
    );
    d.stop();
    // On disk the copies agree again and every RAID 5 stripe's parity is the XOR of its data.
    let m5_len = 8 * MIB;
    let m: Vec<Vec<u8>> = (0..6)
        .map(|i| member_bytes(dir.path(), i, m5_at, m5_len))
        .collect();
    for i in 0..3 {
        same(&m[i], &m[i + 3], &format!("m5: d{i} and d{}", i + 3));
    }
    assert!(
        (0..m5_len as usize).all(|k| m[0][k] ^ m[1][k] ^ m[2][k] == 0),
        "m5: parity of the first group"
    );
    let c: Vec<Vec<u8>> = (0..4)
        .map(|i| member_bytes(dir.path(), i, cm_at, 24 * MIB))
        .collect();
    same(&c[0], &c[1], "cm: d0 and d1");
    same(&c[2], &c[3], "cm: d2 and d3");

    // d1 holds a RAID 5 child of m5's first copy and a copy of cm's first mirror.
    std::fs::remove_file(dir.path().join("d1.img")).unwrap();
    let config = write(false);
    let d = start(&config);
    same(&get(dir.path(), &uri(&d, "m5")), &a, "m5 without d1");
    same(&get(dir.path(), &uri(&d, "cm")), &b, "cm without d1");
    let stderr = d.stop();
    assert!(stderr.contains("DEGRADED"), "{stderr}");
}

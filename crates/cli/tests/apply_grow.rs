//! A volume with `size = "all"` grows when its members grow, through the real binaries: a
//! RAID 5 of three 9 MiB files serving data; the files grow to 17 MiB and the config says so;
//! `nbraid apply` plans a grow in place and `--yes` starts it online while an NBD client
//! writes and reads (every read checked against a model). The new space is synced before a
//! new connection sees it (nbdinfo), and a check-only scrub finds no stripe out of step.
//! Then the files grow again, the grow runs slowly and the daemon is SIGKILLed mid-way; after
//! the restart it finishes, every byte reads back, and a failed member is survived. Needs
//! `nbdcopy` and `nbdinfo` (fails loudly without).

mod common;

use common::nbd_model::{client, size_seen};
use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

/// `arrays.toml`: volume `db`, RAID 5 over d0..d2 of `member_mib` MiB each (1 MiB of
/// metadata, 1 MiB of block checksums, the rest the region), `size = "all"`, at `rate`.
fn config(dir: &Path, member_mib: u64, rate: &str) -> PathBuf {
    let mut text = daemon_and_members("d", 3, &format!("{member_mib}MiB"));
    text += &format!(
        "[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\n\
         members = [\"d0\", \"d1\", \"d2\"]\nsize = \"all\"\nrebuild_rate = \"{rate}\"\n"
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// The member files grown to `mib` MiB (as a grown LUN or logical volume would be).
fn grow_files(dir: &Path, mib: u64) {
    for i in 0..3 {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join(format!("d{i}.img")))
            .unwrap();
        f.set_len(mib * MIB).unwrap();
    }
}

/// A check-only scrub of the whole volume: no stripe whose parity disagrees with its data.
fn scrub_finds_nothing(cfg: &str) {
    let out = ok(nbraid(&["scrub", "db", "--config", cfg, "--json"]), "scrub");
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{out}: {e}"));
    assert_eq!(report["state"], "done", "{report:#}");
    assert_eq!(report["mismatches"], 0, "{report:#}");
}

#[test]
fn a_size_all_volume_grows_online_when_its_members_grow() {
    let (nbdcopy, nbdinfo) = (require("nbdcopy"), require("nbdinfo"));
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), 9, "64MiB");
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let (d, uri) = serve(&file, "db");
    let cap = status_of(cfg, "db")["capacity_bytes"].as_u64().unwrap();
    assert_eq!(cap, 14 * MIB, "two data members of 7 MiB");
    let data = seeded_bytes(3, cap);
    copy_in(&nbdcopy, dir.path(), &uri, &data);

    // 9 → 17 MiB members: planned as a grow in place, started online while a client works.
    grow_files(dir.path(), 17);
    config(dir.path(), 17, "64MiB");
    let plan = ok(nbraid(&["apply", cfg]), "apply (plan)");
    assert!(plan.contains("~ size 14 MiB → 30 MiB"), "{plan}");
    assert!(plan.contains("grow online"), "{plan}");
    let model = Arc::new(Mutex::new(data));
    let stop = Arc::new(AtomicBool::new(false));
    let busy = client(uri.clone(), model.clone(), cap, stop.clone());
    let out = ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes");
    assert!(out.contains("started online"), "{out}");
    wait_until(cfg, "db", "the grow to 30 MiB", |v| {
        v["reshape"]["state"] == "done" && v["capacity_bytes"].as_u64() == Some(30 * MIB)
    });
    stop.store(true, SeqCst);
    assert!(busy.join().expect("the client saw every byte it wrote") > 0);
    assert_eq!(
        size_seen(&nbdinfo, &uri),
        30 * MIB,
        "a new connection sees it"
    );
    scrub_finds_nothing(cfg);
    let mut data = model.lock().unwrap().clone();
    data.extend(seeded_bytes(4, 16 * MIB));
    copy_in(&nbdcopy, dir.path(), &uri, &data);

    // 17 → 33 MiB, slowly: SIGKILL while the new space is being synced, then the restart.
    grow_files(dir.path(), 33);
    config(dir.path(), 33, "2MiB");
    let out = ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes again");
    assert!(out.contains("started online"), "{out}");
    wait_until(cfg, "db", "the sync of the new space to move", |v| {
        v["reshape"]["position_bytes"].as_u64().unwrap_or(0) > 30 * MIB
    });
    let mut d = d;
    d.child.kill().unwrap(); // SIGKILL
    d.child.wait().unwrap();
    config(dir.path(), 33, "64MiB");
    let (mut d, uri) = serve(&file, "db");
    wait_until(cfg, "db", "the grow to 62 MiB", |v| {
        v["reshape"]["state"] == "done" && v["capacity_bytes"].as_u64() == Some(62 * MIB)
    });
    assert_eq!(size_seen(&nbdinfo, &uri), 62 * MIB);
    scrub_finds_nothing(cfg);
    ok(nbraid(&["fail", "db", "d1", "--config", cfg]), "fail d1");
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data); // with d1 failed
    d.stop();
}

/// A checksummed volume (the default) whose members grow past what the block-checksum reserve
/// before its regions covers (about 510 MiB of region per MiB): the region stays where its
/// records start it (the config reads them: `nbraid_assembly::pins`), the checksum area moves
/// right after the grown region, every old checksum with it — a block corrupted in the old
/// space behind the daemon reads back right afterwards — and the daemon starts again on the
/// grown volume, its log still in the metadata area. The member files are sparse.
#[test]
fn a_volume_grows_past_its_checksum_reserve() {
    let (nbdcopy, nbdinfo) = (require("nbdcopy"), require("nbdinfo"));
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), 9, "1GiB");
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let (mut d, uri) = serve(&file, "db");
    let data = seeded_bytes(5, 14 * MIB);
    copy_in(&nbdcopy, dir.path(), &uri, &data);

    // 9 → 1100 MiB members: 1095 MiB regions, whose 3 MiB of checksums go after them. A
    // new volume of regions this large would get an 8 MiB log reserve before them; this one
    // keeps the log its records hold, in the metadata area.
    grow_files(dir.path(), 1100);
    config(dir.path(), 1100, "1GiB");
    let plan = ok(nbraid(&["apply", cfg]), "apply (plan)");
    assert!(plan.contains("grow online"), "{plan}");
    let out = ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes");
    assert!(out.contains("started online"), "{out}");
    let grown = 2 * 1095 * MIB;
    wait_until(cfg, "db", "the grow past the checksum reserve", |v| {
        v["reshape"]["state"] == "done" && v["capacity_bytes"].as_u64() == Some(grown)
    });
    assert_eq!(size_seen(&nbdinfo, &uri), grown);
    scrub_finds_nothing(cfg);

    // Old checksums moved with the area: bad blocks of the old space are caught and rebuilt.
    d.stop();
    let region_start = 2 * MIB;
    for block in [0, 16, 32, 48] {
        blocks::corrupt(&dir.path().join("d1.img"), region_start, block, 40 + block);
    }
    let check = ok(nbraid(&["check", cfg]), "check after the grow");
    assert!(!check.contains("refused"), "{check}");
    let (mut d, uri) = serve(&file, "db");
    let out = dir.path().join("out.img");
    ok(
        Command::new(&nbdcopy).arg(&uri).arg(&out).output().unwrap(),
        "nbdcopy out of the grown volume",
    );
    let got = std::fs::read(&out).unwrap();
    assert_eq!(got.len() as u64, grown);
    assert!(got[..data.len()] == data[..], "the old bytes read back");
    assert!(
        got[data.len()..].iter().all(|&b| b == 0),
        "the new space reads zeroes"
    );
    let d1 = &status_of(cfg, "db")["members"][1];
    assert!(d1["checksum_errors"].as_u64().unwrap_or(0) >= 2, "{d1:#}");
    d.stop();
}

//! `nbraid status` tells the truth where it used to mislead: failed roles no spare can help
//! say why (not "`nbraid add` a spare"); a pass resumed after a restart shows its share of
//! the whole pass and a rate measured since the resume; a reshape stopped by a missing
//! member says so and names it; the counts say since when they count. Through the real
//! binaries (`nbraidd` built beside `nbraid`).

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// `mm`: a mirror of two RAID 5 groups, a0..a2 and b0..b2 (9 MiB files).
fn mirror_of_raid5s(dir: &Path) -> PathBuf {
    let mut text = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n".to_string();
    for id in ["a0", "a1", "a2", "b0", "b1", "b2"] {
        text += &format!("[[member]]\nid = \"{id}\"\npath = \"{id}.img\"\nsize = \"9MiB\"\n\n");
    }
    text += "[[volume]]\nname = \"mm\"\nstrip_size = \"64KiB\"\nchecksums = \"off\"\n\
             tree = { mirror = [{ raid5 = [\"a0\", \"a1\", \"a2\"] }, { raid5 = [\"b0\", \"b1\", \"b2\"] }] }\n";
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// Two members of one RAID 5 lost: beyond that group's tolerance, nothing can rebuild them.
/// `status` and `rebuild` say so and why, naming the group — `rebuild` said "no spare to
/// take them (`nbraid add` one)", and a spare added would only have stood by. The counts
/// say since when they count (the daemon's start).
#[test]
fn roles_no_spare_can_help_say_why_and_counts_say_since_when() {
    let dir = tempfile::tempdir().unwrap();
    let config = mirror_of_raid5s(dir.path());
    let cfg = config.to_str().unwrap();
    let mut d = Daemon::start(&config);
    ok(nbraid(&["fail", "mm", "a0", "--config", cfg]), "fail a0");
    ok(nbraid(&["fail", "mm", "a1", "--config", cfg]), "fail a1");
    let v = status_of(cfg, "mm");
    let stuck = v["unrebuildable"]
        .as_array()
        .expect("unrebuildable in --json");
    let ids: Vec<&str> = stuck.iter().filter_map(|u| u["id"].as_str()).collect();
    assert_eq!(ids, ["a0", "a1"], "{v:#}");
    assert_eq!(
        stuck[0]["group"]["ids"],
        serde_json::json!(["a0", "a1", "a2"])
    );
    assert_eq!(stuck[0]["group"]["tolerates"], 1);
    let table = ok(nbraid(&["status", "--config", cfg]), "status");
    assert!(
        table.contains(
            "  roles 0 (a0), 1 (a1) cannot be rebuilt: its RAID 5 group (a0, a1, a2) lost 2"
        ),
        "{table}"
    );
    let said = ok(nbraid(&["rebuild", "mm", "--config", cfg]), "rebuild");
    assert!(!said.contains("nbraid add"), "{said}");
    assert!(said.contains("no spare can help"), "{said}");
    let json = ok(
        nbraid(&["rebuild", "mm", "--json", "--config", cfg]),
        "rebuild",
    );
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        json["unrebuildable"].as_array().map(Vec::len),
        Some(2),
        "{json:#}"
    );

    let now_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let since = &v["counted_since"];
    assert_eq!(since["by"], "daemon start", "{v:#}");
    assert!(
        since["unix_s"]
            .as_u64()
            .is_some_and(|s| s <= now_s && s + 60 > now_s),
        "{v:#}"
    );
    assert!(table.contains("  counts since "), "{table}");
    d.stop();
}

/// A scrub resumed after a SIGKILL: from its first report on, its share is of the whole
/// volume from its checkpoint (not of 0 bytes), its rate is measured since the resume and
/// keeps to the limit (the first window's burst read as 200 MB/s at a 2 MB/s limit, with an
/// ETA of 0 s), and its counts say where they begin.
#[test]
fn a_resumed_scrub_shows_its_share_and_a_rate_since_the_resume() {
    let dir = tempfile::tempdir().unwrap();
    // The resumed scrub runs at the volume's rate (the one asked is not recorded).
    let config = write_config_with(dir.path(), &[], "rebuild_rate = \"2MB/s\"\n");
    let cfg = config.to_str().unwrap();
    let mut d = Daemon::start(&config);
    let cap = volume_status(cfg)["capacity_bytes"].as_u64().unwrap();
    let limit = 2_000_000u64;
    let scrub = format!(r#"{{"v":1,"op":"scrub","volume":"r6","rate_bytes_per_s":{limit}}}"#);
    exchange(&d.control, &[scrub.as_bytes()]);
    wait_for(cfg, "the scrub past a checkpoint", |v| {
        v["scrub"]["position_bytes"].as_u64().unwrap_or(0) >= 6 * MIB
    });
    d.child.kill().unwrap(); // SIGKILL: the checkpoint in the records is all that is left
    d.child.wait().unwrap();
    let mut d = Daemon::start(&config);
    let deadline = Instant::now() + Duration::from_secs(4);
    let (mut seen, mut measured) = (0, 0);
    while Instant::now() < deadline {
        let v = volume_status(cfg);
        let s = &v["scrub"];
        if s.is_null() {
            continue;
        }
        seen += 1;
        let at = s["position_bytes"].as_u64().unwrap();
        assert_eq!(s["total_bytes"].as_u64(), Some(cap), "{s:#}");
        assert!(at >= 2 * MIB, "resumed at its checkpoint, not 0: {s:#}");
        assert!(
            s["counted_from_bytes"]
                .as_u64()
                .is_some_and(|f| f >= 2 * MIB && f <= at),
            "{s:#}"
        );
        let rate = s["rate_bytes_per_s"].as_u64().unwrap();
        assert!(rate <= limit * 3 / 2, "a rate above the limit: {s:#}");
        if rate > 0 {
            measured += 1;
            assert!(s["eta_s"].as_u64().is_some_and(|e| e > 0), "{s:#}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        seen > 0 && measured > 0,
        "the scrub resumed and its rate was measured"
    );
    let table = ok(nbraid(&["status", "--config", cfg]), "status");
    assert!(table.contains(" bad since "), "{table}");
    d.stop();
}

/// `db`: RAID 5 over the first `members` of d0..d3 (9 MiB files), reshaped at 1 MiB/s.
fn raid5(dir: &Path, members: usize) -> PathBuf {
    let mut text = daemon_and_members("d", 4, "9MiB");
    let ids: Vec<String> = (0..members).map(|i| format!("\"d{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\n\
         members = [{}]\nrebuild_rate = \"1MiB\"\n",
        ids.join(", ")
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// A reshape whose restart finds a member missing cannot go on: status said `idle`, with
/// no reason and a share of the copy alone. It says `failed`, why, and names the member; its
/// share is of the whole pass, as before the restart.
#[test]
fn a_reshape_stopped_by_a_missing_member_says_so_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = raid5(dir.path(), 3);
    let cfg = config.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let mut d = Daemon::start(&config);
    raid5(dir.path(), 4);
    ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes");
    let before = wait_until(cfg, "db", "the reshape to move", |v| {
        v["reshape"]["position_bytes"].as_u64().unwrap_or(0) > MIB
    });
    let total = before["reshape"]["total_bytes"].as_u64().unwrap();
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    let d1 = dir.path().join("d1.img");
    std::fs::rename(&d1, dir.path().join("d1.away")).unwrap();
    let mut d = Daemon::start(&config);
    let v = wait_until(cfg, "db", "the reshape to stop", |v| {
        v["reshape"]["state"] != "idle" && v["reshape"]["state"] != "running"
    });
    let r = &v["reshape"];
    assert_eq!(r["state"], "failed", "{v:#}");
    let why = r["error"].as_str().expect("a reason");
    assert!(why.contains("d1 (") && why.contains("d1.img"), "{why}");
    assert_eq!(
        r["total_bytes"].as_u64(),
        Some(total),
        "the whole pass's: {r:#}"
    );
    let table = ok(nbraid(&["status", "--config", cfg]), "status");
    assert!(table.contains("  reshape failed "), "{table}");
    assert!(table.contains("stopped by an error: "), "{table}");
    d.stop();
}

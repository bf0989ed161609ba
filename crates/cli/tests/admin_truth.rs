//! Every admin command tells the truth (issue 37): a write bench asks before it destroys a
//! volume's data, `map` and `check --diagram` name the file the superblocks put in a role,
//! a pre-flight check fails when the start would, one spelling of units everywhere.

mod common;

use common::{daemon_and_memory_members, nbraid, nbraidd, ok, write_config};
use std::path::Path;

/// The bytes of every member file of `r6` (from [`write_config`]), to see they did not change.
fn members_bytes(dir: &Path) -> Vec<Vec<u8>> {
    (0..6)
        .map(|i| std::fs::read(dir.join(format!("d{i}.img"))).unwrap())
        .collect()
}

#[test]
fn a_write_bench_on_a_config_volume_needs_destroy_data() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path());
    let cfg = cfg.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "nbraid create");
    let before = members_bytes(dir.path());
    let bench = |workload: &str, extra: &[&str]| {
        let mut args = vec!["bench", workload, "--config", cfg, "--volume", "r6"];
        args.extend(["--qd", "4", "--bytes", "1MiB", "--json"]);
        args.extend(extra);
        nbraid(&args)
    };
    for workload in ["rand-write", "seq-write", "database", "fileserver"] {
        let o = bench(workload, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{workload} ran without --destroy-data");
        assert!(
            err.contains(&format!("{workload} writes over volume r6's data"))
                && err.contains("--destroy-data"),
            "{workload}: {err}"
        );
        assert!(
            members_bytes(dir.path()) == before,
            "{workload}: refused, yet the members changed"
        );
    }
    // Reads are free.
    ok(bench("rand-read", &[]), "rand-read");
    ok(
        bench("database", &["--read-pct", "100"]),
        "database 100% reads",
    );
    // Told, it writes, and says so first.
    let o = bench("rand-write", &["--destroy-data"]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    ok(o, "rand-write --destroy-data");
    assert!(
        err.contains("rand-write writes over volume r6's data (--destroy-data)"),
        "{err}"
    );
}

#[test]
fn a_check_fails_when_the_start_would() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path());
    let cfg = cfg.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "nbraid create");
    ok(nbraid(&["check", cfg]), "check of a healthy array");
    ok(
        nbraidd(&["--config", cfg, "--check"]),
        "nbraidd --check of a healthy array",
    );
    // Three of six members blanked: more than RAID 6 survives.
    for i in 0..3 {
        let f = std::fs::File::create(dir.path().join(format!("d{i}.img"))).unwrap();
        f.set_len(9 << 20).unwrap();
    }
    let start = nbraidd(&["--config", cfg]);
    assert!(
        !start.status.success(),
        "the daemon started on three blank members"
    );
    for json in [false, true] {
        let mut args = vec!["check", cfg];
        args.extend(json.then_some("--json"));
        let o = nbraid(&args);
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert!(!o.status.success(), "nbraid check exited 0:\n{out}");
        assert!(out.contains("refused"), "the report is printed: {out}");
        assert!(
            err.contains("nbraidd would refuse to start") && err.contains("r6"),
            "{err}"
        );
    }
    let o = nbraidd(&["--config", cfg, "--check"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "nbraidd --check exited 0");
    assert!(
        err.contains("a start would fail: volume r6: superblocks refused"),
        "{err}"
    );
}

#[test]
fn sizes_and_rates_need_a_unit_in_the_config_and_on_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    for (rate, says) in [
        // Was 100 B/s, silently.
        ("\"100\"", "rebuild_rate \"100\" has no unit: write \"100B\""),
        ("1000000", "rebuild_rate 1000000 has no unit: write \"1000000B\" or \"1MB\""),
        // Was taken for 512 MB.
        ("\"512Mb\"", "\"512Mb\" is in bits (\"Mb\"); sizes are in bytes: write \"512MiB\" (binary) or \"512MB\" (decimal)"),
        ("\"512mib\"", "write the unit as \"MiB\": \"512MiB\""),
    ] {
        let cfg = common::write_config_with(dir.path(), &[], &format!("rebuild_rate = {rate}\n"));
        let cfg = cfg.to_str().unwrap();
        for o in [nbraid(&["check", cfg]), nbraidd(&["--config", cfg, "--check"])] {
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(!o.status.success(), "rebuild_rate = {rate} was accepted");
            assert!(err.contains("arrays.toml:") && err.contains(says), "{rate}: {err}");
        }
    }
    for good in ["\"100MiB\"", "\"100MB/s\"", "\"adaptive\""] {
        let cfg = common::write_config_with(dir.path(), &[], &format!("rebuild_rate = {good}\n"));
        ok(nbraid(&["check", cfg.to_str().unwrap()]), good);
    }
    // The command line takes the config's spelling: a bare number was MB/s there, and
    // "100MiB" was refused.
    let cfg = write_config(dir.path());
    let cfg = cfg.to_str().unwrap();
    let o = nbraid(&["scrub", "r6", "--rate", "100", "--config", cfg]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("\"100\" has no unit"),
        "{err}"
    );
    for rate in ["100MiB", "100MB/s", "adaptive"] {
        // No daemon runs: the rate is taken, the connection is what fails.
        let o = nbraid(&["scrub", "r6", "--rate", rate, "--config", cfg]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !err.contains("--rate") && !err.contains("not a rate"),
            "{rate}: {err}"
        );
    }
    let o = nbraid(&["map", cfg, "r6", "4096"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("\"4096\" has no unit: write \"4096B\" or \"4KiB\""),
        "{err}"
    );
    ok(nbraid(&["map", cfg, "r6", "0", "4KiB"]), "map 0 4KiB");
}

#[test]
fn map_and_diagram_name_the_file_the_superblocks_put_in_a_role() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(dir.path());
    ok(nbraid(&["create", cfg.to_str().unwrap()]), "nbraid create");
    // The config now names d0's file d1 and d1's file d0: role 0 is still in d0.img.
    let text = std::fs::read_to_string(&cfg).unwrap();
    let swapped = text
        .replace("path = \"d0.img\"", "path = \"tmp.img\"")
        .replace("path = \"d1.img\"", "path = \"d0.img\"")
        .replace("path = \"tmp.img\"", "path = \"d1.img\"");
    std::fs::write(&cfg, swapped).unwrap();
    let cfg = cfg.to_str().unwrap();
    let v: serde_json::Value = serde_json::from_str(&ok(
        nbraid(&["map", cfg, "r6", "0", "--json"]),
        "map --json",
    ))
    .unwrap();
    // `create` wrote role i's superblock on d{i}.img: every extent is named by that file.
    let rows = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .chain(v["parity"].as_array().unwrap());
    for e in rows {
        let role = e["member_index"].as_u64().unwrap();
        assert_eq!(e["member_path"], format!("d{role}.img"), "{v}");
        let id = match role {
            0 => "d1".to_string(),
            1 => "d0".to_string(),
            r => format!("d{r}"),
        };
        assert_eq!(e["member"], id.as_str(), "{v}");
    }
    assert_eq!(v["data"][0]["role"], "data", "the table's word: {v}");
    let table = ok(nbraid(&["map", cfg, "r6", "0"]), "map");
    assert!(
        table.contains("roles follow the superblocks, not the config's order: 0 = d1 (d0.img), 1 = d0 (d1.img)"),
        "{table}"
    );
    let row = table.lines().find(|l| l.starts_with("0 ")).expect("a row");
    // D0 is on role 1: d1.img, which the config now calls d0.
    assert!(row.contains(" d0 ") && row.contains(" d1.img "), "{table}");
    let drawn = ok(nbraid(&["check", "--diagram", cfg]), "check --diagram");
    let header = drawn
        .lines()
        .find(|l| l.trim_start().starts_with("row "))
        .expect("the grid's header");
    let columns: Vec<&str> = header.split_whitespace().skip(1).collect();
    assert_eq!(columns, ["d1", "d0", "d2", "d3", "d4", "d5"], "{drawn}");
}

#[test]
fn exports_describe_their_shape_and_prefer_a_block_within_one_stripe() {
    let nbdinfo = common::require("nbdinfo");
    let dir = tempfile::tempdir().unwrap();
    let mut text = daemon_and_memory_members("m", 6, "16MiB");
    text += "[[volume]]\nname = \"r5\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\nmembers = [\"m0\", \"m1\", \"m2\", \"m3\"]\n\n";
    text += "[[volume]]\nname = \"r1\"\nlevel = \"raid1\"\nmembers = [\"m4\", \"m5\"]\n";
    let cfg = dir.path().join("arrays.toml");
    std::fs::write(&cfg, text).unwrap();
    let _daemon = common::Daemon::start(&cfg);
    let socket = dir.path().join("nbd.sock");
    let info = |name: &str| -> serde_json::Value {
        let uri = format!("nbd+unix:///{name}?socket={}", socket.display());
        let o = std::process::Command::new(&nbdinfo)
            .args(["--json", &uri])
            .output()
            .unwrap();
        let out = ok(o, "nbdinfo");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["exports"][0].clone()
    };
    let r5 = info("r5");
    // Three data members, 192 KiB stripes: 256 KiB (rounded up to a power of two, as NBD
    // wants) straddled two of them.
    assert_eq!(r5["block_size_preferred"], 64 << 10, "{r5}");
    assert_eq!(
        r5["description"],
        "nbraid raid5 over m0 m1 m2 m3 (3 data members, strip 64 KiB)"
    );
    let r1 = info("r1");
    assert_eq!(
        r1["description"], "nbraid raid1 over m4 m5 (2 copies)",
        "{r1}"
    );
    // The daemon's refusal reads as a message, without the protocol's code.
    let o = nbraid(&["fail", "r1", "nope", "--config", cfg.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "failing member nope was accepted");
    assert!(
        err.contains("has no member \"nope\"") && !err.contains("not-found"),
        "{err}"
    );
}

/// A config over 2 members `m0` and `m1` of `member_size`, served on a Unix socket, then
/// `volumes` (TOML tables).
fn two_member_config(dir: &Path, member_size: [&str; 2], volumes: &str) -> String {
    let mut text = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n".to_string();
    for (i, size) in member_size.iter().enumerate() {
        text += &format!("[[member]]\nid = \"m{i}\"\npath = \"m{i}.img\"\nsize = \"{size}\"\n\n");
    }
    text += volumes;
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file.to_str().unwrap().to_string()
}

const VOLUME_A: &str =
    "[[volume]]\nname = \"a\"\nlevel = \"raid1\"\nmembers = [\"m0\", \"m1\"]\nsize = \"20MiB\"\n\n";
const VOLUME_B: &str =
    "[[volume]]\nname = \"b\"\nlevel = \"raid0\"\nmembers = [\"m0\", \"m1\"]\nsize = \"20MiB\"\n";

#[test]
fn a_new_volume_beside_another_ones_records_is_to_be_created_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = two_member_config(dir.path(), ["300MiB", "300MiB"], VOLUME_A);
    common::Daemon::start(Path::new(&cfg)).stop();
    // `b` is appended: its members carry `a`'s records and none of its own, so the start
    // creates it beside them (Matrix). The checks said "refused" and exited 1.
    let cfg = two_member_config(
        dir.path(),
        ["300MiB", "300MiB"],
        &format!("{VOLUME_A}{VOLUME_B}"),
    );
    let out = ok(
        nbraid(&["check", &cfg]),
        "nbraid check of a new volume beside a",
    );
    assert!(
        out.contains("b: not created yet: created at the next start beside volume(s) a"),
        "{out}"
    );
    ok(nbraidd(&["--config", &cfg, "--check"]), "nbraidd --check");
    common::Daemon::start(Path::new(&cfg)).stop();
    let out = ok(nbraid(&["check", &cfg]), "nbraid check after the start");
    assert!(out.contains("b: healthy"), "{out}");
}

#[test]
fn a_jbod_whose_size_leaves_a_member_empty_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let jbod = "[[volume]]\nname = \"j\"\nlevel = \"jbod\"\nmembers = [\"m0\", \"m1\"]\nsize = \"30MiB\"\n";
    let cfg = two_member_config(dir.path(), ["300MiB", "300MiB"], jbod);
    for o in [nbraid(&["check", &cfg]), nbraidd(&["--config", &cfg])] {
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success(),
            "a jbod with an empty member was accepted"
        );
        assert!(
            err.contains("member(s) \"m1\" would hold none of it")
                && err.contains("list fewer members (members = [\"m0\"]) or give a larger size"),
            "{err}"
        );
    }
    assert!(
        !dir.path().join("m0.img").exists(),
        "a member file was created"
    );
}

#[test]
fn check_names_superblocks_that_do_not_decode() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = two_member_config(dir.path(), ["300MiB", "300MiB"], VOLUME_A);
    common::Daemon::start(Path::new(&cfg)).stop();
    // Both copies of both superblocks damaged past their checksums: no start can read them.
    for i in 0..2 {
        let path = dir.path().join(format!("m{i}.img"));
        let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        for slot_bytes in [0u64, 64 << 10] {
            std::os::unix::fs::FileExt::write_all_at(&f, &[0xee; 16], slot_bytes + 100).unwrap();
        }
    }
    let o = nbraid(&["check", &cfg]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "check exited 0:\n{out}");
    assert!(!out.contains("no superblocks yet"), "{out}");
    assert!(
        out.contains("a: refused") && out.contains("checksum mismatch"),
        "{out}"
    );
    let o = nbraidd(&["--config", &cfg, "--check"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "nbraidd --check exited 0");
    assert!(err.contains("checksum mismatch"), "{err}");
}

#[test]
fn a_jbod_over_unequal_members_starts_as_check_said() {
    let dir = tempfile::tempdir().unwrap();
    let jbod = "[[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"m0\", \"m1\"]\nsize = \"513MiB\"\n";
    let cfg = two_member_config(dir.path(), ["4MiB", "1GiB"], jbod);
    ok(nbraid(&["check", &cfg]), "nbraid check");
    // The daemon refused it: m1's checksum area outgrew the reserve check had sized.
    common::Daemon::start(Path::new(&cfg)).stop();
    let out = ok(nbraid(&["check", &cfg]), "nbraid check after the start");
    assert!(out.contains("v: healthy"), "{out}");
}

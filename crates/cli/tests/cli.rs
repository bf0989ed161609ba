//! Runs the built `nbraid` binary: every config in configs/ checks, the bad ones in
//! tests/bad/ fail with their located messages, and `map` draws md's RAID 5 picture.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn nbraid(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nbraid"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run nbraid")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn tomls(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_example_config_checks() {
    let configs = tomls(&repo().join("configs"));
    let names: Vec<String> = configs
        .iter()
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in [
        "raid0",
        "raid1",
        "raid5",
        "raid6",
        "raid10",
        "raid50",
        "raid60",
        "jbod",
        "matrix",
        "quickstart",
        "raid5-of-mirrors",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "configs/{want}.toml is missing"
        );
    }
    for file in configs {
        let f = &format!("configs/{}", file.file_name().unwrap().to_str().unwrap());
        let o = nbraid(&["check", f], &repo());
        assert!(o.status.success(), "{f}: {}", stderr(&o));
        let text = stdout(&o);
        assert!(
            text.contains("VOLUME ") && text.contains("FAULT TOLERANCE"),
            "{f}: {text}"
        );

        let o = nbraid(&["check", "--diagram", f], &repo());
        assert!(o.status.success(), "{f} --diagram: {}", stderr(&o));

        let o = nbraid(&["check", "--json", f], &repo());
        assert!(o.status.success(), "{f} --json: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("--json parses");
        let volumes = v["volumes"].as_array().expect("volumes");
        assert!(!volumes.is_empty(), "{f}");
        for vol in volumes {
            assert!(vol["capacity_bytes"].as_u64().unwrap() > 0, "{f}: {vol}");
            assert!(vol["fault_tolerance"]["worst"].is_u64(), "{f}: {vol}");
        }
    }
}

#[test]
fn check_draws_a_declared_tree_with_capacity_and_tolerance() {
    let o = nbraid(
        &["check", "--diagram", "configs/raid5-of-mirrors.toml"],
        &repo(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for want in [
        // The table: a tree, 2 data members, 2 × 1020 MiB (after the metadata area and the
        // 3 MiB of block checksums) rounded to whole stripes.
        "vault   tree   -      d0 d1 d2 d3 d4 d5  -      2     1.99 GiB (2139095040 bytes)  128 KiB      3 worst, 4 best",
        "vault: tree raid5:64KiB(mirror(d0 d1), mirror(d2 d3), mirror(d4 d5))",
        // The outline, each node with its capacity and tolerance.
        "  raid5, strip 64 KiB, left-symmetric  1.99 GiB, survives 3 lost members at worst\n  ├─ mirror  1020 MiB, survives 1 lost member at worst\n  │  ├─ d0  member bytes 4MiB .. 1GiB\n  │  └─ d1  member bytes 4MiB .. 1GiB\n",
        "     └─ d5  member bytes 4MiB .. 1GiB\n",
        // The grid, columns grouped by mirror, copies side by side.
        "  row  d0 d1 | d2 d3 | d4 d5\n    0  D0 D0 | D1 D1 | P0 P0\n    1  D3 D3 | P1 P1 | D2 D2\n",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    let o = nbraid(
        &["check", "--json", "configs/raid5-of-mirrors.toml"],
        &repo(),
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("--json parses");
    let vol = &v["volumes"][0];
    assert!(vol["level"].is_null(), "{vol}");
    assert_eq!(
        vol["tree"],
        "raid5:64KiB(mirror(d0 d1), mirror(d2 d3), mirror(d4 d5))"
    );
    assert_eq!(vol["fault_tolerance"]["worst"], 3);
    assert_eq!(vol["fault_tolerance"]["best"], 4);
    assert_eq!(vol["capacity_bytes"], 2139095040u64);

    // `map`: the first stripe's data on both copies of two mirrors, P on both of the third.
    let o = nbraid(
        &[
            "map",
            "configs/raid5-of-mirrors.toml",
            "vault",
            "0",
            "128KiB",
        ],
        &repo(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for want in [
        "vault: tree, 6 members: raid5:64KiB(mirror(d0 d1), mirror(d2 d3), mirror(d4 d5))",
        "0        65536   d1      data/raid5-of-mirrors/d1.img  4194304        data  0       1",
        "65536    65536   d3      data/raid5-of-mirrors/d3.img  4194304        data  0       1",
        "0        65536   d5      data/raid5-of-mirrors/d5.img  4194304        P     0       1",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
}

#[test]
fn check_reports_each_volume() {
    let o = nbraid(&["check", "configs/raid50.toml"], &repo());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains(
            "db      raid50  2      d0 d1 d2 | d3 d4 d5  64 KiB  4     15.92 GiB (17104371712 bytes)  256 KiB      1 worst, 2 best"
        ),
        "{text}"
    );
    let o = nbraid(&["check", "--json", "configs/raid50.toml"], &repo());
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let db = &v["volumes"][0];
    assert_eq!(db["level"], "raid50");
    assert_eq!(db["spans"], 2);
    assert_eq!(db["strip_size_bytes"], 65536);
    assert_eq!(db["data_members"], 4);
    assert_eq!(db["capacity_bytes"], 17104371712u64);
    assert_eq!(db["full_stripe_width_bytes"], 262144);
    assert_eq!(db["fault_tolerance"]["worst"], 1);
    assert_eq!(db["fault_tolerance"]["best"], 2);
    assert_eq!(db["members"][3]["id"], "d3");
    // After the metadata area, the 9 MiB of block checksums and the log's 8 MiB (4 GiB
    // members: regions of 1 GiB and more get the log in a reserve).
    assert_eq!(db["members"][3]["region_start_bytes"], 18 << 20);
}

/// Only parity groups have a stripe cache: a RAID 10 says it has none, whatever `cache` says.
#[test]
fn check_says_which_volumes_have_a_stripe_cache() {
    let o = nbraid(&["check", "configs/quickstart.toml"], &repo());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("r5: parity left-symmetric, cache write-back ("),
        "{text}"
    );
    assert!(
        text.contains("r10: reads least-pending, no stripe cache (no parity),"),
        "{text}"
    );
    let o = nbraid(&["check", "--json", "configs/quickstart.toml"], &repo());
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["volumes"][0]["has_parity"], true);
    assert_eq!(v["volumes"][1]["has_parity"], false);
}

/// Each file in tests/bad/ says on its second line `# error: <expected message start>`.
#[test]
fn bad_configs_fail_with_located_messages() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad");
    let files = tomls(&dir);
    assert!(files.len() >= 10);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let want = text
            .lines()
            .find_map(|l| l.strip_prefix("# error: "))
            .unwrap_or_else(|| panic!("{}: no `# error:` line", file.display()));
        let name = file.file_name().unwrap().to_str().unwrap();
        let o = nbraid(&["check", name], &dir);
        assert_eq!(o.status.code(), Some(1), "{name} was accepted");
        let err = stderr(&o);
        assert!(
            err.starts_with(&format!("error: {want}")),
            "{name}:\n  want error: {want}\n  got  {err}"
        );
        assert_eq!(err.lines().count(), 1, "{name}: one error, one line: {err}");
        assert!(stdout(&o).is_empty());

        let o = nbraid(&["check", "--json", name], &dir);
        assert_eq!(o.status.code(), Some(1));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("error JSON");
        assert!(v["error"]["line"].as_u64().unwrap() > 0);
        assert!(want.starts_with(&format!(
            "{name}:{}:{}: ",
            v["error"]["line"], v["error"]["column"]
        )));
    }
}

#[test]
fn missing_config_file() {
    let o = nbraid(&["check", "no-such.toml"], &repo());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with("error: no-such.toml: cannot read the config: "),
        "{}",
        stderr(&o)
    );
    // The cause once, though the message names it and is also its source.
    assert_eq!(
        stderr(&o).matches("No such file or directory").count(),
        1,
        "{}",
        stderr(&o)
    );
}

const RAID5: &str = r#"
[[member]]
id = "d0"
path = "d0.img"
size = "16MiB"
[[member]]
id = "d1"
path = "d1.img"
size = "16MiB"
[[member]]
id = "d2"
path = "d2.img"
size = "16MiB"
[[volume]]
name = "r5"
level = "raid5"
strip_size = "4KiB"
members = ["d0", "d1", "d2"]
"#;

fn raid5_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r5.toml"), RAID5).unwrap();
    dir
}

/// md's left-symmetric RAID 5 over three disks:
/// ```text
///   d0  d1  d2
///   D0  D1  P0
///   D3  P1  D2
///   P2  D4  D5
/// ```
#[test]
fn map_follows_md_left_symmetric() {
    let dir = raid5_dir();
    let o = nbraid(
        &["map", "r5.toml", "r5", "0", "24KiB", "--json"],
        dir.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    // After the metadata area and the 1 MiB of block checksums.
    let start = 2u64 << 20;
    let data: Vec<(String, u64, u64)> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["member"].as_str().unwrap().to_string(),
                e["member_offset"].as_u64().unwrap(),
                e["logical"].as_u64().unwrap(),
            )
        })
        .collect();
    let want_data = [
        ("d0", 0, 0),
        ("d1", 0, 1),
        ("d2", 1, 2),
        ("d0", 1, 3),
        ("d1", 2, 4),
        ("d2", 2, 5),
    ];
    assert_eq!(data.len(), want_data.len());
    for ((m, off, logical), (wm, row, chunk)) in data.iter().zip(want_data) {
        assert_eq!(
            (m.as_str(), *off, *logical),
            (wm, start + row * 4096, chunk * 4096)
        );
    }
    let parity: Vec<(String, u64, String, u64)> = v["parity"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["member"].as_str().unwrap().to_string(),
                e["member_offset"].as_u64().unwrap(),
                e["role"].as_str().unwrap().to_string(),
                e["stripe"]["stripe"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        parity,
        vec![
            ("d2".to_string(), start, "P".to_string(), 0),
            ("d1".to_string(), start + 4096, "P".to_string(), 1),
            ("d0".to_string(), start + 8192, "P".to_string(), 2),
        ]
    );

    // The text form names the same extents; sizes are accepted for OFFSET and LENGTH.
    let o = nbraid(&["map", "r5.toml", "r5", "12KiB", "4KiB"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        vec![
            vec!["12288", "4096", "d0", "d0.img", "2101248", "data", "1", "0"],
            vec!["8192", "4096", "d1", "d1.img", "2101248", "P", "1", "0"],
        ],
        "{text}"
    );

    // And the diagram draws the picture.
    let o = nbraid(&["check", "--diagram", "r5.toml"], dir.path());
    let text = stdout(&o);
    let grid: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("row"))
        .take(4)
        .map(str::trim)
        .collect();
    assert_eq!(
        grid,
        vec!["row  d0 d1 d2", "0  D0 D1 P0", "1  D3 P1 D2", "2  P2 D4 D5"],
        "{text}"
    );
}

#[test]
fn map_errors() {
    let dir = raid5_dir();
    let o = nbraid(&["map", "r5.toml", "nope", "0"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no volume \"nope\"; volumes: r5"),
        "{}",
        stderr(&o)
    );
    let o = nbraid(&["map", "r5.toml", "r5", "1TiB"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("outside the volume"), "{}", stderr(&o));
    let o = nbraid(&["map", "r5.toml", "r5", "12 parsecs"], dir.path());
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("OFFSET"), "{}", stderr(&o));
}

#[test]
fn create_makes_sparse_members_and_check_never_does() {
    let dir = raid5_dir();
    let o = nbraid(&["check", "r5.toml"], dir.path());
    assert!(o.status.success());
    assert!(!dir.path().join("d0.img").exists());
    let o = nbraid(&["create", "r5.toml"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::metadata(dir.path().join("d2.img")).unwrap().len(),
        16 << 20
    );
    let o = nbraid(&["check", "r5.toml"], dir.path());
    assert!(
        stdout(&o).contains("d0      d0.img  16 MiB"),
        "{}",
        stdout(&o)
    );
}

/// `nbraid create` refuses while a daemon holds the members, naming the member and the daemon,
/// and works again once the daemon is gone.
#[test]
fn create_refuses_members_a_daemon_holds() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let config = format!("[daemon]\nlisten = [\"unix:nbd.sock\"]\n{RAID5}");
    std::fs::write(dir.path().join("r5.toml"), config).unwrap();
    let o = nbraid(&["create", "r5.toml"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    // `nbraid serve` runs the nbraidd beside it: built by `cargo test --workspace` (scripts/test).
    let nbraidd = Path::new(env!("CARGO_BIN_EXE_nbraid")).with_file_name("nbraidd");
    assert!(
        nbraidd.is_file(),
        "{} is not built: run `cargo build --bin nbraidd` (or `cargo test --workspace`)",
        nbraidd.display()
    );
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_nbraid"))
        .args(["serve", "r5.toml", "--log-level", "warn"])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start nbraid serve");
    // Serving (members held) once it lists its export; EOF means it exited.
    let serving = BufReader::new(daemon.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .any(|l| l.trim_start().starts_with("r5:"));
    let o = nbraid(&["create", "r5.toml"], dir.path());
    let pid = daemon.id();
    daemon.kill().unwrap();
    daemon.wait().unwrap();
    assert!(serving, "nbraid serve exited before serving");
    assert!(!o.status.success(), "create ran on held members");
    let err = stderr(&o);
    assert!(err.contains("member d0 (d0.img)"), "{err}");
    assert!(
        err.contains(&format!("in use by process {pid} (nbraid")),
        "{err}"
    );
    let o = nbraid(&["create", "r5.toml"], dir.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("all 3 members exist"), "{}", stdout(&o));
}

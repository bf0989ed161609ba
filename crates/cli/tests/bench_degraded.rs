//! `nbraid bench --config FILE --volume NAME --fail-member MEMBER`: the bench on a degraded
//! volume (issue 36), so a user can see what a degraded sequential read costs. On simulated
//! members (virtual time: an exact ratio of a deterministic model) a degraded 1 MiB
//! sequential read of RAID 5 and 6 over 4 to 24 members keeps at least 0.85 of what the
//! members allow, (n − 1)/n of the healthy figure (readers of a stripe wait for the one
//! rebuilding it instead of reading it again: 0.55 of healthy on 24 members before); on
//! memory members the degraded volume serves what was written (`--verify`), and
//! members beyond the tolerance or not in the volume are refused.

mod common;

use common::daemon_and_memory_members;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A config of `n` memory members of `size` and one volume `v` of `level` over them.
fn config(dir: &Path, level: &str, n: usize, size: &str) -> PathBuf {
    let mut text = daemon_and_memory_members("m", n, size);
    let ids: Vec<String> = (0..n).map(|i| format!("\"m{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"v\"\nlevel = \"{level}\"\nstrip_size = \"64KiB\"\nmembers = [{}]\n",
        ids.join(", ")
    );
    let file = dir.join(format!("{level}x{n}.toml"));
    std::fs::write(&file, text).unwrap();
    file
}

fn bench(cfg: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nbraid"))
        .args(["bench"])
        .args(args)
        .args(["--config", cfg.to_str().unwrap(), "--volume", "v"])
        .output()
        .expect("run nbraid")
}

fn json(o: Output, what: &str) -> Value {
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("JSON")
}

fn mb_s(report: &Value) -> f64 {
    report["cells"][0]["mb_s"].as_f64().unwrap()
}

#[test]
fn a_degraded_sequential_read_keeps_most_of_the_healthy_figure() {
    let dir = tempfile::tempdir().unwrap();
    let seq = [
        "seq-read",
        "--sim",
        "ssd",
        "--bs",
        "1MiB",
        "--qd",
        "8",
        "--duration",
        "0.5s",
        "--json",
    ];
    for (level, n) in [
        ("raid5", 4),
        ("raid6", 4),
        ("raid5", 8),
        ("raid6", 8),
        ("raid5", 24),
        ("raid6", 24),
    ] {
        let cfg = config(dir.path(), level, n, "256MiB");
        let healthy = mb_s(&json(bench(&cfg, &seq), "healthy"));
        let o = bench(&cfg, &[&seq[..], &["--fail-member", "m1"]].concat());
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        let degraded = mb_s(&json(o, "degraded"));
        assert!(
            err.contains("member m1 (role 1) failed"),
            "{level}x{n}: the run says it is degraded: {err}"
        );
        let ratio = degraded / healthy;
        // Member-bound, a degraded read has n − 1 members to read what n read healthy.
        let theory = (n - 1) as f64 / n as f64;
        assert!(
            ratio >= 0.85 * theory,
            "{level}x{n}: degraded {degraded:.0} MB/s vs healthy {healthy:.0} MB/s = {ratio:.2}, theory {theory:.2}"
        );
    }
}

#[test]
fn a_degraded_volume_serves_what_was_written_and_tolerance_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "raid5", 8, "16MiB");
    // Writes and reads back every sector on the degraded volume (role 3 by number).
    let write = [
        "seq-write",
        "--destroy-data",
        "--verify",
        "--bs",
        "1MiB",
        "--bytes",
        "64MiB",
        "--fail-member",
        "3",
        "--json",
    ];
    let r = json(bench(&cfg, &write), "degraded write and read-back");
    assert!(mb_s(&r) > 0.0);
    // Two members of a RAID 5: refused, naming why.
    let o = bench(
        &cfg,
        &[
            "seq-read",
            "--bytes",
            "1MiB",
            "--fail-member",
            "m1",
            "--fail-member",
            "m2",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("beyond its tolerance"),
        "{err}"
    );
    // A member the volume does not have: refused, listing its members.
    let o = bench(
        &cfg,
        &["seq-read", "--bytes", "1MiB", "--fail-member", "m9"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("m0, m1") && err.contains("roles 0..7"),
        "{err}"
    );
}

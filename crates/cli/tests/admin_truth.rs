//! Every admin command tells the truth (issue 37): a write bench asks before it destroys a
//! volume's data, `map` and `check --diagram` name the file the superblocks put in a role,
//! a pre-flight check fails when the start would, one spelling of units everywhere.

mod common;

use common::{nbraid, ok, write_config};
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
    ok(bench("database", &["--read-pct", "100"]), "database 100% reads");
    // Told, it writes, and says so first.
    let o = bench("rand-write", &["--destroy-data"]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    ok(o, "rand-write --destroy-data");
    assert!(
        err.contains("rand-write writes over volume r6's data (--destroy-data)"),
        "{err}"
    );
}

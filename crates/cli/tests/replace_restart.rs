//! A `nbraid replace` cut short by a restart before the swap (SIGTERM or SIGKILL): the copy
//! is not checkpointed, but the replacement's path was recorded when the replace started, so
//! the restart opens it as a spare standing by (`status` lists it) instead of forgetting the
//! operator's file; the replace asked again takes that spare and swaps.
//! `nbraidd` is the one built beside `nbraid` (`cargo test --workspace`, as scripts/test runs
//! it).

mod common;

use common::*;
use serde_json::{json, Value};

/// Both ways a daemon stops before the swap: asked to (SIGTERM) and killed (SIGKILL).
#[test]
fn a_replace_cut_short_by_a_restart_leaves_its_file_standing_by() {
    for killed in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        // 32 MiB at 256 KB/s: the copy is far from done when the daemon stops.
        let config = write_config_with(dir.path(), &[], "rebuild_rate = \"256KB\"\n");
        let cfg = config.to_str().unwrap();
        let mut d = Daemon::start(&config);
        let new = blank_member(dir.path(), "new.img");
        ok(
            nbraid(&["replace", "r6", "d3", &new, "--config", cfg]),
            "replace",
        );
        let v = volume_status(cfg);
        assert_eq!(v["rebuild"]["state"], "running", "killed {killed}: {v:#}");
        if killed {
            d.child.kill().unwrap();
            d.child.wait().unwrap();
        } else {
            d.stop();
        }

        let mut d = Daemon::start(&config);
        let v = volume_status(cfg);
        assert_eq!(v["degraded"], false, "killed {killed}: {v:#}");
        assert_eq!(v["members"][3]["id"], "d3", "killed {killed}: {v:#}");
        assert_eq!(
            v["spares"],
            json!(["new"]),
            "killed {killed}: the replacement is forgotten: {v:#}"
        );

        // Asked again, the replace takes the spare and swaps.
        ok(
            nbraid(&["replace", "r6", "d3", &new, "--config", cfg]),
            "replace again",
        );
        let done: Value = serde_json::from_str(&ok(
            nbraid(&[
                "rebuild", "r6", "--rate", "200MB/s", "--config", cfg, "--json",
            ]),
            "rebuild (replace)",
        ))
        .unwrap();
        assert_eq!(done["state"], "done", "killed {killed}: {done}");
        let v = volume_status(cfg);
        assert_eq!(v["degraded"], false, "killed {killed}: {v:#}");
        assert_eq!(v["spares"], json!([]), "killed {killed}: {v:#}");
        let path = v["members"][3]["path"].as_str().unwrap_or_default();
        assert!(path.ends_with("new.img"), "killed {killed}: {v:#}");
        d.stop();
    }
}

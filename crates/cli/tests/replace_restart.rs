//! A `nbraid replace` cut short by a restart before the swap goes on by itself: after SIGTERM
//! from the checkpoint its copy had reached, after SIGKILL from the start (an unclean stop:
//! a write in flight may have reached the member and not the replacement). Either way the
//! replacement is not left standing by as a spare, the swap happens, and the volume reads
//! what was written. (It once stood by as a spare, and the operator had to ask again for a
//! copy that started over.) `nbraidd` is the one built beside `nbraid` (`cargo test
//! --workspace`, as scripts/test runs it).

mod common;

use common::*;
use serde_json::{json, Value};

/// Where role 3's copy is, as status shows it (0 when no rebuild runs).
fn role3_position(v: &Value) -> u64 {
    let moves = v["rebuild"]["moves"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let roles = v["rebuild"]["roles"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    (roles.iter().zip(&moves))
        .find(|(r, _)| r.as_u64() == Some(3))
        .and_then(|(_, m)| m["position_bytes"].as_u64())
        .unwrap_or(0)
}

/// Both ways a daemon stops before the swap: asked to (SIGTERM) and killed (SIGKILL).
#[test]
fn a_replace_cut_short_by_a_restart_goes_on() {
    let nbdcopy = require("nbdcopy");
    for killed in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        // 32 MiB at 4 MB/s: stopped about half-way.
        let config = write_config_with(dir.path(), &[], "rebuild_rate = \"4MB\"\n");
        let cfg = config.to_str().unwrap();
        let (mut d, uri) = serve(&config, "r6");
        let data = fill(&nbdcopy, dir.path(), &uri, 3);
        let new = blank_member(dir.path(), "new.img");
        ok(
            nbraid(&["replace", "r6", "d3", &new, "--config", cfg]),
            "replace",
        );
        let v = wait_for(cfg, "half the copy", |v| role3_position(v) >= 16 * MIB);
        assert_eq!(v["rebuild"]["state"], "running", "killed {killed}: {v:#}");
        if killed {
            d.child.kill().unwrap();
            d.child.wait().unwrap();
        } else {
            d.stop();
        }
        let said = said_before_the_start(cfg, killed);

        let (mut d, uri) = serve(&config, "r6");
        let v = volume_status(cfg);
        assert_eq!(v["degraded"], false, "killed {killed}: {v:#}");
        assert_eq!(v["members"][3]["id"], "d3", "killed {killed}: {v:#}");
        assert_eq!(
            v["spares"],
            json!([]),
            "killed {killed}: the replacement stands by: {v:#}"
        );
        // The daemon's watcher starts the copy within its next look.
        let v = wait_for(cfg, "the copy going on", |v| {
            v["rebuild"]["roles"] == json!([3])
        });
        if !killed {
            // Its last checkpoint: a window (4 MiB) behind at most.
            let at = role3_position(&v);
            assert!(at >= 12 * MIB, "resumed at {at}: {v:#}");
            assert!(at >= said, "resumed at {at}, the check said {said}: {v:#}");
        }

        let v = wait_for(cfg, "the swap", |v| {
            let path = v["members"][3]["path"].as_str().unwrap_or_default();
            path.ends_with("new.img")
        });
        assert_eq!(v["degraded"], false, "killed {killed}: {v:#}");
        assert_eq!(v["spares"], json!([]), "killed {killed}: {v:#}");
        reads_back(&nbdcopy, dir.path(), &uri, &data);
        d.stop();
    }
}

/// What `nbraid check` and `nbraid status` (no daemon) say of the replace cut short: it is
/// under way, by `new.img`, and the next start goes on from its checkpoint (SIGTERM) or
/// copies again from 0 (SIGKILL). Returns where the check said the copy goes on.
fn said_before_the_start(cfg: &str, killed: bool) -> u64 {
    let check: Value = serde_json::from_str(&ok(nbraid(&["check", cfg, "--json"]), "check"))
        .expect("check's JSON");
    let records = check["superblocks"].as_array().expect("superblocks");
    let replaces = &records[0]["replaces"];
    assert_eq!(replaces.as_array().map(Vec::len), Some(1), "{check:#}");
    let x = &replaces[0];
    assert_eq!(x["role"], 3, "{x:#}");
    assert!(
        x["replacement"]
            .as_str()
            .unwrap_or_default()
            .ends_with("new.img"),
        "{x:#}"
    );
    let checkpoint = x["checkpoint_bytes"].as_u64().expect("checkpoint");
    let from = x["resumes_from_bytes"].as_u64().expect("goes on");
    assert!(checkpoint >= 8 * MIB, "{x:#}");
    assert_eq!(from, if killed { 0 } else { checkpoint }, "{x:#}");
    let o = nbraid(&["status", "--config", cfg]);
    assert!(!o.status.success(), "status with no daemon");
    let text = String::from_utf8_lossy(&o.stdout);
    let goes_on = match killed {
        true => "the next start copies it again from the start",
        false => "the next start goes on with it from there",
    };
    assert!(
        text.contains("a replace of role 3 by ") && text.contains(goes_on),
        "{text}"
    );
    from
}

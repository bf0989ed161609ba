//! `status`' move lines ("d1 → s0") name a real move only: after a restart in the middle of
//! a rebuild, the start finds the spare already in the role and knew no other holder, and
//! status said "s0 → s0" (found by a hunt).

mod common;

use common::{nbraid, ok, wait_for, write_config_with, Daemon};

#[test]
fn a_rebuild_resumed_after_a_restart_shows_no_move_from_a_member_to_itself() {
    let dir = tempfile::tempdir().unwrap();
    let keys = "spares = [\"s0\"]\nrebuild_rate = \"1MiB\"\n";
    let config = write_config_with(dir.path(), &["s0"], keys);
    let cfg = config.to_str().unwrap();
    let mut d = Daemon::start(&config);
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail d1");
    wait_for(cfg, "the rebuild onto s0", |v| {
        v["rebuild"]["state"] == "running" && v["members"][1]["id"] == "s0"
    });
    d.stop();
    let mut d = Daemon::start(&config);
    let v = wait_for(cfg, "the rebuild resumed", |v| {
        v["rebuild"]["state"] == "running"
    });
    let text = ok(nbraid(&["status", "r6", "--config", cfg]), "status");
    let line = (text.lines())
        .find(|l| l.trim_start().starts_with("rebuild "))
        .unwrap_or_else(|| panic!("no rebuild line: {text}"));
    assert!(!line.contains("s0 → s0"), "{line}\n{v:#}");
    assert!(line.contains("s0 into role 1"), "{line}");
    for m in v["rebuild"]["moves"].as_array().into_iter().flatten() {
        assert_ne!(m["from"], m["to"], "{v:#}");
    }
    d.stop();
}

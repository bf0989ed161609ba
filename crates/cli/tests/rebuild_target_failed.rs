//! `nbraid status` after a rebuild whose member failed since: the rebuild is done, but what
//! it rebuilt is lost again — status must not say "rebuild done" as if the role were whole.

mod common;

use common::*;

/// A spare rebuilt into failed role 1 of a RAID 6, then failed itself: the rebuild line
/// says the role it rebuilt has failed since (and why), and `--json` names it.
#[test]
fn a_rebuild_whose_member_failed_since_is_not_shown_as_simply_done() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let cfg = config.to_str().unwrap();
    let mut d = Daemon::start(&config);
    ok(nbraid(&["fail", "r6", "d1", "--config", cfg]), "fail d1");
    let spare = blank_member(dir.path(), "spare.img");
    ok(nbraid(&["add", "r6", &spare, "--config", cfg]), "add");
    let done = ok(
        nbraid(&["rebuild", "r6", "--config", cfg, "--json"]),
        "rebuild",
    );
    assert!(done.contains("\"done\""), "{done}");
    let text = |what: &str| ok(nbraid(&["status", "r6", "--config", cfg]), what);
    let before = text("status after the rebuild");
    assert!(before.contains("  rebuild done over 32 MiB"), "{before}");
    assert!(!before.contains("failed since"), "{before}");

    ok(
        nbraid(&["fail", "r6", "spare", "--config", cfg]),
        "fail spare",
    );
    let after = text("status after the spare failed");
    let line = (after.lines())
        .find(|l| l.trim_start().starts_with("rebuild "))
        .unwrap_or_else(|| panic!("no rebuild line: {after}"));
    assert!(
        line.contains("rebuild done over 32 MiB")
            && line.contains("but role 1 (spare) it rebuilt has failed since"),
        "{after}"
    );
    let v = status_of(cfg, "r6");
    let failed = &v["rebuild"]["failed_since"];
    assert_eq!(v["rebuild"]["state"], "done", "{v:#}");
    assert_eq!(
        v["rebuild"]["rebuilt_roles"],
        serde_json::json!([1]),
        "{v:#}"
    );
    assert_eq!(failed[0]["role"], 1, "{v:#}");
    assert_eq!(failed[0]["id"], "spare", "{v:#}");
    assert!(
        failed[0]["why"].as_str().is_some_and(|w| !w.is_empty()),
        "{v:#}"
    );
    d.stop();
}

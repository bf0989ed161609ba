//! A RAID 5 whose daemon was SIGKILLed under writes: `nbraid check` (text and `--json`) and
//! `nbraidd --check` say what the next start does about the crash — with the write-hole log,
//! replay it and resync the bitmap's regions in the background while serving; with
//! `write_hole = "off"`, resync them before serving — and the start then does what they said
//! (`status`: the bytes resynced before serving, or handed to the background). Before, both
//! checks called such a volume "healthy" and said nothing of the crash.

mod common;

use common::*;
use serde_json::Value;

/// The check's note on volume `v` of `cfg`, as text and as the JSON's notes, and
/// `nbraidd --check`'s output.
fn checks_say(cfg: &str) -> (String, String, String) {
    let text = ok(nbraid(&["check", cfg]), "check");
    let json: Value =
        serde_json::from_str(&ok(nbraid(&["check", cfg, "--json"]), "check --json")).unwrap();
    let notes = json["superblocks"][0]["notes"].to_string();
    let daemon = ok(nbraidd(&["--config", cfg, "--check"]), "nbraidd --check");
    (text, notes, daemon)
}

/// Volume `v` (RAID 5 of four 24 MiB files, `write_hole` as given) killed under rewrites,
/// then what the checks say, then what the start did (its status).
fn killed_then_checked(write_hole: &str, says: &str) -> Value {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let mut text = daemon_and_members("d", 4, "24MiB");
    text += &format!(
        "[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\n\
         members = [\"d0\", \"d1\", \"d2\", \"d3\"]\nwrite_hole = \"{write_hole}\"\n"
    );
    let config = dir.path().join("arrays.toml");
    std::fs::write(&config, text).unwrap();
    let cfg = config.to_str().unwrap();
    let (data, uri) = killed_under_rewrites(&nbdcopy, &config, "v", 0xd1e7_0002);

    let (text, notes, daemon) = checks_say(cfg);
    for (who, out) in [
        ("check", &text),
        ("check --json", &notes),
        ("nbraidd --check", &daemon),
    ] {
        assert!(
            out.contains("not shut down cleanly: the start"),
            "{who}:\n{out}"
        );
        assert!(out.contains(says), "{who} lacks `{says}`:\n{out}");
    }
    let mut d = Daemon::start(&config);
    let v = status_of(cfg, "v");
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
    v
}

#[test]
fn a_logged_crash_is_said_replayed_and_resynced_in_the_background_and_is() {
    let says = "the start replays the write-hole log, then resyncs the regions the write-intent bitmap marks in the background while serving";
    let v = killed_then_checked("ppl", says);
    assert_eq!(v["metadata"]["clean_at_start"], false, "{v:#}");
    assert_eq!(v["metadata"]["resynced_bytes_at_start"], 0, "{v:#}");
}

#[test]
fn an_unlogged_crash_is_said_resynced_before_serving_and_is() {
    // (Up to the quotes, which the JSON escapes.)
    let says =
        "resyncs the regions the write-intent bitmap marks before serving: with write_hole = ";
    let v = killed_then_checked("off", says);
    assert_eq!(v["metadata"]["clean_at_start"], false, "{v:#}");
    let before = v["metadata"]["resynced_bytes_at_start"].as_u64().unwrap();
    assert!(before > 0, "resynced before serving: {v:#}");
}

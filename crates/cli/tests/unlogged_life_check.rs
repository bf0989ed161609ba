//! A RAID 5 run with `write_hole = "off"`, its daemon SIGKILLed under writes, then the
//! config switched to `write_hole = "ppl"`: the log's rings say the life that stopped did not
//! log, so the start is a dirty start without the log. `nbraid check` reads that word as
//! the start does and says what the start does: with every member there, the resync before
//! serving; with one out, refused (text and `--json`), as `nbraidd` refuses it — and
//! `nbraidd --check` says the same. Before, both checks judged from the superblocks alone
//! and said the dirty degraded start would serve.
//! `nbraidd` is the one built beside `nbraid`.

mod common;

use common::*;
use serde_json::Value;

/// The words of the refusal: the role out, why the log does not cover it, what to do.
const REFUSED: [&str; 3] = [
    "not shut down clean, with role 2",
    "the life that stopped did not log its writes",
    "--force-assemble v",
];

/// The volume's config, with the log `write_hole` ("off" or "ppl").
fn config_text(write_hole: &str) -> String {
    let mut text = daemon_and_members("d", 4, "24MiB");
    text += &format!(
        "[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\n\
         members = [\"d0\", \"d1\", \"d2\", \"d3\"]\nchecksums = \"off\"\nwrite_hole = \"{write_hole}\"\n"
    );
    text
}

/// `nbraid check --json`'s superblocks entry for volume `v`, and whether check passed.
fn check_json(cfg: &str) -> (Value, bool) {
    let o = nbraid(&["check", "--json", cfg]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("check --json prints JSON");
    (v["superblocks"][0].clone(), o.status.success())
}

#[test]
fn check_tells_a_dirty_start_after_an_unlogged_life_as_the_start_does_it() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("arrays.toml");
    std::fs::write(&config, config_text("off")).unwrap();
    let cfg = config.to_str().unwrap();
    let (data, _) = killed_under_rewrites(&nbdcopy, &config, "v", 0x0b1e_55ed);
    std::fs::write(&config, config_text("ppl")).unwrap();
    let members: Vec<_> = (0..4)
        .map(|i| dir.path().join(format!("d{i}.img")))
        .collect();
    let before: Vec<Vec<u8>> = members.iter().map(|m| std::fs::read(m).unwrap()).collect();

    // Every member there: it starts, resyncing before it serves.
    let out = ok(nbraid(&["check", cfg]), "check, every member there");
    assert!(out.contains("  v: healthy"), "{out}");
    assert!(
        out.contains("before serving: the write-hole log's rings do not say"),
        "check says nothing of the resync before serving:\n{out}"
    );
    let (v, passed) = check_json(cfg);
    assert!(passed, "{v:#}");
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("before serving: the write-hole log's rings do not say"),
        "{v:#}"
    );
    let out = ok(nbraidd(&["--config", cfg, "--check"]), "nbraidd --check");
    assert!(
        out.contains("before serving: the write-hole log's rings do not say"),
        "nbraidd --check says nothing of the resync before serving:\n{out}"
    );

    // A member out: refused, by check as by the start.
    let away = dir.path().join("d2.away");
    std::fs::rename(&members[2], &away).unwrap();
    let o = nbraid(&["check", cfg]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "nbraid check exited 0:\n{out}");
    for part in REFUSED {
        assert!(out.contains(part), "check lacks `{part}`:\n{out}");
    }
    // The members' table agrees with the records: the volume does not run degraded.
    assert!(
        out.contains("MISSING: volume v is refused at start") && !out.contains("runs degraded"),
        "check's members' table says otherwise than its records:\n{out}"
    );
    let (v, passed) = check_json(cfg);
    assert!(!passed, "nbraid check --json exited 0: {v:#}");
    let state = v["state"].as_str().unwrap();
    assert!(state.starts_with("refused: "), "{v:#}");
    for part in REFUSED {
        assert!(state.contains(part), "check --json lacks `{part}`: {state}");
    }
    let o = nbraidd(&["--config", cfg, "--check"]);
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!o.status.success(), "nbraidd --check exited 0:\n{out}");
    for part in REFUSED {
        assert!(out.contains(part), "nbraidd --check lacks `{part}`:\n{out}");
    }
    assert!(
        out.contains("MISSING: volume v is refused at start") && !out.contains("runs degraded"),
        "nbraidd --check's members' table says otherwise than its refusal:\n{out}"
    );
    let said = start_refused(&config);
    for part in REFUSED {
        assert!(
            said.contains(part),
            "the start's refusal lacks `{part}`: {said}"
        );
    }
    std::fs::rename(&away, &members[2]).unwrap();
    let after: Vec<Vec<u8>> = members.iter().map(|m| std::fs::read(m).unwrap()).collect();
    assert!(before == after, "check and a refused start write nothing");

    // Back: it starts and serves what was written (the kill cut off the same bytes again).
    let (mut d, uri) = serve(&config, "v");
    let v = status_of(cfg, "v");
    assert_eq!(v["available"], true, "{v:#}");
    assert_eq!(v["metadata"]["clean_at_start"], false, "{v:#}");
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}

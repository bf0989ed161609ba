//! A second `nbraid apply --yes` (another shape) while an online reshape runs is refused
//! saying so — from what to what, how far, and what to do — not with the plan of the old
//! tree against the next one ("member 3 appears 2 times in the new tree"); the daemon asked
//! directly says so too. `nbraidd` is the one built beside `nbraid`.

mod common;

use common::*;
use std::path::{Path, PathBuf};

/// `arrays.toml`: volume `db` of `level` over the first `members` of d0..d4 (9 MiB files),
/// strip 64 KiB, reshaped at 256 KiB/s (the move below takes about a minute).
fn config(dir: &Path, level: &str, members: usize) -> PathBuf {
    let mut text = daemon_and_members("d", 5, "9MiB");
    let ids: Vec<String> = (0..members).map(|i| format!("\"d{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"db\"\nlevel = \"{level}\"\nstrip_size = \"64KiB\"\n\
         members = [{}]\nrebuild_rate = \"256KiB\"\n",
        ids.join(", ")
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

#[test]
fn a_second_apply_while_a_reshape_runs_says_a_reshape_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "raid5", 3);
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    let (mut d, _uri) = serve(&file, "db");

    config(dir.path(), "raid5", 4);
    let out = ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes to 4 members");
    assert!(out.contains("started online"), "{out}");

    config(dir.path(), "raid6", 5);
    let o = nbraid(&["apply", cfg, "--yes"]);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(!o.status.success(), "{out}{err}");
    assert!(!err.contains("appears"), "{out}{err}");
    assert!(
        err.contains(
            "volume db: not started: a reshape is under way on it: raid5 of 3 members, strip \
             64 KiB → raid5 of 4 members, strip 64 KiB, "
        ) && err.contains("% copied")
            && err.contains("`nbraid status db`")
            && err.contains("go on to raid6 of 5 members"),
        "{out}{err}"
    );
    assert!(
        out.contains("note: the daemon's reshape of it is running at"),
        "{out}{err}"
    );
    // The daemon asked directly says so too, how far, and what to do.
    let ask = format!(r#"{{"v":1,"op":"reshape","volume":"db","config":"{cfg}","force":false}}"#);
    let reply = exchange(&d.control, &[ask.as_bytes()]).remove(0);
    assert_eq!(reply["ok"], false, "{reply}");
    let said = reply.to_string();
    assert!(
        said.contains("a reshape is already running (") && said.contains("`nbraid status db`"),
        "{said}"
    );
    let v = status_of(cfg, "db");
    assert_eq!(v["level"], "raid5", "nothing else started: {v:#}");
    d.stop();
}

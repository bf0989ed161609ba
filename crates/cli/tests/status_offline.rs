//! `nbraid status --config FILE` with no daemon running on the config: what the members'
//! superblocks say (the state, each role's holder, who is out and why), as text and JSON,
//! and still exit 1 — before the first start, after a clean stop with a member failed by the
//! operator, and with a member file gone.

mod common;

use common::{nbraid, ok, write_config, Daemon};
use serde_json::Value;

fn status(cfg: &str, json: bool) -> (bool, String, String) {
    let mut args = vec!["status", "--config", cfg];
    if json {
        args.push("--json");
    }
    let o = nbraid(&args);
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn status_without_a_daemon_says_what_the_superblocks_say() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_config(dir.path());
    let cfg = file.to_str().unwrap();

    let (success, out, err) = status(cfg, false);
    assert!(!success, "no daemon: still a failure");
    assert!(err.contains("is nbraidd running on this config?"), "{err}");
    assert!(out.contains("no daemon serves"), "{out}");
    assert!(out.contains("r6: no superblocks yet"), "{out}");

    // Started, d2 failed by the operator, stopped cleanly.
    let mut d = Daemon::start(&file);
    ok(nbraid(&["fail", "r6", "d2", "--config", cfg]), "fail d2");
    d.stop();
    let (success, out, _) = status(cfg, false);
    assert!(!success);
    assert!(
        out.contains("  r6: degraded: role 2 failed (d2: d2.img)\n"),
        "{out}"
    );
    assert!(out.contains("    role 2: d2 (d2.img) failed\n"), "{out}");
    assert!(out.contains("    role 5: d5 (d5.img)\n"), "{out}");

    let (success, out, err) = status(cfg, true);
    assert!(!success);
    assert!(
        err.contains("the superblocks' view is printed above"),
        "{err}"
    );
    let v: Value = serde_json::from_str(&out).expect("JSON on stdout");
    assert_eq!(v["daemon"], "not running");
    let vol = &v["volumes"][0];
    assert_eq!(vol["volume"], "r6");
    assert_eq!(vol["absent"][2], "failed");
    assert_eq!(vol["absent"][0], Value::Null);
    assert_eq!(vol["members"][2], "d2");

    // A member file gone: that role is lost.
    std::fs::remove_file(dir.path().join("d4.img")).unwrap();
    let (_, out, _) = status(cfg, false);
    assert!(out.contains("    role 4: d4 (d4.img) lost\n"), "{out}");
}

/// Found by an events hunt: a volume whose members are all on NBD servers read "not on
/// files"; it says what is not read there and where it is read.
#[test]
fn status_without_a_daemon_says_what_it_cannot_tell_of_members_on_nbd_servers() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("arrays.toml");
    let member = |id: &str, host: &str| {
        format!("[[member]]\nid = \"{id}\"\npath = \"nbd://{host}:10809/x\"\nsize = \"16MiB\"\n\n")
    };
    let text = format!(
        "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n{}{}[[volume]]\nname = \"m\"\nlevel = \"raid1\"\nmembers = [\"r0\", \"r1\"]\n",
        member("r0", "192.0.2.1"),
        member("r1", "192.0.2.2")
    );
    std::fs::write(&file, text).unwrap();
    let (success, out, _) = status(file.to_str().unwrap(), false);
    assert!(!success, "no daemon: still a failure");
    assert!(!out.contains("not on files"), "{out}");
    assert!(
        out.contains("  m: not read: members are on NBD servers (r0, r1); their superblocks are read through NBD, by a start and by `nbraid check`\n"),
        "{out}"
    );
    assert!(
        out.contains("    note: r1 at nbd://192.0.2.2:10809/x: not connected to here"),
        "{out}"
    );
}

/// Members grown while no daemon runs move where the config alone would place the volume's
/// region (a 2 GiB member gets the 8 MiB log reserve a 512 MiB one does not); the start and
/// `nbraid check` read the config pinned to the records and serve it healthy. Before,
/// status without a daemon read the config unpinned and said the volume was refused.
#[test]
fn status_without_a_daemon_reads_the_config_as_the_start_does_after_members_grew() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = "[daemon]\nlisten = [\"unix:nbd.sock\"]\ncontrol = \"ctl.sock\"\n".to_string();
    for id in ["d0", "d1", "d2"] {
        text += &format!("[[member]]\nid = \"{id}\"\npath = \"{id}.img\"\n");
    }
    text += "[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nmembers = [\"d0\", \"d1\", \"d2\"]\n";
    let file = dir.path().join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    let cfg = file.to_str().unwrap();
    let sized = |len_bytes: u64| {
        for id in ["d0", "d1", "d2"] {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(dir.path().join(format!("{id}.img")))
                .unwrap();
            f.set_len(len_bytes).unwrap();
        }
    };
    sized(512 << 20);
    ok(nbraid(&["create", "--config", cfg]), "create");
    sized(2 << 30);
    let (success, out, _) = status(cfg, false);
    assert!(!success, "no daemon: still a failure");
    assert!(out.contains("  v: healthy\n"), "{out}");
    assert!(!out.contains("refused"), "{out}");
    assert!(out.contains("grew"), "the growth is named: {out}");
}

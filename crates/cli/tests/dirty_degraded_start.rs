//! A RAID 5 with `write_hole = "off"`, its daemon SIGKILLed under writes and a member file
//! removed while it is down: the restart is refused (md's "cannot start dirty degraded
//! array") naming the role, why and `--force-assemble v`, as `nbraid check` and
//! `nbraidd --check` say before it; forced, it serves what was written (the writes the kill
//! cut off wrote the same bytes again). `nbraidd` is the one built beside `nbraid`.

mod common;

use common::*;

#[test]
fn a_dirty_degraded_start_without_the_log_is_refused_until_forced() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let mut text = daemon_and_members("d", 4, "24MiB");
    text += "[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\n\
             members = [\"d0\", \"d1\", \"d2\", \"d3\"]\nchecksums = \"off\"\nwrite_hole = \"off\"\n";
    let config = dir.path().join("arrays.toml");
    std::fs::write(&config, text).unwrap();
    let cfg = config.to_str().unwrap();
    let (data, uri) = killed_under_rewrites(&nbdcopy, &config, "v", 0xd1d7_0001);
    std::fs::remove_file(dir.path().join("d2.img")).unwrap();
    let before: Vec<Vec<u8>> = ["d0", "d1", "d3"]
        .iter()
        .map(|m| std::fs::read(dir.path().join(format!("{m}.img"))).unwrap())
        .collect();

    let want = [
        "not shut down clean, with role 2",
        "write_hole = \"off\"",
        "--force-assemble v",
    ];
    let said = start_refused(&config);
    for part in want {
        assert!(said.contains(part), "the refusal lacks `{part}`: {said}");
    }
    let o = nbraid(&["check", cfg]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "nbraid check exited 0:\n{out}");
    assert!(out.contains(want[0]) && out.contains(want[2]), "{out}");
    let o = nbraidd(&["--config", cfg, "--check"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "nbraidd --check exited 0: {err}");
    assert!(err.contains(want[0]), "{err}");
    let after: Vec<Vec<u8>> = ["d0", "d1", "d3"]
        .iter()
        .map(|m| std::fs::read(dir.path().join(format!("{m}.img"))).unwrap())
        .collect();
    assert!(before == after, "a refused start writes nothing");

    let mut d = Daemon::start_with(&config, &["--force-assemble", "v"]);
    let v = status_of(cfg, "v");
    assert_eq!(v["available"], true, "{v:#}");
    assert_eq!(v["metadata"]["clean_at_start"], false, "{v:#}");
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data);
    d.stop();
}

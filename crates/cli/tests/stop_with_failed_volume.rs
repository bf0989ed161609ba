//! A volume failed beyond its redundancy, with writes in the write-back cache it can no
//! longer destage, must not keep the daemon's other volumes from their clean record at a
//! stop (found by a service hunt: the stop returned at the failed flush, before any volume
//! was recorded clean, and the healthy one was resynced at the next start).

mod common;

use common::*;
use std::process::Command;

#[test]
fn a_failed_volume_leaves_the_others_recorded_clean_at_stop() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("arrays.toml");
    let mut text = daemon_and_members("d", 4, "24MiB");
    text += "[[member]]\nid = \"e0\"\npath = \"e0.img\"\nsize = \"16MiB\"\n\n\
             [[member]]\nid = \"e1\"\npath = \"e1.img\"\nsize = \"16MiB\"\n\n";
    let db = "[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nmembers = [\"d0\", \"d1\", \"d2\", \"d3\"]\n\
              checksums = \"off\"\n\n";
    let ok_volume = "[[volume]]\nname = \"ok\"\nlevel = \"raid1\"\nmembers = [\"e0\", \"e1\"]\n\
                     checksums = \"off\"\n";
    std::fs::write(&config, format!("{text}{db}{ok_volume}")).unwrap();
    let (mut daemon, db_uri) = serve(&config, "db");
    let ok_uri = db_uri.replace("/db?", "/ok?");
    let cfg = config.to_str().unwrap();

    let data = seeded_bytes(3, 8 * MIB);
    let src = dir.path().join("src.img");
    std::fs::write(&src, &data).unwrap();
    for uri in [&ok_uri, &db_uri] {
        let o = Command::new(&nbdcopy).arg(&src).arg(uri).output().unwrap();
        ok(o, "nbdcopy into the volume");
    }
    // db loses two members while its cache still holds writes: it cannot flush them.
    ok(nbraid(&["fail", "db", "d0", "--config", cfg]), "fail d0");
    let forced = nbraid(&["fail", "db", "d1", "--force", "--config", cfg]);
    ok(forced, "fail d1 --force");

    // SAFETY: kill(2) on our own child's pid has no memory effects.
    unsafe { libc::kill(daemon.child.id() as libc::pid_t, libc::SIGTERM) };
    let status = daemon.child.wait().unwrap();
    assert!(!status.success(), "db's writes were lost: the stop says so");

    // Only the healthy volume now.
    std::fs::write(&config, format!("{text}{ok_volume}")).unwrap();
    let (mut daemon, _) = serve(&config, "ok");
    let s = status_of(cfg, "ok");
    assert_eq!(s["metadata"]["clean_at_start"], true, "{s:#}");
    assert_eq!(s["metadata"]["resynced_bytes_at_start"], 0, "{s:#}");
    prefix_reads_back(&nbdcopy, dir.path(), &ok_uri, &data);
    daemon.stop();
}

//! A remote member back while its volume is past its tolerance is not re-added: a re-add
//! resyncs what it missed from the others, and they are failed. (It was re-added; the resync
//! failed with "data unavailable", the member stayed "rebuilding" for good and the volume
//! failed, while `status` said the re-add was done.) `status` says why it waits, and a
//! restart assembles the volume from the members' records: the member that went on alone
//! serves, and every byte reads back. RAID 1 of a file and an nbdkit export; needs `nbdkit`
//! and `nbdcopy` (fails loudly without).

mod common;

use common::*;

#[test]
fn a_remote_member_back_past_the_tolerance_waits_for_a_restart_and_then_serves() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let [local, remote] = member_files(d, ["m0.img", "m1.img"]);
    let sock = d.join("m1.sock");
    let kit = Kit::serve(&sock, &remote);
    let config = raid1_local_and_remote(d, &local, &sock, "1s");
    let cfg = config.to_str().unwrap();
    let (mut daemon, uri) = serve(&config, "v");
    let data = fill(&nbdcopy, d, &uri, 0x51d3_77a0_9c2e_4b11);
    ok(nbraid(&["fail", "v", "m0", "--config", cfg]), "fail m0");
    // m1 holds every acknowledged write; then its server goes.
    drop(kit);
    // A read reaches m1 and fails it (timeout or reset): the volume is past its tolerance.
    let _ = std::process::Command::new(&nbdcopy)
        .arg(&uri)
        .arg(d.join("partial.img"))
        .output();
    wait_until(cfg, "v", "the volume failed", |v| v["available"] == false);
    let _kit = Kit::serve(&sock, &remote);
    let v = wait_until(cfg, "v", "m1 held out, said why", |v| {
        let stays = v["members"][1]["failure"]["stays_out"]
            .as_str()
            .unwrap_or("");
        stays.contains("past its tolerance")
    });
    assert_eq!(v["members"][1]["state"], "failed", "not re-added: {v:#}");
    let table = ok(nbraid(&["status", "v", "--config", cfg]), "status");
    assert!(table.contains("restart nbraidd"), "{table}");
    daemon.terminate(); // a failed volume is not recorded clean: non-zero

    let (mut daemon, uri) = serve(&config, "v");
    let v = status_of(cfg, "v");
    assert_eq!(v["available"], true, "m1 serves again: {v:#}");
    prefix_reads_back(&nbdcopy, d, &uri, &data);
    daemon.stop();
}

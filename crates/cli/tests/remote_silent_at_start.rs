//! A remote member whose server takes the handshake at the start but then does not answer
//! the superblock read (nbdkit's pause filter: requests hang) is a server that stopped
//! answering, like one that refuses the connection: the volume starts degraded, the member
//! failed and re-added once its server answers again. Before, the read's timeout made it
//! "unreadable": treated as lost, shown `missing`, never probed, so it stayed out of the
//! volume for good after its server came back.

mod common;

use common::{
    fill, member_files, nbraid, ok, prefix_reads_back, raid1_local_and_remote, require, serve,
    status_of, wait_until, Kit,
};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Sends `command` to nbdkit's pause filter on `control` ('p' pause, 'r' resume) and waits
/// for its answer (the same letter, upper case: a pause is answered once the requests it
/// already took are done).
fn pause_control(control: &Path, command: u8) {
    let mut s = UnixStream::connect(control).expect("the pause filter's control socket");
    s.write_all(&[command]).unwrap();
    let mut answer = [0u8; 1];
    s.read_exact(&mut answer).unwrap();
    assert_eq!(answer[0], command.to_ascii_uppercase());
}

#[test]
fn a_remote_member_silent_at_the_start_is_readded_once_it_answers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let [local, remote] = member_files(d, ["m0.img", "m1.img"]);
    let (sock, control) = (d.join("m1.sock"), d.join("m1.pause"));
    let pause_arg = format!("pause-control={}", control.display());
    let _kit = Kit::serve_with(&sock, &remote, &["--filter=pause"], &[&pause_arg]);
    let cfg = raid1_local_and_remote(d, &local, &sock, "1s");
    let c = cfg.to_str().unwrap();
    let nbdcopy = require("nbdcopy");

    let (mut daemon, uri) = serve(&cfg, "v");
    let data = fill(&nbdcopy, d, &uri, 5);
    daemon.stop();

    // The server answers the handshake, then nothing: the superblock read times out.
    pause_control(&control, b'p');
    let (mut daemon, uri) = serve(&cfg, "v");
    let v = status_of(c, "v");
    assert_eq!(v["state"], "degraded", "{v:#}");
    let m1 = &v["members"][1];
    assert_eq!(
        m1["state"], "failed",
        "a member whose server did not answer is failed, not missing: {v:#}"
    );
    assert_eq!(m1["failure"]["returns_by_itself"], true, "{v:#}");
    prefix_reads_back(&nbdcopy, d, &uri, &data);

    // Its server answers again: the member is re-added, resynced, and holds the volume alone.
    pause_control(&control, b'r');
    wait_until(c, "v", "the member back", |v| v["state"] == "healthy");
    ok(nbraid(&["fail", "v", "m0", "--config", c]), "fail m0");
    prefix_reads_back(&nbdcopy, d, &uri, &data);
    daemon.stop();
}

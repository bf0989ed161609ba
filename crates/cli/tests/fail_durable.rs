//! `nbraid fail` is answered only once the superblocks record the failure: a daemon killed
//! (SIGKILL, as a power loss) the moment it answered still finds the member failed at the
//! restart, instead of serving it again as if the operator had never failed it.
//! `nbraidd` is the one built beside `nbraid` (`cargo test --workspace`, as scripts/test runs
//! it).

mod common;

use common::*;

/// Fails `d1` over the control socket (no CLI in between: the kill follows the reply as
/// closely as it can), SIGKILLs the daemon at once, restarts it: `d1` is still failed.
/// Several rounds, each on new members, so a reply sent before the record would be caught.
#[test]
fn a_failed_member_stays_failed_when_the_daemon_is_killed_right_after_the_reply() {
    for round in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        let config = write_config(dir.path());
        let cfg = config.to_str().unwrap();
        let mut d = Daemon::start(&config);
        let reply = exchange(
            &d.control,
            &[br#"{"v":1,"op":"fail","volume":"r6","member":"d1"}"#],
        );
        d.child.kill().unwrap(); // SIGKILL, no sleep: the reply was the promise
        d.child.wait().unwrap();
        assert_eq!(reply[0]["ok"], true, "round {round}: {}", reply[0]);
        // A killed daemon leaves its control socket behind; the next start replaces it.
        let mut d = Daemon::start(&config);
        let v = volume_status(cfg);
        assert_eq!(v["members"][1]["id"], "d1", "round {round}: {v:#}");
        assert_eq!(
            v["members"][1]["state"], "failed",
            "round {round}: the member the operator failed is back: {v:#}"
        );
        assert_eq!(v["degraded"], true, "round {round}: {v:#}");
        d.stop();
    }
}

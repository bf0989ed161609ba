//! Why a remote member failed survives a restart of the daemon: one the operator failed
//! (`nbraid fail`), or whose server answered a write with EIO, stays failed after the restart
//! while its server answers well; one that failed because its server went away comes back by
//! itself once the server answers. (Before, every member recorded failed came back at the
//! next start as "absent at start", which let a remote one be re-added — with checksums off,
//! over a resync of the bitmap's regions only, serving whatever it held.)

mod common;
use common::returning::*;
use common::Nbdkit;

use nbraid_daemon::nbd::client::Client;
use std::path::Path;
use std::time::Duration;

/// Longer than several probes of failed remote members (one a second).
const PROBES: Duration = Duration::from_millis(3500);

/// After a restart and several probes: member 1 still failed, the volume degraded, and
/// status says it stays out.
fn stays_out_after_a_restart(config: &Path, cause: &str) {
    let daemon = start_daemon(config, true);
    std::thread::sleep(PROBES);
    let s = status(config);
    assert_eq!(member_state(&s, 1), "failed", "{s}");
    assert_eq!(s["state"], "degraded", "{s}");
    let failure = &s["members"][1]["failure"];
    assert_eq!(failure["cause"], cause, "{s}");
    assert_eq!(failure["returns_by_itself"], false, "{s}");
    let said = daemon.stop();
    assert!(!said.contains("is back"), "{said}");
}

#[test]
fn a_remote_member_the_operator_failed_stays_out_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (ksock, far) = (dir.path().join("kit.sock"), dir.path().join("far.img"));
    let config = raid1_config(dir.path());
    let _kit = Kit::start(&ksock, &far, &dir.path().join("kit.log"));
    let daemon = start_daemon(&config, false);
    assert_eq!(status(&config)["state"], "healthy");
    let r = control(
        &config,
        r#"{"v": 1, "op": "fail", "volume": "m", "member": "far", "force": false}"#,
    );
    assert!(r["error"].is_null(), "{r}");
    assert_eq!(r["recorded"], true, "{r}");
    daemon.stop();
    stays_out_after_a_restart(&config, "failed by the operator");
}

#[test]
fn a_remote_member_that_answered_with_io_errors_stays_out_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (ksock, far) = (dir.path().join("kit.sock"), dir.path().join("far.img"));
    let trigger = dir.path().join("eio");
    let config = raid1_config(dir.path());
    let kit = Nbdkit::start(
        &ksock,
        [
            "--filter=error".into(),
            "file".into(),
            far.as_os_str().to_owned(),
            "error=EIO".into(),
            "error-pwrite-rate=100%".into(),
            format!("error-pwrite-file={}", trigger.display()).into(),
        ] as [std::ffi::OsString; 6],
    );
    let daemon = start_daemon(&config, false);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt
        .block_on(Client::connect(&volume_uri(dir.path())))
        .expect("connect");
    std::fs::write(&trigger, b"").unwrap();
    let mut model = vec![0u8; VOLUME as usize];
    rt.block_on(async {
        write(&c, &mut model, 4 * MIB, 64 << 10, 7).await;
        c.flush().await.expect("flush, degraded");
    });
    wait_for("the member to fail", Duration::from_secs(10), || {
        member_state(&status(&config), 1) == "failed"
    });
    rt.block_on(c.disconnect());
    daemon.stop();
    // The server answers well again (the same file, without the error filter).
    std::fs::remove_file(&trigger).unwrap();
    drop(kit);
    let _kit = Kit::start(&ksock, &far, &dir.path().join("kit2.log"));
    stays_out_after_a_restart(&config, "returned I/O errors");
}

#[test]
fn a_remote_member_whose_server_went_away_still_comes_back_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (ksock, far) = (dir.path().join("kit.sock"), dir.path().join("far.img"));
    let config = raid1_config(dir.path());
    let kit = Kit::start(&ksock, &far, &dir.path().join("kit1.log"));
    let daemon = start_daemon(&config, false);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt
        .block_on(Client::connect(&volume_uri(dir.path())))
        .expect("connect");
    // The server dies; a write and a flush fail the member for not answering.
    drop(kit);
    let mut model = vec![0u8; VOLUME as usize];
    rt.block_on(async {
        write(&c, &mut model, 20 * MIB, 64 << 10, 3).await;
        c.flush().await.expect("flush, degraded");
    });
    let s = status(&config);
    assert_eq!(member_state(&s, 1), "failed", "{s}");
    assert_eq!(s["members"][1]["failure"]["returns_by_itself"], true, "{s}");
    rt.block_on(c.disconnect());
    daemon.stop();
    // Its server answers again; the restarted daemon re-adds it by itself.
    let _kit = Kit::start(&ksock, &far, &dir.path().join("kit2.log"));
    let daemon = start_daemon(&config, false);
    wait_current(&config, 1);
    assert_eq!(status(&config)["state"], "healthy");
    daemon.stop();
}

//! A remote member comes back by itself only when it failed because it stopped answering:
//! one the operator failed (`nbraid fail`), or one whose server answered a write with EIO
//! (nbdkit's error filter), stays failed while its server answers well, until the operator
//! brings it back — as a local disk would.

mod common;
use common::returning::*;
use common::Nbdkit;

use nbraid_daemon::nbd::client::Client;
use std::path::Path;
use std::time::Duration;

/// Longer than several probes of failed remote members (one a second).
const PROBES: Duration = Duration::from_millis(3500);

/// `nbdkit file` over `far` whose writes all fail with EIO while `trigger` exists.
fn erring_kit(sock: &Path, far: &Path, trigger: &Path) -> Nbdkit {
    Nbdkit::start(
        sock,
        [
            "--filter=error".into(),
            "file".into(),
            far.as_os_str().to_owned(),
            "error=EIO".into(),
            "error-pwrite-rate=100%".into(),
            format!("error-pwrite-file={}", trigger.display()).into(),
        ] as [std::ffi::OsString; 6],
    )
}

fn assert_stays_failed(config: &Path) {
    std::thread::sleep(PROBES);
    let s = status(config);
    assert_eq!(member_state(&s, 1), "failed", "{s}");
    assert_eq!(s["state"], "degraded", "{s}");
}

#[test]
fn a_remote_member_the_operator_failed_stays_failed() {
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
    // Its server answers all along: still, it is not re-added behind the operator's back.
    assert_stays_failed(&config);

    // A replace onto a URI is refused saying how remote members are added.
    let uri = format!("nbd+unix:///?socket={}", ksock.display());
    let r = control(
        &config,
        &format!(
            r#"{{"v": 1, "op": "replace", "volume": "m", "member": "far", "path": "{uri}", "force": false}}"#
        ),
    );
    let said = r.to_string();
    assert!(said.contains("declared in the config"), "{said}");
    // The operator brings it back by its URI: re-added, current again.
    let r = control(
        &config,
        &format!(r#"{{"v": 1, "op": "add", "volume": "m", "path": "{uri}", "force": false}}"#),
    );
    assert_eq!(r["readded"], "resync", "{r}");
    wait_current(&config, 1);
    daemon.stop();
}

#[test]
fn a_remote_member_that_answered_with_io_errors_stays_failed() {
    let dir = tempfile::tempdir().unwrap();
    let (ksock, far) = (dir.path().join("kit.sock"), dir.path().join("far.img"));
    let trigger = dir.path().join("eio");
    let config = raid1_config(dir.path());
    let _kit = erring_kit(&ksock, &far, &trigger);
    let daemon = start_daemon(&config, true);
    let uri = volume_uri(dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt.block_on(Client::connect(&uri)).expect("connect");
    assert_eq!(status(&config)["state"], "healthy");

    // Its writes fail with EIO: the member fails, the volume serves from the other copy.
    std::fs::write(&trigger, b"").unwrap();
    let mut model = vec![0u8; VOLUME as usize];
    rt.block_on(async {
        write(&c, &mut model, 4 * MIB, 64 << 10, 7).await;
        c.flush().await.expect("flush, degraded");
    });
    wait_for("the member to fail", Duration::from_secs(10), || {
        member_state(&status(&config), 1) == "failed"
    });
    // The server answers well again: the member still stays out.
    std::fs::remove_file(&trigger).unwrap();
    assert_stays_failed(&config);
    assert!(
        rt.block_on(c.read(4 * MIB, 64 << 10)).unwrap()[..]
            == model[4 * MIB as usize..(4 * MIB + (64 << 10)) as usize],
        "reads while it stays out"
    );
    rt.block_on(c.disconnect());
    let said = daemon.stop();
    assert!(said.contains("answered with I/O errors"), "{said}");
    assert!(!said.contains("is back"), "{said}");
}

#[test]
fn a_remote_member_whose_export_is_too_small_starts_its_volume_degraded() {
    let dir = tempfile::tempdir().unwrap();
    let (ksock, far) = (dir.path().join("kit.sock"), dir.path().join("far.img"));
    let config = raid1_config(dir.path());
    let kit = Kit::start(&ksock, &far, &dir.path().join("kit.log"));
    start_daemon(&config, false).stop();
    drop(kit);
    // The server comes back with an export smaller than the config's size.
    let file = std::fs::File::options().write(true).open(&far).unwrap();
    file.set_len(MIB).unwrap();
    let _kit = Kit::start(&ksock, &far, &dir.path().join("kit2.log"));
    let daemon = start_daemon(&config, true);
    let s = status(&config);
    assert_eq!(s["state"], "degraded", "{s}");
    assert_eq!(member_state(&s, 1), "failed", "{s}");
    let said = daemon.stop();
    assert!(said.contains("UNUSABLE"), "{said}");
}

//! A remote member whose server is not running when the daemon starts (`nbdkit file`
//! stopped after the array was created with it): the volume starts degraded from the member
//! that answers, said loudly with the member's URI and the error; once the server runs again
//! on the same file the member is re-added, resynced over the write-intent bitmap only
//! (nbdkit's log shows no data read before it is current), every block reads back
//! bit-exact and a restart finds the volume healthy. Beyond the volume's tolerance the
//! daemon refuses to start, naming the member that did not answer.

mod common;
use common::returning::*;
use common::run_output;

use nbraid_daemon::nbd::client::Client;
use std::process::Command;
use std::time::Duration;

#[test]
fn a_remote_member_down_at_start_is_served_degraded_then_re_added() {
    let dir = tempfile::tempdir().unwrap();
    let (ksock, far) = (dir.path().join("kit.sock"), dir.path().join("far.img"));
    let config = raid1_config(dir.path());
    let uri = volume_uri(dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();

    // The array is created over both members and written whole; a clean stop, then the
    // server stops too.
    let kit = Kit::start(&ksock, &far, &dir.path().join("kit1.log"));
    let daemon = start_daemon(&config, false);
    let mut model = vec![0u8; VOLUME as usize];
    let c = rt.block_on(Client::connect(&uri)).expect("connect");
    rt.block_on(async {
        fill(&c, &mut model).await;
        c.disconnect().await;
    });
    daemon.stop();
    drop(kit);

    // Started with the server down: degraded, the member unreachable.
    let daemon = start_daemon(&config, true);
    let s = status(&config);
    assert_eq!(s["state"], "degraded", "{s}");
    assert_eq!(s["members"][1]["at_start"], "unreachable", "{s}");
    assert_eq!(member_state(&s, 1), "failed", "{s}");
    let c = rt.block_on(Client::connect(&uri)).expect("connect");
    rt.block_on(async {
        write(&c, &mut model, 3 * MIB + 8192, 4096, 2).await;
        write(&c, &mut model, 17 * MIB, 128 << 10, 3).await;
        write(&c, &mut model, 30 * MIB, MIB, 4).await;
        c.flush().await.expect("flush, degraded");
    });
    assert!(rt.block_on(read_all(&c)) == model, "degraded reads");

    // The server runs again on the same file: re-added, only the marked regions written.
    let log2 = dir.path().join("kit2.log");
    let kit = returns_resynced_over_the_bitmap(&config, &ksock, &far, &log2);
    assert!(rt.block_on(read_all(&c)) == model, "reads after the re-add");
    rt.block_on(c.disconnect());
    let stderr = daemon.stop();
    let said = stderr
        .lines()
        .find(|l| l.contains("UNREACHABLE"))
        .unwrap_or_else(|| panic!("no loud warning: {stderr}"));
    assert!(
        said.contains("far") && said.contains(&ksock.display().to_string()),
        "the warning names neither the member nor its URI: {said}"
    );
    copies_hold(dir.path(), &model);
    healthy_after_restart(&config, &rt, &uri, &model);
    drop(kit);
}

#[test]
fn beyond_tolerance_an_unreachable_member_is_named_in_the_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let (ksock, far) = (dir.path().join("kit.sock"), dir.path().join("far.img"));
    let config = raid1_config(dir.path());
    // The same members as a RAID 0: it survives no lost member.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("level = \"raid1\"", "level = \"raid0\"");
    std::fs::write(&config, text).unwrap();
    let kit = Kit::start(&ksock, &far, &dir.path().join("kit1.log"));
    start_daemon(&config, false).stop();
    drop(kit);

    let out = run_output(
        Command::new(env!("CARGO_BIN_EXE_nbraidd"))
            .arg("--config")
            .arg(&config)
            .args(["--log-level", "warn"]),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started beyond tolerance: {stderr}");
    assert!(
        stderr.contains("unreachable")
            && stderr.contains(&format!("far (nbd+unix:///?socket={})", ksock.display())),
        "the refusal does not name the unreachable member: {stderr}"
    );
}

/// The re-add resync shows its progress in `status` and pauses, resumes and cancels through
/// the control socket like other background work; cancelled, the member stays written and
/// unread until `resume` runs it again.
#[test]
fn the_re_add_resync_shows_progress_and_pauses_cancels_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let (ksock, far) = (dir.path().join("kit.sock"), dir.path().join("far.img"));
    let config = raid1_config(dir.path());
    // Slow enough to be seen running: 4 MiB to resync at 512 KiB/s.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("clean_delay", "rebuild_rate = \"512KiB\"\nclean_delay");
    std::fs::write(&config, text).unwrap();
    let uri = volume_uri(dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let kit = Kit::start(&ksock, &far, &dir.path().join("kit1.log"));
    let daemon = start_daemon(&config, false);
    drop(kit);
    let mut model = vec![0u8; VOLUME as usize];
    let c = rt.block_on(Client::connect(&uri)).expect("connect");
    rt.block_on(async {
        for at in [2, 9, 16, 23] {
            write(&c, &mut model, at * MIB, MIB, 5).await;
        }
        c.flush().await.expect("flush, degraded");
    });
    assert_eq!(member_state(&status(&config), 1), "failed");

    let log2 = dir.path().join("kit2.log");
    let kit = Kit::start(&ksock, &far, &log2);
    let readd = |s: &serde_json::Value| s["readd"]["state"].as_str().unwrap_or("").to_string();
    wait_for("the re-add resync to run", Duration::from_secs(30), || {
        readd(&status(&config)) == "running"
    });
    let s = status(&config);
    assert_eq!(s["readd"]["roles"], serde_json::json!([1]), "{s}");
    assert!(s["readd"]["total_bytes"].as_u64() >= Some(4 * MIB), "{s}");
    assert_eq!(member_state(&s, 1), "rebuilding", "{s}");

    let volume = "\"volume\": \"m\"";
    let r = control(
        &config,
        &format!("{{\"v\": 1, \"op\": \"pause\", {volume}}}"),
    );
    assert_eq!(r["ok"], true, "{r}");
    wait_for("the pass to pause", Duration::from_secs(10), || {
        readd(&status(&config)) == "paused"
    });
    let at = status(&config)["readd"]["position_bytes"].clone();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        status(&config)["readd"]["position_bytes"],
        at,
        "moved while paused"
    );

    let r = control(
        &config,
        &format!("{{\"v\": 1, \"op\": \"cancel\", {volume}}}"),
    );
    assert_eq!(r["ok"], true, "{r}");
    wait_for("the pass to stop", Duration::from_secs(10), || {
        readd(&status(&config)) == "cancelled"
    });
    let s = status(&config);
    assert_eq!(
        member_state(&s, 1),
        "rebuilding",
        "cancelled, it stays unread: {s}"
    );
    assert!(rt.block_on(read_all(&c)) == model, "reads while cancelled");

    let r = control(
        &config,
        &format!("{{\"v\": 1, \"op\": \"resume\", {volume}}}"),
    );
    assert_eq!(r["ok"], true, "{r}");
    wait_current(&config, 1);
    assert_eq!(readd(&status(&config)), "done");
    only_metadata_read(&log2).unwrap();
    assert!(rt.block_on(read_all(&c)) == model, "reads after the re-add");
    rt.block_on(c.disconnect());
    daemon.stop();
    copies_hold(dir.path(), &model);
    drop(kit);
}

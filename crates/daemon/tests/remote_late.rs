//! A remote member's requests that outlive its failure. (1) A write that timed out on the
//! server (an `nbdkit sh` plugin over a file that stalls writes to a range while a trigger
//! file exists) lands there late: the member must not be re-added and resynced before the
//! server has closed that connection, or the stale write overwrites the resynced data.
//! (2) A server shut down gracefully (SIGTERM: nbdkit answers ESHUTDOWN and waits for its
//! clients) is left, so it exits, and the member comes back once it is restarted.

mod common;
use common::returning::*;
use common::Nbdkit;

use nbraid_daemon::nbd::client::Client;
use std::path::Path;
use std::time::{Duration, Instant};

/// Seconds a stalled write sleeps before it lands (the member's timeout is 2 s).
const STALL_S: u64 = 8;

/// An nbdkit `sh` plugin over `file` whose writes overlapping `[lo, hi)` sleep `STALL_S`
/// seconds while `trigger` exists, logging to `log` when one lands.
fn stalling_plugin(dir: &Path, file: &Path, lo: u64, hi: u64) -> std::path::PathBuf {
    let (trigger, log) = (dir.join("trigger"), dir.join("stall.log"));
    let script = format!(
        r#"#!/bin/bash
F={file}
case "$1" in
  thread_model) echo parallel ;;
  get_size) stat -c %s "$F" ;;
  can_write|can_flush|can_zero|can_trim|can_multi_conn) exit 0 ;;
  can_fua) echo emulate ;;
  pread) dd if="$F" skip=$4 count=$3 iflag=skip_bytes,count_bytes status=none ;;
  pwrite)
    data=$(mktemp); cat > "$data"
    if [ -e {trigger} ] && [ $(($4 + $3)) -gt {lo} ] && [ $4 -lt {hi} ]; then
      sleep {STALL_S}; late=1
    fi
    dd of="$F" seek=$4 oflag=seek_bytes conv=notrunc status=none < "$data"; rm -f "$data"
    [ -n "$late" ] && echo "landed $4" >> {log}
    exit 0 ;;
  flush) sync "$F" ;;
  zero|trim) fallocate -z -o $4 -l $3 "$F" ;;
  *) exit 2 ;;
esac
"#,
        file = file.display(),
        trigger = trigger.display(),
        log = log.display(),
    );
    let path = dir.join("stall.sh");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn far_bytes(dir: &Path, at: u64) -> Vec<u8> {
    let far = std::fs::read(dir.join("far.img")).unwrap();
    far[at as usize..at as usize + 4096].to_vec()
}

#[test]
fn a_write_that_timed_out_never_lands_over_the_resync() {
    let dir = tempfile::tempdir().unwrap();
    let (ksock, far) = (dir.path().join("kit.sock"), dir.path().join("far.img"));
    let config = raid1_config(dir.path());
    // Volume offset 8 MiB is member offset 9 MiB (past the metadata area).
    let at = 8 * MIB;
    let plugin = stalling_plugin(dir.path(), &far, at + META, at + META + MIB);
    let _kit = Nbdkit::start(&ksock, [std::ffi::OsStr::new("sh"), plugin.as_os_str()]);
    let _daemon = start_daemon(&config, false);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt
        .block_on(Client::connect(&volume_uri(dir.path())))
        .expect("connect");
    let put = |byte: u8| {
        rt.block_on(async {
            c.write(at, vec![byte; 4096].into()).await.expect("write");
            c.flush().await.expect("flush");
        })
    };
    put(b'A');
    std::thread::sleep(Duration::from_millis(700));

    // B stalls on far: far times out and fails; B is acknowledged (local has it).
    std::fs::write(dir.path().join("trigger"), "").unwrap();
    put(b'B');
    std::fs::remove_file(dir.path().join("trigger")).unwrap();
    assert_eq!(member_state(&status(&config), 1), "failed");
    // C acknowledged and flushed while far is out.
    put(b'C');

    // Far comes back; the stalled B lands on it some time.
    wait_current(&config, 1);
    wait_for("the stalled write to land", Duration::from_secs(30), || {
        dir.path().join("stall.log").exists()
    });
    wait_current(&config, 1);
    std::thread::sleep(Duration::from_millis(500));
    // Far holds C, as a volume that lost its local copy would read.
    let held = far_bytes(dir.path(), at + META);
    assert!(
        held.iter().all(|&b| b == b'C'),
        "far holds {:?}: the stale write landed over the resync",
        held[0] as char
    );
    for _ in 0..4 {
        let got = rt.block_on(c.read(at, 4096)).expect("read");
        assert!(got.iter().all(|&b| b == b'C'), "read {:?}", got[0] as char);
    }
}

#[test]
fn a_server_shut_down_gracefully_is_left_and_its_member_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let (ksock, far) = (dir.path().join("kit.sock"), dir.path().join("far.img"));
    let config = raid1_config(dir.path());
    let mut kit = Kit::start(&ksock, &far, &dir.path().join("kit1.log"));
    let _daemon = start_daemon(&config, false);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt
        .block_on(Client::connect(&volume_uri(dir.path())))
        .expect("connect");
    let mut model = vec![0u8; VOLUME as usize];
    rt.block_on(async {
        write(&c, &mut model, 0, MIB, 1).await;
        c.flush().await.unwrap();
    });

    // SIGTERM: nbdkit answers ESHUTDOWN and exits once its clients are gone.
    // SAFETY: kill(2) on our own child's pid has no memory effects.
    let r = unsafe { libc::kill(kit.0 .0.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(r, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seed = 2;
    while kit.0 .0.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "nbdkit never exited after SIGTERM: nbraidd kept its connections"
        );
        rt.block_on(async {
            write(&c, &mut model, 2 * MIB, 4096, seed).await;
            c.flush().await.expect("flush, degraded");
        });
        seed += 1;
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(member_state(&status(&config), 1), "failed");

    // Restarted on the same file: the member is resynced and current again.
    drop(kit);
    let _kit = Kit::start(&ksock, &far, &dir.path().join("kit2.log"));
    wait_current(&config, 1);
    assert!(rt.block_on(read_all(&c)) == model, "reads after the return");
}

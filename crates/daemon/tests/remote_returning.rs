//! A remote member whose server dies and comes back with the same data (`nbdkit file` on
//! loopback, killed with SIGKILL and restarted on the same file): the volume serves degraded
//! meanwhile; once the server answers, the daemon re-adds the member and resyncs only the
//! regions the write-intent bitmap marks before it is read again (nbdkit's log filter shows
//! every request it got), then every block reads back bit-exact, the two copies are equal
//! byte for byte, and a restart finds the volume healthy.

mod common;
use common::returning::*;

use nbraid_daemon::nbd::client::Client;
use std::time::Duration;

#[test]
fn a_remote_member_that_comes_back_is_resynced_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let (ksock, far) = (dir.path().join("kit.sock"), dir.path().join("far.img"));
    let config = raid1_config(dir.path());
    let kit = Kit::start(&ksock, &far, &dir.path().join("kit1.log"));
    let daemon = start_daemon(&config, false);
    let uri = volume_uri(dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let c = rt.block_on(Client::connect(&uri)).expect("connect");

    // The whole volume written and flushed; then quiet, so the bitmap is clear.
    let mut model = vec![0u8; VOLUME as usize];
    rt.block_on(async {
        fill(&c, &mut model).await;
        tokio::time::sleep(Duration::from_millis(700)).await;
        c.flush().await.unwrap();
    });
    assert_eq!(status(&config)["state"], "healthy");

    // The server dies; writes and a flush go on, degraded.
    drop(kit);
    rt.block_on(async {
        write(&c, &mut model, 5 * MIB + 4096, 4096, 2).await;
        write(&c, &mut model, 20 * MIB, 64 << 10, 3).await;
        write(&c, &mut model, 31 * MIB, MIB, 4).await;
        c.flush().await.expect("flush, degraded");
    });
    let s = status(&config);
    assert_eq!(member_state(&s, 1), "failed", "{s}");
    assert_eq!(s["state"], "degraded", "{s}");
    assert!(rt.block_on(read_all(&c)) == model, "degraded reads");

    // Back with the same data. From here the log shows what the daemon asks it.
    // (a) Nothing but metadata was read from it before it was current, and only the regions
    // written while it was away (3 bitmap chunks) were rewritten on it.
    let log2 = dir.path().join("kit2.log");
    let kit = returns_resynced_over_the_bitmap(&config, &ksock, &far, &log2);

    // (b) Every block reads back; both copies hold the same bytes.
    assert!(rt.block_on(read_all(&c)) == model, "reads after the resync");
    rt.block_on(c.disconnect());
    daemon.stop();
    copies_hold(dir.path(), &model);

    // (c) A restart finds both members active and the volume healthy.
    healthy_after_restart(&config, &rt, &uri, &model);
    drop(kit);
}

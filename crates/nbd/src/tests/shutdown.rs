//! Shutdown: requests in flight are finished and flushed, unread ones answered ESHUTDOWN,
//! a stuck client cut off after the grace.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_in_flight_requests_and_flushes() {
    let e = gated(None);
    let server = server_with(vec![("a", e.clone())]);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    let mut idle = Client::connect(&server);
    idle.start(FLAG_C_FIXED_NEWSTYLE).await;

    c.write(1, 8192, &[7u8; 4096]).await;
    assert_eq!(c.simple().await, (0, 1));
    c.request(0, CMD_READ, 2, 0, 4096).await; // in flight until released
    for _ in 0..1000 {
        if e.active.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let flushes_before = e.inner.flush_count();
    let s2 = server.clone();
    let shut = tokio::spawn(async move { s2.shutdown().await });
    // The idle client in negotiation is let go.
    assert!(idle.expect_closed().await.is_ok());
    // The in-flight read still gets its reply once it completes.
    e.release.notify_one();
    let (err, cookie) = c.simple().await;
    assert_eq!((err, cookie), (0, 2));
    let mut data = vec![0u8; 4096];
    bounded(c.s.read_exact(&mut data)).await.unwrap();
    assert!(c.expect_closed().await.is_ok());
    bounded(shut).await.unwrap().unwrap();
    assert!(e.inner.flush_count() > flushes_before);
    assert_eq!(server.connections(), 0);
    assert!(server.is_shutting_down());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_grace_cuts_off_a_stuck_client() {
    let e = mem(4 * MIB);
    let server = server_with(vec![("a", e.clone())]);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    c.write(1, 0, &[8u8; 4096]).await;
    assert_eq!(c.simple().await, (0, 1));
    // Half a payload, then silence: the reader waits for the rest forever.
    c.request(0, CMD_WRITE, 2, 4096, 4096).await;
    c.s.write_all(&[9u8; 100]).await.unwrap();
    let flushes = e.flush_count();
    bounded(server.shutdown_with_grace(Duration::from_millis(200)))
        .await
        .unwrap();
    assert_eq!(server.connections(), 0);
    assert!(e.flush_count() > flushes);
    let mut rest = Vec::new();
    bounded(c.s.read_to_end(&mut rest)).await.unwrap();
    assert!(rest.is_empty());
    assert_eq!(e.contents(0, 4096), vec![8u8; 4096]);
    assert!(e.contents(4096, 4096).iter().all(|&b| b == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_unread_requests_with_eshutdown() {
    let e = gated(None);
    let limits = Limits {
        max_in_flight: 1,
        ..Limits::default()
    };
    let server =
        Server::with_limits(vec![("a".into(), e.clone() as Arc<dyn Export>)], limits).unwrap();
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    // A is held in the export; B waits for A's slot; C and D are sent but not read yet.
    c.request(0, CMD_READ, 1, 0, 4096).await;
    c.request(0, CMD_READ, 2, 4096, 4096).await;
    c.request(0, CMD_FLUSH, 3, 0, 0).await;
    c.write(4, 8192, &[1u8; 4096]).await;
    for _ in 0..1000 {
        if e.active.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let s2 = server.clone();
    let shut = tokio::spawn(async move { s2.shutdown().await });
    for _ in 0..1000 {
        if server.is_shutting_down() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    e.release.notify_one();
    let mut got = Vec::new();
    for _ in 0..4 {
        let (err, cookie) = c.simple().await;
        if err == 0 && cookie <= 2 {
            let mut data = vec![0u8; 4096];
            bounded(c.s.read_exact(&mut data)).await.unwrap();
        }
        got.push((err, cookie));
    }
    got.sort_by_key(|&(_, cookie)| cookie);
    // A was in flight: served. B was normally already read and waiting for a slot (served),
    // unless shutdown came first (refused). C and D were not read yet: refused.
    assert_eq!(got[0], (0, 1));
    assert!(got[1] == (0, 2) || got[1] == (ESHUTDOWN, 2), "{got:?}");
    assert_eq!(&got[2..], &[(ESHUTDOWN, 3), (ESHUTDOWN, 4)]);
    assert!(c.expect_closed().await.is_ok());
    bounded(shut).await.unwrap().unwrap();
    assert!(
        e.inner.contents(8192, 4096).iter().all(|&b| b == 0),
        "refused write not done"
    );
}

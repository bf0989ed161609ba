//! Requests in flight: a slow one does not hold back others, replies come in completion
//! order, the depth per connection is bounded, inline and task replies never interleave.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_request_does_not_block_others_and_replies_come_in_completion_order() {
    let e = gated(None);
    e.inner.fill(4096, &pattern(4096 * 200, 1));
    let server = server_with(vec![("a", e.clone())]);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    c.request(0, CMD_READ, 0, 0, 4096).await; // held back
    for i in 1..200u64 {
        c.request(0, CMD_READ, i, i * 4096, 4096).await;
    }
    let mut seen = std::collections::HashSet::new();
    for _ in 1..200 {
        let (err, cookie) = c.simple().await;
        assert_eq!(err, 0);
        assert_ne!(cookie, 0, "the held-back read completed first");
        let mut data = vec![0u8; 4096];
        bounded(c.s.read_exact(&mut data)).await.unwrap();
        let want = e.inner.contents(cookie * 4096, 4096);
        assert_eq!(data, want, "payload of cookie {cookie}");
        assert!(seen.insert(cookie));
    }
    e.release.notify_one();
    let (err, cookie) = c.simple().await;
    assert_eq!((err, cookie), (0, 0));
    let mut data = vec![0u8; 4096];
    bounded(c.s.read_exact(&mut data)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_128_requests_in_flight_per_connection() {
    // Every read waits until 128 reads are in the export at once: with fewer slots it
    // would never complete (and the bounded wait fails the test).
    let e = gated(Some(128));
    let server = server_with(vec![("a", e.clone())]);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    for i in 0..128u64 {
        c.request(0, CMD_READ, i, (i + 1) * 4096, 4096).await;
    }
    for _ in 0..128 {
        let (err, _) = c.simple().await;
        assert_eq!(err, 0);
        let mut data = vec![0u8; 4096];
        bounded(c.s.read_exact(&mut data)).await.unwrap();
    }
    assert_eq!(e.max_active.load(Ordering::SeqCst), 128);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_requests_are_bounded() {
    let e = gated(None);
    let limits = Limits {
        max_in_flight: 8,
        max_bytes_in_flight: 64 * MIB as usize,
        ..Limits::default()
    };
    let server =
        Server::with_limits(vec![("a".into(), e.clone() as Arc<dyn Export>)], limits).unwrap();
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    // 20 reads of offset 0 all block; only 8 may enter the export.
    for i in 0..20u64 {
        c.request(0, CMD_READ, i, 0, 4096).await;
    }
    // Wait (bounded) until the server has admitted what it will.
    for _ in 0..1000 {
        if e.active.load(Ordering::SeqCst) == 8 {
            break;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(e.active.load(Ordering::SeqCst), 8);
    e.open_all();
    for _ in 0..20 {
        let (err, _) = c.simple().await;
        assert_eq!(err, 0);
        let mut data = vec![0u8; 4096];
        bounded(c.s.read_exact(&mut data)).await.unwrap();
    }
    assert_eq!(e.max_active.load(Ordering::SeqCst), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_and_task_replies_never_interleave_over_a_tight_pipe() {
    const BLOCKS: u64 = 256;
    let e = Arc::new(MixedExport {
        inner: MemoryExport::new(BLOCKS * 65536),
        own_buffers: AtomicUsize::new(0),
    });
    e.inner.fill(0, &pattern((BLOCKS * 65536) as usize, 9));
    let server = server_with(vec![("a", e.clone())]);
    // A pipe much smaller than one reply: every reply takes many partial writes.
    let (a, b) = duplex(1000);
    let mut c = Client {
        s: a,
        handle: Some(server.spawn_connection(b)),
    };
    c.go("a", false).await;
    let (mut rd, mut wr) = tokio::io::split(c.s);
    // Reads of 4 KiB or 64 KiB (inline or as tasks) and 4 KiB writes, sent while the replies
    // are read; cookies say what each reply must hold.
    let sender = tokio::spawn(async move {
        for i in 0..2000u64 {
            let block = (i * 7) % BLOCKS;
            let h = |typ, len| RequestHeader {
                flags: 0,
                typ,
                cookie: i,
                offset: block * 4096,
                length: len,
            };
            match i % 3 {
                0 => wr.write_all(&h(CMD_READ, 4096).encode()).await.unwrap(),
                1 => wr.write_all(&h(CMD_READ, 65536).encode()).await.unwrap(),
                _ => {
                    wr.write_all(&h(CMD_WRITE, 4096).encode()).await.unwrap();
                    // Same contents as already there: reads stay predictable.
                    let all = pattern((BLOCKS * 65536) as usize, 9);
                    let off = (block * 4096) as usize;
                    wr.write_all(&all[off..off + 4096]).await.unwrap();
                }
            }
        }
        wr
    });
    let all = pattern((BLOCKS * 65536) as usize, 9);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..2000 {
        let mut h = [0u8; 16];
        bounded(rd.read_exact(&mut h)).await.unwrap();
        assert_eq!(&h[0..4], &SIMPLE_REPLY_MAGIC.to_be_bytes());
        assert_eq!(u32::from_be_bytes(h[4..8].try_into().unwrap()), 0);
        let cookie = u64::from_be_bytes(h[8..16].try_into().unwrap());
        assert!(seen.insert(cookie), "cookie {cookie} answered twice");
        let off = ((cookie * 7) % BLOCKS * 4096) as usize;
        let len = match cookie % 3 {
            0 => 4096,
            1 => 65536,
            _ => 0,
        };
        let mut data = vec![0u8; len];
        bounded(rd.read_exact(&mut data)).await.unwrap();
        assert!(data == all[off..off + len], "payload of cookie {cookie}");
    }
    let mut wr = sender.await.unwrap();
    wr.write_all(
        &RequestHeader {
            flags: 0,
            typ: CMD_DISC,
            cookie: 0,
            offset: 0,
            length: 0,
        }
        .encode(),
    )
    .await
    .unwrap();
    let mut rest = Vec::new();
    bounded(rd.read_to_end(&mut rest)).await.unwrap();
    assert!(rest.is_empty());
    assert!(e.own_buffers.load(Ordering::SeqCst) >= 600);
}

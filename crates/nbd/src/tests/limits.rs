//! Server-wide limits, timeouts and shutdown, over in-memory pipes. Most tests run on paused
//! virtual time (a current-thread runtime that jumps ahead only when every task is waiting),
//! so "nothing more happens" is checked by sleeping and timeouts fire without real waiting.
//! Timeouts stay under `WAIT`, the bound of every wait for the server.

use std::sync::atomic::AtomicBool;

use super::*;

/// A memory export whose every operation waits at a gate while it is closed; counts the
/// operations in the export by kind and notes flushes that overlap a write.
struct HeldExport {
    inner: MemoryExport,
    open: AtomicBool,
    opened: Notify,
    /// Whether reads wait at the gate too (they do unless cleared).
    hold_reads: AtomicBool,
    reads: AtomicUsize,
    writes: AtomicUsize,
    zeroes: AtomicUsize,
    /// Writes (WRITE, TRIM, WRITE_ZEROES) started and not finished.
    writing: AtomicUsize,
    /// Flushes that began while a write was still running.
    flushes_during_writes: AtomicUsize,
}

impl HeldExport {
    fn new(size: u64) -> Arc<Self> {
        Arc::new(HeldExport {
            inner: MemoryExport::new(size),
            open: AtomicBool::new(false),
            opened: Notify::new(),
            hold_reads: AtomicBool::new(true),
            reads: AtomicUsize::new(0),
            writes: AtomicUsize::new(0),
            zeroes: AtomicUsize::new(0),
            writing: AtomicUsize::new(0),
            flushes_during_writes: AtomicUsize::new(0),
        })
    }

    fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
        self.opened.notify_waiters();
    }

    async fn gate(&self) {
        loop {
            let opened = self.opened.notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            if self.open.load(Ordering::SeqCst) {
                return;
            }
            opened.await;
        }
    }

    fn count(c: &AtomicUsize) -> usize {
        c.load(Ordering::SeqCst)
    }
}

impl Export for HeldExport {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Bytes>> {
        Box::pin(async move {
            self.reads.fetch_add(1, Ordering::SeqCst);
            if self.hold_reads.load(Ordering::SeqCst) {
                self.gate().await;
            }
            self.inner.read(offset, len).await
        })
    }
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move {
            self.writes.fetch_add(1, Ordering::SeqCst);
            self.writing.fetch_add(1, Ordering::SeqCst);
            self.gate().await;
            let r = self.inner.write(offset, data, fua).await;
            self.writing.fetch_sub(1, Ordering::SeqCst);
            r
        })
    }
    fn flush(&self) -> BoxFuture<'_, io::Result<()>> {
        if self.writing.load(Ordering::SeqCst) > 0 {
            self.flushes_during_writes.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.flush()
    }
    fn trim(&self, o: u64, l: u32, fua: bool) -> BoxFuture<'_, io::Result<()>> {
        self.write_zeroes(
            o,
            l,
            ZeroFlags {
                may_trim: true,
                fua,
                fast_only: false,
            },
        )
    }
    fn write_zeroes(&self, o: u64, l: u32, f: ZeroFlags) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move {
            self.zeroes.fetch_add(1, Ordering::SeqCst);
            self.writing.fetch_add(1, Ordering::SeqCst);
            self.gate().await;
            let r = self.inner.write_zeroes(o, l, f).await;
            self.writing.fetch_sub(1, Ordering::SeqCst);
            r
        })
    }
}

fn server_limited(e: Arc<dyn Export>, limits: Limits) -> Server {
    Server::with_limits(vec![("a".into(), e)], limits).unwrap()
}

/// Lets every task that can run, run (virtual time: the sleep ends only when all wait).
async fn settle() {
    tokio::time::sleep(Duration::from_secs(1)).await;
}

const BIG: u32 = MAX_PAYLOAD;

#[tokio::test(start_paused = true)]
async fn a_client_beyond_max_connections_is_refused_with_a_message() {
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let server = server_limited(mem(MIB), limits);
    let mut a = Client::connect(&server);
    a.go("a", false).await;
    let mut b = Client::connect(&server);
    b.go("a", false).await;
    assert_eq!(server.connections(), 2);

    let mut c = Client::connect(&server);
    c.start(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).await;
    for opt in [OPT_STRUCTURED_REPLY, OPT_LIST] {
        c.send_opt(opt, &[]).await;
        let r = c.opt_reply().await;
        assert_eq!((r.opt, r.typ), (opt, REP_ERR_POLICY));
    }
    let replies = c.info_or_go(OPT_GO, "a", &[]).await;
    let last = replies.last().unwrap();
    assert_eq!(last.typ, REP_ERR_POLICY);
    let msg = String::from_utf8(last.data.clone()).unwrap();
    assert!(
        msg.contains("too many connections") && msg.contains("max_connections"),
        "{msg}"
    );
    c.send_opt(OPT_ABORT, &[]).await;
    assert_eq!(c.opt_reply().await.typ, REP_ACK);
    assert!(matches!(
        c.expect_closed().await,
        Err(ConnError::Refused(_))
    ));
    // The refused client took no slot; the served ones were undisturbed.
    assert_eq!(server.connections(), 2);
    a.request(0, CMD_FLUSH, 1, 0, 0).await;
    assert_eq!(a.simple().await, (0, 1));

    // An old-style client asking with EXPORT_NAME cannot be sent an error: it is disconnected.
    let mut d = Client::connect(&server);
    d.start(FLAG_C_FIXED_NEWSTYLE).await;
    d.send_opt(OPT_EXPORT_NAME, b"a").await;
    assert!(matches!(
        d.expect_closed().await,
        Err(ConnError::Refused(_))
    ));

    // Once a connection ends, a new client is served.
    b.request(0, CMD_DISC, 2, 0, 0).await;
    assert!(b.expect_closed().await.is_ok());
    let mut e = Client::connect(&server);
    e.go("a", false).await;
    assert_eq!(server.connections(), 2);
}

/// Places are taken when the client asks for an export, not when it connects: two clients
/// negotiating side by side for the last place, the second to ask is refused with a message
/// and may ask again once the place is free.
#[tokio::test(start_paused = true)]
async fn the_last_place_goes_to_the_first_client_to_ask_for_an_export() {
    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    let server = server_limited(mem(MIB), limits);
    let mut a = Client::connect(&server);
    let mut b = Client::connect(&server);
    b.start(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).await;
    a.go("a", false).await;
    let replies = b.info_or_go(OPT_GO, "a", &[]).await;
    let last = replies.last().unwrap();
    assert_eq!(last.typ, REP_ERR_POLICY);
    assert!(String::from_utf8_lossy(&last.data).contains("max_connections"));
    a.request(0, CMD_DISC, 1, 0, 0).await;
    assert!(a.expect_closed().await.is_ok());
    let replies = b.info_or_go(OPT_GO, "a", &[]).await;
    assert_eq!(replies.last().unwrap().typ, REP_ACK);
}

/// Issue 30, point 4: writers trickling a byte of a 32 MiB payload every 5 s (together the
/// whole server budget) and more half-open connections than may negotiate at once, beside a
/// normal client: it connects, and its 4 KiB reads and flushes are answered within a second
/// each, all along. The trickling writers are closed once their payloads are overdue (stall
/// timeout plus their length at the minimum rate), the oldest half-open ones as newer arrive.
#[tokio::test(start_paused = true)]
async fn slow_writers_and_half_open_connections_leave_a_normal_client_served() {
    const SLOW: u64 = 4;
    let limits = Limits {
        max_connections: 8,
        max_handshakes: 4,
        max_bytes_in_flight: BIG as usize,
        server_bytes_in_flight: SLOW as usize * BIG as usize,
        handshake_timeout: Duration::from_secs(600),
        stall_timeout: Duration::from_secs(10),
        // A 32 MiB payload is overdue after 10 s + 32 s.
        payload_min_bytes_per_s: MIB,
        ..Limits::default()
    };
    let server = server_limited(mem(SLOW * u64::from(BIG)), limits);
    let mut slow = Vec::new();
    for i in 0..SLOW {
        let mut c = Client::connect(&server);
        c.go("a", false).await;
        c.request(0, CMD_WRITE, i, i * u64::from(BIG), BIG).await;
        slow.push(c);
    }
    let start = tokio::time::Instant::now();
    let trickle = tokio::spawn(async move {
        while start.elapsed() < Duration::from_secs(60) {
            for c in &mut slow {
                let _ = c.s.write_all(&[7]).await;
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        slow
    });
    let mut half: Vec<Client> = (0..2 * 4).map(|_| Client::connect(&server)).collect();
    settle().await;

    let within_a_second = Duration::from_secs(1);
    let mut n = Client::connect(&server);
    tokio::time::timeout(within_a_second, n.go("a", false))
        .await
        .expect("a new client could not connect beside half-open ones");
    let mut cookie = 100;
    while start.elapsed() < Duration::from_secs(50) {
        cookie += 1;
        n.request(0, CMD_READ, cookie, 0, 4096).await;
        let answered = tokio::time::timeout(within_a_second, async {
            let got = n.simple().await;
            let mut data = vec![0u8; 4096];
            n.s.read_exact(&mut data).await.unwrap();
            got
        });
        let at = start.elapsed();
        assert_eq!(
            answered
                .await
                .unwrap_or_else(|_| panic!("a 4 KiB read unanswered at {at:?}")),
            (0, cookie)
        );
        cookie += 1;
        n.request(0, CMD_FLUSH, cookie, 0, 0).await;
        let flushed = tokio::time::timeout(within_a_second, n.simple()).await;
        assert_eq!(
            flushed.unwrap_or_else(|_| panic!("a flush unanswered at {at:?}")),
            (0, cookie)
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // Three payloads arrived at once (three quarters of the budget) and were overdue at 42 s;
    // the fourth began when they left and was cut off when the trickle stopped.
    let mut too_slow = 0;
    for mut c in trickle.await.unwrap() {
        match c.expect_closed().await {
            Err(ConnError::PayloadTooSlow { len_bytes, .. }) => {
                assert_eq!(len_bytes, u64::from(BIG));
                too_slow += 1;
            }
            Err(ConnError::Stalled(..)) => {}
            other => panic!("a trickling writer was not cut off: {other:?}"),
        }
    }
    assert!(too_slow >= 3, "{too_slow} closed as too slow");
    // The oldest half-open connections made room for newer ones and for the normal client.
    for c in half.iter_mut().take(5) {
        let mut sink = Vec::new();
        bounded(c.s.read_to_end(&mut sink)).await.unwrap();
        let ended = bounded(c.handle.take().unwrap()).await;
        assert!(matches!(&ended, Err(e) if e.is_cancelled()), "{ended:?}");
    }
    assert_eq!(server.connections(), 1 + 3);
}

#[tokio::test(start_paused = true)]
async fn refusals_are_bounded_in_number_and_time() {
    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    let server = server_limited(mem(MIB), limits);
    let mut a = Client::connect(&server);
    a.go("a", false).await;
    // Silent clients over the limit: a few are told why (and given up on after a while),
    // the rest are closed at once.
    let mut silent: Vec<Client> = (0..40).map(|_| Client::connect(&server)).collect();
    for c in &mut silent {
        assert!(matches!(
            c.expect_closed().await,
            Err(ConnError::Refused(_))
        ));
    }
    a.request(0, CMD_FLUSH, 1, 0, 0).await;
    assert_eq!(a.simple().await, (0, 1));
}

/// A server budget of two maximal requests besides the reserve (a sixteenth of it).
const TWO_BIG_AND_RESERVE: usize = 2 * BIG as usize + BIG as usize / 4;

#[tokio::test(start_paused = true)]
async fn the_memory_budget_is_shared_by_all_connections() {
    // Two maximal reads fit the server budget; a third, on a third connection, waits for one
    // of them although its own connection holds nothing.
    let e = HeldExport::new(64 * MIB);
    let limits = Limits {
        max_bytes_in_flight: BIG as usize,
        server_bytes_in_flight: TWO_BIG_AND_RESERVE,
        ..Limits::default()
    };
    assert!(limits.server_bytes_in_flight - limits.reserve_bytes() >= 2 * BIG as usize);
    let server = server_limited(e.clone(), limits);
    let mut clients = Vec::new();
    for i in 0..3u64 {
        let mut c = Client::connect(&server);
        c.go("a", false).await;
        c.request(0, CMD_READ, i, 0, BIG).await;
        clients.push(c);
    }
    settle().await;
    assert_eq!(HeldExport::count(&e.reads), 2);
    // A request on a connection holding nothing is light: it takes the reserve meanwhile.
    let mut t = Client::connect(&server);
    t.go("a", false).await;
    t.request(0, CMD_TRIM, 9, 0, 4096).await;
    settle().await;
    assert_eq!(HeldExport::count(&e.zeroes), 1);

    e.open();
    for (i, c) in clients.iter_mut().enumerate() {
        assert_eq!(c.simple().await, (0, i as u64));
        let mut data = vec![0u8; BIG as usize];
        bounded(c.s.read_exact(&mut data)).await.unwrap();
    }
    assert_eq!(t.simple().await, (0, 9));
    assert_eq!(HeldExport::count(&e.reads), 3);
}

/// Review: writers trickling maximal payloads held the whole arriving-payload budget, and
/// another client's 4 KiB write whose payload came a moment after its header waited for it
/// until they were cut off as too slow (42 s). A light write does not wait for that budget.
#[tokio::test(start_paused = true)]
async fn slow_writers_leave_a_small_write_whose_payload_lags_its_header_served() {
    const SLOW: u64 = 4;
    let limits = Limits {
        max_connections: 8,
        max_bytes_in_flight: BIG as usize,
        server_bytes_in_flight: SLOW as usize * BIG as usize,
        stall_timeout: Duration::from_secs(10),
        payload_min_bytes_per_s: MIB,
        ..Limits::default()
    };
    let server = server_limited(mem(SLOW * u64::from(BIG)), limits);
    let mut slow = Vec::new();
    for i in 0..SLOW {
        let mut c = Client::connect(&server);
        c.go("a", false).await;
        c.request(0, CMD_WRITE, i, i * u64::from(BIG), BIG).await;
        c.s.write_all(&[7]).await.unwrap();
        slow.push(c);
    }
    settle().await;

    let mut n = Client::connect(&server);
    n.go("a", false).await;
    let start = tokio::time::Instant::now();
    for cookie in 1..=3u64 {
        n.request(0, CMD_WRITE, cookie, 4096 * cookie, 4096).await;
        settle().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        n.s.write_all(&[cookie as u8; 4096]).await.unwrap();
        let answered = tokio::time::timeout(Duration::from_secs(1), n.simple())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "a 4 KiB write waited behind slow writers at {:?}",
                    start.elapsed()
                )
            });
        assert_eq!(answered, (0, cookie));
    }
    // The slow writers are all still connected, their payloads still arriving.
    assert_eq!(server.connections(), SLOW as usize + 1);
    drop(slow);
}

/// Bug hunt: connections sending maximal reads and never reading the replies held the whole
/// server budget, and another client's 4 KiB read waited until the stall timeout cut them off
/// (56.7 s). The reserve ([`Limits::reserve_bytes`]) serves it at once, the hogs still
/// connected and holding what they took.
#[tokio::test(start_paused = true)]
async fn hogs_that_never_read_their_replies_leave_a_small_read_served() {
    const HOGS: u64 = 4;
    let e = HeldExport::new(2 * u64::from(BIG));
    e.hold_reads.store(false, Ordering::SeqCst);
    let limits = Limits {
        max_bytes_in_flight: 2 * BIG as usize,
        server_bytes_in_flight: HOGS as usize * BIG as usize,
        // Without the reserve the read is answered only when the hogs are cut off: long
        // after the guard below gives up.
        stall_timeout: Duration::from_secs(3600),
        ..Limits::default()
    };
    let server = server_limited(e.clone(), limits);
    let mut hogs = Vec::new();
    for _ in 0..HOGS {
        let mut c = Client::connect(&server);
        c.go("a", false).await;
        for k in 0..2u64 {
            c.request(0, CMD_READ, k, k * u64::from(BIG), BIG).await;
        }
        hogs.push(c);
    }
    settle().await;
    let hog_reads = HeldExport::count(&e.reads);
    assert!(hog_reads >= 3, "the hogs took only {hog_reads} reads");

    let mut n = Client::connect(&server);
    n.go("a", false).await;
    for cookie in 1..=3u64 {
        n.request(0, CMD_READ, cookie, 4096 * cookie, 4096).await;
        let answered = tokio::time::timeout(Duration::from_secs(5), async {
            let got = n.simple().await;
            let mut data = vec![0u8; 4096];
            n.s.read_exact(&mut data).await.unwrap();
            got
        })
        .await
        .expect("a 4 KiB read waited behind clients that never read their replies");
        assert_eq!(answered, (0, cookie));
    }
    // Nobody was cut off, and the hogs' other reads still wait for the rest of the budget.
    assert_eq!(server.connections(), HOGS as usize + 1);
    assert_eq!(HeldExport::count(&e.reads), hog_reads + 3);
}

#[tokio::test(start_paused = true)]
async fn one_connection_cannot_take_the_whole_server_budget() {
    let e = HeldExport::new(64 * MIB);
    let limits = Limits {
        max_bytes_in_flight: BIG as usize,
        server_bytes_in_flight: TWO_BIG_AND_RESERVE,
        ..Limits::default()
    };
    let server = server_limited(e.clone(), limits);
    let mut a = Client::connect(&server);
    a.go("a", false).await;
    a.request(0, CMD_READ, 1, 0, BIG).await;
    a.request(0, CMD_READ, 2, 0, BIG).await;
    settle().await;
    // Its second read waits for its own share, and the rest is left to others.
    assert_eq!(HeldExport::count(&e.reads), 1);
    let mut b = Client::connect(&server);
    b.go("a", false).await;
    b.request(0, CMD_READ, 3, 0, BIG).await;
    settle().await;
    assert_eq!(HeldExport::count(&e.reads), 2);
    e.open();
    for (c, cookies) in [(&mut a, &[1u64, 2][..]), (&mut b, &[3][..])] {
        for _ in cookies {
            let (err, cookie) = c.simple().await;
            assert_eq!(err, 0);
            assert!(cookies.contains(&cookie));
            let mut data = vec![0u8; BIG as usize];
            bounded(c.s.read_exact(&mut data)).await.unwrap();
        }
    }
}

#[tokio::test(start_paused = true)]
async fn trims_and_zeroes_take_request_slots() {
    let e = HeldExport::new(4 * MIB);
    let limits = Limits {
        max_in_flight: 8,
        ..Limits::default()
    };
    let server = server_limited(e.clone(), limits);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    for i in 0..20u64 {
        let typ = if i % 2 == 0 {
            CMD_TRIM
        } else {
            CMD_WRITE_ZEROES
        };
        c.request(0, typ, i, i * 4096, 4096).await;
    }
    settle().await;
    assert_eq!(HeldExport::count(&e.zeroes), 8);
    e.open();
    for _ in 0..20 {
        assert_eq!(c.simple().await.0, 0);
    }
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stops_reading_replies_stalls_only_itself() {
    // The pipe holds 4 MiB; the stalled client's replies pile up to its 32 MiB share, then it
    // can send nothing more. Another client is served meanwhile, and once the stall timeout
    // has passed the stalled one is cut off and its share returns.
    let e = mem(64 * MIB);
    let limits = Limits {
        max_bytes_in_flight: BIG as usize,
        server_bytes_in_flight: TWO_BIG_AND_RESERVE,
        stall_timeout: Duration::from_secs(10),
        ..Limits::default()
    };
    let server = server_limited(e.clone(), limits);
    let mut stalled = Client::connect(&server);
    stalled.go("a", false).await;
    let (_rd, mut wr) = tokio::io::split(stalled.s);
    let sender = tokio::spawn(async move {
        // 64 MiB of reads: more than the pipe and its share together.
        for i in 0..64u64 {
            let h = RequestHeader {
                flags: 0,
                typ: CMD_READ,
                cookie: i,
                offset: i * MIB,
                length: MIB as u32,
            };
            if wr.write_all(&h.encode()).await.is_err() {
                return;
            }
        }
    });
    let mut other = Client::connect(&server);
    other.go("a", false).await;
    for i in 0..8u64 {
        other
            .write(i, i * MIB, &pattern(MIB as usize, i as u8))
            .await;
        assert_eq!(other.simple().await, (0, i));
        let back = other.read_simple(100 + i, i * MIB, MIB as u32).await;
        assert!(back == pattern(MIB as usize, i as u8));
    }
    // Still stalled (no virtual time has passed), then cut off.
    assert_eq!(server.connections(), 2);
    let res = bounded(stalled.handle.take().unwrap()).await.unwrap();
    assert!(
        matches!(&res, Err(ConnError::Io(e)) if e.kind() == io::ErrorKind::TimedOut),
        "{res:?}"
    );
    sender.abort();
    // Its share is back: the other client and a third one together use the whole budget.
    let mut third = Client::connect(&server);
    third.go("a", false).await;
    other.request(0, CMD_READ, 1, 0, BIG).await;
    third.request(0, CMD_READ, 2, 0, BIG).await;
    for c in [&mut other, &mut third] {
        assert_eq!(c.simple().await.0, 0);
        let mut data = vec![0u8; BIG as usize];
        bounded(c.s.read_exact(&mut data)).await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stops_mid_payload_is_cut_off_and_releases_its_share() {
    let e = mem(64 * MIB);
    let limits = Limits {
        max_bytes_in_flight: BIG as usize,
        server_bytes_in_flight: BIG as usize,
        stall_timeout: Duration::from_secs(10),
        ..Limits::default()
    };
    let server = server_limited(e.clone(), limits);
    let mut half = Client::connect(&server);
    half.go("a", false).await;
    half.request(0, CMD_WRITE, 1, 0, BIG).await;
    half.s.write_all(&vec![7u8; MIB as usize]).await.unwrap();
    let mut other = Client::connect(&server);
    other.go("a", false).await;
    // Waits for the whole server budget, which the half-sent write holds until cut off.
    other.request(0, CMD_READ, 2, 0, BIG).await;
    assert!(matches!(
        half.expect_closed().await,
        Err(ConnError::Stalled(_, 10))
    ));
    assert_eq!(other.simple().await, (0, 2));
    let mut data = vec![1u8; BIG as usize];
    bounded(other.s.read_exact(&mut data)).await.unwrap();
    assert!(data.iter().all(|&b| b == 0), "the half write was not done");

    // Half a header, then silence: also a stall.
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    c.s.write_all(&REQUEST_MAGIC.to_be_bytes()).await.unwrap();
    assert!(matches!(
        c.expect_closed().await,
        Err(ConnError::Stalled(_, 10))
    ));
}

#[tokio::test(start_paused = true)]
async fn idle_connections_are_closed_but_busy_and_slow_ones_are_not() {
    let e = HeldExport::new(4 * MIB);
    let limits = Limits {
        idle_timeout: Some(Duration::from_secs(20)),
        ..Limits::default()
    };
    let server = server_limited(e.clone(), limits);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    // A request the export takes an hour over is not idleness.
    c.request(0, CMD_READ, 1, 0, 4096).await;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(server.connections(), 1);
    e.open();
    assert_eq!(c.simple().await, (0, 1));
    let mut data = vec![0u8; 4096];
    bounded(c.s.read_exact(&mut data)).await.unwrap();
    // Requests now and then keep it open...
    for i in 0..5 {
        tokio::time::sleep(Duration::from_secs(15)).await;
        c.request(0, CMD_FLUSH, 10 + i, 0, 0).await;
        assert_eq!(c.simple().await, (0, 10 + i));
    }
    // ...silence closes it, cleanly.
    assert!(c.expect_closed().await.is_ok());
    assert_eq!(server.connections(), 0);
}

#[tokio::test(start_paused = true)]
async fn without_an_idle_timeout_a_silent_client_stays() {
    let server = server_limited(mem(MIB), Limits::default());
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    tokio::time::sleep(Duration::from_secs(7 * 24 * 3600)).await;
    c.request(0, CMD_FLUSH, 1, 0, 0).await;
    assert_eq!(c.simple().await, (0, 1));
}

#[tokio::test(start_paused = true)]
async fn shutdown_flushes_only_after_the_requests_it_cut_off_have_finished() {
    // A write held in the export keeps its connection open past the grace period, so shutdown
    // cuts the connection off; the write still runs, and the flush must come after it.
    let e = HeldExport::new(4 * MIB);
    let server = server_with(vec![("a", e.clone())]);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    c.write(1, 8192, &[5u8; 4096]).await;
    settle().await;
    assert_eq!(HeldExport::count(&e.writes), 1);
    let releaser = {
        let e = e.clone();
        tokio::spawn(async move {
            // Well after the grace period.
            tokio::time::sleep(Duration::from_secs(25)).await;
            e.open();
        })
    };
    let flushes = e.inner.flush_count();
    server
        .shutdown_with_grace(Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(server.connections(), 0);
    assert!(e.inner.flush_count() > flushes);
    assert_eq!(
        HeldExport::count(&e.flushes_during_writes),
        0,
        "flushed while a write was still running"
    );
    assert_eq!(e.inner.contents(8192, 4096), vec![5u8; 4096]);
    releaser.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn shutdown_reports_requests_that_never_finish() {
    let e = HeldExport::new(4 * MIB);
    let server = server_with(vec![("a", e.clone())]);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    c.write(1, 0, &[5u8; 4096]).await;
    settle().await;
    let err = server
        .shutdown_with_grace(Duration::from_secs(20))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("still running"), "{err}");
    assert_eq!(server.requests_in_flight(), 1);
    e.open();
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_requests_of_a_connection_cut_off_for_stalling() {
    // The client sends a write the export holds and a read, and reads no reply: the stall
    // timeout ends its connection while the write still runs. Shutdown must wait for the
    // write before flushing.
    let e = HeldExport::new(4 * MIB);
    e.hold_reads.store(false, Ordering::SeqCst);
    let limits = Limits {
        stall_timeout: Duration::from_secs(10),
        ..Limits::default()
    };
    let server = server_limited(e.clone(), limits);
    // A pipe too small for the read's reply.
    let (a, b) = duplex(4096);
    let mut c = Client {
        s: a,
        handle: Some(server.spawn_connection(b)),
    };
    c.go("a", false).await;
    c.write(1, 0, &[6u8; 4096]).await;
    c.request(0, CMD_READ, 2, 4096, 8192).await;
    settle().await;
    assert_eq!(HeldExport::count(&e.writes), 1);
    let releaser = {
        let e = e.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(100)).await;
            e.open();
        })
    };
    server.shutdown().await.unwrap();
    assert_eq!(HeldExport::count(&e.flushes_during_writes), 0);
    assert_eq!(e.inner.contents(0, 4096), vec![6u8; 4096]);
    releaser.await.unwrap();
    assert!(matches!(
        bounded(c.handle.take().unwrap()).await.unwrap(),
        Err(ConnError::Io(e)) if e.kind() == io::ErrorKind::TimedOut
    ));
}

//! Negotiation: the greeting, options (GO, INFO, LIST, ABORT, EXPORT_NAME, meta contexts),
//! malformed and hostile option streams, and a handshake left idle.

use super::*;

#[tokio::test]
async fn greeting_go_and_block_sizes() {
    let e = Arc::new(
        MemoryExport::new(8 * MIB)
            .with_block_sizes(4096, 192 * 1024)
            .with_description("raid5 over 4 members"),
    );
    let server = server_with(vec![("vol", e)]);
    let mut c = Client::connect(&server);
    let hflags = c.start(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).await;
    assert_eq!(hflags, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
    let replies = c
        .info_or_go(
            OPT_GO,
            "vol",
            &[INFO_BLOCK_SIZE, INFO_NAME, INFO_DESCRIPTION],
        )
        .await;
    assert_eq!(replies.last().unwrap().typ, REP_ACK);
    let (size, flags) = export_info(&replies);
    assert_eq!(size, 8 * MIB);
    for f in [
        TFLAG_HAS_FLAGS,
        TFLAG_SEND_FLUSH,
        TFLAG_SEND_FUA,
        TFLAG_SEND_TRIM,
        TFLAG_SEND_WRITE_ZEROES,
        TFLAG_SEND_FAST_ZERO,
        TFLAG_SEND_CACHE,
        TFLAG_CAN_MULTI_CONN,
    ] {
        assert_ne!(flags & f, 0, "flag {f:#x} missing from {flags:#x}");
    }
    assert_eq!(flags & (TFLAG_READ_ONLY | TFLAG_SEND_DF), 0);
    let bs = find_info(&replies, INFO_BLOCK_SIZE).unwrap();
    assert_eq!(&bs[0..4], &4096u32.to_be_bytes());
    // 192 KiB full stripe → next power of two.
    assert_eq!(&bs[4..8], &(256u32 * 1024).to_be_bytes());
    assert_eq!(&bs[8..12], &MAX_PAYLOAD.to_be_bytes());
    assert_eq!(find_info(&replies, INFO_NAME).unwrap(), b"vol");
    assert_eq!(
        find_info(&replies, INFO_DESCRIPTION).unwrap(),
        b"raid5 over 4 members"
    );
    // Transmission works afterwards.
    c.write(1, 4096, &pattern(4096, 7)).await;
    assert_eq!(c.simple().await, (0, 1));
    assert_eq!(c.read_simple(2, 4096, 4096).await, pattern(4096, 7));
}

#[tokio::test]
async fn info_reports_what_go_reports() {
    let server = server_with(vec![("a", mem(3 * MIB)), ("b", mem(5 * MIB))]);
    for structured in [false, true] {
        let mut c = Client::connect(&server);
        c.start(FLAG_C_FIXED_NEWSTYLE).await;
        if structured {
            c.send_opt(OPT_STRUCTURED_REPLY, &[]).await;
            assert_eq!(c.opt_reply().await.typ, REP_ACK);
        }
        let info = c.info_or_go(OPT_INFO, "b", &[INFO_BLOCK_SIZE]).await;
        assert_eq!(info.last().unwrap().typ, REP_ACK);
        let go = c.info_or_go(OPT_GO, "b", &[INFO_BLOCK_SIZE]).await;
        assert_eq!(go.last().unwrap().typ, REP_ACK);
        assert_eq!(export_info(&info), export_info(&go));
        assert_eq!(export_info(&go).0, 5 * MIB);
        assert_eq!(
            find_info(&info, INFO_BLOCK_SIZE),
            find_info(&go, INFO_BLOCK_SIZE)
        );
        assert_eq!(export_info(&go).1 & TFLAG_SEND_DF != 0, structured);
    }
}

#[tokio::test]
async fn default_export_is_the_first() {
    let server = server_with(vec![("a", mem(3 * MIB)), ("b", mem(5 * MIB))]);
    let mut c = Client::connect(&server);
    c.start(FLAG_C_FIXED_NEWSTYLE).await;
    let r = c.info_or_go(OPT_INFO, "", &[]).await;
    assert_eq!(export_info(&r).0, 3 * MIB);
    // The canonical name is given since the client used another.
    assert_eq!(find_info(&r, INFO_NAME).unwrap(), b"a");
}

#[tokio::test]
async fn list_exports() {
    let server = server_with(vec![("first", mem(MIB)), ("second", mem(MIB))]);
    let mut c = Client::connect(&server);
    c.start(FLAG_C_FIXED_NEWSTYLE).await;
    c.send_opt(OPT_LIST, &[]).await;
    let mut names = Vec::new();
    loop {
        let r = c.opt_reply().await;
        assert_eq!(r.opt, OPT_LIST);
        if r.typ == REP_ACK {
            break;
        }
        assert_eq!(r.typ, REP_SERVER);
        let n = u32::from_be_bytes(r.data[0..4].try_into().unwrap()) as usize;
        names.push(String::from_utf8(r.data[4..4 + n].to_vec()).unwrap());
    }
    assert_eq!(names, ["first", "second"]);
    // LIST with data is invalid, and negotiation carries on.
    c.send_opt(OPT_LIST, b"junk").await;
    assert_eq!(c.opt_reply().await.typ, REP_ERR_INVALID);
    let (size, _) = c
        .info_or_go(OPT_GO, "second", &[])
        .await
        .as_slice()
        .pipe(export_info);
    assert_eq!(size, MIB);
}

trait Pipe: Sized {
    fn pipe<T>(self, f: impl FnOnce(Self) -> T) -> T {
        f(self)
    }
}
impl<T> Pipe for T {}

#[tokio::test]
async fn abort_is_acknowledged_then_closed() {
    let server = server_with(vec![("a", mem(MIB))]);
    let mut c = Client::connect(&server);
    c.start(FLAG_C_FIXED_NEWSTYLE).await;
    c.send_opt(OPT_ABORT, &[]).await;
    let r = c.opt_reply().await;
    assert_eq!((r.opt, r.typ), (OPT_ABORT, REP_ACK));
    c.expect_closed().await.unwrap();
}

#[tokio::test]
async fn abort_then_hangup_without_reading_is_fine() {
    let server = server_with(vec![("a", mem(MIB))]);
    let mut c = Client::connect(&server);
    c.start(FLAG_C_FIXED_NEWSTYLE).await;
    c.send_opt(OPT_ABORT, &[]).await;
    let Client { s, handle } = c;
    drop(s);
    let res = bounded(handle.unwrap()).await;
    assert!(res.is_ok(), "connection task panicked");
}

#[tokio::test]
async fn unknown_options_are_unsupported_and_negotiation_continues() {
    let server = server_with(vec![("a", mem(MIB))]);
    let mut c = Client::connect(&server);
    c.start(FLAG_C_FIXED_NEWSTYLE).await;
    for opt in [0u32, 4, 12, 0xdead_beef, OPT_STARTTLS, OPT_EXTENDED_HEADERS] {
        c.send_opt(opt, b"some data").await;
        let r = c.opt_reply().await;
        assert_eq!((r.opt, r.typ), (opt, REP_ERR_UNSUP), "option {opt}");
    }
    // An unknown option with more data than the server reads is skipped, not stored.
    c.send_opt(4242, &vec![0u8; 200 * 1024]).await;
    assert_eq!(c.opt_reply().await.typ, REP_ERR_UNSUP);
    let r = c.info_or_go(OPT_GO, "a", &[]).await;
    assert_eq!(r.last().unwrap().typ, REP_ACK);
}

#[tokio::test]
async fn unknown_export_errors_on_go_and_closes_on_export_name() {
    let server = server_with(vec![("a", mem(MIB))]);
    let mut c = Client::connect(&server);
    c.start(FLAG_C_FIXED_NEWSTYLE).await;
    for opt in [OPT_INFO, OPT_GO] {
        let r = c.info_or_go(opt, "nope", &[]).await;
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].typ, REP_ERR_UNKNOWN);
    }
    c.send_opt(OPT_EXPORT_NAME, b"nope").await;
    assert!(matches!(
        c.expect_closed().await,
        Err(ConnError::UnknownExport(_))
    ));
}

#[tokio::test]
async fn malformed_info_is_invalid() {
    let server = server_with(vec![("a", mem(MIB))]);
    let mut c = Client::connect(&server);
    c.start(FLAG_C_FIXED_NEWSTYLE).await;
    let mut d = info_data("a", &[INFO_NAME]);
    d.pop();
    c.send_opt(OPT_GO, &d).await;
    assert_eq!(c.opt_reply().await.typ, REP_ERR_INVALID);
    // Name length claiming 4 GiB: rejected without allocating it.
    let mut d = info_data("a", &[]);
    d[0..4].copy_from_slice(&u32::MAX.to_be_bytes());
    c.send_opt(OPT_GO, &d).await;
    assert_eq!(c.opt_reply().await.typ, REP_ERR_INVALID);
    c.send_opt(OPT_STRUCTURED_REPLY, b"x").await;
    assert_eq!(c.opt_reply().await.typ, REP_ERR_INVALID);
}

#[tokio::test]
async fn export_name_with_and_without_zeroes() {
    let server = server_with(vec![("a", mem(2 * MIB))]);
    for no_zeroes in [false, true] {
        let mut c = Client::connect(&server);
        let flags = FLAG_C_FIXED_NEWSTYLE | if no_zeroes { FLAG_C_NO_ZEROES } else { 0 };
        c.start(flags).await;
        c.send_opt(OPT_EXPORT_NAME, b"a").await;
        let mut r = [0u8; 10];
        bounded(c.s.read_exact(&mut r)).await.unwrap();
        assert_eq!(u64::from_be_bytes(r[0..8].try_into().unwrap()), 2 * MIB);
        if !no_zeroes {
            let mut z = [1u8; 124];
            bounded(c.s.read_exact(&mut z)).await.unwrap();
            assert_eq!(z, [0u8; 124]);
        }
        // Straight into transmission.
        c.request(0, CMD_FLUSH, 9, 0, 0).await;
        assert_eq!(c.simple().await, (0, 9));
    }
}

/// Issue 30, point 9d: a client that negotiated no block size (EXPORT_NAME, as the NBD
/// project's test client) may write and read up to 64 MiB at once, unaligned too; the export
/// sees pieces of at most 32 MiB. One that negotiated block sizes still gets EINVAL past 32 MiB.
#[tokio::test]
async fn requests_past_32_mib_without_block_sizes_are_served_in_pieces() {
    let e = Arc::new(MemoryExport::new(96 * MIB).with_block_sizes(4096, 65536));
    let server = server_with(vec![("a", e.clone())]);
    let mut c = Client::connect(&server);
    c.start(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).await;
    c.send_opt(OPT_EXPORT_NAME, b"a").await;
    let mut r = [0u8; 10];
    bounded(c.s.read_exact(&mut r)).await.unwrap();
    let len = 47 * MIB as usize;
    let data = pattern(len, 3);
    c.write(1, 512, &data).await;
    assert_eq!(c.simple().await, (0, 1));
    c.request(0, CMD_READ, 2, 512, len as u32).await;
    assert_eq!(c.simple().await, (0, 2));
    let mut back = vec![0u8; len];
    bounded(c.s.read_exact(&mut back)).await.unwrap();
    assert!(back == data, "47 MiB read back differ");
    c.request(0, CMD_READ, 3, 0, 64 * MIB as u32 + 4096).await;
    assert_eq!(c.simple().await, (EINVAL, 3));

    let mut g = Client::connect(&server);
    g.go("a", false).await;
    g.request(0, CMD_READ, 4, 0, MAX_PAYLOAD + 4096).await;
    assert_eq!(g.simple().await, (EINVAL, 4));
}

#[tokio::test]
async fn export_name_then_hangup_before_reply() {
    let server = server_with(vec![("a", mem(MIB))]);
    for _ in 0..20 {
        let mut c = Client::connect(&server);
        c.start(FLAG_C_FIXED_NEWSTYLE).await;
        c.send_opt(OPT_EXPORT_NAME, b"a").await;
        let Client { s, handle } = c;
        drop(s);
        assert!(bounded(handle.unwrap()).await.is_ok(), "task panicked");
    }
    // The server still serves.
    let mut c = Client::connect(&server);
    c.go("a", false).await;
}

#[tokio::test]
async fn unknown_client_flags_end_the_connection() {
    let server = server_with(vec![("a", mem(MIB))]);
    for flags in [1u32 << 2, 1 << 31, FLAG_C_FIXED_NEWSTYLE | 1 << 5] {
        let mut c = Client::connect(&server);
        c.start(flags).await;
        // Nothing more is negotiated: the option gets no reply.
        c.send_opt(OPT_LIST, &[]).await;
        assert!(matches!(
            c.expect_closed().await,
            Err(ConnError::UnknownClientFlags(f)) if f == flags
        ));
    }
}

#[tokio::test]
async fn bad_option_magic_ends_the_connection() {
    let server = server_with(vec![("a", mem(MIB))]);
    let mut c = Client::connect(&server);
    c.start(FLAG_C_FIXED_NEWSTYLE).await;
    c.s.write_all(&[0x55; 16]).await.unwrap();
    assert!(matches!(
        c.expect_closed().await,
        Err(ConnError::BadOptionMagic(_))
    ));
}

#[tokio::test]
async fn huge_option_length_ends_the_connection() {
    let server = server_with(vec![("a", mem(MIB))]);
    let mut c = Client::connect(&server);
    c.start(FLAG_C_FIXED_NEWSTYLE).await;
    let mut v = Vec::new();
    v.extend_from_slice(&IHAVEOPT.to_be_bytes());
    v.extend_from_slice(&OPT_GO.to_be_bytes());
    v.extend_from_slice(&u32::MAX.to_be_bytes());
    c.s.write_all(&v).await.unwrap();
    assert!(matches!(
        c.expect_closed().await,
        Err(ConnError::OptionTooLong { .. })
    ));
}

#[tokio::test]
async fn no_meta_context_for_exports_that_cannot_tell() {
    let server = server_with(vec![("g", gated(None))]);
    let mut c = Client::connect(&server);
    c.start(FLAG_C_FIXED_NEWSTYLE).await;
    c.send_opt(OPT_STRUCTURED_REPLY, &[]).await;
    assert_eq!(c.opt_reply().await.typ, REP_ACK);
    let mut d = Vec::new();
    d.extend_from_slice(&1u32.to_be_bytes());
    d.extend_from_slice(b"g");
    d.extend_from_slice(&1u32.to_be_bytes());
    d.extend_from_slice(&15u32.to_be_bytes());
    d.extend_from_slice(b"base:allocation");
    for opt in [OPT_LIST_META_CONTEXT, OPT_SET_META_CONTEXT] {
        c.send_opt(opt, &d).await;
        assert_eq!(c.opt_reply().await.typ, REP_ACK, "option {opt}");
    }
    let go = c.info_or_go(OPT_GO, "g", &[]).await;
    assert_eq!(go.last().unwrap().typ, REP_ACK);
    c.request(0, CMD_BLOCK_STATUS, 1, 0, 4096).await;
    let ch = c.chunk().await;
    assert_eq!((ch.typ, ch.cookie), (REPLY_TYPE_ERROR, 1));
    assert_eq!(&ch.payload[0..4], &EINVAL.to_be_bytes());
}

#[tokio::test]
async fn idle_handshake_is_cut_off() {
    let limits = Limits {
        handshake_timeout: Duration::from_millis(100),
        ..Limits::default()
    };
    let server =
        Server::with_limits(vec![("a".into(), mem(MIB) as Arc<dyn Export>)], limits).unwrap();
    let mut c = Client::connect(&server);
    c.start(FLAG_C_FIXED_NEWSTYLE).await;
    // No option ever comes.
    assert!(matches!(
        c.expect_closed().await,
        Err(ConnError::HandshakeTimeout)
    ));
    // A prompt client is unaffected, also in transmission long after the limit.
    let mut d = Client::connect(&server);
    d.go("a", false).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    d.request(0, CMD_FLUSH, 1, 0, 0).await;
    assert_eq!(d.simple().await, (0, 1));
}

/// A client that hangs up mid-handshake (a port scanner) ends with an I/O error that says it
/// was in the handshake, which the server's log limits as a flood; one that hangs up in the
/// middle of a write's payload ends with a plain I/O error, said every time.
#[tokio::test]
async fn a_hang_up_in_the_handshake_is_told_from_one_in_transmission() {
    let server = Server::new(vec![("a".into(), mem(MIB) as Arc<dyn Export>)]).unwrap();
    let mut c = Client::connect(&server);
    c.start(FLAG_C_FIXED_NEWSTYLE).await;
    c.s.write_all(&IHAVEOPT.to_be_bytes()[..5]).await.unwrap();
    c.s.shutdown().await.unwrap();
    let ended = c.expect_closed().await;
    assert!(
        matches!(&ended, Err(ConnError::HandshakeIo(_))),
        "{ended:?}"
    );
    assert!(ended.unwrap_err().ended_in_handshake());

    let mut d = Client::connect(&server);
    d.go("a", false).await;
    d.request(0, CMD_WRITE, 1, 0, 4096).await;
    d.s.write_all(&[7u8; 100]).await.unwrap();
    d.s.shutdown().await.unwrap();
    let ended = d.expect_closed().await;
    assert!(matches!(&ended, Err(ConnError::Io(_))), "{ended:?}");
    assert!(!ended.unwrap_err().ended_in_handshake());
}

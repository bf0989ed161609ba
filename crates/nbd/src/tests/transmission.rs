//! Transmission: reads, writes, trims, zeroes, FUA, structured replies and block status;
//! malformed requests; replies and payloads that arrive in pieces or in bursts.

use super::*;

#[tokio::test]
async fn read_write_simple_and_structured() {
    let e = mem(4 * MIB);
    let server = server_with(vec![("a", e.clone())]);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    let data = pattern(64 * 1024, 3);
    c.write(1, MIB, &data).await;
    assert_eq!(c.simple().await, (0, 1));
    assert_eq!(e.contents(MIB, data.len()), data);
    assert_eq!(c.read_simple(2, MIB, data.len() as u32).await, data);

    let mut s = Client::connect(&server);
    let (_, flags) = s.go("a", true).await;
    assert_ne!(flags & TFLAG_SEND_DF, 0);
    s.request(CMD_FLAG_DF, CMD_READ, 3, MIB, 4096).await;
    let ch = s.chunk().await;
    assert_eq!(
        (ch.flags, ch.typ, ch.cookie),
        (REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, 3)
    );
    assert_eq!(&ch.payload[0..8], &MIB.to_be_bytes());
    assert_eq!(&ch.payload[8..], &data[..4096]);
    // Non-read commands get simple replies, also with structured replies on.
    s.write(4, 0, &[9u8; 512]).await;
    assert_eq!(s.simple().await, (0, 4));
    s.request(CMD_FLAG_FUA, CMD_FLUSH, 5, 0, 0).await;
    assert_eq!(s.simple().await, (0, 5));
    assert!(e.flush_count() >= 1);
}

#[tokio::test]
async fn trim_zeroes_cache_and_fua() {
    let e = mem(4 * MIB);
    let server = server_with(vec![("a", e.clone())]);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    c.write(1, 0, &vec![0xaa; 256 * 1024]).await;
    assert_eq!(c.simple().await, (0, 1));
    c.request(
        CMD_FLAG_NO_HOLE | CMD_FLAG_FUA,
        CMD_WRITE_ZEROES,
        2,
        4096,
        8192,
    )
    .await;
    assert_eq!(c.simple().await, (0, 2));
    c.request(CMD_FLAG_FAST_ZERO, CMD_WRITE_ZEROES, 3, 65536, 65536)
        .await;
    assert_eq!(c.simple().await, (0, 3));
    let got = e.contents(0, 256 * 1024);
    assert!(got[..4096].iter().all(|&b| b == 0xaa));
    assert!(got[4096..12288].iter().all(|&b| b == 0));
    assert!(got[12288..65536].iter().all(|&b| b == 0xaa));
    assert!(got[65536..131072].iter().all(|&b| b == 0));
    c.request(CMD_FLAG_FUA, CMD_TRIM, 4, 131072, 65536).await;
    assert_eq!(c.simple().await, (0, 4));
    c.request(0, CMD_CACHE, 5, 0, 4 * MIB as u32).await;
    assert_eq!(c.simple().await, (0, 5));
    // Zero-length requests succeed without touching anything.
    for (i, typ) in [CMD_WRITE, CMD_TRIM, CMD_WRITE_ZEROES, CMD_CACHE]
        .into_iter()
        .enumerate()
    {
        c.request(0, typ, 10 + i as u64, 512, 0).await;
        assert_eq!(c.simple().await, (0, 10 + i as u64));
    }
    c.request(0, CMD_READ, 20, 512, 0).await;
    assert_eq!(c.simple().await, (0, 20));
}

#[tokio::test]
async fn invalid_requests_get_the_named_errors_and_the_connection_continues() {
    let e = Arc::new(MemoryExport::new(4 * MIB).with_block_sizes(4096, 65536));
    let server = server_with(vec![("a", e.clone())]);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    let size = 4 * MIB;
    let cases: Vec<(u16, u16, u64, u32, u32)> = vec![
        // (flags, type, offset, length, expected error)
        (0, CMD_READ, size, 4096, EINVAL),
        (0, CMD_READ, size - 4096, 8192, EINVAL),
        (0, CMD_READ, u64::MAX - 4095, 4096, EINVAL),
        (0, CMD_READ, 512, 4096, EINVAL),
        (0, CMD_READ, 0, 1000, EINVAL),
        (0, CMD_READ, 0, MAX_PAYLOAD + 4096, EINVAL),
        (0, CMD_TRIM, size, 4096, EINVAL),
        (0, CMD_TRIM, 100, 4096, EINVAL),
        (0, CMD_WRITE_ZEROES, size - 4096, 8192, ENOSPC),
        (0, CMD_WRITE_ZEROES, 4096, 4095, EINVAL),
        (0, CMD_CACHE, size, 4096, EINVAL),
        (0, CMD_FLUSH, 4096, 0, EINVAL),
        (0, CMD_FLUSH, 0, 4096, EINVAL),
        (0, 99, 0, 4096, EINVAL),
        (0, 0xffff, 0, 0, EINVAL),
        (1 << 9, CMD_READ, 0, 4096, EINVAL),
        (CMD_FLAG_NO_HOLE, CMD_READ, 0, 4096, EINVAL),
        // DF needs structured replies.
        (CMD_FLAG_DF, CMD_READ, 0, 4096, EINVAL),
        (CMD_FLAG_FAST_ZERO, CMD_TRIM, 0, 4096, EINVAL),
        // BLOCK_STATUS without a negotiated context.
        (0, CMD_BLOCK_STATUS, 0, 4096, EINVAL),
    ];
    for (i, &(flags, typ, off, len, want)) in cases.iter().enumerate() {
        c.request(flags, typ, 100 + i as u64, off, len).await;
        assert_eq!(c.simple().await, (want, 100 + i as u64), "case {i}");
    }
    // Writes with bad parameters: payload consumed, error returned, stream stays in sync.
    let wcases: Vec<(u64, u32, u32)> = vec![
        (size, 4096, ENOSPC),
        (size - 4096, 8192, ENOSPC),
        (u64::MAX - 4095, 4096, ENOSPC),
        (512, 4096, EINVAL),
        (0, 1000, EINVAL),
    ];
    for (i, &(off, len, want)) in wcases.iter().enumerate() {
        c.request(0, CMD_WRITE, 200 + i as u64, off, len).await;
        c.s.write_all(&vec![0x77; len as usize]).await.unwrap();
        assert_eq!(c.simple().await, (want, 200 + i as u64), "write case {i}");
    }
    // Oversized write (≤ 2^26): discarded, EINVAL, the connection goes on.
    c.request(0, CMD_WRITE, 300, 0, MAX_PAYLOAD + 4096).await;
    let junk = vec![0x66; (MAX_PAYLOAD + 4096) as usize];
    let (mut rd, mut wr) = tokio::io::split(c.s);
    let (sent, reply) = tokio::join!(wr.write_all(&junk), async {
        let mut h = [0u8; 16];
        bounded(rd.read_exact(&mut h)).await.unwrap();
        h
    });
    sent.unwrap();
    assert_eq!(&reply[4..8], &EINVAL.to_be_bytes());
    c.s = rd.unsplit(wr);
    assert!(
        e.contents(0, 4096).iter().all(|&b| b == 0),
        "nothing was written"
    );
    c.write(301, 0, &[5u8; 4096]).await;
    assert_eq!(c.simple().await, (0, 301));
    assert_eq!(c.read_simple(302, 0, 4096).await, vec![5u8; 4096]);
}

#[tokio::test]
async fn write_claiming_gigabytes_ends_the_connection_without_allocating() {
    let server = server_with(vec![("a", mem(4 * MIB))]);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    c.request(0, CMD_WRITE, 1, 0, u32::MAX).await;
    assert!(matches!(
        c.expect_closed().await,
        Err(ConnError::PayloadTooLong(u32::MAX))
    ));
}

#[tokio::test]
async fn structured_read_errors_are_error_chunks() {
    let server = server_with(vec![("a", mem(MIB))]);
    let mut c = Client::connect(&server);
    c.go("a", true).await;
    c.request(0, CMD_READ, 1, MIB, 512).await;
    let ch = c.chunk().await;
    assert_eq!(
        (ch.flags, ch.typ, ch.cookie),
        (REPLY_FLAG_DONE, REPLY_TYPE_ERROR, 1)
    );
    assert_eq!(&ch.payload[0..4], &EINVAL.to_be_bytes());
    let mlen = u16::from_be_bytes([ch.payload[4], ch.payload[5]]) as usize;
    assert_eq!(ch.payload.len(), 6 + mlen);
    // Zero-length structured read: a lone NONE chunk.
    c.request(0, CMD_READ, 2, 0, 0).await;
    let ch = c.chunk().await;
    assert_eq!(
        (ch.flags, ch.typ, ch.cookie),
        (REPLY_FLAG_DONE, REPLY_TYPE_NONE, 2)
    );
}

#[tokio::test]
async fn read_only_export_refuses_writes_with_eperm() {
    let e = Arc::new(MemoryExport::new(MIB).with_read_only(true));
    e.fill(0, &[1u8; 4096]);
    let server = server_with(vec![("ro", e.clone())]);
    for structured in [false, true] {
        let mut c = Client::connect(&server);
        let (_, flags) = c.go("ro", structured).await;
        assert_ne!(flags & TFLAG_READ_ONLY, 0);
        assert_eq!(flags & (TFLAG_SEND_TRIM | TFLAG_SEND_WRITE_ZEROES), 0);
        c.write(1, 0, &[2u8; 4096]).await;
        c.request(0, CMD_TRIM, 2, 0, 4096).await;
        c.request(CMD_FLAG_NO_HOLE, CMD_WRITE_ZEROES, 3, 0, 4096)
            .await;
        for cookie in 1..=3 {
            if structured {
                let ch = c.chunk().await;
                assert_eq!((ch.typ, ch.cookie), (REPLY_TYPE_ERROR, cookie));
                assert_eq!(&ch.payload[0..4], &EPERM.to_be_bytes());
            } else {
                assert_eq!(c.simple().await, (EPERM, cookie));
            }
        }
        c.request(0, CMD_FLUSH, 4, 0, 0).await;
        assert_eq!(c.simple().await, (0, 4));
        if !structured {
            assert_eq!(c.read_simple(5, 0, 4096).await, vec![1u8; 4096]);
        }
    }
    assert_eq!(e.contents(0, 4096), vec![1u8; 4096]);
}

#[tokio::test]
async fn bad_request_magic_ends_the_connection() {
    let server = server_with(vec![("a", mem(MIB))]);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    let mut h = RequestHeader {
        flags: 0,
        typ: CMD_READ,
        cookie: 1,
        offset: 0,
        length: 512,
    }
    .encode();
    h[0] ^= 0xff;
    c.s.write_all(&h).await.unwrap();
    assert!(matches!(
        c.expect_closed().await,
        Err(ConnError::BadRequestMagic(_))
    ));
}

#[tokio::test]
async fn short_header_ends_the_connection() {
    let server = server_with(vec![("a", mem(MIB))]);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    let h = RequestHeader {
        flags: 0,
        typ: CMD_READ,
        cookie: 1,
        offset: 0,
        length: 512,
    }
    .encode();
    c.s.write_all(&h[..13]).await.unwrap();
    c.s.shutdown().await.unwrap();
    assert!(matches!(
        c.expect_closed().await,
        Err(ConnError::ShortHeader(13))
    ));
}

#[tokio::test]
async fn disc_finishes_writes_then_closes_without_reply() {
    let e = mem(MIB);
    let server = server_with(vec![("a", e.clone())]);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    c.write(1, 0, &[3u8; 8192]).await;
    c.request(0, CMD_DISC, 2, 0, 0).await;
    let mut rest = Vec::new();
    bounded(c.s.read_to_end(&mut rest)).await.unwrap();
    // Only the write's reply, nothing for DISC.
    assert_eq!(rest.len(), 16);
    assert_eq!(&rest[4..8], &0u32.to_be_bytes());
    assert!(bounded(c.handle.take().unwrap()).await.unwrap().is_ok());
    assert_eq!(e.contents(0, 8192), vec![3u8; 8192]);
}

#[tokio::test]
async fn malformed_client_does_not_disturb_another() {
    let e = mem(MIB);
    let server = server_with(vec![("a", e.clone())]);
    let mut good = Client::connect(&server);
    good.go("a", false).await;
    good.write(1, 0, &[4u8; 4096]).await;
    assert_eq!(good.simple().await, (0, 1));

    let mut bad = Client::connect(&server);
    bad.go("a", false).await;
    bad.s.write_all(&[0xffu8; 100]).await.unwrap();
    assert!(bad.expect_closed().await.is_err());

    let mut garbage = Client::connect(&server);
    garbage.start(0xffff_ffff).await;
    assert!(garbage.expect_closed().await.is_err());

    assert_eq!(good.read_simple(2, 0, 4096).await, vec![4u8; 4096]);
}

#[tokio::test]
async fn block_status_base_allocation() {
    let e = mem(4 * MIB);
    let server = server_with(vec![("a", e.clone())]);
    let mut c = Client::connect(&server);
    c.start(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).await;
    let meta = |name: &str, queries: &[&str]| {
        let mut d = Vec::new();
        d.extend_from_slice(&(name.len() as u32).to_be_bytes());
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for q in queries {
            d.extend_from_slice(&(q.len() as u32).to_be_bytes());
            d.extend_from_slice(q.as_bytes());
        }
        d
    };
    // Needs structured replies first.
    c.send_opt(OPT_SET_META_CONTEXT, &meta("a", &["base:allocation"]))
        .await;
    assert_eq!(c.opt_reply().await.typ, REP_ERR_INVALID);
    c.send_opt(OPT_STRUCTURED_REPLY, &[]).await;
    assert_eq!(c.opt_reply().await.typ, REP_ACK);
    c.send_opt(OPT_LIST_META_CONTEXT, &meta("a", &[])).await;
    let r = c.opt_reply().await;
    assert_eq!(r.typ, REP_META_CONTEXT);
    assert_eq!(&r.data[4..], b"base:allocation");
    assert_eq!(c.opt_reply().await.typ, REP_ACK);
    c.send_opt(
        OPT_SET_META_CONTEXT,
        &meta("a", &["x-other:thing", "base:allocation"]),
    )
    .await;
    let r = c.opt_reply().await;
    assert_eq!(r.typ, REP_META_CONTEXT);
    let id = u32::from_be_bytes(r.data[0..4].try_into().unwrap());
    assert_eq!(c.opt_reply().await.typ, REP_ACK);
    let go = c.info_or_go(OPT_GO, "a", &[]).await;
    assert_eq!(go.last().unwrap().typ, REP_ACK);

    c.write(1, MIB, &[1u8; 65536]).await;
    assert_eq!(c.simple().await, (0, 1));
    c.request(0, CMD_BLOCK_STATUS, 2, 0, 2 * MIB as u32).await;
    let ch = c.chunk().await;
    assert_eq!(
        (ch.flags, ch.typ, ch.cookie),
        (REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, 2)
    );
    assert_eq!(u32::from_be_bytes(ch.payload[0..4].try_into().unwrap()), id);
    let ext: Vec<(u32, u32)> = ch.payload[4..]
        .chunks_exact(8)
        .map(|d| {
            (
                u32::from_be_bytes(d[0..4].try_into().unwrap()),
                u32::from_be_bytes(d[4..8].try_into().unwrap()),
            )
        })
        .collect();
    let hz = STATE_HOLE | STATE_ZERO;
    assert_eq!(
        ext,
        vec![(MIB as u32, hz), (65536, 0), (MIB as u32 - 65536, hz)]
    );
    c.request(CMD_FLAG_REQ_ONE, CMD_BLOCK_STATUS, 3, 0, 2 * MIB as u32)
        .await;
    let ch = c.chunk().await;
    assert_eq!(ch.payload.len(), 12);
}

#[tokio::test]
async fn large_writes_arrive_whole() {
    let e = mem(64 * MIB);
    let server = server_with(vec![("a", e.clone())]);
    let mut c = Client::connect(&server);
    c.go("a", true).await;
    for (i, len) in [MIB as usize + 512, 5 * MIB as usize, MAX_PAYLOAD as usize]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, i as u8);
        let off = 16 * MIB;
        c.request(CMD_FLAG_FUA, CMD_WRITE, i as u64, off, len as u32)
            .await;
        let (mut rd, mut wr) = tokio::io::split(c.s);
        let (sent, reply) = tokio::join!(wr.write_all(&data), async {
            let mut h = [0u8; 16];
            bounded(rd.read_exact(&mut h)).await.unwrap();
            h
        });
        sent.unwrap();
        c.s = rd.unsplit(wr);
        assert_eq!(&reply[4..8], &0u32.to_be_bytes());
        assert!(e.contents(off, len) == data, "write of {len} bytes");
    }
}

#[tokio::test]
async fn flushed_writes_are_visible_to_other_connections() {
    let e = mem(4 * MIB);
    let server = server_with(vec![("a", e.clone())]);
    let mut a = Client::connect(&server);
    let (_, flags) = a.go("a", false).await;
    assert_ne!(flags & TFLAG_CAN_MULTI_CONN, 0);
    let mut b = Client::connect(&server);
    b.go("a", false).await;
    a.write(1, 8192, &[0x42; 4096]).await;
    assert_eq!(a.simple().await, (0, 1));
    a.request(0, CMD_FLUSH, 2, 0, 0).await;
    assert_eq!(a.simple().await, (0, 2));
    assert_eq!(b.read_simple(3, 8192, 4096).await, vec![0x42; 4096]);
}

/// Returns reads in three pieces (one empty), or one byte short when `short` is set.
struct SplitExport {
    inner: MemoryExport,
    short: bool,
}

impl Export for SplitExport {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Bytes>> {
        self.inner.read(offset, len)
    }
    fn read_parts(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<ReadData>> {
        Box::pin(async move {
            let all = self.inner.read(offset, len).await?;
            let cut = all.len() / 3;
            let end = if self.short { all.len() - 1 } else { all.len() };
            Ok(vec![all.slice(..cut), Bytes::new(), all.slice(cut..end)])
        })
    }
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, io::Result<()>> {
        self.inner.write(offset, data, fua)
    }
    fn flush(&self) -> BoxFuture<'_, io::Result<()>> {
        self.inner.flush()
    }
    fn write_zeroes(&self, o: u64, l: u32, f: ZeroFlags) -> BoxFuture<'_, io::Result<()>> {
        self.inner.write_zeroes(o, l, f)
    }
}

#[tokio::test]
async fn reads_returned_in_pieces_arrive_whole() {
    let split = Arc::new(SplitExport {
        inner: MemoryExport::new(4 * MIB),
        short: false,
    });
    let data = pattern(MIB as usize, 9);
    split.inner.fill(0, &data);
    let short = Arc::new(SplitExport {
        inner: MemoryExport::new(MIB),
        short: true,
    });
    let server = server_with(vec![("s", split), ("short", short)]);
    let mut c = Client::connect(&server);
    c.go("s", false).await;
    for (i, len) in [512usize, 4096, 65536, MIB as usize]
        .into_iter()
        .enumerate()
    {
        assert!(c.read_simple(i as u64, 0, len as u32).await == data[..len]);
    }
    let mut s = Client::connect(&server);
    s.go("s", true).await;
    s.request(0, CMD_READ, 7, 0, MIB as u32).await;
    let ch = s.chunk().await;
    assert_eq!(ch.typ, REPLY_TYPE_OFFSET_DATA);
    assert!(ch.payload[8..] == data[..]);
    // Pieces that do not add up are an I/O error, not a corrupt stream.
    let mut k = Client::connect(&server);
    k.go("short", false).await;
    k.request(0, CMD_READ, 8, 0, 4096).await;
    assert_eq!(k.simple().await, (EIO, 8));
    assert_eq!(k.read_simple(9, 0, 0).await.len(), 0);
}

/// Writes into the export's own buffers, their payloads already in the reader's buffer (a
/// burst sent at once: copied out of it) or arriving in pieces after their header (read from
/// the socket under the payload's clock), all land whole and in place.
#[tokio::test]
async fn buffered_and_trickled_payloads_land_whole() {
    const BLOCKS: u64 = 64;
    let e = Arc::new(MixedExport {
        inner: MemoryExport::new(BLOCKS * 4096),
        own_buffers: AtomicUsize::new(0),
    });
    let server = server_with(vec![("a", e.clone())]);
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    // A burst: 32 writes of even blocks in one send.
    let mut burst = Vec::new();
    for i in 0..32u64 {
        let h = RequestHeader {
            flags: 0,
            typ: CMD_WRITE,
            cookie: i,
            offset: 2 * i * 4096,
            length: 4096,
        };
        burst.extend_from_slice(&h.encode());
        burst.extend_from_slice(&pattern(4096, i as u8));
    }
    c.s.write_all(&burst).await.unwrap();
    for i in 0..32u64 {
        assert_eq!(c.simple().await, (0, i));
    }
    // Trickled: each payload in three pieces, the reader waiting for each.
    for i in 0..4u64 {
        let data = pattern(4096, 100 + i as u8);
        c.request(0, CMD_WRITE, 100 + i, (2 * i + 1) * 4096, 4096)
            .await;
        for piece in [&data[..1000], &data[1000..3000], &data[3000..]] {
            tokio::time::sleep(Duration::from_millis(2)).await;
            c.s.write_all(piece).await.unwrap();
        }
        assert_eq!(c.simple().await, (0, 100 + i));
    }
    for i in 0..32u64 {
        assert_eq!(e.inner.contents(2 * i * 4096, 4096), pattern(4096, i as u8));
    }
    for i in 0..4u64 {
        let want = pattern(4096, 100 + i as u8);
        assert_eq!(e.inner.contents((2 * i + 1) * 4096, 4096), want);
    }
    assert_eq!(e.own_buffers.load(Ordering::SeqCst), 36);
}

/// Headers taken straight out of the reader's buffer (a burst in one send) end the
/// connection as headers read one by one do: a disconnect cleanly after the replies before
/// it, a bad magic with its error.
#[tokio::test]
async fn a_burst_ends_at_its_disconnect_or_its_bad_magic() {
    let e = mem(MIB);
    let server = server_with(vec![("a", e.clone())]);
    let header = |typ, cookie, length| {
        RequestHeader {
            flags: 0,
            typ,
            cookie,
            offset: 0,
            length,
        }
        .encode()
    };
    let mut c = Client::connect(&server);
    c.go("a", false).await;
    let mut burst = header(CMD_WRITE, 1, 4096).to_vec();
    burst.extend_from_slice(&pattern(4096, 5));
    burst.extend_from_slice(&header(CMD_FLUSH, 2, 0));
    burst.extend_from_slice(&header(CMD_DISC, 3, 0));
    c.s.write_all(&burst).await.unwrap();
    assert_eq!(c.simple().await, (0, 1));
    assert_eq!(c.simple().await, (0, 2));
    assert!(c.expect_closed().await.is_ok());
    assert_eq!(e.contents(0, 4096), pattern(4096, 5));

    let mut c = Client::connect(&server);
    c.go("a", false).await;
    let mut burst = header(CMD_FLUSH, 4, 0).to_vec();
    let mut bad = header(CMD_FLUSH, 5, 0);
    bad[0] ^= 0xff;
    burst.extend_from_slice(&bad);
    c.s.write_all(&burst).await.unwrap();
    assert_eq!(c.simple().await, (0, 4));
    assert!(matches!(
        c.expect_closed().await,
        Err(ConnError::BadRequestMagic(_))
    ));
}

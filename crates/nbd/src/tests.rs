//! Protocol tests: byte streams fed to the server over in-memory pipes.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::{Barrier, Notify};
use tokio::task::JoinHandle;

use super::proto::*;
use super::*;

const MIB: u64 = 1024 * 1024;
/// Bound on any single wait, so a broken server fails the test instead of hanging it.
const WAIT: Duration = Duration::from_secs(30);

async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(WAIT, f)
        .await
        .expect("server did not answer")
}

struct Client {
    s: DuplexStream,
    handle: Option<JoinHandle<Result<(), ConnError>>>,
}

#[derive(Debug)]
struct OptReply {
    opt: u32,
    typ: u32,
    data: Vec<u8>,
}

#[derive(Debug)]
struct Chunk {
    flags: u16,
    typ: u16,
    cookie: u64,
    payload: Vec<u8>,
}

impl Client {
    fn connect(server: &Server) -> Client {
        let (a, b) = duplex(4 * MIB as usize);
        let handle = server.spawn_connection(b);
        Client {
            s: a,
            handle: Some(handle),
        }
    }

    /// Reads the greeting and sends `client_flags`; returns the handshake flags.
    async fn start(&mut self, client_flags: u32) -> u16 {
        let mut g = [0u8; 18];
        bounded(self.s.read_exact(&mut g)).await.unwrap();
        assert_eq!(&g[0..8], &NBDMAGIC.to_be_bytes());
        assert_eq!(&g[8..16], &IHAVEOPT.to_be_bytes());
        self.s.write_u32(client_flags).await.unwrap();
        u16::from_be_bytes([g[16], g[17]])
    }

    async fn send_opt(&mut self, opt: u32, data: &[u8]) {
        let mut v = Vec::new();
        v.extend_from_slice(&IHAVEOPT.to_be_bytes());
        v.extend_from_slice(&opt.to_be_bytes());
        v.extend_from_slice(&(data.len() as u32).to_be_bytes());
        v.extend_from_slice(data);
        self.s.write_all(&v).await.unwrap();
    }

    async fn opt_reply(&mut self) -> OptReply {
        let mut h = [0u8; 20];
        bounded(self.s.read_exact(&mut h)).await.unwrap();
        assert_eq!(&h[0..8], &OPTION_REPLY_MAGIC.to_be_bytes());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        assert!(len < 1 << 20, "option reply too long");
        let mut data = vec![0u8; len as usize];
        bounded(self.s.read_exact(&mut data)).await.unwrap();
        OptReply {
            opt: u32::from_be_bytes(h[8..12].try_into().unwrap()),
            typ: u32::from_be_bytes(h[12..16].try_into().unwrap()),
            data,
        }
    }

    /// INFO or GO for `name` requesting `infos`; returns the replies up to the final one.
    async fn info_or_go(&mut self, opt: u32, name: &str, infos: &[u16]) -> Vec<OptReply> {
        self.send_opt(opt, &info_data(name, infos)).await;
        let mut out = Vec::new();
        loop {
            let r = self.opt_reply().await;
            assert_eq!(r.opt, opt);
            let last = r.typ != REP_INFO;
            out.push(r);
            if last {
                return out;
            }
        }
    }

    /// Full handshake to transmission with GO; returns (size, transmission flags).
    async fn go(&mut self, name: &str, structured: bool) -> (u64, u16) {
        self.start(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).await;
        if structured {
            self.send_opt(OPT_STRUCTURED_REPLY, &[]).await;
            assert_eq!(self.opt_reply().await.typ, REP_ACK);
        }
        let replies = self.info_or_go(OPT_GO, name, &[INFO_BLOCK_SIZE]).await;
        assert_eq!(
            replies.last().unwrap().typ,
            REP_ACK,
            "GO failed: {replies:?}"
        );
        export_info(&replies)
    }

    async fn request(&mut self, flags: u16, typ: u16, cookie: u64, offset: u64, length: u32) {
        let h = RequestHeader {
            flags,
            typ,
            cookie,
            offset,
            length,
        };
        self.s.write_all(&h.encode()).await.unwrap();
    }

    async fn write(&mut self, cookie: u64, offset: u64, data: &[u8]) {
        self.request(0, CMD_WRITE, cookie, offset, data.len() as u32)
            .await;
        self.s.write_all(data).await.unwrap();
    }

    /// A simple reply without payload: (error, cookie).
    async fn simple(&mut self) -> (u32, u64) {
        let mut h = [0u8; 16];
        bounded(self.s.read_exact(&mut h)).await.unwrap();
        assert_eq!(
            &h[0..4],
            &SIMPLE_REPLY_MAGIC.to_be_bytes(),
            "not a simple reply"
        );
        (
            u32::from_be_bytes(h[4..8].try_into().unwrap()),
            u64::from_be_bytes(h[8..16].try_into().unwrap()),
        )
    }

    async fn chunk(&mut self) -> Chunk {
        let mut h = [0u8; 20];
        bounded(self.s.read_exact(&mut h)).await.unwrap();
        assert_eq!(
            &h[0..4],
            &STRUCTURED_REPLY_MAGIC.to_be_bytes(),
            "not a chunk"
        );
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        let mut payload = vec![0u8; len as usize];
        bounded(self.s.read_exact(&mut payload)).await.unwrap();
        Chunk {
            flags: u16::from_be_bytes([h[4], h[5]]),
            typ: u16::from_be_bytes([h[6], h[7]]),
            cookie: u64::from_be_bytes(h[8..16].try_into().unwrap()),
            payload,
        }
    }

    async fn read_simple(&mut self, cookie: u64, offset: u64, len: u32) -> Vec<u8> {
        self.request(0, CMD_READ, cookie, offset, len).await;
        let (err, c) = self.simple().await;
        assert_eq!((err, c), (0, cookie));
        let mut data = vec![0u8; len as usize];
        bounded(self.s.read_exact(&mut data)).await.unwrap();
        data
    }

    /// Expects the server to close the connection (after any pending bytes).
    async fn expect_closed(&mut self) -> Result<(), ConnError> {
        let mut sink = Vec::new();
        bounded(self.s.read_to_end(&mut sink)).await.unwrap();
        bounded(self.handle.take().unwrap())
            .await
            .expect("connection task panicked")
    }
}

fn info_data(name: &str, infos: &[u16]) -> Vec<u8> {
    let mut d = Vec::new();
    d.extend_from_slice(&(name.len() as u32).to_be_bytes());
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
    for i in infos {
        d.extend_from_slice(&i.to_be_bytes());
    }
    d
}

fn find_info(replies: &[OptReply], typ: u16) -> Option<&[u8]> {
    replies
        .iter()
        .filter(|r| r.typ == REP_INFO)
        .find(|r| r.data[0..2] == typ.to_be_bytes())
        .map(|r| &r.data[2..])
}

fn export_info(replies: &[OptReply]) -> (u64, u16) {
    let d = find_info(replies, INFO_EXPORT).expect("no NBD_INFO_EXPORT");
    assert_eq!(d.len(), 10);
    (
        u64::from_be_bytes(d[0..8].try_into().unwrap()),
        u16::from_be_bytes(d[8..10].try_into().unwrap()),
    )
}

fn mem(size: u64) -> Arc<MemoryExport> {
    Arc::new(MemoryExport::new(size))
}

fn server_with(exports: Vec<(&str, Arc<dyn Export>)>) -> Server {
    Server::new(
        exports
            .into_iter()
            .map(|(n, e)| (n.to_string(), e))
            .collect(),
    )
    .unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

// ---------------------------------------------------------------- handshake

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

// ---------------------------------------------------------------- transmission

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

// ---------------------------------------------------------------- concurrency

/// Wraps a memory export; reads at offset 0 wait for `release`, others pass.
struct GatedExport {
    inner: MemoryExport,
    /// `notify_one` lets one held read through; `open_all` every one, now and later.
    release: Notify,
    open: std::sync::atomic::AtomicBool,
    barrier: Option<Barrier>,
    active: AtomicUsize,
    max_active: AtomicUsize,
}

impl Export for GatedExport {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Bytes>> {
        Box::pin(async move {
            let n = self.active.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_active.fetch_max(n, Ordering::SeqCst);
            if let Some(b) = &self.barrier {
                b.wait().await;
            }
            if offset == 0 && !self.open.load(Ordering::SeqCst) {
                let notified = self.release.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if !self.open.load(Ordering::SeqCst) {
                    notified.await;
                }
            }
            self.active.fetch_sub(1, Ordering::SeqCst);
            self.inner.read(offset, len).await
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

impl GatedExport {
    fn open_all(&self) {
        self.open.store(true, Ordering::SeqCst);
        self.release.notify_waiters();
    }
}

fn gated(barrier: Option<usize>) -> Arc<GatedExport> {
    Arc::new(GatedExport {
        inner: MemoryExport::new(4 * MIB),
        release: Notify::new(),
        open: std::sync::atomic::AtomicBool::new(false),
        barrier: barrier.map(Barrier::new),
        active: AtomicUsize::new(0),
        max_active: AtomicUsize::new(0),
    })
}

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

// ---------------------------------------------------------------- shutdown

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

#[tokio::test]
async fn server_rejects_bad_export_lists() {
    let dup = Server::new(vec![
        ("a".into(), mem(MIB) as Arc<dyn Export>),
        ("a".into(), mem(MIB) as Arc<dyn Export>),
    ]);
    assert!(matches!(dup, Err(ServerError::DuplicateName(_))));
    let odd = Arc::new(MemoryExport::new(MIB).with_block_sizes(3000, 4096));
    assert!(matches!(
        Server::new(vec![("a".into(), odd as Arc<dyn Export>)]),
        Err(ServerError::BadMinBlock { .. })
    ));
    assert_eq!(advertised_preferred(512, 196608), 262144);
    assert_eq!(advertised_preferred(4096, 512), 4096);
    assert_eq!(advertised_preferred(512, 0), 512);
    assert_eq!(advertised_preferred(512, u32::MAX), MAX_PAYLOAD);
}

#[test]
fn errno_mapping() {
    let raw = |e| errno_for(&io::Error::from_raw_os_error(e));
    assert_eq!(raw(libc::ENOSPC), ENOSPC);
    assert_eq!(raw(libc::EDQUOT), ENOSPC);
    assert_eq!(raw(libc::EFBIG), ENOSPC);
    assert_eq!(raw(libc::EROFS), EPERM);
    assert_eq!(raw(libc::EINVAL), EINVAL);
    assert_eq!(raw(libc::EOPNOTSUPP), ENOTSUP);
    assert_eq!(raw(libc::EBADF), EIO);
    assert_eq!(errno_for(&io::ErrorKind::PermissionDenied.into()), EPERM);
    assert_eq!(errno_for(&io::ErrorKind::Unsupported.into()), ENOTSUP);
    assert_eq!(errno_for(&io::Error::other("boom")), EIO);
}

// ---------------------------------------------------------------- more transmission

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

// ---------------------------------------------------------------- listeners

#[tokio::test]
async fn unix_listener_replaces_stale_socket_and_refuses_a_live_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    // A stale socket file: bound once, listener dropped.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let server = server_with(vec![("a", mem(MIB))]);
    let l = Listener::bind_unix(&path).unwrap();
    assert_eq!(
        l.uri("a"),
        format!("nbd+unix:///a?socket={}", path.display())
    );
    let live = Listener::bind_unix(&path);
    assert!(matches!(live, Err(ServerError::Bind { .. })));
    // A regular file is never removed.
    let file = dir.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    assert!(Listener::bind_unix(&file).is_err());
    assert!(file.exists());

    let s = server.clone();
    let task = tokio::spawn(async move { s.serve(l).await });
    let stream = tokio::net::UnixStream::connect(&path).await.unwrap();
    let mut c = Client {
        s: {
            // Bridge the Unix stream to the duplex-based client helpers.
            let (a, b) = duplex(MIB as usize);
            tokio::spawn(async move {
                let (mut br, mut bw) = tokio::io::split(b);
                let (mut ur, mut uw) = stream.into_split();
                let _ = tokio::join!(
                    tokio::io::copy(&mut br, &mut uw),
                    tokio::io::copy(&mut ur, &mut bw)
                );
            });
            a
        },
        handle: None,
    };
    c.go("a", false).await;
    c.write(1, 0, &[1u8; 512]).await;
    assert_eq!(c.simple().await, (0, 1));
    bounded(server.shutdown()).await.unwrap();
    bounded(task).await.unwrap();
    assert!(!path.exists(), "socket file removed at shutdown");
}

#[tokio::test]
async fn tcp_listener_serves() {
    let server = server_with(vec![("a", mem(MIB))]);
    let l = Listener::bind_tcp("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = l.tcp_addr().unwrap();
    assert_eq!(l.uri("a"), format!("nbd://{addr}/a"));
    // The port is taken now.
    assert!(Listener::bind_tcp(addr).await.is_err());
    let s = server.clone();
    let task = tokio::spawn(async move { s.serve(l).await });
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut g = [0u8; 18];
    bounded(stream.read_exact(&mut g)).await.unwrap();
    assert_eq!(&g[0..8], &NBDMAGIC.to_be_bytes());
    stream.write_u32(FLAG_C_FIXED_NEWSTYLE).await.unwrap();
    let mut opt = Vec::new();
    opt.extend_from_slice(&IHAVEOPT.to_be_bytes());
    opt.extend_from_slice(&OPT_ABORT.to_be_bytes());
    opt.extend_from_slice(&0u32.to_be_bytes());
    stream.write_all(&opt).await.unwrap();
    let mut rep = [0u8; 20];
    bounded(stream.read_exact(&mut rep)).await.unwrap();
    assert_eq!(&rep[12..16], &REP_ACK.to_be_bytes());
    bounded(server.shutdown()).await.unwrap();
    bounded(task).await.unwrap();
}

// ---------------------------------------------------------------- limits

mod limits;

// ---------------------------------------------------------------- long writes

mod long_writes;

// ---------------------------------------------------------------- spare worker

mod spare_worker;

// ---------------------------------------------------------------- fair share

mod fair_share;

// ---------------------------------------------------------------- fuzzing

mod fuzz {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn run(f: impl std::future::Future<Output = ()>) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// Sends `bytes`, closes the sending side, drains replies; the connection task must end
    /// without panicking.
    async fn feed(c: Client, bytes: Vec<u8>) {
        let Client { s, handle } = c;
        let (mut rd, mut wr) = tokio::io::split(s);
        let writer = async move {
            let _ = wr.write_all(&bytes).await;
            let _ = wr.shutdown().await;
        };
        let reader = async move {
            let mut sink = Vec::new();
            let _ = rd.read_to_end(&mut sink).await;
        };
        bounded(async { tokio::join!(writer, reader) }).await;
        let res = bounded(handle.unwrap()).await;
        assert!(res.is_ok(), "connection task panicked: {res:?}");
    }

    fn request_bytes() -> impl Strategy<Value = Vec<u8>> {
        let typ = prop_oneof![0u16..9, any::<u16>()];
        let len = prop_oneof![
            Just(0u32),
            Just(512),
            Just(4096),
            0u32..70_000,
            Just(MAX_PAYLOAD + 512),
            any::<u32>()
        ];
        let off = prop_oneof![Just(0u64), 0u64..(2 * MIB), any::<u64>()];
        let flags = prop_oneof![0u16..32, any::<u16>()];
        let one = (flags, typ, any::<u64>(), off, len, vec(any::<u8>(), 0..64)).prop_map(
            |(flags, typ, cookie, offset, length, tail)| {
                let mut v = RequestHeader {
                    flags,
                    typ,
                    cookie,
                    offset,
                    length,
                }
                .encode()
                .to_vec();
                // Sometimes a (short) payload or garbage follows.
                v.extend_from_slice(&tail);
                v
            },
        );
        vec(one, 0..24).prop_map(|v| v.concat())
    }

    fn option_bytes() -> impl Strategy<Value = Vec<u8>> {
        let opt = prop_oneof![1u32..12, any::<u32>()];
        let one = (opt, vec(any::<u8>(), 0..48), any::<bool>(), any::<u32>()).prop_map(
            |(opt, data, lie, claimed)| {
                let mut v = Vec::new();
                v.extend_from_slice(&IHAVEOPT.to_be_bytes());
                v.extend_from_slice(&opt.to_be_bytes());
                let len = if lie { claimed } else { data.len() as u32 };
                v.extend_from_slice(&len.to_be_bytes());
                v.extend_from_slice(&data);
                v
            },
        );
        vec(one, 0..12).prop_map(|v| v.concat())
    }

    /// Sized for CI; `NBRAID_SOAK=1` runs 50 times as many.
    fn cases(default: u32) -> ProptestConfig {
        let n = if std::env::var_os("NBRAID_SOAK").is_some() {
            default * 50
        } else {
            default
        };
        ProptestConfig::with_cases(n)
    }

    proptest! {
        #![proptest_config(cases(128))]

        #[test]
        fn random_handshake_bytes_never_panic(flags in any::<u32>(), junk in vec(any::<u8>(), 0..512)) {
            run(async {
                let server = server_with(vec![("a", mem(2 * MIB))]);
                let mut c = Client::connect(&server);
                let mut g = [0u8; 18];
                bounded(c.s.read_exact(&mut g)).await.unwrap();
                let mut bytes = flags.to_be_bytes().to_vec();
                bytes.extend_from_slice(&junk);
                feed(c, bytes).await;
            });
        }

        #[test]
        fn random_options_never_panic(opts in option_bytes()) {
            run(async {
                let server = server_with(vec![("a", mem(2 * MIB)), ("", mem(MIB))]);
                let mut c = Client::connect(&server);
                let mut g = [0u8; 18];
                bounded(c.s.read_exact(&mut g)).await.unwrap();
                let mut bytes = FLAG_C_FIXED_NEWSTYLE.to_be_bytes().to_vec();
                bytes.extend_from_slice(&opts);
                feed(c, bytes).await;
            });
        }

        #[test]
        fn random_requests_never_panic(structured in any::<bool>(), ro in any::<bool>(), reqs in request_bytes()) {
            run(async {
                let e = Arc::new(MemoryExport::new(2 * MIB).with_read_only(ro));
                let server = server_with(vec![("a", e)]);
                let mut c = Client::connect(&server);
                c.go("a", structured).await;
                feed(c, reqs).await;
                // The server still serves new clients.
                let mut d = Client::connect(&server);
                d.go("a", false).await;
                d.request(0, CMD_READ, 1, 0, 512).await;
                assert_eq!(d.simple().await, (0, 1));
            });
        }
    }
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

/// Odd 4 KiB blocks answer after a few yields (their requests run as tasks); the others
/// complete on the first poll, in the reader. Writes arrive in buffers from `incoming_write`.
struct MixedExport {
    inner: MemoryExport,
    own_buffers: AtomicUsize,
}

/// A payload received into a `MixedExport`'s own buffer.
struct TestIncoming {
    export: Arc<MixedExport>,
    offset: u64,
    buf: Vec<u8>,
}

impl IncomingWrite for TestIncoming {
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf
    }
    fn write(self: Box<Self>, fua: bool) -> BoxFuture<'static, io::Result<()>> {
        Box::pin(async move {
            let TestIncoming {
                export,
                offset,
                buf,
            } = *self;
            export.own_buffers.fetch_add(1, Ordering::SeqCst);
            export.inner.write(offset, Bytes::from(buf), fua).await
        })
    }
}

impl Export for MixedExport {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read(&self, offset: u64, len: u32) -> BoxFuture<'_, io::Result<Bytes>> {
        Box::pin(async move {
            if (offset / 4096) % 2 == 1 {
                for _ in 0..(offset / 4096) % 7 + 1 {
                    tokio::task::yield_now().await;
                }
            }
            self.inner.read(offset, len).await
        })
    }
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, io::Result<()>> {
        self.inner.write(offset, data, fua)
    }
    fn incoming_write(self: Arc<Self>, offset: u64, len: usize) -> Option<Box<dyn IncomingWrite>> {
        Some(Box::new(TestIncoming {
            export: self,
            offset,
            buf: vec![0; len],
        }))
    }
    fn flush(&self) -> BoxFuture<'_, io::Result<()>> {
        self.inner.flush()
    }
    fn write_zeroes(&self, o: u64, l: u32, f: ZeroFlags) -> BoxFuture<'_, io::Result<()>> {
        self.inner.write_zeroes(o, l, f)
    }
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

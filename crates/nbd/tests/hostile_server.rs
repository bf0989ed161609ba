//! The client against a hostile server: a remote member's server is another machine, so
//! every byte it sends is untrusted. A fake server answers the handshake and then the
//! client's requests, mostly by the book, sometimes with a byte flipped or cut, a chunk
//! placed anywhere in the 64-bit space, a length field of gigabytes, a reply to nobody, a
//! reply twice, garbage. Whatever it sends, the client must not panic, every request must
//! end (in an error, or once the server hangs up) and a read that succeeds must hold
//! exactly what the server sent for it.
//!
//! `NBRAID_SOAK=1` runs 20,000 schedules instead of 300.

use std::sync::Mutex;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::future::join_all;
use nbraid_nbd::client::{Client, ClientError, ConnectOptions, Negotiation};
use nbraid_nbd::proto::*;
use nbraid_nbd::ZeroFlags;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, DuplexStream};

const EXPORT_BYTES: u64 = 1 << 20;
/// Longer than any honest exchange here takes: a request still waiting then is stuck.
const STUCK: Duration = Duration::from_secs(20);
/// Requests arriving closer together than this are answered as one batch, in any order.
const BATCH_GAP: Duration = Duration::from_millis(3);

/// The byte an honest server holds at `at` (never zero, so holes show).
fn byte_at(at: u64) -> u8 {
    ((at >> 9) as u8 ^ at as u8) | 1
}

/// Panics anywhere in the process (the client's reader and writer are tasks of their own,
/// whose panics would otherwise only show as requests that never end).
static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn record_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.lock().unwrap().push(info.to_string());
            default(info);
        }));
    });
}

/// One schedule's server: how often it misbehaves, drawn from the seed.
struct Hostile {
    rng: StdRng,
    /// Per mille of handshake messages sent damaged.
    damage_handshake: u32,
    /// Per mille of replies that misbehave.
    misbehave: u32,
    structured: bool,
    meta_context: u32,
}

/// A request as the server read it.
struct Request {
    cmd: u16,
    cookie: u64,
    offset: u64,
    len: u32,
}

impl Hostile {
    fn new(seed: u64) -> Hostile {
        let mut rng = StdRng::seed_from_u64(seed);
        let damage_handshake = [0, 0, 30, 200][rng.gen_range(0..4)];
        let misbehave = [0, 10, 100, 400][rng.gen_range(0..4)];
        let structured = rng.gen_bool(0.8);
        let meta_context = rng.gen();
        Hostile {
            rng,
            damage_handshake,
            misbehave,
            structured,
            meta_context,
        }
    }

    fn chance(&mut self, per_mille: u32) -> bool {
        self.rng.gen_range(0..1000) < per_mille
    }

    /// Serves one connection until it is done with it, then hangs up.
    async fn serve(mut self, s: DuplexStream) {
        let mut s = BufReader::new(s);
        if self.handshake(&mut s).await.is_ok() {
            let _ = self.transmission(&mut s).await;
        }
    }

    /// Sends `msg`, perhaps damaged; `Err` once it was damaged (the server then hangs up,
    /// or the client would wait for bytes that never come).
    async fn send(
        &mut self,
        s: &mut BufReader<DuplexStream>,
        mut msg: Vec<u8>,
        damage: u32,
    ) -> std::io::Result<()> {
        let damaged = self.chance(damage) && !msg.is_empty();
        if damaged {
            let at = self.rng.gen_range(0..msg.len());
            match self.rng.gen_range(0..3) {
                0 => msg[at] ^= self.rng.gen_range(1..=255u8),
                1 => msg.truncate(at),
                _ => msg[at..].iter_mut().for_each(|b| *b = self.rng.gen()),
            }
        }
        s.get_mut().write_all(&msg).await?;
        if damaged {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        Ok(())
    }

    async fn handshake(&mut self, s: &mut BufReader<DuplexStream>) -> std::io::Result<()> {
        let mut greeting = NBDMAGIC.to_be_bytes().to_vec();
        greeting.extend_from_slice(&IHAVEOPT.to_be_bytes());
        greeting.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
        self.send(s, greeting, self.damage_handshake).await?;
        s.read_u32().await?;
        loop {
            if s.read_u64().await? != IHAVEOPT {
                return Err(std::io::ErrorKind::InvalidData.into());
            }
            let opt = s.read_u32().await?;
            let len = s.read_u32().await?;
            let mut data = vec![0; len.min(1 << 16) as usize];
            s.read_exact(&mut data).await?;
            let replies = match opt {
                OPT_STRUCTURED_REPLY if self.structured => vec![(REP_ACK, Vec::new())],
                OPT_SET_META_CONTEXT => {
                    let mut ctx = self.meta_context.to_be_bytes().to_vec();
                    ctx.extend_from_slice(META_BASE_ALLOCATION.as_bytes());
                    vec![(REP_META_CONTEXT, ctx), (REP_ACK, Vec::new())]
                }
                OPT_GO => self.go_replies(),
                _ => vec![(REP_ERR_UNSUP, Vec::new())],
            };
            for (typ, body) in replies {
                let mut m = OPTION_REPLY_MAGIC.to_be_bytes().to_vec();
                m.extend_from_slice(&opt.to_be_bytes());
                m.extend_from_slice(&typ.to_be_bytes());
                m.extend_from_slice(&(body.len() as u32).to_be_bytes());
                m.extend_from_slice(&body);
                self.send(s, m, self.damage_handshake).await?;
            }
            if opt == OPT_GO {
                return Ok(());
            }
        }
    }

    /// The export's description: mostly sane, sometimes not (sizes, block sizes, names).
    fn go_replies(&mut self) -> Vec<(u32, Vec<u8>)> {
        let size = match self.rng.gen_range(0..10) {
            0 => u64::MAX,
            1 => self.rng.gen(),
            2 => EXPORT_BYTES / 2 + 1,
            _ => EXPORT_BYTES,
        };
        let every = TFLAG_HAS_FLAGS
            | TFLAG_SEND_FLUSH
            | TFLAG_SEND_FUA
            | TFLAG_SEND_TRIM
            | TFLAG_SEND_WRITE_ZEROES
            | TFLAG_SEND_CACHE
            | TFLAG_SEND_FAST_ZERO;
        let flags = if self.rng.gen_bool(0.8) {
            every
        } else {
            self.rng.gen()
        };
        let mut export = INFO_EXPORT.to_be_bytes().to_vec();
        export.extend_from_slice(&size.to_be_bytes());
        export.extend_from_slice(&flags.to_be_bytes());
        let mut out = vec![(REP_INFO, export)];
        if self.rng.gen_bool(0.5) {
            let sizes: [u32; 3] = match self.rng.gen_range(0..4) {
                0 => self.rng.gen(),
                1 => [512, 4096, 64 << 10],
                2 => [1, 4096, 4096],
                _ => [4096, 4096, 32 << 20],
            };
            let mut b = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
            sizes
                .iter()
                .for_each(|w| b.extend_from_slice(&w.to_be_bytes()));
            out.push((REP_INFO, b));
        }
        if self.rng.gen_bool(0.3) {
            let mut name = INFO_NAME.to_be_bytes().to_vec();
            name.extend((0..self.rng.gen_range(0..40)).map(|_| self.rng.gen::<u8>()));
            out.push((REP_INFO, name));
        }
        out.push((REP_ACK, Vec::new()));
        out
    }

    /// Reads requests in batches and answers each batch in a shuffled order, until the
    /// client goes quiet or a reply ends the connection.
    async fn transmission(&mut self, s: &mut BufReader<DuplexStream>) -> std::io::Result<()> {
        loop {
            let mut batch = Vec::new();
            let first_wait = Duration::from_millis(100);
            while let Ok(ready) = tokio::time::timeout(
                if batch.is_empty() {
                    first_wait
                } else {
                    BATCH_GAP
                },
                s.fill_buf(),
            )
            .await
            {
                if ready?.is_empty() {
                    break;
                }
                batch.push(read_request(s).await?);
            }
            if batch.is_empty() {
                return Ok(());
            }
            batch.shuffle(&mut self.rng);
            for r in &batch {
                if r.cmd == CMD_DISC {
                    return Ok(());
                }
                let (reply, hang_up) = self.reply(r);
                s.get_mut().write_all(&reply).await?;
                if hang_up {
                    return Ok(());
                }
            }
        }
    }

    /// The bytes answering `r`, and whether the server hangs up after them.
    fn reply(&mut self, r: &Request) -> (Vec<u8>, bool) {
        if !self.chance(self.misbehave) {
            return (self.honest(r), false);
        }
        let mut honest = self.honest(r);
        match self.rng.gen_range(0..9) {
            0 => (
                (0..self.rng.gen_range(1..64))
                    .map(|_| self.rng.gen())
                    .collect(),
                false,
            ),
            1 => (simple(self.rng.gen(), 0), false),
            2 => {
                honest.extend_from_slice(&self.honest(r));
                (honest, false)
            }
            3 => {
                let at = self.rng.gen_range(0..honest.len());
                honest.truncate(at);
                (honest, true)
            }
            4 => (self.odd_chunk(r), false),
            5 => (self.stray_data(r), false),
            6 => (self.stray_hole(r), false),
            7 => (self.odd_error(r), false),
            _ => (simple(r.cookie, self.rng.gen()), false),
        }
    }

    /// What a correct server sends for `r`.
    fn honest(&mut self, r: &Request) -> Vec<u8> {
        let errno = if self.chance(50) { EIO } else { 0 };
        if !self.structured {
            let mut m = simple(r.cookie, errno);
            if r.cmd == CMD_READ && errno == 0 {
                m.extend((0..u64::from(r.len)).map(|i| byte_at(r.offset + i)));
            }
            return m;
        }
        match r.cmd {
            CMD_READ if errno == 0 => self.read_chunks(r),
            CMD_BLOCK_STATUS if errno == 0 => {
                let mut body = self.meta_context.to_be_bytes().to_vec();
                let mut left = r.len;
                while left > 0 {
                    let n = self
                        .rng
                        .gen_range(1..=left.min(1 << 16))
                        .next_multiple_of(512)
                        .min(left);
                    body.extend_from_slice(&n.to_be_bytes());
                    body.extend_from_slice(&self.rng.gen_range(0..4u32).to_be_bytes());
                    left -= n;
                    if self.rng.gen_bool(0.3) {
                        break;
                    }
                }
                chunk(REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, r.cookie, &body)
            }
            _ if errno != 0 => {
                let mut body = errno.to_be_bytes().to_vec();
                let msg = b"the disk is on fire";
                body.extend_from_slice(&(msg.len() as u16).to_be_bytes());
                body.extend_from_slice(msg);
                let mut m = chunk(0, REPLY_TYPE_ERROR, r.cookie, &body);
                m.extend(chunk(REPLY_FLAG_DONE, REPLY_TYPE_NONE, r.cookie, &[]));
                m
            }
            _ if self.rng.gen_bool(0.5) => simple(r.cookie, 0),
            _ => chunk(REPLY_FLAG_DONE, REPLY_TYPE_NONE, r.cookie, &[]),
        }
    }

    /// A read answered in pieces of data and holes, in any order, the last one final.
    fn read_chunks(&mut self, r: &Request) -> Vec<u8> {
        let mut cuts: Vec<u32> = (0..self.rng.gen_range(0..4))
            .map(|_| self.rng.gen_range(0..=r.len) / 512 * 512)
            .chain([0, r.len])
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut pieces: Vec<(u64, u32)> = cuts
            .windows(2)
            .map(|w| (r.offset + u64::from(w[0]), w[1] - w[0]))
            .collect();
        pieces.shuffle(&mut self.rng);
        let last = pieces.len() - 1;
        let mut m = Vec::new();
        for (i, (at, n)) in pieces.into_iter().enumerate() {
            let flags = if i == last { REPLY_FLAG_DONE } else { 0 };
            if self.rng.gen_bool(0.3) {
                m.extend(hole(flags, r.cookie, at, n));
            } else {
                m.extend(data(flags, r.cookie, at, n));
            }
        }
        m
    }

    /// A chunk of any type with a length field that may lie (up to 4 GiB), its body cut short.
    fn odd_chunk(&mut self, r: &Request) -> Vec<u8> {
        // Not OFFSET_DATA: a read that succeeds must hold only bytes the server meant.
        let typ = match self.rng.gen_range(0..3) {
            0 => REPLY_TYPE_BLOCK_STATUS,
            1 => self.rng.gen_range(3..=u16::MAX),
            _ => REPLY_TYPE_NONE,
        };
        let len: u32 = match self.rng.gen_range(0..3) {
            0 => self.rng.gen(),
            1 => self.rng.gen_range(0..64),
            _ => u32::MAX - self.rng.gen_range(0..16),
        };
        let flags = self.rng.gen();
        let body: Vec<u8> = (0..len.min(256)).map(|_| self.rng.gen()).collect();
        let mut m = chunk_head(flags, typ, r.cookie, len);
        m.extend_from_slice(&body);
        m
    }

    /// An offset for a chunk: near the request, or anywhere in the 64-bit space.
    fn odd_offset(&mut self, r: &Request) -> u64 {
        match self.rng.gen_range(0..4) {
            0 => u64::MAX - self.rng.gen_range(0..(1 << 20)),
            1 => self.rng.gen(),
            2 => r.offset.wrapping_sub(self.rng.gen_range(0..4096)),
            _ => r.offset + self.rng.gen_range(0..u64::from(r.len) + 4096),
        }
    }

    fn stray_data(&mut self, r: &Request) -> Vec<u8> {
        let at = self.odd_offset(r);
        let n = self.rng.gen_range(0..=r.len.max(1) + 4096);
        data(self.rng.gen_range(0..2), r.cookie, at, n)
    }

    fn stray_hole(&mut self, r: &Request) -> Vec<u8> {
        let at = self.odd_offset(r);
        let n = match self.rng.gen_range(0..3) {
            0 => self.rng.gen(),
            1 => u32::MAX,
            _ => self.rng.gen_range(0..=r.len.max(1) + 4096),
        };
        hole(self.rng.gen_range(0..2), r.cookie, at, n)
    }

    /// An error chunk whose message length or errno is wrong.
    fn odd_error(&mut self, r: &Request) -> Vec<u8> {
        let mut body = self.rng.gen_range(0..3u32).to_be_bytes().to_vec();
        body.extend_from_slice(&self.rng.gen::<u16>().to_be_bytes());
        body.extend((0..self.rng.gen_range(0..32)).map(|_| self.rng.gen::<u8>()));
        let typ = if self.rng.gen_bool(0.5) {
            REPLY_TYPE_ERROR
        } else {
            REPLY_TYPE_ERROR_OFFSET
        };
        chunk(self.rng.gen_range(0..2), typ, r.cookie, &body)
    }
}

async fn read_request(s: &mut BufReader<DuplexStream>) -> std::io::Result<Request> {
    if s.read_u32().await? != REQUEST_MAGIC {
        return Err(std::io::ErrorKind::InvalidData.into());
    }
    let _flags = s.read_u16().await?;
    let cmd = s.read_u16().await?;
    let cookie = s.read_u64().await?;
    let offset = s.read_u64().await?;
    let len = s.read_u32().await?;
    if cmd == CMD_WRITE {
        let mut payload = vec![0; len as usize];
        s.read_exact(&mut payload).await?;
    }
    Ok(Request {
        cmd,
        cookie,
        offset,
        len,
    })
}

fn simple(cookie: u64, errno: u32) -> Vec<u8> {
    let mut m = SIMPLE_REPLY_MAGIC.to_be_bytes().to_vec();
    m.extend_from_slice(&errno.to_be_bytes());
    m.extend_from_slice(&cookie.to_be_bytes());
    m
}

fn chunk_head(flags: u16, typ: u16, cookie: u64, len: u32) -> Vec<u8> {
    let mut m = STRUCTURED_REPLY_MAGIC.to_be_bytes().to_vec();
    m.extend_from_slice(&flags.to_be_bytes());
    m.extend_from_slice(&typ.to_be_bytes());
    m.extend_from_slice(&cookie.to_be_bytes());
    m.extend_from_slice(&len.to_be_bytes());
    m
}

fn chunk(flags: u16, typ: u16, cookie: u64, body: &[u8]) -> Vec<u8> {
    let mut m = chunk_head(flags, typ, cookie, body.len() as u32);
    m.extend_from_slice(body);
    m
}

/// An `OFFSET_DATA` chunk holding the honest bytes at `at`.
fn data(flags: u16, cookie: u64, at: u64, n: u32) -> Vec<u8> {
    let mut m = chunk_head(flags, REPLY_TYPE_OFFSET_DATA, cookie, n + 8);
    m.extend_from_slice(&at.to_be_bytes());
    m.extend((0..u64::from(n)).map(|i| byte_at(at.wrapping_add(i))));
    m
}

fn hole(flags: u16, cookie: u64, at: u64, n: u32) -> Vec<u8> {
    let mut body = at.to_be_bytes().to_vec();
    body.extend_from_slice(&n.to_be_bytes());
    chunk(flags, REPLY_TYPE_OFFSET_HOLE, cookie, &body)
}

/// What one request of the client's got back, judged: `Err` names a broken promise.
type Verdict = Result<(), String>;

/// A read's bytes are those the server sent (or zero: a hole).
fn check_read(offset: u64, len: usize, got: Result<BytesMut, ClientError>) -> Verdict {
    let Ok(b) = got else { return Ok(()) };
    if b.len() != len {
        return Err(format!(
            "a read of {len} bytes at {offset} returned {}",
            b.len()
        ));
    }
    match (0..len).find(|&i| b[i] != 0 && b[i] != byte_at(offset + i as u64)) {
        Some(i) => Err(format!(
            "a read at {offset} returned a byte never sent at +{i}"
        )),
        None => Ok(()),
    }
}

/// The client's requests for one schedule: every command, some reads long enough to split.
async fn requests(c: &Client, rng: &mut StdRng) -> Vec<Verdict> {
    let mut work: Vec<futures::future::BoxFuture<'_, Verdict>> = Vec::new();
    for _ in 0..rng.gen_range(1..24) {
        let offset = rng.gen_range(0..EXPORT_BYTES / 512) * 512;
        let room = (EXPORT_BYTES - offset) / 512;
        let len = (rng.gen_range(1..=room.min(512)) * 512) as usize;
        let c = c.clone();
        work.push(match rng.gen_range(0..9) {
            0..=2 => Box::pin(async move {
                check_read(
                    offset,
                    len,
                    c.read(offset, len).await.map(|b| BytesMut::from(&b[..])),
                )
            }),
            3 => Box::pin(async move {
                check_read(
                    offset,
                    len,
                    c.read_into(offset, BytesMut::zeroed(len)).await,
                )
            }),
            4 => Box::pin(async move {
                let _ = c.write(offset, Bytes::from(vec![7u8; len])).await;
                Ok(())
            }),
            5 => Box::pin(async move {
                match c.block_status(offset, len as u64).await {
                    Ok(e) if e.is_empty() => Err("block status succeeded without extents".into()),
                    _ => Ok(()),
                }
            }),
            6 => Box::pin(async move {
                let _ = c.flush().await;
                Ok(())
            }),
            7 => Box::pin(async move {
                let _ = c.trim(offset, len as u64).await;
                let _ = c.cache(offset, len as u64).await;
                Ok(())
            }),
            _ => Box::pin(async move {
                let _ = c
                    .write_zeroes(offset, len as u64, ZeroFlags::default())
                    .await;
                Ok(())
            }),
        });
    }
    join_all(work).await
}

/// One schedule: the handshake, then a burst of requests; `Err` says what broke.
async fn schedule(seed: u64) -> Result<(), String> {
    let (ours, theirs) = tokio::io::duplex(64 << 10);
    let server = tokio::spawn(Hostile::new(seed).serve(theirs));
    let opts = ConnectOptions {
        negotiation: Negotiation::default(),
        tls: None,
    };
    let handshake = tokio::time::timeout(STUCK, Client::handshake(ours, "x", &opts)).await;
    let client = match handshake {
        Err(_) => return Err("the handshake never ended".into()),
        Ok(Err(_)) => return Ok(()),
        Ok(Ok(c)) => c,
    };
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let verdicts = tokio::time::timeout(STUCK, requests(&client, &mut rng))
        .await
        .map_err(|_| "a request never ended".to_string())?;
    verdicts.into_iter().collect::<Result<(), String>>()?;
    tokio::time::timeout(STUCK, client.disconnect())
        .await
        .map_err(|_| "the disconnect never ended".to_string())?;
    tokio::time::timeout(STUCK, server)
        .await
        .map_err(|_| "the server never hung up".to_string())?
        .map_err(|e| format!("server: {e}"))?;
    Ok(())
}

fn run(seed: u64) -> Result<(), String> {
    record_panics();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let out = rt.block_on(schedule(seed));
    drop(rt);
    let panics = std::mem::take(&mut *PANICS.lock().unwrap());
    if let Some(p) = panics.first() {
        return Err(format!("seed {seed}: a panic: {p}"));
    }
    out.map_err(|e| format!("seed {seed}: {e}"))
}

fn cases() -> ProptestConfig {
    let n = if std::env::var_os("NBRAID_SOAK").is_some() {
        20_000
    } else {
        300
    };
    ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(n)
    }
}

proptest! {
    #![proptest_config(cases())]
    #[test]
    fn whatever_the_server_sends_the_client_neither_panics_nor_hangs_nor_invents_data(seed in any::<u64>()) {
        if let Err(e) = run(seed) {
            prop_assert!(false, "{}", e);
        }
    }
}

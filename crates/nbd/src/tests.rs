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

// One module per concern; the client above and the shared exports serve them all.
mod concurrency;
mod exports;
mod fair_share;
mod fuzz;
mod handshake;
mod limits;
mod long_writes;
mod serving;
mod shutdown;
mod spare_worker;
mod transmission;

use exports::*;

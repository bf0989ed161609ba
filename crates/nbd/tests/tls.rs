//! NBD over TLS (`NBD_OPT_STARTTLS`, rustls): this crate's client, libnbd's `nbdinfo` and
//! `nbdcopy` (`nbds+unix://…&tls-certificates=DIR`) and `qemu-img` (a `tls-creds-x509` object)
//! against the server in required mode; client certificates; and the spec's TLS MUSTs, each a
//! test: options before STARTTLS refused with `NBD_REP_ERR_TLS_REQD` in required mode, no
//! downgrade (cleartext after the STARTTLS ACK is never served), state negotiated before
//! STARTTLS dropped, a second STARTTLS refused. Certificates are made at test time with
//! `openssl` (scripts/test installs it).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use bytes::Bytes;
use nbraid_nbd::client::{list_exports, Client, ClientError, ConnectOptions, Uri};
use nbraid_nbd::proto::*;
use nbraid_nbd::testing::make_test_certificates;
use nbraid_nbd::{ClientTls, Export, Listener, MemoryExport, Server, ServerTls, TlsMode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

const MIB: u64 = 1 << 20;

struct Fixture {
    server: Server,
    dir: tempfile::TempDir,
    sock: std::path::PathBuf,
    tcp: std::net::SocketAddr,
}

impl Fixture {
    fn certs(&self) -> std::path::PathBuf {
        self.dir.path().join("pki")
    }
    fn unix_uri(&self, tls: bool) -> String {
        let s = if tls { "nbds" } else { "nbd" };
        format!("{s}+unix:///e?socket={}", self.sock.display())
    }
}

async fn serve(mode: TlsMode, verify_clients: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    std::fs::create_dir(&pki).unwrap();
    make_test_certificates(&pki);
    let tls = ServerTls::from_dir(mode, &pki, verify_clients).unwrap();
    let mem: Arc<dyn Export> = Arc::new(MemoryExport::new(16 * MIB));
    let server = Server::new(vec![("e".into(), mem)]).unwrap();
    let sock = dir.path().join("s.sock");
    let unix = Listener::bind_unix(&sock).unwrap();
    let tcp = Listener::bind_tcp("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = tcp.tcp_addr().unwrap();
    for l in [unix, tcp] {
        let (s, t) = (server.clone(), tls.clone());
        tokio::spawn(async move { s.serve_with_tls(l, t).await });
    }
    Fixture {
        server,
        dir,
        sock,
        tcp: addr,
    }
}

fn tls_opts(dir: &Path) -> ConnectOptions {
    ConnectOptions {
        tls: Some(ClientTls::from_dir(dir).unwrap()),
        ..ConnectOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_tls_with_our_client_libnbd_and_qemu() {
    let fx = serve(TlsMode::Required, false).await;
    let pki = fx.certs();
    // Our client on Unix and TCP (the certificate names localhost and 127.0.0.1).
    for uri in [fx.unix_uri(true), format!("nbds://{}/e", fx.tcp)] {
        let c = Client::connect_with(&Uri::parse(&uri).unwrap(), &tls_opts(&pki))
            .await
            .unwrap();
        c.write(MIB, Bytes::from(vec![7u8; 65536])).await.unwrap();
        assert_eq!(c.read(MIB, 65536).await.unwrap(), vec![7u8; 65536]);
        c.disconnect().await;
    }
    // The same through the URI parameter libnbd uses.
    let uri = format!("{}&tls-certificates={}", fx.unix_uri(true), pki.display());
    let c = Client::connect(&uri).await.unwrap();
    assert_eq!(c.read(MIB, 4096).await.unwrap(), vec![7u8; 4096]);
    assert_eq!(list_exports(&uri).await.unwrap()[0].name, "e");

    let (uri2, pki2, dir) = (uri.clone(), pki.clone(), fx.dir.path().to_path_buf());
    let tcp = fx.tcp;
    tokio::task::spawn_blocking(move || {
        let out = Command::new("nbdinfo")
            .arg("--json")
            .arg(&uri2)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "nbdinfo: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("\"export-size\": 16777216"), "{text}");
        assert!(text.contains("\"TLS\": true"), "{text}");
        // nbdcopy in and out over TLS.
        let src = dir.join("in.bin");
        let data: Vec<u8> = (0..MIB as usize).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&src, &data).unwrap();
        let st = Command::new("nbdcopy")
            .arg(&src)
            .arg(&uri2)
            .status()
            .unwrap();
        assert!(st.success());
        let dst = dir.join("out.bin");
        let st = Command::new("nbdcopy")
            .arg(&uri2)
            .arg(&dst)
            .status()
            .unwrap();
        assert!(st.success());
        assert!(std::fs::read(&dst).unwrap()[..MIB as usize] == data[..]);
        // qemu-img with a tls-creds-x509 object.
        let out = Command::new("qemu-img")
            .arg("info")
            .arg("--object")
            .arg(format!(
                "tls-creds-x509,id=tls0,endpoint=client,dir={}",
                pki2.display()
            ))
            .arg("--image-opts")
            .arg(format!(
                "driver=nbd,server.type=inet,server.host=127.0.0.1,server.port={},export=e,tls-creds=tls0",
                tcp.port()
            ))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "qemu-img: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("16 MiB"), "{text}");
    })
    .await
    .unwrap();
    fx.server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_mode_refuses_every_option_before_starttls() {
    let fx = serve(TlsMode::Required, false).await;
    // GO, LIST: NBD_REP_ERR_TLS_REQD, which the client reports as such.
    let e = Client::connect(&fx.unix_uri(false)).await.unwrap_err();
    assert!(matches!(e, ClientError::TlsRequired), "{e}");
    let e = list_exports(&fx.unix_uri(false)).await.unwrap_err();
    assert!(matches!(e, ClientError::TlsRequired), "{e}");
    // Every other option too; EXPORT_NAME (which has no error reply) ends the connection.
    let mut s = tokio::net::UnixStream::connect(&fx.sock).await.unwrap();
    greet(&mut s).await;
    for opt in [
        OPT_STRUCTURED_REPLY,
        OPT_INFO,
        OPT_LIST_META_CONTEXT,
        OPT_SET_META_CONTEXT,
        42,
    ] {
        send_opt(&mut s, opt, &[]).await;
        assert_eq!(reply(&mut s).await, (opt, REP_ERR_TLS_REQD));
    }
    send_opt(&mut s, OPT_EXPORT_NAME, b"e").await;
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    assert!(
        rest.is_empty(),
        "the server answered EXPORT_NAME without TLS"
    );
    fx.server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_downgrade_cleartext_after_the_starttls_ack_is_never_served() {
    let fx = serve(TlsMode::Required, false).await;
    let mut s = tokio::net::UnixStream::connect(&fx.sock).await.unwrap();
    greet(&mut s).await;
    send_opt(&mut s, OPT_STARTTLS, &[]).await;
    assert_eq!(reply(&mut s).await, (OPT_STARTTLS, REP_ACK));
    // A client (or a man in the middle) carrying on in the clear gets nothing.
    send_opt(&mut s, OPT_GO, &go_data("e")).await;
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest).await;
    assert!(
        !rest
            .windows(8)
            .any(|w| w == OPTION_REPLY_MAGIC.to_be_bytes()),
        "an option was answered in the clear after STARTTLS"
    );
    fx.server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_before_starttls_is_dropped_and_starttls_twice_is_invalid() {
    let fx = serve(TlsMode::Optional, false).await;
    let mut s = tokio::net::UnixStream::connect(&fx.sock).await.unwrap();
    greet(&mut s).await;
    // Structured replies and base:allocation in the clear...
    send_opt(&mut s, OPT_STRUCTURED_REPLY, &[]).await;
    assert_eq!(reply(&mut s).await, (OPT_STRUCTURED_REPLY, REP_ACK));
    send_opt(&mut s, OPT_SET_META_CONTEXT, &meta_data("e")).await;
    assert_eq!(
        reply(&mut s).await,
        (OPT_SET_META_CONTEXT, REP_META_CONTEXT)
    );
    assert_eq!(reply(&mut s).await, (OPT_SET_META_CONTEXT, REP_ACK));
    send_opt(&mut s, OPT_STARTTLS, &[]).await;
    assert_eq!(reply(&mut s).await, (OPT_STARTTLS, REP_ACK));
    let tls = ClientTls::from_dir(&fx.certs()).unwrap();
    let mut t = tls.connect_raw("localhost", s).await.unwrap();
    send_opt(&mut t, OPT_STARTTLS, &[]).await;
    assert_eq!(reply(&mut t).await, (OPT_STARTTLS, REP_ERR_INVALID));
    send_opt(&mut t, OPT_GO, &go_data("e")).await;
    loop {
        let (_, typ) = reply(&mut t).await;
        if typ != REP_INFO {
            assert_eq!(typ, REP_ACK);
            break;
        }
    }
    // ...are gone over TLS: BLOCK_STATUS has no context, and replies are simple.
    let req = |typ, cookie| RequestHeader {
        flags: 0,
        typ,
        cookie,
        offset: 0,
        length: 4096,
    };
    t.write_all(&req(CMD_BLOCK_STATUS, 1).encode())
        .await
        .unwrap();
    t.write_all(&req(CMD_READ, 2).encode()).await.unwrap();
    let mut h = [0u8; 16];
    t.read_exact(&mut h).await.unwrap();
    assert_eq!(h[0..4], SIMPLE_REPLY_MAGIC.to_be_bytes());
    assert_eq!(
        h[4..8],
        EINVAL.to_be_bytes(),
        "block status without a context"
    );
    t.read_exact(&mut h).await.unwrap();
    assert_eq!(
        h[0..4],
        SIMPLE_REPLY_MAGIC.to_be_bytes(),
        "read reply not simple"
    );
    assert_eq!(h[4..8], 0u32.to_be_bytes());
    // Optional mode serves cleartext clients too.
    let c = Client::connect(&fx.unix_uri(false)).await.unwrap();
    assert_eq!(c.size(), 16 * MIB);
    fx.server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_when_asked_and_starttls_where_tls_is_off() {
    let fx = serve(TlsMode::Required, true).await;
    let pki = fx.certs();
    let c = Client::connect_with(&Uri::parse(&fx.unix_uri(true)).unwrap(), &tls_opts(&pki))
        .await
        .unwrap();
    assert_eq!(c.size(), 16 * MIB);
    // Without a client certificate the handshake fails.
    let anon = fx.dir.path().join("anon");
    std::fs::create_dir(&anon).unwrap();
    std::fs::copy(pki.join("ca-cert.pem"), anon.join("ca-cert.pem")).unwrap();
    let r = Client::connect_with(&Uri::parse(&fx.unix_uri(true)).unwrap(), &tls_opts(&anon)).await;
    assert!(r.is_err(), "served a client without a certificate");
    fx.server.shutdown().await.unwrap();

    let off = serve(TlsMode::Off, false).await;
    let e = Client::connect_with(&Uri::parse(&off.unix_uri(true)).unwrap(), &tls_opts(&pki))
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::OptionRefused {
                reply: REP_ERR_UNSUP,
                ..
            }
        ),
        "{e}"
    );
    off.server.shutdown().await.unwrap();
}

// ------------------------------------------------------------------ raw protocol helpers

async fn greet<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) {
    let mut g = [0u8; 18];
    s.read_exact(&mut g).await.unwrap();
    assert_eq!(g[0..8], NBDMAGIC.to_be_bytes());
    s.write_u32(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
        .await
        .unwrap();
}

async fn send_opt<S: AsyncWrite + Unpin>(s: &mut S, opt: u32, data: &[u8]) {
    let mut v = IHAVEOPT.to_be_bytes().to_vec();
    v.extend_from_slice(&opt.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    s.write_all(&v).await.unwrap();
    s.flush().await.unwrap();
}

/// (option, reply type) of the next option reply; its data is skipped.
async fn reply<S: AsyncRead + Unpin>(s: &mut S) -> (u32, u32) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).await.unwrap();
    assert_eq!(h[0..8], OPTION_REPLY_MAGIC.to_be_bytes());
    let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
    let mut d = vec![0u8; len as usize];
    s.read_exact(&mut d).await.unwrap();
    (
        u32::from_be_bytes(h[8..12].try_into().unwrap()),
        u32::from_be_bytes(h[12..16].try_into().unwrap()),
    )
}

fn go_data(name: &str) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&1u16.to_be_bytes());
    d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    d
}

fn meta_data(name: &str) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&1u32.to_be_bytes());
    d.extend_from_slice(&(META_BASE_ALLOCATION.len() as u32).to_be_bytes());
    d.extend_from_slice(META_BASE_ALLOCATION.as_bytes());
    d
}

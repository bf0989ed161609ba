//! Random byte streams and request sequences thrown at the server (proptest): it never
//! panics, answers or closes, and keeps serving other clients.

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

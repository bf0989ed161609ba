//! An NBD client that keeps writing and reading a volume while something else happens to it
//! (a reshape, a grow), every read checked against a model of the volume's bytes; and the
//! size a new connection sees.

use super::{ok, seeded_bytes};
use bytes::Bytes;
use nbraid_nbd::client::Client;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

/// Writes 64 KiB pieces at seeded 4 KiB-aligned places of `[0, len)` and reads others back
/// until `stop` (at least one round); every read is checked against `model` (the volume's
/// bytes, kept in step with every acknowledged write). Returns the rounds run.
pub fn client(
    uri: String,
    model: Arc<Mutex<Vec<u8>>>,
    len: u64,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    const PIECE: u64 = 64 << 10;
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let c = Client::connect(&uri).await.expect("connect");
            let mut rounds = 0u64;
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            while !stop.load(SeqCst) || rounds == 0 {
                let at = next() % ((len - PIECE) / 4096) * 4096;
                let bytes = seeded_bytes(next() | 1, PIECE);
                c.write(at, Bytes::from(bytes.clone()))
                    .await
                    .expect("write");
                model.lock().unwrap()[at as usize..(at + PIECE) as usize].copy_from_slice(&bytes);
                let from = next() % ((len - PIECE) / 4096) * 4096;
                let got = c.read(from, PIECE as usize).await.expect("read");
                let want = model.lock().unwrap()[from as usize..(from + PIECE) as usize].to_vec();
                assert!(
                    got[..] == want[..],
                    "read at {from} differs from what was written"
                );
                rounds += 1;
            }
            c.flush().await.expect("flush");
            rounds
        })
    })
}

/// The size a new NBD connection sees, by nbdinfo.
pub fn size_seen(nbdinfo: &Path, uri: &str) -> u64 {
    let out = ok(
        Command::new(nbdinfo)
            .arg("--size")
            .arg(uri)
            .output()
            .unwrap(),
        "nbdinfo --size",
    );
    out.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{out:?}: {e}"))
}

//! A listener with TLS required refuses every option before `NBD_OPT_STARTTLS` with
//! `NBD_REP_ERR_TLS_REQD`, the spec's MUST, whatever the option's length: one longer than
//! the server reads into memory (64 KiB) was answered `NBD_REP_ERR_TOO_BIG` instead, telling
//! a client in the clear something other than "TLS first".

mod common;

use common::{test_certificates, tls_jbod_config, Daemon};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const OPT_LIST: u32 = 3;
const OPT_INFO: u32 = 6;
const REP_ERR_TLS_REQD: u32 = 0x8000_0005;

fn send_option(s: &mut UnixStream, opt: u32, data: &[u8]) {
    let mut m = IHAVEOPT.to_be_bytes().to_vec();
    m.extend_from_slice(&opt.to_be_bytes());
    m.extend_from_slice(&(data.len() as u32).to_be_bytes());
    m.extend_from_slice(data);
    s.write_all(&m).unwrap();
}

/// The next option reply: its option and its type (its data read and dropped).
fn reply(s: &mut UnixStream) -> (u32, u32) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).unwrap();
    let word = |i: usize| u32::from_be_bytes(h[i..i + 4].try_into().unwrap());
    assert_eq!(u64::from_be_bytes(h[..8].try_into().unwrap()), REPLY_MAGIC);
    let mut data = vec![0u8; word(16) as usize];
    s.read_exact(&mut data).unwrap();
    (word(8), word(12))
}

#[test]
fn every_option_before_starttls_is_refused_as_tls_required_however_long() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    test_certificates(d, "pki");
    let cfg = tls_jbod_config(d);
    let mut daemon = Daemon::start(&cfg);
    let mut s = UnixStream::connect(d.join("nbd.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting).unwrap();
    // Fixed newstyle, no zeroes.
    s.write_all(&3u32.to_be_bytes()).unwrap();

    send_option(&mut s, OPT_LIST, &[]);
    assert_eq!(reply(&mut s), (OPT_LIST, REP_ERR_TLS_REQD));
    // An INFO longer than the server reads: discarded, and refused the same way.
    let mut long = 1u32.to_be_bytes().to_vec();
    long.extend_from_slice(b"v");
    long.resize(70_000, 0);
    send_option(&mut s, OPT_INFO, &long);
    assert_eq!(reply(&mut s), (OPT_INFO, REP_ERR_TLS_REQD));
    // The connection goes on in step.
    send_option(&mut s, OPT_LIST, &[]);
    assert_eq!(reply(&mut s), (OPT_LIST, REP_ERR_TLS_REQD));
    drop(s);
    daemon.stop();
}

//! A remote member (`nbds+unix://`) whose server comes back presenting a certificate our CA
//! did not sign is not used, and `status` says why: before, it said only the old failure
//! ("stopped answering") and "re-added by itself once it answers", while the server did
//! answer and every TLS handshake with it failed — and after the first three attempts the log
//! said nothing either for minutes. Once the server presents its own certificate again, the
//! member is re-added, and every byte written while it was away reads back from it alone.
//! The refusal is an event too (`member-unreachable`, once, naming the member and the TLS
//! reason): before, the only event said "remote member m1 is not answering".

mod common;

use common::{
    fill, nbraid, ok, prefix_reads_back, require, serve, test_certificates, wait_until, Kit, MIB,
};
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// The `member-unreachable` events said so far that tell a TLS refusal.
fn tls_refusal_events(cfg: &str) -> Vec<Value> {
    let events = ok(nbraid(&["events", "--json", "--config", cfg]), "events");
    (events.lines())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "member-unreachable")
        .filter(|e| {
            let detail = e["detail"].as_str().unwrap_or_default();
            detail.contains("answers again but is not used") && detail.contains("TLS")
        })
        .collect()
}

/// nbdkit serving `file` on `sock` with TLS required, its certificates from `pki`.
fn tls_kit(sock: &Path, file: &Path, pki: &Path) -> Kit {
    let certs = format!("--tls-certificates={}", pki.display());
    Kit::serve_with(sock, file, &["--tls=require", &certs], &[])
}

#[test]
fn a_remote_server_whose_certificate_is_refused_is_named_in_status() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (ours, other) = (
        test_certificates(d, "pki"),
        test_certificates(d, "other-pki"),
    );
    let (local, remote, sock) = (d.join("m0.img"), d.join("m1.img"), d.join("m1.sock"));
    for f in [&local, &remote] {
        std::fs::File::create(f).unwrap().set_len(40 * MIB).unwrap();
    }
    let cfg = d.join("arrays.toml");
    std::fs::write(
        &cfg,
        format!(
            "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n\
             [[member]]\nid = \"m0\"\npath = \"{}\"\nsize = \"40MiB\"\n\n\
             [[member]]\nid = \"m1\"\npath = \"nbds+unix:///?socket={}&tls-certificates={}\"\n\
             size = \"40MiB\"\ntimeout = \"2s\"\n\n\
             [[volume]]\nname = \"v\"\nlevel = \"raid1\"\nmembers = [\"m0\", \"m1\"]\n",
            local.display(),
            sock.display(),
            ours.display()
        ),
    )
    .unwrap();
    let c = cfg.to_str().unwrap();
    let nbdcopy = require("nbdcopy");
    let kit = tls_kit(&sock, &remote, &ours);
    let (mut daemon, uri) = serve(&cfg, "v");
    fill(&nbdcopy, d, &uri, 3);

    // The server comes back with another CA's certificate: it answers, and every handshake
    // fails on our side.
    drop(kit);
    let kit = tls_kit(&sock, &remote, &other);
    let data = fill(&nbdcopy, d, &uri, 4);
    let v = wait_until(c, "v", "the refusal said", |v| {
        v["members"][1]["failure"]["refused_now"].is_string()
    });
    let refused = v["members"][1]["failure"]["refused_now"].as_str().unwrap();
    assert!(refused.contains("certificate"), "{refused}");
    assert_eq!(v["state"], "degraded", "{v:#}");
    let text = ok(nbraid(&["status", "v", "--config", c]), "status");
    assert!(
        text.contains("its server answers again but is not used") && text.contains("certificate"),
        "{text}"
    );
    prefix_reads_back(&nbdcopy, d, &uri, &data);
    let deadline = Instant::now() + Duration::from_secs(10);
    let told = loop {
        let told = tls_refusal_events(c);
        if !told.is_empty() || Instant::now() > deadline {
            break told;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(told.len(), 1, "the refusal told once: {told:#?}");
    assert_eq!(told[0]["member"], "m1", "{told:?}");
    assert!(
        told[0]["detail"].as_str().unwrap().contains("certificate"),
        "{told:?}"
    );

    // Its own certificate again: re-added, the refusal gone, and the remote copy alone
    // holds every byte written while it was away.
    drop(kit);
    let _kit = tls_kit(&sock, &remote, &ours);
    let v = wait_until(c, "v", "the member back", |v| v["state"] == "healthy");
    assert!(v["members"][1]["failure"].is_null(), "{v:#}");
    ok(nbraid(&["fail", "v", "m0", "--config", c]), "fail m0");
    prefix_reads_back(&nbdcopy, d, &uri, &data);
    daemon.stop();
}

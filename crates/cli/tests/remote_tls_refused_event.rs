//! A remote member whose server comes back presenting a certificate our CA did not sign: the
//! refusal is an event (and a log line) once it is known, naming the member and the TLS
//! reason. Before, the only event said "remote member m1 is not answering" while status said
//! "its server answers again but is not used: TLS: ...".

mod common;

use common::{fill, nbraid, ok, require, serve, wait_until, Kit, MIB};
use nbraid_nbd::testing::make_test_certificates;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

/// nbdkit serving `file` on `sock` with TLS required, its certificates from `pki`.
fn tls_kit(sock: &Path, file: &Path, pki: &Path) -> Kit {
    let certs = format!("--tls-certificates={}", pki.display());
    Kit::serve_with(sock, file, &["--tls=require", &certs], &[])
}

/// The `member-unreachable` events said so far.
fn unreachable_events(cfg: &str) -> Vec<Value> {
    let events = ok(nbraid(&["events", "--json", "--config", cfg]), "events");
    (events.lines())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "member-unreachable")
        .collect()
}

#[test]
fn a_remote_server_whose_certificate_is_refused_is_an_event() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (ours, other) = (d.join("pki"), d.join("other-pki"));
    for pki in [&ours, &other] {
        std::fs::create_dir(pki).unwrap();
        make_test_certificates(pki);
    }
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

    // Back with another CA's certificate: it answers, and every handshake fails.
    drop(kit);
    let _kit = tls_kit(&sock, &remote, &other);
    fill(&nbdcopy, d, &uri, 4);
    wait_until(c, "v", "the refusal said", |v| {
        v["members"][1]["failure"]["refused_now"].is_string()
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let told = loop {
        let told: Vec<Value> = (unreachable_events(c).into_iter())
            .filter(|e| {
                let detail = e["detail"].as_str().unwrap_or_default();
                detail.contains("answers again but is not used") && detail.contains("TLS")
            })
            .collect();
        if !told.is_empty() || Instant::now() > deadline {
            break told;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let all = unreachable_events(c);
    assert_eq!(told.len(), 1, "the refusal told once: {all:#?}");
    assert_eq!(told[0]["member"], "m1", "{told:?}");
    assert!(
        told[0]["detail"].as_str().unwrap().contains("certificate"),
        "{told:?}"
    );
    daemon.stop();
}

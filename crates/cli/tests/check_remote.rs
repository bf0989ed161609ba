//! `nbraid check` on a config with remote members: each member's server is asked once and
//! the export described (URI, reachable, size, block sizes), or why it cannot be reached;
//! a volume the start would refuse for it fails the check.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// nbdkit serving a 40 MiB memory export on `sock`, with `filter` args before the plugin,
/// once it accepts connections.
fn nbdkit(sock: &Path, filter: &[&str], plugin_args: &[&str]) -> Child {
    let kit = Command::new("nbdkit")
        .args(["--foreground", "--exit-with-parent", "--unix"])
        .arg(sock)
        .args(filter)
        .args(["memory", "40M"])
        .args(plugin_args)
        .stdin(Stdio::null())
        .spawn()
        .expect("nbdkit is required (apt-get install nbdkit; scripts/test installs it)");
    let deadline = Instant::now() + Duration::from_secs(20);
    // The socket file appears at bind(), before listen(): wait until a connect succeeds.
    while std::os::unix::net::UnixStream::connect(sock).is_err() {
        assert!(Instant::now() < deadline, "nbdkit did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    kit
}

#[test]
fn check_describes_remote_members() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kit.sock");
    let mut kit = nbdkit(&sock, &[], &[]);
    let gone = dir.path().join("nobody.sock");
    let config = dir.path().join("arrays.toml");
    std::fs::write(
        &config,
        format!(
            "[[member]]\nid = \"up\"\npath = \"nbd+unix:///?socket={}\"\nsize = \"33MiB\"\n\n\
             [[member]]\nid = \"down\"\npath = \"nbd+unix:///?socket={}\"\nsize = \"33MiB\"\n\n\
             [[volume]]\nname = \"m\"\nlevel = \"raid1\"\nmembers = [\"up\", \"down\"]\n",
            sock.display(),
            gone.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nbraid"))
        .arg("check")
        .arg(&config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // A new volume with a member whose server does not answer: the start refuses it (what
    // that member holds is unknown), and so does the check, saying which and why.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}{err}");
    assert!(err.contains("nbraidd would refuse to start"), "{text}{err}");
    assert!(
        text.contains("  m: refused: volume `m`: member down (")
            && text.contains("note: remote member down (")
            && text.contains("is UNREACHABLE now"),
        "{text}"
    );
    let remote = &text[text.find("REMOTE").expect("a table of remote members")..];
    let up = remote
        .lines()
        .find(|l| l.starts_with("up "))
        .expect("a row for up");
    assert!(
        up.contains("yes") && up.contains("40 MiB") && up.contains("1/4096/"),
        "{text}"
    );
    let down = remote
        .lines()
        .find(|l| l.starts_with("down "))
        .expect("a row for down");
    assert!(
        down.contains("NO:") && down.contains("nobody.sock"),
        "{text}"
    );

    let json = Command::new(env!("CARGO_BIN_EXE_nbraid"))
        .args(["check", "--json"])
        .arg(&config)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let remote = v["remote_members"].as_array().unwrap();
    assert_eq!(remote[0]["reachable"], true);
    assert_eq!(remote[0]["size_bytes"], 40 << 20);
    assert_eq!(remote[1]["reachable"], false);
    let _ = kit.kill();
    let _ = kit.wait();
}

/// A remote member a volume uses is connected to once by `check` (the connection its
/// superblock is read on also describes its server, and the extra connections of a
/// multi-conn server are not opened); one no volume uses, once by a probe.
#[test]
fn check_connects_once_to_each_remote_member() {
    let dir = tempfile::tempdir().unwrap();
    let (used, free) = (dir.path().join("used.sock"), dir.path().join("free.sock"));
    let (used_log, free_log) = (dir.path().join("used.log"), dir.path().join("free.log"));
    let logged = |log: &Path| format!("logfile={}", log.display());
    let mut kits = [
        nbdkit(&used, &["--filter=log"], &[&logged(&used_log)]),
        nbdkit(&free, &["--filter=log"], &[&logged(&free_log)]),
    ];
    // nbdkit's log filter writes one "Preconnect" line per connection accepted, the one
    // that found nbdkit ready included: count from there.
    let connections = |log: &Path| {
        let log = std::fs::read_to_string(log).unwrap_or_default();
        log.lines()
            .filter(|l| l.contains(" Preconnect id="))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while connections(&used_log) < 1 || connections(&free_log) < 1 {
        assert!(Instant::now() < deadline, "nbdkit logged no connection");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = [connections(&used_log), connections(&free_log)];
    let config = dir.path().join("arrays.toml");
    std::fs::write(
        &config,
        format!(
            "[[member]]\nid = \"used\"\npath = \"nbd+unix:///?socket={}\"\nsize = \"33MiB\"\n\n\
             [[member]]\nid = \"free\"\npath = \"nbd+unix:///?socket={}\"\nsize = \"33MiB\"\n\n\
             [[member]]\nid = \"ram\"\npath = \"memory:\"\nsize = \"33MiB\"\n\n\
             [[volume]]\nname = \"m\"\nlevel = \"raid1\"\nmembers = [\"used\", \"ram\"]\n",
            used.display(),
            free.display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nbraid"))
        .arg("check")
        .arg(&config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}{err}");
    let remote = &text[text.find("REMOTE").expect("a table of remote members")..];
    for id in ["used ", "free "] {
        let row = remote.lines().find(|l| l.starts_with(id)).expect("a row");
        assert!(row.contains("yes") && row.contains("40 MiB"), "{text}");
    }
    for kit in kits.iter_mut() {
        let _ = kit.kill();
        let _ = kit.wait();
    }
    assert_eq!(connections(&used_log) - before[0], 1, "used: {text}");
    assert_eq!(connections(&free_log) - before[1], 1, "free: {text}");
}

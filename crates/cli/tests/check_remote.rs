//! `nbraid check` on a config with remote members: each member's server is asked once and
//! the export described (URI, reachable, size, block sizes), or why it cannot be reached;
//! a volume the start would refuse for it fails the check.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn check_describes_remote_members() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kit.sock");
    let mut kit = Command::new("nbdkit")
        .args(["--foreground", "--exit-with-parent", "--unix"])
        .arg(&sock)
        .args(["memory", "40M"])
        .stdin(Stdio::null())
        .spawn()
        .expect("nbdkit is required (apt-get install nbdkit; scripts/test installs it)");
    let deadline = Instant::now() + Duration::from_secs(20);
    // The socket file appears at bind(), before listen(): wait until a connect succeeds.
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        assert!(Instant::now() < deadline, "nbdkit did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
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

//! `nbraid check` and `nbraidd --check` read the superblocks of members on NBD servers
//! through NBD, as the start does, and fail or warn as the start would: both exited 0 on
//! remote members the start then refused (another array's export) or went without (a blank
//! export where the records put a member, an export too small, a server that does not
//! answer). Members are files served by `nbdkit file`, or a socket nobody listens on.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `nbdkit file FILE` on a Unix socket beside it, stopped when dropped.
struct Kit {
    child: Child,
    uri: String,
}

impl Kit {
    fn serve(file: &Path) -> Kit {
        let sock = file.with_extension("sock");
        let child = Command::new("nbdkit")
            .args(["--foreground", "--exit-with-parent", "--unix"])
            .arg(&sock)
            .arg("file")
            .arg(file)
            .stdin(Stdio::null())
            .spawn()
            .expect("nbdkit is required (apt-get install nbdkit; scripts/test installs it)");
        let deadline = Instant::now() + Duration::from_secs(20);
        // The socket file appears at bind(), before listen(): wait until a connect succeeds.
        while std::os::unix::net::UnixStream::connect(&sock).is_err() {
            assert!(Instant::now() < deadline, "nbdkit did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Kit {
            child,
            uri: unix_uri(&sock),
        }
    }
}

impl Drop for Kit {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unix_uri(sock: &Path) -> String {
    format!("nbd+unix:///?socket={}", sock.display())
}

/// A zero-filled (sparse) file of `len_bytes`.
fn zeroes(dir: &Path, name: &str, len_bytes: u64) -> PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p)
        .unwrap()
        .set_len(len_bytes)
        .unwrap();
    p
}

/// A config of RAID 1 volume `volume` over member `l0` (file `local`) and member `r` at
/// `r_path` (a file or an NBD URI), 33 MiB each.
fn config(dir: &Path, name: &str, volume: &str, local: &str, r_path: &str) -> PathBuf {
    let file = dir.join(name);
    std::fs::write(
        &file,
        format!(
            "[[member]]\nid = \"l0\"\npath = \"{local}\"\nsize = \"33MiB\"\n\n\
             [[member]]\nid = \"r\"\npath = \"{r_path}\"\nsize = \"33MiB\"\n\n\
             [[volume]]\nname = \"{volume}\"\nlevel = \"raid1\"\nmembers = [\"l0\", \"r\"]\n"
        ),
    )
    .unwrap();
    file
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn daemon_check(file: &Path) -> Output {
    let nbraidd = nbraidd_path();
    assert!(nbraidd.is_file(), "run `cargo build --bin nbraidd`");
    Command::new(nbraidd)
        .arg("--check")
        .arg("--config")
        .arg(file)
        .output()
        .unwrap()
}

/// Volume `v` created on two files, then checked with its second member served over NBD:
/// the file itself, a blank export, an export too small, and a server that does not answer.
#[test]
fn a_check_reads_a_remote_members_superblock_as_the_start_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let files = config(d, "files.toml", "v", "l0.img", "r.img");
    ok(nbraid(&["create", files.to_str().unwrap()]), "create");

    // The member's own file over NBD: its superblock is read there, the volume is healthy.
    let kit = Kit::serve(&d.join("r.img"));
    let same = config(d, "remote.toml", "v", "l0.img", &kit.uri);
    let out = ok(nbraid(&["check", same.to_str().unwrap()]), "check (served)");
    assert!(out.contains("  v: healthy"), "{out}");
    drop(kit);

    // A blank export where the records put member r: the start serves v degraded.
    let kit = Kit::serve(&zeroes(d, "blank.img", 33 * MIB));
    let blank = config(d, "blank.toml", "v", "l0.img", &kit.uri);
    let out = ok(nbraid(&["check", blank.to_str().unwrap()]), "check (blank)");
    assert!(
        out.contains("  v: degraded: role 1 lost") && out.contains(&kit.uri),
        "{out}"
    );
    let o = daemon_check(&blank);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("warning: volume v: a start now serves it degraded"),
        "{}",
        text(&o)
    );
    drop(kit);

    // An export too small for r: the start goes without it (unusable, not unreachable: its
    // server answers), degraded; both sizes said.
    let kit = Kit::serve(&zeroes(d, "small.img", 8 * MIB));
    let small = config(d, "small.toml", "v", "l0.img", &kit.uri);
    let out = ok(nbraid(&["check", small.to_str().unwrap()]), "check (small)");
    assert!(
        out.contains("  v: degraded: role 1 unusable")
            && out.contains("the export is too small: 8 MiB (8388608 bytes), but the member needs")
            && out.contains("remote member r (")
            && out.contains("is UNUSABLE now")
            && out.contains("serves the volume degraded without it"),
        "{out}"
    );
    drop(kit);

    // A server that does not answer: said, and what the start does then.
    let gone = unix_uri(&d.join("nobody.sock"));
    let down = config(d, "down.toml", "v", "l0.img", &gone);
    let out = ok(nbraid(&["check", down.to_str().unwrap()]), "check (down)");
    assert!(
        out.contains(&format!("remote member r ({gone}) is UNREACHABLE now"))
            && out.contains("serves the volume degraded without it"),
        "{out}"
    );
    let o = daemon_check(&down);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("is UNREACHABLE now") && text(&o).contains("role 1 unreachable"),
        "{}",
        text(&o)
    );
}

/// A new volume whose remote member's export holds another array's superblock: the start
/// refuses it (never overwritten), and so do both checks, naming volume, member and URI.
#[test]
fn a_check_fails_on_a_remote_export_of_another_array() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let files = config(d, "files.toml", "v", "l0.img", "r.img");
    ok(nbraid(&["create", files.to_str().unwrap()]), "create");

    let kit = Kit::serve(&d.join("r.img"));
    let other = config(d, "other.toml", "w", "n0.img", &kit.uri);
    let o = nbraid(&["check", other.to_str().unwrap()]);
    assert!(!o.status.success(), "{}", text(&o));
    let said = text(&o);
    assert!(
        said.contains("  w: refused: volume `w`: member r (")
            && said.contains(&kit.uri)
            && said.contains("nbraidd would refuse to start"),
        "{said}"
    );
    let o = daemon_check(&other);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("a start would fail: volume `w`: member r (")
            && text(&o).contains(&kit.uri),
        "{}",
        text(&o)
    );
    assert!(!d.join("n0.img").exists(), "a check creates nothing");
}

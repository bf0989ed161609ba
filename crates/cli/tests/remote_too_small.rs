//! A remote member whose server answers with an export too small is said to be what it is —
//! unusable, with its size against the size needed — by the start, `nbraidd --check` and
//! `nbraid check`, also when it takes the volume past its tolerance; they said "unreachable
//! (their servers did not answer)". Exports are files served by `nbdkit file`.

mod common;

use common::*;
use std::path::{Path, PathBuf};

/// RAID 5 `v` over `l0.img`, `l1.img` and the member `r` at `r_path`, 32 MiB each.
fn config(dir: &Path, r_path: &str) -> PathBuf {
    let text = format!(
        "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\
         [[member]]\nid = \"l0\"\npath = \"l0.img\"\nsize = \"32MiB\"\n\
         [[member]]\nid = \"l1\"\npath = \"l1.img\"\nsize = \"32MiB\"\n\
         [[member]]\nid = \"r\"\npath = \"{r_path}\"\nsize = \"32MiB\"\n\
         [[volume]]\nname = \"v\"\nlevel = \"raid5\"\nmembers = [\"l0\", \"l1\", \"r\"]\nchecksums = \"off\"\n"
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

#[test]
fn an_export_too_small_past_tolerance_is_said_unusable_with_both_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = config(d, "r.img");
    let cfg = file.to_str().unwrap();
    ok(nbraid(&["create", cfg]), "create");
    // l1 gone, r served from an 8 MiB export: l0 alone, past RAID 5's one loss.
    std::fs::remove_file(d.join("l1.img")).unwrap();
    let small = d.join("small.img");
    std::fs::File::create(&small)
        .unwrap()
        .set_len(8 * MIB)
        .unwrap();
    let sock = d.join("small.sock");
    let mut kit = nbdkit_export(&sock, &["file".as_ref(), small.as_os_str()]);
    config(d, &format!("nbd+unix:///?socket={}", sock.display()));

    let sizes = "the export is too small: 8 MiB (8388608 bytes), but the member needs 32 MiB";
    let said = start_refused(&file);
    assert!(said.contains("not used (their servers did not answer, or answered with an export they cannot use): r ("), "{said}");
    assert!(said.contains(sizes), "{said}");
    assert!(!said.contains("did not answer): "), "{said}");
    let checked = std::process::Command::new(nbraidd_path())
        .args(["--check", "--config", cfg])
        .output()
        .unwrap();
    let checked = String::from_utf8_lossy(&checked.stderr).to_string();
    assert!(
        checked.contains(sizes) && checked.contains("answered with an export they cannot use"),
        "{checked}"
    );
    let looked = nbraid(&["check", cfg]);
    let looked = String::from_utf8_lossy(&looked.stdout).to_string();
    assert!(
        looked.contains(sizes) && !looked.contains(": unreachable:"),
        "{looked}"
    );
    let _ = kit.kill();
    let _ = kit.wait();
}

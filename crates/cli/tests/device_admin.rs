//! The admin commands on block-device members tell the truth: `check` finds what a start
//! would refuse, advice fits a device, and status names a reloaded device spare's role as a
//! start would (loop devices over files, `mknod`; the tests run as root, as CI does).

mod common;

use common::loops::Loop;
use common::{nbraid, nbraidd_path};
use std::path::Path;
use std::process::{Command, Output};

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A second device node (`mknod`) for `dev`'s block device, at `at`.
fn alias_of(dev: &Path, at: &Path) {
    use std::os::unix::fs::MetadataExt;
    let rdev = std::fs::metadata(dev).unwrap().rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let o = Command::new("mknod")
        .arg(at)
        .args(["b", &major.to_string(), &minor.to_string()])
        .output()
        .unwrap();
    assert!(o.status.success(), "mknod: {}", text(&o));
}

fn mirror_of(dir: &Path, paths: &[&str]) -> std::path::PathBuf {
    let mut toml = format!(
        "[daemon]\nlisten = [\"unix:{}\"]\n\n",
        dir.join("nbd.sock").display()
    );
    for (i, p) in paths.iter().enumerate() {
        toml += &format!("[[member]]\nid = \"d{i}\"\npath = \"{p}\"\n\n");
    }
    let ids: Vec<String> = (0..paths.len()).map(|i| format!("\"d{i}\"")).collect();
    toml += &format!(
        "[[volume]]\nname = \"v\"\nlevel = \"raid1\"\nmembers = [{}]\n",
        ids.join(", ")
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, toml).unwrap();
    file
}

/// Two members naming one device through two device nodes: `nbraid check` and
/// `nbraidd --check` passed the config, and only the start refused it ("in use" by another
/// process, naming no member). Now all three refuse it with one message naming both
/// members and the device's number.
#[test]
fn one_device_under_two_nodes_is_refused_by_check_and_start_alike() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Loop::attach(&dir.path().join("a.img"), 48 << 20);
    let alias = dir.path().join("alias");
    alias_of(&dev.path, &alias);
    let cfg = mirror_of(dir.path(), &[dev.path(), alias.to_str().unwrap()]);
    let rdev = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&dev.path).unwrap().rdev()
    };
    let number = format!("block device {}:{}", libc::major(rdev), libc::minor(rdev));
    let cfg_s = cfg.to_str().unwrap();
    let check = nbraid(&["check", cfg_s]);
    let daemon_check = Command::new(nbraidd_path())
        .args(["--config", cfg_s, "--check"])
        .output()
        .unwrap();
    let start = Command::new(nbraidd_path())
        .args(["--config", cfg_s])
        .output()
        .unwrap();
    for (what, o) in [
        ("nbraid check", &check),
        ("nbraidd --check", &daemon_check),
        ("nbraidd", &start),
    ] {
        let said = text(o);
        assert!(!o.status.success(), "{what} accepted it: {said}");
        let expected = format!(
            "member \"d1\": path \"{}\" is already used by member \"d0\"",
            alias.display()
        );
        assert!(said.contains(&expected), "{what}: {said}");
        assert!(said.contains(&number), "{what} names {number}: {said}");
        assert!(said.contains(dev.path()), "{what}: {said}");
    }
    assert!(dev.is_free(), "nothing holds the device after the refusals");
}

/// A device smaller than its member's `size` was told to grow with `truncate -s ...
/// /dev/loopN`, which fails on a device (and would be wrong advice if it did anything). A
/// device is the size it is: lower `size`, or use a larger device.
#[test]
fn a_device_smaller_than_its_size_gets_advice_for_a_device() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Loop::attach(&dir.path().join("a.img"), 48 << 20);
    let file = dir.path().join("b.img");
    std::fs::File::create(&file).unwrap();
    let cfg = mirror_of(dir.path(), &[dev.path(), file.to_str().unwrap()]);
    let toml = std::fs::read_to_string(&cfg).unwrap();
    let sized = toml.replace(
        &format!("path = \"{}\"\n", dev.path()),
        &format!("path = \"{}\"\nsize = \"64MiB\"\n", dev.path()),
    );
    std::fs::write(&cfg, sized).unwrap();
    let o = nbraid(&["check", cfg.to_str().unwrap()]);
    let said = text(&o);
    assert!(!o.status.success(), "{said}");
    assert!(said.contains("holds only 48 MiB"), "{said}");
    assert!(!said.contains("truncate"), "no file advice for a device: {said}");
    assert!(
        said.contains("lower size to at most \"48MiB\"") && said.contains("use a larger device"),
        "{said}"
    );
}

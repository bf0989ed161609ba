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
    assert!(
        !said.contains("truncate"),
        "no file advice for a device: {said}"
    );
    assert!(
        said.contains("lower size to at most \"48MiB\"") && said.contains("use a larger device"),
        "{said}"
    );
}

/// `nbraid create` refused a member holding data or another array's records with no way
/// past it but wiping by hand; `--force` is now the operator's word, as for `nbraid add
/// --force`: the members are written over and the other array's records taken off (that
/// array finds its member gone instead of assembling over the new volume's bytes).
#[test]
fn create_force_writes_over_another_arrays_device_and_data() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Loop::attach(&dir.path().join("a.img"), 48 << 20);
    let (old_dir, new_dir) = (dir.path().join("old"), dir.path().join("new"));
    for d in [&old_dir, &new_dir] {
        std::fs::create_dir(d).unwrap();
        std::fs::File::create(d.join("f.img"))
            .and_then(|f| f.set_len(48 << 20))
            .unwrap();
    }
    let old = mirror_of(&old_dir, &[dev.path(), "f.img"]);
    let new = mirror_of(&new_dir, &[dev.path(), "f.img"]);
    let toml = std::fs::read_to_string(&new).unwrap();
    std::fs::write(&new, toml.replace("name = \"v\"", "name = \"w\"")).unwrap();
    // The new config's file holds data where the superblock goes.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(new_dir.join("f.img"));
        f.unwrap().write_all_at(&[0xee; 4096], 8192).unwrap();
    }
    let (old, new) = (old.to_str().unwrap(), new.to_str().unwrap());
    common::ok(nbraid(&["create", old]), "create the old array");

    let o = nbraid(&["create", new]);
    let said = text(&o);
    assert!(!o.status.success(), "{said}");
    assert!(said.contains("belongs to another array"), "{said}");
    assert!(
        said.contains(&format!("nbraid create {new} --volume w --force")),
        "the way out is named: {said}"
    );

    let o = nbraid(&["create", new, "--force"]);
    let said = text(&o);
    assert!(o.status.success(), "{said}");
    assert!(said.contains("volume w: created array"), "{said}");
    assert!(said.contains("taken off as forced"), "{said}");
    // The device carries only the new array: the old config finds `w`'s record, not `v`'s.
    let o = nbraid(&["check", old]);
    let said = text(&o);
    assert!(!o.status.success(), "{said}");
    assert!(
        said.contains(
            "member d0 carries no record of this volume (its superblock holds volume `w` of array"
        ),
        "{said}"
    );
    let o = nbraid(&["check", new]);
    assert!(o.status.success(), "{}", text(&o));
}

/// A blank device beside a missing member file: the refusal (an older volume's members could
/// be overwritten) told the operator to "remove the other member files to start anew" — a
/// device is no file to remove. It now names the way that works with a device.
#[test]
fn a_missing_file_beside_a_device_gets_advice_for_a_device() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Loop::attach(&dir.path().join("a.img"), 48 << 20);
    let cfg = mirror_of(dir.path(), &[dev.path(), "f.img"]);
    let toml = std::fs::read_to_string(&cfg).unwrap();
    let sized = toml.replace("path = \"f.img\"\n", "path = \"f.img\"\nsize = \"48MiB\"\n");
    std::fs::write(&cfg, sized).unwrap();
    let o = nbraid(&["check", cfg.to_str().unwrap()]);
    let said = text(&o);
    assert!(!o.status.success(), "{said}");
    assert!(said.contains("is missing while member d0"), "{said}");
    assert!(!said.contains("remove the other member files"), "{said}");
    assert!(
        said.contains("create f.img empty at its size (truncate -s SIZE f.img)"),
        "{said}"
    );
}

/// A config spare that is a block device, added by a reload (SIGHUP), then rebuilt into a
/// failed member's role: the reload adds it as `nbraid add` would, so the daemon names it
/// after its device node (`loopN`), and status said its file was a config member "which
/// volume v does not list, so a start on this config does not give it the role" — but it is
/// the volume's spare, and a start gives it the role. Status now says what a start says.
#[test]
fn a_device_spare_added_by_reload_is_named_as_a_start_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let dev = Loop::attach(&dir.path().join("s.img"), 48 << 20);
    for f in ["d0.img", "d1.img"] {
        std::fs::File::create(dir.path().join(f))
            .and_then(|f| f.set_len(48 << 20))
            .unwrap();
    }
    let cfg = mirror_of(dir.path(), &["d0.img", "d1.img", dev.path()]);
    // d2 is declared but in no volume until the reload makes it v's spare.
    let toml = std::fs::read_to_string(&cfg).unwrap();
    let two = toml.replace(
        "members = [\"d0\", \"d1\", \"d2\"]",
        "members = [\"d0\", \"d1\"]",
    );
    std::fs::write(&cfg, &two).unwrap();
    let cfg_s = cfg.to_str().unwrap();
    let mut d = common::Daemon::start(&cfg);
    std::fs::write(&cfg, format!("{two}spares = [\"d2\"]\n")).unwrap();
    d.hangup();
    common::wait_until(cfg_s, "v", "the reloaded spare", |v| {
        v["spares"].as_array().is_some_and(|s| !s.is_empty())
    });
    common::ok(nbraid(&["fail", "v", "d1", "--config", cfg_s]), "fail d1");
    let v = common::wait_until(cfg_s, "v", "the spare rebuilt into role 1", |v| {
        v["state"] == "healthy" && v["members"][1]["path"] == dev.path()
    });
    let notes = v["notes"].to_string();
    assert_eq!(v["members"][1]["id"], "d2", "{v:#}");
    assert!(
        notes.contains(r#"member d2 (listed in spares) now holds role 1; update the config: members = [\"d0\", \"d2\"]"#),
        "{notes}"
    );
    assert!(!notes.contains("does not give it the role"), "{notes}");
    d.stop();
    // What the next start says, for comparison: the same.
    let mut d = common::Daemon::start(&cfg);
    let v = common::status_of(cfg_s, "v");
    assert_eq!(v["members"][1]["id"], "d2", "{v:#}");
    assert!(
        v["notes"]
            .to_string()
            .contains("member d2 (listed in spares) now holds role 1"),
        "{v:#}"
    );
    d.stop();
}

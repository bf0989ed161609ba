//! A member taken by another array (`nbraid create --force`, `add --force`): the array it
//! was taken from refuses to start, naming the array that holds the disk now and the way on —
//! `--force-assemble VOLUME` starts it without that disk, degraded, and writes nothing to it
//! (README: "that array finds its member gone"); once `nbraid add` gave the role a new disk,
//! a start needs no flag.

mod common;

use common::*;

#[test]
fn an_array_whose_member_was_taken_starts_degraded_by_force_and_leaves_the_disk_alone() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let old = raid5_of_three(dir.path(), "24MiB");
    let old_cfg = old.to_str().unwrap();
    let (mut d, uri) = serve(&old, "v");
    let data = fill(&nbdcopy, dir.path(), &uri, 3);
    d.stop();

    // Another array, in its own folder, takes d1.img by force.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::File::create(other.join("e0.img"))
        .unwrap()
        .set_len(24 << 20)
        .unwrap();
    let taken = dir.path().join("d1.img");
    let new_cfg = other.join("arrays.toml");
    let mut text = daemon_and_members("e", 1, "24MiB");
    text += &format!(
        "[[member]]\nid = \"t\"\npath = \"{}\"\nsize = \"24MiB\"\n\n",
        taken.display()
    );
    text += "[[volume]]\nname = \"w\"\nlevel = \"raid1\"\nmembers = [\"e0\", \"t\"]\n";
    std::fs::write(&new_cfg, text).unwrap();
    let new_cfg = new_cfg.to_str().unwrap();
    ok(nbraid(&["create", new_cfg, "--force"]), "create w by force");
    let taken_bytes = sha256(&taken);

    // The old array names the disk's new owner and the way on, offline and at a start.
    let o = nbraid(&["check", old_cfg]);
    let said = String::from_utf8_lossy(&o.stderr).to_string() + &String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{said}");
    for part in [
        "member d1 carries no record of this volume",
        "volume `w`",
        "--force-assemble v",
    ] {
        assert!(said.contains(part), "check lacks `{part}`: {said}");
    }
    let refused = start_refused(&old);
    assert!(refused.contains("--force-assemble v"), "{refused}");

    // By force: served degraded, the data whole, new writes kept; the taken disk untouched.
    let mut d = Daemon::start_with(&old, &["--force-assemble", "v"]);
    let v = status_of(old_cfg, "v");
    assert_eq!(v["available"], true, "{v:#}");
    assert_eq!(v["members"][1]["state"], "missing", "{v:#}");
    assert!(
        v["notes"]
            .to_string()
            .contains("member d1 belongs to another array"),
        "{v:#}"
    );
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data);
    let again = fill(&nbdcopy, dir.path(), &uri, 4);
    d.stop();
    assert_eq!(sha256(&taken), taken_bytes, "the taken disk was written");
    ok(nbraid(&["check", new_cfg]), "the other array still checks");

    // A later start is forced again until a new disk holds the role: then it needs no flag
    // (the config's entry names a disk the volume no longer needs).
    let mut d = Daemon::start_with(&old, &["--force-assemble", "v"]);
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &again);
    let new_disk = blank_member(dir.path(), "n1.img");
    std::fs::File::options()
        .write(true)
        .open(&new_disk)
        .unwrap()
        .set_len(24 << 20)
        .unwrap();
    ok(
        nbraid(&["add", "v", &new_disk, "--config", old_cfg]),
        "add a new disk",
    );
    wait_until(old_cfg, "v", "the rebuild onto the new disk", |v| {
        v["state"] == "healthy"
    });
    d.stop();
    assert_eq!(sha256(&taken), taken_bytes, "the taken disk was written");
    let mut d = Daemon::start(&old);
    let v = status_of(old_cfg, "v");
    assert_eq!(v["state"], "healthy", "{v:#}");
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &again);
    d.stop();
    assert_eq!(sha256(&taken), taken_bytes, "the taken disk was written");
}

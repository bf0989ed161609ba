//! A block device as a member, end to end: `nbraid create`, `nbraidd` serving it, data
//! written through NBD, a restart, the data read back. Every block-device member of a config
//! failed before with "cannot open member /dev/loopN: File exists": the daemon and `create`
//! open members with their size (creating a missing file), and O_CREAT beside the O_EXCL a
//! device is opened with made the kernel answer EEXIST. The devices are loop devices over
//! files (`losetup`, util-linux; the test runs as root, as CI does).

mod common;

use common::loops::Loop;
use common::{fill, nbraid, ok, prefix_reads_back, require, serve, status_of};

#[test]
fn a_volume_on_block_devices_is_created_served_and_restarted() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let devs: Vec<Loop> = (0..2)
        .map(|i| Loop::attach(&dir.path().join(format!("b{i}.img")), 48 << 20))
        .collect();
    // A mirror over two devices (their size from the devices) and a file.
    let mut text = format!(
        "[daemon]\nlisten = [\"unix:{}\"]\n\n",
        dir.path().join("nbd.sock").display()
    );
    for (i, d) in devs.iter().enumerate() {
        text += &format!(
            "[[member]]\nid = \"b{i}\"\npath = \"{}\"\n\n",
            d.path.display()
        );
    }
    text += "[[member]]\nid = \"f\"\npath = \"f.img\"\nsize = \"48MiB\"\n\n";
    text += "[[volume]]\nname = \"v\"\nlevel = \"raid1\"\nmembers = [\"b0\", \"b1\", \"f\"]\n";
    // Made beforehand: a missing file beside a device that exists is refused as part of an
    // older volume would be (plan.rs).
    std::fs::File::create(dir.path().join("f.img"))
        .and_then(|f| f.set_len(48 << 20))
        .unwrap();
    let file = dir.path().join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    let cfg = file.to_str().unwrap();

    ok(nbraid(&["create", cfg]), "create on block devices");
    let (mut d, uri) = serve(&file, "v");
    let data = fill(&nbdcopy, dir.path(), &uri, 7);
    let v = status_of(cfg, "v");
    assert_eq!(v["state"], "healthy", "{v:#}");
    d.stop();

    let (mut d, uri) = serve(&file, "v");
    prefix_reads_back(&nbdcopy, dir.path(), &uri, &data);
    let v = status_of(cfg, "v");
    assert_eq!(v["state"], "healthy", "{v:#}");
    let paths: Vec<&str> = (v["members"].as_array().unwrap().iter())
        .filter_map(|m| m["path"].as_str())
        .collect();
    for dev in &devs {
        assert!(
            paths.contains(&dev.path.to_str().unwrap()),
            "{paths:?} lists {}",
            dev.path.display()
        );
    }
    d.stop();
}

//! A spare the config declares on a device that is not there at start is missing — not made
//! a file in RAM under /dev — and `nbraid add VOLUME ID` takes it by the id the config gives
//! it once it is there. The start created a regular file under /dev, and once missing, the
//! id was unknown ("no id of its members or spares"). The device is a file under /dev/shm
//! (a tmpfs under /dev, as a device node is).

mod common;

use common::*;

#[test]
fn a_spare_missing_at_start_is_added_by_its_config_id_once_there() {
    let dir = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let device = shm.path().join("s1.img");
    let config = write_config_with(dir.path(), &["s1"], "spares = [\"s1\"]\n");
    let cfg = config.to_str().unwrap();
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replace(
        "path = \"s1.img\"",
        &format!("path = \"{}\"", device.display()),
    );
    std::fs::write(&config, text).unwrap();
    let mut d = Daemon::start(&config);
    assert!(!device.exists(), "nothing created under /dev");
    let v = volume_status(cfg);
    assert_eq!(v["spares"], serde_json::json!([]), "{v:#}");
    let notes = v["notes"].to_string();
    assert!(notes.contains("spare s1 is missing"), "{v:#}");

    std::fs::File::create(&device)
        .unwrap()
        .set_len(9 * MIB)
        .unwrap();
    let said = ok(nbraid(&["add", "r6", "s1", "--config", cfg]), "add s1");
    assert!(said.contains("s1"), "{said}");
    let v = volume_status(cfg);
    assert_eq!(v["spares"], serde_json::json!(["s1"]), "{v:#}");
    assert!(
        !v["notes"].to_string().contains("spare s1 is missing"),
        "standing by, no longer said missing: {v:#}"
    );
    d.stop();
}

//! A RAID 5 of 1 MiB strips on four 30 MiB members, the config then asking for 16 MiB
//! strips with a fifth member: the new shape's regions, where the records put them, hold one
//! 16 MiB strip each — less than the volume holds — so the move is refused as a shrink, with
//! both sizes. Before, `nbraid check` and `nbraid apply` refused the config itself for "33 MiB
//! used by the write-hole log", a reserve only a new volume of such strips takes (the
//! existing one keeps its recorded log): the records were never read.

mod common;

use common::*;

/// Four 30 MiB members and a larger fifth; volume `v` over the first `n`, `strip` wide.
fn config_text(n: usize, strip: &str) -> String {
    let mut text = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n".to_string();
    for i in 0..5 {
        let size = if i < 4 { "30MiB" } else { "307MiB" };
        text += &format!("[[member]]\nid = \"d{i}\"\npath = \"d{i}.img\"\nsize = \"{size}\"\n\n");
    }
    let ids: Vec<String> = (0..n).map(|i| format!("\"d{i}\"")).collect();
    text + &format!(
        "[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nstrip_size = \"{strip}\"\nmembers = [{}]\n",
        ids.join(", ")
    )
}

#[test]
fn a_reshape_into_strips_the_regions_hold_fewer_of_is_refused_as_the_shrink_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("arrays.toml");
    std::fs::write(&config, config_text(4, "1MiB")).unwrap();
    let cfg = config.to_str().unwrap();
    let mut d = Daemon::start(&config);
    let was = status_of(cfg, "v")["capacity_bytes"].as_u64().unwrap();
    std::fs::write(&config, config_text(5, "16MiB")).unwrap();
    let shrink = format!(
        "the new shape holds 64 MiB where the volume has {}: shrinking is not done online",
        nbraid_config::format_size(was)
    );
    let said = |o: std::process::Output| {
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        assert!(!text.contains("used by the write-hole log"), "{text}");
        text
    };
    let out = said(nbraid(&["check", cfg]));
    assert!(
        out.contains(&shrink),
        "check does not name the shrink:\n{out}"
    );
    let out = said(nbraid(&["apply", cfg]));
    assert!(
        out.contains(&shrink),
        "apply does not name the shrink:\n{out}"
    );
    d.stop();
}

//! `status` says a reshape is `done` only once the new shape serves alone: between the copy's
//! last window and the volume's reopening (the other passes drained, the volume recorded
//! clean, the members opened again) it says `finishing`. It used to say `done` there, with
//! the old capacity beside it, and a script that waited for `done` and connected was offered
//! the old size. Polls the control socket as fast as it answers, over several reshapes.
//! `nbraidd` is the one built beside `nbraid`; needs `nbdinfo`.

mod common;

use common::nbd_model::size_seen;
use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `arrays.toml`: RAID 5 `db` over the first `members` of d0..d3 (9 MiB files, a 7 MiB
/// region each), reshaped at full speed.
fn config(dir: &Path, members: usize) -> PathBuf {
    let mut text = daemon_and_members("d", 4, "9MiB");
    let ids: Vec<String> = (0..members).map(|i| format!("\"d{i}\"")).collect();
    text += &format!(
        "[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nstrip_size = \"64KiB\"\n\
         members = [{}]\n",
        ids.join(", ")
    );
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// The reshape states `status` gave, in order without repeats, polling one control
/// connection until it said `done`; every `done` came with the new capacity.
fn states_until_done(control: &Path, capacity: u64) -> Vec<String> {
    let s = UnixStream::connect(control).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut states: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "no `done` in 60 s: {states:?}");
        w.write_all(b"{\"v\":1,\"op\":\"status\",\"volume\":\"db\"}\n")
            .unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let reply: Value = serde_json::from_str(&line).unwrap();
        let v = &reply["volumes"][0];
        let state = v["reshape"]["state"].as_str().unwrap_or("none").to_string();
        if states.last() != Some(&state) {
            states.push(state.clone());
        }
        if state == "done" {
            assert_eq!(
                v["capacity_bytes"].as_u64(),
                Some(capacity),
                "`done` while the old shape still serves: {states:?}\n{v:#}"
            );
            return states;
        }
    }
}

#[test]
fn a_reshape_is_done_in_status_only_once_the_new_shape_serves() {
    let nbdinfo = require("nbdinfo");
    let mut finishing_seen = 0;
    for round in 0..4 {
        let dir = tempfile::tempdir().unwrap();
        let file = config(dir.path(), 3);
        let cfg = file.to_str().unwrap();
        ok(nbraid(&["create", cfg]), "create");
        let (mut d, uri) = serve(&file, "db");
        config(dir.path(), 4);
        let out = ok(nbraid(&["apply", cfg, "--yes"]), "apply --yes");
        assert!(out.contains("started online"), "{out}");
        let states = states_until_done(&d.control, 21 * MIB);
        assert_eq!(
            size_seen(&nbdinfo, &uri),
            21 * MIB,
            "round {round}: a connection after `done` sees the new size ({states:?})"
        );
        finishing_seen += states.iter().filter(|s| *s == "finishing").count();
        d.stop();
    }
    eprintln!("`finishing` seen in {finishing_seen} of 4 reshapes");
}

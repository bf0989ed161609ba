//! A bad sector on the last copy, met by a rebuild: RAID 1 over an NBD export (`nbdkit sh`,
//! which fails every read of one 4 KiB block until a write covers it, as a disk remaps a
//! sector it rewrites) and a file. The other copy fails and the spare's rebuild meets the
//! block: the pass stops and `status`, the event and `nbraid rebuild` name the volume's
//! bytes that cannot be rebuilt (before: "read of 4194304 bytes at offset … failed", a member
//! window, not the volume's bytes), every other byte still reads as written, and once a
//! client writes those bytes again the rebuild finishes and the spare holds the volume alone.

mod common;

use common::{fill, nbraid, ok, read_out, require, serve, status_of, wait_until};
use nbraid_nbd::client::Client;
use std::path::Path;

const MIB: u64 = 1 << 20;
const BLOCK: u64 = 4096;

/// An `nbdkit sh` script serving `file`: reads touching the range in `armed` (two numbers,
/// the range's start and end on the export) fail with EIO, and a write touching it clears it.
fn bad_sector_script(file: &Path, armed: &Path) -> String {
    let (f, a) = (file.display(), armed.display());
    format!(
        r#"#!/bin/bash
touches() {{ [ -f {a} ] && read lo hi < {a} && [ "$2" -lt "$hi" ] && [ $(($2 + $1)) -gt "$lo" ]; }}
case "$1" in
  get_size) stat -c %s {f} ;;
  can_write|can_flush) exit 0 ;;
  can_fua) echo native ;;
  pread)
    if touches "$3" "$4"; then echo "EIO unreadable sector" >&2; exit 1; fi
    dd if={f} skip="$4" count="$3" iflag=skip_bytes,count_bytes status=none ;;
  pwrite)
    if touches "$3" "$4"; then rm -f {a}; fi
    dd of={f} seek="$4" oflag=seek_bytes conv=notrunc status=none ;;
  flush) sync {f} ;;
  *) exit 2 ;;
esac
"#
    )
}

/// Where volume byte `logical` lies on member 0 (its offset there), by `nbraid map`.
fn on_member0(cfg: &Path, logical: u64) -> u64 {
    let data = common::map_extents(cfg, "v", logical);
    let e = (data.iter())
        .find(|e| e["member_index"] == 0)
        .expect("a copy on member 0");
    e["member_offset"].as_u64().unwrap()
}

#[test]
fn a_rebuild_stopped_by_a_bad_sector_names_the_bytes_and_finishes_once_they_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (file, armed, script) = (d.join("m0.img"), d.join("armed"), d.join("m0.sh"));
    std::fs::File::create(&file)
        .unwrap()
        .set_len(40 * MIB)
        .unwrap();
    std::fs::write(&script, bad_sector_script(&file, &armed)).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let sock = d.join("m0.sock");
    let mut kit = common::nbdkit_export(&sock, &["sh".as_ref(), script.as_os_str()]);
    for f in ["m1.img", "s.img"] {
        std::fs::File::create(d.join(f))
            .unwrap()
            .set_len(40 * MIB)
            .unwrap();
    }
    let cfg = d.join("arrays.toml");
    std::fs::write(
        &cfg,
        format!(
            "[daemon]\nlisten = [\"unix:{}\"]\n\n\
             [[member]]\nid = \"m0\"\npath = \"nbd+unix:///?socket={}\"\nsize = \"40MiB\"\n\n\
             [[member]]\nid = \"m1\"\npath = \"m1.img\"\nsize = \"40MiB\"\n\n\
             [[member]]\nid = \"s\"\npath = \"s.img\"\nsize = \"40MiB\"\n\n\
             [[volume]]\nname = \"v\"\nlevel = \"raid1\"\nmembers = [\"m0\", \"m1\"]\nspares = [\"s\"]\n",
            d.join("nbd.sock").display(),
            sock.display()
        ),
    )
    .unwrap();
    let c = cfg.to_str().unwrap();
    let (mut daemon, uri) = serve(&cfg, "v");
    let nbdcopy = require("nbdcopy");
    let data = fill(&nbdcopy, d, &uri, 33);

    // Volume byte 10 MiB + 8 KiB: unreadable on m0 from now on, until written.
    let bad = 10 * MIB + 2 * BLOCK;
    let at = on_member0(&cfg, bad);
    std::fs::write(&armed, format!("{at} {}\n", at + BLOCK)).unwrap();
    ok(nbraid(&["fail", "v", "m1", "--config", c]), "fail m1");
    let named = format!("the volume's bytes at {bad}+{BLOCK} cannot be rebuilt");
    let v = wait_until(c, "v", "the spare's rebuild to stop", |v| {
        v["rebuild"]["state"] == "failed"
    });
    let said = v["rebuild"].to_string();
    assert!(said.contains(&named), "{v:#}");
    assert_eq!(v["state"], "degraded", "{v:#}");
    let o = nbraid(&["rebuild", "v", "--config", c]);
    assert!(!o.status.success(), "the rebuild fails again");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&named), "{err}");
    assert!(
        err.contains("writing them again"),
        "it says what gets past them: {err}"
    );

    // Every other byte still reads as written; those do not.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(Client::connect(&uri)).expect("connect");
    assert!(rt.block_on(client.read(bad, BLOCK as usize)).is_err());
    for (offset, len) in [(0, bad), (bad + BLOCK, 32 * MIB - bad - BLOCK)] {
        let mut at = offset;
        while at < offset + len {
            let n = (offset + len - at).min(MIB);
            let got = rt.block_on(client.read(at, n as usize)).expect("read");
            assert!(got[..] == data[at as usize..(at + n) as usize], "at {at}");
            at += n;
        }
    }
    // The operator writes them from a backup; the rebuild then finishes.
    let bytes = data[bad as usize..(bad + BLOCK) as usize].to_vec();
    rt.block_on(client.write(bad, bytes.into()))
        .expect("write the bytes again");
    drop(client);
    assert!(!armed.exists(), "the write reached m0's bad sector");
    ok(nbraid(&["rebuild", "v", "--config", c]), "rebuild");
    let v = status_of(c, "v");
    assert_eq!(v["state"], "healthy", "{v:#}");
    // The spare alone holds the volume.
    ok(nbraid(&["fail", "v", "m0", "--config", c]), "fail m0");
    let got = read_out(&nbdcopy, d, &uri);
    assert!(got[..data.len()] == data[..], "the spare holds every byte");
    daemon.stop();
    common::stop_nbdkit(&mut kit);
}

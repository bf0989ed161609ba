//! Through the real `nbraidd`: a RAID 5 with 1 MiB strips (its log's ring does not fit the
//! 1 MiB metadata area) is created with its write-hole log, in the reserve the config leaves
//! before its region, and starts without the warning that blamed the volume's age.

mod common;

use common::Daemon;
use nbraid_core::metadata::{Superblock, METADATA_AREA_BYTES, SLOT_BYTES};

#[test]
fn a_raid5_with_1_mib_strips_is_created_with_its_log_before_the_region() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = format!(
        "[daemon]\nlisten = [\"unix:{}\"]\n\n",
        dir.path().join("nbd.sock").display()
    );
    for i in 0..3 {
        text += &format!("[[member]]\nid = \"d{i}\"\npath = \"d{i}.img\"\nsize = \"16MiB\"\n\n");
    }
    text += "[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nstrip_size = \"1MiB\"\nmembers = [\"d0\", \"d1\", \"d2\"]\n";
    let config = dir.path().join("arrays.toml");
    std::fs::write(&config, text).unwrap();
    let start = || {
        Daemon::start(&config, "warn", true, |l| {
            l.starts_with("nbraidd: control socket")
        })
    };
    let created = start().stop();
    let restarted = start().stop();
    for stderr in [&created, &restarted] {
        assert!(
            !stderr.contains("partial-parity log"),
            "no warning about the log: {stderr}"
        );
    }
    for i in 0..3 {
        let bytes = std::fs::read(dir.path().join(format!("d{i}.img"))).unwrap();
        let copies = [0, SLOT_BYTES as usize].map(|at| Superblock::decode(&bytes[at..]).ok());
        let sb = copies
            .into_iter()
            .flatten()
            .max_by_key(|s| s.generation)
            .expect("a superblock");
        let v = &sb.volumes[0];
        let log = v.ppl.expect("a write-hole log area");
        let ring = nbraid_layout::volume_log_ring_bytes(&v.tree).unwrap();
        assert!(log.len >= ring, "d{i}: {log:?} for a {ring}-byte ring");
        // The block checksums' reserve (1 MiB) comes first, right after the metadata area.
        let sums = v.checksums.expect("a checksum area");
        assert_eq!(sums.offset, METADATA_AREA_BYTES, "d{i}: checksums first");
        assert_eq!(
            log.offset,
            METADATA_AREA_BYTES + (1 << 20),
            "d{i}: right after the checksum reserve"
        );
        let mut region_start = None;
        v.tree.visit_members(&mut |m| {
            if m.index == v.role as usize {
                region_start = Some(m.start);
            }
        });
        assert_eq!(
            region_start,
            Some(log.offset + log.len),
            "d{i}: the region follows it"
        );
    }
}

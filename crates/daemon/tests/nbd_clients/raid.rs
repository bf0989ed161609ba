//! The engine's RAID volumes, assembled from a config as `nbraidd` does, through every check.

use super::*;

/// A volume of `level` over `members` file-backed members of 40 MiB, assembled from a config
/// the way `nbraidd` does it, served under the name of the level.
fn raid_fixture(level: &str, members: usize, extra: &[&str]) -> Fixture {
    let mut arrays = Vec::new();
    let mut fx = Fixture::build(|dir| {
        let mut text = String::new();
        let mut ids = Vec::new();
        for i in 0..members {
            let path = dir.join(format!("m{i}.img"));
            text += &format!(
                "[[member]]\nid = \"m{i}\"\npath = \"{}\"\nsize = \"40MiB\"\n\n",
                path.display()
            );
            ids.push(format!("\"m{i}\""));
        }
        text += &format!(
            "[[volume]]\nname = \"{level}\"\nlevel = \"{level}\"\nmembers = [{}]\nsize = \"all\"\n",
            ids.join(", ")
        );
        for line in extra {
            text += line;
            text += "\n";
        }
        let file = dir.join("nbraid.toml");
        std::fs::write(&file, &text).unwrap();
        let config = nbraid_config::parse(&text, &file)
            .unwrap_or_else(|e| panic!("config rejected: {e}\n{text}"));
        nbraid_assembly::assemble::assemble(&config)
            .unwrap_or_else(|e| panic!("assembly failed: {e}"))
            .into_iter()
            .map(|a| {
                arrays.push(a.array.clone());
                let e =
                    nbraid_daemon::export::VolumeExport::array(a.array, a.read_only, a.description);
                (a.name, Arc::new(e) as Arc<dyn Export>)
            })
            .collect()
    });
    fx.on_stall
        .push(report_on_stall(move || volumes_state(&arrays)));
    fx
}

/// Each volume's cache, counters and members' counters (`in_flight`: member I/O not yet
/// answered), what its parity groups' stripe locks and logs hold and who waits on them, and
/// the partial-parity log's counters: what a hung client left behind.
fn volumes_state(arrays: &[Arc<nbraid_core::metadata::Array>]) -> String {
    let mut out = format!(
        "partial-parity log (process-wide): {:?}\n",
        nbraid_core::ppl::stats()
    );
    for a in arrays {
        let v = a.volume();
        out += &format!(
            "volume {}: {:?}\n  {:?}\n",
            a.name(),
            v.cache_usage(),
            v.counters()
        );
        for (i, c) in v.member_health().iter().map(|h| h.counters).enumerate() {
            out += &format!("  member {i}: {c:?}\n");
        }
        out += &v.waits();
    }
    out
}

#[test]
fn raid0_volume_with_every_client() {
    let fx = raid_fixture("raid0", 4, &["strip_size = \"128KiB\""]);
    check_all(&fx, "raid0", 2000);
}

#[test]
fn raid1_volume_with_every_client() {
    let fx = raid_fixture("raid1", 3, &["block_size = 512"]);
    check_all(&fx, "raid1", 2100);
}

#[test]
fn raid5_volume_with_every_client() {
    let fx = raid_fixture(
        "raid5",
        4,
        &[
            "strip_size = \"64KiB\"",
            "cache = \"write-back\"",
            "cache_size = \"8MiB\"",
        ],
    );
    check_all(&fx, "raid5", 2200);
}

#[test]
fn raid6_volume_with_every_client() {
    let fx = raid_fixture("raid6", 6, &["strip_size = \"64KiB\""]);
    check_all(&fx, "raid6", 2300);
}

#[test]
fn raid10_volume_with_every_client() {
    let fx = raid_fixture("raid10", 4, &["spans = 2", "strip_size = \"64KiB\""]);
    check_all(&fx, "raid10", 2400);
}

#[test]
fn raid50_volume_with_every_client() {
    let fx = raid_fixture(
        "raid50",
        6,
        &[
            "spans = 2",
            "strip_size = \"64KiB\"",
            "cache = \"write-back\"",
            "cache_size = \"8MiB\"",
        ],
    );
    check_all(&fx, "raid50", 2500);
}

/// `base:allocation` on a RAID 5 volume: what was trimmed reads as holes to `nbdinfo --map`,
/// what was written as data, and `nbdcopy` copies it into a sparse file with the right bytes.
#[test]
fn raid5_holes_for_nbdinfo_map_and_nbdcopy() {
    use nbraid_daemon::nbd::client::Client;
    let nbdinfo = require("nbdinfo", "libnbd-bin");
    let nbdcopy = require("nbdcopy", "libnbd-bin");
    let fx = raid_fixture("raid5", 4, &["strip_size = \"64KiB\""]);
    let (size, ..) = fx.export("raid5");
    let data = fx.rt.block_on(async {
        let c = Client::connect(&fx.uri("raid5")).await.unwrap();
        c.trim(0, size).await.unwrap();
        let mut data = vec![0u8; MIB as usize];
        rand::rngs::StdRng::seed_from_u64(9).fill_bytes(&mut data);
        c.write(8 * MIB, data.clone().into()).await.unwrap();
        c.write(50 * MIB, data[..65536].to_vec().into())
            .await
            .unwrap();
        c.flush().await.unwrap();
        c.disconnect().await;
        data
    });
    let out = run(Command::new(&nbdinfo)
        .arg("--map")
        .arg("--json")
        .arg(fx.uri("raid5")));
    let at = out.find('[').unwrap_or_else(|| panic!("no map: {out}"));
    let map: serde_json::Value =
        serde_json::from_str(out[at..].trim()).unwrap_or_else(|e| panic!("bad JSON ({e}): {out}"));
    let extents: Vec<(u64, u64, u64)> = map
        .as_array()
        .unwrap_or_else(|| panic!("not a map: {out}"))
        .iter()
        .map(|e| {
            let n = |k: &str| e[k].as_u64().unwrap_or_else(|| panic!("{k} in {out}"));
            (n("offset"), n("length"), n("type"))
        })
        .collect();
    let want = [
        (0, 8 * MIB, 3),
        (8 * MIB, MIB, 0),
        (9 * MIB, 41 * MIB, 3),
        (50 * MIB, 65536, 0),
        (50 * MIB + 65536, size - 50 * MIB - 65536, 3),
    ];
    assert_eq!(extents, want, "{out}");

    let dst = fx.path("copy.img");
    run(Command::new(&nbdcopy).arg(fx.uri("raid5")).arg(&dst));
    let back = std::fs::read(&dst).unwrap();
    assert_eq!(back.len() as u64, size);
    assert!(back[8 * MIB as usize..9 * MIB as usize] == data[..]);
    assert!(back[50 * MIB as usize..50 * MIB as usize + 65536] == data[..65536]);
    assert!(back[..8 * MIB as usize].iter().all(|&b| b == 0));
    use std::os::unix::fs::MetadataExt;
    let allocated = std::fs::metadata(&dst).unwrap().blocks() * 512;
    assert!(
        allocated < 8 * MIB,
        "nbdcopy wrote {allocated} bytes of a {size}-byte volume with 1 MiB of data"
    );
}

//! A RAID 5 of 1 MiB strips reshaped into 16 MiB strips with a member added: a new volume of
//! 16 MiB strips takes a 33 MiB write-hole log reserve before its regions, which four 30 MiB
//! members cannot hold. The existing volume takes none (its log stays where its records put
//! it), yet the read that finds the records (`Pins::before_default_log`, the fallback of
//! `nbraid_assembly::pins`) took it too and failed: the records were never read, and the
//! refusal blamed "33 MiB used by the write-hole log" where the new shape's trouble is that
//! its recorded regions hold less (a shrink, which the reshape plan refuses with the sizes).

use nbraid_config::{self as config, Config, ConfigError, Pins};
use std::path::Path;

const MIB: u64 = 1 << 20;

/// Volume `v` of `level`, `strip` and `n` members over four members of `size` and a fifth
/// of 307 MiB (the one a reshape adds).
fn text(size: &str, n: usize, strip: &str) -> String {
    let mut t = String::new();
    for i in 0..5 {
        let size = if i < 4 { size } else { "307MiB" };
        t += &format!("[[member]]\nid = \"d{i}\"\npath = \"d{i}.img\"\nsize = \"{size}\"\n");
    }
    let ids: Vec<String> = (0..n).map(|i| format!("\"d{i}\"")).collect();
    t + &format!(
        "[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nmembers = [{}]\nstrip_size = \"{strip}\"\n",
        ids.join(", ")
    )
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    config::parse(text, Path::new("arrays.toml"))
}

/// The pins the records of `created` give (the added fifth member not placed yet).
fn recorded(created: &Config) -> Pins {
    let v = &created.volumes[0];
    let mut starts: Vec<Option<u64>> = v.regions.iter().map(|r| Some(r.start)).collect();
    starts.push(None);
    let mut pins = Pins::new();
    pins.pin("v", starts, v.metadata.ppl_log_bytes);
    pins
}

#[test]
fn the_read_for_the_records_leaves_out_a_log_reserve_the_members_cannot_hold() {
    let at = Path::new("arrays.toml");
    for (size, capacity_mib) in [("30MiB", 64), ("40MiB", 128)] {
        let created = parse(&text(size, 4, "1MiB")).unwrap();
        let old_capacity = created.volumes[0].geometry.capacity();
        let wider = text(size, 5, "16MiB");
        // A new volume of these strips does need the reserve: today's read says so.
        let e = parse(&wider).unwrap_err().to_string();
        assert!(
            e.contains("33 MiB used by the write-hole log of volume \"v\""),
            "{e}"
        );
        let older = config::parse_pinned(&wider, at, &Pins::before_default_log())
            .unwrap_or_else(|e| panic!("{size}: the read for the records places the volume: {e}"));
        assert_eq!(older.volumes[0].metadata.ppl_log_bytes, None, "{size}");
        // Read again where the records put it, with the recorded log: what the new shape
        // holds there, smaller than the volume on 30 MiB members (the reshape plan's shrink).
        let pinned = config::parse_pinned(&wider, at, &recorded(&created))
            .unwrap_or_else(|e| panic!("{size}: placed where recorded: {e}"));
        let v = &pinned.volumes[0];
        assert_eq!(v.regions[0].start, created.volumes[0].regions[0].start);
        assert_eq!(v.geometry.capacity(), capacity_mib * MIB, "{size}");
        assert_eq!(
            v.geometry.capacity() < old_capacity,
            size == "30MiB",
            "{size}: {} then {}",
            old_capacity,
            v.geometry.capacity()
        );
    }
}

/// The read for the records still takes a reserve the members hold (placed as before).
#[test]
fn a_log_reserve_the_members_hold_is_kept_by_the_read_for_the_records() {
    let at = Path::new("arrays.toml");
    let wider = text("66MiB", 5, "16MiB");
    let today = parse(&wider).unwrap();
    let older = config::parse_pinned(&wider, at, &Pins::before_default_log()).unwrap();
    let reserve = older.volumes[0].metadata.ppl_log_bytes;
    assert!(reserve.is_some_and(|b| b >= 33 * MIB), "{reserve:?}");
    assert_eq!(older.volumes[0].regions, today.volumes[0].regions);
}

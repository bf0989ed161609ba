//! Existing volumes placed where their records start them (`nbraid_config::Pins`): a grown
//! member moves no region, whatever reserves the config would give a new volume today.

use nbraid_config::{self as config, Config, Pins};
use std::path::Path;

const MIB: u64 = 1 << 20;

/// RAID 5 `db` over three members of `member_mib` MiB (`size = "all"`), and a fixed 4 MiB
/// RAID 1 `sys` before it on the first two when `matrix`.
fn text(member_mib: u64, matrix: bool) -> String {
    let mut t = String::new();
    for i in 0..3 {
        t += &format!(
            "[[member]]\nid = \"d{i}\"\npath = \"d{i}.img\"\nsize = \"{member_mib}MiB\"\n"
        );
    }
    if matrix {
        t += "[[volume]]\nname = \"sys\"\nlevel = \"raid1\"\nmembers = [\"d0\", \"d1\"]\nsize = \"4MiB\"\n";
    }
    t += "[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nmembers = [\"d0\", \"d1\", \"d2\"]\nsize = \"all\"\n";
    t
}

fn parse(text: &str, pins: &Pins) -> Result<Config, config::ConfigError> {
    config::parse_pinned(text, Path::new("arrays.toml"), pins)
}

/// Each volume's region starts, by member position, as pins.
fn pins_of(c: &Config) -> Pins {
    let mut pins = Pins::new();
    for v in &c.volumes {
        pins.pin(
            &v.name,
            v.regions.iter().map(|r| Some(r.start)).collect(),
            v.metadata.ppl_log_bytes,
        );
    }
    pins
}

fn db(c: &Config) -> &config::Volume {
    c.volumes.iter().find(|v| v.name == "db").unwrap()
}

#[test]
fn a_grown_member_keeps_a_pinned_region_start_and_its_checksum_area_goes_after_it() {
    let created = parse(&text(9, false), &Pins::new()).unwrap();
    let start = db(&created).regions[0].start;
    assert_eq!(
        start,
        2 * MIB,
        "the metadata area, then a 1 MiB checksum reserve"
    );
    let pins = pins_of(&created);

    // Unpinned, 600 MiB members get a 2 MiB reserve: the start moves (what pins prevent).
    let unpinned = parse(&text(600, false), &Pins::new()).unwrap();
    assert_eq!(db(&unpinned).regions[0].start, 3 * MIB);

    // Pinned: the start stays; the region's 596 MiB need a 2 MiB area the 1 MiB reserve
    // cannot hold, so the config leaves it right after the region.
    let grown = parse(&text(600, false), &pins).unwrap();
    for r in &db(&grown).regions {
        assert_eq!((r.start, r.len), (start, 596 * MIB));
    }
    assert_eq!(db(&grown).metadata.checksum_after_region_bytes, 2 * MIB);
    // Within what the reserve covers (~510 MiB of region per MiB), nothing after it.
    let within = parse(&text(400, false), &pins).unwrap();
    for r in &db(&within).regions {
        assert_eq!((r.start, r.len), (start, 398 * MIB));
    }
    assert_eq!(db(&within).metadata.checksum_after_region_bytes, 0);
    // The pins of a volume that never grew place it exactly as the config does.
    let again = parse(&text(9, false), &pins).unwrap();
    assert_eq!(db(&again).regions, db(&created).regions);
    assert_eq!(db(&again).geometry, db(&created).geometry);
}

#[test]
fn a_matrix_volume_after_another_keeps_its_start_and_a_member_without_records_is_placed() {
    let created = parse(&text(9, true), &Pins::new()).unwrap();
    let mut pins = pins_of(&created);
    let starts: Vec<u64> = db(&created).regions.iter().map(|r| r.start).collect();
    assert!(starts[0] > starts[2], "d0 holds sys before db; d2 does not");
    let grown = parse(&text(700, true), &pins).unwrap();
    let now: Vec<u64> = db(&grown).regions.iter().map(|r| r.start).collect();
    assert_eq!(now, starts);
    let sys = |c: &Config| c.volumes[0].regions.clone();
    assert_eq!(sys(&grown), sys(&created), "the fixed volume does not move");

    // Position 2 unknown to the records (a member being added): the config places it.
    pins.pin("db", vec![Some(starts[0]), Some(starts[1]), None], None);
    let placed = parse(&text(9, true), &pins).unwrap();
    assert_eq!(db(&placed).regions[2].start, starts[2]);
}

#[test]
fn a_pinned_start_inside_the_volumes_before_it_is_refused_by_name() {
    let mut pins = Pins::new();
    pins.pin("db", vec![Some(MIB); 3], None);
    let e = parse(&text(9, true), &pins).unwrap_err().to_string();
    assert!(e.contains("volume \"db\""), "{e}");
    assert!(e.contains("d0"), "{e}");
    assert!(e.contains("never moved"), "{e}");
}

#[test]
fn a_volume_recorded_with_its_log_in_the_metadata_area_keeps_it_there() {
    // Regions of 1 GiB and more get an 8 MiB log reserve before them by default now.
    let new = parse(&text(2048, false), &Pins::new()).unwrap();
    let v = db(&new);
    assert_eq!(v.metadata.ppl_log_bytes, Some(8 * MIB));
    let ck = v.metadata.checksum_reserve_bytes.unwrap();
    assert_eq!(v.regions[0].start, MIB + ck + 8 * MIB);
    // A volume created before, its log in the metadata area: its region stays.
    let mut pins = Pins::new();
    pins.pin("db", vec![Some(MIB + ck); 3], None);
    let old = parse(&text(2048, false), &pins).unwrap();
    assert_eq!(db(&old).metadata.ppl_log_bytes, None);
    for r in &db(&old).regions {
        assert_eq!(r.start, MIB + ck);
    }
    assert_eq!(db(&old).metadata.checksum_after_region_bytes, 0);
}

#[test]
fn checksums_on_over_a_volume_recorded_without_a_reserve_is_placed_as_new_for_the_start_to_refuse()
{
    let off = text(9, false).replace("size = \"all\"\n", "size = \"all\"\nchecksums = \"off\"\n");
    let created = parse(&off, &Pins::new()).unwrap();
    assert_eq!(
        db(&created).regions[0].start,
        MIB,
        "no reserve before the region"
    );
    let pins = pins_of(&created);
    // Placed as a new volume would be: the start refuses this volume alone (naming
    // "enable"), as it did before pins, and the config's other volumes still serve.
    let on = parse(&text(9, false), &pins).unwrap();
    assert_eq!(
        db(&on).regions[0].start,
        2 * MIB,
        "behind a reserve the records lack"
    );
    let enable = text(9, false).replace(
        "size = \"all\"\n",
        "size = \"all\"\nchecksums = \"enable\"\n",
    );
    let kept = parse(&enable, &pins).unwrap();
    assert_eq!(db(&kept).regions, db(&created).regions);
}

#[test]
fn a_jbod_whose_last_member_grew_keeps_its_other_regions_whole() {
    let jbod = |last_mib: u64| {
        format!(
            "[[member]]\nid = \"d0\"\npath = \"d0.img\"\nsize = \"9MiB\"\n\
             [[member]]\nid = \"d1\"\npath = \"d1.img\"\nsize = \"{last_mib}MiB\"\n\
             [[volume]]\nname = \"db\"\nlevel = \"jbod\"\nmembers = [\"d0\", \"d1\"]\nsize = \"all\"\n"
        )
    };
    let created = parse(&jbod(9), &Pins::new()).unwrap();
    let pins = pins_of(&created);
    let grown = parse(&jbod(700), &pins).unwrap();
    let (was, now) = (&db(&created).regions, &db(&grown).regions);
    assert_eq!(now[0], was[0], "the first member's region is untouched");
    assert_eq!(now[1].start, was[1].start);
    // 700 MiB: 1 MiB of metadata, the 1 MiB reserve, 2 MiB of checksums after the region.
    assert_eq!(now[1].len, 696 * MIB);
}

#[test]
fn a_new_volume_listed_before_an_existing_one_is_refused_not_placed_over_its_reserves() {
    // `db` recorded with its checksum area in the reserve before its region (1..2 MiB).
    let created = parse(&text(9, false), &Pins::new()).unwrap();
    let start = db(&created).regions[0].start;
    let mut pins = Pins::new();
    let place = config::RecordedPlace {
        start,
        len: db(&created).regions[0].len,
        checksum_area: Some((MIB, 32768)),
    };
    pins.pin_recorded("db", vec![Some(place); 3], None);
    // `sys` listed first would take d0 and d1 from byte 1 MiB: over db's checksums.
    let sys_first = text(9, true);
    let e = parse(&sys_first, &pins).unwrap_err().to_string();
    assert!(e.contains("volume \"db\""), "{e}");
    assert!(
        e.contains("list a new volume after the existing ones"),
        "{e}"
    );
}

/// A member sized by its file that holds less than its records keep (`Pins::pin_member_need`)
/// is short: sized as the records need, so its volume keeps its recorded shape, and said
/// short with what it holds. A `size` the file no longer holds is short only where records
/// keep bytes on it (or while the records are being found); else the config refuses it.
#[test]
fn a_member_holding_less_than_its_records_keep_is_short_not_shrinking_its_volume() {
    let dir = tempfile::tempdir().unwrap();
    let member = |i: usize, len: u64| {
        let f = std::fs::File::create(dir.path().join(format!("d{i}.img"))).unwrap();
        f.set_len(len).unwrap();
    };
    (0..3).for_each(|i| member(i, 24 * MIB));
    let mut text = String::new();
    for i in 0..3 {
        text += &format!("[[member]]\nid = \"d{i}\"\npath = \"d{i}.img\"\n");
    }
    text += "[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nmembers = [\"d0\", \"d1\", \"d2\"]\n";
    let file = dir.path().join("arrays.toml");
    let read = |text: &str, pins: &Pins| config::parse_pinned(text, &file, pins);
    let whole = read(&text, &Pins::new()).unwrap();
    member(1, 12 * MIB);
    let shrunk = read(&text, &Pins::new()).unwrap();
    assert!(db(&shrunk).capacity() < db(&whole).capacity());
    assert_eq!(shrunk.members[1].short_len_bytes(), None);

    let mut pins = Pins::new();
    pins.pin_member_need("d1", 24 * MIB);
    let short = read(&text, &pins).unwrap();
    assert_eq!(db(&short).capacity(), db(&whole).capacity());
    let d1 = &short.members[1];
    assert_eq!((d1.size, d1.short_len_bytes()), (24 * MIB, Some(12 * MIB)));
    assert_eq!(
        d1.short_text().unwrap(),
        "member d1 (d1.img) holds 12 MiB, less than the end of the region its records keep (24 MiB): it was truncated, or another disk is at its path"
    );
    assert_eq!(short.members[0].short_text(), None);

    let sized = text.replace(
        "path = \"d1.img\"\n",
        "path = \"d1.img\"\nsize = \"24MiB\"\n",
    );
    let refused = read(&sized, &Pins::new()).unwrap_err().to_string();
    assert!(
        refused.contains("an existing member must be at least its size"),
        "{refused}"
    );
    for pins in [pins, Pins::finding_short_members()] {
        let short = read(&sized, &pins).unwrap();
        let said = short.members[1].short_text().unwrap();
        assert!(said.ends_with("holds 12 MiB, less than its size in the config (24 MiB): it was truncated, or another disk is at its path"), "{said}");
    }
}

//! Matrix volumes share their members' 1 MiB metadata area (`nbraid_config::metadata_area`):
//! each parity volume's write-hole log and every volume's bitmap go there at create. A log
//! the area has no room left for gets a reserve before its region (the engine then creates
//! the volume); a bitmap it has no room for refuses the config, naming the member, the
//! volumes and what each takes — the daemon refused such a volume after creating the ones
//! before it.

use nbraid_config::{self as config, Config, ConfigError, ErrorKind, Pins};
use std::path::Path;

const MIB: u64 = 1 << 20;

/// `members` members `d0..` of `member_size`, then `volumes` (TOML tables).
fn text(members: usize, member_size: &str, volumes: &str) -> String {
    let mut t = String::new();
    for i in 0..members {
        t += &format!("[[member]]\nid = \"d{i}\"\npath = \"d{i}.img\"\nsize = \"{member_size}\"\n");
    }
    t + volumes
}

/// A volume `name` of `level` over members `d0..d{n-1}`, with more `keys`.
fn volume(name: &str, level: &str, n: usize, keys: &str) -> String {
    let ids: Vec<String> = (0..n).map(|i| format!("\"d{i}\"")).collect();
    format!(
        "[[volume]]\nname = \"{name}\"\nlevel = \"{level}\"\nmembers = [{}]\n{keys}",
        ids.join(", ")
    )
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    config::parse(text, Path::new("arrays.toml"))
}

/// Each volume's write-hole log reserve before its region (`None`: in the metadata area).
fn log_reserves(c: &Config) -> Vec<Option<u64>> {
    c.volumes.iter().map(|v| v.metadata.ppl_log_bytes).collect()
}

/// Three default RAID 5 logs fit one metadata area (512 KiB, then two 140 KiB rings); the
/// fourth's does not, so it goes to a 1 MiB reserve before the region — the daemon created
/// three and refused the fourth.
#[test]
fn a_log_the_metadata_area_has_no_room_left_for_gets_a_reserve() {
    let r5 = |name| volume(name, "raid5", 3, "size = \"32MiB\"\n");
    let three = text(3, "256MiB", &[r5("a"), r5("b"), r5("c")].concat());
    assert_eq!(log_reserves(&parse(&three).unwrap()), [None, None, None]);
    let four = text(3, "256MiB", &[r5("a"), r5("b"), r5("c"), r5("d")].concat());
    let c = parse(&four).unwrap();
    assert_eq!(log_reserves(&c), [None, None, None, Some(MIB)]);
    let (cr, dr) = (c.volumes[2].regions[0], c.volumes[3].regions[0]);
    let sums = c.volumes[3].metadata.checksum_reserve_bytes.unwrap();
    assert_eq!(
        dr.start,
        cr.start + cr.len + sums + MIB,
        "checksums, log, region"
    );
    assert_eq!(c.volumes[3].capacity(), 32 * MIB, "the size asked for");
}

/// Two RAID 6 volumes of 128 KiB strips: the first log takes its 524 KiB ring, the second
/// finds 368 KiB.
#[test]
fn a_second_raid6_of_128_kib_strips_gets_a_reserve() {
    let r6 = |name| {
        volume(
            name,
            "raid6",
            4,
            "strip_size = \"128KiB\"\nsize = \"64MiB\"\n",
        )
    };
    let c = parse(&text(4, "256MiB", &[r6("a"), r6("b")].concat())).unwrap();
    assert_eq!(log_reserves(&c), [None, Some(MIB)]);
    // Logs in reserves (regions of 1 GiB and more) leave the area to the bitmaps.
    let big = |name| {
        volume(
            name,
            "raid6",
            4,
            "strip_size = \"128KiB\"\nsize = \"2GiB\"\n",
        )
    };
    let c = parse(&text(4, "4GiB", &[big("a"), big("b")].concat())).unwrap();
    assert_eq!(log_reserves(&c), [Some(8 * MIB), Some(8 * MIB)]);
}

/// `write_hole = "off"` keeps a log area where one fits (the engine may switch it on):
/// the volumes after it have that much less room.
#[test]
fn a_log_switched_off_still_takes_room_where_it_fits() {
    let r5 = |name, keys: &str| volume(name, "raid5", 3, &format!("size = \"32MiB\"\n{keys}"));
    let vols = [
        r5("off", "write_hole = \"off\"\n"),
        r5("b", ""),
        r5("c", ""),
        r5("d", ""),
    ];
    let c = parse(&text(3, "256MiB", &vols.concat())).unwrap();
    assert_eq!(log_reserves(&c), [None, None, None, Some(MIB)]);
}

/// 14 bitmaps of 64 KiB fill the 896 KiB after the superblock copies; a 15th is refused,
/// at the volume's bitmap_chunk, naming the member, the volumes before it and the ways out.
#[test]
fn a_bitmap_the_metadata_area_has_no_room_for_refuses_the_config() {
    let keys = "size = \"2GiB\"\nbitmap_chunk = \"4KiB\"\nchecksums = \"off\"\n";
    let mirrors = |n: usize| -> String {
        (0..n)
            .map(|i| volume(&format!("v{i}"), "raid1", 2, keys))
            .collect()
    };
    parse(&text(2, "40GiB", &mirrors(14))).expect("14 bitmaps of 64 KiB fit");
    let e = parse(&text(2, "40GiB", &mirrors(15))).unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::Fit), "{e}");
    let msg = e.to_string();
    for says in [
        "volume \"v14\": the 1 MiB metadata area of member \"d0\" has no room for its write-intent bitmap (64 KiB)",
        "896 KiB of the 896 KiB left hold the areas of the volumes already there (\"v0\": bitmap 64 KiB; \"v1\": bitmap 64 KiB;",
        "the largest gap is 0 B",
        "a larger bitmap_chunk",
        "give this volume bitmap_chunk = \"off\"",
        "put fewer volumes on member \"d0\"",
    ] {
        assert!(msg.contains(says), "expected {says:?} in\n{msg}");
    }
    let line = text(2, "40GiB", &mirrors(14)).lines().count() + 6;
    assert!(
        msg.starts_with(&format!("arrays.toml:{line}:16: ")),
        "{msg}"
    );
}

/// A log in the metadata area before a bitmap that finds no room: the way out names it.
#[test]
fn the_refusal_names_the_logs_that_could_move_out() {
    let r5 = volume("r5", "raid5", 3, "size = \"32MiB\"\n");
    let keys = "size = \"2GiB\"\nbitmap_chunk = \"4KiB\"\nchecksums = \"off\"\n";
    let mirrors: String = (0..6)
        .map(|i| volume(&format!("m{i}"), "raid1", 2, keys))
        .collect();
    let e = parse(&text(3, "40GiB", &format!("{r5}{mirrors}"))).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("volume \"m5\"")
            && msg.contains("\"r5\": bitmap 4 KiB + write-hole log 512 KiB")
            && msg.contains("give volume(s) \"r5\" write_hole_log_size = \"1MiB\""),
        "{msg}"
    );
    // Taken: the log goes to its reserve, and the six bitmaps fit.
    let r5 = volume(
        "r5",
        "raid5",
        3,
        "size = \"32MiB\"\nwrite_hole_log_size = \"1MiB\"\n",
    );
    parse(&text(3, "40GiB", &format!("{r5}{mirrors}"))).expect("the log moved out");
}

/// A volume the records place keeps its recorded areas: the config budgets the volumes after
/// it but refuses nothing on its members (`nbraid check` reads the recorded areas).
#[test]
fn members_with_recorded_volumes_are_not_refused_on_a_guess() {
    let keys = "size = \"2GiB\"\nbitmap_chunk = \"4KiB\"\nchecksums = \"off\"\n";
    let mirrors: String = (0..15)
        .map(|i| volume(&format!("v{i}"), "raid1", 2, keys))
        .collect();
    let t = text(2, "40GiB", &mirrors);
    assert!(parse(&t).is_err());
    let mut pins = Pins::new();
    pins.pin("v0", vec![Some(MIB), Some(MIB)], None);
    config::parse_pinned(&t, Path::new("arrays.toml"), &pins).expect("v0 is recorded");
    // Reading for older records refuses nothing either.
    let older = Pins::before_default_log();
    config::parse_pinned(&t, Path::new("arrays.toml"), &older).expect("a trial read");
}

/// A member's superblock holds at most 64 volume records, each name at most 64 bytes: the
/// daemon refused the 65th volume (or a longer name) as "a bug in nbraid".
#[test]
fn a_member_holds_64_volumes_and_a_name_64_bytes() {
    let keys = "size = \"64KiB\"\nchecksums = \"off\"\n";
    let mirrors = |n: usize| -> String {
        (0..n)
            .map(|i| volume(&format!("v{i}"), "raid1", 2, keys))
            .collect()
    };
    parse(&text(2, "64MiB", &mirrors(64))).expect("64 volumes");
    let e = parse(&text(2, "64MiB", &mirrors(65))).unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::Fit), "{e}");
    assert!(
        e.to_string().contains("volume \"v64\": it would be volume 65 on member \"d0\", whose superblock holds the records of at most 64"),
        "{e}"
    );
    let long = "x".repeat(65);
    let e = parse(&text(2, "64MiB", &volume(&long, "raid1", 2, ""))).unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::Name), "{e}");
    assert!(
        e.to_string().contains(
            "is 65 bytes long; a volume's superblock records hold names of at most 64 bytes"
        ),
        "{e}"
    );
    parse(&text(2, "64MiB", &volume(&"x".repeat(64), "raid1", 2, ""))).expect("64 bytes");
}

/// Four RAID 5 volumes of 128 MiB over three members of `member_size` at `paths`
/// (`{i}`: the member's index), each with more `keys`.
fn four_r5(paths: &str, member_size: &str, keys: &str) -> String {
    let mut t = String::new();
    for i in 0..3 {
        let path = paths.replace("{i}", &i.to_string());
        t += &format!("[[member]]\nid = \"d{i}\"\npath = \"{path}\"\nsize = \"{member_size}\"\n");
    }
    let keys = format!("size = \"128MiB\"\n{keys}");
    let vols = ["a", "b", "c", "d"].map(|n| volume(n, "raid5", 3, &keys));
    t + &vols.concat()
}

/// Each volume's region start on its first member.
fn starts(c: &Config) -> Vec<u64> {
    c.volumes.iter().map(|v| v.regions[0].start).collect()
}

/// An existing array whose records hold no log area (`write_hole = "off"`, or an nbraid
/// before the log) with the log then switched on: today's rule gives the fourth log a
/// reserve the full members cannot hold, so the first read fails; the read for older records
/// (`nbraid_assembly::pins` falls back to it to find the records) must not add that reserve,
/// or the records are never read. Pinned where the records put them, the config is accepted.
#[test]
fn the_read_for_older_records_gives_no_log_a_reserve_for_room() {
    let at = Path::new("arrays.toml");
    let created = parse(&four_r5("d{i}.img", "261MiB", "write_hole = \"off\"\n")).unwrap();
    let on = four_r5("d{i}.img", "261MiB", "");
    assert!(
        parse(&on).is_err(),
        "today's rule: the fourth log's reserve does not fit"
    );
    let older = config::parse_pinned(&on, at, &Pins::before_default_log())
        .expect("the read for older records places the volumes");
    assert_eq!(starts(&older), starts(&created));
    assert_eq!(log_reserves(&older), [None; 4]);
    let mut pins = Pins::new();
    for v in &created.volumes {
        pins.pin(
            &v.name,
            v.regions.iter().map(|r| Some(r.start)).collect(),
            None,
        );
    }
    let pinned = config::parse_pinned(&on, at, &pins).expect("placed where recorded");
    assert_eq!(starts(&pinned), starts(&created));
}

/// A volume with a member on an NBD server: its records cannot be read before a start, so
/// nothing pins it and the config's placement is final — it keeps the rule it was created
/// under. A log with no room left in the metadata area gets no reserve (that moved the fourth
/// volume's region by 1 MiB and the start refused it: "geometry changed"), and no area is
/// refused on the config's guess of the metadata area.
#[test]
fn a_volume_with_a_remote_member_gets_no_reserve_for_room() {
    let remote = four_r5("nbd://10.0.0.{i}:10809/disk", "300MiB", "");
    let off = four_r5(
        "nbd://10.0.0.{i}:10809/disk",
        "300MiB",
        "write_hole = \"off\"\n",
    );
    let c = parse(&remote).unwrap();
    assert_eq!(log_reserves(&c), [None; 4]);
    assert_eq!(starts(&c), starts(&parse(&off).unwrap()));
    // Files: the fourth log gets its reserve, and its region moves.
    let files = parse(&four_r5("d{i}.img", "300MiB", "")).unwrap();
    assert_eq!(log_reserves(&files), [None, None, None, Some(MIB)]);
    // Fifteen 64 KiB bitmaps on remote members: not refused on the guess.
    let keys = "size = \"2GiB\"\nbitmap_chunk = \"4KiB\"\nchecksums = \"off\"\n";
    let mut t = String::new();
    for i in 0..2 {
        t += &format!("[[member]]\nid = \"d{i}\"\npath = \"nbd://h{i}/e\"\nsize = \"40GiB\"\n");
    }
    for i in 0..15 {
        t += &volume(&format!("v{i}"), "raid1", 2, keys);
    }
    parse(&t).expect("remote members: the start decides");
}

/// The size a "does not fit" suggests (`size = "..."`), if any.
fn suggested(message: &str) -> Option<String> {
    let at = message.rfind("(size = \"")? + "(size = \"".len();
    Some(message[at..].split('"').next()?.to_string())
}

/// A size that does not fit is refused with the size that does — counting that size's own
/// checksum and write-hole reserves — at every strip the config accepts; the suggestion was
/// measured without them and then refused with a smaller one (the geometry hunt's chains:
/// 200 → 126 → 124 MiB, RAID 6 at 1 MiB 126 → 114 MiB, RAID 5 at 16 MiB 96 → 32 MiB).
#[test]
fn the_size_a_refusal_suggests_fits() {
    for (level, n) in [
        ("raid5", 3),
        ("raid6", 4),
        ("raid1", 2),
        ("raid0", 3),
        ("raid10", 4),
    ] {
        for strip in ["4KiB", "64KiB", "256KiB", "1MiB", "4MiB", "16MiB"] {
            for checksums in ["on", "off"] {
                let keys = format!(
                    "strip_size = \"{strip}\"\nchecksums = \"{checksums}\"\nsize = \"500MiB\"\n"
                );
                let text = text(n, "64MiB", &volume("v", level, n, &keys));
                let what = format!("{level} ×{n}, {strip}, checksums {checksums}");
                let e = parse(&text).expect_err("500 MiB does not fit");
                let Some(size) = suggested(&e.to_string()) else {
                    continue; // not even one strip fits: nothing to suggest
                };
                let fixed = text.replace("size = \"500MiB\"", &format!("size = \"{size}\""));
                if let Err(e) = parse(&fixed) {
                    panic!("{what}: the suggested size {size} is refused: {e}");
                }
            }
        }
    }
}

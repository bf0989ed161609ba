//! Matrix volumes share their members' 1 MiB metadata area (bitmaps, write-hole logs): what
//! `nbraid check` accepts the daemon creates, and what it refuses the daemon refuses — two
//! RAID 6 volumes of 128 KiB strips, or four default RAID 5 volumes, were accepted by check
//! and the daemon refused the second (fourth) after creating the first.

mod common;

use common::{daemon_and_members, nbraid, ok, Daemon};
use nbraid_config::metadata_area::{self, Area, AreaAsk};
use nbraid_config::{Config, Pins};
use std::path::Path;

/// A config over `n` file members `m0..` of `member_size`, served on a Unix socket, then
/// `volumes` (TOML tables); its path.
fn config(dir: &Path, n: usize, member_size: &str, volumes: &str) -> String {
    let mut text = daemon_and_members("m", n, member_size);
    text += volumes;
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file.to_str().unwrap().to_string()
}

/// Volume `name` of `level` over the first `n` members, with more `keys`.
fn volume(name: &str, level: &str, n: usize, keys: &str) -> String {
    let ids: Vec<String> = (0..n).map(|i| format!("\"m{i}\"")).collect();
    format!(
        "[[volume]]\nname = \"{name}\"\nlevel = \"{level}\"\nmembers = [{}]\n{keys}\n",
        ids.join(", ")
    )
}

/// `check` accepts `cfg`, the daemon starts on it and stops, and `check` then finds every
/// one of `names` healthy.
fn starts_as_check_said(cfg: &str, names: &[&str]) -> String {
    let said = ok(nbraid(&["check", cfg]), "nbraid check");
    Daemon::start(Path::new(cfg)).stop();
    let after = ok(nbraid(&["check", cfg]), "nbraid check after the start");
    for n in names {
        assert!(after.contains(&format!("  {n}: healthy")), "{after}");
    }
    said
}

#[test]
fn four_default_raid5_volumes_on_three_members_all_start() {
    let dir = tempfile::tempdir().unwrap();
    let r5 = |n| volume(n, "raid5", 3, "size = \"32MiB\"");
    let vols = [r5("a"), r5("b"), r5("c"), r5("d")].concat();
    let cfg = config(dir.path(), 3, "256MiB", &vols);
    let said = starts_as_check_said(&cfg, &["a", "b", "c", "d"]);
    // The fourth log found no room in the metadata area: it has a reserve.
    assert!(
        said.contains("\nd: parity left-symmetric, cache write-back (64 MiB), write-hole log 1 MiB per member"),
        "{said}"
    );
}

#[test]
fn two_raid6_volumes_of_128_kib_strips_on_the_same_members_both_start() {
    let dir = tempfile::tempdir().unwrap();
    let r6 = |n| volume(n, "raid6", 4, "strip_size = \"128KiB\"\nsize = \"64MiB\"");
    let cfg = config(dir.path(), 4, "256MiB", &[r6("a"), r6("b")].concat());
    starts_as_check_said(&cfg, &["a", "b"]);
}

/// RAID 1 volumes `v0..v{n-1}` whose bitmaps take 64 KiB each (2 GiB at 4 KiB per bit):
/// 14 fill the 896 KiB after the superblock copies.
fn mirrors(n: usize) -> String {
    let keys = "size = \"2GiB\"\nbitmap_chunk = \"4KiB\"\nchecksums = \"off\"";
    (0..n)
        .map(|i| volume(&format!("v{i}"), "raid1", 2, keys))
        .collect()
}

#[test]
fn a_bitmap_the_metadata_area_cannot_hold_is_refused_by_check_and_start_alike() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2, "40GiB", &mirrors(15));
    let o = nbraid(&["check", &cfg]);
    assert!(!o.status.success(), "check accepted 15 bitmaps of 64 KiB");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        err.contains("volume \"v14\": the 1 MiB metadata area of member \"m0\" has no room for its write-intent bitmap (64 KiB)")
            && err.contains("put fewer volumes on member \"m0\""),
        "{err}"
    );
    let bin = common::nbraidd_path();
    let o = std::process::Command::new(bin)
        .args(["--config", &cfg, "--log-level", "error"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "the daemon started");
    let daemon_err = String::from_utf8_lossy(&o.stderr);
    assert!(
        daemon_err.contains("has no room for its write-intent bitmap"),
        "{daemon_err}"
    );
    assert!(
        !dir.path().join("m0.img").exists(),
        "a member file was created"
    );
    // One fewer just fits, and starts.
    let cfg = config(dir.path(), 2, "40GiB", &mirrors(14));
    starts_as_check_said(&cfg, &["v0", "v13"]);
}

/// The records place existing volumes' areas: a new volume beside them is judged on what
/// they hold, and `check` fails as the start would.
#[test]
fn a_new_volume_beside_recorded_ones_is_judged_on_the_recorded_areas() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2, "40GiB", &mirrors(14));
    Daemon::start(Path::new(&cfg)).stop();
    let cfg = config(dir.path(), 2, "40GiB", &mirrors(15));
    let o = nbraid(&["check", &cfg]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(!o.status.success(), "check exited 0:\n{out}");
    assert!(
        out.contains("v14: refused: the 1 MiB metadata area of member \"m0\" has no room for its write-intent bitmap (64 KiB)")
            && out.contains("\"v13\": bitmap 64 KiB) and the largest gap is 0 B"),
        "{out}"
    );
    let bin = common::nbraidd_path();
    let o = std::process::Command::new(bin)
        .args(["--config", &cfg, "--log-level", "error"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "the daemon started");
}

/// Deterministic pseudo-random numbers (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len() as u64) as usize]
    }
}

/// A random Matrix config over four 8 GiB members: up to 8 volumes of mixed levels, strips,
/// bitmap chunks and write-hole settings, regions of at most 512 MiB (their logs default to
/// the metadata area), bitmaps up to 64 KiB.
fn random_volumes(rng: &mut Rng) -> String {
    let mut out = String::new();
    for i in 0..1 + rng.below(8) {
        // (level, members, data members)
        let (level, n, data) = match rng.below(6) {
            0 => ("raid1", 2, 1),
            1 => ("raid10", 4, 2),
            2 => ("raid5", 3, 2),
            3 => ("raid5", 4, 3),
            4 => ("raid6", 4, 2),
            _ => ("raid0", 4, 4),
        };
        let region_mib = [16, 64, 512, 512][rng.below(4) as usize];
        let mut keys = format!("size = \"{}MiB\"\n", region_mib * data);
        if level != "raid1" {
            let strip = rng.pick(&["4KiB", "16KiB", "64KiB", "128KiB", "256KiB"]);
            keys += &format!("strip_size = \"{strip}\"\n");
        }
        keys += rng.pick(&[
            "bitmap_chunk = \"4KiB\"\n",
            "bitmap_chunk = \"4KiB\"\n",
            "bitmap_chunk = \"off\"\n",
            "",
        ]);
        if level.starts_with("raid5") || level.starts_with("raid6") {
            keys += rng.pick(&[
                "",
                "",
                "write_hole = \"off\"\n",
                "write_hole_log_size = \"4MiB\"\n",
            ]);
        }
        keys += rng.pick(&["", "checksums = \"off\"\n"]);
        out += &volume(&format!("v{i}"), level, n, &keys);
    }
    out
}

/// Each member's metadata area as the config predicts it: the volumes in file order on
/// fresh members.
fn predicted(c: &Config) -> Vec<Vec<(String, Area)>> {
    let mut by_member: Vec<Vec<(String, Area)>> = vec![Vec::new(); c.members.len()];
    for v in &c.volumes {
        let ask = AreaAsk::of(v);
        for &m in &v.members {
            let taken: Vec<Area> = by_member[m].iter().map(|(_, a)| *a).collect();
            let placed = metadata_area::place(&taken, &ask).expect("the config placed it");
            by_member[m].extend(placed.into_iter().map(|a| (v.name.clone(), a)));
        }
    }
    by_member
}

/// What the member files' superblocks record in their metadata areas: (volume, bitmap or
/// log, offset, length), sorted.
fn recorded(c: &Config) -> Vec<Vec<(String, String, u64, u64)>> {
    c.members
        .iter()
        .map(|m| {
            let probe = nbraid_assembly::preflight::read_probe(&m.path, &m.id);
            // A member no volume uses has none.
            let nbraid_core::metadata::Probe::Superblock(sb, _) = probe else {
                return Vec::new();
            };
            let mut out = Vec::new();
            for v in &sb.volumes {
                for (kind, a) in [
                    ("bitmap", v.bitmap.map(|b| b.area)),
                    ("write-hole log", v.ppl),
                ] {
                    if let Some(a) = a.filter(|a| a.offset < 1 << 20) {
                        out.push((v.name.clone(), kind.to_string(), a.offset, a.len));
                    }
                }
            }
            out.sort();
            out
        })
        .collect()
}

fn as_rows(areas: &[(String, Area)]) -> Vec<(String, String, u64, u64)> {
    let mut rows: Vec<_> = (areas.iter())
        .map(|(n, a)| {
            (
                n.clone(),
                a.kind.name().to_string(),
                a.offset_bytes,
                a.len_bytes,
            )
        })
        .collect();
    rows.sort();
    rows
}

/// The config's budget is the engine's rule: over random Matrix configs, a config it accepts
/// is created whole with every area where it predicted, and one it refuses (a bitmap with no
/// room) the engine refuses too when asked to create it anyway.
#[test]
fn the_config_budgets_the_metadata_area_exactly_as_create_fills_it() {
    let (mut accepted, mut refused, mut moved) = (0, 0, 0);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..64 {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path(), 4, "8GiB", &random_volumes(&mut rng));
        let text = std::fs::read_to_string(&cfg).unwrap();
        let what = format!("round {round}:\n{text}");
        match nbraid_config::load(&cfg) {
            Ok(c) => {
                let started = nbraid_assembly::assemble::assemble(&c);
                let e = started
                    .as_ref()
                    .err()
                    .map(|e| nbraid_assembly::error_text::error_text(e));
                assert!(e.is_none(), "{what}\nthe start refused: {e:?}");
                drop(started);
                let want: Vec<_> = predicted(&c).iter().map(|a| as_rows(a)).collect();
                assert_eq!(recorded(&c), want, "{what}");
                accepted += 1;
                // Logs the metadata area had no room left for, given a reserve.
                let given = |name: &str| {
                    let table = text
                        .split("[[volume]]")
                        .find(|t| t.contains(&format!("name = \"{name}\"\n")));
                    table.is_some_and(|t| t.contains("write_hole_log_size"))
                };
                moved += (c.volumes.iter())
                    .filter(|v| v.metadata.ppl_log_bytes.is_some() && !given(&v.name))
                    .filter(|v| nbraid_layout::log_reserve_bytes(v.geometry.root()).is_none())
                    .count();
            }
            Err(e) => {
                assert!(e.to_string().contains("metadata area"), "{what}\n{e}");
                // Without the budget's refusal (a trial read refuses nothing), create fails.
                let trial = nbraid_config::parse_pinned(
                    &text,
                    Path::new(&cfg),
                    &Pins::before_default_log(),
                );
                let c = trial.expect("the trial read accepts it");
                let started = nbraid_assembly::assemble::assemble(&c);
                let e = started
                    .err()
                    .map(|e| nbraid_assembly::error_text::error_text(&e));
                assert!(
                    e.as_ref()
                        .is_some_and(|e| e.contains("no room for a") && e.contains("bitmap")),
                    "{what}\nthe start said {e:?}"
                );
                refused += 1;
            }
        }
    }
    let counts =
        format!("{accepted} accepted ({moved} logs moved to a reserve), {refused} refused");
    eprintln!("{counts}");
    assert!(accepted > 0 && moved > 0 && refused > 0, "{counts}");
}

/// The config's copy of the engine's figures is the engine's.
#[test]
fn the_config_budget_uses_the_engine_figures() {
    use nbraid_core::metadata::{intent, METADATA_AREA_BYTES, SLOT_BYTES};
    assert_eq!(metadata_area::METADATA_AREA_BYTES, METADATA_AREA_BYTES);
    assert_eq!(metadata_area::SUPERBLOCK_COPY_BYTES, SLOT_BYTES);
    assert_eq!(metadata_area::BITMAP_MAX_BYTES, intent::MAX_BITMAP_BYTES);
    assert_eq!(
        metadata_area::LOG_AREA_DEFAULT_BYTES,
        nbraid_core::ppl::DEFAULT_AREA_BYTES
    );
    for capacity in [4096, 1 << 20, 3 << 30, 1 << 40, (1 << 50) + 12345] {
        for wanted in [4096, 1 << 16, 64 << 20, 1 << 30] {
            let chunk = intent::chunk_for(capacity, wanted);
            assert_eq!(metadata_area::bitmap_chunk_bytes(capacity, wanted), chunk);
            let bytes = intent::area_bytes(capacity, chunk);
            assert_eq!(metadata_area::bitmap_area_bytes(capacity, chunk), bytes);
        }
    }
}

/// An existing array whose records hold no log area (created with `write_hole = "off"`, or
/// by an nbraid before the log) and whose config then drops the line: today's rule would
/// give the fourth volume's new log a reserve the full members cannot hold, but the volumes
/// stay where their records put them — check and the start accept it (the start warns that
/// the records hold no log area), as before the metadata area was budgeted. Both reads the
/// records are found through refused it, so the records were never read.
#[test]
fn an_existing_array_without_log_areas_still_starts_when_the_log_is_switched_on() {
    let dir = tempfile::tempdir().unwrap();
    let r5 = |n, keys| volume(n, "raid5", 3, keys);
    let off = "size = \"128MiB\"\nwrite_hole = \"off\"";
    let vols = [r5("a", off), r5("b", off), r5("c", off), r5("d", off)].concat();
    let cfg = config(dir.path(), 3, "261MiB", &vols);
    ok(nbraid(&["create", &cfg]), "nbraid create");
    let on = "size = \"128MiB\"";
    let vols = [r5("a", on), r5("b", on), r5("c", on), r5("d", on)].concat();
    let cfg = config(dir.path(), 3, "261MiB", &vols);
    starts_as_check_said(&cfg, &["a", "b", "c", "d"]);
}

/// A log's room is judged beside the bitmap the engine will create: that of the regions the
/// volume gets without a log reserve (behind its checksum reserve). Judged on regions placed
/// without any reserve, a `size = "all"` volume's bitmap came out a 4 KiB block larger and
/// its log got a 1 MiB reserve the engine did not need — here the log fits in the area.
#[test]
fn a_log_is_judged_beside_the_bitmap_the_engine_creates() {
    let dir = tempfile::tempdir().unwrap();
    let keys = |size: &str| format!("{size}bitmap_chunk = \"4KiB\"");
    let vols = [
        volume("a", "raid5", 3, &keys("size = \"320MiB\"\n")),
        volume("x", "raid5", 3, &keys("size = \"1024MiB\"\n")),
        volume("b", "raid5", 3, &keys("")),
    ]
    .concat();
    let cfg = config(dir.path(), 3, "1637MiB", &vols);
    let c = nbraid_config::load(&cfg).unwrap();
    let b = &c.volumes[2];
    assert_eq!(
        b.metadata.ppl_log_bytes, None,
        "b's log: in the metadata area"
    );
    let started = nbraid_assembly::assemble::assemble(&c);
    let e = (started.as_ref().err()).map(|e| nbraid_assembly::error_text::error_text(e));
    assert!(e.is_none(), "the start refused: {e:?}");
    drop(started);
    let want: Vec<_> = predicted(&c).iter().map(|a| as_rows(a)).collect();
    assert_eq!(recorded(&c), want);
    assert!(want[0]
        .iter()
        .any(|(n, k, _, _)| n == "b" && k == "write-hole log"));
}

//! Every way a config can be wrong gives one error at the right file:line:column, naming the
//! table and field and saying what would be valid.

mod common;

use common::{expect, refused};
use nbraid_config::{self as config, ConfigError, ErrorKind};

/// Four 1 GiB members a0..a3 (lines 1-16), then `rest`.
const MEMBERS: &str = r#"[[member]]
id = "a0"
path = "nowhere/a0.img"
size = "1GiB"
[[member]]
id = "a1"
path = "nowhere/a1.img"
size = "1GiB"
[[member]]
id = "a2"
path = "nowhere/a2.img"
size = "1GiB"
[[member]]
id = "a3"
path = "nowhere/a3.img"
size = "1GiB"
"#;

/// The error for `MEMBERS` + `rest` (the volume tables start at line 17).
fn err(rest: &str) -> ConfigError {
    refused(&format!("{MEMBERS}{rest}"))
}

#[test]
fn not_toml() {
    let e = refused("[[member]]\nid = \"a0\npath = \"x\"\n");
    expect(
        &e,
        ErrorKind::Syntax,
        "configs/bad.toml:2:9: not valid TOML: ",
        &["string"],
    );
}

#[test]
fn unknown_key_suggests_the_right_one() {
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nstrip = \"64KiB\"\nmembers = [\"a0\", \"a1\", \"a2\"]\n");
    expect(
        &e,
        ErrorKind::Schema,
        "configs/bad.toml:20:1: volume \"db\": unknown field `strip`, expected one of ",
        &["did you mean `strip_size`?"],
    );
}

#[test]
fn unknown_table() {
    let e = refused("[[members]]\nid = \"a0\"\n");
    expect(
        &e,
        ErrorKind::Schema,
        "configs/bad.toml:1:3: unknown field `members`, expected one of `daemon`, `member`, `volume`, `bench`; did you mean `member`?",
        &[],
    );
}

#[test]
fn unknown_member_key() {
    let e = refused("[[member]]\nid = \"a0\"\npaht = \"x.img\"\n");
    expect(
        &e,
        ErrorKind::Schema,
        "configs/bad.toml:3:1: member \"a0\": unknown field `paht`, expected one of `id`, `path`, `size`, `timeout`, `connections`; did you mean `path`?",
        &[],
    );
}

#[test]
fn missing_key() {
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid5\"\n");
    expect(
        &e,
        ErrorKind::Schema,
        "configs/bad.toml:17:1: volume \"db\": missing field `members`",
        &[],
    );
}

#[test]
fn wrong_type_names_the_field() {
    let e =
        err("[[volume]]\nname = \"db\"\nlevel = \"raid50\"\nspans = \"two\"\nmembers = [\"a0\"]\n");
    expect(
        &e,
        ErrorKind::Schema,
        "configs/bad.toml:20:9: volume \"db\": spans: invalid type: string \"two\", expected an integer",
        &[],
    );
}

#[test]
fn unknown_level() {
    let e =
        err("[[volume]]\nname = \"db\"\nlevel = \"raid7\"\nmembers = [\"a0\", \"a1\", \"a2\"]\n");
    expect(
        &e,
        ErrorKind::Level,
        "configs/bad.toml:19:9: volume \"db\": level: unknown level `raid7`; valid: jbod (concat), raid0, raid1, raid5, raid6, raid10, raid50, raid60",
        &[],
    );
}

#[test]
fn too_few_members() {
    let e =
        err("[[volume]]\nname = \"db\"\nlevel = \"raid6\"\nmembers = [\"a0\", \"a1\", \"a2\"]\n");
    expect(
        &e,
        ErrorKind::Members,
        "configs/bad.toml:20:11: volume \"db\": members: raid6 needs at least 4 members, got 3",
        &[],
    );
}

#[test]
fn spans_do_not_divide() {
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid10\"\nspans = 3\nmembers = [\"a0\", \"a1\", \"a2\", \"a3\"]\n");
    expect(
        &e,
        ErrorKind::Members,
        "configs/bad.toml:20:9: volume \"db\": 4 members cannot be divided into 3 spans",
        &["valid spans for 4 members: 2"],
    );
}

#[test]
fn span_too_small() {
    let text = format!(
        "{MEMBERS}{}",
        "[[member]]\nid = \"a4\"\npath = \"nowhere/a4.img\"\nsize = \"1GiB\"\n\
         [[member]]\nid = \"a5\"\npath = \"nowhere/a5.img\"\nsize = \"1GiB\"\n\
         [[volume]]\nname = \"db\"\nlevel = \"raid50\"\nspans = 3\n\
         members = [\"a0\", \"a1\", \"a2\", \"a3\", \"a4\", \"a5\"]\n"
    );
    let e = refused(&text);
    expect(
        &e,
        ErrorKind::Members,
        "configs/bad.toml:28:9: volume \"db\": raid50 with 3 spans needs at least 3 members per span, got 2",
        &["valid spans for 6 members: 2"],
    );
}

#[test]
fn spans_on_a_level_without_spans() {
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nspans = 2\nmembers = [\"a0\", \"a1\", \"a2\", \"a3\"]\n");
    expect(
        &e,
        ErrorKind::Members,
        "configs/bad.toml:20:9: volume \"db\": raid5 takes no `spans`",
        &["remove spans"],
    );
}

#[test]
fn unknown_member_in_volume() {
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid1\"\nmembers = [\"a0\", \"b9\"]\n");
    expect(
        &e,
        ErrorKind::UnknownMember,
        "configs/bad.toml:20:18: volume \"db\": members: unknown member \"b9\"; defined members: a0, a1, a2, a3",
        &[],
    );
}

#[test]
fn duplicate_member_id() {
    let e = err("[[member]]\nid = \"a2\"\npath = \"nowhere/b.img\"\nsize = \"1GiB\"\n");
    expect(
        &e,
        ErrorKind::Duplicate,
        "configs/bad.toml:18:6: member \"a2\": duplicate member id (first defined at line 10); member ids must be unique",
        &[],
    );
}

#[test]
fn duplicate_path_even_when_spelt_differently() {
    let e =
        err("[[member]]\nid = \"b0\"\npath = \"./nowhere/../nowhere/a1.img\"\nsize = \"1GiB\"\n");
    expect(
        &e,
        ErrorKind::Duplicate,
        "configs/bad.toml:19:8: member \"b0\": path \"./nowhere/../nowhere/a1.img\" is already used by member \"a1\" (line 6)",
        &["its own file or device"],
    );
}

#[test]
fn member_twice_in_one_volume() {
    let e =
        err("[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nmembers = [\"a0\", \"a1\", \"a0\"]\n");
    expect(
        &e,
        ErrorKind::Duplicate,
        "configs/bad.toml:20:24: volume \"db\": members: member \"a0\" is listed twice",
        &[],
    );
}

#[test]
fn duplicate_volume_name() {
    let e = err(concat!(
        "[[volume]]\nname = \"db\"\nlevel = \"raid1\"\nmembers = [\"a0\", \"a1\"]\nsize = \"100MiB\"\n",
        "[[volume]]\nname = \"db\"\nlevel = \"raid0\"\nmembers = [\"a2\", \"a3\"]\n",
    ));
    expect(
        &e,
        ErrorKind::Duplicate,
        "configs/bad.toml:23:8: volume \"db\": duplicate volume name (first used at line 18)",
        &["NBD export names"],
    );
}

#[test]
fn strip_not_a_power_of_two() {
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nmembers = [\"a0\", \"a1\", \"a2\"]\nstrip_size = \"48KiB\"\n");
    assert_eq!(
        e.to_string(),
        "configs/bad.toml:21:14: volume \"db\": strip_size \"48KiB\" is not a power of two; valid: 4KiB, 8KiB, 16KiB, … 16MiB (powers of two); nearest: 32KiB or 64KiB"
    );
    assert_eq!(e.kind(), Some(ErrorKind::Strip));
}

#[test]
fn strip_out_of_range() {
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid0\"\nmembers = [\"a0\", \"a1\"]\nstrip_size = \"2KiB\"\n");
    assert_eq!(
        e.to_string(),
        "configs/bad.toml:21:14: volume \"db\": strip_size \"2KiB\" is out of range; valid: 4KiB, 8KiB, 16KiB, … 16MiB (powers of two)"
    );
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid0\"\nmembers = [\"a0\", \"a1\"]\nstrip_size = \"32MiB\"\n");
    expect(
        &e,
        ErrorKind::Strip,
        "configs/bad.toml:21:14: volume \"db\": strip_size \"32MiB\" is out of range",
        &[],
    );
}

#[test]
fn strip_on_a_mirror() {
    let e = err("[[volume]]\nname = \"m\"\nlevel = \"raid1\"\nmembers = [\"a0\", \"a1\"]\nstrip_size = \"64KiB\"\n");
    expect(
        &e,
        ErrorKind::Option,
        "configs/bad.toml:21:14: volume \"m\": strip_size does not apply to raid1",
        &[],
    );
}

#[test]
fn unparsable_sizes_say_which_units_are_decimal() {
    let e = refused("[[member]]\nid = \"a0\"\npath = \"x.img\"\nsize = \"4 GBs\"\n");
    expect(
        &e,
        ErrorKind::Size,
        "configs/bad.toml:4:8: member \"a0\": size \"4 GBs\" has an unknown unit \"GBs\"; ",
        &[
            "B, KiB, MiB, GiB, TiB, PiB (binary, powers of 1024)",
            "KB, MB, GB, TB, PB (decimal, powers of 1000)",
        ],
    );
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid1\"\nmembers = [\"a0\", \"a1\"]\nsize = \"lots\"\n");
    expect(
        &e,
        ErrorKind::Size,
        "configs/bad.toml:21:8: volume \"db\": size \"lots\" is not a size; ",
        &["or \"all\""],
    );
    let e = err(
        "[[volume]]\nname = \"db\"\nlevel = \"raid1\"\nmembers = [\"a0\", \"a1\"]\nsize = -5\n",
    );
    expect(
        &e,
        ErrorKind::Size,
        "configs/bad.toml:21:8: volume \"db\": size -5 is not a size: it must be positive",
        &[],
    );
}

#[test]
fn member_too_small() {
    // No volume uses it: what the smallest volume and one with the defaults need.
    let e = refused("[[member]]\nid = \"a0\"\npath = \"x.img\"\nsize = \"1MiB\"\n");
    expect(
        &e,
        ErrorKind::Size,
        "configs/bad.toml:4:8: member \"a0\": size \"1MiB\" is too small to hold a volume: a member needs at least 2.06 MiB (size = \"2112KiB\") for one with the defaults — the 1 MiB metadata area, 1 MiB of block checksums before the region, one 64 KiB strip — and 1.00 MiB (size = \"1028KiB\") for the smallest (a jbod with checksums = \"off\": the 1 MiB metadata area, one 4 KiB block)",
        &[],
    );
    // A volume uses it: what that volume needs, from its geometry.
    let small = MEMBERS.replacen("size = \"1GiB\"", "size = \"1MiB\"", 1);
    let r5 = "[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nstrip_size = \"128KiB\"\nmembers = [\"a0\", \"a1\", \"a2\"]\n";
    expect(
        &refused(&format!("{small}{r5}")),
        ErrorKind::Size,
        "configs/bad.toml:4:8: member \"a0\": size \"1MiB\" is too small for volume \"db\": it needs at least 2.12 MiB (size = \"2176KiB\"): the 1 MiB metadata area, 1 MiB of block checksums before the region, one 128 KiB strip",
        &[],
    );
    // That much is enough: one strip on it.
    let enough = MEMBERS.replacen("size = \"1GiB\"", "size = \"2176KiB\"", 1);
    let c = common::check(&format!("{enough}{r5}")).expect("the least it named");
    assert_eq!(c.volumes[0].regions[0].len, 128 << 10);
    let r1 = "[[volume]]\nname = \"sys\"\nlevel = \"raid1\"\nmembers = [\"a1\", \"a0\"]\nsize = \"1MiB\"\nchecksums = \"off\"\n";
    expect(
        &refused(&format!("{small}{r1}")),
        ErrorKind::Size,
        "configs/bad.toml:4:8: member \"a0\": size \"1MiB\" is too small for volume \"sys\": it needs at least 2 MiB (size = \"2MiB\"): the 1 MiB metadata area, the 1 MiB region its size needs",
        &[],
    );
    // An existing file that gives its own size: located at its path.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tiny.img");
    std::fs::write(&file, vec![0u8; 4096]).unwrap();
    let text = format!(
        "[[member]]\nid = \"t\"\npath = \"{}\"\n[[volume]]\nname = \"j\"\nlevel = \"jbod\"\nmembers = [\"t\"]\nchecksums = \"off\"\n",
        file.display()
    );
    expect(
        &refused(&text),
        ErrorKind::Size,
        &format!(
            "configs/bad.toml:3:8: member \"t\": \"{}\", which holds only 4096 bytes, is too small for volume \"j\": it needs at least 1.00 MiB (size = \"1028KiB\"): the 1 MiB metadata area, one 4 KiB block",
            file.display()
        ),
        &[],
    );
}

#[test]
fn volume_too_large() {
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nmembers = [\"a0\", \"a1\", \"a2\"]\nsize = \"3GiB\"\n");
    expect(
        &e,
        ErrorKind::Fit,
        "configs/bad.toml:21:8: volume \"db\": size 3 GiB does not fit: raid5 over 3 members needs 1.50 GiB (1610612736 bytes) on each member, but member \"a0\" has only 1023 MiB free: 1 GiB minus the 1 MiB metadata reserve; at most 1.99 GiB fits with its reserves (size = \"2042MiB\")",
        &[],
    );
}

#[test]
fn second_volume_finds_no_room() {
    let e = err(concat!(
        "[[volume]]\nname = \"mirror\"\nlevel = \"raid1\"\nmembers = [\"a0\", \"a1\"]\n",
        "[[volume]]\nname = \"stripe\"\nlevel = \"raid0\"\nmembers = [\"a1\", \"a2\"]\n",
    ));
    expect(
        &e,
        ErrorKind::Fit,
        "configs/bad.toml:22:8: volume \"stripe\": no room for one 64 KiB strip of raid0 on member \"a1\" (0 B free: 1 GiB minus the 1 MiB metadata reserve, minus 3 MiB used by the block checksums of volume \"mirror\", minus 1020 MiB used by volume \"mirror\"): give it size = \"1048640KiB\" or more",
        &[],
    );
}

#[test]
fn jbod_too_large() {
    let e = err(
        "[[volume]]\nname = \"j\"\nlevel = \"jbod\"\nmembers = [\"a0\", \"a1\"]\nsize = \"4GiB\"\n",
    );
    expect(
        &e,
        ErrorKind::Fit,
        "configs/bad.toml:21:8: volume \"j\": does not fit: jbod needs 4 GiB (4294967296 bytes) in total, but its members have only 1.99 GiB (2145386496 bytes) free",
        &[],
    );
}

#[test]
fn bad_listen_addresses() {
    let e = refused(&format!(
        "[daemon]\nlisten = [\"tcp:127.0.0.1:10809\", \"tcp:localhost:10809\"]\n{MEMBERS}"
    ));
    expect(
        &e,
        ErrorKind::Listen,
        "configs/bad.toml:2:34: daemon: listen address \"tcp:localhost:10809\" is not valid: \"localhost:10809\" is not an IP address and port; valid: \"unix:/run/nbraid/nbd.sock\"",
        &["\"tcp:127.0.0.1:10809\""],
    );
    let e = refused(&format!(
        "[daemon]\nlisten = [\"127.0.0.1:10809\"]\n{MEMBERS}"
    ));
    expect(
        &e,
        ErrorKind::Listen,
        "configs/bad.toml:2:11: daemon: listen address \"127.0.0.1:10809\" is not valid: it does not start with \"unix:\" or \"tcp:\"",
        &[],
    );
    let e = refused(&format!(
        "[daemon]\nlisten = [\"tcp:127.0.0.1\"]\n{MEMBERS}"
    ));
    expect(
        &e,
        ErrorKind::Listen,
        "configs/bad.toml:2:11: daemon: listen address \"tcp:127.0.0.1\" is not valid: \"127.0.0.1\" has no port (NBD's port is 10809)",
        &[],
    );
    let e = refused(&format!(
        "[daemon]\nlisten = [\"unix:a.sock\", \"unix:a.sock\"]\n{MEMBERS}"
    ));
    expect(
        &e,
        ErrorKind::Duplicate,
        "configs/bad.toml:2:26: daemon: listen address \"unix:a.sock\" is given twice",
        &[],
    );
}

#[test]
fn parity_layout_and_policies() {
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nmembers = [\"a0\", \"a1\", \"a2\"]\nparity_layout = \"diagonal\"\n");
    expect(&e, ErrorKind::Option, "configs/bad.toml:21:17: volume \"db\": parity_layout: unknown parity layout `diagonal`; valid: left-symmetric, left-asymmetric, right-symmetric, right-asymmetric", &[]);
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid0\"\nmembers = [\"a0\", \"a1\"]\nparity_layout = \"left-symmetric\"\n");
    expect(
        &e,
        ErrorKind::Option,
        "configs/bad.toml:21:17: volume \"db\": parity_layout does not apply to raid0",
        &[],
    );
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid1\"\nmembers = [\"a0\", \"a1\"]\nread_policy = \"fastest\"\n");
    expect(&e, ErrorKind::Option, "configs/bad.toml:21:15: volume \"db\": unknown read_policy \"fastest\"; valid: round-robin, least-pending, nearest", &[]);
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nmembers = [\"a0\", \"a1\", \"a2\"]\nread_policy = \"nearest\"\n");
    expect(
        &e,
        ErrorKind::Option,
        "configs/bad.toml:21:15: volume \"db\": read_policy does not apply to raid5",
        &[],
    );
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid1\"\nmembers = [\"a0\", \"a1\"]\ncache = \"write-around\"\n");
    expect(
        &e,
        ErrorKind::Option,
        "configs/bad.toml:21:9: volume \"db\": unknown cache \"write-around\"; valid: write-back, write-through",
        &[],
    );
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid1\"\nmembers = [\"a0\", \"a1\"]\ncache = \"write-through\"\ncache_size = \"1MiB\"\n");
    expect(
        &e,
        ErrorKind::Option,
        "configs/bad.toml:22:14: volume \"db\": cache_size applies only to cache = \"write-back\"",
        &[],
    );
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid5\"\nmembers = [\"a0\", \"a1\", \"a2\"]\nstrip_size = \"1MiB\"\ncache_size = \"1MiB\"\n");
    expect(&e, ErrorKind::Option, "configs/bad.toml:22:14: volume \"db\": cache_size 1 MiB is smaller than one full stripe (2 MiB); set cache_size = \"2MiB\" or more", &[]);
    let e = err("[[volume]]\nname = \"db\"\nlevel = \"raid1\"\nmembers = [\"a0\", \"a1\"]\nblock_size = 1024\n");
    expect(
        &e,
        ErrorKind::Option,
        "configs/bad.toml:21:14: volume \"db\": block_size 1024 is not supported; valid: 512, 4096",
        &[],
    );
}

#[test]
fn names() {
    let e = err("[[volume]]\nname = \"\"\nlevel = \"raid1\"\nmembers = [\"a0\", \"a1\"]\n");
    expect(
        &e,
        ErrorKind::Name,
        "configs/bad.toml:18:8: volume name is empty",
        &[],
    );
    let e = refused("[[member]]\nid = \"disk 0\"\npath = \"x.img\"\nsize = \"1GiB\"\n");
    expect(
        &e,
        ErrorKind::Name,
        "configs/bad.toml:2:6: member id \"disk 0\" contains whitespace",
        &[],
    );
}

#[test]
fn no_volumes() {
    let e = refused(MEMBERS);
    expect(
        &e,
        ErrorKind::Schema,
        "configs/bad.toml:1:1: the config defines no volumes",
        &[],
    );
}

#[test]
fn a_missing_file_needs_a_size() {
    let e = refused("[[member]]\nid = \"a0\"\npath = \"nowhere/a0.img\"\n");
    expect(
        &e,
        ErrorKind::MemberPath,
        "configs/bad.toml:3:8: member \"a0\": path \"configs/nowhere/a0.img\" does not exist, so the member needs a size to be created with; add e.g. size = \"4GiB\"",
        &[],
    );
}

#[test]
fn existing_members_must_be_at_least_their_size() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("small.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(2 << 20)
        .unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        "[[member]]\nid = \"a0\"\npath = \"small.img\"\nsize = \"4MiB\"\n",
    )
    .unwrap();
    let e = config::load(&cfg).unwrap_err();
    let msg = e.to_string();
    let want = format!(
        "{}:4:8: member \"a0\": size is \"4MiB\" but \"{}\" holds only 2 MiB (2097152 bytes)",
        cfg.display(),
        img.display()
    );
    assert!(msg.starts_with(&want), "{msg}");
    assert!(msg.contains("truncate -s 4MiB"), "{msg}");
    assert_eq!(e.kind(), Some(ErrorKind::MemberPath));

    std::fs::write(&cfg, "[[member]]\nid = \"a0\"\npath = \"sub\"\n").unwrap();
    let msg = config::load(&cfg).unwrap_err().to_string();
    assert!(
        msg.starts_with(&format!("{}:3:8: member \"a0\": path", cfg.display())),
        "{msg}"
    );
    assert!(
        msg.ends_with("is a directory; valid: a regular file or a block device"),
        "{msg}"
    );

    // The same file under two names (a symlink) is one member used twice.
    std::os::unix::fs::symlink(&img, dir.path().join("link.img")).unwrap();
    std::fs::write(
        &cfg,
        "[[member]]\nid = \"a0\"\npath = \"small.img\"\n[[member]]\nid = \"a1\"\npath = \"link.img\"\n",
    )
    .unwrap();
    let e = config::load(&cfg).unwrap_err();
    assert_eq!(e.kind(), Some(ErrorKind::Duplicate), "{e}");
    assert!(
        e.to_string()
            .contains(":6:8: member \"a1\": path \"link.img\" is already used by member \"a0\""),
        "{e}"
    );
}

#[test]
fn unreadable_config_file() {
    let e = config::load("/nonexistent/nbraid.toml").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("/nonexistent/nbraid.toml: cannot read the config: "),
        "{e}"
    );
    assert_eq!(e.kind(), None);
}

#[test]
fn memory_member_without_size() {
    let e = refused("[[member]]\nid = \"m0\"\npath = \"memory:\"\n");
    expect(
        &e,
        ErrorKind::MemberPath,
        "configs/bad.toml:3:8:",
        &["member \"m0\"", "memory member needs a size"],
    );
}

#[test]
fn bad_server_limits() {
    let daemon = |line: &str| refused(&format!("[daemon]\n{line}\n{MEMBERS}"));
    expect(
        &daemon("max_connections = 0"),
        ErrorKind::Limit,
        "configs/bad.toml:2:19: daemon: max_connections 0 is not valid; give 1 to 65536 (default 128)",
        &[],
    );
    expect(
        &daemon("max_connections = \"many\""),
        ErrorKind::Schema,
        "configs/bad.toml:2:19: daemon: max_connections: invalid type: string \"many\", expected an integer",
        &[],
    );
    expect(
        &daemon("in_flight_memory = \"16MiB\""),
        ErrorKind::Limit,
        "configs/bad.toml:2:20: daemon: in_flight_memory \"16MiB\" is out of range; give \"32MiB\" (one maximal NBD request) to \"1TiB\"",
        &[],
    );
    expect(
        &daemon("in_flight_memory = \"lots\""),
        ErrorKind::Size,
        "configs/bad.toml:2:20: daemon: in_flight_memory \"lots\" is not a size",
        &[],
    );
    expect(
        &daemon("in_flight_memory_per_connection = -1"),
        ErrorKind::Limit,
        "configs/bad.toml:2:35: daemon: in_flight_memory_per_connection -1 is out of range",
        &[],
    );
    // A share larger than the whole, located at the share...
    expect(
        &daemon("in_flight_memory = \"256MiB\"\nin_flight_memory_per_connection = \"1GiB\""),
        ErrorKind::Limit,
        "configs/bad.toml:3:35: daemon: in_flight_memory_per_connection \"1GiB\" is more than in_flight_memory \"256MiB\": one connection's share cannot exceed the whole; give in_flight_memory at least \"1GiB\", or a smaller share",
        &[],
    );
    // ...or at the whole when the share is the default.
    expect(
        &daemon("in_flight_memory = \"64MiB\""),
        ErrorKind::Limit,
        "configs/bad.toml:2:20: daemon: in_flight_memory_per_connection \"128MiB\" (the default) is more than in_flight_memory \"64MiB\"",
        &[],
    );
    expect(
        &daemon("idle_timeout = 600"),
        ErrorKind::Limit,
        "configs/bad.toml:2:16: daemon: idle_timeout 600 has no unit; write \"600s\" for seconds; write a number with a unit: ms, s, min (or m), h, d",
        &[],
    );
    expect(
        &daemon("stall_timeout = \"10 fortnights\""),
        ErrorKind::Limit,
        "configs/bad.toml:2:17: daemon: stall_timeout \"10 fortnights\" has an unknown unit \"fortnights\"",
        &["give from 1s to 1d"],
    );
    expect(
        &daemon("handshake_timeout = \"500ms\""),
        ErrorKind::Limit,
        "configs/bad.toml:2:21: daemon: handshake_timeout \"500ms\" is out of range; give from 1s to 1h",
        &[],
    );
    expect(
        &daemon("stall_timeout = \"off\""),
        ErrorKind::Limit,
        "configs/bad.toml:2:17: daemon: stall_timeout \"off\" is not a duration",
        &[],
    );
    expect(
        &daemon("max_conections = 4"),
        ErrorKind::Schema,
        "configs/bad.toml:2:1: daemon: unknown field `max_conections`",
        &["did you mean `max_connections`?"],
    );
}

#[test]
fn jbod_size_that_leaves_a_member_empty() {
    // a0 alone holds 30 MiB: a1 would get a region of 0 bytes, which no record can describe
    // (the volume was created once and never assembled again).
    let e = err(
        "[[volume]]\nname = \"j\"\nlevel = \"jbod\"\nmembers = [\"a0\", \"a1\"]\nsize = \"30MiB\"\n",
    );
    expect(
        &e,
        ErrorKind::Fit,
        "configs/bad.toml:21:8: volume \"j\": its size is held by member(s) \"a0\" alone; member(s) \"a1\" would hold none of it",
        &[
            "list fewer members (members = [\"a0\"])",
            "or give a larger size (at least 1023.00 MiB, size = \"1047556KiB\")",
        ],
    );
}

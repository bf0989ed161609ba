//! Good configs: member sizes, region allocation across shared members, defaults.

use nbraid_config::{
    self as config, CacheMode, Listener, MemberStorage, ReadPolicy, ServerLimits, VolumeSize,
    METADATA_RESERVED,
};
use nbraid_layout::{Level, ParityLayout, Region, Role};
use std::path::{Path, PathBuf};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn parse(text: &str) -> config::Config {
    match config::parse(text, Path::new("etc/arrays.toml")) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn matrix_raid_gives_each_volume_its_own_region() {
    let c = parse(
        r#"
[[member]]
id = "disk0"
path = "disks/0.img"
size = "8GiB"
[[member]]
id = "disk1"
path = "disks/1.img"
size = "8GiB"
[[volume]]
name = "system"
level = "raid1"
checksums = "off"
members = ["disk0", "disk1"]
size = "2GiB"
[[volume]]
name = "db"
level = "raid0"
checksums = "off"
strip_size = "16KiB"
members = ["disk0", "disk1"]
"#,
    );
    assert_eq!(c.members[0].path, PathBuf::from("etc/disks/0.img"));
    assert_eq!(c.members[0].state, MemberStorage::Missing);
    let system = c.volume("system").unwrap();
    assert_eq!(
        system.regions,
        vec![
            Region {
                start: MIB,
                len: 2 * GIB
            };
            2
        ]
    );
    assert_eq!(system.capacity(), 2 * GIB);
    assert_eq!(system.requested, VolumeSize::Bytes(2 * GIB));
    let db = c.volume("db").unwrap();
    let rest = 8 * GIB - MIB - 2 * GIB;
    assert_eq!(
        db.regions,
        vec![
            Region {
                start: MIB + 2 * GIB,
                len: rest
            };
            2
        ]
    );
    assert_eq!(db.capacity(), 2 * rest);
    assert_eq!(db.requested, VolumeSize::All);
    assert_eq!(db.member_ids(&c), vec!["disk0", "disk1"]);
    // Byte 0 of db is on disk0 right after system's region.
    let m = db.geometry.map(0, 4096).unwrap();
    assert_eq!(m.data[0].offset, MIB + 2 * GIB);
}

#[test]
fn all_takes_the_smallest_remainder_and_explicit_sizes_round_up_to_stripes() {
    let c = parse(
        r#"
[[member]]
id = "a"
path = "a.img"
size = "1GiB"
[[member]]
id = "b"
path = "b.img"
size = "2GiB"
[[member]]
id = "c"
path = "c.img"
size = "2GiB"
[[volume]]
name = "small"
level = "raid5"
checksums = "off"
members = ["a", "b", "c"]
size = "1MB"
[[volume]]
name = "rest"
level = "raid5"
checksums = "off"
members = ["c", "b", "a"]
"#,
    );
    let small = c.volume("small").unwrap();
    // 1000000 bytes over 2 data members: 500000 each, rounded up to 8 strips of 64 KiB.
    assert_eq!(small.regions[0].len, 8 * 65536);
    assert_eq!(small.capacity(), 16 * 65536);
    let rest = c.volume("rest").unwrap();
    // Member a (index 2 in this volume) has least room: 1 GiB - 1 MiB - 512 KiB.
    let len = GIB - MIB - 8 * 65536;
    assert!(rest.regions.iter().all(|r| r.len == len));
    assert_eq!(rest.regions[0].start, MIB + 8 * 65536);
    assert_eq!(rest.capacity(), 2 * len);
    assert_eq!(rest.members, vec![2, 1, 0]);
}

#[test]
fn jbod_fills_members_in_order() {
    let c = parse(
        r#"
[[member]]
id = "a"
path = "a.img"
size = "10MiB"
[[member]]
id = "b"
path = "b.img"
size = "20MiB"
[[volume]]
name = "first"
level = "jbod"
checksums = "off"
members = ["a", "b"]
size = "12MiB"
[[volume]]
name = "second"
level = "concat"
checksums = "off"
members = ["b"]
"#,
    );
    let first = c.volume("first").unwrap();
    assert_eq!(
        first.regions,
        vec![
            Region {
                start: MIB,
                len: 9 * MIB
            },
            Region {
                start: MIB,
                len: 3 * MIB
            }
        ]
    );
    let second = c.volume("second").unwrap();
    assert_eq!(
        second.regions,
        vec![Region {
            start: 4 * MIB,
            len: 16 * MIB
        }]
    );
    assert_eq!(second.capacity(), 16 * MIB);
    // With "all", a member with no room left is an error, not an empty piece.
    let text = "[[member]]\nid = \"a\"\npath = \"a.img\"\nsize = \"10MiB\"\n\
        [[volume]]\nname = \"x\"\nlevel = \"jbod\"\nmembers = [\"a\"]\n\
        [[volume]]\nname = \"y\"\nlevel = \"jbod\"\nmembers = [\"a\"]\n";
    let e = config::parse(text, Path::new("j.toml")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("j.toml:10:8: volume \"y\": no room left on member \"a\""),
        "{e}"
    );
}

#[test]
fn defaults() {
    let c = parse(
        r#"
[[member]]
id = "a"
path = "a.img"
size = "64MiB"
[[member]]
id = "b"
path = "b.img"
size = "64MiB"
[[member]]
id = "c"
path = "c.img"
size = "64MiB"
[[member]]
id = "d"
path = "d.img"
size = "64MiB"
[[volume]]
name = "v"
level = "RAID10"
members = ["a", "b", "c", "d"]
"#,
    );
    assert_eq!(
        c.listen,
        vec![Listener::Tcp("127.0.0.1:10809".parse().unwrap())]
    );
    let v = &c.volumes[0];
    assert_eq!(v.level(), Some(Level::Raid10));
    assert_eq!(v.shape.as_ref().unwrap().spans, 2);
    assert_eq!(
        v.shape.as_ref().unwrap().strip,
        nbraid_layout::STRIP_DEFAULT
    );
    assert_eq!(
        v.shape.as_ref().unwrap().parity_layout,
        ParityLayout::LeftSymmetric
    );
    assert_eq!(v.read_policy, ReadPolicy::LeastPending);
    assert_eq!(v.cache, CacheMode::WriteBack { bytes: 64 * MIB });
    assert_eq!(v.block_size, 4096);
    assert!(!v.read_only);
    assert_eq!(v.geometry.fault_tolerance().worst, 1);
    assert_eq!(v.geometry.fault_tolerance().best, 2);
}

#[test]
fn every_option_is_read() {
    let c = parse(
        r#"
[daemon]
listen = ["unix:run/nbd.sock", "tcp:[::1]:10809"]
[[member]]
id = "a"
path = "/dev/null/../srv/a.img"
size = "64MiB"
[[member]]
id = "b"
path = "b.img"
size = "67108864B"
[[member]]
id = "c"
path = "c.img"
size = "64MiB"
[[volume]]
name = "v"
level = "raid5"
spans = 1
strip_size = "128KiB"
members = ["a", "b", "c"]
size = "all"
parity_layout = "right-asymmetric"
cache = "write-back"
cache_size = "1MiB"
read_only = true
block_size = 512
"#,
    );
    assert_eq!(
        c.listen,
        vec![
            Listener::Unix("etc/run/nbd.sock".into()),
            Listener::Tcp("[::1]:10809".parse().unwrap())
        ]
    );
    assert_eq!(c.members[0].path, PathBuf::from("/dev/srv/a.img"));
    assert!(c.members.iter().all(|m| m.size == 64 * MIB));
    let v = &c.volumes[0];
    assert_eq!(
        v.shape.as_ref().unwrap().parity_layout,
        ParityLayout::RightAsymmetric
    );
    assert_eq!(v.shape.as_ref().unwrap().strip, 128 << 10);
    assert_eq!(v.cache, CacheMode::WriteBack { bytes: MIB });
    assert!(v.read_only);
    assert_eq!(v.block_size, 512);
    // right-asymmetric: P of stripe 0 on the first member.
    let m = v.geometry.map(0, 4096).unwrap();
    assert_eq!(m.parity[0].member, 0);
    assert_eq!(m.parity[0].role, Role::P);
}

#[test]
fn existing_files_give_their_size_and_a_missing_member_of_them_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::File::create(dir.path().join("a.img"))
        .unwrap()
        .set_len(64 * MIB)
        .unwrap();
    std::fs::File::create(dir.path().join("b.img"))
        .unwrap()
        .set_len(100 * MIB)
        .unwrap();
    let cfg = dir.path().join("arrays.toml");
    std::fs::write(
        &cfg,
        r#"
[[member]]
id = "a"
path = "a.img"
[[member]]
id = "b"
path = "b.img"
size = "64MiB"
[[member]]
id = "c"
path = "new/c.img"
size = "64MiB"
[[volume]]
name = "v"
level = "raid5"
checksums = "off"
members = ["a", "b", "c"]
"#,
    )
    .unwrap();
    let c = config::load(&cfg).unwrap();
    assert_eq!(c.members[0].size, 64 * MIB);
    assert_eq!(c.members[0].state, MemberStorage::File { len: 64 * MIB });
    // b is larger than its size: only the first 64 MiB are used.
    assert_eq!(c.members[1].size, 64 * MIB);
    assert_eq!(c.members[1].state, MemberStorage::File { len: 100 * MIB });
    assert_eq!(c.members[2].state, MemberStorage::Missing);
    assert!(
        !dir.path().join("new").exists(),
        "load must not create anything"
    );
    assert_eq!(c.volumes[0].capacity(), 2 * (64 * MIB - METADATA_RESERVED));

    // a and b exist, so the volume may hold data: c is not recreated (it would stand in for
    // lost data with zeroes); the daemon runs the volume degraded without it.
    assert!(!c.may_create(2));
}

#[test]
fn summary_and_explain() {
    let c = parse(
        r#"
[[member]]
id = "d0"
path = "d0.img"
size = "1GiB"
[[member]]
id = "d1"
path = "d1.img"
size = "1GiB"
[[member]]
id = "d2"
path = "d2.img"
size = "1GiB"
[[member]]
id = "d3"
path = "d3.img"
size = "1GiB"
[[volume]]
name = "r5"
level = "raid5"
checksums = "off"
members = ["d0", "d1", "d2", "d3"]
size = "1536MiB"
"#,
    );
    let s = c.summary();
    let v = &s.volumes[0];
    assert_eq!(v.capacity_bytes, 1536 * MIB);
    assert_eq!(v.capacity, "1.50 GiB");
    assert_eq!(v.data_members, 3);
    assert_eq!(v.full_stripe_width_bytes, Some(3 * 65536));
    assert_eq!(v.spans, None);
    assert_eq!(s.members[0].used_bytes, 512 * MIB);
    assert_eq!(s.members[0].free_bytes, 511 * MIB);
    let text = c.explain();
    assert!(text.contains("r5      raid5  -      d0 d1 d2 d3  64 KiB  3     1.50 GiB (1610612736 bytes)  192 KiB      1 worst, 1 best"), "{text}");
}

#[test]
fn memory_members_need_no_file_and_may_repeat() {
    let c = parse(
        r#"
[[member]]
id = "m0"
path = "memory:"
size = "64MiB"
[[member]]
id = "m1"
path = "memory:"
size = "64MiB"
[[volume]]
name = "scratch"
level = "raid0"
checksums = "off"
members = ["m0", "m1"]
"#,
    );
    assert!(c.members.iter().all(|m| m.state == MemberStorage::Memory));
    assert_eq!(
        c.volume("scratch").unwrap().capacity(),
        2 * (64 * MIB - METADATA_RESERVED)
    );
    // Nothing to create on disk.
    assert!((0..c.members.len()).all(|m| !c.may_create(m)));
}

/// A member that vanished from a volume that has data may never be recreated (an empty file
/// would silently stand in for it); the members of a new volume all may be.
#[test]
fn only_the_members_of_new_volumes_are_created() {
    let dir = tempfile::tempdir().unwrap();
    let text = r#"
[[member]]
id = "a0"
path = "a0.img"
size = "8MiB"
[[member]]
id = "a1"
path = "a1.img"
size = "8MiB"
[[member]]
id = "a2"
path = "a2.img"
size = "8MiB"
[[volume]]
name = "r5"
level = "raid5"
members = ["a0", "a1", "a2"]
"#;
    let file = dir.path().join("arrays.toml");
    let load = || config::parse(text, &file).unwrap();
    let c = load();
    assert!(c.volume_is_new(&c.volumes[0]));
    assert!((0..3).all(|m| c.may_create(m)));
    for m in ["a0.img", "a2.img"] {
        let f = std::fs::File::create(dir.path().join(m)).unwrap();
        f.set_len(8 * MIB).unwrap();
    }

    let c = load();
    assert!(!c.volume_is_new(&c.volumes[0]));
    assert!(!c.may_create(1));
}

/// A spare on a path under /dev that is not there is never created (a device not attached yet
/// would become a file in RAM): `check` and the start leave it missing. A volume's own new
/// member there is created as any new member is (benches put members in /dev/shm).
#[test]
fn an_absent_spare_under_dev_is_not_created() {
    let text = r#"
[[member]]
id = "a0"
path = "/dev/shm/nbraid-config-test-absent-a0.img"
size = "8MiB"
[[member]]
id = "a1"
path = "/dev/shm/nbraid-config-test-absent-a1.img"
size = "8MiB"
[[member]]
id = "s0"
path = "/dev/nbraid-config-test-absent-s0"
size = "8MiB"
[[volume]]
name = "m"
level = "raid1"
members = ["a0", "a1"]
spares = ["s0"]
"#;
    let c = config::parse(text, std::path::Path::new("/tmp/arrays.toml")).unwrap();
    assert!(
        c.may_create(0) && c.may_create(1),
        "the volume's new members"
    );
    assert!(c.awaits_device(2));
    assert!(!c.may_create(2), "a spare's absent device");
    assert!(!c.awaits_device(0));
    // Absent, it stands by for nothing; the volume is as redundant as it was.
    let text = c.explain();
    assert!(
        text.contains("MISSING: not standing by for m until it is there (then: nbraid add m s0)"),
        "{text}"
    );
    assert!(!text.contains("degraded"), "{text}");
}

#[test]
fn server_limits_have_safe_defaults_and_are_read() {
    use std::time::Duration;
    const VOLUME: &str = r#"
[[member]]
id = "a"
path = "memory:"
size = "64MiB"
[[volume]]
name = "v"
level = "jbod"
members = ["a"]
"#;
    let c = parse(VOLUME);
    assert_eq!(c.limits, ServerLimits::default());
    assert_eq!(c.limits.max_connections, 128);
    assert_eq!(c.limits.in_flight_bytes, 512 * MIB);
    assert_eq!(c.limits.in_flight_bytes_per_connection, 128 * MIB);
    assert_eq!(c.limits.handshake_timeout, Duration::from_secs(10));
    assert_eq!(c.limits.max_handshakes, 64);
    assert_eq!(c.limits.payload_min_bytes_per_s, 256 << 10);
    assert_eq!(c.limits.idle_timeout, None);
    assert_eq!(c.limits.stall_timeout, Duration::from_secs(60));

    let c = parse(&format!(
        r#"
[daemon]
max_connections = 8
in_flight_memory = "2GiB"
in_flight_memory_per_connection = "256MiB"
handshake_timeout = "10s"
idle_timeout = "12h"
stall_timeout = "5min"
{VOLUME}"#
    ));
    assert_eq!(
        c.limits,
        ServerLimits {
            max_connections: 8,
            max_handshakes: 64,
            in_flight_bytes: 2 * GIB,
            in_flight_bytes_per_connection: 256 * MIB,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Some(Duration::from_secs(12 * 3600)),
            stall_timeout: Duration::from_secs(300),
            payload_min_bytes_per_s: 256 << 10,
        }
    );
    let c = parse(&format!("[daemon]\nidle_timeout = \"off\"\n{VOLUME}"));
    assert_eq!(c.limits.idle_timeout, None);
}

/// A folder with the certificates' files TLS reads (`pki/`, empty files: the config reads
/// none of them, it only checks they are there), and a config in it.
fn with_pki() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("pki")).unwrap();
    for f in ["server-cert.pem", "server-key.pem", "ca-cert.pem"] {
        std::fs::write(dir.path().join("pki").join(f), "").unwrap();
    }
    let file = dir.path().join("arrays.toml");
    (dir, file)
}

fn parse_at(text: &str, file: &Path) -> config::Config {
    config::parse(text, file).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn tls_settings_and_the_listener_policy() {
    let volume = "[[member]]\nid = \"a\"\npath = \"tls-a.img\"\nsize = \"1GiB\"\n\
                  [[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"a\"]\n";
    let (dir, file) = with_pki();
    let c = parse_at(
        &format!(
            "[daemon]\nlisten = [\"tcp:0.0.0.0:10809\"]\ntls = \"required\"\n\
             tls_certificates = \"pki\"\ntls_verify_clients = true\n{volume}"
        ),
        &file,
    );
    assert_eq!(c.tls.mode, config::TlsMode::Required);
    assert_eq!(c.tls.certificates, Some(dir.path().join("pki")));
    assert!(c.tls.verify_clients);
    assert_eq!(c.tls.listeners, [config::TlsMode::Required]);
    assert_eq!(
        config::listener_policy(&c.listen[0], c.tls.listeners[0], &c.tls),
        Ok(None)
    );

    let open = parse(&format!(
        "[daemon]\nlisten = [\"tcp:0.0.0.0:10809\"]\n{volume}"
    ));
    let why =
        config::listener_policy(&open.listen[0], open.tls.listeners[0], &open.tls).unwrap_err();
    assert!(why.contains("insecure_listen"), "{why}");

    for (bad, says) in [
        ("tls = \"maybe\"", "not valid"),
        ("tls = \"required\"", "tls_certificates"),
    ] {
        let e = config::parse(&format!("[daemon]\n{bad}\n{volume}"), Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

/// A listen entry written as a table has its own TLS mode; the others take `[daemon] tls`
/// (off when absent), and the certificates are needed as soon as any listener uses TLS.
#[test]
fn tls_mode_per_listener() {
    use config::TlsMode::{Off, Optional, Required};
    let volume = "[[member]]\nid = \"a\"\npath = \"tls-b.img\"\nsize = \"1GiB\"\n\
                  [[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"a\"]\n";
    let (_dir, file) = with_pki();
    let parse = |text: &str| parse_at(text, &file);
    let c = parse(&format!(
        "[daemon]\nlisten = [\"unix:nbd.sock\", {{ address = \"tcp:0.0.0.0:10809\", tls = \"required\" }}, \
         {{ address = \"tcp:127.0.0.1:10810\" }}]\ntls_certificates = \"pki\"\n\
         tls_verify_clients = true\n{volume}"
    ));
    assert_eq!(c.tls.mode, Off);
    assert_eq!(c.tls.listeners, [Off, Required, Off]);
    assert!(c.tls.any_on());
    assert_eq!(c.listen[1].to_string(), "tcp:0.0.0.0:10809");
    for (l, &m) in c.listen.iter().zip(&c.tls.listeners) {
        assert_eq!(config::listener_policy(l, m, &c.tls), Ok(None), "{l}");
    }

    // The global mode is every other listener's default; a listener may turn TLS off.
    let c = parse(&format!(
        "[daemon]\nlisten = [\"tcp:127.0.0.1:10809\", {{ address = \"unix:nbd.sock\", tls = \"off\" }}]\n\
         tls = \"optional\"\ntls_certificates = \"pki\"\n{volume}"
    ));
    assert_eq!(c.tls.listeners, [Optional, Off]);

    // The old global keys alone still mean every listener.
    let c = parse(&format!(
        "[daemon]\nlisten = [\"tcp:127.0.0.1:10809\", \"unix:nbd.sock\"]\ntls = \"required\"\n\
         tls_certificates = \"pki\"\n{volume}"
    ));
    assert_eq!(c.tls.listeners, [Required, Required]);
    let c = parse(volume);
    assert_eq!(c.tls.listeners, [Off]);
    assert!(!c.tls.any_on());

    // A non-loopback listener without TLS of its own is refused even when another has it.
    let c = parse(&format!(
        "[daemon]\nlisten = [{{ address = \"tcp:127.0.0.1:10809\", tls = \"required\" }}, \"tcp:0.0.0.0:10810\"]\n\
         tls_certificates = \"pki\"\n{volume}"
    ));
    let why = config::listener_policy(&c.listen[1], c.tls.listeners[1], &c.tls).unwrap_err();
    assert!(why.contains("0.0.0.0:10810"), "{why}");

    for (bad, says) in [
        (
            "listen = [{ address = \"tcp:127.0.0.1:10809\", tls = \"maybe\" }]",
            "listen address \"tcp:127.0.0.1:10809\": tls = \"maybe\" is not valid",
        ),
        (
            "listen = [{ address = \"tcp:127.0.0.1:10809\", tls = \"required\" }]",
            "2:11: daemon: tls needs tls_certificates",
        ),
        (
            "listen = [{ address = \"tcp:127.0.0.1:10809\", tsl = \"required\" }]",
            "tsl",
        ),
        ("listen = [{ tls = \"required\" }]", "address"),
    ] {
        let e = config::parse(&format!("[daemon]\n{bad}\n{volume}"), Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

/// A member whose path is an NBD URI is remote: kept verbatim (not joined to the config's
/// folder), never probed or created, and it needs a size.
#[test]
fn remote_members_are_uris_with_a_size() {
    let c = parse(
        "[[member]]\nid = \"a\"\npath = \"nbd://10.0.0.2:10809/disk\"\nsize = \"1GiB\"\n\
         [[member]]\nid = \"b\"\npath = \"nbds+unix:///e?socket=/run/s.sock&tls-certificates=/etc/pki\"\nsize = \"1GiB\"\n\
         [[volume]]\nname = \"v\"\nlevel = \"raid1\"\nmembers = [\"a\", \"b\"]\n",
    );
    assert_eq!(c.members[0].state, config::MemberStorage::Remote);
    assert_eq!(c.members[0].path, Path::new("nbd://10.0.0.2:10809/disk"));
    assert_eq!(c.members[1].state, config::MemberStorage::Remote);
    assert!(!c.may_create(0));
    assert!(config::is_remote("nbd+unix:///x?socket=/s") && !config::is_remote("nbd.img"));
    let e = config::parse(
        "[[member]]\nid = \"a\"\npath = \"nbd://h/e\"\n\
         [[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"a\"]\n",
        Path::new("x.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("a remote member needs a size"), "{e}");
}

#[test]
fn a_jbod_checksum_reserve_holds_the_region_its_own_reserve_grew() {
    // Without reserves m1 holds 513 MiB minus m0's 3 MiB (a 1 MiB reserve); the reserve
    // taken from m0 pushes 1 MiB more onto m1, whose area then needs more than 1 MiB.
    let c = parse(
        r#"
[[member]]
id = "m0"
path = "m0.img"
size = "4MiB"
[[member]]
id = "m1"
path = "m1.img"
size = "1GiB"
[[volume]]
name = "v"
level = "jbod"
members = ["m0", "m1"]
size = "513MiB"
"#,
    );
    let v = &c.volumes[0];
    let reserve = v.metadata.checksum_reserve_bytes.expect("checksums are on");
    for r in &v.regions {
        assert!(
            config::checksum_area_bytes(r.len) <= reserve,
            "a reserve of {reserve} bytes for a region of {} bytes",
            r.len
        );
    }
    assert_eq!(v.capacity(), 513 * MIB);
}

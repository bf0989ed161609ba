//! A remote member whose server restarts on another disk of the same size (`nbdkit file` on
//! loopback, SIGKILLed and restarted on another file): a blank file, a copy of the other
//! member, a stale copy of its own. Two volumes share the members (Matrix): `a` is written
//! during the outage, so it fails the member and re-adds it once the server answers; `b` is
//! idle throughout, so nothing told it the member left. The re-opened connection reads the
//! member's superblock before it serves anything: a disk that is not the member is never
//! read as `b`'s data — `b` fails the member too, naming the URI and what was found, and
//! serves degraded. A server that comes back on the same file goes on serving `b` as before,
//! and `a` resyncs it as it did.

mod common;
use common::returning::{control, logged, pattern, wait_for, Kit, META, MIB};

use nbraid_daemon::nbd::client::Client;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Bytes of each volume.
const VOL: u64 = 16 * MIB;
/// Bytes of each member file: the metadata area and both volumes' regions, with room.
const MEMBER: u64 = 40 * MIB;

/// Volumes `a` and `b`, RAID 1 over `local.img` and the export on `kit.sock` (timeout 2 s,
/// 1 MiB bitmap chunks, clean after 200 ms); returns the config's path.
fn matrix_config(dir: &Path) -> PathBuf {
    for f in ["local.img", "far.img"] {
        std::fs::File::create(dir.join(f))
            .unwrap()
            .set_len(MEMBER)
            .unwrap();
    }
    let volume = |name: &str| {
        format!(
            "[[volume]]\nname = \"{name}\"\nchecksums = \"off\"\nlevel = \"raid1\"\n\
             members = [\"local\", \"far\"]\nsize = \"16MiB\"\nbitmap_chunk = \"1MiB\"\n\
             clean_delay = \"200ms\"\n\n"
        )
    };
    let config = dir.join("arrays.toml");
    std::fs::write(
        &config,
        format!(
            "[daemon]\nlisten = [\"unix:{}\"]\n\n\
             [[member]]\nid = \"local\"\npath = \"local.img\"\nsize = \"40MiB\"\n\n\
             [[member]]\nid = \"far\"\npath = \"nbd+unix:///?socket={}\"\nsize = \"40MiB\"\n\
             timeout = \"2s\"\n\n{}{}",
            dir.join("nbd.sock").display(),
            dir.join("kit.sock").display(),
            volume("a"),
            volume("b"),
        ),
    )
    .unwrap();
    config
}

fn uri(dir: &Path, name: &str) -> String {
    format!(
        "nbd+unix:///{name}?socket={}",
        dir.join("nbd.sock").display()
    )
}

/// Volume `name`'s status.
fn status(config: &Path, name: &str) -> serde_json::Value {
    let all = control(config, "{\"v\": 1, \"op\": \"status\"}");
    let vols = all["volumes"].as_array().cloned().unwrap_or_default();
    vols.into_iter().find(|v| v["name"] == name).unwrap()
}

fn far_state(config: &Path, name: &str) -> String {
    status(config, name)["members"][1]["state"]
        .as_str()
        .unwrap_or("?")
        .to_string()
}

struct Setup {
    dir: PathBuf,
    config: PathBuf,
    daemon: common::Daemon,
    rt: tokio::runtime::Runtime,
    a: Client,
    b: Client,
    model_b: Vec<u8>,
}

async fn write(c: &Client, model: &mut [u8], at: u64, len: u64, seed: u64) {
    let data = pattern(seed ^ at, len);
    model[at as usize..(at + len) as usize].copy_from_slice(&data);
    c.write(at, data.into()).await.expect("write");
}

async fn read_all(c: &Client) -> Vec<u8> {
    let mut out = Vec::with_capacity(VOL as usize);
    for at in (0..VOL).step_by(MIB as usize) {
        out.extend_from_slice(&c.read(at, MIB as usize).await.expect("read"));
    }
    out
}

/// Both volumes written whole and flushed, then quiet (bitmaps clear, records clean).
fn filled(dir: &Path) -> (Setup, Kit) {
    let config = matrix_config(dir);
    let kit = Kit::start(
        &dir.join("kit.sock"),
        &dir.join("far.img"),
        &dir.join("kit1.log"),
    );
    let daemon = common::Daemon::start(&config, "warn", true, |l| {
        l.starts_with("nbraidd: control socket")
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    let a = rt.block_on(Client::connect(&uri(dir, "a"))).expect("a");
    let b = rt.block_on(Client::connect(&uri(dir, "b"))).expect("b");
    let (mut model_a, mut model_b) = (vec![0u8; VOL as usize], vec![0u8; VOL as usize]);
    rt.block_on(async {
        for at in (0..VOL).step_by(MIB as usize) {
            write(&a, &mut model_a, at, MIB, 1).await;
            write(&b, &mut model_b, at, MIB, 2).await;
        }
        a.flush().await.unwrap();
        b.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
    });
    assert_eq!(status(&config, "b")["state"], "healthy");
    let s = Setup {
        dir: dir.to_path_buf(),
        config,
        daemon,
        rt,
        a,
        b,
        model_b,
    };
    (s, kit)
}

/// The server dies; `a` is written meanwhile (and fails the member), `b` stays idle; the
/// server comes back on `file`, and `a`'s re-add has time to find it.
fn outage_then(s: &mut Setup, kit: Kit, file: &Path) -> Kit {
    drop(kit);
    let mut model_a = vec![0u8; VOL as usize];
    s.rt.block_on(write(&s.a, &mut model_a, 3 * MIB, MIB, 3));
    s.rt.block_on(s.a.flush()).expect("a degraded flush");
    assert_eq!(far_state(&s.config, "a"), "failed");
    assert_eq!(far_state(&s.config, "b"), "healthy", "b is idle");
    let kit = Kit::start(&s.dir.join("kit.sock"), file, &s.dir.join("kit2.log"));
    std::thread::sleep(Duration::from_secs(4));
    kit
}

/// Every block of `b` reads back as written, however often it is read (both copies asked).
fn b_holds(s: &Setup) {
    for round in 0..2 {
        assert!(
            s.rt.block_on(read_all(&s.b)) == s.model_b,
            "round {round}: volume b read other data than was written"
        );
    }
}

/// `b` failed the member, the daemon's log naming the URI and `found`, and the re-add
/// rules took over: the member ends `then` in `b` ("failed": refused; "healthy": rebuilt
/// whole), and `b` reads as written all along.
fn far_fails_in_b_naming(s: Setup, found: &str, then: &str) {
    wait_for(
        "the re-add rules to settle",
        Duration::from_secs(30),
        || far_state(&s.config, "b") == then && far_state(&s.config, "a") == then,
    );
    b_holds(&s);
    s.rt.block_on(s.a.disconnect());
    s.rt.block_on(s.b.disconnect());
    let log = s.daemon.stop();
    let named = log.lines().any(|l| {
        l.contains("volume b: remote member far fails")
            && l.contains("kit.sock")
            && l.contains("not the member")
            && l.contains(found)
    });
    assert!(
        named,
        "no log line fails far in b naming the URI and {found:?}:\n{log}"
    );
}

#[test]
fn a_remote_member_back_blank_is_not_read_as_an_idle_volume_s_data() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, kit) = filled(dir.path());
    let blank = dir.path().join("blank.img");
    std::fs::File::create(&blank)
        .unwrap()
        .set_len(MEMBER)
        .unwrap();
    let kit = outage_then(&mut s, kit, &blank);
    b_holds(&s);
    far_fails_in_b_naming(s, "blank", "healthy");
    drop(kit);
}

#[test]
fn a_remote_member_back_as_the_other_member_is_not_taken_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, kit) = filled(dir.path());
    // The local member's file: the same arrays, the other role (and the same data: RAID 1).
    let other = dir.path().join("other.img");
    std::fs::copy(dir.path().join("local.img"), &other).unwrap();
    let kit = outage_then(&mut s, kit, &other);
    b_holds(&s);
    far_fails_in_b_naming(s, "role 0", "failed");
    drop(kit);
}

#[test]
fn a_remote_member_back_as_a_stale_copy_is_not_read_as_an_idle_volume_s_data() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, kit) = filled(dir.path());
    let stale = dir.path().join("stale.img");
    std::fs::copy(dir.path().join("far.img"), &stale).unwrap();
    // Written since the copy, and quiet again: the bitmap forgot it, the records moved on.
    s.rt.block_on(async {
        write(&s.b, &mut s.model_b, 7 * MIB, MIB, 9).await;
        s.b.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
    });
    let kit = outage_then(&mut s, kit, &stale);
    b_holds(&s);
    far_fails_in_b_naming(s, "behind", "healthy");
    drop(kit);
}

#[test]
fn a_remote_member_back_as_itself_serves_the_idle_volume_on() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, kit) = filled(dir.path());
    let kit = outage_then(&mut s, kit, &dir.path().join("far.img"));
    b_holds(&s);
    assert_eq!(far_state(&s.config, "b"), "healthy");
    assert_eq!(status(&s.config, "b")["state"], "healthy");
    // Data of b was read from it again (RAID 1 reads both copies in turn).
    let reads = logged(&dir.path().join("kit2.log"), "Read");
    assert!(
        reads.iter().any(|&(at, _)| at >= META),
        "no data was read from the member back: {reads:?}"
    );
    // And a resynced it as before, with no operator step.
    wait_for(
        "a to have it current again",
        Duration::from_secs(30),
        || far_state(&s.config, "a") == "healthy",
    );
    s.rt.block_on(s.a.disconnect());
    s.rt.block_on(s.b.disconnect());
    s.daemon.stop();
    drop(kit);
}

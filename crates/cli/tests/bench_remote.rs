//! `nbraid bench --config FILE --volume NAME` on volumes with members on NBD servers
//! (`nbdkit memory` on loopback Unix sockets): a RAID 1 of a local file and a remote export,
//! and a RAID 0 over two remote exports, each running a short verified random-write cell
//! (every read checked against what the run wrote, every written sector read back).

use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `nbdkit memory` on a Unix socket, killed on drop.
struct Kit(Child);

impl Kit {
    fn start(sock: &Path) -> Kit {
        let child = Command::new("nbdkit")
            .args(["--foreground", "--exit-with-parent", "--unix"])
            .arg(sock)
            .args(["memory", "40M"])
            .stdin(Stdio::null())
            .spawn()
            .expect("nbdkit is required (apt-get install nbdkit; scripts/test installs it)");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(sock).is_err() {
            assert!(Instant::now() < deadline, "nbdkit did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Kit(child)
    }
}

impl Drop for Kit {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn member(id: &str, path: &str) -> String {
    format!("[[member]]\nid = \"{id}\"\npath = \"{path}\"\nsize = \"33MiB\"\n\n")
}

#[test]
fn bench_runs_on_volumes_with_remote_members() {
    let dir = tempfile::tempdir().unwrap();
    let socks: Vec<_> = (0..3)
        .map(|i| dir.path().join(format!("kit{i}.sock")))
        .collect();
    let _kits: Vec<Kit> = socks.iter().map(|s| Kit::start(s)).collect();
    let uri = |i: usize| format!("nbd+unix:///?socket={}", socks[i].display());
    let local = dir.path().join("local.img");
    std::fs::File::create(&local)
        .unwrap()
        .set_len(33 << 20)
        .unwrap();
    let config = dir.path().join("arrays.toml");
    std::fs::write(
        &config,
        format!(
            "{}{}{}{}\
             [[volume]]\nname = \"mirror\"\nlevel = \"raid1\"\nmembers = [\"local\", \"r0\"]\n\n\
             [[volume]]\nname = \"stripe\"\nlevel = \"raid0\"\nstrip_size = \"64KiB\"\n\
             members = [\"r1\", \"r2\"]\n",
            member("local", &local.display().to_string()),
            member("r0", &uri(0)),
            member("r1", &uri(1)),
            member("r2", &uri(2)),
        ),
    )
    .unwrap();
    for volume in ["mirror", "stripe"] {
        let o = Command::new(env!("CARGO_BIN_EXE_nbraid"))
            .arg("bench")
            .arg("rand-write")
            .arg("--config")
            .arg(&config)
            .args(["--volume", volume, "--destroy-data"])
            .args(["--qd", "8", "--duration", "0.5s", "--span", "8MiB"])
            .args(["--verify", "--json"])
            .output()
            .expect("run nbraid");
        assert!(
            o.status.success(),
            "nbraid bench on {volume}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let r: Value = serde_json::from_slice(&o.stdout).expect("JSON");
        let cell = &r["cells"][0];
        assert!(cell["iops"].as_f64().unwrap() > 0.0, "{volume}: {r}");
    }
}

//! Helpers for the test files that run `nbraid` and `nbraidd` on real member files: a RAID 6
//! config, a daemon started and stopped as an operator would, volumes filled and read back
//! through NBD with nbdcopy, status as JSON, a member's bytes made junk behind its back.

// Each test file uses its own share of these.
#![allow(dead_code)]

pub mod blocks;
pub mod loops;
pub mod nbd_model;

use serde_json::Value;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const MIB: u64 = 1 << 20;
/// Bytes at the start of each member reserved for metadata (the config's rule).
pub const RESERVED: u64 = MIB;

pub fn nbraid(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nbraid"))
        .args(args)
        .output()
        .expect("run nbraid")
}

pub fn ok(o: Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn require(tool: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("required tool `{tool}` is not installed (Debian package libnbd-bin; scripts/test installs it)")
        })
}

/// A test config's start: the daemon serving on `nbd.sock` beside the config, and members
/// `{prefix}0` .. `{prefix}{n - 1}` of `size` each (e.g. "9MiB"), in files `{prefix}{i}.img`
/// beside the config too. The volumes follow.
pub fn daemon_and_members(prefix: &str, n: usize, size: &str) -> String {
    daemon_and_members_at(prefix, n, size, |id| format!("{id}.img"))
}

/// `arrays.toml` in `dir`: RAID 5 `v` over d0..d2 of `size` each (the default strip), the
/// daemon as [`daemon_and_members`] sets it.
pub fn raid5_of_three(dir: &Path, size: &str) -> PathBuf {
    let mut text = daemon_and_members("d", 3, size);
    text += "[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nmembers = [\"d0\", \"d1\", \"d2\"]\n";
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// [`daemon_and_members`] with every member in memory (`path = "memory:"`).
pub fn daemon_and_memory_members(prefix: &str, n: usize, size: &str) -> String {
    daemon_and_members_at(prefix, n, size, |_| "memory:".to_string())
}

fn daemon_and_members_at(
    prefix: &str,
    n: usize,
    size: &str,
    path: impl Fn(&str) -> String,
) -> String {
    let mut text = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n".to_string();
    for i in 0..n {
        let id = format!("{prefix}{i}");
        let path = path(&id);
        text += &format!("[[member]]\nid = \"{id}\"\npath = \"{path}\"\nsize = \"{size}\"\n\n");
    }
    text
}

/// A 9 MiB (sparse) file for a spare or a replacement.
pub fn blank_member(dir: &Path, name: &str) -> String {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().set_len(9 * MIB).unwrap();
    p.to_str().unwrap().to_string()
}

/// A RAID 6 volume `r6` over six 9 MiB file members (32 MiB), served on a Unix socket.
pub fn write_config(dir: &Path) -> PathBuf {
    write_config_with(dir, &[], "")
}

/// [`write_config`] with 9 MiB members `spares` more (not in the volume) and more keys for
/// the volume. Per-block checksums are off unless `volume_keys` says otherwise: the tests
/// built on this config pin the 32 MiB capacity and member offsets (region at 1 MiB); the
/// checksums' own end-to-end tests are in `checksum_e2e.rs`.
pub fn write_config_with(dir: &Path, spares: &[&str], volume_keys: &str) -> PathBuf {
    let mut text = "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n".to_string();
    let ids = (0..6).map(|i| format!("d{i}"));
    for id in ids.chain(spares.iter().map(|s| s.to_string())) {
        text += &format!("[[member]]\nid = \"{id}\"\npath = \"{id}.img\"\nsize = \"9MiB\"\n\n");
    }
    text += "[[volume]]\nname = \"r6\"\nlevel = \"raid6\"\nstrip_size = \"64KiB\"\nmembers = [\"d0\", \"d1\", \"d2\", \"d3\", \"d4\", \"d5\"]\n";
    if !volume_keys.contains("checksums") {
        text += "checksums = \"off\"\n";
    }
    text += volume_keys;
    let file = dir.join("arrays.toml");
    std::fs::write(&file, text).unwrap();
    file
}

pub struct Daemon {
    pub child: Child,
    /// The control socket it announced.
    pub control: PathBuf,
}

impl Drop for Daemon {
    /// A failed test does not leave its daemon running.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Daemon {
    pub fn start(config: &Path) -> Daemon {
        Daemon::start_with(config, &[])
    }

    /// [`Daemon::start`] with more `nbraidd` arguments.
    pub fn start_with(config: &Path, args: &[&str]) -> Daemon {
        let mut command = nbraidd_command(config);
        command.args(["--log-level", "warn"]).args(args);
        Daemon::spawn(command)
    }

    /// [`Daemon::start`] with its log (`level` and up) written to `log`.
    pub fn start_logging(config: &Path, log: &Path, level: &str) -> Daemon {
        let mut command = nbraidd_command(config);
        command
            .args(["--log-level", level])
            .env_remove("RUST_LOG")
            .stderr(std::fs::File::create(log).unwrap());
        Daemon::spawn(command)
    }

    /// Runs `command` and waits for the control socket it announces.
    fn spawn(mut command: Command) -> Daemon {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start nbraidd");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let deadline = Instant::now() + Duration::from_secs(30);
        let control = loop {
            assert!(
                Instant::now() < deadline,
                "nbraidd printed no control socket"
            );
            match lines.next() {
                Some(Ok(l)) => {
                    if let Some(p) = l.strip_prefix("nbraidd: control socket ") {
                        break PathBuf::from(p);
                    }
                }
                _ => panic!("nbraidd exited early: {:?}", child.wait()),
            }
        };
        std::thread::spawn(move || for _ in lines.by_ref() {});
        Daemon { child, control }
    }

    pub fn stop(&mut self) {
        let status = self.terminate();
        assert!(status.success(), "nbraidd exited with {status}");
        assert!(
            !self.control.exists(),
            "the control socket is removed on exit"
        );
    }
}

impl Daemon {
    /// SIGHUP: the daemon reads its config again.
    pub fn hangup(&self) {
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGHUP) };
    }

    /// SIGTERM, and how it exited (a volume it could not record clean makes it non-zero).
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        self.child.wait().unwrap()
    }
}

/// `nbraidd --config CONFIG`, the binary checked to be built.
fn nbraidd_command(config: &Path) -> Command {
    let nbraidd = nbraidd_path();
    assert!(
        nbraidd.is_file(),
        "{} is not built: run `cargo build --bin nbraidd` (or `cargo test --workspace`)",
        nbraidd.display()
    );
    let mut command = Command::new(nbraidd);
    command.arg("--config").arg(config);
    command
}

/// `nbraidd ARGS` (the one built beside `nbraid`) run to its end, logging errors only
/// (`--config CONFIG --check`, for one).
pub fn nbraidd(args: &[&str]) -> std::process::Output {
    let bin = nbraidd_path();
    assert!(bin.is_file(), "{} is not built", bin.display());
    Command::new(bin)
        .args(args)
        .args(["--log-level", "error"])
        .output()
        .expect("run nbraidd")
}

/// The `nbraidd` binary built beside `nbraid`.
pub fn nbraidd_path() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_nbraid")).with_file_name("nbraidd")
}

/// Starts the daemon on `config` (listening on `nbd.sock` beside it); the NBD URI of `volume`.
pub fn serve(config: &Path, volume: &str) -> (Daemon, String) {
    let socket = config.with_file_name("nbd.sock");
    let d = Daemon::start(config);
    (
        d,
        format!("nbd+unix:///{volume}?socket={}", socket.display()),
    )
}

/// `len_bytes` (a multiple of 8) of xorshift bytes from `seed`: different seeds, different bytes.
pub fn seeded_bytes(seed: u64, len_bytes: u64) -> Vec<u8> {
    let mut x = seed;
    (0..len_bytes / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect()
}

/// Writes 32 MiB of seeded bytes into the volume through NBD; the bytes.
pub fn fill(nbdcopy: &Path, dir: &Path, uri: &str, seed: u64) -> Vec<u8> {
    let data = seeded_bytes(seed, 32 * MIB);
    copy_in(nbdcopy, dir, uri, &data);
    data
}

/// Serves `volume` of `config` (members beside it), fills it with seeded bytes (`seed`,
/// flushed: a write-back cache keeps no older bytes than these), then SIGKILLs the daemon
/// while the same bytes are written again, copy after copy — so the records stay dirty and
/// what reads back is known. The bytes, and the URI the volume is served at again (the
/// killed daemon's socket is removed).
pub fn killed_under_rewrites(
    nbdcopy: &Path,
    config: &Path,
    volume: &str,
    seed: u64,
) -> (Vec<u8>, String) {
    let dir = config.parent().expect("the config's directory");
    let (mut d, uri) = serve(config, volume);
    let data = fill(nbdcopy, dir, &uri, seed);
    let src = dir.join("src.img");
    let flushed = Command::new(nbdcopy)
        .args(["--flush".as_ref(), src.as_os_str(), uri.as_ref()])
        .status();
    assert!(flushed.unwrap().success(), "flushed");
    let mut writer = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "while {} {} '{uri}'; do :; done",
            nbdcopy.display(),
            src.display()
        ))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert!(writer.try_wait().unwrap().is_none(), "the writer runs");
    d.child.kill().unwrap(); // SIGKILL
    d.child.wait().unwrap();
    let _ = writer.kill();
    let _ = writer.wait();
    let _ = std::fs::remove_file(dir.join("nbd.sock"));
    (data, uri)
}

/// Writes the whole of `volume` (its capacity as `status` says) with seeded bytes through
/// NBD; the bytes. They stay in `src.img` in `dir` for a test that writes them again.
pub fn fill_whole(
    nbdcopy: &Path,
    dir: &Path,
    uri: &str,
    (cfg, volume): (&str, &str),
    seed: u64,
) -> Vec<u8> {
    let capacity_bytes = status_of(cfg, volume)["capacity_bytes"].as_u64().unwrap();
    let data = seeded_bytes(seed, capacity_bytes);
    copy_in(nbdcopy, dir, uri, &data);
    data
}

/// Copies `data` into the volume at `uri` from its start with nbdcopy (through `src.img` in
/// `dir`).
pub fn copy_in(nbdcopy: &Path, dir: &Path, uri: &str, data: &[u8]) {
    let src = dir.join("src.img");
    std::fs::write(&src, data).unwrap();
    ok(
        Command::new(nbdcopy).arg(&src).arg(uri).output().unwrap(),
        "nbdcopy into the volume",
    );
}

/// The whole volume at `uri`, copied out with nbdcopy (through `out.img` in `dir`).
pub fn read_out(nbdcopy: &Path, dir: &Path, uri: &str) -> Vec<u8> {
    let out = dir.join("out.img");
    let _ = std::fs::remove_file(&out);
    ok(
        Command::new(nbdcopy).arg(uri).arg(&out).output().unwrap(),
        "nbdcopy out of the volume",
    );
    std::fs::read(&out).unwrap()
}

/// sha256 of the whole file or device at `path`.
pub fn sha256(path: &Path) -> String {
    let out = ok(
        Command::new(require("sha256sum"))
            .arg(path)
            .output()
            .unwrap(),
        "sha256sum",
    );
    out.split_whitespace().next().unwrap().to_string()
}

/// The first `data.len()` bytes of the volume are `data` (a volume grown past what was
/// written).
pub fn prefix_reads_back(nbdcopy: &Path, dir: &Path, uri: &str, data: &[u8]) {
    let got = read_out(nbdcopy, dir, uri);
    assert!(
        got.len() >= data.len() && got[..data.len()] == *data,
        "the volume reads back what was written"
    );
}

pub fn reads_back(nbdcopy: &Path, dir: &Path, uri: &str, data: &[u8]) {
    assert!(
        read_out(nbdcopy, dir, uri) == data,
        "the volume reads back what was written"
    );
}

/// `status --json` of volume `name`.
pub fn status_of(cfg: &str, name: &str) -> Value {
    let v: Value = serde_json::from_str(&ok(
        nbraid(&["status", name, "--json", "--config", cfg]),
        "status",
    ))
    .unwrap();
    v["volumes"][0].clone()
}

/// Overwrites `len` bytes of member file `path` at `at` (past the reserved area) with junk.
pub fn junk(path: &Path, at: u64, len: u64) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(RESERVED + at)).unwrap();
    f.write_all(&vec![0xee; len as usize]).unwrap();
    f.sync_all().unwrap();
}

/// Sends raw lines on one connection; the replies, parsed.
pub fn exchange(control: &Path, lines: &[&[u8]]) -> Vec<Value> {
    let s = UnixStream::connect(control).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    lines
        .iter()
        .map(|l| {
            // The daemon may close a connection whose line is too long before taking it all.
            let _ = w.write_all(l).and_then(|()| w.write_all(b"\n"));
            let mut reply = String::new();
            r.read_line(&mut reply).unwrap();
            serde_json::from_str(&reply).unwrap_or_else(|e| panic!("reply {reply:?}: {e}"))
        })
        .collect()
}

/// `nbraid status r6 --json`'s volume.
pub fn volume_status(cfg: &str) -> Value {
    let v: Value = serde_json::from_str(&ok(
        nbraid(&["status", "r6", "--json", "--config", cfg]),
        "status",
    ))
    .unwrap();
    v["volumes"][0].clone()
}

/// Polls status until `done` says so (60 s at most); the last status.
pub fn wait_for(cfg: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    wait_until(cfg, "r6", what, done)
}

/// Polls volume `name`'s status until `done` says so (60 s at most); the last status.
pub fn wait_until(cfg: &str, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = status_of(cfg, name);
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "waiting for {what}: {v:#}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `nbdkit file` serving a file on a Unix socket, killed outright when dropped (a paused one
/// would wait for the requests it holds before exiting with the test).
pub struct Kit(pub Child);

impl Kit {
    /// `file` on `sock`, also over the socket file a killed one left.
    pub fn serve(sock: &Path, file: &Path) -> Kit {
        Kit::serve_with(sock, file, &[], &[])
    }

    /// Through nbdkit filter `filter`, given its arguments `params` (after the plugin's).
    pub fn serve_with(sock: &Path, file: &Path, filter: &[&str], params: &[&str]) -> Kit {
        let _ = std::fs::remove_file(sock);
        let mut args: Vec<&std::ffi::OsStr> = filter.iter().map(|a| a.as_ref()).collect();
        args.extend(["file".as_ref(), file.as_os_str()]);
        args.extend(params.iter().map(|a| -> &std::ffi::OsStr { a.as_ref() }));
        Kit(nbdkit_export(sock, &args))
    }
}

/// A JBOD `v` on one file member, served on a Unix socket with TLS required, the
/// certificates in `pki` beside the config.
pub fn tls_jbod_config(dir: &Path) -> PathBuf {
    let cfg = dir.join("arrays.toml");
    std::fs::write(
        &cfg,
        "[daemon]\nlisten = [\"unix:nbd.sock\"]\ntls = \"required\"\ntls_certificates = \"pki\"\n\n\
         [[member]]\nid = \"d0\"\npath = \"d0.img\"\nsize = \"17MiB\"\n\n\
         [[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"d0\"]\n",
    )
    .unwrap();
    cfg
}

/// A new folder `name` in `dir` holding the test CA, server and client certificates
/// (`make_test_certificates`); its path.
pub fn test_certificates(dir: &Path, name: &str) -> PathBuf {
    let pki = dir.join(name);
    std::fs::create_dir(&pki).unwrap();
    nbraid_nbd::testing::make_test_certificates(&pki);
    pki
}

/// The server certificate in `pki` (from [`test_certificates`]) signed again from the same
/// request, valid until a day ago: expired, as a server may present it.
pub fn expire_server_certificate(pki: &Path) {
    let o = Command::new(require("openssl"))
        .current_dir(pki)
        .args(
            "x509 -req -in server.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial \
             -out server-cert.pem -days -1 -extfile server.ext"
                .split_whitespace(),
        )
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A sparse file `NAME.img` of `len_bytes` in `dir` served by `nbdkit file` on `NAME.sock`;
/// the server and its URI.
pub fn served_file(dir: &Path, name: &str, len_bytes: u64) -> (Kit, String) {
    let file = dir.join(format!("{name}.img"));
    std::fs::File::create(&file)
        .unwrap()
        .set_len(len_bytes)
        .unwrap();
    let sock = dir.join(format!("{name}.sock"));
    let kit = Kit::serve(&sock, &file);
    (kit, format!("nbd+unix:///?socket={}", sock.display()))
}

impl Drop for Kit {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `names` in `dir` as 40 MiB sparse files (the size [`raid1_local_and_remote`] declares);
/// their paths.
pub fn member_files<const N: usize>(dir: &Path, names: [&str; N]) -> [PathBuf; N] {
    names.map(|name| {
        let path = dir.join(name);
        std::fs::File::create(&path)
            .unwrap()
            .set_len(40 * MIB)
            .unwrap();
        path
    })
}

/// Stops an nbdkit from [`nbdkit_export`]: SIGTERM first, so the `sh` plugin's temporary
/// directory goes with it (a SIGKILL left it in /tmp); SIGKILL after 5 s.
pub fn stop_nbdkit(kit: &mut Child) {
    // SAFETY: kill(2) on our own child's pid, which `wait` below has not reaped yet.
    unsafe { libc::kill(kit.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while matches!(kit.try_wait(), Ok(None)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = kit.kill();
    let _ = kit.wait();
}

/// `nbdkit --unix sock ARGS…` (a plugin and its arguments), once it accepts connections;
/// it exits with the test.
pub fn nbdkit_export(sock: &Path, args: &[&std::ffi::OsStr]) -> Child {
    let kit = Command::new(require("nbdkit"))
        .args(["--foreground", "--exit-with-parent", "--unix"])
        .arg(sock)
        .args(args)
        .stdin(Stdio::null())
        .spawn()
        .expect("nbdkit starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    // The socket file appears at bind(), before listen(): wait until a connect succeeds.
    while UnixStream::connect(sock).is_err() {
        assert!(Instant::now() < deadline, "nbdkit did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    kit
}

/// Where the 4 KiB at volume byte `logical` of `volume` lies: `nbraid map --json`'s data
/// extents (each with `member_index`, `member`, `member_path`, `member_offset`).
pub fn map_extents(cfg: &Path, volume: &str, logical: u64) -> Vec<Value> {
    let out = ok(
        nbraid(&[
            "map",
            cfg.to_str().unwrap(),
            volume,
            &format!("{logical}B"),
            "4KiB",
            "--json",
        ]),
        "map",
    );
    let map: Value = serde_json::from_str(&out).unwrap();
    map["data"].as_array().expect("data extents").clone()
}

/// Starts `nbraidd` on `cfg` expecting it to refuse (exit non-zero); its stderr. A daemon
/// that serves instead (its socket appears) is stopped and the test fails, rather than
/// waiting on it.
pub fn start_refused(cfg: &Path) -> String {
    use std::io::Read;
    let mut child = Command::new(nbraidd_path())
        .arg("--config")
        .arg(cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline || cfg.with_file_name("nbd.sock").exists() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the start served instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success(), "the start is refused: {err}");
    err
}

/// A RAID 1 `v` of 40 MiB members: m0 the file `local`, m1 the export at Unix socket `sock`
/// with the member `timeout` (e.g. "1s"). Written as `arrays.toml` in `dir`, the volume's
/// table last (keys appended are the volume's); its path.
pub fn raid1_local_and_remote(dir: &Path, local: &Path, sock: &Path, timeout: &str) -> PathBuf {
    let cfg = dir.join("arrays.toml");
    std::fs::write(
        &cfg,
        format!(
            "[daemon]\nlisten = [\"unix:nbd.sock\"]\n\n\
             [[member]]\nid = \"m0\"\npath = \"{}\"\nsize = \"40MiB\"\n\n\
             [[member]]\nid = \"m1\"\npath = \"nbd+unix:///?socket={}\"\nsize = \"40MiB\"\ntimeout = \"{timeout}\"\n\n\
             [[volume]]\nname = \"v\"\nlevel = \"raid1\"\nmembers = [\"m0\", \"m1\"]\n",
            local.display(),
            sock.display()
        ),
    )
    .unwrap();
    cfg
}

//! nbraidd as a service, through the real binaries: systemd's readiness protocol on a test
//! `NOTIFY_SOCKET`, the `on_event` hook and `nbraid events` on `nbraid fail`, `/metrics`
//! read by a Prometheus parser and moving with I/O, and the unit file verified by
//! `systemd-analyze`.

mod common;

use common::*;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn nbraidd() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_nbraid")).with_file_name("nbraidd")
}

/// `write_config`'s RAID 6 with `keys` added to its `[daemon]` table.
fn config_with_daemon_keys(dir: &Path, keys: &str) -> PathBuf {
    let file = write_config(dir);
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replacen("[daemon]\n", &format!("[daemon]\n{keys}\n"), 1),
    )
    .unwrap();
    file
}

/// nbraidd on `config` with `env`, its stdout read until a line satisfies `until` (30 s at
/// most); that line. Stdout is drained after it; stderr is discarded.
fn spawn_daemon(
    config: &Path,
    env: &[(&str, &str)],
    until: impl Fn(&str) -> bool,
) -> (Child, String) {
    let mut cmd = Command::new(nbraidd());
    cmd.arg("--config")
        .arg(config)
        .args(["--log-level", "info"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nbraidd");
    // Read on a thread: a line that never comes must fail the test, not hang it.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let found = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if until(&l) => break l,
            Ok(_) => {}
            Err(e) => {
                let _ = child.kill();
                panic!(
                    "nbraidd did not print the line awaited ({e}): {:?}",
                    child.wait()
                );
            }
        }
    };
    // The thread drains the rest of its output.
    (child, found)
}

fn stop(mut child: Child) {
    // SAFETY: kill(2) on our own child's pid has no memory effects.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "nbraidd exited with {status}");
}

/// The next datagram on `sock` (within `limit`), as text.
fn next_notification(sock: &UnixDatagram, limit: Duration) -> Option<String> {
    sock.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[test]
fn ready_is_sent_once_the_exports_accept_connections_and_stopping_at_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let notify_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    let mut child = Command::new(nbraidd())
        .arg("--config")
        .arg(&config)
        .env("NOTIFY_SOCKET", &notify_path)
        .env("WATCHDOG_USEC", "400000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let ready = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(msg) = next_notification(&notify, left.max(Duration::from_millis(1))) else {
            let _ = child.kill();
            panic!(
                "no READY=1 from nbraidd within 60 s: {:?}",
                child.try_wait()
            );
        };
        if msg.lines().any(|l| l == "READY=1") {
            break msg;
        }
    };
    // Ready means serving: the NBD listener answers with its greeting at once.
    let mut nbd = UnixStream::connect(dir.path().join("nbd.sock")).expect("connect after READY=1");
    nbd.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut magic = [0u8; 8];
    nbd.read_exact(&mut magic).unwrap();
    assert_eq!(&magic, b"NBDMAGIC");
    drop(nbd);
    assert!(
        ready.contains("STATUS=serving 1: r6 optimal"),
        "the status line: {ready:?}"
    );
    // The watchdog is pinged at half WATCHDOG_USEC.
    let mut seen = Vec::new();
    while !seen.iter().any(|m: &String| m == "WATCHDOG=1") {
        let m = next_notification(&notify, Duration::from_secs(5))
            .unwrap_or_else(|| panic!("no WATCHDOG=1: {seen:?}"));
        seen.push(m);
    }
    // SAFETY: kill(2) on our own child's pid has no memory effects.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let mut stopping = false;
    while let Some(m) = next_notification(&notify, Duration::from_secs(10)) {
        if m.lines().any(|l| l == "STOPPING=1") {
            stopping = true;
            break;
        }
    }
    assert!(child.wait().unwrap().success());
    assert!(stopping, "no STOPPING=1 at SIGTERM");
}

/// The hook's script: appends its arguments and its NBRAID_ environment to `log`, one
/// block per event.
fn hook_script(dir: &Path, log: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("on-event.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n{{ echo \"args: $*\"; env | grep '^NBRAID_' | sort; echo ---; }} >> '{}'\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// The hook log's blocks, once one satisfies `want` (30 s at most).
fn wait_for_hook(log: &Path, want: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.split("---").any(&want) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "the hook did not run as awaited: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn nbraid_fail_runs_the_hook_with_the_events_fields_and_nbraid_events_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.log");
    hook_script(dir.path(), &log);
    let config = config_with_daemon_keys(dir.path(), "on_event = \"on-event.sh\"");
    let cfg = config.to_str().unwrap();
    let (daemon, _) = spawn_daemon(&config, &[], |l| l.starts_with("nbraidd: control socket"));
    let mut follower = Command::new(env!("CARGO_BIN_EXE_nbraid"))
        .args(["events", "--follow", "--json", "--config", cfg])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut followed = BufReader::new(follower.stdout.take().unwrap()).lines();
    // The follower is subscribed once its reply (with the kept events) is printed: give it
    // the moment to connect.
    std::thread::sleep(Duration::from_millis(500));

    ok(
        nbraid(&["fail", "r6", "d2", "--config", cfg]),
        "nbraid fail",
    );

    let text = wait_for_hook(&log, |b| b.contains("NBRAID_EVENT=volume-degraded"));
    let failed = text
        .split("---")
        .find(|b| b.contains("NBRAID_EVENT=member-failed"))
        .unwrap_or_else(|| panic!("no member-failed event: {text}"));
    for field in [
        "args: member-failed r6 d2",
        "NBRAID_VOLUME=r6",
        "NBRAID_MEMBER=d2",
        "NBRAID_DETAIL=member d2 failed",
    ] {
        assert!(failed.contains(field), "{field} missing: {failed}");
    }
    assert!(failed.contains("NBRAID_TIME_UNIX_MS="), "{failed}");

    let listed = ok(
        nbraid(&["events", "--json", "--config", cfg]),
        "nbraid events",
    );
    let kinds: Vec<String> = listed
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["event"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(kinds, ["member-failed", "volume-degraded"], "{listed}");
    let first: Value = serde_json::from_str(&followed.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["event"], "member-failed", "{first}");
    assert_eq!(first["member"], "d2", "{first}");
    let text_form = ok(nbraid(&["events", "--config", cfg]), "nbraid events");
    assert!(
        text_form.contains("member-failed r6 d2: member d2 failed"),
        "{text_form}"
    );
    let _ = follower.kill();
    let _ = follower.wait();
    stop(daemon);
}

/// GET `path` from `addr`: the status line and the body.
fn http_get(addr: &str, path: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP reply");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// The value of the sample `name` with `labels` in `scrape`.
fn sample(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let s = scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .unwrap_or_else(|| panic!("no sample {name} {labels:?}"));
    match s.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => v,
        ref other => panic!("{name}: {other:?}"),
    }
}

/// The request latency histogram of `volume` and `op`: its buckets, and its `_count`.
fn latency(
    scrape: &prometheus_parse::Scrape,
    volume: &str,
    op: &str,
) -> (Vec<prometheus_parse::HistogramCount>, u64) {
    let name = "nbraid_volume_request_duration_seconds";
    let labels = [("volume", volume), ("op", op)];
    let h = scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .unwrap_or_else(|| panic!("no histogram {name} {labels:?}"));
    let prometheus_parse::Value::Histogram(buckets) = &h.value else {
        panic!("{name} is not a histogram: {:?}", h.value)
    };
    let count = sample(scrape, &format!("{name}_count"), &labels);
    (buckets.clone(), count as u64)
}

fn scrape(addr: &str) -> (String, prometheus_parse::Scrape) {
    let (status, body) = http_get(addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let lines = body.lines().map(|l| Ok(l.to_string()));
    let parsed = prometheus_parse::Scrape::parse(lines).expect("Prometheus text format");
    (body, parsed)
}

#[test]
fn metrics_parse_as_prometheus_text_and_move_with_io() {
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_daemon_keys(dir.path(), "metrics_listen = \"127.0.0.1:0\"");
    let (daemon, line) = spawn_daemon(&config, &[], |l| l.starts_with("nbraidd: metrics "));
    let addr = line
        .trim_start_matches("nbraidd: metrics http://")
        .trim_end_matches("/metrics")
        .to_string();
    let (body, before) = scrape(&addr);
    // Every sample has a declared type, a counter ends in _total, names carry the prefix.
    for s in &before.samples {
        assert!(s.metric.starts_with("nbraid_"), "{}", s.metric);
        // A histogram's _sum and _count belong to its declaration (the parser reads them as
        // samples of their own, untyped).
        let family = ["_sum", "_count"]
            .iter()
            .find_map(|suffix| s.metric.strip_suffix(suffix))
            .filter(|base| body.contains(&format!("# TYPE {base} histogram\n")))
            .unwrap_or(&s.metric);
        let doc = before.docs.get(family);
        assert!(doc.is_some(), "no HELP for {}: {body}", s.metric);
        if matches!(s.value, prometheus_parse::Value::Counter(_)) {
            assert!(s.metric.ends_with("_total"), "{}", s.metric);
        }
        assert!(
            family != s.metric || !matches!(s.value, prometheus_parse::Value::Untyped(_)),
            "no TYPE for {}",
            s.metric
        );
    }
    let vol = [("volume", "r6")];
    assert_eq!(
        sample(
            &before,
            "nbraid_volume_state",
            &[("volume", "r6"), ("state", "optimal")]
        ),
        1.0
    );
    assert_eq!(
        sample(&before, "nbraid_volume_capacity_bytes", &vol),
        (32 * MIB) as f64
    );
    let written = |s: &prometheus_parse::Scrape| {
        sample(
            s,
            "nbraid_volume_bytes_total",
            &[("volume", "r6"), ("op", "write")],
        )
    };
    let member_writes = |s: &prometheus_parse::Scrape| {
        sample(
            s,
            "nbraid_member_bytes_total",
            &[("volume", "r6"), ("member", "d3"), ("op", "write")],
        )
    };
    let (w0, m0) = (written(&before), member_writes(&before));
    let write_latency = |s: &prometheus_parse::Scrape| latency(s, "r6", "write");
    let (buckets0, count0) = write_latency(&before);
    assert_eq!(buckets0.last().map(|b| b.count), Some(count0 as f64));

    let uri = format!(
        "nbd+unix:///r6?socket={}",
        dir.path().join("nbd.sock").display()
    );
    fill(&nbdcopy, dir.path(), &uri, 7);
    ok(
        nbraid(&["fail", "r6", "d1", "--config", config.to_str().unwrap()]),
        "nbraid fail",
    );

    let (_, after) = scrape(&addr);
    assert_eq!(
        written(&after) - w0,
        (32 * MIB) as f64,
        "client bytes written"
    );
    assert!(member_writes(&after) > m0, "a member's writes move too");
    // Every write request was timed: its histogram counts them, cumulatively up to +Inf.
    let writes = sample(
        &after,
        "nbraid_volume_requests_total",
        &[("volume", "r6"), ("op", "write")],
    );
    let (buckets, count) = write_latency(&after);
    assert!(
        count > count0 && count as f64 == writes,
        "{count} timed, {writes} written"
    );
    assert!(buckets
        .windows(2)
        .all(|w| w[0].count <= w[1].count && w[0].less_than < w[1].less_than));
    assert!(buckets.last().unwrap().less_than.is_infinite());
    assert_eq!(buckets.last().unwrap().count, count as f64);
    let sum = sample(
        &after,
        "nbraid_volume_request_duration_seconds_sum",
        &[("volume", "r6"), ("op", "write")],
    );
    assert!(
        sum > 0.0 && sum < count as f64 * 10.0,
        "{sum} s over {count} writes"
    );
    assert_eq!(
        sample(
            &after,
            "nbraid_volume_state",
            &[("volume", "r6"), ("state", "degraded")]
        ),
        1.0
    );
    assert_eq!(
        sample(
            &after,
            "nbraid_member_state",
            &[("volume", "r6"), ("member", "d1"), ("state", "failed")]
        ),
        1.0
    );
    assert_eq!(http_get(&addr, "/").0, "HTTP/1.1 404 Not Found");
    stop(daemon);
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    let analyze = require_tool("systemd-analyze", "systemd");
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/systemd/nbraidd.service");
    let text = std::fs::read_to_string(&unit).unwrap();
    assert!(text.contains("Type=notify"), "{text}");
    // verify checks that ExecStart's program exists: point it at the binary just built.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("nbraidd.service");
    std::fs::write(
        &copy,
        text.replace("/usr/local/bin/nbraidd", nbraidd().to_str().unwrap()),
    )
    .unwrap();
    let out = Command::new(analyze)
        .arg("verify")
        .arg(&copy)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    // verify reports a bad value as a warning and still exits 0: any word from it fails.
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {said}"
    );
}

/// Finds `tool` in PATH or fails naming the Debian package.
fn require_tool(tool: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("`{tool}` is not installed: install the Debian package `{package}` (scripts/test does)"))
}

/// A port free on all addresses now (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn a_warning_is_logged_once_and_under_the_journal_with_its_priority() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let text = std::fs::read_to_string(&config).unwrap().replacen(
        "listen = [\"unix:nbd.sock\"]",
        &format!(
            "listen = [\"unix:nbd.sock\", \"tcp:0.0.0.0:{}\"]\ninsecure_listen = true",
            free_port()
        ),
        1,
    );
    std::fs::write(&config, text).unwrap();
    let log = dir.path().join("stderr.log");
    let file = std::fs::File::create(&log).unwrap();
    let meta = file.metadata().unwrap();
    // stderr is the stream JOURNAL_STREAM names, as systemd sets it up for a service.
    let journal_stream = format!("{}:{}", meta.dev(), meta.ino());
    let mut child = Command::new(nbraidd())
        .arg("--config")
        .arg(&config)
        .env("JOURNAL_STREAM", &journal_stream)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(file)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while !lines
        .next()
        .and_then(Result::ok)
        .is_some_and(|l| l.starts_with("nbraidd: control socket"))
    {}
    std::thread::spawn(move || for _ in lines.by_ref() {});
    stop(child);
    let said = std::fs::read_to_string(&log).unwrap();
    let warnings: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("anyone on the network"))
        .collect();
    assert_eq!(warnings.len(), 1, "said once: {said}");
    assert!(
        warnings[0].starts_with("<4>"),
        "a warning's priority: {said}"
    );
    for l in said.lines() {
        assert!(
            l.starts_with('<') && !l[..8.min(l.len())].contains("20"),
            "every line has its priority and no timestamp: {l:?}"
        );
    }
}

/// The daemon's kept events, asked on the control socket beside `cfg` (`nbraid events`
/// reads the config first, which may be broken on purpose).
fn events_of(cfg: &str) -> Vec<Value> {
    let control = Path::new(cfg).with_extension("ctl");
    let reply = exchange(&control, &[br#"{"v":1,"op":"events"}"#]).remove(0);
    reply["events"].as_array().cloned().unwrap_or_default()
}

/// Polls the events until `n` of `kind` are there past the first `after` (30 s at most);
/// the `n`th.
fn wait_for_events(cfg: &str, kind: &str, after: usize, n: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events = events_of(cfg);
        let found: Vec<&Value> = events
            .iter()
            .skip(after)
            .filter(|e| e["event"] == kind)
            .collect();
        if found.len() >= n {
            return found[n - 1].clone();
        }
        assert!(Instant::now() < deadline, "no {kind} event: {events:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn hangup(child: &Child) {
    // SAFETY: kill(2) on our own child's pid has no memory effects.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGHUP) };
}

/// Notifications on `sock` until one has a line `line` (10 s at most): all of them.
fn notifications_until(sock: &UnixDatagram, line: &str) -> Vec<String> {
    let mut seen = Vec::new();
    while !seen.iter().any(|m: &String| m.lines().any(|l| l == line)) {
        let m = next_notification(sock, Duration::from_secs(10))
            .unwrap_or_else(|| panic!("no {line}: {seen:?}"));
        seen.push(m);
    }
    seen
}

#[test]
fn sighup_applies_a_new_rebuild_rate_and_spare_and_says_what_waits_for_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config_with(dir.path(), &["s0"], "rebuild_rate = \"10MiB\"\n");
    let cfg = config.to_str().unwrap();
    let notify_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    let notify_env = notify_path.to_str().unwrap();
    let (daemon, _) = spawn_daemon(&config, &[("NOTIFY_SOCKET", notify_env)], |l| {
        l.starts_with("nbraidd: control socket")
    });
    notifications_until(&notify, "READY=1");
    let rate = |v: &Value| v["rebuild_rate"]["limit_bytes_per_s"].as_u64();
    // On the control socket: `nbraid status` reads the config first, broken on purpose below.
    let control = config.with_extension("ctl");
    let volume_status = |_: &str| {
        let reply = exchange(&control, &[br#"{"v":1,"op":"status"}"#]).remove(0);
        reply["volumes"][0].clone()
    };
    assert_eq!(rate(&volume_status(cfg)), Some(10 * MIB));
    assert_eq!(volume_status(cfg)["spares"], serde_json::json!([]));

    // A faster rate and a spare (live), a larger strip (the superblocks' business).
    let text = std::fs::read_to_string(&config).unwrap();
    let edited = text
        .replace(
            "rebuild_rate = \"10MiB\"",
            "rebuild_rate = \"20MiB\"\nspares = [\"s0\"]",
        )
        .replace("strip_size = \"64KiB\"", "strip_size = \"128KiB\"");
    std::fs::write(&config, edited).unwrap();
    let kept = events_of(cfg).len();
    hangup(&daemon);
    let said = notifications_until(&notify, "READY=1");
    let reloading = said
        .iter()
        .position(|m| m.lines().any(|l| l == "RELOADING=1"));
    assert!(
        reloading.is_some_and(|at| at + 1 < said.len()),
        "RELOADING=1, then READY=1: {said:?}"
    );
    let e = wait_for_events(cfg, "config-reloaded", kept, 1);
    let detail = e["detail"].as_str().unwrap();
    assert!(detail.contains("r6: rebuild_rate now 20 MiB/s"), "{detail}");
    assert!(detail.contains("r6: spare s0 added"), "{detail}");
    assert!(
        detail.contains("waiting for a restart: r6: layout") && detail.contains("superblocks"),
        "{detail}"
    );
    assert_eq!(e["result"], "applied", "{e}");
    let v = volume_status(cfg);
    assert_eq!(rate(&v), Some(20 * MIB), "{v:#}");
    assert_eq!(v["spares"], serde_json::json!(["s0"]), "{v:#}");

    // A config that no longer loads changes nothing and says why.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("\"20MiB\"", "\"fast\"")).unwrap();
    let kept = events_of(cfg).len();
    hangup(&daemon);
    let e = wait_for_events(cfg, "config-refused", kept, 1);
    let detail = e["detail"].as_str().unwrap();
    assert!(
        detail.contains("no longer loads; nothing changed") && detail.contains("rebuild_rate"),
        "{detail}"
    );
    assert_eq!(rate(&volume_status(cfg)), Some(20 * MIB));
    stop(daemon);
}

#[test]
fn a_hook_that_hangs_blocks_neither_io_nor_events_and_is_killed_once_with_its_children() {
    use std::os::unix::fs::PermissionsExt;
    let nbdcopy = require("nbdcopy");
    let dir = tempfile::tempdir().unwrap();
    // The hook starts a child that would outlive a hook killed alone, and never returns.
    let pids = dir.path().join("pids");
    let script = dir.path().join("hang.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nsleep 100000 &\necho \"$1 $!\" >> '{}'\nwait\n",
            pids.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = config_with_daemon_keys(dir.path(), "on_event = \"hang.sh\"");
    let cfg = config.to_str().unwrap();
    let log = dir.path().join("stderr.log");
    let mut child = Command::new(nbraidd())
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while !lines
        .next()
        .and_then(Result::ok)
        .is_some_and(|l| l.starts_with("nbraidd: control socket"))
    {}
    std::thread::spawn(move || for _ in lines.by_ref() {});
    let started = Instant::now();

    ok(
        nbraid(&["fail", "r6", "d2", "--config", cfg]),
        "nbraid fail",
    );
    let hanging = wait_for_hook_pid(&pids, "member-failed");
    // While the hook hangs: I/O is served, and later events are published.
    let uri = format!(
        "nbd+unix:///r6?socket={}",
        dir.path().join("nbd.sock").display()
    );
    let data = fill(&nbdcopy, dir.path(), &uri, 11);
    reads_back(&nbdcopy, dir.path(), &uri, &data);
    ok(
        nbraid(&["fail", "r6", "d4", "--config", cfg]),
        "nbraid fail",
    );
    let second = wait_for_events(cfg, "member-failed", 0, 2);
    assert_eq!(second["member"], "d4", "{second}");
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "all this while the first run of the hook still hung"
    );

    // Its timeout kills it and the child it started; the next event's run begins.
    wait_for_hook_pid(&pids, "volume-degraded");
    // Gone, or dead and not reaped yet (a zombie: nothing reaps orphans in some containers).
    let stat = std::fs::read_to_string(format!("/proc/{hanging}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    assert!(
        matches!(state, None | Some("Z" | "X")),
        "the hung hook's child {hanging} was killed with it: {stat}"
    );
    let said = std::fs::read_to_string(&log).unwrap();
    let killed: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("member-failed on r6") && l.contains("killed"))
        .collect();
    assert_eq!(killed.len(), 1, "the kill said once: {said}");
    stop(child);
    // The run for volume-degraded still hangs: its child goes with the test.
    for l in std::fs::read_to_string(&pids).unwrap().lines() {
        if let Some(pid) = l.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
            // SAFETY: kill(2) has no memory effects; the pids are the test hook's children.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// The pid of the child the hang hook started for `event`, once it has (40 s at most).
fn wait_for_hook_pid(pids: &Path, event: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let text = std::fs::read_to_string(pids).unwrap_or_default();
        let found = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{event} ")));
        if let Some(pid) = found {
            return pid.trim().parse().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "the hook did not run for {event}: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn sighup_moves_the_metrics_listener_and_starts_the_hook() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (free_port(), free_port());
    let config = config_with_daemon_keys(
        dir.path(),
        &format!("metrics_listen = \"127.0.0.1:{first}\""),
    );
    let cfg = config.to_str().unwrap();
    let (daemon, _) = spawn_daemon(&config, &[], |l| l.starts_with("nbraidd: control socket"));
    let at = |port: u16| format!("127.0.0.1:{port}");
    scrape(&at(first));

    let log = dir.path().join("events.log");
    hook_script(dir.path(), &log);
    let text = std::fs::read_to_string(&config).unwrap().replace(
        &format!("metrics_listen = \"127.0.0.1:{first}\""),
        &format!("metrics_listen = \"127.0.0.1:{second}\"\non_event = \"on-event.sh\""),
    );
    std::fs::write(&config, text).unwrap();
    let kept = events_of(cfg).len();
    hangup(&daemon);
    let e = wait_for_events(cfg, "config-reloaded", kept, 1);
    let detail = e["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("metrics_listen now 127.0.0.1:{second}"))
            && detail.contains("on_event now runs"),
        "{detail}"
    );
    assert!(!detail.contains("waiting for a restart"), "{detail}");
    let (_, metrics) = scrape(&at(second));
    assert!(metrics
        .samples
        .iter()
        .any(|s| s.metric == "nbraid_volume_state"));
    assert!(
        std::net::TcpStream::connect(at(first)).is_err(),
        "the old metrics address is let go"
    );
    ok(
        nbraid(&["fail", "r6", "d1", "--config", cfg]),
        "nbraid fail",
    );
    wait_for_hook(&log, |b| {
        b.contains("NBRAID_EVENT=member-failed") && b.contains("NBRAID_MEMBER=d1")
    });
    stop(daemon);
}

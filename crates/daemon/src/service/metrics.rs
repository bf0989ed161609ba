//! `/metrics` in Prometheus's text format (version 0.0.4) on `[daemon] metrics_listen`.
//! Everything is read from counters the engine keeps anyway (relaxed atomic loads, the
//! same reads as `nbraid status`): a scrape adds nothing to the I/O path. The listener is a
//! bare HTTP/1.1 responder (one request per connection, `Connection: close`): Prometheus
//! needs no more, and it keeps a web framework out of the daemon. Request latency comes from
//! [`super::latency`]'s atomic buckets. A reload may move or close the listener
//! ([`MetricsListener::move_to`]).

use super::latency::{Latencies, Op, BOUNDS_NS};
use super::observe::{snapshot, Health, PassKind, VolumeSnapshot};
use crate::control::Controls;
use crate::served::Counts;
use nbraid_core::{CacheUsage, VolumeCounters};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// One metric family: its samples as (name suffix, labels, value); the suffix is empty but
/// for histograms (`_bucket`, `_sum`, `_count`).
struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    samples: Vec<(&'static str, String, f64)>,
}

/// Families in the order they are declared, samples added as they are read.
#[derive(Default)]
struct Families(Vec<Family>);

impl Families {
    fn add(
        &mut self,
        (name, suffix): (&'static str, &'static str),
        kind: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        let labels = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect::<Vec<_>>()
            .join(",");
        match self.0.iter_mut().find(|f| f.name == name) {
            Some(f) => f.samples.push((suffix, labels, value)),
            None => self.0.push(Family {
                name,
                help,
                kind,
                samples: vec![(suffix, labels, value)],
            }),
        }
    }

    /// A histogram's samples: cumulative buckets by `le`, `_sum` and `_count`.
    fn histogram(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        buckets: &[(f64, u64)],
        sum: f64,
        count: u64,
    ) {
        for &(le, n) in buckets {
            let le = match le.is_infinite() {
                true => "+Inf".to_string(),
                false => le.to_string(),
            };
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.add((name, "_bucket"), "histogram", help, &with_le, n as f64);
        }
        self.add((name, "_sum"), "histogram", help, labels, sum);
        self.add((name, "_count"), "histogram", help, labels, count as f64);
    }

    fn counter(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        value: u64,
    ) {
        self.add((name, ""), "counter", help, labels, value as f64);
    }

    fn gauge(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        self.add((name, ""), "gauge", help, labels, value);
    }

    fn render(&self) -> String {
        let mut out = String::new();
        for f in &self.0 {
            let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
            for (suffix, labels, value) in &f.samples {
                let _ = match labels.is_empty() {
                    true => writeln!(out, "{}{suffix} {value}", f.name),
                    false => writeln!(out, "{}{suffix}{{{labels}}} {value}", f.name),
                };
            }
        }
        out
    }
}

/// A label value as the text format writes it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The whole exposition: every volume, its members, the NBD server.
pub fn render(controls: &Controls, latencies: &Latencies, nbd_connections: usize) -> String {
    let mut m = Families::default();
    for v in &controls.volumes {
        volume_metrics(&mut m, v);
        if let Some(l) = latencies.volume(&v.name) {
            latency_metrics(&mut m, &v.name, l);
        }
    }
    m.gauge(
        "nbraid_nbd_connections",
        "NBD client connections open now.",
        &[],
        nbd_connections as f64,
    );
    m.render()
}

fn latency_metrics(m: &mut Families, volume: &str, l: &super::latency::VolumeLatency) {
    for op in Op::ALL {
        let r = l.read(op);
        let bounds = BOUNDS_NS.iter().map(|&ns| ns as f64 / 1e9);
        let buckets: Vec<(f64, u64)> = bounds.chain([f64::INFINITY]).zip(r.cumulative).collect();
        m.histogram(
            "nbraid_volume_request_duration_seconds",
            "Time from a request reaching the volume to its completion, by operation.",
            &[("volume", volume), ("op", op.name())],
            &buckets,
            r.sum_ns as f64 / 1e9,
            r.count(),
        );
    }
}

/// One volume's families, in the order a scrape lists them: state, size, client requests,
/// cache, spares, background passes, then its members.
fn volume_metrics(m: &mut Families, v: &crate::control::ControlVolume) {
    let array = v.array();
    let vol = array.volume();
    let name = v.name.as_str();
    let s = snapshot(v);
    state_metrics(m, name, s.health);
    m.gauge(
        "nbraid_volume_capacity_bytes",
        "Bytes the volume exports.",
        &[("volume", name)],
        vol.capacity() as f64,
    );
    // Counted since the daemon started, the arrays a reshape replaced included: a
    // counter never goes back.
    let counts = v.counts();
    request_metrics(m, name, &counts.volume);
    cache_metrics(m, name, &vol.cache_usage());
    m.gauge(
        "nbraid_volume_spares",
        "Spares standing by.",
        &[("volume", name)],
        v.array().spare_count() as f64,
    );
    pass_metrics(m, name, &s);
    member_metrics(m, v, &s, &counts);
}

/// A gauge per state the volume can be in, 1 for the one it is in.
fn state_metrics(m: &mut Families, name: &str, health: Health) {
    for h in [Health::Optimal, Health::Degraded, Health::Failed] {
        let on = f64::from(u8::from(health == h));
        m.gauge(
            "nbraid_volume_state",
            "1 for the volume's state (optimal, degraded, failed), 0 for the others.",
            &[("volume", name), ("state", h.name())],
            on,
        );
    }
}

/// What clients asked of the volume: requests and bytes by operation, errors, repairs.
fn request_metrics(m: &mut Families, name: &str, c: &VolumeCounters) {
    for (op, n) in [
        ("read", c.reads),
        ("write", c.writes),
        ("flush", c.flushes),
        ("trim", c.trims),
        ("write_zeroes", c.write_zeroes),
    ] {
        m.counter(
            "nbraid_volume_requests_total",
            "Requests served, by operation.",
            &[("volume", name), ("op", op)],
            n,
        );
    }
    for (op, n) in [("read", c.read_bytes), ("write", c.write_bytes)] {
        m.counter(
            "nbraid_volume_bytes_total",
            "Bytes read and written by clients.",
            &[("volume", name), ("op", op)],
            n,
        );
    }
    m.counter(
        "nbraid_volume_errors_total",
        "Requests that returned an error.",
        &[("volume", name)],
        c.errors,
    );
    m.counter(
        "nbraid_volume_repairs_total",
        "Mirror pieces and parity chunk ranges rewritten after a read error.",
        &[("volume", name)],
        c.repairs,
    );
}

/// The stripe cache: what clients wrote that the members do not have yet, and its bound.
fn cache_metrics(m: &mut Families, name: &str, cache: &CacheUsage) {
    m.gauge(
        "nbraid_volume_cache_dirty_bytes",
        "Bytes written by clients and not yet on the members (stripe cache).",
        &[("volume", name)],
        cache.dirty_bytes as f64,
    );
    m.gauge(
        "nbraid_volume_cache_limit_bytes",
        "The most memory the stripe cache may pin.",
        &[("volume", name)],
        cache.bound_bytes as f64,
    );
    m.counter(
        "nbraid_volume_cache_failed_destages_total",
        "Background write-backs of the stripe cache (aged stripes, evictions) that failed; their stripes stay cached and are tried again.",
        &[("volume", name)],
        cache.failed_destages,
    );
}

/// Per kind of background pass: whether one runs and how far the latest got; then what the
/// latest scrub found.
fn pass_metrics(m: &mut Families, name: &str, s: &VolumeSnapshot) {
    for kind in PassKind::ALL {
        let p = s.pass(kind);
        let labels = [("volume", name), ("pass", kind.name())];
        let running = p.is_some_and(|p| p.in_progress());
        m.gauge(
            "nbraid_volume_pass_running",
            "1 while a background pass (rebuild, resync, readd, scrub, reshape) runs or is paused.",
            &labels,
            f64::from(u8::from(running)),
        );
        m.gauge(
            "nbraid_volume_pass_position_bytes",
            "How far the latest pass of its kind got.",
            &labels,
            p.map_or(0, |p| p.position_bytes) as f64,
        );
        m.gauge(
            "nbraid_volume_pass_size_bytes",
            "Bytes the latest pass of its kind covers.",
            &labels,
            p.map_or(0, |p| p.total_bytes) as f64,
        );
    }
    let scrub = s.pass(PassKind::Scrub);
    m.gauge(
        "nbraid_volume_scrub_mismatches",
        "Mismatches the latest scrub found.",
        &[("volume", name)],
        scrub.map_or(0, |p| p.mismatches) as f64,
    );
    m.gauge(
        "nbraid_volume_scrub_bad_blocks",
        "Bad blocks the latest scrub found: mismatches, and blocks that did not read or failed their checksums.",
        &[("volume", name)],
        scrub.map_or(0, |p| p.mismatches + p.unreadable) as f64,
    );
    m.gauge(
        "nbraid_volume_scrub_repaired",
        "Blocks the latest scrub repaired.",
        &[("volume", name)],
        scrub.map_or(0, |p| p.repaired) as f64,
    );
}

/// Each member's state, then what it was asked and returned since the daemon started
/// (`counts`, by its file: whatever role it holds, whatever array served it).
fn member_metrics(
    m: &mut Families,
    v: &crate::control::ControlVolume,
    s: &VolumeSnapshot,
    counts: &Counts,
) {
    let array = v.array();
    let vol = array.volume();
    for (r, role) in s.roles.iter().enumerate() {
        let role_text = r.to_string();
        let labels = [
            ("volume", v.name.as_str()),
            ("member", role.id.as_str()),
            ("role", role_text.as_str()),
        ];
        let state = match (role.failed, role.current) {
            (true, _) => "failed",
            (false, true) => "active",
            (false, false) => "resyncing",
        };
        for st in ["active", "resyncing", "failed"] {
            let with_state = [labels[0], labels[1], labels[2], ("state", st)];
            m.gauge(
                "nbraid_member_state",
                "1 for the member's state (active, resyncing, failed), 0 for the others.",
                &with_state,
                f64::from(u8::from(st == state)),
            );
        }
        if r >= vol.member_count() {
            continue;
        }
        let Some((c, read_errors)) = counts.member(vol.member(r).name()) else {
            continue;
        };
        for (op, n) in [
            ("read", c.reads),
            ("write", c.writes),
            ("flush", c.flushes),
            ("trim", c.trims),
        ] {
            let l = [labels[0], labels[1], labels[2], ("op", op)];
            m.counter(
                "nbraid_member_requests_total",
                "Requests sent to the member, by operation.",
                &l,
                n,
            );
        }
        for (op, n) in [("read", c.read_bytes), ("write", c.write_bytes)] {
            let l = [labels[0], labels[1], labels[2], ("op", op)];
            m.counter(
                "nbraid_member_bytes_total",
                "Bytes read from and written to the member.",
                &l,
                n,
            );
        }
        m.counter(
            "nbraid_member_errors_total",
            "Requests to the member that returned an error.",
            &labels,
            c.errors,
        );
        m.counter(
            "nbraid_member_read_errors_total",
            "Read errors the member returned (repaired or not).",
            &labels,
            read_errors,
        );
        m.gauge(
            "nbraid_member_in_flight",
            "Requests to the member not answered yet.",
            &labels,
            c.in_flight as f64,
        );
    }
}

#[cfg(test)]
#[path = "metrics_counter_tests.rs"]
mod counter_tests;

/// How long a scraper may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a scraper may take to read the reply: one that stops reading must not keep its
/// place.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Scrapes served at once. Prometheus opens one at a time per target; a few more leave room
/// for curl and a second scraper, and idle connections beyond this cannot take the file
/// descriptors NBD clients need.
const CONNECTIONS_MAX: usize = 16;

/// Longest request head read.
const MAX_REQUEST_BYTES: usize = 8 << 10;

/// What a scrape reads: the volumes, their latencies, the NBD server's connection count.
#[derive(Clone)]
pub struct Scraped {
    pub controls: Arc<Controls>,
    pub latencies: Arc<Latencies>,
    pub connections: Arc<dyn Fn() -> usize + Send + Sync>,
}

/// The `/metrics` listener (`[daemon] metrics_listen`), served by its own task until it is
/// dropped or moved.
pub struct MetricsListener {
    /// Where it listens (as configured: a port 0 stays 0 here), if anywhere.
    addr: Option<SocketAddr>,
    bound: Option<SocketAddr>,
    task: Option<tokio::task::JoinHandle<()>>,
    source: Scraped,
}

impl MetricsListener {
    /// Binds `addr` (nothing for `None`) and serves it; a port taken fails the start.
    pub async fn start(addr: Option<SocketAddr>, source: Scraped) -> anyhow::Result<Self> {
        let mut l = MetricsListener {
            addr: None,
            bound: None,
            task: None,
            source,
        };
        l.move_to(addr).await?;
        Ok(l)
    }

    /// The address bound, if any (the real port when the config said 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.bound
    }

    /// Listens on `addr` instead (a reload): the new address is bound before the old one is
    /// let go, so a refused bind leaves the listener as it was.
    pub async fn move_to(&mut self, addr: Option<SocketAddr>) -> anyhow::Result<()> {
        if addr == self.addr && (addr.is_none() || self.task.is_some()) {
            return Ok(());
        }
        let listener = match addr {
            Some(a) => Some(bind(a).await?),
            None => None,
        };
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.addr = addr;
        self.bound = listener.as_ref().and_then(|l| l.local_addr().ok());
        self.task = listener.map(|l| tokio::spawn(serve(l, self.source.clone())));
        Ok(())
    }
}

impl Drop for MetricsListener {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Serves `/metrics` on `listener` until the task is dropped: at most [`CONNECTIONS_MAX`]
/// at once, a connection beyond them answered `503` and closed.
async fn serve(listener: TcpListener, source: Scraped) {
    let places = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    // Warned once per flood: again only after a connection found a place.
    let mut refusing = false;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("metrics listener accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(place) = places.clone().try_acquire_owned() else {
            refuse_busy(&stream);
            if !refusing {
                refusing = true;
                tracing::warn!(
                    "metrics listener: {CONNECTIONS_MAX} connections open, new ones refused until one closes"
                );
            }
            continue; // dropped: closed
        };
        refusing = false;
        let source = source.clone();
        tokio::spawn(async move {
            let _place = place;
            if let Err(e) = answer(stream, &source).await {
                tracing::debug!("metrics connection: {e}");
            }
        });
    }
}

/// Tells a connection beyond the cap why it is closed, without waiting on it: a new
/// connection's send buffer is empty, so the short reply fits.
fn refuse_busy(stream: &TcpStream) {
    let body = format!("nbraidd serves at most {CONNECTIONS_MAX} metrics connections at once\n");
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(reply.as_bytes());
}

/// Binds `addr` for [`serve`].
async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    use anyhow::Context;
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the metrics listener {addr} ([daemon] metrics_listen)"))
}

async fn answer(mut stream: TcpStream, source: &Scraped) -> std::io::Result<()> {
    let head = tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut stream))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no request in time"))??;
    let (status, body, kind) = match route(&head) {
        Route::Metrics => (
            "200 OK",
            render(&source.controls, &source.latencies, (source.connections)()),
            "text/plain; version=0.0.4; charset=utf-8",
        ),
        Route::NotFound => (
            "404 Not Found",
            "nbraidd serves /metrics\n".to_string(),
            "text/plain; charset=utf-8",
        ),
        Route::BadMethod => (
            "405 Method Not Allowed",
            "GET /metrics\n".to_string(),
            "text/plain; charset=utf-8",
        ),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        stream.write_all(reply.as_bytes()).await?;
        stream.shutdown().await
    };
    tokio::time::timeout(REPLY_TIMEOUT, write)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "reply not read in time"))?
}

async fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST_BYTES {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    NotFound,
    BadMethod,
}

/// What the request line asks for.
fn route(head: &str) -> Route {
    let mut words = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => Route::Metrics,
        ("GET", _) => Route::NotFound,
        _ => Route::BadMethod,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_metrics_is_served() {
        assert_eq!(
            route("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Route::Metrics
        );
        assert_eq!(route("GET /metrics?x=1 HTTP/1.1\r\n\r\n"), Route::Metrics);
        assert_eq!(route("GET / HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(route("POST /metrics HTTP/1.1\r\n\r\n"), Route::BadMethod);
        assert_eq!(route(""), Route::BadMethod);
    }

    /// A listener with no volumes on a free loopback port.
    async fn listening() -> MetricsListener {
        let source = Scraped {
            controls: Arc::new(Controls {
                volumes: vec![],
                config: None,
            }),
            latencies: Arc::new(Latencies::default()),
            connections: Arc::new(|| 0),
        };
        let addr = "127.0.0.1:0".parse().ok();
        MetricsListener::start(addr, source).await.unwrap()
    }

    async fn get(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut reply = Vec::new();
        let read = s.read_to_end(&mut reply);
        tokio::time::timeout(Duration::from_secs(3), read)
            .await
            .expect("a reply within 3 s")
            .unwrap();
        String::from_utf8_lossy(&reply).into_owned()
    }

    #[tokio::test]
    async fn idle_connections_beyond_the_cap_are_refused_at_once_until_one_closes() {
        let l = listening().await;
        let addr = l.local_addr().unwrap();
        let mut idle = Vec::new();
        for _ in 0..CONNECTIONS_MAX {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        // Accepted after the idle ones (the backlog is in order): no place left.
        let refused = get(addr, b"").await;
        assert!(refused.starts_with("HTTP/1.1 503 "), "{refused}");
        assert!(
            refused.contains(&format!("at most {CONNECTIONS_MAX}")),
            "{refused}"
        );
        drop(idle.pop());
        let mut served = String::new();
        for _ in 0..100 {
            served = get(addr, b"GET /metrics HTTP/1.1\r\n\r\n").await;
            if served.starts_with("HTTP/1.1 200 ") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(served.starts_with("HTTP/1.1 200 "), "{served}");
    }

    #[test]
    fn families_are_declared_once_and_labels_escaped() {
        let mut m = Families::default();
        m.counter("x_total", "X.", &[("v", "a\"b")], 1);
        m.counter("x_total", "X.", &[("v", "c")], 2);
        let text = m.render();
        assert_eq!(text.matches("# TYPE x_total counter").count(), 1);
        assert!(text.contains("x_total{v=\"a\\\"b\"} 1\n"), "{text}");
    }

    #[test]
    fn a_histogram_has_cumulative_buckets_up_to_inf_then_sum_and_count() {
        let mut m = Families::default();
        let buckets = [(0.001, 2), (f64::INFINITY, 3)];
        m.histogram("h_seconds", "H.", &[("op", "read")], &buckets, 0.5, 3);
        let text = m.render();
        assert_eq!(text.matches("# TYPE h_seconds histogram").count(), 1);
        assert!(
            text.contains("h_seconds_bucket{op=\"read\",le=\"0.001\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("h_seconds_bucket{op=\"read\",le=\"+Inf\"} 3\n"),
            "{text}"
        );
        assert!(text.contains("h_seconds_sum{op=\"read\"} 0.5\n"), "{text}");
        assert!(text.contains("h_seconds_count{op=\"read\"} 3\n"), "{text}");
    }
}

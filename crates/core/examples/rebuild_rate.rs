//! Idle rebuild and scrub speed as ratios of one member's sequential write (rebuild) and read
//! (scrub) bandwidth, all measured in the same run on the same file system (members are files
//! in DIR):
//!
//! - peers: one fresh member file written sequentially (1 MiB writes, 4 in flight, through the
//!   member's own I/O path: io_uring, O_DIRECT where the file system allows it) and
//!   fdatasync'd — what a member can take; and member 0 of the array read the same way — what
//!   a member gives;
//! - rebuild: the array filled, members failed, fresh files installed in their place and
//!   rebuilt by `Volume::rebuild` (no client I/O, no rate limit), flush included: bytes
//!   written to each new member per second;
//! - scrub: `Volume::scrub` (check only) of the healthy array: bytes read from each member
//!   per second.
//!
//! Cases: RAID 1 of 2 and 4, RAID 5 of 4 and 8, RAID 6 of 4 and 8 (one rebuilt) and of 8 with
//! two rebuilt at once. Also per round, from the peers, the *shared-device bound* — the best
//! ratio a pass can reach when every member file sits on one device (a parity rebuild reads
//! the survivors and writes the lost members per rebuilt byte, a scrub reads every member,
//! all through the same device) — and the CPU seconds per GiB of each.
//!
//! Rounds alternate peers and passes (the median ratio is reported) so machine noise hits
//! both. `cargo run --release -p nbraid-core --example rebuild_rate -- [--json | --json-to FILE] [--rounds N]
//! [--member-mib N] [--strip-kib N] [--case PREFIX] [DIR | sim:ssd ...]` (default /dev/shm,
//! /var/tmp and `sim:ssd`; 256 MiB per member, 3 rounds, 64 KiB strips). `scripts/bench-rebuild`
//! runs it and cross-checks the peers with fio.
//!
//! `sim:ssd` instead of a DIR: every member its own simulated SSD (the bench's model: 550 MB/s
//! read, 500 MB/s write, latency and IOPS caps) on a virtual clock — members that share no
//! device, as in a real array, and no CPU time: what the passes' I/O pattern (window size,
//! windows in flight, reads then writes per window) gets out of independent members.
//!
//! `devs:DEV,DEV,…` instead: every member its own block device from that list (at least 10
//! for the cases with 8 members: 8 in the array and 2 to rebuild onto; the peer's device is
//! given back before a rebuild takes one, and a replaced member's device goes back to the
//! pool; each at least `--member-mib`; their bytes are overwritten). `scripts/bench-rebuild-devices`
//! makes them from zram with a bandwidth limit per device (the kernel's block throttle), so
//! the pass and its peers meet what separate disks give: each member its own bandwidth.

use futures::executor::block_on;
use futures::stream::{FuturesUnordered, StreamExt};
use nbraid_core::{
    Buf, Member, PassControl, PassState, ScrubControl, ScrubState, UringFile, Volume, VolumeOptions,
};
use nbraid_layout::{Geometry, Level, ParityLayout, Region, Shape};
use nbraid_sim::clock::{run_virtual, SimClock};
use nbraid_sim::timed::{SimMember, SimModel, SsdParams};
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

const MIB: u64 = 1 << 20;
const GIB: f64 = (1u64 << 30) as f64;

struct Case {
    name: &'static str,
    level: Level,
    members: usize,
    failed: &'static [usize],
}

const CASES: [Case; 7] = [
    case("raid1 x2", Level::Raid1, 2, &[1]),
    case("raid1 x4", Level::Raid1, 4, &[1]),
    case("raid5 x4", Level::Raid5, 4, &[1]),
    case("raid5 x8", Level::Raid5, 8, &[1]),
    case("raid6 x4", Level::Raid6, 4, &[1]),
    case("raid6 x8", Level::Raid6, 8, &[1]),
    case("raid6 x8 (2 rebuilt)", Level::Raid6, 8, &[1, 6]),
];

const fn case(name: &'static str, level: Level, members: usize, failed: &'static [usize]) -> Case {
    Case {
        name,
        level,
        members,
        failed,
    }
}

/// What the command line asks for.
struct Opts {
    json: bool,
    /// Also write the JSON rows to this file (the table still printed).
    json_to: Option<PathBuf>,
    rounds: usize,
    member_bytes: u64,
    strip_bytes: u64,
    /// Only the cases whose name starts with this.
    only: Option<String>,
    targets: Vec<Target>,
}

impl Opts {
    fn parse() -> Opts {
        let mut o = Opts {
            json: false,
            json_to: None,
            rounds: 3,
            member_bytes: 256 * MIB,
            strip_bytes: 64 << 10,
            only: std::env::var("NBRAID_CASE").ok(),
            targets: Vec::new(),
        };
        let mut args = std::env::args().skip(1);
        let num = |flag: &str, v: Option<String>| -> u64 {
            v.and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{flag} needs a whole number"))
        };
        while let Some(a) = args.next() {
            match a.as_str() {
                "--json" => o.json = true,
                "--json-to" => o.json_to = args.next().map(PathBuf::from),
                "--rounds" => o.rounds = num("--rounds", args.next()).max(1) as usize,
                "--member-mib" => o.member_bytes = num("--member-mib", args.next()) * MIB,
                "--strip-kib" => o.strip_bytes = num("--strip-kib", args.next()) << 10,
                "--case" => o.only = args.next(),
                f if f.starts_with("--") => panic!("unknown option {f}"),
                _ => o.targets.push(Target::parse(&a, o.member_bytes)),
            }
        }
        if o.targets.is_empty() {
            o.targets = ["/dev/shm", "/var/tmp", "sim:ssd"]
                .iter()
                .map(|a| Target::parse(a, o.member_bytes))
                .collect();
        }
        // A --member-mib after a target still counts.
        for t in &mut o.targets {
            t.member_bytes = o.member_bytes;
        }
        o
    }
}

/// Where the members live: files in a directory, simulated SSDs on a virtual clock, or
/// block devices of their own.
enum Place {
    Dir(PathBuf),
    SimSsd(Arc<SimClock>),
    Devices(Mutex<DevicePool>),
}

/// Block devices handed out to members by tag, and taken back when the tag's member is
/// removed.
struct DevicePool {
    free: Vec<PathBuf>,
    by_tag: HashMap<String, PathBuf>,
}

impl DevicePool {
    fn new(list: &str) -> DevicePool {
        let mut free: Vec<PathBuf> = list
            .split(',')
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .collect();
        // Handed out from the end: the list's order.
        free.reverse();
        DevicePool {
            free,
            by_tag: HashMap::new(),
        }
    }

    fn take(&mut self, tag: &str) -> PathBuf {
        let dev = self.free.pop().unwrap_or_else(|| {
            panic!("devs: no device left for member {tag} (the cases with 8 members need 10)")
        });
        self.by_tag.insert(tag.to_string(), dev.clone());
        dev
    }

    fn give_back(&mut self, tag: &str) {
        if let Some(dev) = self.by_tag.remove(tag) {
            self.free.push(dev);
        }
    }
}

struct Target {
    place: Place,
    member_bytes: u64,
}

impl Target {
    fn parse(arg: &str, member_bytes: u64) -> Target {
        let place = match (arg, arg.strip_prefix("devs:")) {
            ("sim:ssd", _) => Place::SimSsd(SimClock::new()),
            (_, Some(list)) => Place::Devices(Mutex::new(DevicePool::new(list))),
            (dir, None) => Place::Dir(dir.into()),
        };
        Target {
            place,
            member_bytes,
        }
    }

    fn label(&self) -> String {
        match &self.place {
            Place::Dir(d) => d.display().to_string(),
            Place::SimSsd(_) => "sim:ssd".into(),
            Place::Devices(_) => "devs".into(),
        }
    }

    /// A fresh member named `tag` (its file recreated).
    fn member(&self, tag: &str) -> Arc<dyn Member> {
        match &self.place {
            Place::Dir(dir) => {
                let p = path(dir, tag);
                let _ = std::fs::remove_file(&p);
                Arc::new(
                    UringFile::open_with(&p, Some(self.member_bytes), Default::default())
                        .expect("member file"),
                )
            }
            Place::SimSsd(clock) => Arc::new(SimMember::new(
                tag,
                self.member_bytes,
                &SimModel::Ssd(SsdParams::default()),
                clock.clone(),
                // Scrub compares real bytes.
                true,
            )),
            Place::Devices(pool) => {
                let dev = pool.lock().expect("device pool").take(tag);
                // A device is opened as it is (a size would ask to create a file).
                let m = UringFile::open_with(&dev, None, Default::default())
                    .unwrap_or_else(|e| panic!("member device {}: {e}", dev.display()));
                assert!(
                    m.len() >= self.member_bytes,
                    "member device {}: {} bytes, shorter than --member-mib",
                    dev.display(),
                    m.len()
                );
                Arc::new(m)
            }
        }
    }

    /// Removes member `tag`'s file, if it has one, or gives its device back.
    fn remove(&self, tag: &str) {
        match &self.place {
            Place::Dir(dir) => {
                let _ = std::fs::remove_file(path(dir, tag));
            }
            Place::Devices(pool) => pool.lock().expect("device pool").give_back(tag),
            Place::SimSsd(_) => {}
        }
    }

    /// Runs `fut` to its end: on this thread, or on the virtual clock.
    fn run<F: Future>(&self, fut: F) -> F::Output {
        match &self.place {
            Place::Dir(_) | Place::Devices(_) => block_on(fut),
            Place::SimSsd(clock) => run_virtual(clock, fut).expect("only simulated members wait"),
        }
    }

    /// Times `fut`: seconds (wall, or the virtual clock's) and CPU seconds, and its output.
    fn timed<F: Future>(&self, fut: F) -> (Run, F::Output) {
        let (start, cpu0) = (self.now_s(), cpu_s());
        let out = self.run(fut);
        let run = Run {
            secs: self.now_s() - start,
            cpu_s: cpu_s() - cpu0,
        };
        (run, out)
    }

    fn now_s(&self) -> f64 {
        match &self.place {
            Place::Dir(_) | Place::Devices(_) => EPOCH.with(|e| e.elapsed().as_secs_f64()),
            Place::SimSsd(clock) => clock.now().as_secs_f64(),
        }
    }

    fn shares_one_device(&self) -> bool {
        matches!(self.place, Place::Dir(_))
    }
}

thread_local! {
    static EPOCH: Instant = Instant::now();
}

fn path(dir: &Path, tag: &str) -> PathBuf {
    dir.join(format!("nbraid-rebuild-{}-{tag}.img", std::process::id()))
}

/// CPU seconds (user + system) this process has used, all threads (io_uring's workers too).
fn cpu_s() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// How long something took, wall and CPU.
#[derive(Clone, Copy)]
struct Run {
    secs: f64,
    cpu_s: f64,
}

impl Run {
    fn bytes_per_s(&self, bytes: u64) -> f64 {
        bytes as f64 / self.secs
    }

    fn cpu_s_per_gib(&self, bytes: u64) -> f64 {
        self.cpu_s * GIB / bytes as f64
    }
}

/// Sequential 1 MiB ops over `len` bytes of `m`, 4 in flight: writes when `fill` is set.
async fn sequential(m: &dyn Member, len: u64, fill: Option<u8>) {
    let mut q = FuturesUnordered::new();
    let mut at = 0;
    while at < len || !q.is_empty() {
        while q.len() < 4 && at < len {
            q.push(async move {
                match fill {
                    Some(f) => {
                        let mut b = Buf::new(MIB as usize);
                        b.fill(f ^ (at / MIB) as u8);
                        m.write(at, b.freeze(), false).await.map(drop)
                    }
                    None => m.read(at, Buf::new(MIB as usize)).await.map(drop),
                }
            });
            at += MIB;
        }
        q.next().await.expect("in flight").expect("peer I/O");
    }
}

/// One fresh member written sequentially and flushed.
fn peer_write(t: &Target) -> Run {
    let m = t.member("peer");
    let (run, ()) = t.timed(async {
        sequential(&*m, t.member_bytes, Some(0x5a)).await;
        m.flush().await.expect("peer flush");
    });
    drop(m);
    t.remove("peer");
    run
}

/// Member 0 of the rig (not rebuilt) read sequentially.
fn peer_read(t: &Target, r: &Rig) -> Run {
    let m = r.v.member(0);
    t.timed(sequential(&*m, t.member_bytes, None)).0
}

struct Rig {
    v: Volume,
    /// The members' tags, by slot.
    tags: Vec<String>,
    generation: usize,
}

fn rig(t: &Target, case: &Case, strip_bytes: u64) -> Rig {
    let shape = Shape::new(
        case.level,
        case.members,
        None,
        strip_bytes,
        ParityLayout::LeftSymmetric,
    )
    .expect("shape");
    let region = Region {
        start: 0,
        len: t.member_bytes,
    };
    let g = Geometry::new(shape, &vec![region; case.members]).expect("geometry");
    let tags: Vec<String> = (0..case.members)
        .map(|i| format!("{}-{}-m{i}-0", case.level as u8, case.members))
        .collect();
    let members = tags.iter().map(|tag| t.member(tag)).collect();
    let opts = VolumeOptions {
        members_known_zero: true,
        ..VolumeOptions::default()
    };
    let v = Volume::new(g, members, opts).expect("volume");
    t.run(fill(&v));
    Rig {
        v,
        tags,
        generation: 0,
    }
}

/// Fills the volume with data (whole full stripes, several in flight) and flushes.
async fn fill(v: &Volume) {
    let width = v.geometry().full_stripe_width().unwrap_or(MIB);
    let piece = (4 * MIB / width).max(1) * width;
    let mut q = FuturesUnordered::new();
    let mut at = 0;
    while at < v.capacity() || !q.is_empty() {
        while q.len() < 4 && at < v.capacity() {
            let n = piece.min(v.capacity() - at);
            let mut b = Buf::new(n as usize);
            b.fill((at / MIB) as u8 | 1);
            q.push(v.write(at, b, false));
            at += n;
        }
        q.next().await.expect("in flight").expect("fill");
    }
    v.flush().await.expect("flush");
}

/// Fails the case's members, installs fresh ones, rebuilds.
fn rebuild(t: &Target, case: &Case, r: &mut Rig) -> Run {
    r.generation += 1;
    let mut fresh = Vec::new();
    for &m in case.failed {
        r.v.fail_member(m, "bench");
        let tag = format!(
            "{}-{}-m{m}-{}",
            case.level as u8, case.members, r.generation
        );
        r.v.install_member(m, t.member(&tag)).expect("install");
        fresh.push((m, tag));
    }
    let (run, out) = t.timed(r.v.rebuild(&PassControl::new(0)));
    let (state, done) = out.expect("rebuild");
    assert_eq!(state, PassState::Done);
    assert_eq!(done, case.failed.to_vec());
    for (m, tag) in fresh {
        t.remove(&std::mem::replace(&mut r.tags[m], tag));
    }
    run
}

/// Scrubs the (healthy) rig, checking only; it must find nothing.
fn scrub(t: &Target, r: &Rig) -> Run {
    let ctl = ScrubControl::new(false, 0);
    let (run, out) = t.timed(r.v.scrub(&ctl));
    let report = out.expect("scrub");
    assert_eq!(report.state, ScrubState::Done);
    assert_eq!(report.mismatches + report.unreadable, 0, "{report:?}");
    run
}

/// The best rate a pass could reach, as a ratio of one member's bandwidth (write for a
/// rebuild, read for a scrub), when all members share one device: per pass byte it reads
/// `reads` members and writes `writes`, one after another on the same device
/// (`read_per_write`: read over write bandwidth).
fn shared_device_bound(reads: usize, writes: usize, read_per_write: f64) -> f64 {
    1.0 / (reads as f64 / read_per_write + writes as f64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// One row of the report: medians over the rounds.
struct Row {
    dir: String,
    case: &'static str,
    write_mib_s: f64,
    read_mib_s: f64,
    rebuild_mib_s: f64,
    rebuild_ratio: f64,
    rebuild_ratios: Vec<f64>,
    rebuild_bound: f64,
    scrub_mib_s: f64,
    scrub_ratio: f64,
    scrub_ratios: Vec<f64>,
    scrub_bound: f64,
    write_cpu_s_per_gib: f64,
    rebuild_cpu_s_per_gib: f64,
    scrub_cpu_s_per_gib: f64,
}

/// Per round: (peer write, peer read, rebuild, scrub).
fn measure(t: &Target, case: &Case, o: &Opts) -> Row {
    let mut r = rig(t, case, o.strip_bytes);
    let mut rounds = Vec::new();
    for _ in 0..o.rounds {
        let w = peer_write(t);
        let rd = peer_read(t, &r);
        let rb = rebuild(t, case, &mut r);
        let sc = scrub(t, &r);
        rounds.push([w, rd, rb, sc]);
    }
    drop(r.v);
    for tag in &r.tags {
        t.remove(tag);
    }
    row(t, case, &rounds)
}

fn row(t: &Target, case: &Case, rounds: &[[Run; 4]]) -> Row {
    let len = t.member_bytes;
    let med = |f: &dyn Fn(&[Run; 4]) -> f64| median(rounds.iter().map(f).collect());
    let rate = |i: usize| move |x: &[Run; 4]| x[i].bytes_per_s(len);
    // Members read per rebuilt byte: a mirror copies one, a parity group reads the survivors.
    let reads = match case.level {
        Level::Raid1 => 1,
        _ => case.members - case.failed.len(),
    };
    let bound = |x: &[Run; 4], scrub: bool| {
        let (w, r) = (x[0].bytes_per_s(len), x[1].bytes_per_s(len));
        match (t.shares_one_device(), scrub) {
            (true, false) => shared_device_bound(reads, case.failed.len(), r / w),
            (true, true) => 1.0 / case.members as f64,
            // Each member its own device: the new member's write, or a survivor's read.
            (false, false) => (r / w).min(1.0),
            (false, true) => 1.0,
        }
    };
    let ratios = |i: usize, peer: usize| -> Vec<f64> {
        rounds
            .iter()
            .map(|x| x[i].bytes_per_s(len) / x[peer].bytes_per_s(len))
            .collect()
    };
    Row {
        dir: t.label(),
        case: case.name,
        write_mib_s: med(&rate(0)) / MIB as f64,
        read_mib_s: med(&rate(1)) / MIB as f64,
        rebuild_mib_s: med(&rate(2)) / MIB as f64,
        rebuild_ratio: median(ratios(2, 0)),
        rebuild_ratios: ratios(2, 0),
        rebuild_bound: med(&|x| bound(x, false)),
        scrub_mib_s: med(&rate(3)) / MIB as f64,
        scrub_ratio: median(ratios(3, 1)),
        scrub_ratios: ratios(3, 1),
        scrub_bound: med(&|x| bound(x, true)),
        write_cpu_s_per_gib: med(&|x| x[0].cpu_s_per_gib(len)),
        rebuild_cpu_s_per_gib: med(&|x| x[2].cpu_s_per_gib(len)),
        scrub_cpu_s_per_gib: med(&|x| x[3].cpu_s_per_gib(len)),
    }
}

fn json(rows: &[Row]) -> String {
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{{\"dir\":\"{}\",\"case\":\"{}\",\"member_write_mib_s\":{:.1},\"member_read_mib_s\":{:.1},\"rebuild_mib_s\":{:.1},\"rebuild_ratio\":{:.3},\"rebuild_ratios\":{:?},\"rebuild_bound\":{:.3},\"scrub_mib_s\":{:.1},\"scrub_ratio\":{:.3},\"scrub_ratios\":{:?},\"scrub_bound\":{:.3},\"member_write_cpu_s_per_gib\":{:.3},\"rebuild_cpu_s_per_gib\":{:.3},\"scrub_cpu_s_per_gib\":{:.3}}}",
                r.dir, r.case, r.write_mib_s, r.read_mib_s, r.rebuild_mib_s, r.rebuild_ratio,
                r.rebuild_ratios, r.rebuild_bound, r.scrub_mib_s, r.scrub_ratio, r.scrub_ratios,
                r.scrub_bound, r.write_cpu_s_per_gib, r.rebuild_cpu_s_per_gib,
                r.scrub_cpu_s_per_gib
            )
        })
        .collect();
    format!("[{}]", items.join(","))
}

fn print_table(rows: &[Row]) {
    println!(
        "{:<10} {:<21} {:>7} {:>7} | {:>7} {:>5} {:>5} | {:>7} {:>5} {:>5} | {:>17}  rounds (rebuild; scrub)",
        "dir", "case", "W MiB/s", "R MiB/s", "rebuild", "ratio", "bound", "scrub", "ratio", "bound",
        "CPU s/GiB W/rb/sc"
    );
    let fmt = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    for r in rows {
        println!(
            "{:<10} {:<21} {:>7.0} {:>7.0} | {:>7.0} {:>5.2} {:>5.2} | {:>7.0} {:>5.2} {:>5.2} | {:>5.2} {:>5.2} {:>5.2}  {}; {}",
            r.dir, r.case, r.write_mib_s, r.read_mib_s, r.rebuild_mib_s, r.rebuild_ratio,
            r.rebuild_bound, r.scrub_mib_s, r.scrub_ratio, r.scrub_bound, r.write_cpu_s_per_gib,
            r.rebuild_cpu_s_per_gib, r.scrub_cpu_s_per_gib, fmt(&r.rebuild_ratios),
            fmt(&r.scrub_ratios)
        );
    }
    println!(
        "(W, R: one member's sequential write and read, 1 MiB x 4 in flight; rebuild: bytes \
         written to each new member per second, ratio to W; scrub: bytes read from each member \
         per second, ratio to R; bound: the best ratio members sharing one device allow (sim:ssd, \
         devs: members share nothing); CPU: seconds of this process, all threads, per GiB of member; \
         medians of the rounds)"
    );
}

fn main() {
    let o = Opts::parse();
    let mut rows = Vec::new();
    for t in &o.targets {
        for case in CASES
            .iter()
            .filter(|c| o.only.as_ref().is_none_or(|p| c.name.starts_with(p)))
        {
            rows.push(measure(t, case, &o));
        }
    }
    if let Some(p) = &o.json_to {
        std::fs::write(p, json(&rows)).expect("writing the --json-to file");
    }
    if o.json {
        println!("{}", json(&rows));
    } else {
        print_table(&rows);
    }
}

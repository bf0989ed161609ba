//! Idle rebuild rate as a ratio of one member's sequential write bandwidth, both measured in
//! the same run on the same file system (members are files in DIR):
//!
//! - peer: one fresh member file written sequentially (1 MiB writes, 4 in flight) and
//!   fdatasync'd — what a member can take;
//! - ours: a RAID 1 (2 members), RAID 5 (4) and RAID 6 (6, two members rebuilt at once),
//!   filled, a member failed, a fresh file installed in its place and rebuilt by
//!   `Volume::rebuild` (no client I/O, no rate limit), flush included: member bytes rebuilt
//!   per second.
//!
//! Also per round: member 0 read sequentially, and from the two peers the *shared-device
//! bound* — the best ratio a rebuild can reach when every member file sits on one device (a
//! parity rebuild reads the k survivors and writes the lost members per rebuilt byte, all
//! through the same device) — and the CPU seconds per GiB of the peer and of the rebuild.
//! `NBRAID_CASE=raid5` runs only the cases whose name starts with it.
//!
//! Rounds alternate peer and ours (3 rounds, the median ratio is reported) so machine noise
//! hits both. `cargo run --release -p nbraid-core --example rebuild_rate -- [--json] [DIR...]`
//! (default /dev/shm, /var/tmp and `sim:ssd`; 256 MiB per member, about 2.5 GiB of files per
//! DIR).
//!
//! `sim:ssd` instead of a DIR: every member its own simulated SSD (the bench's model: 550 MB/s
//! read, 500 MB/s write, latency and IOPS caps) on a virtual clock — members that share no
//! device, as in a real array, and no CPU time: what the rebuild's I/O pattern (window size,
//! windows in flight, read then write per window) gets out of independent members.

use futures::executor::block_on;
use futures::stream::{FuturesUnordered, StreamExt};
use nbraid_core::{Buf, Member, PassControl, PassState, UringFile, Volume, VolumeOptions};
use nbraid_layout::{Geometry, Level, ParityLayout, Region, Shape};
use nbraid_sim::clock::{run_virtual, SimClock};
use nbraid_sim::timed::{SimMember, SimModel, SsdParams};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

const MIB: u64 = 1 << 20;
const GIB: f64 = (1u64 << 30) as f64;
const REGION: u64 = 256 * MIB;
const ROUNDS: usize = 3;

struct Case {
    name: &'static str,
    level: Level,
    members: usize,
    failed: &'static [usize],
}

const CASES: [Case; 3] = [
    Case {
        name: "raid1 x2",
        level: Level::Raid1,
        members: 2,
        failed: &[1],
    },
    Case {
        name: "raid5 x4",
        level: Level::Raid5,
        members: 4,
        failed: &[1],
    },
    Case {
        name: "raid6 x6 (2 rebuilt)",
        level: Level::Raid6,
        members: 6,
        failed: &[1, 4],
    },
];

/// Where the members live: files in a directory, or simulated SSDs on a virtual clock.
enum Target {
    Dir(PathBuf),
    SimSsd(Arc<SimClock>),
}

impl Target {
    fn parse(arg: &str) -> Target {
        match arg {
            "sim:ssd" => Target::SimSsd(SimClock::new()),
            dir => Target::Dir(dir.into()),
        }
    }

    fn label(&self) -> String {
        match self {
            Target::Dir(d) => d.display().to_string(),
            Target::SimSsd(_) => "sim:ssd".into(),
        }
    }

    /// A fresh member named `tag` (its file recreated).
    fn member(&self, tag: &str) -> Arc<dyn Member> {
        match self {
            Target::Dir(dir) => {
                let p = path(dir, tag);
                let _ = std::fs::remove_file(&p);
                Arc::new(
                    UringFile::open_with(&p, Some(REGION), Default::default())
                        .expect("member file"),
                )
            }
            Target::SimSsd(clock) => Arc::new(SimMember::new(
                tag,
                REGION,
                &SimModel::Ssd(SsdParams::default()),
                clock.clone(),
                false,
            )),
        }
    }

    /// Removes member `tag`'s file, if it has one.
    fn remove(&self, tag: &str) {
        if let Target::Dir(dir) = self {
            let _ = std::fs::remove_file(path(dir, tag));
        }
    }

    /// Runs `fut` to its end: on this thread, or on the virtual clock.
    fn run<F: Future>(&self, fut: F) -> F::Output {
        match self {
            Target::Dir(_) => block_on(fut),
            Target::SimSsd(clock) => run_virtual(clock, fut).expect("only simulated members wait"),
        }
    }

    /// A clock for timing runs: wall time, or the virtual clock's.
    fn now_s(&self) -> f64 {
        match self {
            Target::Dir(_) => EPOCH.with(|e| e.elapsed().as_secs_f64()),
            Target::SimSsd(clock) => clock.now().as_secs_f64(),
        }
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

/// A rate and the CPU seconds it took.
#[derive(Clone, Copy)]
struct Run {
    bytes_per_s: f64,
    cpu_s: f64,
}

/// One fresh member written sequentially and flushed.
fn peer(t: &Target) -> Run {
    let m = t.member("peer");
    let (start, cpu0) = (t.now_s(), cpu_s());
    t.run(async {
        let mut q = FuturesUnordered::new();
        let mut at = 0;
        while at < REGION || !q.is_empty() {
            while q.len() < 4 && at < REGION {
                let mut b = Buf::new(MIB as usize);
                b.fill(0x5a ^ (at / MIB) as u8);
                q.push(m.write(at, b.freeze(), false));
                at += MIB;
            }
            q.next().await.expect("in flight").expect("peer write");
        }
        m.flush().await.expect("peer flush");
    });
    let run = Run {
        bytes_per_s: REGION as f64 / (t.now_s() - start),
        cpu_s: cpu_s() - cpu0,
    };
    drop(m);
    t.remove("peer");
    run
}

struct Rig {
    v: Volume,
    /// The members' tags, by slot.
    tags: Vec<String>,
    generation: usize,
}

fn rig(t: &Target, case: &Case) -> Rig {
    let shape = Shape::new(
        case.level,
        case.members,
        None,
        64 << 10,
        ParityLayout::LeftSymmetric,
    )
    .expect("shape");
    let g = Geometry::new(
        shape,
        &vec![
            Region {
                start: 0,
                len: REGION
            };
            case.members
        ],
    )
    .expect("geometry");
    let tags: Vec<String> = (0..case.members)
        .map(|i| format!("{}-m{i}-0", case.level as u8))
        .collect();
    let members = tags.iter().map(|tag| t.member(tag)).collect();
    let opts = VolumeOptions {
        members_known_zero: true,
        ..VolumeOptions::default()
    };
    let v = Volume::new(g, members, opts).expect("volume");
    // Fill with data (full stripes, several in flight).
    t.run(async {
        let piece = 4 * MIB / v.geometry().full_stripe_width().unwrap_or(MIB)
            * v.geometry().full_stripe_width().unwrap_or(MIB);
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
    });
    Rig {
        v,
        tags,
        generation: 0,
    }
}

/// Member 0 of the rig (not rebuilt) read sequentially (1 MiB reads, 4 in flight): what a
/// member gives when read.
fn peer_read(t: &Target, r: &Rig) -> f64 {
    let m = r.v.member(0);
    let start = t.now_s();
    t.run(async {
        let mut q = FuturesUnordered::new();
        let mut at = 0;
        while at < REGION || !q.is_empty() {
            while q.len() < 4 && at < REGION {
                q.push(m.read(at, Buf::new(MIB as usize)));
                at += MIB;
            }
            q.next().await.expect("in flight").expect("peer read");
        }
    });
    REGION as f64 / (t.now_s() - start)
}

/// The best rate a rebuild could reach, as a ratio of the member write bandwidth, when all
/// members share one device: per rebuilt byte it reads `reads` members and writes `writes`,
/// one after another on the same device (`read_per_write`: read over write bandwidth).
fn shared_device_bound(reads: usize, writes: usize, read_per_write: f64) -> f64 {
    1.0 / (reads as f64 / read_per_write + writes as f64)
}

/// Fails the case's members, installs fresh ones, rebuilds: member bytes per second.
fn rebuild(t: &Target, case: &Case, r: &mut Rig) -> Run {
    r.generation += 1;
    let mut fresh = Vec::new();
    for &m in case.failed {
        r.v.fail_member(m, "bench");
        let tag = format!("{}-m{m}-{}", case.level as u8, r.generation);
        r.v.install_member(m, t.member(&tag)).expect("install");
        fresh.push((m, tag));
    }
    let (start, cpu0) = (t.now_s(), cpu_s());
    let (state, done) = t.run(r.v.rebuild(&PassControl::new(0))).expect("rebuild");
    let (secs, cpu) = (t.now_s() - start, cpu_s() - cpu0);
    assert_eq!(state, PassState::Done);
    assert_eq!(done, case.failed.to_vec());
    for (m, tag) in fresh {
        t.remove(&std::mem::replace(&mut r.tags[m], tag));
    }
    Run {
        bytes_per_s: REGION as f64 / secs,
        cpu_s: cpu,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let mut targets: Vec<Target> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(|a| Target::parse(a))
        .collect();
    if targets.is_empty() {
        targets = ["/dev/shm", "/var/tmp", "sim:ssd"]
            .map(Target::parse)
            .into();
    }
    // NBRAID_CASE=raid6 runs only the cases whose name starts with it.
    let only = std::env::var("NBRAID_CASE").ok();
    let mut rows = Vec::new();
    for t in &targets {
        for case in CASES
            .iter()
            .filter(|c| only.as_ref().is_none_or(|o| c.name.starts_with(o)))
        {
            let mut r = rig(t, case);
            let (mut peers, mut ours, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
            let (mut peer_cpu, mut our_cpu, mut bounds) = (Vec::new(), Vec::new(), Vec::new());
            // Members read per rebuilt byte: a mirror copies one, a parity group reads the
            // survivors of a stripe.
            let reads = match case.level {
                Level::Raid1 => 1,
                _ => case.members - case.failed.len(),
            };
            for _ in 0..ROUNDS {
                let p = peer(t);
                let pr = peer_read(t, &r);
                bounds.push(match t {
                    Target::Dir(_) => {
                        shared_device_bound(reads, case.failed.len(), pr / p.bytes_per_s)
                    }
                    // Each member its own device: the new member's write, or a survivor's read.
                    Target::SimSsd(_) => (pr / p.bytes_per_s).min(1.0),
                });
                let o = rebuild(t, case, &mut r);
                peers.push(p.bytes_per_s);
                ours.push(o.bytes_per_s);
                ratios.push(o.bytes_per_s / p.bytes_per_s);
                // CPU seconds per GiB of member written.
                peer_cpu.push(p.cpu_s * GIB / REGION as f64);
                our_cpu.push(o.cpu_s * GIB / REGION as f64);
            }
            drop(r.v);
            for tag in &r.tags {
                t.remove(tag);
            }
            rows.push((
                t.label(),
                case.name,
                median(peers) / MIB as f64,
                median(ours) / MIB as f64,
                median(ratios.clone()),
                ratios,
                median(peer_cpu),
                median(our_cpu),
                median(bounds),
            ));
        }
    }
    if json {
        let items: Vec<String> = rows
            .iter()
            .map(|(d, c, p, o, r, all, pc, oc, b)| {
                format!(
                    "{{\"dir\":\"{d}\",\"case\":\"{c}\",\"member_write_mib_s\":{p:.1},\"rebuild_mib_s\":{o:.1},\"ratio\":{r:.3},\"ratios\":{all:?},\"shared_device_bound\":{b:.3},\"member_write_cpu_s_per_gib\":{pc:.3},\"rebuild_cpu_s_per_gib\":{oc:.3}}}"
                )
            })
            .collect();
        println!("[{}]", items.join(","));
        return;
    }
    println!(
        "{:<10} {:<22} {:>13} {:>14} {:>6} {:>6} {:>10} {:>11}  rounds",
        "dir",
        "case",
        "member MiB/s",
        "rebuild MiB/s",
        "ratio",
        "bound",
        "member CPU",
        "rebuild CPU"
    );
    for (d, c, p, o, r, all, pc, oc, b) in &rows {
        let all: Vec<String> = all.iter().map(|x| format!("{x:.2}")).collect();
        println!(
            "{d:<10} {c:<22} {p:>13.0} {o:>14.0} {r:>6.2} {b:>6.2} {pc:>8.2} s {oc:>9.2} s  {}",
            all.join(" ")
        );
    }
    println!(
        "(bound: the best ratio members sharing one device allow, from a member's read and \
         write bandwidth in the same round (sim:ssd: members share nothing, 1 unless a read is \
         slower than a write); CPU: seconds of this process, all threads, per GiB \
         of member written; medians)"
    );
}

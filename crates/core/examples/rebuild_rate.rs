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
//! (default /dev/shm and /var/tmp; 256 MiB per member, about 2.5 GiB of files per DIR).

use futures::executor::block_on;
use futures::stream::{FuturesUnordered, StreamExt};
use nbraid_core::{Buf, Member, PassControl, PassState, UringFile, Volume, VolumeOptions};
use nbraid_layout::{Geometry, Level, ParityLayout, Region, Shape};
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

fn file(path: &Path) -> Arc<dyn Member> {
    let _ = std::fs::remove_file(path);
    Arc::new(UringFile::open_with(path, Some(REGION), Default::default()).expect("member file"))
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
fn peer(dir: &Path) -> Run {
    let p = path(dir, "peer");
    let m = file(&p);
    let (start, cpu0) = (Instant::now(), cpu_s());
    block_on(async {
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
        bytes_per_s: REGION as f64 / start.elapsed().as_secs_f64(),
        cpu_s: cpu_s() - cpu0,
    };
    drop(m);
    let _ = std::fs::remove_file(&p);
    run
}

struct Rig {
    v: Volume,
    paths: Vec<PathBuf>,
    generation: usize,
}

fn rig(dir: &Path, case: &Case) -> Rig {
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
    let paths: Vec<PathBuf> = (0..case.members)
        .map(|i| path(dir, &format!("{}-m{i}-0", case.level as u8)))
        .collect();
    let members = paths.iter().map(|p| file(p)).collect();
    let opts = VolumeOptions {
        members_known_zero: true,
        ..VolumeOptions::default()
    };
    let v = Volume::new(g, members, opts).expect("volume");
    // Fill with data (full stripes, several in flight).
    block_on(async {
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
        paths,
        generation: 0,
    }
}

/// Member 0 of the rig (not rebuilt) read sequentially (1 MiB reads, 4 in flight): what a
/// member gives when read.
fn peer_read(r: &Rig) -> f64 {
    let m = r.v.member(0);
    let start = Instant::now();
    block_on(async {
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
    REGION as f64 / start.elapsed().as_secs_f64()
}

/// The best rate a rebuild could reach, as a ratio of the member write bandwidth, when all
/// members share one device: per rebuilt byte it reads `reads` members and writes `writes`,
/// one after another on the same device (`read_per_write`: read over write bandwidth).
fn shared_device_bound(reads: usize, writes: usize, read_per_write: f64) -> f64 {
    1.0 / (reads as f64 / read_per_write + writes as f64)
}

/// Fails the case's members, installs fresh files, rebuilds: member bytes per second.
fn rebuild(dir: &Path, case: &Case, r: &mut Rig) -> Run {
    r.generation += 1;
    let mut fresh = Vec::new();
    for &m in case.failed {
        r.v.fail_member(m, "bench");
        let p = path(dir, &format!("{}-m{m}-{}", case.level as u8, r.generation));
        r.v.install_member(m, file(&p)).expect("install");
        fresh.push((m, p));
    }
    let (start, cpu0) = (Instant::now(), cpu_s());
    let (state, done) = block_on(r.v.rebuild(&PassControl::new(0))).expect("rebuild");
    let (secs, cpu) = (start.elapsed().as_secs_f64(), cpu_s() - cpu0);
    assert_eq!(state, PassState::Done);
    assert_eq!(done, case.failed.to_vec());
    for (m, p) in fresh {
        let _ = std::fs::remove_file(std::mem::replace(&mut r.paths[m], p));
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
    let mut dirs: Vec<PathBuf> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(PathBuf::from)
        .collect();
    if dirs.is_empty() {
        dirs = vec!["/dev/shm".into(), "/var/tmp".into()];
    }
    // NBRAID_CASE=raid6 runs only the cases whose name starts with it.
    let only = std::env::var("NBRAID_CASE").ok();
    let mut rows = Vec::new();
    for dir in &dirs {
        for case in CASES
            .iter()
            .filter(|c| only.as_ref().is_none_or(|o| c.name.starts_with(o)))
        {
            let mut r = rig(dir, case);
            let (mut peers, mut ours, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
            let (mut peer_cpu, mut our_cpu, mut bounds) = (Vec::new(), Vec::new(), Vec::new());
            // Members read per rebuilt byte: a mirror copies one, a parity group reads the
            // survivors of a stripe.
            let reads = match case.level {
                Level::Raid1 => 1,
                _ => case.members - case.failed.len(),
            };
            for _ in 0..ROUNDS {
                let p = peer(dir);
                let pr = peer_read(&r);
                bounds.push(shared_device_bound(
                    reads,
                    case.failed.len(),
                    pr / p.bytes_per_s,
                ));
                let o = rebuild(dir, case, &mut r);
                peers.push(p.bytes_per_s);
                ours.push(o.bytes_per_s);
                ratios.push(o.bytes_per_s / p.bytes_per_s);
                // CPU seconds per GiB of member written.
                peer_cpu.push(p.cpu_s * GIB / REGION as f64);
                our_cpu.push(o.cpu_s * GIB / REGION as f64);
            }
            drop(r.v);
            for p in &r.paths {
                let _ = std::fs::remove_file(p);
            }
            rows.push((
                dir.display().to_string(),
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
         write bandwidth in the same round; CPU: seconds of this process, all threads, per GiB \
         of member written; medians)"
    );
}

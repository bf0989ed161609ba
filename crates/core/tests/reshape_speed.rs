//! Issue 34's speed figures for the reshape engine, on simulated SSDs and HDDs (each member
//! its own device, a virtual clock: no CPU time, no machine noise), as ratios against peers
//! measured in the same run:
//! - the reshape's idle rate (logical bytes moved per second) against one member's
//!   sequential read;
//! - reads and writes served during the reshape against the same load on the healthy
//!   volume: 1 MiB sequential reads, 1 MiB sequential writes (8 in flight each) and 4 KiB
//!   random writes (16 in flight).
//!
//! Printed, not asserted (`cargo test -p nbraid-core --test reshape_speed -- --nocapture`;
//! the clock is virtual, so a run gives the same figures every time). The copy runs here as
//! the array's pass does, window after window with nothing between; the clients' load starts
//! with it, at the start of the volume, so the copy crosses the loaded range. Both the
//! healthy volume and the reshaping one run the default write-back stripe cache; each figure
//! is also given against a healthy write-through volume. The issue's goals are ≥ 0.5 each;
//! where they stand, and what each part of the copy's pace bought, is in
//! `docs/benchmarks/README.md` ("Online reshape").

use futures::future::join;
use futures::stream::{FuturesUnordered, StreamExt};
use nbraid_core::reshape::{MemberRows, ReshapeHooks};
use nbraid_core::{Buf, CacheMode, Member, Volume, VolumeOptions, VolumeResult};
use nbraid_layout::{Geometry, Level, ParityLayout, Region, Shape, Window};
use nbraid_sim::clock::{run_virtual, SimClock};
use nbraid_sim::timed::{HddParams, SimMember, SimModel, SsdParams};
use nbraid_sim::Rng;
use std::sync::Arc;
use std::time::Duration;

const MIB: u64 = 1 << 20;
const MEMBER: u64 = 64 * MIB;

fn geometry(level: Level, members: usize) -> Geometry {
    let shape = Shape::new(level, members, None, 64 << 10, ParityLayout::default()).unwrap();
    Geometry::new(
        shape,
        &vec![
            Region {
                start: 0,
                len: MEMBER
            };
            members
        ],
    )
    .unwrap()
}

fn member(model: &SimModel, name: &str, clock: &Arc<SimClock>) -> Arc<dyn Member> {
    Arc::new(SimMember::new(name, MEMBER, model, clock.clone(), false))
}

/// Records kept nowhere: the speed of the copy itself.
struct Nowhere;

impl ReshapeHooks for Nowhere {
    fn backup<'a>(
        &'a self,
        _: Window,
        _: &'a [MemberRows],
    ) -> futures::future::BoxFuture<'a, VolumeResult<()>> {
        Box::pin(futures::future::ready(Ok(())))
    }
    fn checkpoint(&self, _: u64) -> futures::future::BoxFuture<'_, VolumeResult<()>> {
        Box::pin(futures::future::ready(Ok(())))
    }
}

/// `len` bytes read from `read(offset, len)` in 1 MiB requests, 8 in flight.
async fn read_stream<F, Fut>(len: u64, read: F)
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    requests(len / MIB, 8, |i| read(i * MIB)).await
}

/// `count` requests `issue(i)`, `inflight` at a time.
async fn requests<F, Fut>(count: u64, inflight: usize, issue: F)
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut q = FuturesUnordered::new();
    let mut i = 0;
    while i < count || !q.is_empty() {
        while q.len() < inflight && i < count {
            q.push(issue(i));
            i += 1;
        }
        q.next().await;
    }
}

/// A client's load on the volume.
#[derive(Clone, Copy, Debug)]
enum Load {
    /// 32 MiB in 1 MiB reads from the start, 8 in flight.
    SeqRead,
    /// 32 MiB in 1 MiB writes from the start, 8 in flight.
    SeqWrite,
    /// 4 MiB in 4 KiB writes at seeded places of the first 32 MiB, 16 in flight.
    RandWrite,
}

impl Load {
    fn name(self) -> &'static str {
        match self {
            Load::SeqRead => "1 MiB sequential reads",
            Load::SeqWrite => "1 MiB sequential writes",
            Load::RandWrite => "4 KiB random writes",
        }
    }

    fn len_bytes(self) -> u64 {
        match self {
            Load::RandWrite => 4 * MIB,
            _ => 32 * MIB,
        }
    }

    /// Runs the load on `v`; writes end with a flush (the write-back caches may hold them).
    async fn run(self, v: &Volume) {
        self.issue(v).await;
        if !matches!(self, Load::SeqRead) {
            v.flush().await.unwrap();
        }
    }

    async fn issue(self, v: &Volume) {
        const BLOCK: u64 = 4096;
        match self {
            Load::SeqRead => {
                read_stream(self.len_bytes(), |at| async move {
                    v.read(at, MIB).await.unwrap();
                })
                .await
            }
            Load::SeqWrite => {
                let data = vec![0x5a; MIB as usize];
                requests(self.len_bytes() / MIB, 8, |i| {
                    let data = Buf::copy_from(&data);
                    async move {
                        v.write(i * MIB, data, false).await.unwrap();
                    }
                })
                .await
            }
            Load::RandWrite => {
                let data = [0xa5; BLOCK as usize];
                let mut rng = Rng::new(7);
                let places: Vec<u64> = (0..self.len_bytes() / BLOCK)
                    .map(|_| rng.below(32 * MIB / BLOCK) * BLOCK)
                    .collect();
                requests(places.len() as u64, 16, |i| {
                    let (data, at) = (Buf::copy_from(&data), places[i as usize]);
                    async move {
                        v.write(at, data, false).await.unwrap();
                    }
                })
                .await
            }
        }
    }
}

/// One member read sequentially: bytes per second.
fn member_read_rate(model: &SimModel) -> f64 {
    let clock = SimClock::new();
    let m = member(model, "peer", &clock);
    run_virtual(
        &clock,
        read_stream(MEMBER, |at| {
            let m = m.clone();
            async move {
                m.read(at, Buf::new(MIB as usize)).await.unwrap();
            }
        }),
    )
    .unwrap();
    MEMBER as f64 / clock.now().as_secs_f64()
}

/// `load` on the healthy old volume: bytes per second.
fn healthy_rate(model: &SimModel, old: &Geometry, load: Load, opts: VolumeOptions) -> f64 {
    let clock = SimClock::new();
    let ms = (0..old.member_count())
        .map(|i| member(model, &format!("m{i}"), &clock))
        .collect();
    let v = Volume::new(old.clone(), ms, opts).unwrap();
    run_virtual(&clock, load.run(&v)).unwrap();
    load.len_bytes() as f64 / clock.now().as_secs_f64()
}

/// The reshape alone (idle), in windows of `window` bytes: logical bytes per second.
fn idle_reshape_rate(model: &SimModel, old: &Geometry, new: &Geometry, window: u64) -> f64 {
    let clock = SimClock::new();
    let ms = (0..new.member_count())
        .map(|i| member(model, &format!("m{i}"), &clock))
        .collect();
    let (v, node) = Volume::reshaping(old.clone(), new, ms, VolumeOptions::default(), 0).unwrap();
    run_virtual(&clock, async {
        while node.copy_next(window, &Nowhere).await.unwrap().is_some() {}
    })
    .unwrap();
    v.capacity() as f64 / clock.now().as_secs_f64()
}

/// `load` while the reshape runs from the start in windows of `window` bytes: bytes per
/// second.
fn busy_rate(model: &SimModel, old: &Geometry, new: &Geometry, window: u64, load: Load) -> f64 {
    let clock = SimClock::new();
    let ms = (0..new.member_count())
        .map(|i| member(model, &format!("m{i}"), &clock))
        .collect();
    let (v, node) = Volume::reshaping(old.clone(), new, ms, VolumeOptions::default(), 0).unwrap();
    let mut took = Duration::ZERO;
    run_virtual(
        &clock,
        join(
            async { while node.copy_next(window, &Nowhere).await.unwrap().is_some() {} },
            async {
                let start = clock.now();
                load.run(&v).await;
                took = clock.now() - start;
            },
        ),
    )
    .unwrap();
    load.len_bytes() as f64 / took.as_secs_f64()
}

#[test]
fn reshape_rates_against_a_member_and_the_healthy_volume() {
    for model in [
        SimModel::Ssd(SsdParams::default()),
        SimModel::Hdd(HddParams::default()),
    ] {
        let peer = member_read_rate(&model);
        for (name, old, new) in [
            (
                "raid5 3→4",
                geometry(Level::Raid5, 3),
                geometry(Level::Raid5, 4),
            ),
            (
                "raid5→raid6 +1",
                geometry(Level::Raid5, 3),
                geometry(Level::Raid6, 4),
            ),
        ] {
            // 4 MiB: the array pass's longest window (`metadata/reshape_run.rs`).
            for window in [MIB, 4 * MIB, 8 * MIB] {
                let idle = idle_reshape_rate(&model, &old, &new, window);
                println!(
                    "{} {name}, longest windows {} MiB: reshape {:.2} of a member's sequential read",
                    model.name(),
                    window / MIB,
                    idle / peer,
                );
                for load in [Load::SeqRead, Load::SeqWrite, Load::RandWrite] {
                    let healthy = healthy_rate(&model, &old, load, VolumeOptions::default());
                    let through = VolumeOptions {
                        cache: CacheMode::WriteThrough,
                        ..VolumeOptions::default()
                    };
                    let healthy_through = healthy_rate(&model, &old, load, through);
                    let busy = busy_rate(&model, &old, &new, window, load);
                    println!(
                        "    {} during it: {:.2} of healthy ({:.2} of healthy write-through)",
                        load.name(),
                        busy / healthy,
                        busy / healthy_through
                    );
                }
            }
        }
    }
}

//! Issue 34's speed figures for the reshape engine, on simulated SSDs and HDDs (each member
//! its own device, a virtual clock: no CPU time, no machine noise), as ratios against peers
//! measured in the same run:
//! - the reshape's idle rate (logical bytes moved per second) against one member's
//!   sequential read;
//! - reads served during the reshape against reads of the healthy volume.
//!
//! Printed, not asserted (`cargo test -p nbraid-core --test reshape_speed -- --nocapture`):
//! the goals (≥ 0.5 each) are for the pass with its rate limit and windows in flight,
//! which is not in this build; the figures say where the window-at-a-time copy stands.

use futures::future::join;
use futures::stream::{FuturesUnordered, StreamExt};
use nbraid_core::reshape::{MemberRows, ReshapeHooks};
use nbraid_core::{Buf, Member, Volume, VolumeOptions, VolumeResult};
use nbraid_layout::{Geometry, Level, ParityLayout, Region, Shape, Window};
use nbraid_sim::clock::{run_virtual, SimClock};
use nbraid_sim::timed::{HddParams, SimMember, SimModel, SsdParams};
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
    let mut q = FuturesUnordered::new();
    let mut at = 0;
    while at < len || !q.is_empty() {
        while q.len() < 8 && at < len {
            q.push(read(at));
            at += MIB;
        }
        q.next().await;
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

/// Reads of `len` bytes of the healthy old volume: bytes per second.
fn healthy_read_rate(model: &SimModel, old: &Geometry, len: u64) -> f64 {
    let clock = SimClock::new();
    let ms = (0..old.member_count())
        .map(|i| member(model, &format!("m{i}"), &clock))
        .collect();
    let v = Volume::new(old.clone(), ms, VolumeOptions::default()).unwrap();
    run_virtual(
        &clock,
        read_stream(len, |at| {
            let v = &v;
            async move {
                v.read(at, MIB).await.unwrap();
            }
        }),
    )
    .unwrap();
    len as f64 / clock.now().as_secs_f64()
}

/// The reshape alone (idle), in windows of `window` bytes: logical bytes per second. And
/// reads of `len` bytes while it runs: bytes per second.
fn reshape_rates(
    model: &SimModel,
    old: &Geometry,
    new: &Geometry,
    window: u64,
    len: u64,
) -> (f64, f64) {
    let idle = {
        let clock = SimClock::new();
        let ms = (0..new.member_count())
            .map(|i| member(model, &format!("m{i}"), &clock))
            .collect();
        let (v, node) =
            Volume::reshaping(old.clone(), new, ms, VolumeOptions::default(), 0).unwrap();
        run_virtual(&clock, async {
            while node.copy_next(window, &Nowhere).await.unwrap().is_some() {}
        })
        .unwrap();
        v.capacity() as f64 / clock.now().as_secs_f64()
    };
    let busy = {
        let clock = SimClock::new();
        let ms = (0..new.member_count())
            .map(|i| member(model, &format!("m{i}"), &clock))
            .collect();
        let (v, node) =
            Volume::reshaping(old.clone(), new, ms, VolumeOptions::default(), 0).unwrap();
        let mut reads_took = Duration::ZERO;
        run_virtual(
            &clock,
            join(
                async { while node.copy_next(window, &Nowhere).await.unwrap().is_some() {} },
                async {
                    let start = clock.now();
                    read_stream(len, |at| {
                        let v = &v;
                        async move {
                            v.read(at, MIB).await.unwrap();
                        }
                    })
                    .await;
                    reads_took = clock.now() - start;
                },
            ),
        )
        .unwrap();
        len as f64 / reads_took.as_secs_f64()
    };
    (idle, busy)
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
            let healthy = healthy_read_rate(&model, &old, 32 * MIB);
            for window in [MIB, 16 * MIB] {
                let (idle, busy) = reshape_rates(&model, &old, &new, window, 32 * MIB);
                println!(
                    "{} {name}, windows of {} MiB: reshape {:.2} of a member's sequential read; reads during it {:.2} of healthy",
                    model.name(),
                    window / MIB,
                    idle / peer,
                    busy / healthy
                );
            }
        }
    }
}

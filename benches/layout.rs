//! Layout mapping cost: how long the engine's hot path spends turning a request into member
//! extents. `cargo bench --bench layout`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nbraid_layout::{Geometry, Level, ParityLayout, Region, Shape};
use std::hint::black_box;
use std::time::Duration;

fn geometry(level: Level, members: usize, spans: Option<usize>) -> Geometry {
    let shape = Shape::new(level, members, spans, 64 << 10, ParityLayout::default()).unwrap();
    let regions = vec![
        Region {
            start: 1 << 20,
            len: 64 << 30
        };
        members
    ];
    Geometry::new(shape, &regions).unwrap()
}

fn map(c: &mut Criterion) {
    let mut group = c.benchmark_group("map");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let shapes = [
        ("raid0x8", geometry(Level::Raid0, 8, None)),
        ("raid10x8", geometry(Level::Raid10, 8, None)),
        ("raid5x8", geometry(Level::Raid5, 8, None)),
        ("raid60x24-6", geometry(Level::Raid60, 24, Some(6))),
    ];
    for (name, g) in &shapes {
        for len in [4096u64, 1 << 20] {
            group.throughput(Throughput::Elements(1));
            group.bench_with_input(BenchmarkId::new(*name, len), &len, |b, &len| {
                // Walk offsets across the volume so stripes change between calls.
                let mut off = 0u64;
                let step = 7 * 4096 + len;
                let cap = g.capacity() - len;
                b.iter(|| {
                    off = (off + step) % cap / 4096 * 4096;
                    black_box(g.map(off, len).unwrap())
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, map);
criterion_main!(benches);

//! QD1 latency of one io_uring file member against the cost of a bare cross-thread wake-up
//! round trip on this machine (what two engine hops cost at least).
//!
//! `cargo run --release -p nbraid-core --example qd1_latency [dir]` (default: /dev/shm; on
//! tmpfs ops up to 1 MiB run inline on the caller's thread, on a disk file system they go
//! through the ring). `DIRECT=off` opens the member without O_DIRECT.

use futures::executor::block_on;
use nbraid_core::{Buf, Member, UringFile};
use std::time::Instant;

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "/dev/shm".into());
    let path = std::path::Path::new(&dir).join(format!("nbraid-qd1-{}.img", std::process::id()));
    let direct = match std::env::var("DIRECT").as_deref() {
        Ok("off") => nbraid_core::DirectIo::Off,
        _ => nbraid_core::DirectIo::Auto,
    };
    let opts = nbraid_core::FileOptions {
        direct,
        engine: None,
    };
    let m = UringFile::open_with(&path, Some(64 << 20), opts).expect("open");
    block_on(m.write(0, Buf::zeroed(64 << 20).freeze(), false)).unwrap();
    let n = 20_000u64;
    let mut buf = Buf::new(4096);
    let t = Instant::now();
    for i in 0..n {
        buf = block_on(m.read((i * 7919 % 16384) * 4096, buf)).unwrap();
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!(
        "io_uring member, 4 KiB read QD1: {us:.1} us/op ({:.0} IOPS), direct = {}",
        1e6 / us,
        m.is_direct()
    );

    // Bare ping-pong between two threads over channels (two wake-ups per round trip).
    let (to_tx, to_rx) = crossbeam_channel::bounded::<u64>(1);
    let (back_tx, back_rx) = crossbeam_channel::bounded::<u64>(1);
    let h = std::thread::spawn(move || {
        while let Ok(v) = to_rx.recv() {
            back_tx.send(v).unwrap();
        }
    });
    let t = Instant::now();
    for i in 0..n {
        to_tx.send(i).unwrap();
        back_rx.recv().unwrap();
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!("thread ping-pong round trip: {us:.1} us");
    drop(to_tx);
    h.join().unwrap();

    // The same member behind a volume, driven like the benchmark (FuturesUnordered, QD1).
    use futures::stream::{FuturesUnordered, StreamExt};
    let geometry = nbraid_layout::Geometry::from_tree(nbraid_layout::Node::member(0, 0, 64 << 20));
    let members: Vec<std::sync::Arc<dyn Member>> = vec![std::sync::Arc::new(m)];
    let v = nbraid_core::Volume::new(geometry, members, Default::default()).unwrap();
    for (name, write) in [("read", false), ("write", true)] {
        let t = Instant::now();
        let mut spare = vec![Buf::new(4096)];
        block_on(async {
            let mut inflight = FuturesUnordered::new();
            let mut i = 0u64;
            loop {
                while inflight.is_empty() && i < n {
                    let off = (i * 7919 % 16384) * 4096;
                    i += 1;
                    let b = spare.pop().unwrap();
                    let v = &v;
                    inflight.push(async move {
                        if write {
                            v.write(off, b, false).await
                        } else {
                            v.read_into(off, b).await
                        }
                    });
                }
                match inflight.next().await {
                    Some(r) => spare.push(r.unwrap()),
                    None => break,
                }
            }
        });
        let us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        println!("volume over it, 4 KiB {name} QD1 via FuturesUnordered: {us:.1} us/op");
    }
    let _ = std::fs::remove_file(&path);
}

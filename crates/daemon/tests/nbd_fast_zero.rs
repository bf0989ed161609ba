//! `NBD_CMD_FLAG_FAST_ZERO` against a real volume, over NBD: a RAID 5 zeroes whole stripes by
//! zeroing its members, but a partial stripe costs a parity read-modify-write, so FAST_ZERO
//! there must fail at once with `NBD_ENOTSUP` and leave the data alone.

use std::sync::Arc;

use bytes::Bytes;
use nbraid_core::{CacheMode, Member, MemoryMember, Volume, VolumeOptions};
use nbraid_daemon::export::VolumeExport;
use nbraid_daemon::nbd::client::{Client, ConnectOptions, Negotiation};
use nbraid_daemon::nbd::proto::{ENOTSUP, TFLAG_SEND_FAST_ZERO};
use nbraid_daemon::nbd::{Export, Server, ZeroFlags};
use nbraid_layout::{Geometry, Level, ParityLayout, Region, Shape};

const MIB: u64 = 1 << 20;

/// RAID 5 over 4 memory members, 64 KiB strips: full stripes of 192 KiB.
fn raid5() -> Arc<VolumeExport> {
    let shape = Shape::new(Level::Raid5, 4, None, 64 << 10, ParityLayout::LeftSymmetric).unwrap();
    let regions = vec![
        Region {
            start: 0,
            len: 8 * MIB
        };
        4
    ];
    let geometry = Geometry::new(shape, &regions).unwrap();
    let members: Vec<Arc<dyn Member>> = (0..4)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), 8 * MIB)) as Arc<dyn Member>)
        .collect();
    let opts = VolumeOptions {
        block_size: 4096,
        cache: CacheMode::WriteThrough,
        ..VolumeOptions::default()
    };
    let volume = Arc::new(Volume::new(geometry, members, opts).unwrap());
    Arc::new(VolumeExport::new(volume, false, String::new()))
}

const STRIPE: u64 = 192 << 10;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_zero_fails_at_once_where_zeroing_needs_parity_work() {
    let export: Arc<dyn Export> = raid5();
    let server = Server::new(vec![("r5".to_string(), export)]).unwrap();
    for structured in [false, true] {
        let (a, b) = tokio::io::duplex(4 << 20);
        server.spawn_connection(b);
        let negotiation = Negotiation {
            structured,
            ..Negotiation::default()
        };
        let c = Client::handshake(a, "r5", &ConnectOptions { negotiation })
            .await
            .unwrap();
        assert!(c.info().has(TFLAG_SEND_FAST_ZERO));
        let data = pattern(4 * STRIPE as usize, 3);
        c.write(0, Bytes::from(data.clone())).await.unwrap();

        // Part of a stripe: refused, nothing changed.
        let fast = ZeroFlags {
            fast_only: true,
            ..ZeroFlags::default()
        };
        let err = c.write_zeroes(4096, 8192, fast).await.unwrap_err();
        assert_eq!(err.errno(), Some(ENOTSUP), "{err}");
        assert!(c.read(0, STRIPE as usize).await.unwrap() == data[..STRIPE as usize]);

        // Without the flag the same range is zeroed (the slow way).
        c.write_zeroes(4096, 8192, ZeroFlags::default())
            .await
            .unwrap();
        // Whole stripes with the flag: fast, done.
        let fast_no_hole = ZeroFlags {
            may_trim: false,
            ..fast
        };
        c.write_zeroes(STRIPE, 2 * STRIPE, fast_no_hole)
            .await
            .unwrap();
        let back = c.read(0, 4 * STRIPE as usize).await.unwrap();
        let mut want = data.clone();
        want[4096..4096 + 8192].fill(0);
        want[STRIPE as usize..3 * STRIPE as usize].fill(0);
        assert!(back == want, "contents after zeroing");
        c.disconnect().await;
    }
}

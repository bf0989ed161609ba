//! `NBD_CMD_FLAG_FAST_ZERO` against a real volume: a RAID 5 zeroes whole stripes by zeroing
//! its members, but a partial stripe costs a parity read-modify-write, so FAST_ZERO there must
//! fail at once with `NBD_ENOTSUP` and leave the data alone.

use super::*;
use crate::export::VolumeExport;
use nbraid_core::{CacheMode, Member, MemoryMember, Volume, VolumeOptions};
use nbraid_layout::{Geometry, Level, ParityLayout, Region, Shape};

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

#[tokio::test]
async fn fast_zero_fails_at_once_where_zeroing_needs_parity_work() {
    let server = server_with(vec![("r5", raid5())]);
    for structured in [false, true] {
        let mut c = Client::connect(&server);
        let (_, flags) = c.go("r5", structured).await;
        assert_ne!(flags & TFLAG_SEND_FAST_ZERO, 0);
        let data = pattern(4 * STRIPE as usize, 3);
        c.write(1, 0, &data).await;
        assert_eq!(c.simple().await, (0, 1));

        // Part of a stripe: refused, nothing changed.
        let fast = CMD_FLAG_FAST_ZERO;
        c.request(fast, CMD_WRITE_ZEROES, 2, 4096, 8192).await;
        let err = if structured {
            let ch = c.chunk().await;
            assert_eq!((ch.typ, ch.cookie), (REPLY_TYPE_ERROR, 2));
            u32::from_be_bytes(ch.payload[0..4].try_into().unwrap())
        } else {
            c.simple().await.0
        };
        assert_eq!(err, ENOTSUP);
        assert!(
            c.read_structured_or_simple(3, 0, STRIPE as u32, structured)
                .await
                == data[..STRIPE as usize]
        );

        // Without the flag the same range is zeroed (the slow way).
        c.request(0, CMD_WRITE_ZEROES, 4, 4096, 8192).await;
        assert_eq!(c.simple().await, (0, 4));
        // Whole stripes with the flag: fast, done.
        c.request(
            fast | CMD_FLAG_NO_HOLE,
            CMD_WRITE_ZEROES,
            5,
            STRIPE,
            2 * STRIPE as u32,
        )
        .await;
        assert_eq!(c.simple().await, (0, 5));
        let back = c
            .read_structured_or_simple(6, 0, 4 * STRIPE as u32, structured)
            .await;
        let mut want = data.clone();
        want[4096..4096 + 8192].fill(0);
        want[STRIPE as usize..3 * STRIPE as usize].fill(0);
        assert!(back == want, "contents after zeroing");
    }
}

impl Client {
    /// Reads `len` bytes at `offset` (one data chunk when structured).
    async fn read_structured_or_simple(
        &mut self,
        cookie: u64,
        offset: u64,
        len: u32,
        structured: bool,
    ) -> Vec<u8> {
        if !structured {
            return self.read_simple(cookie, offset, len).await;
        }
        self.request(0, CMD_READ, cookie, offset, len).await;
        let ch = self.chunk().await;
        assert_eq!((ch.typ, ch.cookie), (REPLY_TYPE_OFFSET_DATA, cookie));
        ch.payload[8..].to_vec()
    }
}

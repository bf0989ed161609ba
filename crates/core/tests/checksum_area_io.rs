//! What the checksum area costs in member I/O on the write path. The header's bits are made
//! durable (a FUA write of the header) before the first write under their page group since
//! the open: a sequential writer marks ahead, one header write per 32 MiB of the member's
//! region, not one per 2 MiB group — on a disk each is a write on the critical path away
//! from the data; writes that do not continue a stream mark only the groups they need. And
//! an entry page not in the cache is read once, however many writes need it while it loads.

mod common;

use common::{KIB, MIB};
use futures::executor::block_on;
use futures::future::{BoxFuture, FutureExt};
use nbraid_core::checksum::{area_bytes, ChecksumArea, ChecksumSetup};
use nbraid_core::{
    Buf, CacheMode, Member, MemberResult, MemoryMember, SharedBuf, Volume, VolumeOptions,
};
use nbraid_layout::{Geometry, Node};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// 32 page groups of 2 MiB.
const REGION: u64 = 64 * MIB;

/// A memory member that counts the writes to one offset (the checksum header) and the
/// reads at or past it (entry pages); its reads answer only after a few polls, as a disk's
/// do, so loads of a page by several writers overlap.
struct HeaderWrites {
    inner: MemoryMember,
    at: u64,
    count: AtomicU64,
    area_reads: AtomicU64,
}

impl Member for HeaderWrites {
    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        if offset >= self.at {
            self.area_reads.fetch_add(1, Ordering::SeqCst);
        }
        async move {
            for _ in 0..3 {
                common::yield_once().await;
            }
            self.inner.read(offset, buf).await
        }
        .boxed()
    }
    fn write(&self, offset: u64, data: SharedBuf, fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        if offset == self.at {
            assert!(fua, "the header is written FUA");
            self.count.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.write(offset, data, fua)
    }
    common::pass_through!(inner; name len flush trim write_zeroes counters);
}

/// A JBOD over one counting member, checksums on, opened clean (no group marked).
fn volume() -> (Volume, Arc<HeaderWrites>) {
    let area = area_bytes(REGION);
    let member = Arc::new(HeaderWrites {
        inner: MemoryMember::new("m0", REGION + area),
        at: REGION,
        count: AtomicU64::new(0),
        area_reads: AtomicU64::new(0),
    });
    let setup = ChecksumSetup::new(
        "t",
        vec![Some(ChecksumArea {
            offset_bytes: REGION,
            len_bytes: area,
        })],
        true,
    );
    let opts = VolumeOptions {
        block_size: 4096,
        members_known_zero: true,
        cache: CacheMode::WriteThrough,
        checksums: Some(setup),
        ..VolumeOptions::default()
    };
    let tree = Node::concat(vec![Node::member(0, 0, REGION)]).unwrap();
    let v = Volume::new(Geometry::from_tree(tree), vec![member.clone()], opts).unwrap();
    (v, member)
}

#[test]
fn a_sequential_writer_marks_its_groups_ahead() {
    let (v, member) = volume();
    let piece = vec![0x5au8; MIB as usize];
    block_on(async {
        for at in (0..REGION).step_by(MIB as usize) {
            v.write(at, Buf::copy_from(&piece), false).await.unwrap();
        }
    });
    // Group 0 alone (nothing before it is marked), then groups 1..=17, then 18..=31.
    assert_eq!(member.count.load(Ordering::SeqCst), 3);
    let got = block_on(v.read(REGION - MIB, MIB)).unwrap();
    assert!(got.iter().all(|&b| b == 0x5a));
}

/// The header bits as they are on the member.
fn header_bits(member: &HeaderWrites) -> Vec<u64> {
    let mut header = vec![0u8; 4096];
    member.inner.peek(REGION, &mut header);
    (0..REGION / (2 * MIB))
        .filter(|&g| header[(g / 8) as usize] & (1 << (g % 8)) != 0)
        .collect()
}

#[test]
fn writes_that_do_not_continue_a_stream_mark_only_their_groups() {
    let (v, member) = volume();
    let piece = vec![0x33u8; 64 * KIB as usize];
    let write_group = |g: u64| block_on(v.write(g * 2 * MIB, Buf::copy_from(&piece), false));
    // Groups apart from each other: each marks its own.
    for g in [10, 12, 14] {
        write_group(g).unwrap();
    }
    assert_eq!(header_bits(&member), vec![10, 12, 14]);
    // Group 1 after group 0, written: a stream, marked 16 groups ahead.
    write_group(0).unwrap();
    write_group(1).unwrap();
    assert_eq!(member.count.load(Ordering::SeqCst), 5);
    assert_eq!(header_bits(&member), (0..=17).collect::<Vec<_>>());
    // Group 18 follows group 17, marked ahead but never written: only its own bit.
    write_group(18).unwrap();
    assert_eq!(member.count.load(Ordering::SeqCst), 6);
    assert_eq!(header_bits(&member), (0..=18).collect::<Vec<_>>());
}

#[test]
fn writers_that_need_one_entry_page_at_once_read_it_once() {
    let (v, member) = volume();
    let piece = vec![0x77u8; 64 * KIB as usize];
    // Sixteen writes under the first entry page (2 MiB of region), all in flight at once.
    let writes = (0..16u64).map(|i| v.write(i * 64 * KIB, Buf::copy_from(&piece), false));
    for r in block_on(futures::future::join_all(writes)) {
        r.unwrap();
    }
    assert_eq!(
        member.area_reads.load(Ordering::SeqCst),
        1,
        "one load of page 0"
    );
    let got = block_on(v.read(0, MIB)).unwrap();
    assert!(got.iter().all(|&b| b == 0x77));
}

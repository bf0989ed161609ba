//! A write-back RAID 5 that loses two members with writes still cached: the flush that
//! cannot write them back is counted with its error (the daemon's events read it).

mod common;

use common::*;
use futures::executor::block_on;
use nbraid_core::{Buf, CacheMode, Volume, VolumeOptions};
use nbraid_layout::Level;

fn write_back_raid5() -> (
    Vec<std::sync::Arc<nbraid_sim::Faulty<nbraid_core::MemoryMember>>>,
    Volume,
) {
    let (f, m) = faulty_members(4, MIB, 11, false);
    let opts = VolumeOptions {
        cache: CacheMode::WriteBack { bytes: 4 * MIB },
        // No flusher thread: only the flush writes the cache back.
        cache_max_age: None,
        ..VolumeOptions::default()
    };
    let v = Volume::new(named(Level::Raid5, 4, None, 64 * KIB, MIB), m, opts).expect("assemble");
    (f, v)
}

#[test]
fn a_flush_that_cannot_write_back_the_cache_is_counted_with_its_error() {
    let (f, v) = write_back_raid5();
    block_on(v.write(0, Buf::copy_from(&[7u8; 4096]), false)).unwrap();
    block_on(v.flush()).unwrap();
    assert_eq!(
        v.refused_flushes().count,
        0,
        "a flush that wrote back is not refused"
    );
    block_on(v.write(0, Buf::copy_from(&[9u8; 4096]), false)).unwrap();
    assert!(v.cache_usage().dirty_bytes > 0, "the write is cached");
    f[1].kill();
    f[2].kill();
    let e = block_on(v.flush()).unwrap_err();
    let refused = v.refused_flushes();
    assert_eq!(refused.count, 1, "{e}");
    assert_eq!(refused.last_error.as_deref(), Some(e.to_string().as_str()));
    assert!(block_on(v.flush()).is_err());
    assert_eq!(v.refused_flushes().count, 2);
}

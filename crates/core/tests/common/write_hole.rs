//! The write-hole tests' arrays (`write_hole.rs`, `log_off_life.rs`, `unlogged_life.rs`):
//! members that lose their non-FUA writes at a "crash" ([`super::Lossy`]), the volume
//! filled with a known pattern, options for a start with the partial-parity log on or off.

use super::{Lossy, KIB};
use futures::executor::block_on;
use nbraid_core::metadata::{Array, ArrayOptions, MemberMeta};
use nbraid_core::{Buf, CacheMode, Member, MemoryMember, VolumeOptions};
use nbraid_layout::Node;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// `n` in-memory members of `member_bytes` that can lose writes.
pub fn lossy_disks(n: usize, member_bytes: u64) -> Vec<Arc<Lossy>> {
    (0..n)
        .map(|i| {
            Arc::new(Lossy {
                inner: MemoryMember::new(format!("disk{i}"), member_bytes),
                lose: AtomicBool::new(false),
            })
        })
        .collect()
}

/// Each disk's metadata as found now, `None` for the disks in `skip` (lost).
pub fn metas_without(disks: &[Arc<Lossy>], skip: &[usize]) -> Vec<Option<Arc<MemberMeta>>> {
    (disks.iter().enumerate())
        .map(|(i, d)| {
            (!skip.contains(&i)).then(|| block_on(MemberMeta::load(d.clone() as Arc<dyn Member>)))
        })
        .collect()
}

/// Write-through, a write-intent bitmap of 256 KiB chunks, the log on or off (`ppl`), in
/// a reserve of `log_reserve_bytes` before the region or (`None`) in the metadata area.
pub fn opts(ppl: bool, log_reserve_bytes: Option<u64>) -> ArrayOptions {
    ArrayOptions {
        ppl_area_before_region_bytes: log_reserve_bytes,
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(256 * KIB),
        ppl,
        ..ArrayOptions::default()
    }
}

/// `len` bytes that differ by `seed`, by byte and by 4 KiB block.
pub fn pattern(seed: u64, len: usize) -> Buf {
    let mut b = Buf::new(len);
    for (i, x) in b.iter_mut().enumerate() {
        *x = (seed as usize * 131 + i * 7 + i / 4096) as u8;
    }
    b
}

/// A volume `t` created (assumed clean) over every disk, written whole with `pattern(1, ..)`
/// and flushed; with its capacity.
pub fn create_filled(t: &Node, disks: &[Arc<Lossy>], o: ArrayOptions) -> (Array, u64) {
    let all = metas_without(disks, &[]).into_iter().flatten().collect();
    let a = block_on(Array::create("vol", t.clone(), all, o, true, &|_, _| {}))
        .expect("create")
        .0;
    let capacity = a.volume().capacity();
    block_on(a.write(0, pattern(1, capacity as usize), false)).expect("fill");
    block_on(a.flush()).expect("flush");
    (a, capacity)
}

//! A background resync that ends before it covered everything (cancelled, or the pass
//! failed: `resync.rs`'s `finish` leaves the pending state in place whenever pieces are
//! left) tells the truth and forgets nothing: the bytes left are reported, the records
//! stay dirty (a clean point is declined), the stale role stays out and resyncing, and the
//! next start resyncs at least what was left — the stale role with it — before the role is
//! current again.

mod common;

use common::{KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::METADATA_AREA_BYTES;
use nbraid_core::metadata::{Array, ArrayOptions, CleanMark, MemberMeta, OpenReport};
use nbraid_core::{Buf, CacheMode, Member, MemoryMember, PassControl, PassState, VolumeOptions};
use nbraid_layout::{Level, Node, ParityLayout, Region, Shape};
use std::sync::Arc;
use std::time::Duration;

const REGION: u64 = 16 * MIB;

fn tree() -> Node {
    let shape = Shape::new(Level::Raid1, 3, None, 64 * KIB, ParityLayout::LeftSymmetric);
    let region = Region {
        start: METADATA_AREA_BYTES,
        len: REGION,
    };
    shape.expect("shape").build(&[region; 3]).expect("tree")
}

fn opts() -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            ..VolumeOptions::default()
        },
        bitmap_chunk_bytes: Some(256 * KIB),
        // Resynced chunks' bits go at the next flush.
        bitmap_clear_delay: Duration::ZERO,
        ..ArrayOptions::default()
    }
}

fn metas(disks: &[Arc<MemoryMember>]) -> Vec<Arc<MemberMeta>> {
    (disks.iter())
        .map(|d| block_on(MemberMeta::load(d.clone() as Arc<dyn Member>)))
        .collect()
}

fn reopen(disks: &[Arc<MemoryMember>]) -> (Array, OpenReport) {
    let m = metas(disks).into_iter().map(Some).collect();
    block_on(Array::open_background(
        "vol",
        &tree(),
        m,
        opts(),
        &|_, _| {},
    ))
    .expect("open")
}

/// Writes the whole volume in 64 KiB blocks of `seed`'s pattern (no flush: every bitmap
/// chunk stays set); returns the bytes.
fn write_all(a: &Array, seed: u64) -> Vec<u8> {
    let mut model = Vec::new();
    let mut at = 0;
    while at < a.volume().capacity() {
        let mut b = Buf::new(64 * KIB as usize);
        for (i, x) in b.iter_mut().enumerate() {
            *x = (seed as usize ^ at as usize ^ (i * 13) ^ (i >> 8)) as u8;
        }
        model.extend_from_slice(&b);
        block_on(a.write(at, b, false)).expect("write");
        at += 64 * KIB;
    }
    model
}

#[test]
fn a_background_resync_cut_short_says_what_is_left_and_the_next_start_resyncs_it() {
    let d: Vec<Arc<MemoryMember>> = (0..3)
        .map(|i| {
            Arc::new(MemoryMember::new(
                format!("d{i}"),
                METADATA_AREA_BYTES + REGION,
            ))
        })
        .collect();
    let a = block_on(Array::create(
        "vol",
        tree(),
        metas(&d),
        opts(),
        true,
        &|_, _| {},
    ))
    .expect("create")
    .0;
    let mut old = vec![0u8; (METADATA_AREA_BYTES + REGION) as usize];
    d[2].peek(0, &mut old);
    let _ = write_all(&a, 3);
    block_on(a.mark_clean()).expect("clean");
    let model = write_all(&a, 5);
    drop(a); // a crash, dirty
    d[2].poke(0, &old); // d2 missed all that: stale
    let (a, report) = reopen(&d);
    let total = a.background_bytes();
    assert!(a.background_pending() && total > 0, "{report:?}");
    assert_eq!(report.resynced_roles, vec![2], "{report:?}");

    // Cut short half-way.
    let ctl = PassControl::new(total * 2);
    let cancel = async {
        while ctl.position_bytes() < total / 2 {
            nbraid_core::timer::sleep(Duration::from_millis(1)).await;
        }
        ctl.cancel();
    };
    let (r, ()) = block_on(futures::future::join(a.background_resync(&ctl), cancel));
    assert_eq!(r.expect("pass"), PassState::Cancelled);
    let left = a.background_bytes();
    assert!(left > 0 && left < total, "left {left} of {total}");
    assert!(a.background_pending());
    assert!(!a.volume().member_is_current(2), "the stale role stays out");
    let mark = block_on(a.mark_clean()).expect("mark");
    assert!(matches!(mark, CleanMark::ResyncPending), "{mark:?}");
    assert!(a.is_dirty(), "no clean point before the resync is done");
    drop(a); // stopped with the pass not done

    // The next start resyncs what was left, the stale role still stale: here all the
    // bitmap marked at the first start, since no bit is cleared while a role is not
    // current (the stale member still needs the chunks' bits; `tests/resync.rs` shows a
    // resume over less where every member is current).
    let (a, report) = reopen(&d);
    assert_eq!(report.resynced_roles, vec![2], "{report:?}");
    assert!(
        report.background_bytes >= left,
        "left {left}, resumed over {}: {report:?}",
        report.background_bytes
    );
    let r = block_on(a.background_resync(&PassControl::new(0)));
    assert_eq!(r.expect("pass"), PassState::Done);
    assert!(!a.background_pending() && a.background_bytes() == 0);
    assert!(a.volume().member_is_current(2), "current once resynced");
    assert!(matches!(block_on(a.mark_clean()), Ok(CleanMark::Recorded)));
    // d2 alone holds every byte.
    a.volume().fail_member(0, "test");
    a.volume().fail_member(1, "test");
    let got = block_on(a.read(0, a.volume().capacity())).expect("read");
    assert!(got[..] == model[..], "the stale member resynced whole");
}

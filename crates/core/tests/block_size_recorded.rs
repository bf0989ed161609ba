//! The engine records the block size a volume is served with (a byte of every member entry
//! that was padding) and serves the recorded one: a disk's sector size never changes under
//! its data, so an open asking another (a config edited after the data was written) gets the
//! recorded size. Records from before the byte take the size asked, and the open's commit
//! records it.

mod common;

use common::arrays::metas;
use common::MIB;
use futures::executor::block_on;
use nbraid_core::metadata::{
    read_superblock, write_superblock, Array, ArrayOptions, Found, Superblock, METADATA_AREA_BYTES,
};
use nbraid_core::{Buf, CacheMode, Member, MemoryMember, VolumeOptions};
use nbraid_layout::{Level, Node, Region, Shape};
use std::sync::Arc;

const REGION: u64 = 4 * MIB;
/// The block written at an odd 512-byte sector (as a partition table might be).
const LBA: u64 = 7;

fn tree() -> Node {
    let shape = Shape::new(Level::Raid1, 2, None, 64 << 10, Default::default()).expect("shape");
    let region = Region {
        start: METADATA_AREA_BYTES,
        len: REGION,
    };
    shape.build(&[region, region]).expect("tree")
}

/// The options of a volume served with `block_size`-byte blocks.
fn opts(block_size: u64) -> ArrayOptions {
    ArrayOptions {
        volume: VolumeOptions {
            cache: CacheMode::WriteThrough,
            block_size,
            ..VolumeOptions::default()
        },
        ..ArrayOptions::default()
    }
}

fn disks() -> Vec<Arc<MemoryMember>> {
    (0..2)
        .map(|i| {
            Arc::new(MemoryMember::new(
                format!("d{i}"),
                METADATA_AREA_BYTES + REGION,
            ))
        })
        .collect()
}

fn create(disks: &[Arc<MemoryMember>], block_size: u64) -> Array {
    let created = Array::create(
        "vol",
        tree(),
        metas(disks),
        opts(block_size),
        true,
        &|_, _| {},
    );
    block_on(created).expect("create").0
}

fn open(disks: &[Arc<MemoryMember>], block_size: u64) -> Array {
    let m = metas(disks).into_iter().map(Some).collect();
    let t = tree();
    let opened = Array::open("vol", &t, m, opts(block_size), &|_, _| {});
    block_on(opened).expect("open").0
}

fn superblock(d: &MemoryMember) -> Superblock {
    match block_on(read_superblock(d)).expect("readable") {
        Found::Superblock(sb, _) => sb,
        Found::Blank => panic!("blank"),
    }
}

/// The block size member `d`'s record keeps.
fn recorded(d: &MemoryMember) -> Option<u32> {
    superblock(d).volumes[0].block_size
}

fn block() -> Buf {
    let mut b = Buf::new(512);
    (b.iter_mut().enumerate()).for_each(|(i, x)| *x = (i * 7 + 3) as u8);
    b
}

#[test]
fn an_open_asking_another_block_size_serves_the_recorded_one() {
    let d = disks();
    let a = create(&d, 512);
    assert_eq!(recorded(&d[0]), Some(512), "recorded at create");
    block_on(a.write(LBA * 512, block(), true)).expect("write");
    block_on(a.mark_clean()).expect("clean");
    drop(a);
    let a = open(&d, 4096);
    assert_eq!(a.volume().block_size(), 512, "the recorded size is served");
    let got = block_on(a.read(LBA * 512, 512)).expect("a 512-byte read");
    assert_eq!(got[..], block()[..]);
    drop(a);
    for m in &d {
        assert_eq!(recorded(m), Some(512), "{}", m.name());
    }
}

#[test]
fn records_from_before_the_field_take_the_size_asked_and_record_it() {
    let d = disks();
    let a = create(&d, 512);
    block_on(a.mark_clean()).expect("clean");
    drop(a);
    // As a writer from before the block size byte left them.
    for m in &d {
        let mut sb = superblock(m);
        sb.volumes[0].block_size = None;
        sb.generation += 1;
        block_on(write_superblock(&**m, &sb)).expect("written");
        assert_eq!(recorded(m), None);
    }
    let a = open(&d, 4096);
    assert_eq!(a.volume().block_size(), 4096, "the size asked");
    drop(a);
    for m in &d {
        assert_eq!(recorded(m), Some(4096), "{}", m.name());
    }
    // From then on kept.
    assert_eq!(open(&d, 512).volume().block_size(), 4096);
}

//! A RAID 5 read beyond tolerance names the last member error and says "data unavailable"
//! once (it said "data unavailable: data unavailable: read: ...").

mod common;

use common::*;
use futures::executor::block_on;
use nbraid_core::{Buf, Volume, VolumeOptions};
use nbraid_layout::Level;

#[test]
fn a_read_beyond_tolerance_says_data_unavailable_once() {
    let (f, m) = faulty_members(4, MIB, 12, false);
    let g = named(Level::Raid5, 4, None, 64 * KIB, MIB);
    let v = Volume::new(g, m, VolumeOptions::default()).expect("assemble");
    block_on(v.write(0, Buf::copy_from(&vec![5u8; 192 * 1024]), false)).unwrap();
    block_on(v.flush()).unwrap();
    f[0].kill();
    f[1].kill();
    let e = block_on(v.read(0, 192 * 1024)).unwrap_err().to_string();
    assert_eq!(e.matches("data unavailable").count(), 1, "{e}");
}

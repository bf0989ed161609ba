//! A re-added member whose writes fail partway through its resync (a remote server that
//! answers EIO, or too slowly for its timeout): the pass ends failed naming it, and it stays
//! failed. Before, every window after the failure returned at once and the pass said "done"
//! over all its bytes, the member never made current.

mod common;

use common::arrays::{apply, metas, read_all, Model};
use common::{faulty_members, level_tree, KIB, MIB};
use futures::executor::block_on;
use nbraid_core::metadata::{Array, ArrayOptions, Readd, METADATA_AREA_BYTES};
use nbraid_core::{Member, PassControl, PassState};
use nbraid_layout::Level;
use nbraid_sim::FaultOps;

const REGION: u64 = 16 * MIB;
const MEMBER_BYTES: u64 = METADATA_AREA_BYTES + REGION;

#[test]
fn a_returning_member_that_fails_mid_resync_fails_the_pass_naming_it() {
    for (level, n, gone) in [(Level::Raid1, 2, 1), (Level::Raid5, 3, 0)] {
        let (faulty, disks) = faulty_members(n, MEMBER_BYTES, 7, false);
        let tree = level_tree(level, n, 64 * KIB, METADATA_AREA_BYTES, REGION);
        let opts = ArrayOptions {
            bitmap_chunk_bytes: Some(256 * KIB),
            ppl: true,
            ..ArrayOptions::default()
        };
        let created = Array::create("vol", tree, metas(&faulty), opts, true, &|_, _| {});
        let (a, _) = block_on(created).expect("create");
        let mut model = Model::zeroed(&a, 3);
        model.fill(&a);
        block_on(a.flush()).expect("flush");

        // Away while the whole volume is written again: every region is to be resynced.
        faulty[gone].kill();
        model.fill(&a);
        block_on(a.flush()).expect("flush degraded");
        assert!(a.volume().member_is_failed(gone), "{level:?}");
        faulty[gone].clear_faults();
        let Readd::Resync { bytes } = block_on(a.readd(gone)).expect("readd") else {
            panic!("{level:?}: not resynced over the bitmap");
        };
        assert!(bytes >= REGION, "{level:?}: {bytes}");

        // Its writes fail after the first few of the resync.
        faulty[gone].fail_after(FaultOps::WRITE, 2);
        let ctl = PassControl::new(0);
        let (state, ()) = block_on(futures::future::join(
            a.resync_returned(&ctl),
            apply(&a, model.writes(10, 16)),
        ));
        let state = state.expect("resync");
        assert_eq!(state, PassState::Failed, "{level:?}");
        assert_eq!(ctl.state(), PassState::Failed, "{level:?}");
        let why = ctl.failure().expect("a failed pass says why");
        let name = disks[gone].name().to_string();
        assert!(
            why.contains(&format!(
                "its target `{name}` (role {gone}, re-added) failed"
            )),
            "{level:?}: {why}"
        );
        assert!(a.volume().member_is_failed(gone), "{level:?}");
        assert!(a.volume().is_degraded(), "{level:?}");
        assert!(
            read_all(&a, 1, 1) == model.bytes,
            "{level:?}: the volume's bytes"
        );

        // Back for good: re-added again, the resync ends done and the member current.
        faulty[gone].clear_faults();
        assert!(matches!(
            block_on(a.readd(gone)).expect("readd again"),
            Readd::Resync { .. }
        ));
        let ctl = PassControl::new(0);
        let state = block_on(a.resync_returned(&ctl)).expect("resync again");
        assert_eq!(state, PassState::Done, "{level:?}: {:?}", ctl.failure());
        assert!(a.volume().member_is_current(gone), "{level:?}");
        assert!(
            read_all(&a, 1, 1) == model.bytes,
            "{level:?}: the volume's bytes"
        );
    }
}

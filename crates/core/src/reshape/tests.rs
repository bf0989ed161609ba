use super::*;
use crate::member::Member;
use crate::memory::MemoryMember;
use crate::volume::{Volume, VolumeOptions};
use futures::executor::block_on;
use nbraid_layout::{Geometry, Level, ParityLayout, Region, Shape, Window};
use std::sync::Mutex;

const KIB: u64 = 1 << 10;
/// Bytes of each member's region.
const REGION: u64 = 768 * KIB;

fn geometry(level: Level, members: usize, strip: u64) -> Geometry {
    let shape = Shape::new(level, members, None, strip, ParityLayout::default()).unwrap();
    Geometry::new(
        shape,
        &vec![
            Region {
                start: 0,
                len: REGION
            };
            members
        ],
    )
    .unwrap()
}

/// The moves the plan does online (RAID 10/50/60 spans are trees of the same node kinds).
fn moves() -> Vec<(Geometry, Geometry)> {
    vec![
        (
            geometry(Level::Raid5, 3, 16 * KIB),
            geometry(Level::Raid5, 4, 16 * KIB),
        ),
        (
            geometry(Level::Raid0, 2, 4 * KIB),
            geometry(Level::Raid0, 3, 4 * KIB),
        ),
        (
            geometry(Level::Raid6, 4, 8 * KIB),
            geometry(Level::Raid6, 6, 8 * KIB),
        ),
        (
            geometry(Level::Raid5, 3, 16 * KIB),
            geometry(Level::Raid6, 4, 16 * KIB),
        ),
        (
            geometry(Level::Raid1, 2, 4 * KIB),
            geometry(Level::Raid5, 3, 4 * KIB),
        ),
        (
            geometry(Level::Raid5, 4, 64 * KIB),
            geometry(Level::Raid5, 4, 16 * KIB),
        ),
    ]
}

fn members(n: usize) -> Vec<Arc<MemoryMember>> {
    (0..n)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), REGION)))
        .collect()
}

fn dyn_members(ms: &[Arc<MemoryMember>]) -> Vec<Arc<dyn Member>> {
    ms.iter().map(|m| m.clone() as Arc<dyn Member>).collect()
}

/// Deterministic bytes (xorshift from `seed`).
fn bytes(seed: u64, len: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The old volume over its members, filled: what every byte should read.
fn filled(old: &Geometry, ms: &[Arc<MemoryMember>]) -> Vec<u8> {
    let n = old.member_count();
    let v = Volume::new(old.clone(), dyn_members(&ms[..n]), VolumeOptions::default()).unwrap();
    let data = bytes(0x5eed, v.capacity());
    block_on(async {
        v.write(0, Buf::copy_from(&data), false).await.unwrap();
        v.flush().await.unwrap();
    });
    data
}

/// Hooks keeping the backup and the checkpoint in memory, as a test's "disk".
#[derive(Default)]
struct Recorded {
    backup: Mutex<Option<(Window, Vec<MemberRows>)>>,
    position: Mutex<u64>,
}

impl ReshapeHooks for Recorded {
    fn backup<'a>(
        &'a self,
        window: Window,
        rows: &'a [MemberRows],
    ) -> BoxFuture<'a, VolumeResult<()>> {
        *self.backup.lock().unwrap() = Some((window, rows.to_vec()));
        futures::future::ready(Ok(())).boxed()
    }

    fn checkpoint(&self, position: u64) -> BoxFuture<'_, VolumeResult<()>> {
        *self.position.lock().unwrap() = position;
        *self.backup.lock().unwrap() = None;
        futures::future::ready(Ok(())).boxed()
    }
}

fn read_all(v: &Volume, len: u64) -> Vec<u8> {
    block_on(v.read(0, len)).unwrap().to_vec()
}

#[test]
fn every_move_copies_every_byte_while_the_volume_serves() {
    for (old, new) in moves() {
        let ms = members(new.member_count());
        let mut want = filled(&old, &ms);
        let (v, node) = Volume::reshaping(
            old.clone(),
            &new,
            dyn_members(&ms),
            VolumeOptions::default(),
            0,
        )
        .unwrap();
        let hooks = Recorded::default();
        let cap = v.capacity();
        let unit = node.layout().unit();
        let mut step = 0u64;
        loop {
            // A client write and a read beside each window, at spots spread over the volume:
            // below the position, inside the next window, above it.
            let at = (step * 7919 * 4096) % (cap - 8192) / 4096 * 4096;
            let data = bytes(step + 1, 8192);
            let (copied, wrote) = block_on(async {
                futures::join!(
                    node.copy_next(2 * unit, &hooks),
                    v.write(at, Buf::copy_from(&data), false)
                )
            });
            wrote.unwrap();
            want[at as usize..at as usize + 8192].copy_from_slice(&data);
            let got = block_on(v.read(at.saturating_sub(4096), 16384)).unwrap();
            let from = at.saturating_sub(4096) as usize;
            assert!(
                got[..] == want[from..from + 16384],
                "{old:?} at step {step}"
            );
            step += 1;
            if copied.unwrap().is_none() {
                break;
            }
        }
        assert_eq!(node.position(), cap);
        assert_eq!(*hooks.position.lock().unwrap(), cap);
        assert!(read_all(&v, cap) == want, "through the reshape view");
        // The new tree alone, as the next start opens it after a clean stop (which flushes
        // the write-back caches), holds every byte: the old tree's cache wrote nothing over
        // the rows the new tree took.
        block_on(v.flush()).unwrap();
        let after = Volume::new(new.clone(), dyn_members(&ms), VolumeOptions::default()).unwrap();
        assert!(after.capacity() >= cap);
        assert!(read_all(&after, cap) == want, "in the new tree ({old:?})");
    }
}

/// A power loss in the middle of a window: the new tree's writes of it land anywhere,
/// garbage here. After the restart at the checkpoint, the backup (when the window had one) is
/// written back and the copy redone: nothing is lost, and the reshape finishes.
#[test]
fn a_power_loss_mid_window_loses_nothing() {
    for (old, new) in moves() {
        let windows = {
            let r = nbraid_layout::Reshape::new(old.root().clone(), new.root().clone()).unwrap();
            let mut p = 0;
            let mut n = 0;
            while let Some(w) = r.window(p, r.unit()).unwrap() {
                p += w.len;
                n += 1;
            }
            n
        };
        for crash_at in [0, 1, windows / 2, windows - 1] {
            let ms = members(new.member_count());
            let want = filled(&old, &ms);
            let opts = VolumeOptions::default;
            let (_, node) =
                Volume::reshaping(old.clone(), &new, dyn_members(&ms), opts(), 0).unwrap();
            let hooks = Recorded::default();
            let unit = node.layout().unit();
            for _ in 0..crash_at {
                block_on(node.copy_next(unit, &hooks)).unwrap();
            }
            // The window being copied when the power goes: its backup is taken (as the copy
            // would), then its writes land as garbage.
            let p = node.position();
            let w = node.layout().window(p, unit).unwrap().unwrap();
            let saved = if w.rule == nbraid_layout::WindowRule::Backup {
                Some(block_on(node.rows_at_risk(w, "t")).unwrap())
            } else {
                None
            };
            let torn = nbraid_layout::map(new.root(), w.start, w.len).unwrap();
            for e in torn.data.iter().chain(&torn.parity) {
                ms[e.member].poke(e.offset, &bytes(e.offset ^ 0xdead, e.len));
            }
            // The restart: the records say position p (and the backup, if any).
            let (v, node) =
                Volume::reshaping(old.clone(), &new, dyn_members(&ms), opts(), p).unwrap();
            if let Some(rows) = &saved {
                block_on(node.restore(rows)).unwrap();
            }
            while block_on(node.copy_next(4 * unit, &hooks))
                .unwrap()
                .is_some()
            {}
            let cap = v.capacity();
            assert!(
                read_all(&v, cap) == want,
                "{old:?} → {new:?}, power lost in window {crash_at} ({:?})",
                w.rule
            );
        }
    }
}

/// The same power loss on a volume with per-block checksums, where the interrupted window's
/// new-tree writes reached the disk with their checksums (a flush took the table): the
/// backup's rows are written back with theirs, so the redone copy reads the old tree's
/// window as it was — not every member of it as corrupt.
#[test]
fn a_window_restored_over_checksummed_new_writes_reads_back() {
    use crate::checksum::{area_bytes, ChecksumArea, ChecksumSetup};
    let mut backed_up = 0;
    for (old, new) in moves() {
        let n = new.member_count();
        let ms: Vec<Arc<MemoryMember>> = (0..n)
            .map(|i| {
                Arc::new(MemoryMember::new(
                    format!("m{i}"),
                    REGION + area_bytes(REGION),
                ))
            })
            .collect();
        let area = ChecksumArea {
            offset_bytes: REGION,
            len_bytes: area_bytes(REGION),
        };
        let setup = ChecksumSetup::new("t", vec![Some(area); n], true);
        let opts = |setup: &ChecksumSetup| VolumeOptions {
            checksums: Some(setup.reopened()),
            ..VolumeOptions::default()
        };
        let filler = Volume::new(
            old.clone(),
            dyn_members(&ms[..old.member_count()]),
            opts(&setup),
        );
        let filler = filler.unwrap();
        let want = bytes(0x5eed, filler.capacity());
        block_on(async {
            filler.write(0, Buf::copy_from(&want), false).await.unwrap();
            filler.flush().await.unwrap();
        });
        drop(filler);
        let (_, node) =
            Volume::reshaping(old.clone(), &new, dyn_members(&ms), opts(&setup), 0).unwrap();
        let hooks = Recorded::default();
        let unit = node.layout().unit();
        block_on(node.copy_next(unit, &hooks)).unwrap();
        let p = node.position();
        let w = node.layout().window(p, unit).unwrap().unwrap();
        if w.rule != nbraid_layout::WindowRule::Backup {
            continue;
        }
        backed_up += 1;
        let saved = block_on(node.rows_at_risk(w, "t")).unwrap();
        drop(node);
        // The new tree's writes of the window land, checksums and all (another layout's
        // bytes: garbage to the old tree).
        let torn = Volume::new(new.clone(), dyn_members(&ms), opts(&setup)).unwrap();
        block_on(async {
            let junk = bytes(0xdead, w.len);
            torn.write(w.start, Buf::copy_from(&junk), false)
                .await
                .unwrap();
            torn.flush().await.unwrap();
        });
        drop(torn);
        // The restart at the checkpoint: the backup written back, the copy redone.
        let (v, node) =
            Volume::reshaping(old.clone(), &new, dyn_members(&ms), opts(&setup), p).unwrap();
        block_on(node.restore(&saved)).unwrap();
        while block_on(node.copy_next(4 * unit, &hooks))
            .unwrap()
            .is_some()
        {}
        let got = block_on(v.read(0, want.len() as u64)).expect("the volume reads back");
        assert!(got[..] == want[..], "{old:?} → {new:?}");
    }
    assert!(backed_up > 0, "some move's second window needs the backup");
}

#[test]
fn a_position_off_the_stripes_is_refused() {
    let (old, new) = moves().remove(0);
    let ms = members(new.member_count());
    let e = Volume::reshaping(old, &new, dyn_members(&ms), VolumeOptions::default(), 4096)
        .err()
        .unwrap();
    assert!(e.to_string().contains("not on whole stripes"), "{e}");
}

/// With members that take time, requests run while a window is copied: reads and writes
/// inside the window wait for it, the others go on, and none sees a half-copied window
/// (every window of RAID 5 → 6 overwrites the old rows it copies).
#[test]
fn concurrent_requests_never_meet_a_half_copied_window() {
    use crate::testutil::SlowMember;
    use std::time::Duration;
    let mut all = moves();
    for (old, new) in [all.remove(3), all.remove(0)] {
        let ms: Vec<Arc<dyn Member>> = (0..new.member_count())
            .map(|i| {
                let m = MemoryMember::new(format!("m{i}"), REGION);
                Arc::new(SlowMember::new(m, Duration::from_micros(50))) as Arc<dyn Member>
            })
            .collect();
        let (v, node) =
            Volume::reshaping(old.clone(), &new, ms, VolumeOptions::default(), 0).unwrap();
        let cap = v.capacity();
        let mut want = bytes(0x5eed, cap);
        block_on(v.write(0, Buf::copy_from(&want), false)).unwrap();
        let hooks = Recorded::default();
        let unit = node.layout().unit();
        let mut step = 0u64;
        loop {
            let p = node.position();
            // A write inside the window being copied, a read of the rest of it.
            let (w_at, r_at) = (p.min(cap - 8192), (p + 8192).min(cap - 8192));
            let data = bytes(step + 7, 4096);
            let (copied, wrote, read) = block_on(async {
                futures::join!(
                    node.copy_next(2 * unit, &hooks),
                    v.write(w_at, Buf::copy_from(&data), false),
                    async {
                        // Late enough to land in the middle of the copy's writes.
                        let late = Duration::from_micros([0, 150, 400, 1000][step as usize % 4]);
                        crate::timer::sleep(late).await;
                        v.read(r_at, 8192).await
                    }
                )
            });
            wrote.unwrap();
            if r_at >= w_at + 4096 {
                let from = r_at as usize;
                let got = read.unwrap();
                assert!(
                    got[..] == want[from..from + 8192],
                    "{old:?}: read at step {step}"
                );
            }
            want[w_at as usize..w_at as usize + 4096].copy_from_slice(&data);
            step += 1;
            if copied.unwrap().is_none() {
                break;
            }
        }
        assert!(read_all(&v, cap) == want, "{old:?}");
    }
}

/// A member failing in the middle of a reshape leaves the volume degraded, not lost: the
/// copy reads the old tree around it (parity) and writes the new tree without it, and every
/// byte still reads back, through the reshape and in the new tree alone.
#[test]
fn a_member_failing_mid_reshape_leaves_it_degraded() {
    let all = moves();
    for (old, new) in [all[0].clone(), all[2].clone(), all[3].clone()] {
        for failed in [0, new.member_count() - 1] {
            let ms = members(new.member_count());
            let want = filled(&old, &ms);
            let (v, node) = Volume::reshaping(
                old.clone(),
                &new,
                dyn_members(&ms),
                VolumeOptions::default(),
                0,
            )
            .unwrap();
            let hooks = Recorded::default();
            let unit = node.layout().unit();
            let mut windows = 0;
            while block_on(node.copy_next(unit, &hooks)).unwrap().is_some() {
                windows += 1;
                if windows == 3 {
                    v.fail_member(failed, "pulled mid-reshape");
                }
            }
            let cap = v.capacity();
            assert!(v.is_available(), "{old:?} without member {failed}");
            assert!(read_all(&v, cap) == want, "{old:?} without member {failed}");
            let after =
                Volume::new(new.clone(), dyn_members(&ms), VolumeOptions::default()).unwrap();
            after.fail_member(failed, "still gone");
            assert!(
                read_all(&after, cap) == want,
                "new tree alone, degraded ({old:?} without member {failed})"
            );
        }
    }
}

/// The reshape runs as a pass of the rebuild/scrub family: progress in its control (the copy
/// and the new space's sync), done at the end; resumed from a checkpoint by a control at
/// that position.
#[test]
fn the_reshape_runs_as_a_pass_and_resumes() {
    use crate::pass::{PassControl, PassState};
    for (old, new) in moves() {
        let ms = members(new.member_count());
        let want = filled(&old, &ms);
        let (_, node) = Volume::reshaping(
            old.clone(),
            &new,
            dyn_members(&ms),
            VolumeOptions::default(),
            0,
        )
        .unwrap();
        let hooks = Recorded::default();
        let unit = node.layout().unit();
        block_on(node.copy_next(unit, &hooks)).unwrap();
        // The restart: a new volume at the recorded position, a control resuming there.
        let p = *hooks.position.lock().unwrap();
        let (v, node) = Volume::reshaping(
            old.clone(),
            &new,
            dyn_members(&ms),
            VolumeOptions::default(),
            p,
        )
        .unwrap();
        let ctl = PassControl::resume_at(0, p);
        let state = block_on(node.run_pass(&ctl, 3 * unit + 4096, &hooks)).unwrap();
        assert_eq!(state, PassState::Done);
        // The pass walks the copy, then the space the new tree adds (synced).
        assert_eq!(ctl.position_bytes(), new.capacity());
        assert_eq!(node.position(), v.capacity());
        assert!(read_all(&v, v.capacity()) == want, "{old:?}");
    }
}

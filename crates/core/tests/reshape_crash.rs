//! Power losses at random points of a reshape, in the crash simulator's members
//! (`nbraid_sim::Faulty` with power loss: unflushed writes lost, a seeded subset kept, torn at
//! 512-byte sectors; every op delayed by a seeded latency so the loss lands mid-window).
//!
//! Per seed: a volume of the old shape is filled (flushed), a reshape starts and is cut at a
//! random instant, clients writing (FUA) between windows; the power goes; the restart opens
//! the reshape at the recorded position, writes the recorded backup back when there is one,
//! and finishes. Invariants: right after the restart every acknowledged byte reads back
//! through the reshape view, and at the end through the new tree alone.
//!
//! The records (position, backup) are modelled as durable the moment a hook returns, as
//! the superblocks' FUA writes are. A failure names its move and seed; `NBRAID_SEED=<n>`
//! replays one seed; `NBRAID_SOAK=1` runs 20× more.

use futures::executor::block_on;
use futures::future::{select, BoxFuture, Either};
use futures::FutureExt;
use nbraid_core::reshape::{MemberRows, ReshapeHooks};
use nbraid_core::{Buf, Member, MemoryMember, Volume, VolumeOptions, VolumeResult};
use nbraid_layout::{Geometry, Level, ParityLayout, Region, Shape, Window};
use nbraid_sim::{Faulty, Rng};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const KIB: u64 = 1 << 10;
const REGION: u64 = 192 * KIB;

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

fn moves() -> Vec<(&'static str, Geometry, Geometry)> {
    vec![
        (
            "raid5 3→4",
            geometry(Level::Raid5, 3, 4 * KIB),
            geometry(Level::Raid5, 4, 4 * KIB),
        ),
        (
            "raid0 2→3",
            geometry(Level::Raid0, 2, 4 * KIB),
            geometry(Level::Raid0, 3, 4 * KIB),
        ),
        (
            "raid6 4→5",
            geometry(Level::Raid6, 4, 8 * KIB),
            geometry(Level::Raid6, 5, 8 * KIB),
        ),
        (
            "raid5→6",
            geometry(Level::Raid5, 3, 4 * KIB),
            geometry(Level::Raid6, 4, 4 * KIB),
        ),
        (
            "raid1→5",
            geometry(Level::Raid1, 2, 4 * KIB),
            geometry(Level::Raid5, 3, 4 * KIB),
        ),
        (
            "strip 16→4 KiB",
            geometry(Level::Raid5, 4, 16 * KIB),
            geometry(Level::Raid5, 4, 4 * KIB),
        ),
    ]
}

fn seeds() -> Vec<u64> {
    if let Some(s) = std::env::var("NBRAID_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![s];
    }
    let n = if std::env::var_os("NBRAID_SOAK").is_some() {
        600
    } else {
        30
    };
    (1..=n).collect()
}

/// The records as the superblocks would hold them after the power loss.
#[derive(Default)]
struct Records {
    position: Mutex<u64>,
    backup: Mutex<Option<(Window, Vec<MemberRows>)>>,
}

impl ReshapeHooks for Records {
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

type Disk = Arc<Faulty<MemoryMember>>;

fn as_members(disks: &[Disk]) -> Vec<Arc<dyn Member>> {
    disks.iter().map(|d| d.clone() as Arc<dyn Member>).collect()
}

fn seeded(rng: &mut Rng, len: u64) -> Vec<u8> {
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

/// One seed of one move; `Err` names what was lost.
fn run(old: &Geometry, new: &Geometry, seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let disks: Vec<Disk> = (0..new.member_count())
        .map(|i| {
            let m = MemoryMember::new(format!("m{i}"), REGION);
            Arc::new(Faulty::new(m, seed * 31 + i as u64).with_power_loss())
        })
        .collect();
    let n_old = old.member_count();
    let filler = Volume::new(
        old.clone(),
        as_members(&disks[..n_old]),
        VolumeOptions::default(),
    )
    .map_err(|e| e.to_string())?;
    let cap = filler.capacity();
    let mut want = seeded(&mut rng, cap);
    block_on(async {
        filler.write(0, Buf::copy_from(&want), false).await?;
        filler.flush().await
    })
    .map_err(|e| e.to_string())?;
    drop(filler);
    for d in &disks {
        d.set_latency(Duration::from_micros(5), Duration::from_micros(120));
    }
    let records = Records::default();
    let (v, node) = Volume::reshaping(
        old.clone(),
        new,
        as_members(&disks),
        VolumeOptions::default(),
        0,
    )
    .map_err(|e| e.to_string())?;
    let unit = node.layout().unit();
    // Windows copied whole before the cut, then the cut at a random instant of the next.
    let whole = rng.below(cap / unit + 1);
    for _ in 0..whole {
        // A client write (FUA: durable once acknowledged) between windows.
        let at = rng.below(cap / 4096) * 4096;
        let data = seeded(&mut rng, 4096);
        block_on(v.write(at, Buf::copy_from(&data), true)).map_err(|e| e.to_string())?;
        want[at as usize..at as usize + 4096].copy_from_slice(&data);
        if block_on(node.copy_next(unit, &records))
            .map_err(|e| e.to_string())?
            .is_none()
        {
            break;
        }
    }
    let cut = Duration::from_micros(rng.below(1500));
    block_on(async {
        let copy = node.copy_next(unit, &records);
        match select(Box::pin(copy), Box::pin(nbraid_core::timer::sleep(cut))).await {
            Either::Left((r, _)) => r.map(|_| ()),
            Either::Right(_) => Ok(()),
        }
    })
    .map_err(|e| e.to_string())?;
    drop((v, node));
    // The power goes.
    for d in &disks {
        block_on(d.crash(rng.coin())).map_err(|e| e.to_string())?;
        d.set_latency(Duration::ZERO, Duration::ZERO);
    }
    let position = *records.position.lock().unwrap();
    let (v, node) = Volume::reshaping(
        old.clone(),
        new,
        as_members(&disks),
        VolumeOptions::default(),
        position,
    )
    .map_err(|e| format!("restart at {position}: {e}"))?;
    if let Some((w, rows)) = records.backup.lock().unwrap().take() {
        assert_eq!(
            w.start, position,
            "a backup is of the window at the position"
        );
        block_on(node.restore(&rows)).map_err(|e| e.to_string())?;
    }
    let back = block_on(v.read(0, cap)).map_err(|e| e.to_string())?;
    if back[..] != want[..] {
        let at = back.iter().zip(&want).position(|(a, b)| a != b).unwrap();
        return Err(format!(
            "after the restart at {position}: byte {at} differs"
        ));
    }
    while block_on(node.copy_next(2 * unit, &records))
        .map_err(|e| e.to_string())?
        .is_some()
    {}
    drop(v);
    let after = Volume::new(new.clone(), as_members(&disks), VolumeOptions::default())
        .map_err(|e| e.to_string())?;
    let back = block_on(after.read(0, cap)).map_err(|e| e.to_string())?;
    if back[..] != want[..] {
        let at = back.iter().zip(&want).position(|(a, b)| a != b).unwrap();
        return Err(format!(
            "in the new tree after the finish: byte {at} differs"
        ));
    }
    Ok(())
}

#[test]
fn power_losses_anywhere_in_a_reshape_lose_nothing() {
    let mut failures = Vec::new();
    for (name, old, new) in moves() {
        for seed in seeds() {
            if let Err(e) = run(&old, &new, seed) {
                failures.push(format!("{name}, seed {seed} (NBRAID_SEED={seed}): {e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

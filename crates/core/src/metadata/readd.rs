//! A failed member that comes back (md's re-add): a remote member whose server returns after
//! a timeout or a reset, a disk that was unplugged and plugged back.
//!
//! - **Nothing it holds is trusted until it is brought up to date.** [`Array::readd`] reads the
//!   member's superblock again. If it carries this array's record in the same role under the
//!   id the records name there, was recorded *failed* (not half rebuilt) and the volume has a
//!   write-intent bitmap, the member is put back in its slot *resyncing*: it takes every write
//!   from then on and is read nowhere. The regions the bitmap marks at that moment are what it
//!   may have missed: a region's bit is set before any write to it and is never cleared while
//!   the volume is degraded (`Array::flush`), so every write since the member failed, and every
//!   write in flight when it did, lies in a set region. [`Array::resync_returned`] rewrites
//!   those regions (the readable copies and the data over the member, parity recomputed) as a
//!   pass — rate-limited, pausable — then flushes, gives the member the current bitmap, makes
//!   it current and commits its role *active*.
//! - **Otherwise it is rebuilt whole** ([`Array::rebuild_onto`], then [`Array::rebuild`]): a
//!   blank member (a `nbdkit memory` export restarted: no superblock and its first MiB zero),
//!   a volume without a bitmap, a member that failed while it was being rebuilt. A member with
//!   other records (another array, an id the role no longer has), or with data and no
//!   superblock, is refused: it may hold someone else's data (the write rule, `disk_rule.rs`).
//! - **A crash during the resync loses nothing.** The records keep the role *failed* until
//!   the commit at the end (the member's own record is not touched before), so a restart
//!   serves the role degraded and the re-add starts again from the bitmap, which still marks
//!   every region (the volume stayed degraded).

use super::array::{Array, ArrayError};
use super::member_meta::MemberMeta;
use super::{read_superblock, Found, Probe, RecordedState};
use crate::buf::Buf;
use crate::pass::{PassControl, PassState, PassWork};
use futures::lock::Mutex as AsyncMutex;
use futures::FutureExt;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The pass resyncs pieces of about this many bytes (whole full stripes).
const PIECE_BYTES: u64 = 1 << 20;
/// Pieces in flight.
const INFLIGHT: usize = 2;

/// Members re-added and not yet current.
#[derive(Default)]
pub(super) struct Returning {
    /// Per role: the volume ranges it may have missed (aligned to full stripes, merged).
    roles: Mutex<BTreeMap<usize, Vec<(u64, u64)>>>,
    /// One pass at a time.
    running: AsyncMutex<()>,
}

/// What [`Array::readd`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readd {
    /// Back as it left: written from now on, read once [`Array::resync_returned`] has
    /// rewritten the `bytes` of the volume the bitmap marks.
    Resync { bytes: u64 },
    /// Put in its role to be rebuilt whole by [`Array::rebuild`] (blank, or no bitmap to say
    /// what it missed).
    Rebuild,
    /// Its superblock cannot be read (not back yet): nothing was done.
    Unreachable(String),
}

/// `ranges` widened to whole multiples of `width` (within `capacity`), sorted and merged.
fn aligned(ranges: &[(u64, u64)], width: u64, capacity: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut wide: Vec<(u64, u64)> = ranges
        .iter()
        .filter(|(a, b)| a < b)
        .map(|&(a, b)| {
            (
                a / width * width,
                b.div_ceil(width).saturating_mul(width).min(capacity),
            )
        })
        .collect();
    wide.sort_unstable();
    for (a, b) in wide {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// The real ranges under virtual bytes `at..at+len` of `plan` laid end to end.
pub(super) fn slice(plan: &[(u64, u64)], at: u64, len: u64) -> Vec<(u64, u64)> {
    let mut real = Vec::new();
    let (mut skip, mut left) = (at, len);
    for &(a, b) in plan {
        if left == 0 {
            break;
        }
        let n = b - a;
        if skip >= n {
            skip -= n;
            continue;
        }
        let take = (n - skip).min(left);
        real.push((a + skip, a + skip + take));
        left -= take;
        skip = 0;
    }
    real
}

impl Array {
    fn refuse_readd(&self, role: usize, detail: impl std::fmt::Display) -> ArrayError {
        ArrayError::Metadata {
            volume: self.name().to_string(),
            detail: format!("member {role} cannot be re-added: {detail}"),
        }
    }

    /// Brings failed role `role`'s own member back (see the module): resynced over the
    /// bitmap's regions when it can be, else rebuilt whole; refused when it carries other
    /// records. Call [`Array::resync_returned`] (or [`Array::rebuild`]) next.
    pub async fn readd(&self, role: usize) -> Result<Readd, ArrayError> {
        let v = self.volume();
        if role >= v.member_count() {
            return Err(self.refuse_readd(role, "no such member"));
        }
        if !v.member_is_failed(role) {
            return Err(self.refuse_readd(role, "it has not failed"));
        }
        let Some(old) = self.records.metas.read()[role].clone() else {
            return Err(self.refuse_readd(role, "the role has no member (missing or removed)"));
        };
        // The records say the role failed before anything else happens to it.
        self.record_failures().await?;
        let member = old.member().clone();
        let (probe, sb) = match read_superblock(&*member).await {
            Ok(Found::Blank) => (Probe::Blank, None),
            Ok(Found::Superblock(sb, d)) => (Probe::Superblock(sb.clone(), d), Some(sb)),
            Err(e) => return Ok(Readd::Unreachable(e.to_string())),
        };
        // A member that comes back without a superblock is written only if blank (the rule).
        let contents = super::member_meta::contents_of(&*member, &probe).await;
        let fresh = Arc::new(MemberMeta {
            member: member.clone(),
            probe,
            contents: parking_lot::Mutex::new(contents),
            sb: AsyncMutex::new(sb.clone()),
        });
        let Some(sb) = sb else {
            tracing::warn!(
                "volume `{}`: member {role} (`{}`) came back blank: rebuilding it whole",
                self.name(),
                member.name()
            );
            self.rebuild_onto(role, fresh).await?;
            return Ok(Readd::Rebuild);
        };
        let rec = self.records.recorded.lock().await;
        let entry = rec.members[role];
        let Some(record) = sb
            .volumes
            .iter()
            .find(|r| r.array == self.id() && r.name == self.name())
        else {
            return Err(self.refuse_readd(
                role,
                format!(
                    "`{}` carries no record of this array (another array's, or reused): wipe its first MiB and add it to rebuild onto it",
                    member.name()
                ),
            ));
        };
        if sb.member != entry.uuid || record.role as usize != role {
            return Err(self.refuse_readd(
                role,
                format!(
                    "`{}` is not the member the records name in role {role} (it was given another member since)",
                    member.name()
                ),
            ));
        }
        // A member unreachable at open had no record read then: its own says where its
        // bitmap is.
        let area = self.bitmap_areas.read()[role].or_else(|| {
            let theirs = record
                .bitmap
                .filter(|b| Some(b.chunk_bytes) == self.bitmap_chunk_bytes())?
                .area;
            let len = self.bitmap_areas.read().iter().flatten().next()?.len;
            (theirs.len == len).then_some(theirs)
        });
        let resync =
            self.intent.is_some() && area.is_some() && entry.state == RecordedState::Failed;
        if !resync {
            drop(rec);
            self.rebuild_onto(role, fresh).await?;
            return Ok(Readd::Rebuild);
        }
        self.bitmap_areas.write()[role] = area;
        v.install_member(role, member)?;
        self.records.metas.write()[role] = Some(fresh);
        // After the install: a write that planned without the member has its bit set already.
        let capacity = v.capacity();
        let set = self.intent.as_ref().map(|i| i.set_ranges(capacity));
        let ranges = aligned(&set.unwrap_or_default(), self.resync_width(), capacity);
        let bytes = ranges.iter().map(|(a, b)| b - a).sum();
        self.returning.roles.lock().insert(role, ranges);
        drop(rec);
        tracing::warn!(
            "volume `{}`: member {role} (`{}`) is back: resyncing the {bytes} bytes the bitmap marks before it is read",
            self.name(),
            v.member(role).name()
        );
        Ok(Readd::Resync { bytes })
    }

    /// Roles re-added and not current yet, with the bytes each has to resync.
    pub fn returning(&self) -> Vec<(usize, u64)> {
        self.returning
            .roles
            .lock()
            .iter()
            .map(|(&r, ranges)| (r, ranges.iter().map(|(a, b)| b - a).sum()))
            .collect()
    }

    /// Resyncs every re-added member over its regions while the volume serves, and makes
    /// those still standing current (recorded first). Members re-added meanwhile get a second
    /// pass before it returns; a member that fails again is dropped (a later re-add starts
    /// over).
    pub async fn resync_returned(&self, ctl: &PassControl) -> Result<PassState, ArrayError> {
        let _one = self.returning.running.lock().await;
        let mut first = true;
        loop {
            let roles: Vec<(usize, Vec<(u64, u64)>)> = {
                let mut map = self.returning.roles.lock();
                map.retain(|&r, _| !self.volume().member_is_failed(r));
                map.iter().map(|(&r, v)| (r, v.clone())).collect()
            };
            if roles.is_empty() {
                if first {
                    ctl.nothing_to_do();
                }
                return Ok(PassState::Done);
            }
            first = false;
            let all: Vec<(u64, u64)> = roles.iter().flat_map(|(_, v)| v.clone()).collect();
            let plan = aligned(&all, 1, self.volume().capacity());
            let targets: Vec<usize> = roles.iter().map(|&(r, _)| r).collect();
            let (plan_ref, targets_ref) = (&plan, &targets);
            let window = move |at: u64, len: u64| {
                let real = slice(plan_ref, at, len);
                async move {
                    if targets_ref
                        .iter()
                        .all(|&r| self.volume().member_is_failed(r))
                    {
                        return Ok(());
                    }
                    for (a, b) in real {
                        self.volume().resync_range(a, b - a).await?;
                    }
                    Ok(())
                }
                .boxed()
            };
            let piece = (PIECE_BYTES / self.resync_width()).max(1) * self.resync_width();
            ctl.set_position(0);
            let state = crate::pass::run(
                ctl,
                PassWork {
                    total_bytes: plan.iter().map(|(a, b)| b - a).sum(),
                    window_bytes: piece,
                    inflight: INFLIGHT,
                    window: Box::new(window),
                    checkpoint_bytes: 0,
                    checkpoint: Box::new(|_| futures::future::ready(Ok(())).boxed()),
                    activity: Some(Box::new(|| self.volume().client_ops())),
                },
            )
            .await?;
            if state != PassState::Done {
                return Ok(state);
            }
            self.volume().flush().await?;
            for r in targets {
                self.rejoin(r).await?;
            }
        }
    }

    /// Gives role `r`'s member the current bitmap (it missed updates while it was not
    /// current); a member that cannot take it is failed. Call with the records' lock held.
    pub(super) async fn catch_up_bitmap(&self, r: usize) {
        let _bitmap = self.bitmap_write.lock().await;
        let area = self.bitmap_areas.read()[r];
        let (Some(intent), Some(area)) = (&self.intent, area) else {
            return;
        };
        let image = intent.on_disk_image();
        let mut b = Buf::zeroed(area.len as usize);
        b.copy_from_slice(&image[..area.len as usize]);
        let member = self.volume().member(r);
        if let Err(e) = member.write(area.offset, b.freeze(), true).await {
            self.volume().fail_member(r, &e.to_string());
        }
    }

    /// Full stripe width (the unit every range of the plan is a multiple of).
    fn resync_width(&self) -> u64 {
        let v = self.volume();
        v.geometry()
            .full_stripe_width()
            .unwrap_or(v.block_size())
            .max(v.block_size())
    }

    /// Re-added role `r`, resynced and flushed: its bitmap catches up, it becomes current
    /// and its role is committed active. Whether it did (not failed again meanwhile).
    async fn rejoin(&self, r: usize) -> Result<bool, ArrayError> {
        let mut rec = self.records.recorded.lock().await;
        let pending = self.returning.roles.lock().remove(&r).is_some();
        if !pending || self.volume().member_is_failed(r) {
            return Ok(false);
        }
        self.catch_up_bitmap(r).await;
        if self.volume().member_is_failed(r) {
            self.commit(&mut rec).await?;
            return Ok(false);
        }
        self.volume().set_resyncing(r, false);
        rec.members[r].state = RecordedState::Active;
        self.commit(&mut rec).await?;
        tracing::warn!(
            "volume `{}`: member {r} (`{}`) resynced: current again",
            self.name(),
            self.volume().member(r).name()
        );
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_widen_to_stripes_and_merge() {
        let r = aligned(&[(5, 7), (100, 130), (10, 20), (8, 9)], 16, 200);
        assert_eq!(r, vec![(0, 32), (96, 144)]);
        assert_eq!(aligned(&[(190, 199)], 16, 200), vec![(176, 200)]);
        assert!(aligned(&[(3, 3)], 16, 200).is_empty());
    }

    #[test]
    fn virtual_windows_map_onto_the_plan() {
        let plan = [(0, 10), (20, 30), (50, 60)];
        assert_eq!(slice(&plan, 0, 10), vec![(0, 10)]);
        assert_eq!(slice(&plan, 5, 10), vec![(5, 10), (20, 25)]);
        assert_eq!(slice(&plan, 15, 100), vec![(25, 30), (50, 60)]);
        assert!(slice(&plan, 30, 5).is_empty());
    }
}

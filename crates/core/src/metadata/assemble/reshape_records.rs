//! Records of one volume that must agree on its reshape: those of the newest event, and the
//! newest against one a commit older — among the members the newest record trusts.

use super::AssembleError;
use crate::metadata::{Probe, RecordedState, VolumeRecord};

/// Refuses records of the newest event that disagree on the reshape: the record the volume
/// starts from ([`crate::metadata::newest_record_checked`]) would otherwise say where the bytes live, whatever
/// its peers say (a lying position served bytes not yet copied as the new tree's). Only the
/// peers it trusts count ([`trusted_by`]): a member it records rebuilding may hold a record
/// of the same event from a commit torn before a start that ran without it.
pub(super) fn reshapes_agree(
    volume: &str,
    records: &[Option<&VolumeRecord>],
    probes: &[Probe],
    newest: &VolumeRecord,
) -> Result<(), AssembleError> {
    let first = position_of(records, newest);
    for (i, r) in records.iter().enumerate() {
        let Some(r) = r.filter(|r| r.events == newest.events && trusted_by(newest, r, &probes[i]))
        else {
            continue;
        };
        let detail = match (&newest.reshape, &r.reshape) {
            (None, None) => None,
            (Some(a), Some(b)) => a.differs_in_commit(b),
            (Some(_), None) | (None, Some(_)) => Some("one records none".to_string()),
        };
        if let Some(detail) = detail {
            return Err(AssembleError::ReshapeRecordsDisagree {
                volume: volume.to_string(),
                a: first,
                b: i,
                events: newest.events,
                detail,
            });
        }
    }
    Ok(())
}

/// Refuses a newest record whose reshape stands behind where a record one commit older put
/// it, the older record's member one the newest still trusts ([`trusted_by`]): a reshape
/// copies front to back and every commit of one run of the array moves the position forward
/// or leaves it (starting and finishing one are commits of their own), so the newer record
/// lies — trusted, it would read bytes already copied from the old tree where the new one
/// holds them. (A member the newest records rebuilding may well be ahead: a checkpoint torn
/// on it alone, then a start without it that resumed from the position before.)
pub(super) fn reshape_moves_forward(
    volume: &str,
    records: &[Option<&VolumeRecord>],
    probes: &[Probe],
    newest: &VolumeRecord,
) -> Result<(), AssembleError> {
    let Some(now) = &newest.reshape else {
        return Ok(());
    };
    let newer = position_of(records, newest);
    for (i, r) in records.iter().enumerate() {
        let one_older = |r: &&VolumeRecord| r.events + 1 == newest.events && r.tree == newest.tree;
        let Some(r) = r.filter(|r| one_older(r) && trusted_by(newest, r, &probes[i])) else {
            continue;
        };
        let Some(before) = r.reshape.as_ref().filter(|b| b.new_tree == now.new_tree) else {
            continue;
        };
        if before.position_bytes > now.position_bytes {
            return Err(AssembleError::ReshapeWentBack {
                volume: volume.to_string(),
                newer,
                older: i,
                events: newest.events,
                newer_position: now.position_bytes,
                older_position: before.position_bytes,
            });
        }
    }
    Ok(())
}

/// Whether `newest` records the member holding `record` (its superblock in `probe`) active,
/// by its id, in the record's role: a peer it trusts, whose record must agree with it.
pub(super) fn trusted_by(newest: &VolumeRecord, record: &VolumeRecord, probe: &Probe) -> bool {
    let Probe::Superblock(sb, _) = probe else {
        return false;
    };
    (newest.members.get(record.role as usize))
        .is_some_and(|m| m.uuid == sb.member && m.state == RecordedState::Active)
}

/// The config position of the member holding `record` (one of `records`).
fn position_of(records: &[Option<&VolumeRecord>], record: &VolumeRecord) -> usize {
    (records.iter())
        .position(|r| r.is_some_and(|r| std::ptr::eq(r, record)))
        .expect("the record is one of the records")
}

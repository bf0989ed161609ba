//! A member and its superblock as loaded, shared by every volume on the member.

use super::disk_rule::{read_first_mib, DiskContents};
use super::identity::{HeldIdentity, LostDisk};
use super::{
    read_superblock, write_superblock, Found, Probe, Superblock, SuperblockIoError, Uuid,
    VolumeRecord,
};
use crate::fail_cause::FailCause;
use crate::member::Member;
use futures::lock::Mutex as AsyncMutex;
use parking_lot::Mutex;
use std::sync::Arc;

/// One member and its superblock, shared by every volume on it (Matrix RAID): updates of
/// different volumes' records are serialized here so none overwrites another's.
///
/// A volume opened again, or a member back, reads the superblock again ([`Self::reread`]):
/// a new `MemberMeta` with the new probe but the same `contents` and `sb`, so the volumes
/// that still hold the old one go on updating the one superblock, never a stale copy of it.
pub struct MemberMeta {
    pub(super) member: Arc<dyn Member>,
    pub(super) probe: Probe,
    /// What the disk holds, as the write rule sees it (`disk_rule.rs`): as loaded, then its
    /// records as last written.
    pub(super) contents: Arc<Mutex<DiskContents>>,
    pub(super) sb: Arc<AsyncMutex<Option<Superblock>>>,
    /// Held while a volume re-adds the member (`readd.rs`), shared like `sb`: the volumes of
    /// a member back blank put it in their roles one at a time, each placing its areas and
    /// taking the member's id from what the one before wrote.
    joining: Arc<AsyncMutex<()>>,
    /// Set while its storage was found not as the records last wrote it (`identity.rs`),
    /// shared like `sb`.
    lost: Arc<Mutex<Option<LostDisk>>>,
}

impl MemberMeta {
    /// Reads `member`'s superblock (both copies; damage is reported by assembly).
    pub async fn load(member: Arc<dyn Member>) -> Arc<MemberMeta> {
        let (probe, sb) = (read_probe(&*member).await).unwrap_or_else(|e| (unread_probe(&e), None));
        let contents = contents_of(&*member, &probe).await;
        let sb = Arc::new(AsyncMutex::new(sb));
        let lost = guard(&member, &sb);
        Arc::new(MemberMeta {
            member,
            probe,
            contents: Arc::new(Mutex::new(contents)),
            sb,
            joining: Arc::default(),
            lost,
        })
    }

    /// The member's superblock read again (see the type): what the disk holds now becomes
    /// what every volume on the member updates. An unreadable member is reported in the
    /// probe, the records last known kept.
    pub async fn reread(&self) -> Arc<MemberMeta> {
        self.try_reread()
            .await
            .unwrap_or_else(|why| self.with_probe(Probe::Unreadable(why)))
    }

    /// [`Self::reread`]; `Err`: the superblock could not be read (why).
    pub(super) async fn try_reread(&self) -> Result<Arc<MemberMeta>, String> {
        // Under the records' lock: no update of another volume lands between read and swap.
        let mut held = self.sb.lock().await;
        let (probe, sb) = read_probe(&*self.member).await.map_err(|e| e.to_string())?;
        *self.contents.lock() = contents_of(&*self.member, &probe).await;
        *held = sb;
        Ok(self.with_probe(probe))
    }

    /// This member, its records' state shared, as `probe` saw it.
    fn with_probe(&self, probe: Probe) -> Arc<MemberMeta> {
        Arc::new(MemberMeta {
            member: self.member.clone(),
            probe,
            contents: self.contents.clone(),
            sb: self.sb.clone(),
            joining: self.joining.clone(),
            lost: self.lost.clone(),
        })
    }

    /// `member` whose server did not answer (`why`): its superblock is unknown, read again
    /// when it is re-added.
    pub fn unreachable(member: Arc<dyn Member>, why: String) -> Arc<MemberMeta> {
        Self::unavailable(member, "unreachable", why)
    }

    /// `member` whose server answered with an export it cannot use (`why`: too small, read
    /// only...): as [`Self::unreachable`], but said to be what it is — the server answered.
    pub fn unusable(member: Arc<dyn Member>, why: String) -> Arc<MemberMeta> {
        Self::unavailable(member, "unusable", why)
    }

    /// A member not used at start, `word` (unreachable, unusable) for `why`.
    fn unavailable(member: Arc<dyn Member>, word: &str, why: String) -> Arc<MemberMeta> {
        let sb = Arc::new(AsyncMutex::new(None));
        let lost = guard(&member, &sb);
        Arc::new(MemberMeta {
            member,
            contents: Arc::new(Mutex::new(DiskContents::Unknown(format!("{word}: {why}")))),
            probe: Probe::Unreachable(why),
            sb,
            joining: Arc::default(),
            lost,
        })
    }

    /// Volume `name` re-adds the member: whether its storage was found not as the records
    /// last wrote it since it left (what it held then); each volume on it is told once.
    pub(super) fn found_otherwise(&self, name: &str) -> Option<String> {
        let mut lost = self.lost.lock();
        let (found, left) = LostDisk::judged(lost.take(), name);
        *lost = left;
        found
    }

    /// One volume at a time re-adds this member (see `joining`).
    pub(super) async fn one_joining(&self) -> futures::lock::MutexGuard<'_, ()> {
        self.joining.lock().await
    }

    pub fn member(&self) -> &Arc<dyn Member> {
        &self.member
    }

    /// What reading the superblock found when this was loaded.
    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    /// What the disk holds (blank, data, records: as loaded, or as nbraid last wrote its
    /// superblock), for the write rule.
    pub fn contents(&self) -> DiskContents {
        self.contents.lock().clone()
    }

    /// Applies `f` to the superblock, bumps its generation and writes it (FUA).
    pub(super) async fn update(
        &self,
        f: impl FnOnce(&mut Superblock),
    ) -> Result<(), SuperblockIoError> {
        self.update_if(|sb| {
            f(sb);
            true
        })
        .await
        .map(|_| ())
    }

    /// Takes the records of arrays `gone` off the superblock (`nbraid create --force` over
    /// another array's member: that array must find its member gone, not assemble over the
    /// new one's bytes). Writes nothing when none is there.
    pub async fn take_off_records(&self, gone: &[Uuid]) -> Result<(), SuperblockIoError> {
        self.update_if(|sb| {
            let before = sb.volumes.len();
            sb.volumes.retain(|v| !gone.contains(&v.array));
            sb.volumes.len() != before
        })
        .await
        .map(|_| ())
    }

    /// [`Self::update`] when `f` finds something to write (it says whether it changed the
    /// superblock: `false` writes nothing). Whether it was written.
    pub(super) async fn update_if(
        &self,
        f: impl FnOnce(&mut Superblock) -> bool,
    ) -> Result<bool, SuperblockIoError> {
        let mut g = self.sb.lock().await;
        let mut changed = false;
        let sb = self.next_superblock(g.clone(), |sb| changed = f(sb));
        if !changed {
            return Ok(false);
        }
        write_superblock(&*self.member, &sb).await?;
        *self.contents.lock() = DiskContents::of_superblock(&sb);
        *g = Some(sb);
        Ok(true)
    }

    /// The superblock [`update`](Self::update) writes when the member holds `held`: `f`
    /// applied, the next generation, the member's size now. Pure.
    pub(super) fn next_superblock(
        &self,
        held: Option<Superblock>,
        f: impl FnOnce(&mut Superblock),
    ) -> Superblock {
        let mut sb = held.unwrap_or_else(|| Superblock {
            generation: 0,
            member: Uuid::default(),
            member_bytes: self.member.len(),
            volumes: Vec::new(),
        });
        f(&mut sb);
        sb.generation += 1;
        sb.member_bytes = self.member.len();
        sb
    }

    /// A member joining a volume: takes id `uuid` and `record` (replacing any record of the
    /// same volume name), written to both superblock slots — a blank second copy would be
    /// reported damaged at the next start.
    pub(super) async fn join(
        &self,
        uuid: Uuid,
        record: VolumeRecord,
    ) -> Result<(), SuperblockIoError> {
        let name = record.name.clone();
        self.update(move |sb| {
            sb.member = uuid;
            sb.volumes.retain(|v| v.name != name);
            sb.volumes.push(record);
        })
        .await?;
        self.update(|_| {}).await
    }

    /// This member's record of volume `name`, as last written or read.
    pub(super) async fn record(&self, name: &str) -> Option<VolumeRecord> {
        let g = self.sb.lock().await;
        g.as_ref()
            .and_then(|sb| sb.volumes.iter().find(|v| v.name == name).cloned())
    }
}

/// Gives `member` the check its re-opened storage must pass before serving again: the
/// records `sb` holds (see `identity.rs`). The member's one `MemberMeta` gives it: every
/// later one shares `sb`.
/// Returns where the check says the storage was found otherwise.
fn guard(
    member: &Arc<dyn Member>,
    sb: &Arc<AsyncMutex<Option<Superblock>>>,
) -> Arc<Mutex<Option<LostDisk>>> {
    let lost = Arc::default();
    member.guard_identity(Arc::new(HeldIdentity {
        sb: sb.clone(),
        lost: Arc::clone(&lost),
    }));
    lost
}

/// `member`'s superblock as a probe, and the superblock to update from; `Err`: it could not
/// be read (why).
async fn read_probe(member: &dyn Member) -> Result<(Probe, Option<Superblock>), SuperblockIoError> {
    match read_superblock(member).await? {
        Found::Blank => Ok((Probe::Blank, None)),
        Found::Superblock(sb, d) => Ok((Probe::Superblock(sb.clone(), d), Some(sb))),
    }
}

/// The probe of a superblock that could not be read. A member that did not answer (no reply
/// in time, its connection lost: a remote server that took the handshake and then went
/// quiet) is unreachable, as one whose connection was refused: presumed in its role, served
/// degraded and re-added once it answers. Only one that answered with an error (or whose
/// copies are both unusable) is unreadable, and so treated as lost.
fn unread_probe(e: &SuperblockIoError) -> Probe {
    let why = e.to_string();
    match FailCause::of_error(e) {
        FailCause::Unanswered => Probe::Unreachable(why),
        _ => Probe::Unreadable(why),
    }
}

/// What `member` holds for the write rule: its records, or (no superblock) whether its first
/// MiB is blank.
pub(super) async fn contents_of(member: &dyn Member, probe: &Probe) -> DiskContents {
    let first = match probe {
        Probe::Blank => read_first_mib(member).await,
        _ => None,
    };
    DiskContents::from_probe(probe, first.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::{MemberError, MemberOp};
    use std::io;

    fn superblock_read_failed(kind: io::ErrorKind) -> SuperblockIoError {
        let e = io::Error::new(kind, "x");
        SuperblockIoError::Member(MemberError::new("nbd://h/", MemberOp::Read, 0, 4096, e))
    }

    #[test]
    fn a_superblock_read_with_no_answer_is_unreachable_not_unreadable() {
        // A server that took the handshake and then did not answer in time, or dropped the
        // connection: presumed in its role and re-added when it answers, as a refused one.
        for kind in [io::ErrorKind::TimedOut, io::ErrorKind::NotConnected] {
            let probe = unread_probe(&superblock_read_failed(kind));
            assert!(
                matches!(probe, Probe::Unreachable(_)),
                "{kind:?}: {probe:?}"
            );
        }
        // A disk or server that answered with an error: unreadable, treated as lost.
        let probe = unread_probe(&superblock_read_failed(io::ErrorKind::Other));
        assert!(matches!(probe, Probe::Unreadable(_)), "{probe:?}");
    }
}

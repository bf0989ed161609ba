//! Members added at run time, recorded by path (format version 2, `docs/FORMAT.md`). The
//! config names its members and spares at every start, but a spare an operator adds to a
//! running daemon (`nbraid add`) or a replacement (`nbraid replace`) is not in it: a restart
//! that forgot them would start degraded, or lose a spare. The records list their paths (the
//! member's name), committed like any state change, from the moment they are added until
//! they are gone: a spare that takes a role stays listed (it holds the role now), a
//! replacement joins the list when it takes its role and the member it replaced leaves it,
//! and `nbraid remove` takes a spare or a removed member out. The daemon opens the listed
//! paths at start and offers them to assembly after the config's members and spares.

use super::array::{Array, ArrayError};
use super::disk_rule::Consent;
use super::member_meta::MemberMeta;
use super::superblock::{MAX_ADDED_PATHS, MAX_ADDED_PATH_BYTES};
use super::{SuperblockIoError, Uuid};
use std::sync::Arc;

impl Array {
    /// Keeps `meta` as a hot spare ([`Array::add_spare`]) and records its path, so a
    /// restart still knows it.
    /// `consent`: the operator's `--force` and the disk's Matrix siblings (the write rule,
    /// `disk_rule.rs`).
    pub async fn add_recorded_spare(
        &self,
        meta: Arc<MemberMeta>,
        consent: &Consent,
    ) -> Result<(), ArrayError> {
        let path = meta.member().name().to_string();
        let mut rec = self.records.recorded.lock().await;
        self.check_recordable(&path, &rec.added_paths)?;
        self.check_disk(&meta, consent)?;
        self.drop_forced_records(&meta, consent).await?;
        self.add_spare_with(meta, consent)?;
        if !rec.added_paths.contains(&path) {
            rec.added_paths.push(path);
            self.commit(&mut rec).await?;
        }
        Ok(())
    }

    /// Refuses a path the records cannot list: malformed, or one more than they hold.
    pub(super) fn check_recordable(&self, path: &str, listed: &[String]) -> Result<(), ArrayError> {
        if path.is_empty() || path.len() > MAX_ADDED_PATH_BYTES || path.contains('\0') {
            return Err(self.refuse(format!(
                "`{path}`: its path cannot be recorded (1 to {MAX_ADDED_PATH_BYTES} bytes, no NUL)"
            )));
        }
        if !listed.iter().any(|p| p == path) && listed.len() >= MAX_ADDED_PATHS {
            return Err(self.refuse(format!(
                "already {MAX_ADDED_PATHS} members added at run time are recorded: remove a spare first"
            )));
        }
        Ok(())
    }

    /// Members added at run time, as recorded (paths): spares and members in roles.
    pub async fn added_paths(&self) -> Vec<String> {
        self.records.recorded.lock().await.added_paths.clone()
    }

    /// Takes `path` out of the recorded paths; whether it was there.
    pub async fn forget_added_path(&self, path: &str) -> Result<bool, ArrayError> {
        let mut rec = self.records.recorded.lock().await;
        let before = rec.added_paths.len();
        rec.added_paths.retain(|p| p != path);
        if rec.added_paths.len() == before {
            return Ok(false);
        }
        self.commit(&mut rec).await?;
        Ok(true)
    }
}

/// Takes `path` out of the added paths of volume `volume`'s records (array `array`) on
/// `metas` — the volume's members read while no daemon serves them (`nbraid remove
/// --offline`). The event counter is left alone (the write-hole log's lives count from it):
/// every readable record listing the path is edited, so a start reads the same list whatever
/// member it reads; an edit cut short is finished by running it again. Returns how many
/// superblocks were written; 0 when no record lists `path`.
pub async fn forget_added_path_offline(
    metas: &[Arc<MemberMeta>],
    volume: &str,
    array: Uuid,
    path: &str,
) -> Result<usize, SuperblockIoError> {
    let mut written = 0;
    for meta in metas {
        let lists = meta.sb.lock().await.as_ref().is_some_and(|sb| {
            sb.volumes.iter().any(|v| {
                v.name == volume && v.array == array && v.added_paths.iter().any(|p| p == path)
            })
        });
        if !lists {
            continue;
        }
        meta.update(|sb| {
            for v in sb
                .volumes
                .iter_mut()
                .filter(|v| v.name == volume && v.array == array)
            {
                v.added_paths.retain(|p| p != path);
            }
        })
        .await?;
        written += 1;
    }
    Ok(written)
}

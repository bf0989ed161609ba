//! Members added at run time, recorded by path (format version 2, `docs/FORMAT.md`). The
//! config names its members and spares at every start, but a spare an operator adds to a
//! running daemon (`nbraid add`) or a replacement (`nbraid replace`) is not in it: a restart
//! that forgot them would start degraded, or lose a spare. The records list their paths (the
//! member's name), committed like any state change, from the moment they are added until
//! they are gone: a spare that takes a role stays listed (it holds the role now), a
//! replacement joins the list when the replace starts (a restart before the swap finds it
//! standing by as a spare) and the member it replaced leaves it at the swap (a replacement
//! that fails before the swap leaves it then), and `nbraid
//! remove` takes a spare or a removed member out. The daemon opens the listed paths at start
//! and offers them to assembly after the config's members and spares.

use super::disk_rule::Consent;
use super::error::ArrayError;
use super::heal::{check_spare, drop_forced_records, Heal};
use super::member_meta::MemberMeta;
use super::parts::Parts;
use super::records::recordable;
use super::{SuperblockIoError, Uuid};
use std::sync::Arc;

/// Keeps `meta` as a hot spare of `heal` and records its path, so a restart still knows it.
/// `consent`: the operator's `--force` and the disk's Matrix siblings (the write rule,
/// `disk_rule.rs`).
pub(super) async fn add_recorded_spare(
    p: Parts<'_>,
    heal: &Heal,
    meta: Arc<MemberMeta>,
    consent: &Consent,
) -> Result<(), ArrayError> {
    let path = meta.member().name().to_string();
    let mut rec = p.records.lock().await;
    recordable(&path, &rec.added_paths).map_err(|e| p.refuse(e))?;
    // Every refusal before the other arrays' records are taken off the disk: a refused add
    // must leave it as it was.
    check_spare(p, &meta, consent)?;
    drop_forced_records(p, &meta, consent).await?;
    heal.add_spare(p, meta, consent)?;
    if !rec.added_paths.contains(&path) {
        rec.added_paths.push(path);
        p.records.commit(&mut rec).await?;
    }
    Ok(())
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

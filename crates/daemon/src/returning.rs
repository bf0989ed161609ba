//! Remote members that come back: a member on an NBD server fails like a disk when the
//! server stops answering (timeout, reset), and its connection is re-opened in the background
//! (`nbraid-remote`). Once the server answers again the member is brought back through the
//! engine ([`Array::readd`], md's re-add with a bitmap): its superblock is read again; if it
//! is the member that left, it is resynced over the regions the write-intent bitmap marks
//! before it is read again ([`Array::resync_returned`], at the volume's `rebuild_rate`); if it
//! came back blank (an `nbdkit memory` export restarted) it is rebuilt whole; anything else
//! (another array's records) is left failed and said once.
//!
//! Only remote members come back by themselves: a local disk that failed gave I/O errors,
//! and an operator decides whether it is trusted again (`nbraid add`, `nbraid replace`).

use crate::control::{ControlVolume, Controls};
use nbraid_config as config;
use nbraid_core::metadata::Readd;
use nbraid_core::PassControl;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// How often failed remote members are asked whether they are back (a superblock read; a
/// member whose connection is down fails it at once).
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Whether a member's name is an NBD URI (a remote member).
fn is_remote(name: &str) -> bool {
    nbraid_nbd::client::Uri::parse(name).is_ok()
}

fn say(msg: &str) {
    tracing::warn!("{msg}");
    eprintln!("nbraidd: {msg}");
}

/// Tries every failed remote member of `v` once; `refused` holds the roles already said to
/// be refused (said once, until the role changes).
pub async fn probe_volume(v: &ControlVolume, refused: &mut HashSet<usize>) {
    let vol = v.array.volume();
    for r in 0..vol.member_count() {
        let remote = is_remote(vol.member(r).name());
        if !vol.member_is_failed(r) || !v.array.has_member(r) || !remote {
            refused.remove(&r);
            continue;
        }
        let id = v.member_ids()[r].clone();
        match v.array.readd(r).await {
            Ok(Readd::Unreachable(_)) => {}
            Ok(Readd::Resync { bytes }) => {
                say(&format!(
                    "volume {}: remote member {id} is back: resyncing the {} the write-intent bitmap marks before it is read again",
                    v.name,
                    config::format_size(bytes)
                ));
                let ctl = Arc::new(PassControl::with_rate(v.rebuild_rate));
                let (array, name) = (v.array.clone(), v.name.clone());
                tokio::spawn(async move {
                    match array.resync_returned(&ctl).await {
                        Ok(s) => {
                            tracing::info!("resync of {name}'s returning members {}", s.name())
                        }
                        Err(e) => tracing::error!("resync of {name}'s returning members: {e}"),
                    }
                });
            }
            Ok(Readd::Rebuild) => {
                say(&format!(
                    "volume {}: remote member {id} is back but cannot be resynced from the bitmap (blank, or no bitmap): rebuilding it whole",
                    v.name
                ));
                v.ensure_rebuild(v.rebuild_rate);
            }
            Err(e) => {
                if refused.insert(r) {
                    say(&format!(
                        "volume {}: remote member {id} answers again but stays failed: {e}",
                        v.name
                    ));
                }
            }
        }
    }
}

/// Watches every volume's failed remote members, every [`PROBE_INTERVAL`].
pub async fn watch(controls: Arc<Controls>) {
    let mut refused: Vec<HashSet<usize>> = vec![HashSet::new(); controls.volumes.len()];
    loop {
        for (v, refused) in controls.volumes.iter().zip(refused.iter_mut()) {
            if v.array.volume().failed_count() > 0 {
                probe_volume(v, refused).await;
            }
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_members_are_told_by_their_uri() {
        assert!(is_remote("nbd://host:10809/export"));
        assert!(is_remote("nbd+unix:///?socket=/run/kit.sock"));
        assert!(!is_remote("/var/lib/nbraid/d0.img"));
        assert!(!is_remote("d0.img"));
    }
}

//! Members added at run time (`nbraid add`, `nbraid replace`) that the volume does not name:
//! the volume's records list their paths (`nbraid_core::metadata`'s `spare_list.rs`). At
//! start they are opened by those paths and offered to assembly after the config's members
//! and spares, so a spare that took a role, or a replacement, serves its role again instead
//! of the volume starting degraded; the others stand by as spares (`adopt`).

use crate::member::{load, Opened};
use crate::records::{has_this_volume, newest_added_paths, this_array};
use nbraid_config::{self as config, Config};
use nbraid_core::metadata::{MemberMeta, Probe, Uuid, MAX_ADDED_PATHS};
use std::path::Path;
use std::sync::Arc;

/// A path the records list and the config does not name, opened (or why it could not be).
pub struct Added {
    pub path: String,
    pub opened: Result<Opened, String>,
}

impl Added {
    /// The member, for assembly, when it carries a record of this volume. The records list
    /// it, so other volumes' records beside that one do not make it another volume's (a
    /// replacement may carry them).
    /// `array`: the volume's array ([`this_array`]); a record of another array whose volume
    /// has the same name is not this volume's.
    pub fn for_assembly(&self, volume: &str, array: Option<Uuid>) -> Option<Arc<MemberMeta>> {
        let o = self.opened.as_ref().ok()?;
        has_this_volume(o, volume, array).then(|| o.meta().cloned())?
    }
}

/// The id a member added at run time goes by (status, notes, the config snippet to paste):
/// its file name without the extension, in the characters a config id may hold, made unique
/// against `taken` with `-2`, `-3`… The same path and ids give the same id at every start.
pub fn added_id(path: &str, taken: &[String]) -> String {
    let stem = Path::new(path)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut base: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if base.is_empty() || !base.starts_with(|c: char| c.is_ascii_alphabetic()) {
        base = format!("m-{base}").trim_end_matches('-').to_string();
    }
    let free = |id: &str| !taken.iter().any(|t| t == id);
    if free(&base) {
        return base;
    }
    (2..)
        .map(|n| format!("{base}-{n}"))
        .find(|id| free(id))
        .expect("some suffix is free")
}

/// The same file or device, however the two paths spell it (relative, through links, or
/// two nodes of one block device).
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => {
            (a.dev() == b.dev() && a.ino() == b.ino())
                || (a.file_type().is_block_device()
                    && b.file_type().is_block_device()
                    && a.rdev() == b.rdev())
        }
        _ => false,
    }
}

/// The config member whose file is at `path` (by any spelling), if any: a member added at
/// run time the config has declared since (as another volume's, or for none) goes by it.
pub fn declared(config: &Config, path: &str) -> Option<usize> {
    (config.members.iter())
        .position(|m| m.path.as_os_str() == path || same_file(&m.path, Path::new(path)))
}

/// Paths read while following the lists at most: far above what records can list.
const MAX_FOLLOWED: usize = 4 * MAX_ADDED_PATHS;

/// The members added at run time that volume `name`'s newest record lists, each read by
/// `read` (the daemon opens it, `nbraid check` reads its superblock). The newest record may
/// be on such a member — every config member replaced since — so the lists of those read are
/// followed too, until no new path appears; a path only an older list names (a member
/// replaced since) is dropped. `config_probes`: the config's members and spares of the
/// volume; `named`: a path a config member names (read there, not here); `probe`: what a
/// read member's superblock says.
pub async fn follow_added<T, Fut>(
    name: &str,
    config_probes: &[&Probe],
    named: impl Fn(&str) -> bool,
    mut read: impl FnMut(String) -> Fut,
    probe: impl Fn(&T) -> Option<&Probe>,
) -> Vec<(String, T)>
where
    Fut: std::future::Future<Output = T>,
{
    // Only this array's records are followed (a listed file may carry another array's
    // volume of the same name since).
    let array = this_array(config_probes.iter().copied(), name);
    let newest = |added: &[(String, T)]| {
        let probes = config_probes
            .iter()
            .copied()
            .chain(added.iter().filter_map(|(_, t)| probe(t)));
        newest_added_paths(probes, name, array)
    };
    let mut added: Vec<(String, T)> = Vec::new();
    loop {
        let new: Vec<String> = newest(&added)
            .into_iter()
            .filter(|p| !named(p) && !added.iter().any(|(a, _)| a == p))
            .collect();
        if new.is_empty() || added.len() >= MAX_FOLLOWED {
            break;
        }
        for path in new {
            let t = read(path.clone()).await;
            added.push((path, t));
        }
    }
    let listed = newest(&added);
    added.retain(|(p, _)| listed.contains(p));
    added
}

/// Opens the paths volume `v`'s newest record lists ([`follow_added`]) that none of its own
/// members and spares names. A file the config names (by any spelling) is opened once, by
/// the config: a listed path that is another config member — declared for another volume,
/// or for none, after `nbraid add` gave it a role here — is offered as that member, opened.
/// Skipping it left its role empty: the volume started degraded while the rebuilt copy sat
/// unused.
pub async fn open_added(config: &Config, v: &config::Volume, opened: &[Opened]) -> Vec<Added> {
    let config_member = |path: &str| {
        declared(config, path).or_else(|| {
            (opened.iter()).position(|o| o.meta().is_some_and(|m| m.member().name() == path))
        })
    };
    let own = |m: usize| v.members.contains(&m) || v.heal.spares.contains(&m);
    let named = |path: &str| config_member(path).is_some_and(own);
    let config_probes: Vec<&Probe> = v
        .members
        .iter()
        .chain(&v.heal.spares)
        .filter_map(|&m| Some(opened[m].meta()?.probe()))
        .collect();
    let open = |path: String| {
        let declared = config_member(&path).map(|m| &opened[m]);
        async move {
            if let Some(o) = declared {
                return Ok(Opened {
                    meta: o.meta.clone(),
                    blank: o.blank,
                    created: o.created,
                });
            }
            let file = if v.read_only {
                nbraid_core::UringFile::open_read_only(&path, None)
            } else {
                nbraid_core::UringFile::open_with(&path, None, Default::default())
            };
            match file {
                Ok(f) => load(Arc::new(f)).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        }
    };
    follow_added(&v.name, &config_probes, named, open, opened_probe)
        .await
        .into_iter()
        .map(|(path, opened)| Added { path, opened })
        .collect()
}

/// What an opened member's superblock says (`None`: it could not be opened).
fn opened_probe(o: &Result<Opened, String>) -> Option<&Probe> {
    Some(o.as_ref().ok()?.meta()?.probe())
}

#[cfg(test)]
mod id_tests {
    use super::added_id;

    #[test]
    fn an_added_member_is_named_by_its_file_and_never_twice() {
        let taken = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(added_id("/srv/disks/new-d.img", &taken(&["d0"])), "new-d");
        assert_eq!(
            added_id("/srv/disks/d0.img", &taken(&["d0", "d0-2"])),
            "d0-3"
        );
        assert_eq!(added_id("/dev/sdc", &[]), "sdc");
        assert_eq!(added_id("/x/disk 1.img", &[]), "disk-1");
        assert_eq!(added_id("/x/7.img", &[]), "m-7");
        assert_eq!(added_id("/", &[]), "m");
    }
}

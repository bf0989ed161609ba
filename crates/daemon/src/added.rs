//! Members added at run time (`nbraid add`, `nbraid replace`) that the config does not name:
//! the volume's records list their paths (`nbraid_core::metadata`'s `spare_list.rs`). At
//! start they are opened by those paths and offered to assembly after the config's members
//! and spares, so a spare that took a role, or a replacement, serves its role again instead
//! of the volume starting degraded; the others stand by as spares ([`crate::heal::adopt`]).

use crate::assemble::Opened;
use nbraid_config::{self as config, Config};
use nbraid_core::metadata::{MemberMeta, Probe};
use std::sync::Arc;

/// A path the records list and the config does not name, opened (or why it could not be).
pub struct Added {
    pub path: String,
    pub opened: Result<Opened, String>,
}

impl Added {
    /// The member, for assembly, when it carries this volume's record and no other
    /// volume's (what a member added to this volume holds).
    pub fn for_assembly(&self, volume: &str) -> Option<Arc<MemberMeta>> {
        let o = self.opened.as_ref().ok()?;
        (crate::heal::only_this_volume(o, volume) == Some(true)).then(|| o.meta().cloned())?
    }
}

/// The paths volume `name`'s newest record among `probes` lists.
pub fn newest_added_paths<'a>(probes: impl Iterator<Item = &'a Probe>, name: &str) -> Vec<String> {
    probes
        .filter_map(|p| match p {
            Probe::Superblock(sb, _) => sb.volumes.iter().find(|r| r.name == name),
            _ => None,
        })
        .max_by_key(|r| r.events)
        .map(|r| r.added_paths.clone())
        .unwrap_or_default()
}

/// The paths volume `v`'s newest record (among the config's members and spares) lists.
fn recorded_paths(v: &config::Volume, opened: &[Opened]) -> Vec<String> {
    let probes = v
        .members
        .iter()
        .chain(&v.heal.spares)
        .filter_map(|&m| Some(opened[m].meta()?.probe()));
    newest_added_paths(probes, &v.name)
}

/// The same file or device, however the two paths spell it (relative, through links).
pub fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Opens the paths volume `v`'s records list that the config does not name (a file named
/// there too, by any spelling, is the config's: opened once).
pub async fn open_added(config: &Config, v: &config::Volume, opened: &[Opened]) -> Vec<Added> {
    let named = |path: &str| {
        v.members.iter().chain(&v.heal.spares).any(|&m| {
            let configured = &config.members[m].path;
            configured.as_os_str() == path
                || opened[m]
                    .meta()
                    .is_some_and(|meta| meta.member().name() == path)
                || same_file(configured, std::path::Path::new(path))
        })
    };
    let mut added = Vec::new();
    for path in recorded_paths(v, opened) {
        if named(&path) {
            continue;
        }
        let opened = match nbraid_core::UringFile::open_with(&path, None, Default::default()) {
            Ok(f) => crate::assemble::load(Arc::new(f))
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        added.push(Added { path, opened });
    }
    added
}

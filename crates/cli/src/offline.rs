//! `nbraid remove VOLUME PATH --offline`: forgets a path the records of a volume list (a
//! member added at run time) while no daemon serves the volume, by editing the superblocks of
//! its members in place (docs/FORMAT.md, "When nbraid writes onto a disk"). Records are
//! matched by array id, as the daemon matches them.

use anyhow::{bail, Context, Result};
use nbraid_assembly::{added, assemble, records, Opened};
use nbraid_core::metadata::{forget_added_path_offline, MemberMeta};
use std::path::Path;
use std::sync::Arc;

/// `nbraid remove VOLUME PATH --offline --config FILE`: forgets a path volume `VOLUME`'s
/// records list (a member added at run time) while no daemon serves the volume — the
/// superblocks of its members, spares and listed members are edited in place. The members are
/// opened as the daemon opens them (held exclusively: a serving daemon makes this fail; use
/// `nbraid remove` without `--offline` then).
pub fn forget_offline(file: &Path, volume: &str, path: &str) -> Result<String> {
    let config = nbraid_assembly::pins::load(file)?;
    let v = config
        .volumes
        .iter()
        .find(|v| v.name == volume)
        .with_context(|| format!("{}: no volume `{volume}`", file.display()))?;
    if v.read_only {
        // Its members are opened read-only: refused by name here, not by the write's error.
        bail!(
            "volume `{volume}` has read_only = true: `remove --offline` writes its members' \
             superblocks, and nothing is written to a read-only volume's members; take \
             read_only out of its table to change its records"
        );
    }
    futures::executor::block_on(async {
        let opened = assemble::open_members(&config).await.with_context(|| {
            format!("opening the members of {volume} (a daemon serving them holds them: use `nbraid remove` without --offline)")
        })?;
        let own: Vec<&Opened> = v
            .members
            .iter()
            .chain(&v.heal.spares)
            .map(|&m| &opened[m])
            .collect();
        let array = records::this_array(own.iter().filter_map(|o| Some(o.meta()?.probe())), volume)
            .with_context(|| format!("volume `{volume}`: no member carries its records"))?;
        let listed = added::open_added(&config, v, &opened).await;
        let metas: Vec<Arc<MemberMeta>> = own
            .into_iter()
            .chain(listed.iter().filter_map(|a| a.opened.as_ref().ok()))
            .filter_map(|o| o.meta().cloned())
            .collect();
        let written = forget_added_path_offline(&metas, volume, array, path).await?;
        if written == 0 {
            bail!("volume `{volume}`: its records list no path `{path}`");
        }
        Ok(format!(
            "{path} is no longer recorded in {volume} ({written} superblocks written): no start opens it\n"
        ))
    })
}

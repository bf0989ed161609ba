//! `nbraid create FILE`: creates the member files a config may create ([`Config::may_create`]),
//! sparse at their size, while holding every existing member as the daemon would.

use anyhow::{Context, Result};
use nbraid_config::{Config, MemberStorage};
use std::path::{Path, PathBuf};

pub fn run(file: &Path) -> Result<String> {
    let config = nbraid_config::load(file)?;
    // Refuse while a daemon (or anything else) holds a member: hold every existing member
    // exclusively, as nbraidd does, until the new ones are created.
    let _held = config
        .members
        .iter()
        .filter(|m| {
            matches!(
                m.state,
                MemberStorage::File { .. } | MemberStorage::BlockDevice { .. }
            )
        })
        .map(|m| {
            nbraid_core::exclusive::open_exclusive(&m.path, false)
                .with_context(|| format!("member {} ({})", m.id, m.path.display()))
        })
        .collect::<Result<Vec<_>>>()?;
    let created = create_missing_members(&config)?;
    let mut out = String::new();
    for p in &created {
        out.push_str(&format!("created {}\n", p.display()));
    }
    let left: Vec<_> = config
        .members
        .iter()
        .enumerate()
        .filter(|(i, m)| m.state == MemberStorage::Missing && !config.may_create(*i))
        .collect();
    for (_, m) in &left {
        out.push_str(&format!(
            "not created {} (member {}): a volume on it has data; an empty file would stand in for it, so it runs degraded until the member is restored or replaced\n",
            m.path.display(),
            m.id
        ));
    }
    if created.is_empty() && left.is_empty() {
        out.push_str(&format!("all {} members exist\n", config.members.len()));
    }
    Ok(out)
}

/// Creates the missing member files that [`Config::may_create`] allows, sparse at the member's
/// size (and their directories). Returns the paths created. Existing files and devices are
/// left alone.
fn create_missing_members(config: &Config) -> Result<Vec<PathBuf>> {
    let mut created = Vec::new();
    for (i, m) in config.members.iter().enumerate() {
        if !config.may_create(i) || m.path.exists() {
            continue;
        }
        let context = || format!("creating member {} ({})", m.id, m.path.display());
        if let Some(dir) = m.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(context)?;
        }
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&m.path)
            .with_context(context)?;
        f.set_len(m.size).with_context(context)?;
        created.push(m.path.clone());
    }
    Ok(created)
}

//! From a checked [`Config`] to running volumes: opens (or creates) every member once through
//! io_uring and builds each volume over the members it lists.

use crate::config::{self, Config, MemberState};
use nbraid_core::{
    Member, MemoryMember, ReadPolicy, UringError, UringFile, Volume, VolumeError, VolumeOptions,
};
use std::path::PathBuf;
use std::sync::Arc;
use thiserror::Error;

/// Why the arrays could not be assembled. Each names the member or volume concerned.
#[derive(Debug, Error)]
pub enum AssembleError {
    #[error("member {id} ({path})")]
    Member {
        id: String,
        path: PathBuf,
        #[source]
        source: UringError,
    },
    #[error("volume {name}")]
    Volume {
        name: String,
        #[source]
        source: VolumeError,
    },
}

/// A volume ready to serve, with what the config said about it.
pub struct Assembled {
    pub name: String,
    pub volume: Arc<Volume>,
    pub read_only: bool,
    pub description: String,
}

/// Opens every member (creating missing files sparse) and builds every volume.
pub fn assemble(config: &Config) -> Result<Vec<Assembled>, AssembleError> {
    let members = config
        .members
        .iter()
        .map(|m| {
            if m.state == MemberState::Memory {
                return Ok(Arc::new(MemoryMember::new(&m.id, m.size)) as Arc<dyn Member>);
            }
            UringFile::open_or_create(&m.path, m.size)
                .map(|f| Arc::new(f) as Arc<dyn Member>)
                .map_err(|source| AssembleError::Member {
                    id: m.id.clone(),
                    path: m.path.clone(),
                    source,
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    config
        .volumes
        .iter()
        .map(|v| {
            let volume_members = v.members.iter().map(|&i| members[i].clone()).collect();
            let options = volume_options(v);
            let volume =
                Volume::new(v.geometry.clone(), volume_members, options).map_err(|source| {
                    AssembleError::Volume {
                        name: v.name.clone(),
                        source,
                    }
                })?;
            Ok(Assembled {
                name: v.name.clone(),
                volume: Arc::new(volume),
                read_only: v.read_only,
                description: describe(config, v),
            })
        })
        .collect()
}

/// The engine's options for a config volume.
pub fn volume_options(v: &config::Volume) -> VolumeOptions {
    VolumeOptions {
        block_size: u64::from(v.block_size),
        read_policy: v
            .read_policy
            .name()
            .parse::<ReadPolicy>()
            .unwrap_or_default(),
        ..VolumeOptions::default()
    }
}

/// One line for NBD_INFO_DESCRIPTION and the start-up listing.
fn describe(config: &Config, v: &config::Volume) -> String {
    let spans = if v.shape.level.has_spans() {
        format!(", {} spans", v.shape.spans)
    } else {
        String::new()
    };
    format!(
        "nbraid {}{spans} over {} ({} data members, strip {})",
        v.shape.level,
        v.member_ids(config).join(" "),
        v.shape.data_members(),
        config::format_size(v.shape.strip),
    )
}

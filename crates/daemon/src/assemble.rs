//! From a checked [`Config`] to running volumes: opens (or creates) every member once through
//! io_uring and builds each volume over the members it lists. Members are held exclusively
//! ([`nbraid_core::exclusive`]), so the volumes on one member share its one open file, and a
//! second daemon on the same members is refused with the holder named.
//!
//! Without on-disk metadata yet, "new" is decided from what exists
//! ([`Config::volume_is_new`], [`Config::may_create`]): a new volume's member files are created
//! sparse, all zeroes, and the engine is told so (`VolumeOptions::members_known_zero`; it
//! decides that such parity starts in sync). A member missing from a volume
//! that already has data is never recreated: the volume starts degraded without it, or refuses
//! to start when that is beyond its fault tolerance.

use futures::future::{self, BoxFuture};
use nbraid_config::{self as config, Config, MemberStorage};
use nbraid_core::{
    Buf, Member, MemberCounters, MemberError, MemberOp, MemberResult, MemoryMember, SharedBuf,
    UringError, UringFile, Volume, VolumeError, VolumeOptions,
};
use std::io;
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
    #[error(
        "volume {name}: members {missing} are missing, more than {level} can lose \
         (it survives {tolerance} lost member(s) at worst); restore the member files or \
         remove the volume from the config"
    )]
    TooManyMissing {
        name: String,
        missing: String,
        level: String,
        tolerance: usize,
    },
}

/// A volume ready to serve, with what the config said about it.
pub struct Assembled {
    pub name: String,
    pub volume: Arc<Volume>,
    pub read_only: bool,
    pub description: String,
    /// Members of the volume that were missing at start (config member ids).
    pub missing: Vec<String>,
}

/// Opens every member (creating the files of new volumes sparse) and builds every volume.
pub fn assemble(config: &Config) -> Result<Vec<Assembled>, AssembleError> {
    let fresh: Vec<bool> = config
        .volumes
        .iter()
        .map(|v| config.volume_is_new(v))
        .collect();
    // Missing members that may not be created stand in as lost.
    let absent =
        |m: usize| config.members[m].state == MemberStorage::Missing && !config.may_create(m);
    let members = config
        .members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            if m.state == MemberStorage::Memory {
                return Ok(Arc::new(MemoryMember::new(&m.id, m.size)) as Arc<dyn Member>);
            }
            if absent(i) {
                return Ok(Arc::new(Absent::new(&m.id, m.size)) as Arc<dyn Member>);
            }
            if let Some(dir) = m.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| AssembleError::Member {
                    id: m.id.clone(),
                    path: m.path.clone(),
                    source: UringError::Open {
                        path: dir.to_path_buf(),
                        source: e,
                    },
                })?;
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
        .zip(&fresh)
        .map(|(v, &fresh)| {
            let volume_members = v.members.iter().map(|&i| members[i].clone()).collect();
            // A new volume's members are created sparse: all zeroes (the engine decides what
            // that means for parity).
            let options = VolumeOptions {
                members_known_zero: fresh,
                ..volume_options(v)
            };
            let volume = Volume::new(v.geometry.clone(), volume_members, options).map_err(
                |source| AssembleError::Volume {
                    name: v.name.clone(),
                    source,
                },
            )?;
            let mut missing = Vec::new();
            for (slot, &m) in v.members.iter().enumerate() {
                if absent(m) {
                    let member = &config.members[m];
                    volume.fail_member(
                        slot,
                        &format!("missing at start: {} does not exist", member.path.display()),
                    );
                    missing.push(member.id.clone());
                }
            }
            if !volume.is_available() {
                return Err(AssembleError::TooManyMissing {
                    name: v.name.clone(),
                    missing: missing.join(", "),
                    level: v.shape.level.to_string(),
                    tolerance: volume.fault_tolerance().worst,
                });
            }
            if !missing.is_empty() {
                tracing::warn!(volume = %v.name, missing = %missing.join(", "), "serving degraded: members missing at start");
            }
            if !fresh && v.shape.level.parity() > 0 {
                tracing::info!(volume = %v.name, "parity not known to be in sync (no metadata yet): partial-stripe writes use reconstruct-write");
            }
            Ok(Assembled {
                name: v.name.clone(),
                volume: Arc::new(volume),
                read_only: v.read_only,
                description: describe(config, v),
                missing,
            })
        })
        .collect()
}

/// The engine's options for a config volume (whether its members are known zero aside: see
/// [`assemble`]).
pub fn volume_options(v: &config::Volume) -> VolumeOptions {
    VolumeOptions {
        block_size: u64::from(v.block_size),
        read_policy: v.read_policy,
        cache: v.cache,
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

/// Stands in for a member whose file or device is missing: every operation fails, so the
/// volume treats it as lost (it is also marked failed at assembly).
struct Absent {
    id: String,
    len: u64,
    counters: MemberCounters,
}

impl Absent {
    fn new(id: &str, len: u64) -> Absent {
        Absent {
            id: id.to_string(),
            len,
            counters: MemberCounters::default(),
        }
    }

    fn fail<T: Send + 'static>(
        &self,
        op: MemberOp,
        offset: u64,
        len: u64,
    ) -> BoxFuture<'_, MemberResult<T>> {
        let e = io::Error::new(io::ErrorKind::NotFound, "member missing at start");
        Box::pin(future::ready(Err(MemberError::new(
            &self.id, op, offset, len, e,
        ))))
    }
}

impl Member for Absent {
    fn name(&self) -> &str {
        &self.id
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, buf: Buf) -> BoxFuture<'_, MemberResult<Buf>> {
        self.fail(MemberOp::Read, offset, buf.len() as u64)
    }

    fn write(&self, offset: u64, data: SharedBuf, _fua: bool) -> BoxFuture<'_, MemberResult<()>> {
        self.fail(MemberOp::Write, offset, data.len() as u64)
    }

    fn flush(&self) -> BoxFuture<'_, MemberResult<()>> {
        self.fail(MemberOp::Flush, 0, 0)
    }

    fn trim(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.fail(MemberOp::Trim, offset, len)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, MemberResult<()>> {
        self.fail(MemberOp::WriteZeroes, offset, len)
    }

    fn counters(&self) -> &MemberCounters {
        &self.counters
    }
}

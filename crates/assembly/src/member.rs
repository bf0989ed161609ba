//! One config member as assembly found it ([`Opened`]: its superblock, or missing), how it is
//! loaded, and why assembly can fail ([`AssembleError`], each naming the member or volume).

use nbraid_config as config;
use nbraid_core::metadata::disk_rule::DiskContents;
use nbraid_core::metadata::{ArrayError, MemberMeta, Probe, Uuid};
use nbraid_core::{Member, UringError};
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
    #[error("member {id}")]
    Remote {
        id: String,
        #[source]
        source: nbraid_remote::RemoteError,
    },
    #[error("{0}")]
    Refused(String),
    #[error("volume `{name}` (members by position: {legend})")]
    Array {
        name: String,
        legend: String,
        #[source]
        source: Box<ArrayError>,
    },
}

/// One config member as found at start.
pub struct Opened {
    /// `None`: the file is missing.
    pub(crate) meta: Option<Arc<MemberMeta>>,
    /// No superblock and an all-zero metadata area.
    pub(crate) blank: bool,
    /// Created by this start (sparse: all zeroes).
    pub(crate) created: bool,
}

impl Opened {
    /// A member file that is not there.
    pub(crate) fn missing() -> Opened {
        Opened {
            meta: None,
            blank: false,
            created: false,
        }
    }

    /// The member and its superblock (`None`: the file is missing).
    pub fn meta(&self) -> Option<&Arc<MemberMeta>> {
        self.meta.as_ref()
    }

    /// No superblock and an all-zero metadata area.
    pub fn is_blank(&self) -> bool {
        self.blank
    }

    /// Created by this start (all zeroes).
    pub fn was_created(&self) -> bool {
        self.created
    }

    /// The array id this member's superblock records for volume `name`.
    pub fn array_of(&self, name: &str) -> Option<Uuid> {
        match self.meta.as_ref()?.probe() {
            Probe::Superblock(sb, _) => sb.volumes.iter().find(|v| v.name == name).map(|v| v.array),
            _ => None,
        }
    }
}

/// Why short member `m` ([`config::Member::short_len_bytes`]) is left out of its volumes,
/// and the way back; `None` when it is not short.
pub fn short_text(m: &config::Member) -> Option<String> {
    Some(format!(
        "{}; it is left out of its volumes (never written, never taken for blank): give it back its length (or the disk) and `nbraid add`, or `nbraid replace` it",
        m.short_text()?
    ))
}

/// Short member `m` as assembly takes it: not opened at all (nothing can be written to it),
/// a stand-in of its size that fails every operation, unusable ([`Probe::Unreachable`] with
/// `why`, [`short_text`]): its volumes start degraded without it within their tolerance,
/// and a create never writes over it.
pub(crate) fn open_short(m: &config::Member, why: String) -> Opened {
    tracing::warn!("{why}");
    let name = m.path.to_string_lossy();
    let member: Arc<dyn Member> = Arc::new(nbraid_core::AbsentMember::new(name, m.size));
    Opened {
        meta: Some(MemberMeta::unusable(member, why)),
        blank: false,
        created: false,
    }
}

/// Reads `member`'s superblock.
pub(crate) async fn load(member: Arc<dyn Member>) -> Result<Opened, AssembleError> {
    let meta = MemberMeta::load(member).await;
    let blank = meta.contents() == DiskContents::Blank;
    Ok(Opened {
        meta: Some(meta),
        blank,
        created: false,
    })
}

/// Member `m`'s file could not be opened or created.
pub(crate) fn member_error(m: &config::Member, source: UringError) -> AssembleError {
    AssembleError::Member {
        id: m.id.clone(),
        path: m.path.clone(),
        source,
    }
}

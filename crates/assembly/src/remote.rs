//! Members on NBD servers: the options they connect with ([`remote_options`]), the
//! connection ([`open_remote`]), and the one whose server does not answer, or answers with
//! an export it cannot use ([`at_start`]).
//!
//! Remote members whose server does not answer when the daemon starts (connection refused,
//! no reply in time). What such a member holds is unknown, so it is never taken for blank:
//! it joins assembly as *unreachable* ([`Probe::Unreachable`]), its volumes assemble from the
//! members that answer (their superblocks decide) and, within their tolerance, serve
//! degraded with its role recorded failed — the write-intent bitmap then keeps every region
//! it misses. Its connection is retried in the background, and the returning-member probe
//! (the daemon's `returning`) re-adds it once it answers: resynced over the bitmap before it is
//! read. Beyond tolerance the volume is refused, naming the members that did not answer.
//!
//! [`Probe::Unreachable`]: nbraid_core::metadata::Probe::Unreachable

use crate::member::{AssembleError, Opened};
use nbraid_config::{self as config, Config, Member};
use nbraid_core::metadata::MemberMeta;
use std::sync::Arc;

/// The options remote member `m` connects with: the server's minimum block must suit the
/// smallest block size of the volumes on it.
pub(crate) fn remote_options(config: &Config, m: &Member) -> nbraid_remote::RemoteOptions {
    let index = config.members.iter().position(|x| x.id == m.id);
    let block_size = config
        .volumes
        .iter()
        .filter(|v| index.is_some_and(|i| v.members.contains(&i)))
        .map(|v| v.block_size)
        .min()
        .unwrap_or(config::BLOCK_SIZE_DEFAULT);
    let default = nbraid_remote::RemoteOptions::default();
    nbraid_remote::RemoteOptions {
        block_size,
        timeout: m.remote.timeout.unwrap_or(default.timeout),
        connections: m
            .remote
            .connections
            .map_or(default.connections, |n| n as usize),
    }
}

/// Connects to remote member `m` (an NBD URI).
pub async fn open_remote(
    config: &Config,
    m: &Member,
) -> Result<nbraid_remote::RemoteMember, AssembleError> {
    let opts = remote_options(config, m);
    nbraid_remote::RemoteMember::connect(&m.path_text, Some(m.size), &opts)
        .await
        .map_err(|source| AssembleError::Remote {
            id: m.id.clone(),
            source,
        })
}

/// What to do with remote member `m` that failed to open with `e`: a server that does not
/// answer, or answers with an export this member cannot use (too small, read-only, a TLS
/// certificate refused, no TLS where `nbds://` asks for it), gives a member with no
/// connection yet (said loudly, with the reason): its volumes start degraded without it
/// within their tolerance, the other volumes as if it were fine, and it is re-added once it
/// answers as it should. Any other error (not a remote one) stands.
pub fn at_start(config: &Config, m: &Member, e: AssembleError) -> Result<Opened, AssembleError> {
    let AssembleError::Remote { source, .. } = &e else {
        return Err(e);
    };
    let member =
        nbraid_remote::RemoteMember::offline(&m.path_text, m.size, &remote_options(config, m))
            .map_err(|source| AssembleError::Remote {
                id: m.id.clone(),
                source,
            })?;
    let msg = format!(
        "remote member {} ({}) is {}: {}; its volumes start degraded without it (within their tolerance) and it is re-added, resynced, once it answers as it should",
        m.id,
        m.path_text,
        unavailable_word(source),
        unavailable_text(source)
    );
    tracing::warn!("{msg}");
    // A server that answered is not said to be unreachable where the start refuses.
    let meta = match source.is_unreachable() {
        true => MemberMeta::unreachable(Arc::new(member), unavailable_text(source)),
        false => MemberMeta::unusable(Arc::new(member), unavailable_text(source)),
    };
    Ok(Opened {
        meta: Some(meta),
        blank: false,
        created: false,
    })
}

/// How a remote member unavailable at start is named: one whose server does not answer,
/// or one that answers but cannot be used.
pub(crate) fn unavailable_word(e: &nbraid_remote::RemoteError) -> &'static str {
    if e.is_unreachable() {
        "UNREACHABLE"
    } else {
        "UNUSABLE"
    }
}

/// Why a remote member cannot be used, for people: an export too small says both sizes, in
/// units and in bytes, and where the size it needs comes from.
pub fn unavailable_text(e: &nbraid_remote::RemoteError) -> String {
    match e {
        nbraid_remote::RemoteError::TooSmall { uri, size, wanted } => format!(
            "{uri}: the export is too small: {} ({size} bytes), but the member needs {} \
             ({wanted} bytes, its size in the config); serve a larger export, or give the \
             member a size the export holds",
            config::format_size(*size),
            config::format_size(*wanted),
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nbraid_remote::RemoteError;

    #[test]
    fn a_member_that_answers_but_cannot_be_used_is_named_unusable() {
        let small = RemoteError::TooSmall {
            uri: "nbd://h/".into(),
            size: 1 << 20,
            wanted: 1 << 30,
        };
        assert_eq!(unavailable_word(&small), "UNUSABLE");
        assert_eq!(
            unavailable_text(&small),
            "nbd://h/: the export is too small: 1 MiB (1048576 bytes), but the member needs \
             1 GiB (1073741824 bytes, its size in the config); serve a larger export, or give \
             the member a size the export holds"
        );
        let ro = RemoteError::ReadOnly {
            uri: "nbd://h/".into(),
        };
        assert_eq!(unavailable_word(&ro), "UNUSABLE");
    }
}

//! What a re-opened connection may find changed about its export. The member decides how to
//! serve (flushes or none, FUA or a flush after, several connections or one) from the export as
//! it was first opened; a server that comes back otherwise could make an acknowledged flush
//! not durable or send writes somewhere else. Such changes fail the member; others (a flag the
//! member does not use gained or lost, say) do not.

use std::fmt;

use nbraid_nbd::client::ExportInfo;
use nbraid_nbd::proto::{
    TFLAG_CAN_MULTI_CONN, TFLAG_SEND_FLUSH, TFLAG_SEND_FUA, TFLAG_SEND_WRITE_ZEROES,
};

/// A difference between an export as a member was opened on it and as a connection re-opened
/// finds it, that could lose data or durability.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExportChange {
    /// Another size: perhaps another disk behind the same name.
    Size { was_bytes: u64, now_bytes: u64 },
    /// Read-only now: writes would fail.
    ReadOnly,
    /// `NBD_FLAG_SEND_FLUSH` set or cleared: the member would skip flushes a write cache now
    /// needs, or send flushes the server no longer takes.
    Flush { now: bool },
    /// `NBD_FLAG_SEND_FUA` cleared: the member's FUA writes would not be taken.
    LostFua,
    /// `NBD_FLAG_SEND_WRITE_ZEROES` cleared: the member's zeroing would not be taken.
    LostWriteZeroes,
    /// `NBD_FLAG_CAN_MULTI_CONN` cleared while the member uses `connections`: a flush on one
    /// would no longer cover writes completed on the others.
    LostMultiConn { connections: usize },
}

impl fmt::Display for ExportChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportChange::Size {
                was_bytes,
                now_bytes,
            } => write!(f, "its size is {now_bytes} bytes, was {was_bytes} bytes"),
            ExportChange::ReadOnly => write!(f, "it is read-only now"),
            ExportChange::Flush { now: true } => write!(
                f,
                "it has a write cache now (NBD_FLAG_SEND_FLUSH), which the member does not flush"
            ),
            ExportChange::Flush { now: false } => write!(
                f,
                "it takes no flushes now (NBD_FLAG_SEND_FLUSH), which the member sends"
            ),
            ExportChange::LostFua => write!(
                f,
                "it takes no FUA writes now (NBD_FLAG_SEND_FUA), which the member sends"
            ),
            ExportChange::LostWriteZeroes => write!(
                f,
                "it takes no WRITE_ZEROES now (NBD_FLAG_SEND_WRITE_ZEROES), which the member sends"
            ),
            ExportChange::LostMultiConn { connections } => write!(
                f,
                "it offers no multi-conn now (NBD_FLAG_CAN_MULTI_CONN) and the member uses \
                 {connections} connections: a flush on one would not cover writes on the others"
            ),
        }
    }
}

/// The changes from `was` (as the member was opened) to `now` (as a connection re-opened
/// finds it) that could lose data or durability, for a member of `connections` connections.
/// Empty: the connection may be used.
pub(crate) fn export_changes(
    was: &ExportInfo,
    now: &ExportInfo,
    connections: usize,
) -> Vec<ExportChange> {
    let lost = |flag: u16| was.has(flag) && !now.has(flag);
    let mut changes = Vec::new();
    if was.size != now.size {
        changes.push(ExportChange::Size {
            was_bytes: was.size,
            now_bytes: now.size,
        });
    }
    if now.read_only() && !was.read_only() {
        changes.push(ExportChange::ReadOnly);
    }
    if was.has(TFLAG_SEND_FLUSH) != now.has(TFLAG_SEND_FLUSH) {
        changes.push(ExportChange::Flush {
            now: now.has(TFLAG_SEND_FLUSH),
        });
    }
    if lost(TFLAG_SEND_FUA) {
        changes.push(ExportChange::LostFua);
    }
    if lost(TFLAG_SEND_WRITE_ZEROES) {
        changes.push(ExportChange::LostWriteZeroes);
    }
    // With one connection, a flush covers every write the member made.
    if lost(TFLAG_CAN_MULTI_CONN) && connections > 1 {
        changes.push(ExportChange::LostMultiConn { connections });
    }
    changes
}

#[cfg(test)]
mod tests {
    use nbraid_nbd::proto::{TFLAG_READ_ONLY, TFLAG_SEND_CACHE, TFLAG_SEND_TRIM};

    use super::*;

    const NONE: [ExportChange; 0] = [];

    const ALL: u16 =
        TFLAG_SEND_FLUSH | TFLAG_SEND_FUA | TFLAG_SEND_WRITE_ZEROES | TFLAG_CAN_MULTI_CONN;

    fn info(size: u64, flags: u16) -> ExportInfo {
        ExportInfo {
            name: "e".into(),
            description: String::new(),
            size,
            flags,
            min_block: 512,
            preferred_block: 4096,
            max_block: 32 << 20,
            structured: true,
            base_allocation: None,
            block_size_negotiated: true,
        }
    }

    #[test]
    fn the_same_export_or_flags_the_member_does_not_use_are_no_change() {
        let was = info(1 << 30, ALL);
        assert_eq!(export_changes(&was, &was, 4), NONE);
        let other = info(1 << 30, ALL | TFLAG_SEND_TRIM | TFLAG_SEND_CACHE);
        assert_eq!(export_changes(&was, &other, 4), NONE);
        assert_eq!(export_changes(&other, &was, 4), NONE);
        // Gaining what the member did not use: it goes on without it.
        let least = info(1 << 30, TFLAG_SEND_FLUSH);
        assert_eq!(export_changes(&least, &was, 1), NONE);
        // Multi-conn lost with one connection: a flush still covers every write.
        assert_eq!(
            export_changes(&was, &info(1 << 30, ALL & !TFLAG_CAN_MULTI_CONN), 1),
            NONE
        );
        // Read-only no more.
        assert_eq!(
            export_changes(&info(1 << 30, ALL | TFLAG_READ_ONLY), &was, 4),
            NONE
        );
    }

    #[test]
    fn changes_that_could_lose_data_or_durability_are_named() {
        let was = info(1 << 30, ALL);
        let changed = |size, flags, conns| export_changes(&was, &info(size, flags), conns);
        assert_eq!(
            changed(2 << 30, ALL, 4),
            [ExportChange::Size {
                was_bytes: 1 << 30,
                now_bytes: 2 << 30
            }]
        );
        assert_eq!(
            changed(1 << 30, ALL | TFLAG_READ_ONLY, 4),
            [ExportChange::ReadOnly]
        );
        assert_eq!(
            changed(1 << 30, ALL & !TFLAG_SEND_FLUSH, 4),
            [ExportChange::Flush { now: false }]
        );
        assert_eq!(
            changed(1 << 30, ALL & !TFLAG_SEND_FUA, 4),
            [ExportChange::LostFua]
        );
        assert_eq!(
            changed(1 << 30, ALL & !TFLAG_SEND_WRITE_ZEROES, 4),
            [ExportChange::LostWriteZeroes]
        );
        assert_eq!(
            changed(1 << 30, ALL & !TFLAG_CAN_MULTI_CONN, 4),
            [ExportChange::LostMultiConn { connections: 4 }]
        );
        // A write cache where there was none: the member skips flushes it now needs.
        let no_cache = info(1 << 30, 0);
        assert_eq!(
            export_changes(&no_cache, &info(1 << 30, TFLAG_SEND_FLUSH), 1),
            [ExportChange::Flush { now: true }]
        );
        // Several at once, all named.
        let all = changed(1 << 20, TFLAG_READ_ONLY, 2);
        assert_eq!(all.len(), 6, "{all:?}");
        let text = all
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        for word in [
            "size",
            "read-only",
            "flush",
            "FUA",
            "WRITE_ZEROES",
            "multi-conn",
        ] {
            assert!(text.contains(word), "{text}");
        }
    }
}

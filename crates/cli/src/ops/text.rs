//! Sizes and counts as every command prints them (`nbraid check` too: one formatter).

use serde_json::Value;

/// Sizes as every command prints them (`nbraid check` too): one formatter.
pub(super) fn bytes(n: u64) -> String {
    nbraid_config::format_size(n)
}

/// A count of the status reply as text ("-" where the daemon sent none). A JSON value's own
/// `Display` ignores widths, which left the table's columns unaligned.
pub(super) fn count(v: &Value) -> String {
    v.as_u64().map_or_else(|| "-".into(), |n| n.to_string())
}

//! Member paths as the control socket says them.

/// A member's path as the operator can use it anywhere: relative paths are the daemon's
/// (its working directory); URIs and `memory:` stay as they are.
pub(crate) fn absolute_path(name: &str) -> String {
    if name.contains("://") || name.starts_with("memory:") || name.starts_with("nbd+") {
        return name.to_string();
    }
    std::path::absolute(name).map_or_else(|_| name.to_string(), |p| p.display().to_string())
}

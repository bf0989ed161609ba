//! What the config error tests share: parsing a text that must be refused, and checking the
//! error's kind and message.

use nbraid_config::{self as config, ConfigError, ErrorKind};
use std::path::Path;

/// `text` parsed as `configs/bad.toml`.
pub fn check(text: &str) -> Result<config::Config, ConfigError> {
    config::parse(text, Path::new("configs/bad.toml"))
}

/// The error `text` is refused with (a panic if it is accepted).
pub fn refused(text: &str) -> ConfigError {
    match check(text) {
        Ok(_) => panic!("config was accepted:\n{text}"),
        Err(e) => e,
    }
}

/// `e` is `kind`, its message starts with `prefix` (file:line:column and table) and says
/// each of `contains`.
pub fn expect(e: &ConfigError, kind: ErrorKind, prefix: &str, contains: &[&str]) {
    let msg = e.to_string();
    assert!(
        msg.starts_with(prefix),
        "expected prefix\n  {prefix}\ngot\n  {msg}"
    );
    for c in contains {
        assert!(msg.contains(c), "expected {c:?} in\n  {msg}");
    }
    assert_eq!(e.kind(), Some(kind), "{msg}");
}

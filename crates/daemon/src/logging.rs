//! Logs through `tracing` to stderr; `RUST_LOG` wins over the command line's level. Colours
//! only when stderr is a terminal: a log redirected to a file or a journal gets plain text.

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

pub fn init(level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    // A second init (tests, `nbraid serve` after another command) is harmless.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

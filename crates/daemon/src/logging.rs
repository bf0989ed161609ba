//! Logs through `tracing` to stderr, one line per message; `RUST_LOG` wins over the command
//! line's level. Colours only when stderr is a terminal. Under systemd (stderr is the
//! journal's stream, `$JOURNAL_STREAM`) each line starts with its syslog priority (`<4>`
//! for a warning, as `sd-daemon(3)` says) and carries no timestamp: the journal keeps both.

use std::io::IsTerminal;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{Format, Full, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

pub fn init(level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // A second init (tests, `nbraid serve` after another command) is harmless.
    let _ = match stderr_is_journal(std::env::var("JOURNAL_STREAM").ok().as_deref()) {
        true => builder
            .with_ansi(false)
            .event_format(JournalFormat {
                inner: Format::default().without_time(),
            })
            .try_init(),
        false => builder.try_init(),
    };
}

/// Whether stderr is the stream `$JOURNAL_STREAM` (`DEVICE:INODE`) names: systemd sets it
/// for the service, and a program the service starts inherits it with another stderr.
fn stderr_is_journal(journal_stream: Option<&str>) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some((dev, ino)) = journal_stream.and_then(|s| s.split_once(':')) else {
        return false;
    };
    let Ok(m) = std::fs::metadata("/proc/self/fd/2") else {
        return false;
    };
    dev.parse() == Ok(m.dev()) && ino.parse() == Ok(m.ino())
}

/// The syslog priority of a level, as the journal reads it from a `<N>` prefix.
fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// The usual line without time, after its priority.
struct JournalFormat {
    inner: Format<Full, ()>,
}

impl<S, N> FormatEvent<S, N> for JournalFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        write!(writer, "<{}>", priority(event.metadata().level()))?;
        self.inner.format_event(ctx, writer, event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_journal_stream_that_is_stderr_counts() {
        assert!(!stderr_is_journal(None));
        assert!(!stderr_is_journal(Some("garbage")));
        assert!(!stderr_is_journal(Some("0:0")));
        assert_eq!(priority(&Level::WARN), 4);
    }
}

//! Config errors: one error per bad config, located at a file, line and column.

use std::io;
use std::ops::Range;
use std::path::PathBuf;
use thiserror::Error;

/// What class of mistake a located error is (for callers and tests that match on it; people
/// read the message).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Not TOML at all (unterminated string, bad table header...).
    Syntax,
    /// TOML, but not the config's schema: unknown key, wrong type, missing key.
    Schema,
    /// Unknown RAID level.
    Level,
    /// Too few members for the level, or `spans` that do not divide them.
    Members,
    /// A strip size that is not a power of two or out of range.
    Strip,
    /// A size that does not parse, or is out of range.
    Size,
    /// A member id, member path, volume name or listen address given twice, or a member listed
    /// twice in one volume.
    Duplicate,
    /// A volume names a member that no `[[member]]` defines.
    UnknownMember,
    /// A volume does not fit on the space left on its members.
    Fit,
    /// A bad `listen` address.
    Listen,
    /// A bad or misplaced policy: parity layout, read policy, cache, block size.
    Option,
    /// A member path that cannot serve (a directory, too small, unreadable, missing without a
    /// size).
    MemberPath,
    /// A name (member id, volume name) that is empty or unusable.
    Name,
    /// A declared `tree` that is malformed: a node without a kind or with two, too few
    /// children, nesting too deep, `level` and `tree` both given.
    Tree,
    /// A server bound in `[daemon]` out of range: connections, request memory, a timeout.
    Limit,
    /// A simulated disk model's parameter (`[bench.hdd]`, `[bench.ssd]`, or a `--sim-params`
    /// file's `[hdd]`, `[ssd]`) that is not a number or out of range.
    Model,
}

/// Why a config cannot be used. `Display` gives the whole message, e.g.
/// `configs/bad.toml:12:14: volume "db": strip_size "48KiB" is not a power of two; ...`.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("{}: cannot read the config: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{file}:{line}:{column}: {message}")]
    Invalid {
        /// The config file as the caller named it.
        file: String,
        /// 1-based line of the offending text.
        line: usize,
        /// 1-based column (in characters) of the offending text.
        column: usize,
        kind: ErrorKind,
        /// What is wrong and what would be valid, starting with the table it is in
        /// (`volume "db": ...`, `member "d0": ...`, `daemon: ...`).
        message: String,
    },
}

impl ConfigError {
    /// The class of a located error (`None` when the file could not be read).
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Invalid { kind, .. } => Some(*kind),
        }
    }

    /// `(line, column)` of a located error.
    pub fn location(&self) -> Option<(usize, usize)> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Invalid { line, column, .. } => Some((*line, *column)),
        }
    }
}

/// A semantic problem before it is located: the byte span it concerns and the message.
#[derive(Debug)]
pub(crate) struct Problem {
    pub span: Range<usize>,
    pub kind: ErrorKind,
    pub message: String,
}

impl Problem {
    pub fn new(span: Range<usize>, kind: ErrorKind, message: impl Into<String>) -> Problem {
        Problem {
            span,
            kind,
            message: message.into(),
        }
    }
}

impl Problem {
    /// The error at the problem's place in `text`, read from `file`.
    pub fn located(self, text: &str, file: &std::path::Path) -> ConfigError {
        let (line, column) = line_col(text, self.span.start);
        ConfigError::Invalid {
            file: file.display().to_string(),
            line,
            column,
            kind: self.kind,
            message: printable(&self.message),
        }
    }
}

/// Longest run of non-blank characters an error repeats from the config (a path may take up
/// to a few hundred; a hostile value of megabytes is cut).
const ECHO_RUN_MAX_CHARS: usize = 256;

/// A character that prints as nothing or turns the text around it: bidi embeddings,
/// overrides and isolates, zero-width marks, the BOM, the soft hyphen (Unicode format
/// characters a name or a message must not carry unseen).
pub(crate) fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}')
}

/// `message` as one printable line: control and invisible characters a config carried into it
/// written as `\u{..}` escapes, and any run of more than [`ECHO_RUN_MAX_CHARS`] non-blank
/// characters cut, saying how many were left out.
pub(crate) fn printable(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(4096));
    let mut run = 0usize;
    let mut cut = 0usize;
    let flush_cut = |out: &mut String, cut: &mut usize| {
        if *cut > 0 {
            out.push_str(&format!("… ({} more characters)", *cut));
            *cut = 0;
        }
    };
    for c in message.chars() {
        if c == ' ' {
            flush_cut(&mut out, &mut cut);
            run = 0;
            out.push(c);
            continue;
        }
        run += 1;
        if run > ECHO_RUN_MAX_CHARS {
            cut += 1;
            continue;
        }
        if c.is_control() || is_invisible(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    flush_cut(&mut out, &mut cut);
    out
}

/// 1-based line and column (in characters) of byte `offset` of `text`.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_escape_what_would_not_print_and_cut_hostile_runs() {
        assert_eq!(
            printable("name \"a\u{0}b\u{202e}c\" is bad"),
            "name \"a\\u{0}b\\u{202e}c\" is bad"
        );
        let long = format!("x {} y", "z".repeat(5000));
        let shown = printable(&long);
        assert_eq!(
            shown,
            format!("x {}… (4744 more characters) y", "z".repeat(256))
        );
        // Ordinary messages, paths and unicode names pass as they are.
        let ok = "member \"dé0\" path /srv/nbraid/💾.img: missing";
        assert_eq!(printable(ok), ok);
    }

    #[test]
    fn line_col_counts_from_one_in_characters() {
        let text = "a = 1\nbé = \"x\"\n";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 4), (1, 5));
        assert_eq!(line_col(text, 6), (2, 1));
        // 'é' is two bytes but one column.
        assert_eq!(line_col(text, 10), (2, 4));
        assert_eq!(line_col(text, 999), (3, 1));
    }
}

//! The context every check of one config reads: its text (for line numbers) and the
//! directory relative paths start from; and the checks of names and sizes they share.

use std::ops::Range;
use std::path::Path;

use serde_spanned::Spanned;

use crate::error::{line_col, ErrorKind, Problem};
use crate::field::size_field;
use crate::raw::RawSize;

pub(super) type R<T> = Result<T, Problem>;

/// One config being checked.
pub(super) struct Cx<'a> {
    pub text: &'a str,
    pub base: &'a Path,
    /// Existing volumes' recorded region starts.
    pub pins: &'a crate::Pins,
}

impl Cx<'_> {
    pub fn line(&self, span: &Range<usize>) -> usize {
        line_col(self.text, span.start).0
    }

    /// A size field in bytes (`who`: `member "d0"`, `field`: `size`).
    pub fn size(&self, raw: &Spanned<RawSize>, who: &str, field: &str) -> R<u64> {
        size_field(raw, who, field)
    }
}

pub(super) fn check_name(name: &str, what: &str, span: Range<usize>) -> R<()> {
    if name.is_empty() {
        return Err(Problem::new(
            span,
            ErrorKind::Name,
            format!("{what} is empty"),
        ));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Problem::new(
            span,
            ErrorKind::Name,
            format!("{what} \"{name}\" contains whitespace or control characters; use letters, digits, '-', '_' or '.'"),
        ));
    }
    // A name is printed by status, events and logs: an invisible character or a direction
    // override there makes two names look alike, or text after it read backwards.
    if let Some(c) = name.chars().find(|&c| crate::error::is_invisible(c)) {
        return Err(Problem::new(
            span,
            ErrorKind::Name,
            format!(
                "{what} {:?} contains the invisible character U+{:04X} (a text-direction or zero-width mark); use letters, digits, '-', '_' or '.'",
                name,
                c as u32
            ),
        ));
    }
    Ok(())
}

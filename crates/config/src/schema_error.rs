//! Messages for TOML that does not match the schema: the table and field an error is in, and
//! a suggestion for a misspelt key.

use super::error::{ErrorKind, Problem};
use super::raw::Skeleton;
use crate::error::ConfigError;
use std::ops::Range;
use std::path::Path;

/// A toml/serde error, with the table it is in, the field and a suggestion for misspelt keys.
pub(super) fn schema_problem(text: &str, e: &toml::de::Error) -> Problem {
    let span = e.span().unwrap_or(0..0);
    let mut message = one_line(e.message())
        .replace("expected i64", "expected an integer")
        .replace("expected u64", "expected an integer")
        .replace("expected f64", "expected a number")
        .replace("expected a sequence", "expected an array ([ ... ])");
    if let Some(field) = field_at(text, span.start) {
        if !message.contains('`') || message.starts_with("invalid") {
            message = format!("{field}: {message}");
        }
    }
    if let Some(suggestion) = did_you_mean(&message) {
        message.push_str(&format!("; did you mean `{suggestion}`?"));
    }
    if let Some(table) = table_at(text, span.start) {
        message = format!("{table}: {message}");
    }
    Problem::new(span, ErrorKind::Schema, message)
}

/// toml's message on one line (an error is one line of output).
pub(super) fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines.join("; ")
}

/// The key of `key = value` when `offset` is inside the value.
fn field_at(text: &str, offset: usize) -> Option<String> {
    let offset = offset.min(text.len());
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let before = &text[line_start..offset];
    let (key, _) = before.split_once('=')?;
    let key = key.trim();
    let ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    ok.then(|| key.to_string())
}

/// `member "d0"`, `volume "db"`, `volume #2` or `daemon` for the table holding `offset`.
fn table_at(text: &str, offset: usize) -> Option<String> {
    let sk: Skeleton = toml::from_str(text).ok()?;
    let inside = |r: Range<usize>| r.start <= offset && offset < r.end;
    let named = |kind: &str, key: &str, i: usize, v: &toml::Value| match v
        .get(key)
        .and_then(|n| n.as_str())
    {
        Some(n) => format!("{kind} \"{n}\""),
        None => format!("{kind} #{}", i + 1),
    };
    if let Some(d) = &sk.daemon {
        if inside(d.span()) {
            return Some("daemon".into());
        }
    }

    for (i, m) in sk.member.iter().flatten().enumerate() {
        if inside(m.span()) {
            return Some(named("member", "id", i, m.get_ref()));
        }
    }
    for (i, v) in sk.volume.iter().flatten().enumerate() {
        if inside(v.span()) {
            return Some(named("volume", "name", i, v.get_ref()));
        }
    }
    None
}

/// For "unknown field `x`, expected one of `a`, `b`": the closest expected name.
fn did_you_mean(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (got, rest) = rest.split_once('`')?;
    let expected: Vec<&str> = rest.split('`').skip(1).step_by(2).collect();
    closest(got, &expected).map(str::to_string)
}

/// The name in `expected` that `got` most likely misspells, if any is close.
pub(super) fn closest<'a>(got: &str, expected: &[&'a str]) -> Option<&'a str> {
    if got.is_empty() {
        return None;
    }
    let got_l = got.to_ascii_lowercase().replace('-', "_");
    expected
        .iter()
        .map(|e| (edit_distance(&got_l, e), *e))
        .filter(|(d, e)| {
            *d <= 2.max(got.len() / 3) || e.starts_with(&got_l) || got_l.starts_with(*e)
        })
        .min()
        .map(|(_, e)| e)
}

pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// `text` as `T`: not TOML is a syntax error, TOML that `T` does not take a schema error.
pub(crate) fn from_toml<T: serde::de::DeserializeOwned>(
    text: &str,
    file: &Path,
) -> Result<T, ConfigError> {
    if let Err(e) = text.parse::<toml::Table>() {
        let span = e.span().unwrap_or(0..0);
        return Err(Problem::new(
            span.clone(),
            ErrorKind::Syntax,
            syntax_message(text, span.start, e.message()),
        )
        .located(text, file));
    }
    toml::from_str(text).map_err(|e| schema_problem(text, &e).located(text, file))
}

/// toml's syntax error at `offset`, on one line, naming the key whose value it is in (a
/// hostile value on a long line is otherwise found only by its column).
fn syntax_message(text: &str, offset: usize, message: &str) -> String {
    let message = one_line(message).replace(
        "recursion limit exceeded",
        "nested too deeply (tables and arrays inside each other past the TOML reader's limit)",
    );
    match field_at(text, offset) {
        Some(key) => format!("not valid TOML: in the value of `{key}`: {message}"),
        None => format!("not valid TOML: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_syntax_error_in_a_value_names_its_key() {
        let deep = format!("name = {}1{}\n", "[".repeat(200), "]".repeat(200));
        let e = deep.parse::<toml::Table>().unwrap_err();
        let m = syntax_message(&deep, e.span().unwrap().start, e.message());
        assert!(
            m.starts_with("not valid TOML: in the value of `name`: nested too deeply"),
            "{m}"
        );
        let e = "x y = 1\n".parse::<toml::Table>().unwrap_err();
        let m = syntax_message("x y = 1\n", e.span().unwrap().start, e.message());
        assert!(
            m.starts_with("not valid TOML: ") && !m.contains("value of"),
            "{m}"
        );
    }

    #[test]
    fn suggests_close_field_names() {
        let m = "unknown field `strip`, expected one of `name`, `level`, `strip_size`, `size`";
        assert_eq!(did_you_mean(m).as_deref(), Some("strip_size"));
        let m = "unknown field `memebrs`, expected one of `name`, `members`";
        assert_eq!(did_you_mean(m).as_deref(), Some("members"));
        let m = "unknown field `colour`, expected one of `name`, `level`";
        assert_eq!(did_you_mean(m), None);
    }
}

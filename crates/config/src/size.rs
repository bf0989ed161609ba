//! Sizes and rates as people write them (`"4GiB"`, `"64KiB"`, `"1.5GiB"`, `"200MB/s"`) and as
//! we print them.
//!
//! One rule for the config and the command line: a number needs a unit, written in the case
//! the units are written — `B`; binary `KiB MiB GiB TiB PiB` (powers of 1024); decimal
//! `KB MB GB TB PB` (powers of 1000, as disk vendors print them). `"4096"` could be bytes,
//! KiB or MB/s (the CLI once read a bare rate as MB/s, the config as B/s), `"512Mb"` reads as
//! megabits and `"4G"` as either GiB or GB: each is refused with the spelling to use. A bare
//! `0` needs no unit. A space before the unit is allowed; a fraction is allowed when it comes
//! to a whole number of bytes. A rate is a size per second, `/s` optional.

use std::fmt;
use thiserror::Error;

/// The units [`parse_size`] accepts, for error messages.
pub const SIZE_UNITS_HELP: &str = "write a number with a unit: B, KiB, MiB, GiB, TiB, PiB \
(binary, powers of 1024) or KB, MB, GB, TB, PB (decimal, powers of 1000), e.g. \"4GiB\", \
\"64KiB\", \"1.5GiB\", \"4096B\"";

/// Why a size does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SizeError {
    #[error("\"{0}\" is not a size; {SIZE_UNITS_HELP}")]
    Unparsable(String),
    #[error("\"{text}\" has an unknown unit \"{unit}\"; {SIZE_UNITS_HELP}")]
    UnknownUnit { text: String, unit: String },
    #[error("\"{text}\" has no unit: write {suggest}")]
    NoUnit { text: String, suggest: String },
    #[error("\"{text}\" is in bits (\"{unit}\"); sizes are in bytes: write {suggest}")]
    Bits {
        text: String,
        unit: String,
        suggest: String,
    },
    #[error("\"{text}\": write the unit {suggest}")]
    Spelling { text: String, suggest: String },
    #[error("\"{0}\" is not a whole number of bytes")]
    Fractional(String),
    #[error("\"{0}\" is too large (at most 16 EiB - 1 byte)")]
    TooLarge(String),
}

/// The units, as written, and their bytes.
const UNITS: [(&str, u128); 11] = [
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    ("PiB", 1 << 50),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
    ("PB", 1_000_000_000_000_000),
];

/// The bytes of `unit` as written, or why it is not a unit (`num`: the number before it, for
/// the suggestion).
fn unit_factor(text: &str, num: &str, unit: &str) -> Result<u128, SizeError> {
    if let Some(&(_, f)) = UNITS.iter().find(|(u, _)| *u == unit) {
        return Ok(f);
    }
    let both =
        |prefix: &str| format!("\"{num}{prefix}iB\" (binary) or \"{num}{prefix}B\" (decimal)");
    let upper = unit.to_ascii_uppercase();
    let prefix = upper.trim_end_matches(['B', 'I']);
    let known_prefix = ["K", "M", "G", "T", "P"].contains(&prefix);
    if unit.is_empty() {
        let n: String = num.chars().filter(|&c| c != '_').collect();
        let suggest = match n.parse::<u64>() {
            Ok(b) if b > 0 => exact_spellings(b).join(" or "),
            _ => format!("\"{num}B\", \"{num}KiB\", \"{num}MiB\", ..."),
        };
        return Err(SizeError::NoUnit {
            text: text.into(),
            suggest,
        });
    }
    if unit.ends_with('b') && (unit == "b" || known_prefix) && !unit.ends_with("ib") {
        let suggest = if unit == "b" {
            format!("\"{num}B\"")
        } else {
            both(prefix)
        };
        return Err(SizeError::Bits {
            text: text.into(),
            unit: unit.into(),
            suggest,
        });
    }
    if let Some((u, _)) = UNITS.iter().find(|(u, _)| u.eq_ignore_ascii_case(unit)) {
        return Err(SizeError::Spelling {
            text: text.into(),
            suggest: format!("as \"{u}\": \"{num}{u}\""),
        });
    }
    if known_prefix && !upper.ends_with('B') {
        return Err(SizeError::Spelling {
            text: text.into(),
            suggest: format!("in full: {}", both(prefix)),
        });
    }
    Err(SizeError::UnknownUnit {
        text: text.into(),
        unit: unit.into(),
    })
}

/// `bytes` exactly in bytes and in the largest binary and decimal units that divide it,
/// quoted: `"4096B"`, `"4KiB"`; `"1000000B"`, `"1MB"`.
fn exact_spellings(bytes: u64) -> Vec<String> {
    let mut out = vec![format!("\"{bytes}B\"")];
    for units in [&UNITS[1..6], &UNITS[6..]] {
        if let Some((u, f)) = units
            .iter()
            .rev()
            .find(|(_, f)| (bytes as u128).is_multiple_of(*f))
        {
            out.push(format!("\"{}{u}\"", bytes as u128 / f));
        }
    }
    out
}

/// Parses a size such as `"4GiB"`, `"4 GiB"`, `"1.5MiB"`, `"500GB"` or `"4096B"` into bytes.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let unparsable = || SizeError::Unparsable(text.to_string());
    let num_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (num_text, unit) = t.split_at(num_end);
    let unit = unit.trim_start();
    let num: String = num_text.chars().filter(|&c| c != '_').collect();
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') {
        return Err(unparsable());
    }
    let (int_part, frac_part) = match num.split_once('.') {
        Some((i, f)) if !f.contains('.') => (i, f),
        Some(_) => return Err(unparsable()),
        None => (num.as_str(), ""),
    };
    // Nothing is ambiguous about nothing.
    let zero = unit.is_empty() && num.chars().all(|c| c == '0' || c == '.');
    let factor = if zero {
        1
    } else {
        unit_factor(text, num_text, unit)?
    };
    if frac_part.len() > 18 || int_part.len() > 30 {
        return Err(SizeError::TooLarge(text.to_string()));
    }
    let digits: u128 = format!("{int_part}{frac_part}")
        .parse()
        .map_err(|_| unparsable())?;
    let scale = 10u128.pow(frac_part.len() as u32);
    let scaled = digits
        .checked_mul(factor)
        .ok_or_else(|| SizeError::TooLarge(text.to_string()))?;
    if scaled % scale != 0 {
        return Err(SizeError::Fractional(text.to_string()));
    }
    u64::try_from(scaled / scale).map_err(|_| SizeError::TooLarge(text.to_string()))
}

/// Parses a rate, a size per second with `/s` optional (`"200MB/s"`, `"200MiB"`), into
/// bytes per second.
pub fn parse_rate(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    parse_size(t.strip_suffix("/s").unwrap_or(t))
}

/// Why a bare number (a TOML integer) is not taken for a size: `"has no unit: write ..."`.
pub fn no_unit(number: i64) -> String {
    match parse_size(&number.to_string()) {
        // The number as the config wrote it, unquoted.
        Err(e) => e
            .to_string()
            .replacen(&format!("\"{number}\""), &number.to_string(), 1),
        Ok(_) => format!("{number} has no unit; {SIZE_UNITS_HELP}"),
    }
}

const BINARY: [(&str, u64); 6] = [
    ("EiB", 1 << 60),
    ("PiB", 1 << 50),
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
];

/// A byte count for people: `4 GiB`, `64 KiB`, `15.99 GiB`, `512 B` (binary units; exact
/// values print without decimals, others with two, rounded down so a size never looks larger
/// than it is).
pub fn format_size(bytes: u64) -> String {
    HumanSize(bytes).to_string()
}

/// A byte count in the compact form the config accepts, exact: `4GiB`, `64KiB`, `1536KiB`,
/// `1000B` (used where a value is meant to be copied back into a config).
pub fn format_size_exact(bytes: u64) -> String {
    for (name, unit) in BINARY {
        if bytes >= unit && bytes & (unit - 1) == 0 {
            return format!("{}{name}", bytes / unit);
        }
    }
    format!("{bytes}B")
}

/// `Display` wrapper for [`format_size`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HumanSize(pub u64);

impl fmt::Display for HumanSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.0;
        for (name, unit) in BINARY {
            if bytes >= unit {
                if bytes & (unit - 1) == 0 {
                    return write!(f, "{} {name}", bytes / unit);
                }
                let hundredths = (bytes as u128 * 100 / unit as u128) as u64;
                return write!(f, "{}.{:02} {name}", hundredths / 100, hundredths % 100);
            }
        }
        write!(f, "{bytes} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_decimal_and_bytes() {
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("4 GiB"), Ok(4 << 30));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert_eq!(parse_size("500GB"), Ok(500_000_000_000));
        assert_eq!(parse_size("4096B"), Ok(4096));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("1_048_576B"), Ok(1 << 20));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_rate("200MB/s"), Ok(200_000_000));
        assert_eq!(parse_rate("200MiB"), Ok(200 << 20));
    }

    #[test]
    fn a_number_needs_a_unit_spelled_as_written() {
        let refused = |t: &str| parse_size(t).unwrap_err().to_string();
        assert_eq!(
            refused("4096"),
            "\"4096\" has no unit: write \"4096B\" or \"4KiB\""
        );
        assert!(refused("100").ends_with("write \"100B\""));
        assert!(refused("1.5").contains("\"1.5B\", \"1.5KiB\""));
        assert_eq!(
            refused("512Mb"),
            "\"512Mb\" is in bits (\"Mb\"); sizes are in bytes: write \"512MiB\" (binary) or \"512MB\" (decimal)"
        );
        assert!(refused("8b").contains("in bits"));
        assert!(refused("1gb").contains("in bits"));
        assert_eq!(
            refused("512mib"),
            "\"512mib\": write the unit as \"MiB\": \"512MiB\""
        );
        assert!(refused("4kB").contains("as \"KB\""));
        assert!(refused("4G").contains("in full: \"4GiB\" (binary) or \"4GB\" (decimal)"));
        assert!(refused("64k").contains("in full"));
        assert!(parse_rate("100")
            .unwrap_err()
            .to_string()
            .contains("no unit"));
    }

    #[test]
    fn rejects_with_reasons() {
        assert!(matches!(
            parse_size("4 GBs"),
            Err(SizeError::UnknownUnit { .. })
        ));
        assert!(matches!(parse_size("GiB"), Err(SizeError::Unparsable(_))));
        assert!(matches!(parse_size(""), Err(SizeError::Unparsable(_))));
        assert!(matches!(parse_size("-4GiB"), Err(SizeError::Unparsable(_))));
        assert!(matches!(
            parse_size("1.2.3GiB"),
            Err(SizeError::Unparsable(_))
        ));
        assert!(matches!(parse_size("0.3B"), Err(SizeError::Fractional(_))));
        assert!(matches!(
            parse_size("16384PiB"),
            Err(SizeError::TooLarge(_))
        ));
        let msg = parse_size("4 GBs").unwrap_err().to_string();
        assert!(msg.contains("unknown unit \"GBs\""), "{msg}");
        assert!(
            msg.contains("GB, TB, PB (decimal, powers of 1000)"),
            "{msg}"
        );
    }

    #[test]
    fn formats_for_people() {
        assert_eq!(format_size(4 << 30), "4 GiB");
        assert_eq!(format_size(64 << 10), "64 KiB");
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size((16 << 30) - (1 << 20)), "15.99 GiB");
        assert_eq!(format_size_exact(1536 << 10), "1536KiB");
        assert_eq!(format_size_exact(4 << 30), "4GiB");
        assert_eq!(format_size_exact(1000), "1000B");
    }

    #[test]
    fn round_trips() {
        for b in [1u64, 512, 4096, 65536, 3 << 29, 1 << 40, 123_456_789] {
            assert_eq!(parse_size(&format_size_exact(b)), Ok(b));
        }
    }
}

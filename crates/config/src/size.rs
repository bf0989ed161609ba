//! Sizes as people write them (`"4GiB"`, `"64KiB"`, `"1.5G"`, `1048576`) and as we print them.
//!
//! Binary units: `KiB MiB GiB TiB PiB` and the short `K M G T P` (as `truncate` and `dd` read
//! them). Decimal units: `KB MB GB TB PB` (10^3 .. 10^15), as disk vendors print them. Units are
//! case-insensitive; a space before the unit is allowed; a fraction is allowed when it comes to
//! a whole number of bytes.

use std::fmt;
use thiserror::Error;

/// The units [`parse_size`] accepts, for error messages.
pub const SIZE_UNITS_HELP: &str = "write a number of bytes or a number with a unit: \
KiB, MiB, GiB, TiB, PiB or K, M, G, T, P (binary, powers of 1024), \
KB, MB, GB, TB, PB (decimal, powers of 1000), e.g. \"4GiB\", \"64KiB\", \"1.5G\"";

/// Why a size does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SizeError {
    #[error("\"{0}\" is not a size; {SIZE_UNITS_HELP}")]
    Unparsable(String),
    #[error("\"{text}\" has an unknown unit \"{unit}\"; {SIZE_UNITS_HELP}")]
    UnknownUnit { text: String, unit: String },
    #[error("\"{0}\" is not a whole number of bytes")]
    Fractional(String),
    #[error("\"{0}\" is too large (at most 16 EiB - 1 byte)")]
    TooLarge(String),
}

fn unit_factor(unit: &str) -> Option<u128> {
    let u = unit.to_ascii_lowercase();
    let f = match u.as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "p" | "pib" => 1 << 50,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "pb" => 1_000_000_000_000_000,
        _ => return None,
    };
    Some(f)
}

/// Parses a size such as `"4GiB"`, `"4 G"`, `"1.5MiB"`, `"500GB"` or `"4096"` into bytes.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let unparsable = || SizeError::Unparsable(text.to_string());
    let num_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(num_end);
    let unit = unit.trim_start();
    let num: String = num.chars().filter(|&c| c != '_').collect();
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') {
        return Err(unparsable());
    }
    let (int_part, frac_part) = match num.split_once('.') {
        Some((i, f)) if !f.contains('.') => (i, f),
        Some(_) => return Err(unparsable()),
        None => (num.as_str(), ""),
    };
    let factor = unit_factor(unit).ok_or_else(|| SizeError::UnknownUnit {
        text: text.to_string(),
        unit: unit.to_string(),
    })?;
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
/// `1000` (used where a value is meant to be copied back into a config).
pub fn format_size_exact(bytes: u64) -> String {
    for (name, unit) in BINARY {
        if bytes >= unit && bytes & (unit - 1) == 0 {
            return format!("{}{name}", bytes / unit);
        }
    }
    bytes.to_string()
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
    fn parses_binary_decimal_and_plain() {
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("4 gib"), Ok(4 << 30));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert_eq!(parse_size("500GB"), Ok(500_000_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4096B"), Ok(4096));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("1_048_576"), Ok(1 << 20));
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
            parse_size("1.2.3G"),
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
        assert_eq!(format_size_exact(1000), "1000");
    }

    #[test]
    fn round_trips() {
        for b in [1u64, 512, 4096, 65536, 3 << 29, 1 << 40, 123_456_789] {
            assert_eq!(parse_size(&format_size_exact(b)), Ok(b));
        }
    }
}

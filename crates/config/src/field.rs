//! Size and strip fields of the config, checked with the messages every table shares.

use super::error::{ErrorKind, Problem};
use super::raw::RawSize;
use super::size::{format_size_exact, no_unit, parse_size, SIZE_UNITS_HELP};
use nbraid_layout::{STRIP_MAX, STRIP_MIN};
use serde_spanned::Spanned;

type R<T> = Result<T, Problem>;

/// A size field in bytes (`who`: `member "d0"`, `field`: `size`).
pub(super) fn size_field(raw: &Spanned<RawSize>, who: &str, field: &str) -> R<u64> {
    let err =
        |msg: String| Problem::new(raw.span(), ErrorKind::Size, format!("{who}: {field} {msg}"));
    match raw.get_ref() {
        RawSize::Int(i) if *i <= 0 => Err(err(format!(
            "{i} is not a size: it must be positive; {SIZE_UNITS_HELP}"
        ))),
        RawSize::Int(i) => Err(err(no_unit(*i))),
        RawSize::Text(t) => {
            let bytes = parse_size(t).map_err(|e| err(e.to_string()))?;
            if bytes == 0 {
                return Err(err(format!("\"{t}\" is zero; a size must be positive")));
            }
            Ok(bytes)
        }
    }
}

/// A strip size: a power of two from 4 KiB to 16 MiB (what parity groups and stripes of
/// members take).
pub(super) fn strip_field(s: &Spanned<RawSize>, who: &str, field: &str) -> R<u64> {
    let bytes = size_field(s, who, field)?;
    let valid = "valid: 4KiB, 8KiB, 16KiB, … 16MiB (powers of two)";
    if !bytes.is_power_of_two() {
        return Err(Problem::new(
            s.span(),
            ErrorKind::Strip,
            format!(
                "{who}: {field} {} is not a power of two; {valid}{}",
                s.get_ref().shown(),
                nearest_strips(bytes)
            ),
        ));
    }
    if !(STRIP_MIN..=STRIP_MAX).contains(&bytes) {
        return Err(Problem::new(
            s.span(),
            ErrorKind::Strip,
            format!(
                "{who}: {field} {} is out of range; {valid}",
                s.get_ref().shown()
            ),
        ));
    }
    Ok(bytes)
}

/// "; nearest: 32KiB or 64KiB" for a strip size that is not a power of two (when in range).
fn nearest_strips(bytes: u64) -> String {
    let below = 1u64 << (63 - bytes.leading_zeros());
    let above = below.saturating_mul(2);
    let ok: Vec<String> = [below, above]
        .into_iter()
        .filter(|b| (STRIP_MIN..=STRIP_MAX).contains(b))
        .map(format_size_exact)
        .collect();
    if ok.is_empty() {
        String::new()
    } else {
        format!("; nearest: {}", ok.join(" or "))
    }
}

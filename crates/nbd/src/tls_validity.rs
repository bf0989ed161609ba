//! When a certificate is valid: its `notBefore` and `notAfter`, read from the DER (X.509's
//! `Certificate` → `tbsCertificate` → `validity`). rustls never checks the server's own
//! certificate, so an expired one is served silently and every client refuses it; the
//! daemon reads these to say so at its start.

/// One DER element: its tag, its contents, and what follows it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |a, &b| (a << 8) | usize::from(b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// Days from 1970-01-01 to the civil date `y-m-d` (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// An X.509 time (`UTCTime` YYMMDDHHMMSSZ, `GeneralizedTime` YYYYMMDDHHMMSSZ) in seconds
/// since the Unix epoch.
fn time_unix_s(tag: u8, text: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (year, rest) = match (tag, text.len()) {
        (UTC_TIME, 12) => {
            let yy: i64 = text[..2].parse().ok()?;
            // RFC 5280: 50..99 are 19xx, 00..49 20xx.
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &text[2..])
        }
        (GENERALIZED_TIME, 14) => (text[..4].parse().ok()?, &text[4..]),
        _ => return None,
    };
    let n = |i: usize| rest[i..i + 2].parse::<i64>().ok();
    let (month, day, h, m, s) = (n(0)?, n(2)?, n(4)?, n(6)?, n(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + s)
}

/// `(notBefore, notAfter)` of DER certificate `cert`, in seconds since the Unix epoch;
/// `None` when it is not laid out as X.509 says.
pub fn validity_unix_s(cert: &[u8]) -> Option<(i64, i64)> {
    let (SEQUENCE, certificate, _) = element(cert)? else {
        return None;
    };
    let (SEQUENCE, tbs, _) = element(certificate)? else {
        return None;
    };
    let (tag, _, mut rest) = element(tbs)?;
    if tag == VERSION {
        // The serial number follows the version.
        rest = element(rest)?.2;
    }
    // The signature algorithm, then the issuer, then the validity.
    let rest = element(rest)?.2;
    let rest = element(rest)?.2;
    let (SEQUENCE, validity, _) = element(rest)? else {
        return None;
    };
    let (t0, before, rest) = element(validity)?;
    let (t1, after, _) = element(rest)?;
    Some((time_unix_s(t0, before)?, time_unix_s(t1, after)?))
}

/// Seconds since the Unix epoch now (0 on a clock before it).
pub fn now_unix_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The date and time of `unix_s` in UTC, ISO 8601: `2026-12-07T07:42:47Z` (certificates'
/// validity, `nbraid events`).
pub fn utc_text(unix_s: i64) -> String {
    let (days, secs) = (unix_s.div_euclid(86_400), unix_s.rem_euclid(86_400));
    // Inverse of days_from_civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x509_times_read_as_unix_seconds_and_back() {
        assert_eq!(time_unix_s(UTC_TIME, b"700101000000Z"), Some(0));
        assert_eq!(time_unix_s(UTC_TIME, b"261207074247Z"), Some(1_796_629_367));
        assert_eq!(
            time_unix_s(GENERALIZED_TIME, b"20261207074247Z"),
            Some(1_796_629_367)
        );
        assert_eq!(time_unix_s(UTC_TIME, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(time_unix_s(UTC_TIME, b"500101000000Z"), Some(-631_152_000));
        assert_eq!(utc_text(1_796_629_367), "2026-12-07T07:42:47Z");
        assert_eq!(utc_text(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_text(951_782_400), "2000-02-29T00:00:00Z");
        for bad in [&b"2612070742Z"[..], b"261307074247Z", b"26120707424x", b""] {
            assert_eq!(time_unix_s(UTC_TIME, bad), None, "{bad:?}");
        }
    }

    #[test]
    fn hostile_der_is_no_validity_and_no_panic() {
        assert_eq!(validity_unix_s(&[]), None);
        assert_eq!(validity_unix_s(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(validity_unix_s(&[0x30, 0x02, 0x30, 0x00]), None);
        for n in 0..64u8 {
            let junk: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37) ^ 0x30).collect();
            let _ = validity_unix_s(&junk);
        }
    }
}

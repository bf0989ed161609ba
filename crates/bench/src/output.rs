//! Results as a table for people and as JSON for scripts.

use super::stats::CellResult;
use serde::Serialize;
use std::fmt::Write;

/// The name of a sweep's theory line (drawn dashed, behind the measured curves).
pub const THEORY: &str = "theory";

/// `4KiB`, `512B`, `1MiB`, `64.5KiB`.
pub fn size_label(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (unit, name) in UNITS {
        if bytes >= unit {
            let v = bytes as f64 / unit as f64;
            return if bytes.is_multiple_of(unit) {
                format!("{}{name}", bytes / unit)
            } else {
                format!("{v:.1}{name}")
            };
        }
    }
    format!("{bytes}B")
}

/// A latency in µs with a unit that keeps 3-4 digits.
fn lat(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.1}ms", us / 1000.0)
    } else if us >= 1000.0 {
        format!("{:.2}ms", us / 1000.0)
    } else {
        format!("{us:.1}µs")
    }
}

/// A fixed-width table, one row per cell; the ratio column when several targets ran.
pub fn table(cells: &[CellResult]) -> String {
    let ratios = cells.iter().any(|c| c.ratio.is_some());
    let mut head = vec![
        "target", "point", "qd", "jobs", "IOPS", "MB/s", "lat mean", "p50", "p99", "p99.9",
        "cpu/IO",
    ];
    if ratios {
        head.push("ratio");
    }
    let rows: Vec<Vec<String>> = cells
        .iter()
        .map(|c| {
            let mut r = vec![
                c.target.clone(),
                c.point.clone(),
                c.qd.to_string(),
                c.jobs.to_string(),
                format!("{:.0}", c.iops),
                format!("{:.1}", c.mb_s),
                lat(c.lat_mean_us),
                lat(c.lat_p50_us),
                lat(c.lat_p99_us),
                lat(c.lat_p999_us),
                format!("{:.1}µs", c.cpu_us_per_io),
            ];
            if ratios {
                r.push(c.ratio.map_or_else(String::new, |x| format!("{x:.3}")));
            }
            r
        })
        .collect();
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([head[i].len()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..head.len()).map(width).collect();
    let mut out = String::new();
    let line = |out: &mut String, cols: &[String]| {
        for (i, c) in cols.iter().enumerate() {
            let pad = widths[i] - c.chars().count();
            // Text left, numbers right.
            if i < 2 {
                let _ = write!(out, "{c}{}  ", " ".repeat(pad));
            } else {
                let _ = write!(out, "{}{c}  ", " ".repeat(pad));
            }
        }
        let trimmed = out.trim_end().len();
        out.truncate(trimmed);
        out.push('\n');
    };
    line(
        &mut out,
        &head.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
    );
    for r in &rows {
        line(&mut out, r);
    }
    out
}

/// A sweep's curve: one level (or the theory line), y against member count or strip size.
#[derive(Clone, Debug, Serialize)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Everything a run produced, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct Report {
    pub workload: String,
    pub metric: String,
    pub cells: Vec<CellResult>,
    /// Workstation: Σ IOPS(q)/q over q = 1, 2, 4, 8, 16, 32, per target.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ratings: Vec<(String, f64)>,
    /// Sweeps: the curves drawn.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<Series>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(size_label(512), "512B");
        assert_eq!(size_label(4096), "4KiB");
        assert_eq!(size_label(65536 + 512), "64.5KiB");
        assert_eq!(size_label(1 << 20), "1MiB");
    }

    #[test]
    fn the_table_lines_up() {
        let h = super::super::stats::Histogram::default();
        let mut c = CellResult::new(
            "r5",
            "4KiB",
            4096.0,
            16,
            1,
            (100, 0, 409_600),
            std::time::Duration::from_secs(1),
            std::time::Duration::from_millis(1),
            &h,
        );
        c.ratio = Some(1.0);
        let t = table(&[c.clone(), c]);
        let lines: Vec<_> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("target  point"), "{t}");
        assert!(lines[1].ends_with("1.000"), "{t}");
        assert_eq!(lines[1].find("100"), lines[0].find("IOPS").map(|i| i + 1));
    }
}

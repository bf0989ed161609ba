//! # nbraid-bench: `nbraid bench`
//!
//! The storage reviews' microbenchmarks (seed 001's patterns, seed 000's member-count curves,
//! seed 004's strip sweep) against a volume of a config, simulated members or NBD servers, as
//! a table, JSON and charts. The product CLI only parses [`BenchArgs`] and calls [`run`]; the
//! workloads, the driver, the disk models' wiring and the charts live here, so the CLI and
//! the daemon carry none of them. Simulated members come from `nbraid-sim`.

mod args;
mod chart;
mod driver;
mod generator;
mod matrix;
mod nbd;
mod output;
mod sim;
mod stats;
mod sweep;
mod target;
mod verify;
mod workload;

use anyhow::Result;
pub use args::BenchArgs;
use args::Settings;
use chart::{Chart, XAxis};
use indicatif::{ProgressBar, ProgressStyle};
use output::{Report, Series};
use stats::CellResult;
pub use workload::Workload;

/// Runs what the flags ask for; the table, or the JSON with `--json` (charts are written).
pub fn run(a: &BenchArgs) -> Result<String> {
    let settings = Settings::parse(a)?;
    let outcome = match &a.sweep {
        Some(what) => sweep::from_args(a, &settings, what)?,
        None => matrix::run(a, &settings)?,
    };
    finish(a, settings.metric(), outcome)
}

/// What a run measured, before it is charted and printed.
struct Outcome {
    /// The chart's title.
    title: String,
    x: XAxis,
    cells: Vec<CellResult>,
    series: Vec<Series>,
    /// Workstation ratings by target.
    ratings: Vec<(String, f64)>,
}

pub(crate) fn progress_bar(len: u64) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    pb
}

/// Charts, then the table or JSON.
fn finish(a: &BenchArgs, metric: &str, outcome: Outcome) -> Result<String> {
    let Outcome {
        title,
        x,
        cells,
        series,
        ratings,
    } = outcome;
    for f in &a.chart {
        chart::draw(
            &Chart {
                title: &title,
                x,
                y_title: metric,
                series: &series,
            },
            f,
        )?;
    }
    let report = Report {
        workload: a.workload.name().to_string(),
        metric: metric.to_string(),
        cells,
        ratings,
        series,
    };
    if a.json {
        return Ok(serde_json::to_string_pretty(&report)? + "\n");
    }
    let mut out = output::table(&report.cells);
    for (t, r) in &report.ratings {
        out.push_str(&format!(
            "workstation rating of {t}: {r:.1} (Σ IOPS(q)/q, q = 1..32)\n"
        ));
    }
    if !report.series.is_empty() && matches!(x, XAxis::Members | XAxis::Strip) {
        out.push('\n');
        for s in &report.series {
            let pts: Vec<String> = s
                .points
                .iter()
                .map(|(x, y)| format!("{x}:{y:.0}"))
                .collect();
            out.push_str(&format!("{}: {}\n", s.name, pts.join(" ")));
        }
    }
    Ok(out)
}

//! Runs on targets the flags name (a config volume, simulated volumes, NBD servers): every
//! point of the workload at every depth on every target in turn, so targets compare cell by
//! cell, with a ratio against the first; then the curves and the workstation rating.

use crate::args::{parse_qds, BenchArgs, Settings};
use crate::chart::XAxis;
use crate::driver::run_cell;
use crate::nbd::NbdTarget;
use crate::output::Series;
use crate::sim::{self, LevelSpec};
use crate::stats::CellResult;
use crate::target::{self, Target};
use crate::workload::{workstation_rating, Axis, Point, Workload};
use crate::{progress_bar, Outcome};
use anyhow::{bail, Context, Result};
use nbraid_assembly::error_text::error_text;

/// The points and depths of the workload on the targets of the flags.
pub fn run(a: &BenchArgs, s: &Settings) -> Result<Outcome> {
    // The points and depths are checked before any target is opened.
    let points = a.workload.points(s.bs, a.read_pct)?;
    let qds = match &a.qd {
        Some(q) => parse_qds(q)?,
        None => a.workload.default_qds(),
    };
    // Targets, compared cell by cell in this order. Every target opened is closed, whatever
    // happens after (a config volume is recorded clean then).
    let mut targets: Vec<Box<dyn Target>> = Vec::new();
    let ran =
        open(a, s, &points, &mut targets).and_then(|()| run_all(a, s, &points, &qds, &targets));
    let closed = close_all(&targets);
    let cells = match (ran, closed) {
        (Ok(cells), Ok(())) => cells,
        (Err(e), Ok(())) | (Ok(_), Err(e)) => return Err(e),
        (Err(e), Err(c)) => bail!(
            "{}; then closing: {}",
            error_text(e.as_ref()),
            error_text(c.as_ref())
        ),
    };
    let ratings = if a.workload == Workload::Workstation {
        ratings(&targets, &cells)
    } else {
        Vec::new()
    };
    let axis = a.workload.axis(s.bs, a.read_pct);
    let series = curves(s, axis, &targets, &cells, &qds);
    let x = match axis {
        Axis::BlockSize => XAxis::BlockSize,
        Axis::ReadShare => XAxis::ReadShare,
        Axis::None => XAxis::QueueDepth,
    };
    Ok(Outcome {
        title: a.workload.name().to_string(),
        x,
        cells,
        series,
        ratings,
    })
}

/// Opens the targets in the order they are compared: the single member (`--vs-single`), the
/// config volume or simulated levels, then the NBD servers.
fn open(
    a: &BenchArgs,
    s: &Settings,
    points: &[Point],
    targets: &mut Vec<Box<dyn Target>>,
) -> Result<()> {
    match (&a.config, &a.volume, &s.model) {
        (Some(_), Some(v), Some(m)) => {
            if a.vs_single {
                targets.push(Box::new(sim::single(&s.shape, m, a.verify)?));
            }
            let config = s.config.as_ref().context("the config is read for --sim")?;
            let t = sim::config_volume(config, v, m, a.verify)?;
            let volume = target::find_volume(config, &config.file, v)?;
            let ids: Vec<String> = volume
                .members
                .iter()
                .map(|&i| config.members[i].id.clone())
                .collect();
            target::degrade(t.volume(), &ids, &a.fail_member, v)?;
            targets.push(Box::new(t))
        }
        (Some(f), Some(v), None) => {
            // Refused or said before the volume is opened, as mkfs says it.
            let note = data_at_risk(a.workload, points, v, a.destroy_data)?;
            if let Some(note) = note {
                eprintln!("{note}");
            }
            targets.push(Box::new(target::config_volume(f, v, &a.fail_member)?))
        }
        (_, None, Some(m)) => {
            if a.vs_single {
                targets.push(Box::new(sim::single(&s.shape, m, a.verify)?));
            }
            let levels = if s.levels.is_empty() {
                vec![LevelSpec {
                    level: nbraid_layout::Level::Raid0,
                    spans: None,
                }]
            } else {
                s.levels.clone()
            };
            for l in levels {
                let variants =
                    sim::variants(l, a.members, &s.shape, &s.policies, &s.caches, m, a.verify)?;
                for t in variants {
                    targets.push(Box::new(t));
                }
            }
        }
        _ => {}
    }
    if a.vs_single && targets.len() < 2 {
        bail!("--vs-single runs beside simulated --levels or a --config volume");
    }
    for uri in &a.nbd {
        targets.push(Box::new(NbdTarget::connect(uri, a.connections, a.verify)?));
    }
    if targets.is_empty() {
        bail!("nothing to run on: give --config FILE --volume NAME, --nbd URI, --sim hdd|ssd, or --sweep");
    }
    Ok(())
}

/// Every point at every depth on every target; with more than one target each cell carries
/// its IOPS as a ratio of the first target's.
fn run_all(
    a: &BenchArgs,
    s: &Settings,
    points: &[Point],
    qds: &[usize],
    targets: &[Box<dyn Target>],
) -> Result<Vec<CellResult>> {
    let pb = progress_bar((points.len() * qds.len() * targets.len()) as u64);
    let mut cells: Vec<CellResult> = Vec::new();
    for p in points {
        for &qd in qds {
            let mut first: Option<f64> = None;
            for t in targets {
                pb.set_message(format!("{} {} QD {qd}", t.name(), p.label));
                let c = s.cell(a, p.mix.clone(), qd);
                let mut r = run_cell(t.as_ref(), &c, &p.label, p.x)?;
                if targets.len() > 1 {
                    let base = *first.get_or_insert(r.iops);
                    r.ratio = Some(if base > 0.0 { r.iops / base } else { 0.0 });
                }
                cells.push(r);
                pb.inc(1);
            }
        }
    }
    pb.finish_and_clear();
    Ok(cells)
}

/// Closes every target; the first error, after trying them all.
fn close_all(targets: &[Box<dyn Target>]) -> Result<()> {
    let mut first = None;
    for t in targets {
        if let Err(e) = t.block_on(t.close()) {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// The workstation rating of each target whose depths give one.
fn ratings(targets: &[Box<dyn Target>], cells: &[CellResult]) -> Vec<(String, f64)> {
    targets
        .iter()
        .filter_map(|t| {
            let at = |q| {
                cells
                    .iter()
                    .find(|c| c.target == t.name() && c.qd == q)
                    .map(|c| c.iops)
            };
            workstation_rating(at).map(|r| (t.name().to_string(), r))
        })
        .collect()
}

/// Curves: against the workload's axis, one per target and depth; or against depth.
fn curves(
    s: &Settings,
    axis: Axis,
    targets: &[Box<dyn Target>],
    cells: &[CellResult],
    qds: &[usize],
) -> Vec<Series> {
    let mut series = Vec::new();
    for t in targets {
        let mine = cells.iter().filter(|c| c.target == t.name());
        match axis {
            Axis::None => series.push(Series {
                name: t.name().to_string(),
                points: mine.map(|c| (c.qd as f64, s.y(c))).collect(),
            }),
            _ => {
                for &qd in qds {
                    series.push(Series {
                        name: format!("{} QD {qd}", t.name()),
                        points: cells
                            .iter()
                            .filter(|c| c.target == t.name() && c.qd == qd)
                            .map(|c| (c.x, s.y(c)))
                            .collect(),
                    });
                }
            }
        }
    }
    series
}

/// Whether a run of `points` may write over config volume `volume`: refused when it writes
/// and the operator did not say `--destroy-data`, a warning to print when they did, nothing
/// for a workload that only reads.
fn data_at_risk(
    workload: Workload,
    points: &[Point],
    volume: &str,
    destroy_data: bool,
) -> Result<Option<String>> {
    let writes = points
        .iter()
        .any(|p| p.mix.iter().any(|e| e.read_pct < 100.0));
    match (writes, destroy_data) {
        (false, _) => Ok(None),
        (true, false) => bail!(
            "{} writes over volume {volume}'s data: give --destroy-data to let it, or run a \
             read workload (seq-read, rand-read, webserver, database --read-pct 100)",
            workload.name()
        ),
        (true, true) => Ok(Some(format!(
            "nbraid bench: {} writes over volume {volume}'s data (--destroy-data)",
            workload.name()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::{data_at_risk, Workload};

    #[test]
    fn a_workload_that_writes_needs_the_operators_word() {
        let points = |w: Workload, read_pct: Option<u64>| w.points(None, read_pct).unwrap();
        let reads = points(Workload::RandRead, None);
        assert_eq!(
            data_at_risk(Workload::RandRead, &reads, "v", false).unwrap(),
            None
        );
        let writes = points(Workload::RandWrite, None);
        let refused = data_at_risk(Workload::RandWrite, &writes, "v", false).unwrap_err();
        assert!(refused.to_string().contains("--destroy-data"), "{refused}");
        let said = data_at_risk(Workload::RandWrite, &writes, "v", true).unwrap();
        assert!(said.is_some_and(|s| s.contains("writes over volume v's data")));
        // The database sweep reaches 0% reads; held at 100% it only reads.
        let sweep = points(Workload::Database, None);
        assert!(data_at_risk(Workload::Database, &sweep, "v", false).is_err());
        let all_reads = points(Workload::Database, Some(100));
        assert_eq!(
            data_at_risk(Workload::Database, &all_reads, "v", false).unwrap(),
            None
        );
    }
}

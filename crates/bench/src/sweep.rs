//! Sweeps over simulated members: member count (one curve per level beside the theory line,
//! single member × members, as seed 000 drew it) and strip size (seed 004).

use super::args::{parse_qds, BenchArgs, Settings};
use super::chart::XAxis;
use super::driver::{run_cell, Cell};
use super::output::{self, Series, THEORY};
use super::sim::{level_volume, LevelSpec, SimShape};
use super::stats::CellResult;
use super::target::Target;
use super::workload::Workload;
use super::Outcome;
use anyhow::{bail, Context, Result};
use nbraid_config::parse_size;
use nbraid_layout::Level;
use nbraid_sim::timed::SimModel;

/// What a sweep varies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sweep {
    Members(Vec<usize>),
    Strip(Vec<u64>),
}

impl Sweep {
    /// `members=1..24`, `members=2,4,8`, `strip=4KiB..1MiB` (doubling), `strip=8KiB,64KiB`.
    pub fn parse(s: &str) -> Result<Sweep> {
        let (what, range) = s
            .split_once('=')
            .with_context(|| format!("sweep `{s}`: members=A..B or strip=A..B"))?;
        let list =
            |parse: &dyn Fn(&str) -> Result<u64>, step: &dyn Fn(u64) -> u64| -> Result<Vec<u64>> {
                if let Some((a, b)) = range.split_once("..") {
                    let (a, b) = (parse(a)?, parse(b)?);
                    if a == 0 || a > b {
                        bail!("sweep `{s}`: the range must run upwards from above 0");
                    }
                    let mut v = vec![a];
                    while step(*v.last().expect("not empty")) <= b {
                        v.push(step(*v.last().expect("not empty")));
                    }
                    Ok(v)
                } else {
                    range.split(',').map(parse).collect()
                }
            };
        match what {
            "members" => {
                let n = list(
                    &|x| {
                        x.trim()
                            .parse::<u64>()
                            .with_context(|| format!("`{x}` is not a member count"))
                    },
                    &|n| n + 1,
                )?;
                Ok(Sweep::Members(n.into_iter().map(|n| n as usize).collect()))
            }
            "strip" => {
                let v = list(
                    &|x| parse_size(x).map_err(|e| anyhow::anyhow!("strip `{x}`: {e}")),
                    &|n| n * 2,
                )?;
                if let Some(bad) = v.iter().find(|&&b| b < 4096 || !b.is_power_of_two()) {
                    bail!("strip {bad}: strips are powers of two from 4 KiB");
                }
                Ok(Sweep::Strip(v))
            }
            _ => bail!("sweep `{s}`: members=… or strip=…"),
        }
    }
}

/// `--sweep WHAT=RANGE`: one point (the review's 256 KiB sequential or 4 KiB random, QD 64
/// unless the flags say otherwise) on every simulated volume of the sweep.
pub fn from_args(a: &BenchArgs, s: &Settings, what: &str) -> Result<Outcome> {
    let sweep = Sweep::parse(what)?;
    let model = s.sweep_model(a)?;
    if s.levels.is_empty() {
        bail!("--sweep needs --levels (0,1,5,6,10,50,60)");
    }
    if s.policies.len() > 1 || s.caches.len() > 1 || a.vs_single {
        bail!(
            "a sweep takes one --read-policy and one --cache, and draws its own single-member line"
        );
    }
    let bs = s.bs.or((!s.random).then_some(256 << 10));
    let points = a.workload.points(
        bs,
        a.read_pct
            .or(Some(100).filter(|_| a.workload == Workload::Database)),
    )?;
    let qds =
        a.qd.as_deref()
            .map(parse_qds)
            .transpose()?
            .unwrap_or(vec![64]);
    if points.len() != 1 || qds.len() != 1 {
        bail!("a sweep runs one point: give one --qd (and --bs / --read-pct)");
    }
    let spec = SweepSpec {
        sweep: &sweep,
        levels: &s.levels,
        members: a.members,
        shape: s.shape,
        model: &model,
        cell: s.cell(a, points[0].mix.clone(), qds[0]),
        iops: s.random,
    };
    let total = match &sweep {
        Sweep::Members(n) => 1 + n.len() * s.levels.len(),
        Sweep::Strip(st) => st.len() * s.levels.len(),
    };
    let pb = super::progress_bar(total as u64);
    let (cells, series) = run(&spec, |name| {
        pb.set_message(name.to_string());
        pb.inc(1);
    })?;
    pb.finish_and_clear();
    let x = match sweep {
        Sweep::Members(_) => XAxis::Members,
        Sweep::Strip(_) => XAxis::Strip,
    };
    let title = format!(
        "{} {}{} QD {} on simulated {}",
        a.workload.name(),
        bs.map(output::size_label).unwrap_or_default(),
        if a.workload == Workload::Database {
            " 8KiB"
        } else {
            ""
        },
        qds[0],
        model.name()
    );
    Ok(Outcome {
        title,
        x,
        cells,
        series,
        ratings: Vec::new(),
    })
}

/// Everything a sweep cell needs besides the volume.
pub struct SweepSpec<'a> {
    pub sweep: &'a Sweep,
    pub levels: &'a [LevelSpec],
    /// Members for a strip sweep.
    pub members: usize,
    /// Strip (for a member sweep), member size, mirror and cache options.
    pub shape: SimShape,
    pub model: &'a SimModel,
    pub cell: Cell,
    /// Chart IOPS (random patterns) or MB/s.
    pub iops: bool,
}

/// Runs the sweep; returns every cell and the curves (the theory line first for a member
/// sweep). `progress` is called once per cell with its name.
pub fn run(
    spec: &SweepSpec,
    mut progress: impl FnMut(&str),
) -> Result<(Vec<CellResult>, Vec<Series>)> {
    let metric = |c: &CellResult| if spec.iops { c.iops } else { c.mb_s };
    let keep = spec.cell.verify;
    let mut cells = Vec::new();
    let mut series = Vec::new();
    let measure = |t: &dyn Target, x: f64, cells: &mut Vec<CellResult>| -> Result<f64> {
        let r = run_cell(t, &spec.cell, "", x)?;
        let y = metric(&r);
        cells.push(r);
        Ok(y)
    };
    match spec.sweep {
        Sweep::Members(counts) => {
            let single = level_volume(
                LevelSpec {
                    level: Level::Jbod,
                    spans: None,
                },
                1,
                &spec.shape,
                spec.model,
                keep,
            )?
            .expect("one member is a JBOD");
            progress("single member");
            let one = measure(&single, 1.0, &mut cells)?;
            series.push(Series {
                name: THEORY.into(),
                points: counts.iter().map(|&n| (n as f64, one * n as f64)).collect(),
            });
            for l in spec.levels {
                let mut points = Vec::new();
                for &n in counts {
                    let Some(t) = level_volume(*l, n, &spec.shape, spec.model, keep)? else {
                        continue;
                    };
                    progress(t.name());
                    points.push((n as f64, measure(&t, n as f64, &mut cells)?));
                }
                series.push(Series {
                    name: l.label(),
                    points,
                });
            }
        }
        Sweep::Strip(strips) => {
            for l in spec.levels {
                let mut points = Vec::new();
                for &s in strips {
                    let Some(t) = level_volume(
                        *l,
                        spec.members,
                        &SimShape {
                            strip: s,
                            ..spec.shape
                        },
                        spec.model,
                        keep,
                    )?
                    else {
                        bail!("{} cannot be built on {} members", l.label(), spec.members);
                    };
                    progress(&format!(
                        "{} strip {}",
                        t.name(),
                        super::output::size_label(s)
                    ));
                    let y = measure(&t, s as f64, &mut cells)?;
                    if let Some(c) = cells.last_mut() {
                        c.point = format!("strip {}", super::output::size_label(s));
                    }
                    points.push((s as f64, y));
                }
                series.push(Series {
                    name: format!("{} ×{}", l.label(), spec.members),
                    points,
                });
            }
        }
    }
    Ok((cells, series))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_parse() {
        assert_eq!(
            Sweep::parse("members=1..4").unwrap(),
            Sweep::Members(vec![1, 2, 3, 4])
        );
        assert_eq!(
            Sweep::parse("members=2,8").unwrap(),
            Sweep::Members(vec![2, 8])
        );
        assert_eq!(
            Sweep::parse("strip=4KiB..32KiB").unwrap(),
            Sweep::Strip(vec![4096, 8192, 16384, 32768])
        );
        assert!(Sweep::parse("strip=1KiB..4KiB").is_err());
        assert!(Sweep::parse("members=4..1").is_err());
        assert!(Sweep::parse("disks=1..4").is_err());
    }
}

//! `nbraid bench`: the storage reviews' microbenchmarks (seed 001's patterns, seed 000's
//! member-count curves, seed 004's strip sweep) against a volume of a config, simulated
//! members or NBD servers, as a table, JSON and charts.

mod chart;
mod driver;
mod generator;
mod nbd;
mod output;
mod sim;
mod stats;
mod sweep;
mod target;
mod verify;
mod workload;

use anyhow::{bail, Context, Result};
use chart::{Chart, XAxis};
use driver::{run_cell, Cell, Stop};
use indicatif::{ProgressBar, ProgressStyle};
use nbraid_assembly::error_text::error_text;
use nbraid_config::{parse_duration, parse_size};
use nbraid_core::{CacheMode, ReadPolicy};
use output::{Report, Series};
use sim::LevelSpec;
use stats::CellResult;
use std::path::PathBuf;
use std::time::Duration;
use sweep::Sweep;
use target::Target;
pub use workload::Workload;
use workload::{workstation_rating, Axis};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// The pattern: seq-read/seq-write (block size stepped 512 B → 1 MiB unless --bs),
    /// rand-read/rand-write (4 KiB unless --bs), database (8 KiB, read share 100% → 0% unless
    /// --read-pct), sql (seed 004's SQL Server: 8 KiB pages at random and scans of 64 KiB
    /// extents), fileserver, webserver, workstation (seed 001's distributions; workstation
    /// also prints its rating Σ IOPS(q)/q, q = 1..32).
    #[arg(value_enum)]
    pub workload: Workload,
    /// Run on a volume of this config, in this process: assembled by its superblocks as
    /// nbraidd assembles it (refused while a daemon serves its members), recorded clean at the
    /// end. With --sim or --sweep its
    /// [bench.hdd] / [bench.ssd] tables set the simulated models' parameters (then --volume
    /// is optional: without it the config gives only the models).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The config's volume to run on.
    #[arg(long, value_name = "NAME", requires = "config")]
    pub volume: Option<String>,
    /// Let a workload that writes overwrite the --volume's data (refused without: the bench
    /// writes over whatever the volume holds). Read workloads need no flag.
    #[arg(long, requires = "volume")]
    pub destroy_data: bool,
    /// An NBD server's export (nbd://host[:port]/name, nbd+unix:///name?socket=PATH);
    /// repeatable: the targets run cell by cell in turn, with a ratio column against the first.
    #[arg(long, value_name = "URI")]
    pub nbd: Vec<String>,
    /// NBD connections per target; requests go round them in turn.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub connections: usize,
    /// Simulated members (virtual time): the config volume's shape on simulated members, a
    /// --levels/--members volume, or a sweep's volumes.
    #[arg(long, value_name = "hdd|ssd")]
    pub sim: Option<String>,
    /// TOML with the simulated models' parameters ([hdd] rpm, full_stroke_ms, ...; [ssd]
    /// read_iops, read_mb_s, ...): the keys of a config's [bench.hdd] / [bench.ssd]. It wins
    /// over the config: given, the config's tables are not used.
    #[arg(long, value_name = "FILE", requires = "sim")]
    pub sim_params: Option<PathBuf>,
    /// Sweep simulated volumes: members=1..24 (one curve per --levels beside the theory
    /// line) or strip=4KiB..1MiB (one curve per level over --members members).
    #[arg(long, value_name = "WHAT=RANGE")]
    pub sweep: Option<String>,
    /// Levels of simulated volumes: 0,1,5,6,10,50,60 (spans as 50-4); with --sim and no
    /// sweep each level is a target of its own, run in turn.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub levels: Vec<String>,
    /// Members of a simulated volume (strip sweeps, single volumes).
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub members: usize,
    /// Strip size of simulated volumes (default 256 KiB as seed 000).
    #[arg(long, value_name = "SIZE")]
    pub strip: Option<String>,
    /// Bytes of each simulated member (default 300 GB; seeks are shares of it).
    #[arg(long, value_name = "SIZE")]
    pub member_size: Option<String>,
    /// Mirror read policy of simulated volumes: nearest, round-robin, least-pending; with
    /// --sim and no sweep a list runs each mirrored level once per policy.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "POLICY",
        default_value = "nearest"
    )]
    pub read_policy: Vec<String>,
    /// Simulated mirrors: a sequential run moves to another copy after this many bytes
    /// (the engine's `mirror_seq_piece`, default 2 MiB).
    #[arg(long, value_name = "SIZE")]
    pub mirror_piece: Option<String>,
    /// Simulated parity volumes without the write-back stripe cache.
    #[arg(long, conflicts_with = "cache")]
    pub write_through: bool,
    /// Stripe cache of simulated parity volumes: write-back, write-through; with --sim and no
    /// sweep a list runs each parity level once per mode.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub cache: Vec<String>,
    /// With --sim: first run one simulated member alone, so the ratio column reads as
    /// "× a single disk".
    #[arg(long, requires = "sim")]
    pub vs_single: bool,
    /// Fixed request size (seq-*, rand-*, database).
    #[arg(long, value_name = "SIZE")]
    pub bs: Option<String>,
    /// Fixed read share of the database pattern, in percent.
    #[arg(long, value_name = "PCT")]
    pub read_pct: Option<u64>,
    /// Queue depth per job: 16, a list 1,4,16 or a doubling range 1..256.
    #[arg(long, value_name = "QD")]
    pub qd: Option<String>,
    /// Jobs, each with its own generator, region and queue.
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Time per cell (default 5s; 1s virtual on simulated members).
    #[arg(long, value_name = "TIME", conflicts_with = "bytes")]
    pub duration: Option<String>,
    /// Bytes per cell instead of a time.
    #[arg(long, value_name = "SIZE")]
    pub bytes: Option<String>,
    /// Keep requests within the first SIZE bytes of the target.
    #[arg(long, value_name = "SIZE")]
    pub span: Option<String>,
    /// Seed of the request generator: the same seed repeats a run exactly.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Check what reads return against what the run wrote, and read every written sector
    /// back at the end of each cell.
    #[arg(long)]
    pub verify: bool,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Draw a chart (.svg or .png); repeatable.
    #[arg(long, value_name = "FILE")]
    pub chart: Vec<PathBuf>,
}

/// Queue depths: `16`, `1,4,16`, `1..256` (doubling).
fn parse_qds(s: &str) -> Result<Vec<usize>> {
    let num = |x: &str| {
        x.trim()
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .with_context(|| format!("queue depth `{x}` is not a number above 0"))
    };
    if let Some((a, b)) = s.split_once("..") {
        let (a, b) = (num(a)?, num(b)?);
        if a > b {
            bail!("queue depths {s}: the range must run upwards");
        }
        return Ok(std::iter::successors(Some(a), |&q| Some(q * 2))
            .take_while(|&q| q <= b)
            .collect());
    }
    s.split(',').map(num).collect()
}

/// Whether a run of `points` may write over config volume `volume`: refused when it writes
/// and the operator did not say `--destroy-data`, a warning to print when they did, nothing
/// for a workload that only reads.
fn data_at_risk(
    workload: Workload,
    points: &[workload::Point],
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

fn size(what: &str, s: &Option<String>) -> Result<Option<u64>> {
    s.as_deref()
        .map(|t| parse_size(t).map_err(|e| anyhow::anyhow!("--{what} {t}: {e}")))
        .transpose()
}

fn progress_bar(len: u64) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    pb
}

pub fn run(a: &BenchArgs) -> Result<String> {
    // A cell of no jobs, bytes or time measures nothing: say so rather than print zeros.
    if a.jobs == 0 || a.connections == 0 {
        bail!("--jobs and --connections must be at least 1");
    }
    let bs = size("bs", &a.bs)?;
    let simulated = a.sim.is_some() || a.sweep.is_some();
    if a.config.is_some() && a.volume.is_none() && !simulated {
        bail!("--config FILE needs --volume NAME (or --sim / --sweep, for which the config alone gives its [bench.hdd] / [bench.ssd] models)");
    }
    if a.sweep.is_some() && a.volume.is_some() {
        bail!("a sweep builds its own volumes: --volume is not used (--config alone gives the sweep its [bench.hdd] / [bench.ssd] models)");
    }
    // The config is read once: for its volume and for the models' tables.
    let config = match &a.config {
        Some(f) if simulated => Some(nbraid_config::load(f)?),
        _ => None,
    };
    let source = sim::ModelSource {
        params_file: a.sim_params.as_deref(),
        config: config.as_ref(),
    };
    let model = a
        .sim
        .as_deref()
        .map(|k| sim::model(k, source))
        .transpose()?;
    let virtual_time = simulated;
    let stop = match (&a.bytes, &a.duration) {
        (Some(b), _) => match size("bytes", &Some(b.clone()))? {
            Some(n) if n > 0 => Stop::Bytes(n),
            _ => bail!("--bytes {b}: a cell needs at least one byte"),
        },
        (None, Some(d)) => {
            match parse_duration(d).map_err(|e| anyhow::anyhow!("--duration {d}: {e}"))? {
                t if t.is_zero() => bail!("--duration {d}: a cell needs some time"),
                t => Stop::Time(t),
            }
        }
        (None, None) if virtual_time => Stop::Time(Duration::from_secs(1)),
        (None, None) => Stop::Time(Duration::from_secs(5)),
    };
    let levels: Vec<LevelSpec> = a
        .levels
        .iter()
        .map(|l| LevelSpec::parse(l))
        .collect::<Result<_>>()?;
    let policies: Vec<ReadPolicy> = a
        .read_policy
        .iter()
        .map(|p| {
            p.parse()
                .map_err(|e: String| anyhow::anyhow!("--read-policy: {e}"))
        })
        .collect::<Result<_>>()?;
    let default_cache = nbraid_core::VolumeOptions::default().cache;
    let caches: Vec<CacheMode> = if a.write_through {
        vec![CacheMode::WriteThrough]
    } else if a.cache.is_empty() {
        vec![default_cache]
    } else {
        a.cache
            .iter()
            .map(|c| {
                CacheMode::from_name(c, default_cache.cache_bytes().unwrap_or(32 << 20))
                    .map_err(|e| anyhow::anyhow!("--cache: {e}"))
            })
            .collect::<Result<_>>()?
    };
    let strip = size("strip", &a.strip)?.unwrap_or(256 << 10);
    let member_len = size("member-size", &a.member_size)?.unwrap_or(sim::DEFAULT_MEMBER_BYTES);
    let shape = sim::SimShape {
        strip,
        member_len,
        policy: policies[0],
        cache: caches[0],
        mirror_piece: size("mirror-piece", &a.mirror_piece)?,
    };
    let random = !matches!(a.workload, Workload::SeqRead | Workload::SeqWrite);
    let metric = if random { "IOPS" } else { "MB/s" };
    let y = |c: &CellResult| if random { c.iops } else { c.mb_s };
    let cell = |mix: Vec<workload::Entry>, qd: usize| Cell {
        mix,
        qd,
        jobs: a.jobs,
        stop,
        seed: a.seed,
        verify: a.verify,
        span: None,
    };
    let span = size("span", &a.span)?;

    if let Some(s) = &a.sweep {
        let sweep = Sweep::parse(s)?;
        let model = match model {
            Some(m) => m,
            None => sim::model("hdd", source)?,
        };
        if levels.is_empty() {
            bail!("--sweep needs --levels (0,1,5,6,10,50,60)");
        }
        if policies.len() > 1 || caches.len() > 1 || a.vs_single {
            bail!("a sweep takes one --read-policy and one --cache, and draws its own single-member line");
        }
        // A sweep runs one point: the review's 256 KiB sequential or 4 KiB random, QD 64.
        let bs = bs.or((!random).then_some(256 << 10));
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
        let mut c = cell(points[0].mix.clone(), qds[0]);
        c.span = span;
        let spec = sweep::SweepSpec {
            sweep: &sweep,
            levels: &levels,
            members: a.members,
            shape,
            model: &model,
            cell: c,
            iops: random,
        };
        let total = match &sweep {
            Sweep::Members(n) => 1 + n.len() * levels.len(),
            Sweep::Strip(s) => s.len() * levels.len(),
        };
        let pb = progress_bar(total as u64);
        let (cells, series) = sweep::run(&spec, |name| {
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
        return finish(a, &title, x, metric, cells, series, Vec::new());
    }

    // The points and depths are checked before any target is opened.
    let points = a.workload.points(bs, a.read_pct)?;
    let qds = match &a.qd {
        Some(q) => parse_qds(q)?,
        None => a.workload.default_qds(),
    };
    let open = |targets: &mut Vec<Box<dyn Target>>| -> Result<()> {
        match (&a.config, &a.volume, &model) {
            (Some(_), Some(v), Some(m)) => {
                if a.vs_single {
                    targets.push(Box::new(sim::single(&shape, m, a.verify)?));
                }
                let config = config.as_ref().context("the config is read for --sim")?;
                targets.push(Box::new(sim::config_volume(config, v, m, a.verify)?))
            }
            (Some(f), Some(v), None) => {
                // Refused or said before the volume is opened, as mkfs says it.
                let note = data_at_risk(a.workload, &points, v, a.destroy_data)?;
                if let Some(note) = note {
                    eprintln!("{note}");
                }
                targets.push(Box::new(target::config_volume(f, v)?))
            }
            (_, None, Some(m)) => {
                if a.vs_single {
                    targets.push(Box::new(sim::single(&shape, m, a.verify)?));
                }
                let levels = if levels.is_empty() {
                    vec![LevelSpec {
                        level: nbraid_layout::Level::Raid0,
                        spans: None,
                    }]
                } else {
                    levels.clone()
                };
                for l in levels {
                    for t in sim::variants(l, a.members, &shape, &policies, &caches, m, a.verify)? {
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
            targets.push(Box::new(nbd::NbdTarget::connect(
                uri,
                a.connections,
                a.verify,
            )?));
        }
        if targets.is_empty() {
            bail!("nothing to run on: give --config FILE --volume NAME, --nbd URI, --sim hdd|ssd, or --sweep");
        }
        Ok(())
    };
    let run_all = |targets: &[Box<dyn Target>]| -> Result<Vec<CellResult>> {
        let pb = progress_bar((points.len() * qds.len() * targets.len()) as u64);
        let mut cells: Vec<CellResult> = Vec::new();
        for p in &points {
            for &qd in &qds {
                let mut first: Option<f64> = None;
                for t in targets {
                    pb.set_message(format!("{} {} QD {qd}", t.name(), p.label));
                    let mut c = cell(p.mix.clone(), qd);
                    c.span = span;
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
    };
    // Targets, compared cell by cell in this order. Every target opened is closed, whatever
    // happens after (a config volume is recorded clean then).
    let mut targets: Vec<Box<dyn Target>> = Vec::new();
    let ran = open(&mut targets).and_then(|()| run_all(&targets));
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
    } else {
        Vec::new()
    };
    // Curves: against the workload's axis, one per target and depth; or against depth.
    let axis = a.workload.axis(bs, a.read_pct);
    let mut series = Vec::new();
    for t in &targets {
        let mine = cells.iter().filter(|c| c.target == t.name());
        match axis {
            Axis::None => series.push(Series {
                name: t.name().to_string(),
                points: mine.map(|c| (c.qd as f64, y(c))).collect(),
            }),
            _ => {
                for &qd in &qds {
                    series.push(Series {
                        name: format!("{} QD {qd}", t.name()),
                        points: cells
                            .iter()
                            .filter(|c| c.target == t.name() && c.qd == qd)
                            .map(|c| (c.x, y(c)))
                            .collect(),
                    });
                }
            }
        }
    }
    let x = match axis {
        Axis::BlockSize => XAxis::BlockSize,
        Axis::ReadShare => XAxis::ReadShare,
        Axis::None => XAxis::QueueDepth,
    };
    finish(a, a.workload.name(), x, metric, cells, series, ratings)
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

/// Charts, then the table or JSON.
fn finish(
    a: &BenchArgs,
    title: &str,
    x: XAxis,
    metric: &str,
    cells: Vec<CellResult>,
    series: Vec<Series>,
    ratings: Vec<(String, f64)>,
) -> Result<String> {
    for f in &a.chart {
        chart::draw(
            &Chart {
                title,
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

#[cfg(test)]
mod tests {
    use super::{data_at_risk, parse_qds, Workload};

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

    #[test]
    fn queue_depths_parse_as_one_a_list_or_a_doubling_range() {
        assert_eq!(parse_qds("16").unwrap(), [16]);
        assert_eq!(parse_qds("1,4,16").unwrap(), [1, 4, 16]);
        assert_eq!(
            parse_qds("1..256").unwrap(),
            [1, 2, 4, 8, 16, 32, 64, 128, 256]
        );
        assert_eq!(parse_qds("3..20").unwrap(), [3, 6, 12]);
        for bad in ["0", "1..0", "a", "4..", "1,,2", "-1"] {
            assert!(parse_qds(bad).is_err(), "{bad}");
        }
    }
}

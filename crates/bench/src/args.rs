//! The flags of `nbraid bench` and what they ask for, checked before any target is opened:
//! [`Settings`] holds the parsed sizes, stop rule, levels, policies, caches and disk model, so
//! the runs ([`crate::matrix`], [`crate::sweep`]) read values, not strings.

use crate::driver::{Cell, Stop};
use crate::sim::{self, LevelSpec, ModelSource, SimShape};
use crate::stats::CellResult;
use crate::workload::{self, Workload};
use anyhow::{bail, Context, Result};
use nbraid_config::{parse_duration, parse_size, Config};
use nbraid_core::{CacheMode, ReadPolicy};
use nbraid_sim::SimModel;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Fail this member of the --volume before the run (its config id, or its role number
    /// 0..N−1; repeatable), so the cells measure the volume degraded as after `nbraid fail`:
    /// reads of its chunks are rebuilt from parity or served by another copy. Refused beyond
    /// the volume's tolerance. On files or devices the failure is recorded in the
    /// superblocks, as `nbraid fail` records it (add the member back to rebuild it); memory
    /// members forget it with the run.
    #[arg(long, value_name = "MEMBER", requires = "volume")]
    pub fail_member: Vec<String>,
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

/// The flags, checked and parsed (in the order the errors were always reported).
pub(crate) struct Settings {
    /// `--bs`.
    pub bs: Option<u64>,
    /// The config, read once for `--sim` / `--sweep` (its volume and its models' tables).
    pub config: Option<Config>,
    /// `--sim`'s model (a sweep without `--sim` takes the HDD, see [`Settings::sweep_model`]).
    pub model: Option<SimModel>,
    pub stop: Stop,
    pub levels: Vec<LevelSpec>,
    pub policies: Vec<ReadPolicy>,
    pub caches: Vec<CacheMode>,
    /// Strip, member size, first policy and cache, mirror piece of simulated volumes.
    pub shape: SimShape,
    pub span: Option<u64>,
    /// Random patterns are measured in IOPS, sequential ones in MB/s.
    pub random: bool,
}

impl Settings {
    pub fn parse(a: &BenchArgs) -> Result<Settings> {
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
        let config = match &a.config {
            Some(f) if simulated => Some(nbraid_config::load(f)?),
            _ => None,
        };
        let source = model_source(a, config.as_ref());
        let model = a
            .sim
            .as_deref()
            .map(|k| sim::model(k, source))
            .transpose()?;
        // Simulated members keep virtual time.
        let stop = stop(a, simulated)?;
        let levels: Vec<LevelSpec> = a
            .levels
            .iter()
            .map(|l| LevelSpec::parse(l))
            .collect::<Result<_>>()?;
        let policies = policies(a)?;
        let caches = caches(a)?;
        let shape = SimShape {
            strip: size("strip", &a.strip)?.unwrap_or(256 << 10),
            member_len: size("member-size", &a.member_size)?.unwrap_or(sim::DEFAULT_MEMBER_BYTES),
            policy: policies[0],
            cache: caches[0],
            mirror_piece: size("mirror-piece", &a.mirror_piece)?,
        };
        Ok(Settings {
            bs,
            config,
            model,
            stop,
            levels,
            policies,
            caches,
            shape,
            span: size("span", &a.span)?,
            random: !matches!(a.workload, Workload::SeqRead | Workload::SeqWrite),
        })
    }

    /// A sweep's model: `--sim`'s, else the HDD (with the file's or config's parameters).
    pub fn sweep_model(&self, a: &BenchArgs) -> Result<SimModel> {
        match &self.model {
            Some(m) => Ok(m.clone()),
            None => sim::model("hdd", model_source(a, self.config.as_ref())),
        }
    }

    /// The measure charted and compared: `IOPS` or `MB/s`.
    pub fn metric(&self) -> &'static str {
        if self.random {
            "IOPS"
        } else {
            "MB/s"
        }
    }

    /// A cell's value in [`Settings::metric`].
    pub fn y(&self, c: &CellResult) -> f64 {
        if self.random {
            c.iops
        } else {
            c.mb_s
        }
    }

    /// One cell of `mix` at depth `qd`, with the run's jobs, stop, seed, verify and span.
    pub fn cell(&self, a: &BenchArgs, mix: Vec<workload::Entry>, qd: usize) -> Cell {
        Cell {
            mix,
            qd,
            jobs: a.jobs,
            stop: self.stop,
            seed: a.seed,
            verify: a.verify,
            span: self.span,
        }
    }
}

/// Where the models' parameters come from: `--sim-params`, else the config's tables.
fn model_source<'a>(a: &'a BenchArgs, config: Option<&'a Config>) -> ModelSource<'a> {
    ModelSource {
        params_file: a.sim_params.as_deref(),
        config,
    }
}

/// `--bytes` or `--duration`; without either 5 s, or 1 s of virtual time.
fn stop(a: &BenchArgs, virtual_time: bool) -> Result<Stop> {
    Ok(match (&a.bytes, &a.duration) {
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
    })
}

fn policies(a: &BenchArgs) -> Result<Vec<ReadPolicy>> {
    a.read_policy
        .iter()
        .map(|p| {
            p.parse()
                .map_err(|e: String| anyhow::anyhow!("--read-policy: {e}"))
        })
        .collect()
}

/// `--write-through`, `--cache LIST`, or the engine's default.
fn caches(a: &BenchArgs) -> Result<Vec<CacheMode>> {
    let default_cache = nbraid_core::VolumeOptions::default().cache;
    if a.write_through {
        return Ok(vec![CacheMode::WriteThrough]);
    }
    if a.cache.is_empty() {
        return Ok(vec![default_cache]);
    }
    a.cache
        .iter()
        .map(|c| {
            CacheMode::from_name(c, default_cache.cache_bytes().unwrap_or(32 << 20))
                .map_err(|e| anyhow::anyhow!("--cache: {e}"))
        })
        .collect()
}

/// Queue depths: `16`, `1,4,16`, `1..256` (doubling).
pub(crate) fn parse_qds(s: &str) -> Result<Vec<usize>> {
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

pub(crate) fn size(what: &str, s: &Option<String>) -> Result<Option<u64>> {
    s.as_deref()
        .map(|t| parse_size(t).map_err(|e| anyhow::anyhow!("--{what} {t}: {e}")))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::parse_qds;

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

//! Simulated targets: volumes of the engine over [`SimMember`]s on one virtual clock, built
//! from a config's volume or from a level and member count (sweeps), and the model's
//! parameters from a `--sim-params` file (`[hdd]` / `[ssd]` tables of numbers) or the
//! config's `[bench.hdd]` / `[bench.ssd]` (both checked by `nbraid_config`).

use super::target::{Target, VolumeTarget};
use anyhow::{bail, Context, Result};
use nbraid_config::{BenchModels, Config};
use nbraid_core::{CacheMode, Member, ReadPolicy, Volume, VolumeOptions};
use nbraid_layout::{Geometry, Level, ParityLayout, Region, Shape};
use nbraid_sim::clock::SimClock;
use nbraid_sim::timed::{HddParams, SimMember, SimModel, SsdParams};
use std::path::Path;
use std::sync::Arc;

/// Default bytes of a simulated member: a 300 GB drive of the reviews' era (nothing is
/// stored unless --verify asks for it).
pub const DEFAULT_MEMBER_BYTES: u64 = 300_000_000_000 / 4096 * 4096;

/// Where a model's parameters come from, besides the engine's defaults.
#[derive(Clone, Copy, Debug, Default)]
pub struct ModelSource<'a> {
    /// A `--sim-params` file: when given, its `[kind]` is the whole story.
    pub params_file: Option<&'a Path>,
    /// The config's tables (`--config FILE`), used when there is no file.
    pub config: Option<&'a Config>,
}

/// The model `kind` (`hdd` or `ssd`): the engine's defaults with the parameters of the
/// `--sim-params` file's `[kind]` applied, or else those of the config's `[bench.kind]`. The
/// file replaces the config's table rather than merging with it, so a published file gives
/// the published drive whatever the config says.
pub fn model(kind: &str, from: ModelSource<'_>) -> Result<SimModel> {
    let mut m = match kind {
        "hdd" => SimModel::Hdd(HddParams::default()),
        "ssd" => SimModel::Ssd(SsdParams::default()),
        _ => bail!("unknown simulated member `{kind}` (hdd or ssd)"),
    };
    let (models, whence): (BenchModels, String) = match (from.params_file, from.config) {
        (Some(file), _) => (
            nbraid_config::load_sim_params(file)?,
            format!("{} [{kind}]", file.display()),
        ),
        (None, Some(c)) => (
            c.bench.clone(),
            format!("{} [bench.{kind}]", c.file.display()),
        ),
        (None, None) => return Ok(m),
    };
    for (key, value) in models.model(kind).into_iter().flat_map(|p| p.iter()) {
        // nbraid_config checked the key and range; the engine has the last word.
        m.set(key, value)
            .map_err(|e| anyhow::anyhow!("{whence}: {e}"))?;
    }
    Ok(m)
}

/// Options of a simulated volume: no background thread (the cache has no age limit, so
/// everything runs on the virtual clock), fresh members in sync.
pub fn sim_options(mut o: VolumeOptions) -> VolumeOptions {
    o.cache_max_age = None;
    o.members_known_zero = true;
    o
}

/// `geometry` over fresh simulated members of `member_len` bytes each.
pub fn sim_volume(
    name: String,
    geometry: Geometry,
    member_lens: &[u64],
    opts: VolumeOptions,
    model: &SimModel,
    keep_data: bool,
) -> Result<VolumeTarget> {
    let clock = SimClock::new();
    let members: Vec<Arc<dyn Member>> = member_lens
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            Arc::new(SimMember::new(
                format!("{}{i}", model.name()),
                len,
                model,
                clock.clone(),
                keep_data,
            )) as Arc<dyn Member>
        })
        .collect();
    let volume = Volume::new(geometry, members, sim_options(opts))
        .with_context(|| format!("assembling simulated volume {name}"))?;
    Ok(VolumeTarget::new(name, Arc::new(volume), Some(clock)))
}

/// The config's volume `name` with its members replaced by simulated ones of the same sizes.
pub fn config_volume(
    config: &Config,
    name: &str,
    model: &SimModel,
    keep_data: bool,
) -> Result<VolumeTarget> {
    let v = super::target::find_volume(config, &config.file, name)?;
    let lens: Vec<u64> = v.members.iter().map(|&m| config.members[m].size).collect();
    sim_volume(
        format!("{name} ({})", model.name()),
        v.geometry.clone(),
        &lens,
        nbraid_assembly::assemble::volume_options(v),
        model,
        keep_data,
    )
}

/// A level as the sweeps name it: `0`, `1`, `5`, `6`, `10`, `50`, `60`, optionally with
/// spans (`50-4`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LevelSpec {
    pub level: Level,
    pub spans: Option<usize>,
}

impl LevelSpec {
    pub fn parse(s: &str) -> Result<LevelSpec> {
        let (l, spans) = match s.split_once('-') {
            Some((l, n)) => (
                l,
                Some(
                    n.parse::<usize>()
                        .ok()
                        .filter(|&n| n >= 2)
                        .with_context(|| {
                            format!("level `{s}`: spans after `-` must be a number ≥ 2")
                        })?,
                ),
            ),
            None => (s, None),
        };
        let level = match l.trim_start_matches("raid") {
            "0" => Level::Raid0,
            "1" => Level::Raid1,
            "5" => Level::Raid5,
            "6" => Level::Raid6,
            "10" => Level::Raid10,
            "50" => Level::Raid50,
            "60" => Level::Raid60,
            "jbod" => Level::Jbod,
            _ => bail!("unknown level `{s}` (0, 1, 5, 6, 10, 50, 60, jbod; spans as 50-4)"),
        };
        if spans.is_some() && !matches!(level, Level::Raid50 | Level::Raid60 | Level::Raid10) {
            bail!("level `{s}`: only 10, 50 and 60 have spans");
        }
        Ok(LevelSpec { level, spans })
    }

    pub fn label(&self) -> String {
        let n = self.level.name().trim_start_matches("raid").to_uppercase();
        let n = if self.level == Level::Jbod {
            n
        } else {
            format!("RAID {n}")
        };
        match self.spans {
            Some(s) => format!("{n}-{s}"),
            None => n,
        }
    }

    /// Spans for `members` (default: 2 for RAID 50/60, pairs for RAID 10), or `None` when
    /// the level cannot be built on that many members.
    pub fn spans_for(&self, members: usize) -> Option<Option<usize>> {
        let min_span = match self.level {
            Level::Raid50 => 3,
            Level::Raid60 => 4,
            Level::Raid10 => 2,
            Level::Raid1 => return (members == 2).then_some(None),
            Level::Raid5 => return (members >= 3).then_some(None),
            Level::Raid6 => return (members >= 4).then_some(None),
            Level::Raid0 => return (members >= 2).then_some(None),
            Level::Jbod => return (members >= 1).then_some(None),
        };
        let spans = self.spans.unwrap_or(if self.level == Level::Raid10 {
            members / 2
        } else {
            2
        });
        (spans >= 2 && members.is_multiple_of(spans) && members / spans >= min_span)
            .then_some(Some(spans))
    }
}

/// How simulated volumes are shaped, besides level and member count.
#[derive(Clone, Copy, Debug)]
pub struct SimShape {
    pub strip: u64,
    pub member_len: u64,
    pub policy: ReadPolicy,
    pub cache: CacheMode,
    /// The engine's `mirror_seq_piece` (default when `None`).
    pub mirror_piece: Option<u64>,
}

/// A volume of `spec` over `members` simulated members; `None` when the level cannot be
/// built on that many members.
pub fn level_volume(
    spec: LevelSpec,
    members: usize,
    shape: &SimShape,
    model: &SimModel,
    keep_data: bool,
) -> Result<Option<VolumeTarget>> {
    // One member of RAID 0 is the member itself.
    let spec = if spec.level == Level::Raid0 && members == 1 {
        LevelSpec {
            level: Level::Jbod,
            spans: None,
        }
    } else {
        spec
    };
    let Some(spans) = spec.spans_for(members) else {
        return Ok(None);
    };
    let strip = shape.strip;
    let what = || format!("{} over {members} members", spec.label());
    let layout = Shape::new(spec.level, members, spans, strip, ParityLayout::default())
        .with_context(what)?;
    let len = shape.member_len / strip * strip;
    let regions = vec![Region { start: 0, len }; members];
    let geometry = Geometry::new(layout, &regions).with_context(what)?;
    let defaults = VolumeOptions::default();
    let opts = VolumeOptions {
        read_policy: shape.policy,
        cache: shape.cache,
        mirror_seq_piece: shape.mirror_piece.unwrap_or(defaults.mirror_seq_piece),
        ..defaults
    };
    sim_volume(
        format!("{} ×{members}", spec.label()),
        geometry,
        &vec![len; members],
        opts,
        model,
        keep_data,
    )
    .map(Some)
}

/// One simulated member alone (`single hdd`): what the ratio column compares with.
pub fn single(shape: &SimShape, model: &SimModel, keep_data: bool) -> Result<VolumeTarget> {
    let jbod = LevelSpec {
        level: Level::Jbod,
        spans: None,
    };
    Ok(level_volume(jbod, 1, shape, model, keep_data)?
        .context("one member is a JBOD")?
        .named(format!("single {}", model.name())))
}

/// `spec` over `members` simulated members once per read policy (levels with mirrors) and
/// once per cache mode (levels with parity); a name carries the policy or mode when more
/// than one is given.
pub fn variants(
    spec: LevelSpec,
    members: usize,
    shape: &SimShape,
    policies: &[ReadPolicy],
    caches: &[CacheMode],
    model: &SimModel,
    keep_data: bool,
) -> Result<Vec<VolumeTarget>> {
    let mirrored = matches!(spec.level, Level::Raid1 | Level::Raid10);
    let parity = matches!(
        spec.level,
        Level::Raid5 | Level::Raid6 | Level::Raid50 | Level::Raid60
    );
    let policies = if mirrored { policies } else { &policies[..1] };
    let caches = if parity { caches } else { &caches[..1] };
    let mut out = Vec::new();
    for &policy in policies {
        for &cache in caches {
            let t = level_volume(
                spec,
                members,
                &SimShape {
                    policy,
                    cache,
                    ..*shape
                },
                model,
                keep_data,
            )?
            .with_context(|| format!("{} cannot be built on {members} members", spec.label()))?;
            let mut name = t.name().to_string();
            if policies.len() > 1 {
                name += &format!(" {policy}");
            }
            if caches.len() > 1 {
                name += &format!(" {}", cache.name());
            }
            out.push(t.named(name));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_fit_member_counts() {
        let l = |s| LevelSpec::parse(s).unwrap();
        assert_eq!(
            l("50-4"),
            LevelSpec {
                level: Level::Raid50,
                spans: Some(4)
            }
        );
        assert!(LevelSpec::parse("5-2").is_err());
        assert!(LevelSpec::parse("7").is_err());
        assert_eq!(l("5").spans_for(2), None);
        assert_eq!(l("5").spans_for(3), Some(None));
        assert_eq!(l("1").spans_for(3), None);
        assert_eq!(l("10").spans_for(6), Some(Some(3)));
        assert_eq!(l("10").spans_for(5), None);
        assert_eq!(l("10").spans_for(2), None);
        assert_eq!(l("50-4").spans_for(12), Some(Some(4)));
        assert_eq!(l("50-4").spans_for(8), None);
        assert_eq!(l("60").spans_for(8), Some(Some(2)));
        assert_eq!(l("60").label(), "RAID 60");
    }

    #[test]
    fn model_parameters_come_from_the_file_or_the_config() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("sim.toml");
        let file = |f| ModelSource {
            params_file: Some(f),
            config: None,
        };
        std::fs::write(&f, "[hdd]\nrpm = 7200\nfull_stroke_ms = 12.5\n").unwrap();
        let SimModel::Hdd(p) = model("hdd", file(&f)).unwrap() else {
            panic!("an hdd");
        };
        assert_eq!((p.rpm, p.full_stroke_ms), (7200.0, 12.5));
        std::fs::write(&f, "[hdd]\nrpms = 7200\n").unwrap();
        let e = format!("{:#}", model("hdd", file(&f)).unwrap_err());
        assert!(e.contains(":2:1: hdd: unknown key `rpms`"), "{e}");
        assert!(model("tape", ModelSource::default()).is_err());

        let c = dir.path().join("arrays.toml");
        let array = "[[member]]\nid = \"m\"\npath = \"memory:\"\nsize = \"64MiB\"\n\
                     [[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"m\"]\n";
        std::fs::write(&c, format!("{array}[bench.hdd]\nqueue_depth = 1\n")).unwrap();
        let config = nbraid_config::load(&c).unwrap();
        let from_config = ModelSource {
            params_file: None,
            config: Some(&config),
        };
        let SimModel::Hdd(p) = model("hdd", from_config).unwrap() else {
            panic!("an hdd");
        };
        assert_eq!(
            p,
            HddParams {
                queue_depth: 1,
                ..HddParams::default()
            }
        );
        // The config has no [bench.ssd]: the defaults.
        assert_eq!(
            model("ssd", from_config).unwrap(),
            SimModel::Ssd(SsdParams::default())
        );
        // A --sim-params file replaces the config's table.
        std::fs::write(&f, "[hdd]\nrpm = 7200\n").unwrap();
        let both = ModelSource {
            params_file: Some(&f),
            config: Some(&config),
        };
        let SimModel::Hdd(p) = model("hdd", both).unwrap() else {
            panic!("an hdd");
        };
        assert_eq!(
            p,
            HddParams {
                rpm: 7200.0,
                ..HddParams::default()
            }
        );
    }

    #[test]
    fn the_config_knows_the_engines_keys() {
        // nbraid_config checks the keys without the engine: the two lists must agree.
        for (name, specs) in nbraid_config::MODELS {
            let m = model(name, ModelSource::default()).unwrap();
            let keys: Vec<&str> = specs.iter().map(|s| s.key).collect();
            assert_eq!(keys, m.keys(), "{name}");
            // Every bound the config accepts, the engine takes.
            for s in specs {
                for v in [s.min, s.max] {
                    model(name, ModelSource::default())
                        .unwrap()
                        .set(s.key, v)
                        .unwrap();
                }
            }
        }
    }
}

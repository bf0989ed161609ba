//! `[bench.hdd]` and `[bench.ssd]`: the parameters of `nbraid bench --sim`'s disk models, kept
//! beside the arrays they model. A `--sim-params` file holds the same tables at its top level
//! (`[hdd]`, `[ssd]`) and is checked by the same code ([`parse_sim_params`]).
//!
//! The models themselves (and their defaults) are nbraid-sim's (`nbraid_sim::timed`);
//! this crate knows only the keys, their units and what range makes sense, so a bad value is
//! reported at its line before a run. The daemon ignores the tables.

use super::error::{ConfigError, ErrorKind, Problem};
use super::raw::{RawBench, RawModel, MODEL_NAMES};
use super::schema_error::{closest, from_toml};
use std::ops::Range;
use std::path::Path;
use toml::Value;

/// One parameter of a model: its key, the range it may take and its unit (for messages).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ParamSpec {
    pub key: &'static str,
    pub min: f64,
    pub max: f64,
    /// Only whole numbers (a count).
    pub integer: bool,
    pub unit: &'static str,
}

const fn spec(key: &'static str, min: f64, max: f64, unit: &'static str) -> ParamSpec {
    ParamSpec {
        key,
        min,
        max,
        integer: false,
        unit,
    }
}

// The ranges keep every command's time within what the virtual clock counts (a minute of
// positioning, 10 kB/s at the slowest) while leaving any real drive well inside.
const MS_MAX: f64 = 60_000.0;
const US_MAX: f64 = 60_000_000.0;
const RATE_MIN: f64 = 0.01;
const MB_S_MAX: f64 = 1_000_000.0;
const IOPS_MAX: f64 = 1_000_000_000.0;

/// `[bench.hdd]`'s keys, in the order the engine's `HddParams` has them.
pub const HDD_PARAMS: [ParamSpec; 8] = [
    spec("rpm", 1.0, 1_000_000.0, "revolutions per minute"),
    spec("track_to_track_ms", 0.0, MS_MAX, "ms"),
    spec("full_stroke_ms", 0.0, MS_MAX, "ms"),
    spec("write_settle_ms", 0.0, MS_MAX, "ms"),
    spec("overhead_ms", 0.0, MS_MAX, "ms"),
    spec(
        "media_mb_s",
        RATE_MIN,
        MB_S_MAX,
        "MB/s, 10^6 bytes per second",
    ),
    ParamSpec {
        integer: true,
        ..spec("queue_depth", 1.0, 65_536.0, "commands")
    },
    spec("readahead_kib", 0.0, 1_048_576.0, "KiB"),
];

/// `[bench.ssd]`'s keys, in the order the engine's `SsdParams` has them.
pub const SSD_PARAMS: [ParamSpec; 6] = [
    spec("read_latency_us", 0.0, US_MAX, "µs"),
    spec("write_latency_us", 0.0, US_MAX, "µs"),
    spec("read_iops", RATE_MIN, IOPS_MAX, "commands per second"),
    spec("write_iops", RATE_MIN, IOPS_MAX, "commands per second"),
    spec(
        "read_mb_s",
        RATE_MIN,
        MB_S_MAX,
        "MB/s, 10^6 bytes per second",
    ),
    spec(
        "write_mb_s",
        RATE_MIN,
        MB_S_MAX,
        "MB/s, 10^6 bytes per second",
    ),
];

/// The models' names and keys.
pub const MODELS: [(&str, &[ParamSpec]); 2] =
    [(MODEL_NAMES[0], &HDD_PARAMS), (MODEL_NAMES[1], &SSD_PARAMS)];

/// The parameters one model's table sets, checked, in file order; what it leaves out keeps
/// the engine's default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelParams {
    values: Vec<(&'static str, f64)>,
}

impl ModelParams {
    /// `(key, value)` of each parameter given.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, f64)> + '_ {
        self.values.iter().copied()
    }

    pub fn get(&self, key: &str) -> Option<f64> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

/// The simulated models' tables: `None` for a table that is not there.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BenchModels {
    pub hdd: Option<ModelParams>,
    pub ssd: Option<ModelParams>,
}

impl BenchModels {
    /// The table of model `kind` (`hdd`, `ssd`), if given.
    pub fn model(&self, kind: &str) -> Option<&ModelParams> {
        match kind {
            "hdd" => self.hdd.as_ref(),
            "ssd" => self.ssd.as_ref(),
            _ => None,
        }
    }
}

/// Checks a `--sim-params` file's text (`[hdd]` and `[ssd]` tables) as if read from `file`.
pub fn parse_sim_params(text: &str, file: &Path) -> Result<BenchModels, ConfigError> {
    let raw: RawBench = from_toml(text, file)?;
    resolve(Some(&raw), "", text).map_err(|p| p.located(text, file))
}

/// Reads and checks a `--sim-params` file.
pub fn load_sim_params(path: impl AsRef<Path>) -> Result<BenchModels, ConfigError> {
    let path = path.as_ref();
    parse_sim_params(&crate::read_text(path)?, path)
}

/// The tables of `raw`; `prefix` is what the tables' names start with in messages
/// (`bench.` in a config, nothing in a `--sim-params` file); `text` is the file's.
pub(super) fn resolve(
    raw: Option<&RawBench>,
    prefix: &str,
    text: &str,
) -> Result<BenchModels, Problem> {
    let mut out = BenchModels::default();
    let Some(raw) = raw else {
        return Ok(out);
    };
    let table = prefix.trim_end_matches('.');
    for (key, model) in &raw.0 {
        let name = key.get_ref().as_str();
        let (slot, specs) = match name {
            "hdd" => (&mut out.hdd, &HDD_PARAMS[..]),
            "ssd" => (&mut out.ssd, &SSD_PARAMS[..]),
            _ => (&mut None, &[][..]),
        };
        let Some(model) = model.as_ref().filter(|_| !specs.is_empty()) else {
            let names: Vec<&str> = MODELS.iter().map(|(n, _)| *n).collect();
            let near =
                closest(name, &names).map_or(String::new(), |w| format!("; did you mean `{w}`?"));
            let tables: Vec<String> = names.iter().map(|n| format!("[{prefix}{n}]")).collect();
            let what = if table.is_empty() {
                format!("unknown table `{name}`; a --sim-params file holds")
            } else {
                format!("{table}: unknown key `{name}`; {table} holds")
            };
            return Err(Problem::new(
                key.span(),
                ErrorKind::Schema,
                format!(
                    "{what} the simulated models' tables, {}{near}",
                    tables.join(" and ")
                ),
            ));
        };
        *slot = Some(model_params(
            model,
            &format!("{prefix}{name}"),
            specs,
            text,
        )?);
    }
    Ok(out)
}

fn model_params(
    raw: &RawModel,
    table: &str,
    specs: &[ParamSpec],
    text: &str,
) -> Result<ModelParams, Problem> {
    let mut values = Vec::new();
    for (key, value) in &raw.0 {
        let k = key.get_ref();
        let Some(s) = specs.iter().find(|s| s.key == k) else {
            let keys: Vec<&str> = specs.iter().map(|s| s.key).collect();
            let near =
                closest(k, &keys).map_or(String::new(), |w| format!("; did you mean `{w}`?"));
            return Err(Problem::new(
                key.span(),
                ErrorKind::Schema,
                format!(
                    "{table}: unknown key `{k}`; valid: {}{near}",
                    keys.join(", ")
                ),
            ));
        };
        let range = format!("give {} to {} ({})", s.min, s.max, s.unit);
        let bad = |why: String| {
            Problem::new(
                value_at(text, key.span()),
                ErrorKind::Model,
                format!("{table}: {k} {why}; {range}"),
            )
        };
        let x = match value {
            Value::Integer(i) => *i as f64,
            Value::Float(f) => *f,
            other => return Err(bad(format!("{} is not a number", shown(other)))),
        };
        if s.integer && x.fract() != 0.0 {
            return Err(bad(format!("{} is not a whole number", shown(value))));
        }
        if !(s.min..=s.max).contains(&x) {
            return Err(bad(format!("{} is out of range", shown(value))));
        }
        values.push((s.key, x));
    }
    Ok(ModelParams { values })
}

/// Where the value of the key at `key` starts (`rpm = 0`: the `0`); the key itself when no
/// `=` follows it (`rpm.x = 1`, a dotted key making a table).
fn value_at(text: &str, key: Range<usize>) -> Range<usize> {
    let after = text.get(key.end..).unwrap_or("");
    match after.trim_start_matches([' ', '\t']).strip_prefix('=') {
        Some(v) => {
            let start = text.len() - v.trim_start_matches([' ', '\t']).len();
            start..start
        }
        None => key,
    }
}

/// A value as the user wrote it, for messages.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{s}\""),
        Value::Integer(i) => i.to_string(),
        // Debug writes 1e300 as such, where Display spells out 301 digits.
        Value::Float(f) => format!("{f:?}"),
        Value::Boolean(b) => b.to_string(),
        Value::Datetime(d) => d.to_string(),
        Value::Array(_) => "(an array)".into(),
        Value::Table(_) => "(a table)".into(),
    }
}

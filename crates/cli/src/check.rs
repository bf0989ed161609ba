//! `nbraid check`: the config's summary as tables, JSON, or with stripe diagrams.

use crate::diagram;
use anyhow::Result;
use nbraid_config::{self as config, ConfigError};
use std::fmt;
use std::path::Path;

/// A config error for a caller that asked for JSON: `.0` is the JSON to print on stdout, the
/// error itself goes to stderr as for everyone else.
#[derive(Debug)]
pub struct JsonError(pub String, ConfigError);

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.1.fmt(f)
    }
}

impl std::error::Error for JsonError {}

pub fn run(file: &Path, json: bool, draw: bool, rows: Option<u64>) -> Result<String> {
    let config = match config::load(file) {
        Ok(c) => c,
        Err(e) if json => {
            let out = format!("{}\n", serde_json::to_string_pretty(&error_json(&e))?);
            return Err(JsonError(out, e).into());
        }
        Err(e) => return Err(e.into()),
    };
    if json {
        return Ok(format!(
            "{}\n",
            serde_json::to_string_pretty(&config.summary())?
        ));
    }
    let mut out = config.explain();
    if draw {
        for v in &config.volumes {
            out.push('\n');
            out.push_str(&diagram::draw(&config, v, rows));
        }
    }
    Ok(out)
}

/// `{"error": {...}}` for scripts that asked for JSON.
fn error_json(e: &ConfigError) -> serde_json::Value {
    match e {
        ConfigError::Invalid {
            file,
            line,
            column,
            kind,
            message,
        } => serde_json::json!({"error": {
            "file": file, "line": line, "column": column,
            "kind": format!("{kind:?}"), "message": message, "text": e.to_string(),
        }}),
        ConfigError::Read { path, .. } => serde_json::json!({"error": {
            "file": path.display().to_string(), "kind": "Read", "text": e.to_string(),
        }}),
    }
}

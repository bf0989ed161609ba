//! `nbraid check`: the config's summary as tables, JSON, or with stripe diagrams.

use crate::diagram;
use anyhow::Result;
use nbraid_config::{self as config, ConfigError};
use std::fmt;
use std::path::Path;
use std::time::Duration;

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

/// The config parses but the daemon would refuse to start on it (its superblocks say so,
/// or its TLS certificates do not load): `.0` is the report to print on stdout all the same,
/// and the command fails, as `nginx -t` fails on what nginx would refuse. `.1`: why.
#[derive(Debug)]
pub struct WouldNotStart(pub String, Vec<String>);

impl fmt::Display for WouldNotStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "nbraidd would refuse to start: {}", self.1.join("; "))
    }
}

/// Why a start on `config` would refuse its TLS certificates, and what it warns of in them:
/// judged by the start's own loader (`nbraid_nbd::tls::check_server_dir`), as `nbraidd
/// --check` judges them. Before, a key not the certificate's or a file not PEM passed here
/// and the start refused them.
fn tls_findings(tls: &config::TlsSettings) -> (Option<String>, Vec<String>) {
    let Some(dir) = tls.certificates_in_use() else {
        return (None, Vec::new());
    };
    match nbraid_nbd::tls::check_server_dir(dir, tls.verify_clients, nbraid_nbd::now_unix_s()) {
        Ok(warning) => (None, warning.into_iter().collect()),
        Err(e) => {
            let why = format!("loading the TLS certificates in {}: {e}", dir.display());
            (Some(why), Vec::new())
        }
    }
}

impl std::error::Error for WouldNotStart {}

/// The volumes whose superblocks assembly refuses (`records::Records::state` says
/// "refused: ..."): a start on this config fails.
fn refused(records: &[crate::records::Records]) -> Vec<String> {
    records
        .iter()
        .filter(|r| r.state.starts_with("refused"))
        .map(|r| r.volume.clone())
        .collect()
}

pub fn run(file: &Path, json: bool, draw: bool, rows: Option<u64>) -> Result<String> {
    let config = match nbraid_assembly::pins::load(file) {
        Ok(c) => c,
        Err(e) if json => {
            let out = format!("{}\n", serde_json::to_string_pretty(&error_json(&e))?);
            return Err(JsonError(out, e).into());
        }
        Err(e) => return Err(e.into()),
    };
    // The remote members' superblocks are read through NBD as the start reads them, and
    // their servers described from those same connections.
    let remotes = nbraid_assembly::preflight::read_remotes(&config);
    let remote = remote_members(&config, &remotes);
    let records = crate::records::look_with(&config, &remotes);
    let tls = tls_findings(&config.tls);
    let out = report(&config, &records, &remote, &tls, json, draw.then_some(rows))?;
    let mut refusals = Vec::new();
    let volumes = refused(&records);
    if !volumes.is_empty() {
        refusals.push(format!(
            "the superblocks of {} do not assemble (see above)",
            volumes.join(", ")
        ));
    }
    refusals.extend(tls.0);
    match refusals.is_empty() {
        true => Ok(out),
        false => Err(WouldNotStart(out, refusals).into()),
    }
}

/// What `check` prints: the summary, the superblocks, remote members, diagrams.
fn report(
    config: &config::Config,
    records: &[crate::records::Records],
    remote: &[Remote],
    (tls_refused, tls_warnings): &(Option<String>, Vec<String>),
    json: bool,
    draw: Option<Option<u64>>,
) -> Result<String> {
    if json {
        let mut v = serde_json::to_value(config.summary())?;
        v["superblocks"] = serde_json::to_value(records)?;
        if config.tls.any_on() {
            v["tls_certificates"] =
                serde_json::json!({ "refused": tls_refused, "warnings": tls_warnings });
        }
        if !remote.is_empty() {
            v["remote_members"] =
                serde_json::Value::Array(remote.iter().map(Remote::json).collect());
        }
        return Ok(format!("{}\n", serde_json::to_string_pretty(&v)?));
    }
    let mut out = config.explain_refusing(&refused(records));
    out.push_str("\nsuperblocks\n");
    for r in records {
        out.push_str(&format!("  {}: {}\n", r.volume, r.state));
        for n in &r.notes {
            out.push_str(&format!("    note: {n}\n"));
        }
    }
    if let Some(why) = tls_refused {
        out.push_str(&format!("\ntls certificates: {why}: a start would fail\n"));
    }
    for w in tls_warnings {
        out.push_str(&format!("\nwarning: {w}\n"));
    }
    let plans: Vec<_> = records.iter().filter_map(|r| r.reshape.as_ref()).collect();
    if !plans.is_empty() {
        out.push_str("\nreshape plan (the config declares another shape than the records; `nbraid apply` against the running daemon)\n");
        for p in plans {
            out.push_str(&crate::apply::plan_text(p));
        }
    }
    if !remote.is_empty() {
        let rows: Vec<Vec<String>> = remote.iter().map(Remote::row).collect();
        out.push('\n');
        out.push_str(&config::table(
            &[
                "REMOTE",
                "URI",
                "REACHABLE",
                "SIZE",
                "BLOCK MIN/PREF/MAX",
                "MULTI-CONN",
                "TLS",
            ],
            &rows,
        ));
    }
    if let Some(rows) = draw {
        for (v, r) in config.volumes.iter().zip(records) {
            out.push('\n');
            match crate::roles::of(config, v, Some(r)) {
                Ok(roles) => {
                    out.push_str(&diagram::draw(config, v, &roles.ids, rows));
                    for note in &roles.notes {
                        out.push_str(&format!("  {note}\n"));
                    }
                }
                Err(e) => out.push_str(&format!("{}: no diagram: {e}\n", v.name)),
            }
        }
    }
    Ok(out)
}

/// How long `check` waits for the server of a remote member no volume uses (the others are
/// connected to with their own `timeout`, as the start connects them).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// A remote member as its server describes it (or why it could not be reached).
struct Remote {
    id: String,
    uri: String,
    probe: Result<nbraid_remote::Probe, String>,
}

impl Remote {
    fn row(&self) -> Vec<String> {
        let mut row = vec![self.id.clone(), self.uri.clone()];
        match &self.probe {
            Ok(p) => row.extend([
                "yes".into(),
                config::format_size(p.size),
                format!("{}/{}/{}", p.min_block, p.preferred_block, p.max_block),
                if p.multi_conn { "yes" } else { "no" }.into(),
                if p.tls { "yes" } else { "no" }.into(),
            ]),
            Err(why) => row.extend([
                format!("NO: {why}"),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]),
        }
        row
    }

    fn json(&self) -> serde_json::Value {
        match &self.probe {
            Ok(p) => serde_json::json!({
                "id": self.id, "uri": self.uri, "reachable": true, "size_bytes": p.size,
                "min_block": p.min_block, "preferred_block": p.preferred_block,
                "max_block": p.max_block, "read_only": p.read_only,
                "multi_conn": p.multi_conn, "tls": p.tls,
            }),
            Err(why) => serde_json::json!({
                "id": self.id, "uri": self.uri, "reachable": false, "error": why,
            }),
        }
    }
}

/// Every remote member's server, described: a member a volume uses from the connection
/// its superblock was read on (`reads`, by config member index), so no server is asked
/// twice; one no volume uses (not read) by a probe of its own, all at once, each bounded.
fn remote_members(
    config: &config::Config,
    reads: &[Option<nbraid_assembly::preflight::RemoteRead>],
) -> Vec<Remote> {
    let handles: Vec<_> = config
        .members
        .iter()
        .enumerate()
        .filter(|(_, m)| m.state == config::MemberStorage::Remote)
        .map(|(i, m)| {
            let (id, uri) = (m.id.clone(), m.path_text.clone());
            let read = reads.get(i).and_then(Option::as_ref);
            let described = read.map(|r| r.described.clone());
            std::thread::spawn(move || {
                let probe = described.unwrap_or_else(|| {
                    nbraid_remote::probe(&uri, PROBE_TIMEOUT).map_err(|e| e.to_string())
                });
                Remote { id, uri, probe }
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("probe thread"))
        .collect()
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

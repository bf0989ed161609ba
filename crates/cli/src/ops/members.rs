//! Who serves a volume: `fail`, `add`, `remove`, `replace`.

use super::client::{Client, Target};
use anyhow::{Context, Result};
use nbraid_control::Request;
use serde_json::json;

/// `nbraid fail VOLUME MEMBER`.
pub(super) fn fail(target: &Target, volume: String, member: String, force: bool) -> Result<String> {
    let v = Client::connect(target)?.call(&Request::Fail {
        volume: volume.clone(),
        member: member.clone(),
        force,
    })?;
    Ok(format!(
        "member {} of {volume} marked failed; the volume is {}\n",
        v["member"].as_str().unwrap_or(&member),
        if v["available"] == json!(false) {
            "FAILED (beyond its tolerance)"
        } else {
            "degraded"
        }
    ))
}

/// `nbraid add VOLUME PATH`: a hot spare, or at once a failed role's member.
pub(super) fn add(target: &Target, volume: String, path: &str, force: bool) -> Result<String> {
    let path = offered(path)?;
    let v = Client::connect(target)?.call(&Request::Add {
        volume: volume.clone(),
        path: path.clone(),
        force,
    })?;
    if let Some(how) = v["readded"].as_str() {
        // The URI the daemon found (`nbraid add v m1` names it by its id).
        let uri = v["uri"].as_str().unwrap_or(&path);
        return Ok(readded(uri, &volume, how, &v));
    }
    Ok(match v["rebuilding"].as_array() {
        Some(r) if !r.is_empty() => {
            let roles: Vec<String> = r
                .iter()
                .map(|x| match x["id"].as_str() {
                    Some(id) => format!("{} ({id})", x["role"]),
                    None => x["role"].to_string(),
                })
                .collect();
            let noun = if roles.len() == 1 { "role" } else { "roles" };
            format!(
                "{path} added to {volume}: rebuilding {noun} {}\n",
                roles.join(", ")
            )
        }
        _ => format!(
            "{path} added to {volume} as a hot spare{}\n",
            v["id"]
                .as_str()
                .map(|id| format!(" ({id})"))
                .unwrap_or_default()
        ),
    })
}

/// `nbraid remove VOLUME MEMBER`: a failed member, a spare, or (`offline`, no daemon) a
/// recorded path.
pub(super) fn remove(
    target: &Target,
    volume: String,
    member: String,
    offline: bool,
    json: bool,
) -> Result<String> {
    if offline {
        let config = target
            .config
            .as_deref()
            .context("--offline needs --config")?;
        return crate::offline::forget_offline(config, &volume, &absolute(&member)?);
    }
    let v = Client::connect(target)?.call(&Request::Remove {
        volume: volume.clone(),
        member: member.clone(),
    })?;
    Ok(if json {
        format!("{v:#}\n")
    } else if v["removed"] == "spare" {
        format!("spare {member} removed from {volume}\n")
    } else if v["removed"] == "departed" {
        format!(
            "failed member {} (once role {}) removed from {volume}; the volume is {}\n",
            v["member"].as_str().unwrap_or(&member),
            v["index"],
            if v["degraded"] == json!(true) {
                "degraded"
            } else {
                "not degraded"
            }
        )
    } else if v["removed"] == "recorded path" {
        format!("{member} is no longer recorded in {volume}: no start opens it\n")
    } else {
        format!(
            "member {} (role {}) removed from {volume}; the volume is {}\n",
            v["member"].as_str().unwrap_or(&member),
            v["index"],
            if v["degraded"] == json!(true) {
                "degraded until a spare takes the role (nbraid add)"
            } else {
                "not degraded"
            }
        )
    })
}

/// `nbraid replace VOLUME MEMBER PATH`.
pub(super) fn replace(
    target: &Target,
    volume: String,
    member: String,
    path: &str,
    force: bool,
) -> Result<String> {
    let path = offered(path)?;
    Client::connect(target)?.call(&Request::Replace {
        volume: volume.clone(),
        member: member.clone(),
        path: path.clone(),
        force,
    })?;
    Ok(format!(
        "replacing {member} of {volume} by {path}; follow with `nbraid rebuild {volume}`\n"
    ))
}

/// What `add` of a failed remote member's URI says: it is back, resynced or rebuilt.
fn readded(uri: &str, volume: &str, how: &str, v: &serde_json::Value) -> String {
    let id = v["id"].as_str().unwrap_or(uri);
    match v["resync_bytes"].as_u64() {
        Some(bytes) if how == "resync" => format!(
            "{id} ({uri}) re-added to {volume}: resyncing the {bytes} bytes the write-intent bitmap marks\n"
        ),
        _ if how == "spare" => {
            format!("{id} ({uri}) added back to {volume}: standing by as a hot spare\n")
        }
        _ => format!("{id} ({uri}) re-added to {volume}: rebuilding it whole\n"),
    }
}

/// What `add`/`replace` sends for `name`: a bare name (no `/`) that is no file here is sent
/// as it is, for the daemon to take as a member or spare id (`nbraid add v m1`) or refuse —
/// never made `./m1`, a file to create; anything else is a path ([`absolute`]).
fn offered(name: &str) -> Result<String> {
    if !name.contains('/') && !std::path::Path::new(name).exists() {
        return Ok(name.to_string());
    }
    absolute(name)
}

/// A member path as the daemon must open it: relative paths are the caller's (the daemon's
/// working directory is its own), and the records keep the path for every later start. An
/// NBD URI is passed as it is.
fn absolute(path: &str) -> Result<String> {
    if path.contains("://") {
        return Ok(path.to_string());
    }
    let abs = std::path::absolute(path)
        .with_context(|| format!("{path}: cannot make the path absolute"))?;
    abs.into_os_string()
        .into_string()
        .map_err(|p| anyhow::anyhow!("{}: the path is not UTF-8", p.to_string_lossy()))
}

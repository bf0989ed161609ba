//! `add` and `replace` of an NBD URI. The operator brings back a failed remote member by
//! naming its URI (`nbraid add VOLUME URI`): re-added as the probe for returning members
//! would, resynced over what the bitmap marks (or rebuilt whole) — the probe itself leaves
//! alone the members the operator failed or that answered with I/O errors. One the operator
//! removed (`nbraid remove`) is opened again as the config declares it and rebuilt whole into
//! its role. A remote member not serving the volume is declared in the config, where its
//! size, timeout and TLS are.

use super::controls::{refused, Controls};
use super::readd::readd_role;
use super::report::rebuild_json;
use super::volume::ControlVolume;
use nbraid_control::Refusal;
use nbraid_core::metadata::disk_rule::{may_write, Writer};
use nbraid_core::metadata::{MemberMeta, Readd};
use nbraid_core::Member;
use serde_json::{json, Value};
use std::sync::Arc;

/// Why an NBD URI that names no member of the volume is refused, and what to do instead.
pub(super) fn not_a_file(volume: &str, uri: &str) -> Refusal {
    Refusal::new(
        "bad-request",
        format!(
            "volume \"{volume}\": `{uri}` is an NBD URI, not a file or device: `nbraid add VOLUME URI` re-adds a failed remote member of the volume by the URI it has; a new remote member is declared in the config (a [[member]] with path = \"{uri}\", its size, a timeout, and tls for nbds://) and named in the volume's members or spares, and is opened at the next start"
        ),
    )
}

/// `add` of `uri`: re-adds the failed member of `v` at that URI, or opens again the one
/// removed from its role or whose role a spare took ([`rejoin`]).
pub(super) async fn readd(
    controls: &Controls,
    v: &ControlVolume,
    uri: &str,
) -> Result<Value, Refusal> {
    let array = v.array();
    let vol = array.volume();
    let role =
        (0..vol.member_count()).find(|&r| array.has_member(r) && vol.member(r).name() == uri);
    let Some(r) = role else {
        if removed_role(v, uri).is_some() {
            return rejoin(controls, v, uri).await;
        }
        // Failed, and a spare took its role: connected afresh, it stands by as a spare
        // (as a departed file added back does); still listed if that is refused.
        let Some(gone) = v.departed.take(uri) else {
            return Err(not_a_file(&v.name, uri));
        };
        let back = rejoin(controls, v, uri).await;
        if back.is_err() {
            v.departed.record(gone);
        }
        return back;
    };
    let id = v.member_ids()[r].clone();
    if !vol.member_is_failed(r) {
        return Err(Refusal::new(
            "refused",
            format!(
                "volume \"{}\": `{uri}` is member {id} (role {r}) and is not failed",
                v.name
            ),
        ));
    }
    let Some(k) = controls.volumes.iter().position(|o| std::ptr::eq(o, v)) else {
        return Err(Refusal::new(
            "refused",
            format!("volume \"{}\" is not served", v.name),
        ));
    };
    let readded = |how: &str| json!({ "volume": v.name, "id": id, "uri": uri, "role": r, "readded": how, "rebuild": rebuild_json(v) });
    match readd_role(controls, k, r).await {
        Ok(Readd::Resync { bytes }) => {
            let mut out = readded("resync");
            out["resync_bytes"] = json!(bytes);
            Ok(out)
        }
        Ok(Readd::Rebuild) => Ok(readded("rebuild")),
        Ok(Readd::Unreachable(why)) => Err(Refusal::new(
            "refused",
            format!(
                "volume \"{}\": member {id} (`{uri}`) does not answer: {why}; it stays failed",
                v.name
            ),
        )),
        Err(e) => Err(Refusal::new(
            "refused",
            format!(
                "volume \"{}\": member {id} (`{uri}`) cannot be re-added: {e}",
                v.name
            ),
        )),
    }
}

/// The role of `v` whose member at `uri` was removed: the role has no member, and its id
/// — the one it had, or the config's member at its place (after a restart the records no
/// longer name it) — names that URI.
fn removed_role(v: &ControlVolume, uri: &str) -> Option<usize> {
    let array = v.array();
    let ids = v.member_ids();
    let config_ids = v.config_ids.as_ref();
    let config_id = |r: usize| config_ids.filter(|c| r < c.members).map(|c| &c.ids[r]);
    let names_it = |id: Option<&String>| id.and_then(|id| v.known_path(id)).as_deref() == Some(uri);
    let was_there = |r: usize| {
        v.missing_from(r).as_deref() == Some(uri) || names_it(ids.get(r)) || names_it(config_id(r))
    };
    (0..array.volume().member_count()).find(|&r| !array.has_member(r) && was_there(r))
}

/// `add` of the URI of the remote member of `v` that `nbraid remove` let go (or that
/// departed, a spare in its role): connected again
/// with the settings the config declares for it, it joins as a spare (its old superblock
/// is this array's: the disk rule lets it be written) and a free role — its own, unless
/// another waits first — takes it and is rebuilt whole (the records no longer name it, so
/// no bitmap says what it missed).
async fn rejoin(controls: &Controls, v: &ControlVolume, uri: &str) -> Result<Value, Refusal> {
    let config = controls.config.as_deref();
    let declared = config.and_then(|c| Some((c, c.members.iter().find(|m| m.path_text == uri)?)));
    let Some((config, m)) = declared else {
        return Err(not_a_file(&v.name, uri));
    };
    // By the config's id (after a restart the role's own is unknown).
    let id = m.id.clone();
    let remote = nbraid_assembly::remote::open_remote(config, m)
        .await
        .map_err(|e| {
            Refusal::new(
                "refused",
                format!(
                    "volume \"{}\": member {id} (`{uri}`) cannot be opened again: {e}; it stays removed",
                    v.name
                ),
            )
        })?;
    let member: Arc<dyn Member> = Arc::new(remote);
    let meta = MemberMeta::load(member.clone()).await;
    let role = stand_by(v, &id, &member, meta).await?.first().copied();
    tracing::warn!(
        "volume {}: removed remote member {id} (`{uri}`) added back: {}",
        v.name,
        match role {
            Some(i) => format!("rebuilding it whole into role {i}"),
            None => "standing by as a spare".to_string(),
        }
    );
    Ok(json!({
        "volume": v.name,
        "id": id,
        "uri": uri,
        "role": role,
        "readded": if role.is_some() { "rebuild" } else { "spare" },
        "rebuild": rebuild_json(v),
    }))
}

/// A remote spare a reload (SIGHUP) found in the config: `id` at `uri`. One this volume knows
/// (a member in a role, removed, or departed) is taken as `nbraid add URI` takes it
/// ([`readd`]); one another role or a spare of any volume holds is refused — a member serves
/// one place at a time. Any other is connected as the config declares it (size, timeout,
/// TLS), passes the write rule as a spare a start takes (blank, or carrying only this
/// array's record), and stands by — a failed role takes it at once — as md adds a spare
/// at run time. The config lists it: a restart opens it as a config spare.
pub(super) async fn add_config_spare(
    controls: &Controls,
    v: &ControlVolume,
    uri: &str,
    id: &str,
) -> Result<Value, Refusal> {
    let array = v.array();
    let vol = array.volume();
    let in_a_role = (0..vol.member_count()).any(|r| vol.member(r).name() == uri);
    let departed = (v.departed.to_json().iter()).any(|d| d["path"] == uri);
    if in_a_role || departed || removed_role(v, uri).is_some() {
        return readd(controls, v, uri).await;
    }
    if let Some(what) = held_elsewhere(controls, uri) {
        return Err(Refusal::new(
            "in-use",
            format!(
                "volume \"{}\": spare {id} (`{uri}`) is {what}; a member or spare serves one place at a time",
                v.name
            ),
        ));
    }
    let (config, m) = declared_spare(controls, id, uri).await.map_err(|why| {
        Refusal::new(
            "refused",
            format!("volume \"{}\": spare {id} (`{uri}`): {why}", v.name),
        )
    })?;
    let cannot = |why: String| {
        Refusal::new(
            "refused",
            format!(
                "volume \"{}\": spare {id} (`{uri}`) {why}; not standing by",
                v.name
            ),
        )
    };
    let remote = nbraid_assembly::remote::open_remote(&config, &m)
        .await
        .map_err(|e| match e {
            nbraid_assembly::AssembleError::Remote { source, .. } => cannot(format!(
                "cannot be used: {}",
                nbraid_assembly::remote::unavailable_text(&source)
            )),
            other => cannot(format!("cannot be opened: {other}")),
        })?;
    let member: Arc<dyn Member> = Arc::new(remote);
    let meta = MemberMeta::load(member.clone()).await;
    let writer = Writer {
        array: Some(array.id()),
        siblings: Vec::new(),
    };
    may_write(&meta.contents(), &writer, false).map_err(|why| cannot(why.to_string()))?;
    let roles = stand_by(v, id, &member, meta).await?;
    tracing::warn!(
        "volume {}: remote spare {id} (`{uri}`) added by the reload: {}",
        v.name,
        match roles.first() {
            Some(r) => format!("rebuilding role {r} onto it"),
            None => "standing by".to_string(),
        }
    );
    Ok(json!({
        "volume": v.name,
        "id": id,
        "uri": uri,
        "rebuilding_roles": roles,
        "rebuild": rebuild_json(v),
    }))
}

/// `member` (`meta` its records) joins `v` as spare `id`; a failed role waiting takes it and
/// its rebuild starts. The roles it took (none: it stands by).
async fn stand_by(
    v: &ControlVolume,
    id: &str,
    member: &Arc<dyn Member>,
    meta: Arc<MemberMeta>,
) -> Result<Vec<usize>, Refusal> {
    v.joining(&[(id, member)], async { v.array().add_spare(meta) })
        .await
        .map_err(refused)?;
    let placed = v.take_spares().await.map_err(refused)?;
    if !placed.is_empty() {
        v.ensure_rebuild(v.rebuild_rate());
    }
    let array = v.array();
    let vol = array.volume();
    Ok((0..vol.member_count())
        .filter(|&r| Arc::ptr_eq(&vol.member(r), member))
        .collect())
}

/// What of any volume holds `uri` (a member in a role, one being rebuilt in as a
/// replacement, a spare standing by), said for a refusal; `None`: nothing does.
fn held_elsewhere(controls: &Controls, uri: &str) -> Option<String> {
    controls.volumes.iter().find_map(|o| {
        let array = o.array();
        let vol = array.volume();
        let ids = o.member_ids();
        let role = (0..vol.member_count()).find(|&r| {
            vol.member(r).name() == uri || vol.replacement(r).is_some_and(|m| m.name() == uri)
        });
        if let Some(r) = role {
            let id = ids.get(r).map_or("?", String::as_str);
            return Some(format!("member {id} (role {r}) of volume \"{}\"", o.name));
        }
        (array.spares().iter())
            .any(|s| s.member().name() == uri)
            .then(|| format!("a spare of volume \"{}\" already", o.name))
    })
}

/// The config's `[[member]]` for spare `id` at `uri`, and the config declaring it: the
/// start's, else the config file read again — the reload that names the spare read it, and
/// a spare new to the config is declared only there.
async fn declared_spare(
    controls: &Controls,
    id: &str,
    uri: &str,
) -> Result<(Arc<nbraid_config::Config>, nbraid_config::Member), String> {
    let find = |c: &nbraid_config::Config| {
        (c.members.iter())
            .find(|m| m.id == id && m.path_text == uri)
            .cloned()
    };
    let Some(start) = controls.config.clone() else {
        return Err("no config to open it by".into());
    };
    if let Some(m) = find(&start) {
        return Ok((start, m));
    }
    let file = start.file.clone();
    let loaded = tokio::task::spawn_blocking(move || nbraid_assembly::pins::load(&file)).await;
    let config = match loaded {
        Ok(Ok(c)) => Arc::new(c),
        Ok(Err(e)) => return Err(format!("reading the config again: {e}")),
        Err(e) => return Err(format!("reading the config again: {e}")),
    };
    match find(&config) {
        Some(m) => Ok((config, m)),
        None => Err(format!(
            "the config ({}) no longer declares it there (changed again since the reload?)",
            start.file.display()
        )),
    }
}

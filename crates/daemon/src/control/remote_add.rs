//! `add` and `replace` of an NBD URI. The operator brings back a failed remote member by
//! naming its URI (`nbraid add VOLUME URI`): re-added as the probe for returning members
//! would, resynced over what the bitmap marks (or rebuilt whole) — the probe itself leaves
//! alone the members the operator failed or that answered with I/O errors. A remote member
//! not serving the volume is declared in the config, where its size, timeout and TLS are.

use super::controls::Controls;
use super::readd::readd_role;
use super::report::rebuild_json;
use super::volume::ControlVolume;
use nbraid_control::Refusal;
use nbraid_core::metadata::Readd;
use serde_json::{json, Value};

/// Why an NBD URI that names no member of the volume is refused, and what to do instead.
pub(super) fn not_a_file(volume: &str, uri: &str) -> Refusal {
    Refusal::new(
        "bad-request",
        format!(
            "volume \"{volume}\": `{uri}` is an NBD URI, not a file or device: `nbraid add VOLUME URI` re-adds a failed remote member of the volume by the URI it has; a new remote member is declared in the config (a [[member]] with path = \"{uri}\", its size, a timeout, and tls for nbds://) and named in the volume's members or spares, and is opened at the next start"
        ),
    )
}

/// `add` of `uri`: re-adds the failed member of `v` at that URI.
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
        return Err(not_a_file(&v.name, uri));
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
    let readded = |how: &str| json!({ "volume": v.name, "id": id, "role": r, "readded": how, "rebuild": rebuild_json(v) });
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

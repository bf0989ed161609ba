//! Requests that change who serves a volume: `fail`, `add` (a hot spare, or at once a failed
//! role's member), `replace`, `remove` — and how a path offered to `add`/`replace` is found
//! among what the daemon already holds open.

use super::controls::{refused, Controls};
use super::departed::Departed;
use super::report::rebuild_json;
use super::volume::ControlVolume;
use nbraid_control::Refusal;
use nbraid_core::fail_cause::{Because, FailCause};
use nbraid_core::metadata::disk_rule::{may_write, Allowed, Consent, Writer};
use nbraid_core::metadata::MemberMeta;
use nbraid_core::{Member, UringFile};
use serde_json::{json, Value};
use std::sync::Arc;

/// `fail`: marks the member failed, refused when it would lose data unless `force`; answered
/// once the superblocks record it.
pub(super) async fn fail(v: &ControlVolume, member: &str, force: bool) -> Result<Value, Refusal> {
    let index = v.member_index(member)?;
    let array = v.array();
    let vol = array.volume();
    let tree = vol.geometry().root();
    let unreadable = |m: usize| m < vol.member_count() && !vol.member_is_current(m);
    let ids = v.member_ids();
    let id = |m: usize| ids.get(m).cloned().unwrap_or_else(|| format!("role {m}"));
    if let Some(why) = super::fail::refuse_fail(tree, &unreadable, &id, index, force) {
        return Err(Refusal::new(
            "would-lose-data",
            format!("volume \"{}\": {why}", v.name),
        ));
    }
    vol.fail_member(
        index,
        &Because(FailCause::Operator, "failed by the operator (nbraid fail)"),
    );
    // Into the superblocks before the answer, not at the next write: a daemon killed right
    // after answering must still find it failed at the restart. A forced fail that left the
    // volume unavailable may leave no member to take the record: done, said as not recorded.
    let recorded = v.array().record_failures().await;
    if let Err(e) = &recorded {
        tracing::error!("recording a failed member of {}: {e}", v.name);
    }
    if let (Err(e), true) = (&recorded, vol.is_available()) {
        return Err(Refusal::new(
            "not-recorded",
            format!(
                "volume \"{}\": {} is failed in the running daemon, but the superblocks could not record it ({e}): a restart may bring it back; fail it again",
                v.name,
                v.member_ids()[index]
            ),
        ));
    }
    if recorded.is_ok() {
        // A reshape stopped for want of this member (missing at the start, its disk gone)
        // goes on without it now that its records say it failed.
        super::reshape::start_reshape_pass(v);
    }
    Ok(json!({
        "volume": v.name,
        "member": v.member_ids()[index],
        "index": index,
        "degraded": vol.is_degraded(),
        "available": vol.is_available(),
        "recorded": recorded.is_ok(),
    }))
}

/// `add`: the member at `path` joins the spares (recorded: a restart still knows it), and a
/// failed role takes it at once.
/// `config_id`: the id the config gives it (a spare a reload adds), else one made from its
/// path ([`Controls::added_id`]).
pub(super) async fn add(
    controls: &Controls,
    v: &ControlVolume,
    (path, config_id): (&str, Option<&str>),
    force: bool,
) -> Result<Value, Refusal> {
    let path = &offered_path(controls, v, path, config_id.is_some())?;
    if super::readd::is_remote(path) {
        return match config_id {
            Some(id) => super::remote_add::add_config_spare(controls, v, path, id).await,
            None => super::remote_add::readd(controls, v, path).await,
        };
    }
    let (meta, consent) = newcomer(controls, v, path, force).await?;
    let meta_member = &meta.member().clone();
    // A refused one is dropped here (its file closed and unlocked, its id forgotten), and a
    // departed member offered back stays shown.
    let id = config_id.map_or_else(|| controls.added_id(path), str::to_string);
    v.joining(
        &[(&id, meta_member)],
        v.array().add_recorded_spare(meta, &consent),
    )
    .await
    .map_err(refused)?;
    // Added back: no longer a departed member.
    v.departed.forget(meta_member);
    let placed = match v.take_spares().await {
        Ok(placed) => placed,
        Err(e) => {
            forget_if_dropped(v, meta_member).await;
            return Err(refused(e));
        }
    };
    // The roles it holds now, whoever put it there: the daemon's watcher may have placed
    // it first (placements take turns, so this look comes after the watcher's).
    let array = v.array();
    let vol = array.volume();
    let roles: Vec<usize> = (0..vol.member_count())
        .filter(|&r| Arc::ptr_eq(&vol.member(r), meta_member))
        .collect();
    if !placed.is_empty() {
        // At the volume's rate, as if the daemon had started it.
        v.ensure_rebuild(v.rebuild_rate());
    }
    let ids = v.member_ids();
    let rebuilding: Vec<Value> = roles
        .iter()
        .map(|&r| json!({ "role": r, "id": ids.get(r) }))
        .collect();
    Ok(json!({
        "volume": v.name,
        "id": v.id_of(meta_member),
        "rebuilding_roles": roles,
        "rebuilding": rebuilding,
        "rebuild": rebuild_json(v),
    }))
}

/// After a failed placement: `member`, when the array dropped it (neither a spare nor in a
/// role), is no longer recorded either, so no later start opens it; a failed `add` leaves
/// nothing behind.
async fn forget_if_dropped(v: &ControlVolume, member: &Arc<dyn Member>) {
    let array = v.array();
    let vol = array.volume();
    let spare = array
        .spares()
        .iter()
        .any(|s| Arc::ptr_eq(s.member(), member));
    let in_role = (0..vol.member_count()).any(|r| {
        Arc::ptr_eq(&vol.member(r), member)
            || vol.replacement(r).is_some_and(|m| Arc::ptr_eq(&m, member))
    });
    if spare || in_role {
        return;
    }
    if let Err(e) = array.forget_added_path(member.name()).await {
        tracing::error!("volume {}: `{}` stays recorded: {e}", v.name, member.name());
    }
}

/// `replace`: `member` keeps serving while the member at `path` is rebuilt in its place;
/// `path` is recorded first (a restart before the swap finds it standing by as a spare, which
/// a replace asked again takes).
pub(super) async fn replace(
    controls: &Controls,
    v: &ControlVolume,
    member: &str,
    path: &str,
    force: bool,
) -> Result<Value, Refusal> {
    let index = v.member_index(member)?;
    let path = &offered_path(controls, v, path, false)?;
    if super::readd::is_remote(path) {
        return Err(super::remote_add::not_a_file(&v.name, path));
    }
    // This volume's own spare (a replace a restart cut short leaves its file standing by)
    // is taken off the spares for it, and put back if the replace is refused.
    let spare = own_spare(v, path).filter(|s| v.array().remove_spare(s));
    let (meta, consent) = match spare.clone() {
        Some(s) => (s, Consent::default()),
        None => newcomer(controls, v, path, force).await?,
    };
    let newcomer_member = meta.member().clone();
    // A failed role takes the newcomer at once: the member it pushes out is kept as
    // departed (for `status` and `remove`), as when a spare takes the role.
    let array = v.array();
    let left = (array.volume().member_is_failed(index) && array.has_member(index))
        .then(|| (v.member_ids()[index].clone(), array.volume().member(index)));
    // Known as the array takes it (as `add`).
    let id = controls.added_id(path);
    let joined = array.replace_with(index, meta, &consent);
    if let Err(e) = v.joining(&[(&id, &newcomer_member)], joined).await {
        if let Some(s) = spare {
            if let Err(back) = array.add_spare(s) {
                tracing::error!("volume {}: `{path}` left the spares: {back}", v.name);
            }
        }
        return Err(refused(e));
    }
    if let Some((id, member)) = left.filter(|(_, m)| !Arc::ptr_eq(m, &array.volume().member(index)))
    {
        let gone = super::paths::absolute_path(member.name());
        v.departed.record(Departed {
            id,
            role: index,
            path: gone,
            member,
        });
    }
    v.departed.forget(&newcomer_member);
    v.ensure_rebuild(v.rebuild_rate());
    Ok(json!({ "volume": v.name, "index": index, "rebuild": rebuild_json(v) }))
}

/// `remove`: a spare (by id or path) leaves the spares; a failed member (by id, index or
/// path) leaves its role (the array refuses an active one); a failed member whose role a
/// spare took (by id or path) leaves `status`.
pub(super) async fn remove(v: &ControlVolume, member: &str) -> Result<Value, Refusal> {
    let named_file = std::fs::metadata(member).ok();
    let is_named_file =
        |m: &Arc<dyn Member>| named_file.as_ref().is_some_and(|f| same_file(m.name(), f));
    let spare = v.array().spares().into_iter().find(|m| {
        v.id_of(m.member()) == member || m.member().name() == member || is_named_file(m.member())
    });
    // A spare the watcher placed in a role meanwhile is a member now: found as one below.
    if let Some(s) = spare.filter(|s| v.array().remove_spare(s)) {
        v.array()
            .forget_added_path(s.member().name())
            .await
            .map_err(refused)?;
        return Ok(json!({ "volume": v.name, "member": member, "removed": "spare" }));
    }
    if let Some(gone) = v.departed.take(member) {
        return remove_departed(v, gone).await;
    }
    // Members added at run time go by an id, not their path: a path is matched by the file
    // it names, or a member still serving would only be un-recorded (and missing at the next
    // start).
    let index = match v.member_index(member) {
        Ok(index) => index,
        Err(not_found) => match role_of_file(v, &is_named_file)? {
            Some(index) => index,
            None => return forget_recorded_path(v, member, not_found).await,
        },
    };
    let id = v.member_ids()[index].clone();
    v.array().remove_member(index).await.map_err(refused)?;
    Ok(json!({
        "volume": v.name,
        "member": id,
        "index": index,
        "removed": "member",
        "degraded": v.array().volume().is_degraded(),
    }))
}

/// The spare of volume `v` standing by on the file or device at `path`, if one does.
fn own_spare(v: &ControlVolume, path: &str) -> Option<Arc<MemberMeta>> {
    let new = std::fs::metadata(path).ok()?;
    let spares = v.array().spares();
    spares
        .into_iter()
        .find(|s| same_file(s.member().name(), &new))
}

/// The role whose member is the file `is_file` names; refused when that file is a
/// replacement being rebuilt into a role (it is no member to remove yet).
fn role_of_file(
    v: &ControlVolume,
    is_file: &dyn Fn(&Arc<dyn Member>) -> bool,
) -> Result<Option<usize>, Refusal> {
    let array = v.array();
    let vol = array.volume();
    let ids = v.member_ids();
    for r in 0..vol.member_count() {
        if is_file(&vol.member(r)) {
            return Ok(Some(r));
        }
        if let Some(new) = vol.replacement(r).filter(|m| is_file(m)) {
            return Err(Refusal::new(
                "in-use",
                format!(
                    "volume \"{}\": `{}` is replacing member {} (role {r}) and is being rebuilt into its place; it is no member to remove",
                    v.name,
                    new.name(),
                    ids.get(r).map_or("?", String::as_str),
                ),
            ));
        }
    }
    Ok(None)
}

/// `remove` of a path the records keep that is neither a spare nor a member here (it could
/// not be opened at start, or is no longer blank): forgotten, so no later start opens it.
/// `not_found`: the refusal when the records do not keep it either.
async fn forget_recorded_path(
    v: &ControlVolume,
    path: &str,
    not_found: Refusal,
) -> Result<Value, Refusal> {
    match v.array().forget_added_path(path).await.map_err(refused)? {
        true => Ok(json!({ "volume": v.name, "member": path, "removed": "recorded path" })),
        false => Err(not_found),
    }
}

/// `remove` of a failed member whose role a spare took: its role is served by another, so
/// only what still names it goes (`status`'s line, a path recorded for a start to open).
async fn remove_departed(v: &ControlVolume, gone: Departed) -> Result<Value, Refusal> {
    v.array()
        .forget_added_path(gone.member.name())
        .await
        .map_err(refused)?;
    Ok(json!({
        "volume": v.name,
        "member": gone.id,
        "index": gone.role,
        "removed": "departed",
        "degraded": v.array().volume().is_degraded(),
    }))
}

/// What the daemon already does with a path offered to `add`/`replace`.
pub(super) enum Offered {
    /// Nothing: opened anew.
    New,
    /// A failed member whose role a spare took, still held open (departed).
    Departed(Arc<dyn Member>),
    /// A member of another volume ("member d0 of volume \"r10\"") on the same file
    /// (Matrix), with its shared superblock.
    Shared(Arc<MemberMeta>, String),
}

/// What `add`/`replace` does with the name the operator gave ([`offer`]).
#[derive(Debug, PartialEq)]
pub(super) enum Offer {
    /// Open what is at this path (or URI): it exists, or opening it says what is wrong.
    Open(String),
    /// Create the member file the config declares at this path first, as a start creates
    /// a new volume's members.
    Create(String),
}

/// Where the name given to `add`/`replace` leads — mdadm's rule: a member is a file or
/// device that exists, and a typo creates nothing.
/// - A bare name (no `/`, not a URI) is the id of a member or spare of the volume and
///   means its path (`id_path`); `nbraid add v m1` never creates `./m1`.
/// - A path that does not exist (`exists`) is refused, naming it — unless the config
///   declares it for the volume (`declared`): then it is created. Never under /dev (a
///   regular file there lives in RAM and is gone at the next boot).
pub(super) fn offer(
    volume: &str,
    name: &str,
    id_path: Option<&str>,
    exists: &dyn Fn(&str) -> bool,
    declared: &dyn Fn(&str) -> bool,
) -> Result<Offer, String> {
    let bare = !name.contains('/') && !super::readd::is_remote(name) && name != "memory:";
    let path = match (bare, id_path) {
        (true, Some(p)) => p.to_string(),
        (true, None) => {
            return Err(format!(
                "volume \"{volume}\": `{name}` is no id of its members or spares, and no file in the directory nbraid ran in: name the file or device by its path"
            ))
        }
        (false, _) => name.to_string(),
    };
    if super::readd::is_remote(&path) || path.starts_with("memory:") || exists(&path) {
        return Ok(Offer::Open(path));
    }
    if std::path::Path::new(&path).starts_with("/dev") {
        return Err(format!(
            "volume \"{volume}\": `{path}` does not exist: no device is there, and nothing is created under /dev (check the name)"
        ));
    }
    if declared(&path) {
        return Ok(Offer::Create(path));
    }
    Err(format!(
        "volume \"{volume}\": `{path}` does not exist; add and replace take an existing file or device and create nothing (check the name, or create the file first)"
    ))
}

/// The path `name` (given to `add`/`replace` of volume `v`) leads to ([`offer`]); the file
/// the config declares there is created sparse when missing, as large as the largest place
/// in the volume needs (so one file fits any role), its blank first MiB then passing the
/// disk rule as any blank member's does.
/// `config_spare`: a spare the config declares (a reload adds it): its path is declared.
fn offered_path(
    controls: &Controls,
    v: &ControlVolume,
    name: &str,
    config_spare: bool,
) -> Result<String, Refusal> {
    let id_path = known_id_path(v, name).or_else(|| declared_id_path(controls, v, name));
    let declared = |path: &str| config_spare || declares(v, path);
    let exists = |path: &str| std::path::Path::new(path).exists();
    let path = match offer(&v.name, name, id_path.as_deref(), &exists, &declared) {
        Ok(Offer::Open(path)) => return Ok(path),
        Ok(Offer::Create(path)) => path,
        Err(why) => return Err(Refusal::new("bad-request", why)),
    };
    let mut need_bytes = 0;
    let array = v.array();
    let volume = array.volume();
    let root = volume.geometry().root();
    root.visit_members(&mut |m| need_bytes = need_bytes.max(m.start + m.len));
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .and_then(|f| f.set_len(need_bytes));
    created.map_err(|e| {
        Refusal::new(
            "bad-request",
            format!("creating `{path}` ({need_bytes} bytes, sparse): {e}"),
        )
    })?;
    tracing::warn!(
        "volume {}: created `{path}` ({need_bytes} bytes, sparse), the member file the config declares there",
        v.name
    );
    Ok(path)
}

/// The path of the member or spare of `v` known by id `id` (config ids, and those given at
/// run time); a role's id names the file its member serves from or is missing from.
fn known_id_path(v: &ControlVolume, id: &str) -> Option<String> {
    let array = v.array();
    let role = v.member_ids().iter().position(|m| m == id);
    let serving = role.and_then(|r| match array.has_member(r) {
        true => Some(array.volume().member(r).name().to_string()),
        false => v.missing_from(r),
    });
    let path = serving.or_else(|| v.known_path(id))?;
    Some(super::paths::absolute_path(&path))
}

/// The path the start's config declares for id `id` among volume `v`'s members and spares:
/// one the start never opened (a spare missing then) is known by no handle, yet the
/// operator names it by the id the config gives it once it is there.
fn declared_id_path(controls: &Controls, v: &ControlVolume, id: &str) -> Option<String> {
    let config = controls.config.as_deref()?;
    let cv = config.volume(&v.name)?;
    let m = (cv.members.iter().chain(&cv.heal.spares))
        .map(|&m| &config.members[m])
        .find(|m| m.id == id)?;
    Some(match super::readd::is_remote(&m.path_text) {
        true => m.path_text.clone(),
        false => super::paths::absolute_path(&m.path.to_string_lossy()),
    })
}

/// Whether the config declares `path` for volume `v`: the file a config member of a role
/// is missing from, or one a config member or spare id of the volume was found at.
fn declares(v: &ControlVolume, path: &str) -> bool {
    let same = |p: String| super::paths::absolute_path(&p) == path;
    let missing =
        (0..v.array().volume().member_count()).any(|r| v.missing_from(r).is_some_and(same));
    let config_ids = v.config_ids.as_ref().map_or(&[][..], |c| &c.ids[..]);
    missing
        || config_ids
            .iter()
            .any(|id| v.known_path(id).is_some_and(same))
}

/// Opens an existing member file for `add`/`replace` and reads its superblock.
async fn open_newcomer(path: &str) -> Result<Arc<MemberMeta>, Refusal> {
    let member = Arc::new(
        UringFile::open_with(path, None, Default::default())
            .map_err(|e| Refusal::new("bad-request", format!("opening `{path}`: {e}")))?,
    ) as Arc<dyn Member>;
    Ok(MemberMeta::load(member).await)
}

/// Whether the member named `name` (a path; remote members' URIs never match) is the file or
/// device `new` describes.
pub(super) fn same_file(name: &str, new: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    std::fs::metadata(name).is_ok_and(|m| {
        (m.dev() == new.dev() && m.ino() == new.ino())
            || (m.file_type().is_block_device()
                && new.file_type().is_block_device()
                && m.rdev() == new.rdev())
    })
}

/// What this daemon already does with the file or device at `path`, offered as a new
/// spare or replacement of volume `volume` (`controls`: every volume): refused when it serves this volume — a
/// member, a spare standing by (a spare stands by for one volume, as in the config), a
/// replacement being rebuilt in; opening it again would only meet the daemon's own lock.
/// A member of *another* volume (Matrix: member files carry several) is handed over with
/// its superblock, which the volumes share ([`Offered::Shared`]). A departed member still
/// held open is named ([`Offered::Departed`]) for the caller to let go first.
pub(super) fn already_open(
    controls: &Controls,
    volume: &str,
    path: &str,
) -> Result<Offered, Refusal> {
    let Ok(new) = std::fs::metadata(path) else {
        return Ok(Offered::New); // opening it says what is wrong
    };
    let in_use = |what: String| {
        Refusal::new(
            "in-use",
            format!("`{path}` is {what}; a member or spare serves one place at a time"),
        )
    };
    let mut shared = None;
    for v in &controls.volumes {
        let array = v.array();
        let vol = array.volume();
        for (r, id) in v.member_ids().iter().enumerate() {
            if same_file(vol.member(r).name(), &new) {
                if v.name != volume {
                    let what = format!("member {id} of volume \"{}\"", v.name);
                    shared = shared.or(v.array().member_meta(r).map(|m| (m, what)));
                    continue;
                }
                let hint = match vol.member_is_failed(r) {
                    true => " (failed: `nbraid remove` it first, then add it to rebuild it)",
                    false => "",
                };
                return Err(in_use(format!(
                    "member {id} of volume \"{}\"{hint}",
                    v.name
                )));
            }
            if vol
                .replacement(r)
                .is_some_and(|m| same_file(m.name(), &new))
            {
                return Err(in_use(format!(
                    "replacing member {id} of volume \"{}\"",
                    v.name
                )));
            }
        }
        if v.array()
            .spares()
            .iter()
            .any(|m| same_file(m.member().name(), &new))
        {
            return Err(in_use(format!("a spare of volume \"{}\"", v.name)));
        }
    }
    if let Some((meta, other)) = shared {
        return Ok(Offered::Shared(meta, other));
    }
    let let_go =
        (controls.volumes.iter()).find_map(|v| v.known.lock().held(&|name| same_file(name, &new)));
    Ok(let_go.map_or(Offered::New, Offered::Departed))
}

/// Takes departed member `m` out of every volume's departed list: once the caller drops `m`
/// too, its file or device is closed.
pub(super) fn let_go_departed(controls: &Controls, m: &Arc<dyn Member>) {
    for v in &controls.volumes {
        v.departed.forget(m);
    }
}

/// The member at `path` for `add`/`replace` of volume `v`, and the consent the write
/// rule hears (`--force`). A member file another volume serves (Matrix) is taken only
/// when it carries this volume's own record (a member of it, removed and added back):
/// then only this volume's region is rebuilt; never forced.
async fn newcomer(
    controls: &Controls,
    v: &ControlVolume,
    path: &str,
    force: bool,
) -> Result<(Arc<MemberMeta>, Consent), Refusal> {
    let consent = Consent {
        force,
        siblings: Vec::new(),
    };
    match already_open(controls, &v.name, path)? {
        Offered::Shared(meta, other) => {
            let writer = Writer {
                array: Some(v.array().id()),
                siblings: Vec::new(),
            };
            if may_write(&meta.contents(), &writer, false) != Ok(Allowed::Ours) {
                return Err(Refusal::new(
                    "in-use",
                    format!(
                        "`{path}` is {other} and carries no record of volume \"{}\"; a member or spare serves one place at a time",
                        v.name
                    ),
                ));
            }
            return Ok((meta, consent));
        }
        // Opened afresh, never through the old handle: a member failed by its writes
        // keeps refusing them through it. Closed first, or the open meets its lock.
        Offered::Departed(m) => let_go_departed(controls, &m),
        Offered::New => {}
    };
    Ok((open_newcomer(path).await?, consent))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer_in(
        name: &str,
        id_path: Option<&str>,
        files: &[&str],
        declared: &[&str],
    ) -> Result<Offer, String> {
        let exists = |p: &str| files.contains(&p);
        let declared = |p: &str| declared.contains(&p);
        offer("v", name, id_path, &exists, &declared)
    }

    #[test]
    fn a_member_id_means_its_path_and_an_unknown_bare_name_is_refused() {
        let d1 = "/srv/nbraid/d1.img";
        assert_eq!(
            offer_in("d1", Some(d1), &[d1], &[]),
            Ok(Offer::Open(d1.into()))
        );
        let why = offer_in("m1", None, &[], &[]).unwrap_err();
        assert!(
            why.contains("`m1` is no id") && why.contains("by its path"),
            "{why}"
        );
        // An id of a remote member means its URI.
        let uri = "nbd+unix:///?socket=/run/kit.sock";
        assert_eq!(
            offer_in("r1", Some(uri), &[], &[]),
            Ok(Offer::Open(uri.into()))
        );
    }

    #[test]
    fn a_missing_path_is_created_only_where_the_config_declares_it_and_never_under_dev() {
        let why = offer_in("/dev/sdq", None, &[], &[]).unwrap_err();
        assert!(
            why.contains("`/dev/sdq` does not exist") && why.contains("/dev"),
            "{why}"
        );
        assert!(offer_in("/dev/sdq", None, &[], &["/dev/sdq"]).is_err());
        assert_eq!(
            offer_in("/dev/sdb", None, &["/dev/sdb"], &[]),
            Ok(Offer::Open("/dev/sdb".into()))
        );
        let typo = offer_in("/srv/d7.img", None, &[], &[]).unwrap_err();
        assert!(
            typo.contains("`/srv/d7.img` does not exist") && typo.contains("create nothing"),
            "{typo}"
        );
        assert_eq!(
            offer_in("/srv/d3.img", None, &[], &["/srv/d3.img"]),
            Ok(Offer::Create("/srv/d3.img".into()))
        );
        // A config member's id whose file is gone leads to the same creation.
        assert_eq!(
            offer_in("d3", Some("/srv/d3.img"), &[], &["/srv/d3.img"]),
            Ok(Offer::Create("/srv/d3.img".into()))
        );
    }
}

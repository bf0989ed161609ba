//! `nbraidd --check`: whether a start on this config would assemble every volume, decided
//! without disturbing anything. Every member, spare and member added at run time is read
//! with plain reads of its two superblock slots (no lock, no write: a running daemon is not
//! disturbed) and the daemon's own pure decisions run over them, as at a start: whether the
//! volume is opened or created ([`start_plan`]), then assembly. A volume the start would
//! refuse makes the check fail, as the start would (`nginx -t`). Members on NBD servers are
//! read through NBD as the start connects to them ([`read_remotes`]): one that does not
//! answer, or answers with an export it cannot use, is unreachable to the check as to the
//! start.

use crate::plan::{self, Found, Plan, Refusal};
use crate::{added, records, remote};
use futures::FutureExt;
use nbraid_config::{Config, MemberStorage, Volume};
use nbraid_core::metadata::disk_rule::DiskContents;
use nbraid_core::metadata::{
    assemble_as_started, MemberMeta, Probe, METADATA_AREA_BYTES, SLOT_BYTES,
};
use nbraid_core::{Member, MemoryMember};
use std::io::{Read, Seek};
use std::path::Path;
use std::sync::Arc;

/// What a start on a config would do, as far as the superblocks tell.
#[derive(Debug, Default)]
pub struct Preflight {
    /// Why it would refuse volumes, one line per volume (the start fails).
    pub refusals: Vec<String>,
    /// The names of the volumes it would refuse, in the order of `refusals`.
    pub refused_volumes: Vec<String>,
    /// What it would say loudly while starting: members on NBD servers it could not use,
    /// volumes served degraded, damaged superblock copies.
    pub warnings: Vec<String>,
}

impl Preflight {
    /// A start refuses volume `v`, `why` (naming it).
    fn refuse(&mut self, v: &Volume, why: String) {
        self.refusals.push(why);
        self.refused_volumes.push(v.name.clone());
    }
}

/// Why a start on `config` would refuse volumes, one line per volume (empty: it would not,
/// as far as the superblocks tell).
pub fn refusals(config: &Config) -> Vec<String> {
    preflight(config).refusals
}

/// [`Preflight`] of a start on `config`: remote members read through NBD first.
pub fn preflight(config: &Config) -> Preflight {
    let remotes = read_remotes(config);
    let mut out = Preflight::default();
    out.warnings.extend(
        remotes
            .iter()
            .flatten()
            .filter_map(|r| r.unavailable.clone()),
    );
    for v in &config.volumes {
        let Some((probes, added)) = probes_with_remote(config, v, &remotes) else {
            continue;
        };
        match start_plan_with(config, v, &probes[..v.members.len()], &remotes) {
            Err(refusal) => {
                out.refuse(v, refusal.0);
                continue;
            }
            Ok(Plan::Create { .. }) => continue, // written at the next start
            Ok(Plan::Open) => {}
        }
        let (tree, grown) = crate::grown::start_tree(config, v, &probes);
        let said = |w: &String| format!("volume {}: {w}", v.name);
        out.warnings.extend(grown.iter().map(said));
        let ids = member_ids(config, v);
        // A dirty start that logs reads its rings' word on the life that stopped: after one
        // that did not log, it is assembled as a start without the log.
        let assembled = assemble_as_started(&v.name, &tree, &probes, &ids, v.metadata.ppl)
            .and_then(|asm| {
                crate::last_life::as_started(config, v, (&tree, &probes, &added), &ids, asm)
            });
        match assembled {
            Err(e) => {
                let ids = crate::adopt::position_ids(config, v, &added);
                let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                let why = crate::beyond_tolerance::check_text(config, v, &probes, &ids, &e);
                out.refuse(v, format!("volume {}: superblocks refused: {why}", v.name))
            }
            Ok((asm, word)) => {
                // Settings the records keep otherwise, never taken (what the start warns).
                let kept = crate::settings::fixed_at_create(v);
                (out.warnings).extend(
                    kept.iter()
                        .map(|c| format!("volume {}: setting: {}", v.name, c.text())),
                );
                let note = crate::last_life::resync_note(config, v, (&asm, &probes), &word);
                out.warnings
                    .extend(note.map(|n| format!("volume {}: {n}", v.name)));
                let read_only = v.read_only.then(|| {
                    crate::read_only_check::open_refusal(config, v, &asm, (&probes, &added))
                });
                if let Some(why) = read_only.flatten() {
                    out.refuse(v, why);
                    continue;
                }
                (out.warnings).extend(
                    asm.warnings
                        .iter()
                        .map(|w| format!("volume {}: {w}", v.name)),
                );
                out.warnings.extend(degraded(config, v, &asm.roles));
            }
        }
    }
    out
}

/// Volume `v`'s member ids by position, as the start names them in assembly's messages.
pub fn member_ids(config: &Config, v: &Volume) -> Vec<String> {
    (v.members.iter())
        .map(|&m| config.members[m].id.clone())
        .collect()
}

/// The warning of a volume a start would serve degraded: its roles without a member, each
/// with the member held in it (by config position of the volume), if any.
fn degraded(
    config: &Config,
    v: &Volume,
    roles: &[Result<usize, nbraid_core::metadata::Absence>],
) -> Option<String> {
    let out: Vec<String> = (roles.iter().enumerate())
        .filter_map(|(role, r)| {
            let absence = r.as_ref().err()?;
            let who = (absence.member())
                .and_then(|p| v.members.iter().chain(&v.heal.spares).nth(p))
                .map_or(String::new(), |&m| {
                    let m = &config.members[m];
                    format!(" (member {}: {})", m.id, m.path_text)
                });
            Some(format!("role {role} {}{who}", absence_word(absence)))
        })
        .collect();
    (!out.is_empty()).then(|| {
        format!(
            "volume {}: a start now serves it degraded: {}",
            v.name,
            out.join(", ")
        )
    })
}

/// Why a role has no member, in a word (as `nbraid check` says it).
pub fn absence_word(a: &nbraid_core::metadata::Absence) -> &'static str {
    use nbraid_core::metadata::Absence;
    match a {
        Absence::Lost => "lost",
        Absence::Stale { .. } => "stale",
        Absence::Failed { .. } => "failed",
        Absence::Unreachable { .. } => "unreachable",
        Absence::Rebuilding { .. } => "rebuilding",
    }
}

/// A member on an NBD server as the check read it, through NBD as the start connects.
#[derive(Clone, Debug)]
pub struct RemoteRead {
    /// Its superblock, or [`Probe::Unreachable`] (why) when the start would not use it.
    pub probe: Probe,
    /// What it holds, for the write rule.
    pub contents: DiskContents,
    /// Said when the start could not use it: which member, at which URI, and why.
    pub unavailable: Option<String>,
    /// Its server answers, with an export the member cannot use (too small, read-only...):
    /// not "unreachable".
    pub unusable: bool,
    /// What its server said of the export on that connection (also when the export is
    /// unusable), or why it did not answer: `nbraid check` describes servers from it.
    pub described: Result<nbraid_remote::Probe, String>,
}

/// Every member on an NBD server that a volume uses, read once (all at once, as the start
/// connects them: a server that does not answer costs its timeout once); by config member
/// index, `None` for the other members.
pub fn read_remotes(config: &Config) -> Vec<Option<RemoteRead>> {
    let used = |i: usize| {
        (config.volumes.iter()).any(|v| v.members.contains(&i) || v.heal.spares.contains(&i))
    };
    std::thread::scope(|s| {
        let reads: Vec<_> = (config.members.iter().enumerate())
            .map(|(i, m)| {
                (m.state == MemberStorage::Remote && used(i))
                    .then(|| s.spawn(move || futures::executor::block_on(read_remote(config, m))))
            })
            .collect();
        reads
            .into_iter()
            .map(|h| h.map(|h| h.join().expect("a remote read does not panic")))
            .collect()
    })
}

/// Remote member `m`, connected as the start connects it (its size, the volumes' block
/// size, its timeout; one connection, not its `connections`) and its superblock read as the start reads it; nothing is written.
async fn read_remote(config: &Config, m: &nbraid_config::Member) -> RemoteRead {
    // One connection reads the superblock and describes the server: the extra ones a
    // multi-conn server would get serve I/O, which a check does not do.
    let opts = nbraid_remote::RemoteOptions {
        connections: 1,
        ..remote::remote_options(config, m)
    };
    let (described, opened) =
        nbraid_remote::RemoteMember::connect_described(&m.path_text, Some(m.size), &opts).await;
    match opened {
        Ok(member) => {
            let described = described.or_else(|| member.probe());
            let meta = MemberMeta::load(Arc::new(member)).await;
            RemoteRead {
                probe: meta.probe().clone(),
                contents: meta.contents(),
                unavailable: None,
                unusable: false,
                described: described.ok_or_else(|| "no export information".to_string()),
            }
        }
        Err(source) => {
            let why = remote::unavailable_text(&source);
            let word = remote::unavailable_word(&source);
            unavailable(m, word, why.clone(), described.ok_or(source.to_string()))
        }
    }
}

/// A remote member the start would not use (`word`: UNREACHABLE or UNUSABLE, `why`).
fn unavailable(
    m: &nbraid_config::Member,
    word: &str,
    why: String,
    described: Result<nbraid_remote::Probe, String>,
) -> RemoteRead {
    RemoteRead {
        contents: DiskContents::Unknown(format!("{}: {why}", word.to_lowercase())),
        unusable: word == "UNUSABLE",
        unavailable: Some(format!(
            "remote member {} ({}) is {word} now: {why}",
            m.id, m.path_text
        )),
        probe: Probe::Unreachable(why),
        described,
    }
}

/// How a start would begin volume `v` — open it, create it, or refuse, and why — by the
/// daemon's own rule ([`plan::plan_volume`]) over what its members hold (`probes`: the
/// config's members, by position). A volume no member carries a record of is created,
/// even beside the records of the config's other volumes (Matrix).
pub fn start_plan(config: &Config, v: &Volume, probes: &[Probe]) -> Result<Plan, Refusal> {
    start_plan_with(config, v, probes, &[])
}

/// [`start_plan`] with the remote members read through NBD ([`read_remotes`]).
pub fn start_plan_with(
    config: &Config,
    v: &Volume,
    probes: &[Probe],
    remotes: &[Option<RemoteRead>],
) -> Result<Plan, Refusal> {
    let found: Vec<Found> = (v.members.iter().zip(probes))
        .map(|(&m, probe)| {
            let member = &config.members[m];
            if member.state == MemberStorage::Memory {
                return Found::Memory;
            }
            if let Some(Some(r)) = remotes.get(m) {
                return plan::found_on(config, m, &v.name, probe, &r.contents, false);
            }
            // A member without a superblock is blank only if its whole first MiB is.
            let first = match probe {
                Probe::Blank => first_mib(&member.path),
                _ => None,
            };
            let contents = DiskContents::from_probe(probe, first.as_deref());
            plan::found_on(config, m, &v.name, probe, &contents, false)
        })
        .collect();
    plan::plan_volume(config, v, v.metadata.create, &found)
}

/// The first MiB of the member file at `path` (less when it is smaller), read without
/// opening it for writing; `None` when it cannot be read.
fn first_mib(path: &Path) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    let file = std::fs::File::open(path).ok()?;
    file.take(METADATA_AREA_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(bytes)
}

/// The superblocks assembly would see for volume `v`, by position: the config's members,
/// its spares (with a record of this volume alone), then the members added at run time its
/// records list (with a record of this volume). `None` for a volume with members in memory
/// or on NBD servers (read at start only).
pub fn probes(config: &Config, v: &Volume) -> Option<Vec<Probe>> {
    probes_with_added(config, v).map(|(probes, _)| probes)
}

/// [`probes`], and the paths of the members added at run time whose probes end the list.
/// Records are this volume's by array id, as the daemon takes them: a file later used by
/// another array's volume of the same name is not this volume's.
pub fn probes_with_added(config: &Config, v: &Volume) -> Option<(Vec<Probe>, Vec<String>)> {
    probes_with_remote(config, v, &[])
}

/// [`probes_with_added`], members on NBD servers as `remotes` read them ([`read_remotes`]);
/// `None` for a volume with members in memory or on NBD servers not read.
pub fn probes_with_remote(
    config: &Config,
    v: &Volume,
    remotes: &[Option<RemoteRead>],
) -> Option<(Vec<Probe>, Vec<String>)> {
    let n = v.members.len();
    let positions: Vec<usize> = v.members.iter().chain(&v.heal.spares).copied().collect();
    let raw: Vec<Probe> = (positions.iter())
        .map(|&m| match (config.members[m].state, remotes.get(m)) {
            (MemberStorage::Remote, Some(Some(r))) => Some(r.probe.clone()),
            (MemberStorage::Memory | MemberStorage::Remote, _) => None,
            _ => Some(member_probe(&config.members[m])),
        })
        .collect::<Option<_>>()?;
    // Members added at run time, by the daemon's rules (`added::open_added`): the paths the
    // newest record lists (following the lists of those read), none of this volume's own
    // members' and spares' (a member another volume or none lists is read there too).
    let named = |p: &str| added::declared(config, p).is_some_and(|m| positions.contains(&m));
    let config_probes: Vec<&Probe> = raw.iter().collect();
    let read = |p: String| async move { read_probe(Path::new(&p), &p) };
    let found = futures::executor::block_on(added::follow_added(
        &v.name,
        &config_probes,
        named,
        read,
        read_probe_of,
    ));
    let this = records::this_array(config_probes.iter().copied(), &v.name);
    let has_this = |probe: &Probe| records::record_of(probe, &v.name, this).is_some();
    let only_this = |probe: &Probe| {
        matches!(probe, Probe::Superblock(sb, _) if has_this(probe)
            && sb.volumes.iter().all(|x| x.name == v.name && this.is_none_or(|a| x.array == a)))
    };
    // Config spares join assembly only with a record of this volume alone; added members
    // with one of this volume (the records list them).
    let mut probes: Vec<Probe> = raw
        .into_iter()
        .enumerate()
        .map(|(p, probe)| match probe {
            Probe::Superblock(..) if p >= n && !only_this(&probe) => Probe::Missing,
            probe => probe,
        })
        .collect();
    probes.extend(found.iter().map(|(_, probe)| match probe {
        Probe::Superblock(..) if !has_this(probe) => Probe::Missing,
        probe => probe.clone(),
    }));
    Some((probes, found.into_iter().map(|(path, _)| path).collect()))
}

/// A probe as [`added::follow_added`] asks for it.
pub fn read_probe_of(probe: &Probe) -> Option<&Probe> {
    Some(probe)
}

/// What config member `m` (a file or device) is to assembly, read as [`read_probe`]: a
/// short member is unusable ([`Probe::Unreachable`], why), as the start takes it.
pub fn member_probe(m: &nbraid_config::Member) -> Probe {
    match crate::member::short_text(m) {
        Some(why) => Probe::Unreachable(why),
        None => read_probe(&m.path, &m.id),
    }
}

/// The superblock of the member file at `path` (config id or path `id`), read without
/// opening it for writing (`nbraidd --check` and `nbraid check`).
pub fn read_probe(path: &Path, id: &str) -> Probe {
    read_probe_as(path, id, false)
}

/// [`read_probe`] as if the member were as long as its records say: what a member
/// truncated since recorded (its records place regions past its end).
pub fn read_probe_past_end(path: &Path, id: &str) -> Probe {
    read_probe_as(path, id, true)
}

fn read_probe_as(path: &Path, id: &str, past_end: bool) -> Probe {
    let mut bytes = Vec::new();
    let len_bytes = match std::fs::File::open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Probe::Missing,
        Err(e) => return Probe::Unreadable(format!("{}: {e}", path.display())),
        // The real size (a block device's too: its metadata says 0), which assembly's
        // reader checks the records against.
        Ok(mut f) => match f
            .seek(std::io::SeekFrom::End(0))
            .and_then(|len| f.rewind().map(|()| len))
            .and_then(|len| f.take(2 * SLOT_BYTES).read_to_end(&mut bytes).map(|_| len))
        {
            Ok(len) => len,
            Err(e) => return Probe::Unreadable(format!("{}: {e}", path.display())),
        },
    };
    // Assembly's own reader over a copy of the two slots, as long as the member; a memory
    // member answers at once, so one poll does (this runs inside `follow_added`'s executor).
    let len_bytes = match past_end {
        true => i64::MAX as u64,
        false => len_bytes,
    };
    let copy = MemoryMember::with_prefix(id, len_bytes, 2 * SLOT_BYTES);
    copy.poke(0, &bytes);
    let meta = MemberMeta::load(Arc::new(copy) as Arc<dyn Member>)
        .now_or_never()
        .expect("a memory member's reads complete at once");
    meta.probe().clone()
}

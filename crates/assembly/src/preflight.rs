//! `nbraidd --check`: whether a start on this config would assemble every volume, decided
//! without disturbing anything. Every member, spare and member added at run time is read
//! with plain reads of its two superblock slots (no lock, no write: a running daemon is not
//! disturbed) and the daemon's own pure decisions run over them, as at a start: whether the
//! volume is opened or created ([`start_plan`]), then assembly. A volume the start would
//! refuse makes the check fail, as the start would (`nginx -t`).

use crate::plan::{self, Found, Plan, Refusal};
use crate::{added, records};
use futures::FutureExt;
use nbraid_config::{Config, MemberStorage, Volume};
use nbraid_core::metadata::disk_rule::DiskContents;
use nbraid_core::metadata::{assemble, MemberMeta, Probe, METADATA_AREA_BYTES, SLOT_BYTES};
use nbraid_core::{Member, MemoryMember};
use std::io::{Read, Seek};
use std::path::Path;
use std::sync::Arc;

/// Why a start on `config` would refuse volumes, one line per volume (empty: it would not,
/// as far as the superblocks tell).
pub fn refusals(config: &Config) -> Vec<String> {
    config
        .volumes
        .iter()
        .filter_map(|v| {
            let probes = probes(config, v)?;
            match start_plan(config, v, &probes[..v.members.len()]) {
                Err(refusal) => return Some(refusal.0),
                Ok(Plan::Create { .. }) => return None, // written at the next start
                Ok(Plan::Open) => {}
            }
            let e = assemble(&v.name, v.geometry.root(), &probes).err()?;
            Some(format!("volume {}: superblocks refused: {e}", v.name))
        })
        .collect()
}

/// How a start would begin volume `v` — open it, create it, or refuse, and why — by the
/// daemon's own rule ([`plan::plan_volume`]) over what its members hold (`probes`: the
/// config's members, by position). A volume no member carries a record of is created,
/// even beside the records of the config's other volumes (Matrix).
pub fn start_plan(config: &Config, v: &Volume, probes: &[Probe]) -> Result<Plan, Refusal> {
    let found: Vec<Found> = (v.members.iter().zip(probes))
        .map(|(&m, probe)| {
            let member = &config.members[m];
            if member.state == MemberStorage::Memory {
                return Found::Memory;
            }
            // A member without a superblock is blank only if its whole first MiB is.
            let first = match probe {
                Probe::Blank => first_mib(&member.path),
                _ => None,
            };
            let contents = DiskContents::from_probe(probe, first.as_deref());
            plan::found_on(config, m, &v.name, probe, &contents)
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
    let n = v.members.len();
    let positions: Vec<usize> = v.members.iter().chain(&v.heal.spares).copied().collect();
    if positions.iter().any(|&m| {
        matches!(
            config.members[m].state,
            MemberStorage::Memory | MemberStorage::Remote
        )
    }) {
        return None;
    }
    let raw: Vec<Probe> = positions
        .iter()
        .map(|&m| read_probe(&config.members[m].path, &config.members[m].id))
        .collect();
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

/// The superblock of the member file at `path` (config id or path `id`), read without
/// opening it for writing (`nbraidd --check` and `nbraid check`).
pub fn read_probe(path: &Path, id: &str) -> Probe {
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
    let copy = MemoryMember::with_prefix(id, len_bytes, 2 * SLOT_BYTES);
    copy.poke(0, &bytes);
    let meta = MemberMeta::load(Arc::new(copy) as Arc<dyn Member>)
        .now_or_never()
        .expect("a memory member's reads complete at once");
    meta.probe().clone()
}

//! What a config says once checked: the [`Config`] with its members and volumes, the
//! constants its rules are made of, and a few facts read off them. Plain data; the checks that
//! build it live in `resolve` and the modules it calls.

use crate::bench::BenchModels;
use crate::limits::ServerLimits;
use crate::listen::Listener;
use crate::remote_member::RemoteSettings;
use crate::service::ServiceSettings;
use crate::tls::TlsSettings;
use crate::volume_meta::MetadataOptions;
use nbraid_layout::{CacheMode, ReadPolicy};
use nbraid_layout::{Geometry, Level, Region, Shape};
use serde::Serialize;
use std::path::PathBuf;

/// Bytes at the start of every member kept for nbraid's metadata (superblock, later the
/// write-intent bitmap); no volume region begins before it.
pub const METADATA_RESERVED: u64 = 1 << 20;

/// Longest volume name: what a superblock's volume record holds (the engine's `NAME_BYTES`).
pub const VOLUME_NAME_MAX_BYTES: usize = 64;

/// Most volumes on one member: the volume records one superblock holds (the engine's
/// `MAX_VOLUMES`).
pub const VOLUMES_PER_MEMBER_MAX: usize = 64;

/// Smallest member any volume fits on: the metadata reserve plus one 4 KiB block (a jbod
/// with `checksums = "off"`). A member below it is refused with what the first volume on it
/// needs, from that volume's geometry (about 2 MiB and one strip with the defaults).
pub const MEMBER_MIN: u64 = METADATA_RESERVED + nbraid_layout::STRIP_MIN;

/// Default bound of a write-back volume's stripe cache.
pub const CACHE_SIZE_DEFAULT: u64 = 64 << 20;

/// Default logical block size of a volume.
pub const BLOCK_SIZE_DEFAULT: u32 = 4096;

/// Logical block sizes a volume may offer.
pub const BLOCK_SIZES: [u32; 2] = [512, 4096];

/// JBOD regions are whole multiples of this.
pub const JBOD_ALIGN: u64 = 4096;

/// The `path` of a member that lives in RAM.
pub const MEMORY_PATH: &str = "memory:";

/// URI schemes of members on NBD servers (remote members).
pub const REMOTE_SCHEMES: [&str; 4] = ["nbd://", "nbds://", "nbd+unix://", "nbds+unix://"];

/// Whether a member's `path` names an NBD export (`nbd://host:port/export`, `nbds://…`,
/// `nbd+unix:///export?socket=…`) rather than a file.
pub fn is_remote(path: &str) -> bool {
    REMOTE_SCHEMES.iter().any(|s| path.trim().starts_with(s))
}

/// A checked config: members with their sizes, volumes with their geometry, listeners.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file it was read from, as the caller named it.
    pub file: PathBuf,
    /// Addresses the NBD server listens on (never empty).
    pub listen: Vec<Listener>,
    /// The server's bounds (`[daemon]`: connections, request memory, timeouts), validated.
    pub limits: ServerLimits,
    /// TLS for every listener (`[daemon] tls`, `tls_certificates`, ...).
    pub tls: TlsSettings,
    /// The control socket (`[daemon] control`, resolved against the config's directory;
    /// default: the config file's path with the extension `.ctl`).
    pub control: PathBuf,
    /// `[daemon] on_event` and `metrics_listen`: the event hook and the Prometheus listener.
    pub service: ServiceSettings,
    /// `[bench.hdd]`, `[bench.ssd]`: parameters of `nbraid bench --sim`'s disk models (none
    /// when the tables are absent; the daemon does not use them).
    pub bench: BenchModels,
    /// Members in file order; volumes refer to them by index.
    pub members: Vec<Member>,
    /// Volumes in file order (also the order their regions were allocated in).
    pub volumes: Vec<Volume>,
}

/// One member: a file or block device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Unique id (`d0`), what volumes list in `members`.
    pub id: String,
    /// The path as written in the config.
    pub path_text: String,
    /// The path resolved against the config file's directory.
    pub path: PathBuf,
    /// Bytes of the member nbraid uses (metadata reserve included).
    pub size: u64,
    /// No `size` key: `size` is what the file or device holds, so it follows a member that
    /// grew (a start keeps the recorded regions then: the growth waits for `nbraid apply`).
    pub sized_by_path: bool,
    /// What is at `path` now.
    pub state: MemberStorage,
    /// `timeout` and `connections` of a remote member (empty for the others).
    pub remote: RemoteSettings,
}

/// What was found at a member's path when the config was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum MemberStorage {
    /// Nothing yet: a sparse file of `size` bytes is created on assembly.
    Missing,
    /// A regular file of `len` bytes (at least the member's size).
    File { len: u64 },
    /// A block device of `len` bytes (at least the member's size).
    BlockDevice { len: u64 },
    /// `path = "memory:"`: RAM of `size` bytes, zeroed at start and lost at exit (tests,
    /// benchmarks, scratch volumes).
    Memory,
    /// `path` is an NBD URI (see [`is_remote`]): an export on an NBD server, connected to on
    /// assembly (reading the config never connects; `size` is required).
    Remote,
}

impl Member {
    /// What the file or device holds when that is less than the member's size: a member
    /// *short* of what its records keep (truncated, or another disk at its path). Never
    /// opened for writing nor taken for blank: its volumes start without it, as without a
    /// missing member ([`Member::short_text`] says why).
    pub fn short_len_bytes(&self) -> Option<u64> {
        match self.state {
            MemberStorage::File { len } | MemberStorage::BlockDevice { len } => {
                (len < self.size).then_some(len)
            }
            _ => None,
        }
    }

    /// Why a short member ([`Member::short_len_bytes`]) is left out, naming it; `None` when
    /// it is not short.
    pub fn short_text(&self) -> Option<String> {
        let len = self.short_len_bytes()?;
        let of = match self.sized_by_path {
            true => "the end of the region its records keep",
            false => "its size in the config",
        };
        Some(format!(
            "member {} ({}) holds {}, less than {of} ({}): it was truncated, or another disk is at its path",
            self.id,
            self.path_text,
            crate::size::format_size(len),
            crate::size::format_size(self.size)
        ))
    }
}

/// A volume's spares and rebuild rate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealOptions {
    /// Spare members, as indices into [`Config::members`], in the config's order.
    pub spares: Vec<usize>,
    /// Bytes per second an automatic rebuild runs at (0: unlimited).
    pub rebuild_rate_bytes_per_s: u64,
    /// `rebuild_rate = "adaptive"`: full speed while clients are idle, yielding to their I/O
    /// (the limit is then 0).
    pub rebuild_adaptive: bool,
}

/// One volume, exported over NBD under its name.
#[derive(Clone, Debug)]
pub struct Volume {
    /// Unique name; the NBD export name.
    pub name: String,
    /// Level, member count, spans, strip and parity rotation, validated; `None` for a volume
    /// that declares its `tree` (the geometry's root is then the whole story).
    pub shape: Option<Shape>,
    /// The volume's members as indices into [`Config::members`], in the volume's order
    /// (the order of the layout's member indices).
    pub members: Vec<usize>,
    /// `regions[i]` is the slice of member `members[i]` the volume uses.
    pub regions: Vec<Region>,
    /// The built geometry over `regions`.
    pub geometry: Geometry,
    /// The size the config asked for.
    pub requested: VolumeSize,
    /// How mirror reads pick a copy (meaningful for raid1 and raid10).
    pub read_policy: ReadPolicy,
    /// When writes are acknowledged; a write-back cache's bound is at least one full stripe
    /// for parity levels.
    pub cache: CacheMode,
    pub read_only: bool,
    /// Logical block size offered to clients: 512 or 4096. For an existing volume the one
    /// its records keep (a config loaded pinned to them: `crate::Pins`), which
    /// [`Self::block_size_written`] may differ from.
    pub block_size: u32,
    /// `block_size` as the config writes it (or its default): `nbraid check` and `apply`
    /// say where the records keep another.
    pub block_size_written: u32,
    /// On-disk metadata: `create`, `bitmap_chunk`, `clean_delay`.
    pub metadata: MetadataOptions,
    /// `spares` and `rebuild_rate`.
    pub heal: HealOptions,
}

impl Volume {
    /// The named level; `None` for a declared tree.
    pub fn level(&self) -> Option<Level> {
        self.shape.as_ref().map(|s| s.level)
    }

    /// `raid50`, or `tree` for a declared tree: what the volume is, in one word.
    pub fn kind_name(&self) -> &'static str {
        self.level().map_or("tree", Level::name)
    }

    /// Logical bytes the volume offers (its export size).
    pub fn capacity(&self) -> u64 {
        self.geometry.capacity()
    }

    /// Ids of the volume's members in the volume's order.
    pub fn member_ids<'a>(&self, config: &'a Config) -> Vec<&'a str> {
        self.members
            .iter()
            .map(|&m| config.members[m].id.as_str())
            .collect()
    }
}

/// A volume's `size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VolumeSize {
    /// What is left on its members.
    All,
    Bytes(u64),
}

impl Config {
    pub fn member(&self, id: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    pub fn volume(&self, name: &str) -> Option<&Volume> {
        self.volumes.iter().find(|v| v.name == name)
    }

    /// Whether volume `v` is new: every one of its members is missing (or in memory). Its
    /// files can be created, all zeroes, so its parity starts in sync.
    pub fn volume_is_new(&self, v: &Volume) -> bool {
        v.members.iter().all(|&m| {
            matches!(
                self.members[m].state,
                MemberStorage::Missing | MemberStorage::Memory
            )
        })
    }

    /// Whether member `m` may be created: it is missing and every volume on it is new. A
    /// member missing from a volume that has data is never recreated — an empty file would
    /// silently stand in for the lost data; the volume runs degraded without it instead.
    pub fn may_create(&self, m: usize) -> bool {
        self.members[m].state == MemberStorage::Missing
            && !self.awaits_device(m)
            && self
                .volumes
                .iter()
                .filter(|v| v.members.contains(&m))
                .all(|v| self.volume_is_new(v))
    }

    /// Whether member `m` is a spare (no volume takes it) on a path under `/dev`: never made
    /// a file — a device not there yet would become a file in RAM (devtmpfs); it stays
    /// missing until the device is there and `nbraid add VOLUME ID` takes it.
    pub fn awaits_device(&self, m: usize) -> bool {
        self.members[m].path.starts_with("/dev")
            && !self.volumes.iter().any(|v| v.members.contains(&m))
    }
}

/// "d0, d1, d2", or what to do when no member is defined: for unknown-member messages.
pub(crate) fn defined_members(members: &[Member]) -> String {
    if members.is_empty() {
        return "none yet; add [[member]] tables".into();
    }
    let ids: Vec<&str> = members.iter().map(|m| m.id.as_str()).collect();
    ids.join(", ")
}

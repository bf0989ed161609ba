//! # nbraid-config: the TOML array config
//!
//! `arrays.toml` declares members (files or block devices), volumes (a RAID level over some of
//! the members, exported over NBD under the volume's name) and where the daemon listens:
//!
//! ```toml
//! [daemon]
//! listen = ["unix:/run/nbraid/nbd.sock", "tcp:127.0.0.1:10809"]   # default: tcp:127.0.0.1:10809
//! max_connections = 128           # the defaults of the server's bounds
//! in_flight_memory = "512MiB"     # request memory of all connections together
//! in_flight_memory_per_connection = "128MiB"
//! max_handshakes = 64            # negotiating at once, apart from max_connections
//! handshake_timeout = "10s"
//! idle_timeout = "off"
//! stall_timeout = "60s"
//! payload_min_bytes_per_s = "256KiB"  # a write payload arrives in stall_timeout + len / this
//! tls = "off"                     # "optional" or "required" (NBD STARTTLS) on every listener
//!                                 # without its own: { address = "tcp:...", tls = "required" }
//! tls_certificates = "pki"        # ca-cert.pem, server-cert.pem, server-key.pem
//! tls_verify_clients = false      # require client certificates signed by ca-cert.pem
//! insecure_listen = false         # consent to non-loopback TCP without TLS required
//! insecure_unverified_clients = false  # consent to non-loopback TCP with TLS, clients unverified
//! on_event = "/usr/local/sbin/nbraid-event"   # run on every event, its fields in the environment
//! metrics_listen = "127.0.0.1:9187"           # Prometheus text at /metrics (a port alone: loopback)
//!
//! [[member]]
//! id = "d0"
//! path = "data/d0.img"   # relative to the config file's directory
//! size = "4GiB"
//!
//! [[volume]]
//! name = "db"
//! level = "raid50"
//! spans = 2
//! strip_size = "64KiB"
//! members = ["d0", "d1", "d2", "d3", "d4", "d5"]
//! size = "all"
//!
//! [bench.hdd]            # optional: `nbraid bench --sim hdd --config FILE`'s disk model
//! rpm = 7200             # the keys of a `--sim-params` file's [hdd]; [bench.ssd] likewise
//! queue_depth = 1
//! ```
//!
//! Instead of `level` (and `members`), a volume may declare its tree, nodes being tables with
//! one kind key (`concat`, `stripe`, `mirror`, `raid5`, `raid6`) listing their children:
//!
//! ```toml
//! tree = { mirror = [{ raid5 = ["d0", "d1", "d2"] }, { raid5 = ["d3", "d4", "d5"] }] }
//! ```
//!
//! [`load`] reads a file and returns a [`Config`] whose volumes carry a validated
//! [`Shape`] (named levels only), each member's [`Region`] and the built [`Geometry`] — for a
//! named level and a declared tree alike a layout tree, which is what the engine, the
//! superblock and `nbraid check` read. A bad config gives one
//! [`ConfigError`] naming the file, line and column, the table and field, and what would be
//! valid. Reading a config never creates or writes anything: it reads the file and looks at
//! (stats, and for block devices seeks to the end of) the member paths. Creating members is
//! `nbraid create`'s and the daemon's business; [`Config::may_create`] says which may be.
//!
//! ## Rules
//! - **Member size.** `size` is required when `path` does not exist yet (the file is created
//!   sparse at that size). For an existing file or block device `size` may be left out: its
//!   actual size is used. When both are there the existing file or device must be at least
//!   `size` bytes, and nbraid uses only its first `size` bytes (like a partition).
//! - **Metadata reserve.** The first [`METADATA_RESERVED`] bytes of every member belong to
//!   nbraid's on-disk metadata; volumes start after it.
//! - **Regions.** Volumes are placed in file order. Each volume takes one region of every member
//!   it lists, starting where the previous volumes' regions on that member end (Intel's Matrix
//!   RAID: a RAID 1 and a RAID 0 on the same two disks). Regions are whole strips and equal on
//!   every member, except for JBOD, whose members give unequal amounts (in 4 KiB units), filled
//!   in member order. A declared tree's regions are equal too, whole multiples of its largest
//!   strip; its capacity follows from its nodes (mirror: the smallest child; stripe and parity:
//!   data children × the smallest; concat: the sum).
//! - **Volume size.** `size = "all"` (the default) takes what is left: for JBOD all that is left
//!   on every member; for the other levels what is left on the member with least room (the rest
//!   of the others stays free). An explicit size is rounded up to whole stripes (JBOD: 4 KiB);
//!   the volume offers exactly its geometry's capacity, which is never less than asked.
//! - **Options by level.** `strip_size` applies to striped and parity levels (not jbod or
//!   raid1), `parity_layout` to raid5/6/50/60, `read_policy` to raid1/raid10, `cache_size` to
//!   `cache = "write-back"`. With a `tree`, `strip_size` and `parity_layout` are the defaults of
//!   its nodes and `read_policy` applies when it has a mirror; each is refused when nothing in
//!   the tree uses it, and so is `spans`.
//!
//! The crate is plain data and checks: no async, no engine, no server. `nbraid check`, `map`
//! and `create` and the daemon all read configs through it; the config's TOML is known only
//! here, the engine (`nbraid-core`) gets plain values. [`ReadPolicy`] and [`CacheMode`] are the
//! layout crate's, shared with the engine.

mod allocate;
mod bench;
mod error;
mod field;
mod limits;
mod listen;
mod raw;
mod remote_member;
mod resolve;
mod schema_error;
mod service;
mod size;
mod spares;
mod summary;
mod tls;
mod tree;
mod volume_meta;

pub use bench::{
    load_sim_params, parse_sim_params, BenchModels, ModelParams, ParamSpec, HDD_PARAMS, MODELS,
    SSD_PARAMS,
};
pub use error::{ConfigError, ErrorKind};
pub use limits::{
    format_duration, parse_duration, ServerLimits, DURATION_HELP, IN_FLIGHT_MEMORY_MAX,
    IN_FLIGHT_MEMORY_MIN, MAX_CONNECTIONS_MAX,
};
pub use listen::{Listener, DEFAULT_LISTEN, LISTEN_HELP, NBD_PORT};
pub use remote_member::{
    RemoteSettings, REMOTE_CONNECTIONS_MAX, REMOTE_TIMEOUT_MAX, REMOTE_TIMEOUT_MIN,
};
pub use service::{parse_metrics_listen, ServiceSettings};
pub use size::{
    format_size, format_size_exact, parse_rate, parse_size, HumanSize, SizeError, SIZE_UNITS_HELP,
};
pub use spares::HealOptions;
pub use summary::{table, MemberSummary, Summary, VolumeMemberSummary, VolumeSummary};
pub use tls::{listener_policy, TlsMode, TlsSettings};
pub use tree::{STRIPE_UNIT_MAX, TREE_CHILDREN_MAX, TREE_DEPTH_MAX};
pub use volume_meta::{
    CreatePolicy, MetadataOptions, BITMAP_CHUNK_DEFAULT, BITMAP_CHUNK_MIN, CLEAN_DELAY_DEFAULT,
};

pub use nbraid_layout::{CacheMode, ReadPolicy};

use nbraid_layout::{Geometry, Level, Region, Shape};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Bytes at the start of every member kept for nbraid's metadata (superblock, later the
/// write-intent bitmap); no volume region begins before it.
pub const METADATA_RESERVED: u64 = 1 << 20;

/// Smallest member: the metadata reserve plus one 4 KiB block.
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
    /// Logical block size offered to clients: 512 or 4096.
    pub block_size: u32,
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

    /// The volume's tree on one line, members by id:
    /// `mirror(raid5:64KiB(d0 d1 d2), raid5:64KiB(d3 d4 d5))`.
    pub fn tree_text(&self, config: &Config) -> String {
        tree::tree_text(self.geometry.root(), &self.member_ids(config))
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

/// Reads and checks the config at `path`. Creates nothing; may stat member paths (read-only)
/// to learn the size of existing files and devices.
pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, path)
}

/// Checks config `text` as if read from `file` (named in errors; relative member paths and
/// Unix socket paths are resolved against its directory).
pub fn parse(text: &str, file: &Path) -> Result<Config, ConfigError> {
    resolve::parse(text, file)
}

impl Config {
    pub fn member(&self, id: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    pub fn volume(&self, name: &str) -> Option<&Volume> {
        self.volumes.iter().find(|v| v.name == name)
    }

    /// Facts per member and volume, for `nbraid check --json` and for printing.
    pub fn summary(&self) -> Summary {
        Summary::of(self)
    }

    /// The human summary (tables of members and volumes) that `nbraid check` and `nbraidd`
    /// print.
    pub fn explain(&self) -> String {
        self.summary().to_string()
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
            && self
                .volumes
                .iter()
                .filter(|v| v.members.contains(&m))
                .all(|v| self.volume_is_new(v))
    }
}

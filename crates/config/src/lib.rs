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
//! - **Metadata area budget.** Every volume on a member keeps its write-intent bitmap there,
//!   and a parity volume its write-hole log unless the log has a reserve before its region
//!   ([`metadata_area`]: the engine's rule, in file order). A log the area has no room left
//!   for (Matrix volumes before it filled it) gets a reserve of its ring in whole MiB, as if
//!   `write_hole_log_size` had asked for it; a bitmap it has no room for refuses the config.
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
mod control_path;
mod error;
mod field;
mod limits;
mod listen;
pub mod metadata_area;
mod model;
mod pins;
mod raw;
mod read;
mod remote_member;
mod resolve;
mod schema_error;
mod service;
mod size;
mod spares;
mod summary;
mod tls;
mod tree;
mod tree_spec;
mod volume_meta;
pub mod write_hole;

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
pub use model::{
    is_remote, Config, HealOptions, Member, MemberStorage, Volume, VolumeSize, BLOCK_SIZES,
    BLOCK_SIZE_DEFAULT, CACHE_SIZE_DEFAULT, JBOD_ALIGN, MEMBER_MIN, MEMORY_PATH, METADATA_RESERVED,
    REMOTE_SCHEMES, VOLUMES_PER_MEMBER_MAX, VOLUME_NAME_MAX_BYTES,
};
pub use remote_member::{
    RemoteSettings, REMOTE_CONNECTIONS_MAX, REMOTE_TIMEOUT_MAX, REMOTE_TIMEOUT_MIN,
};
pub use service::{parse_metrics_listen, ServiceSettings};
pub use size::{
    format_size, format_size_exact, parse_rate, parse_size, HumanSize, SizeError, SIZE_UNITS_HELP,
};
pub use summary::{table, MemberSummary, Summary, VolumeMemberSummary, VolumeSummary};
pub use tls::{listener_policy, TlsMode, TlsSettings};
pub use tree::{STRIPE_UNIT_MAX, TREE_CHILDREN_MAX, TREE_DEPTH_MAX};
pub use volume_meta::{
    checksum_area_bytes, CreatePolicy, MetadataOptions, BITMAP_CHUNK_DEFAULT, BITMAP_CHUNK_MIN,
    CLEAN_DELAY_DEFAULT, PPL_LOG_DEFAULT_RESERVE_BYTES, PPL_LOG_RESERVE_FROM_REGION_BYTES,
};

pub use control_path::control_socket_of;
pub use nbraid_layout::{CacheMode, ReadPolicy};
pub use pins::{Pins, RecordedPlace};
pub use read::{read_text, CONFIG_BYTES_MAX};

use std::path::Path;

/// Reads ([`read_text`]) and checks the config at `path`. Creates nothing; may stat member paths (read-only)
/// to learn the size of existing files and devices.
pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
    let path = path.as_ref();
    parse(&read_text(path)?, path)
}

/// [`load`], with existing volumes' regions where their records put them ([`Pins`]).
pub fn load_pinned(path: impl AsRef<Path>, pins: &Pins) -> Result<Config, ConfigError> {
    let path = path.as_ref();
    parse_pinned(&read_text(path)?, path, pins)
}

/// Checks config `text` as if read from `file` (named in errors; relative member paths and
/// Unix socket paths are resolved against its directory).
pub fn parse(text: &str, file: &Path) -> Result<Config, ConfigError> {
    resolve::parse(text, file, &Pins::new())
}

/// [`parse`], with existing volumes' regions where their records put them ([`Pins`]).
pub fn parse_pinned(text: &str, file: &Path, pins: &Pins) -> Result<Config, ConfigError> {
    resolve::parse(text, file, pins)
}

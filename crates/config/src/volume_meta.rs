//! A volume's on-disk metadata keys: `create` (what the daemon does with members that carry
//! no superblock yet), `bitmap_chunk` (bytes of the volume per write-intent bit) and
//! `clean_delay` (how long after the last write the volume is recorded clean: md's
//! safe_mode_delay; a write-intent region left alone as long has its bit cleared by the next
//! flush — with "off", after the default delay), `write_hole` (`"ppl"`, the default: RAID 5/6
//! groups log partial parity so a crash followed by a lost member never corrupts data nobody
//! wrote; `"off"`), `write_hole_log_size` (the log in a reserve of that many bytes before
//! the volume's region on every member, instead of 512 KiB in the 1 MiB metadata area: a
//! larger ring needs fewer member flushes to make room; without it, regions of 1 GiB or
//! more get 8 MiB, smaller ones keep the log in the metadata area unless their strips need a
//! larger ring or the volumes before them left no room for it there), `checksums` (`"on"`, the default: a
//! CRC-32C per 4 KiB block of every member region, kept in a reserve before the region — 8
//! bytes per block and a 4 KiB header, rounded up to 1 MiB —, verified on every read, bad
//! blocks rebuilt from the redundancy; `"off"`; `"enable"`: a volume created without them
//! gets them — no reserve before its regions, which never move: the area goes where each
//! member has room and a background pass computes the checksums), `checksum_error_limit` (a member that
//! returned more bad blocks than this is failed; default 100), `max_read_errors` (md's: a
//! member is failed once the redundancy corrected more of its read errors than this, a
//! count halved per hour without one; default 20, 0: never). Each is checked at its place
//! with what would be valid.

use super::error::{ErrorKind, Problem};
use super::limits::{format_duration, parse_duration, DURATION_HELP};
use super::raw::{RawSize, RawVolume};
use super::size::{format_size, no_unit, parse_size, SIZE_UNITS_HELP};
use serde_spanned::Spanned;
use std::fmt;
use std::time::Duration;

/// Default `bitmap_chunk`: the engine's default (64 MiB per bit; the engine grows it for
/// volumes so large that the bitmap would pass 64 KiB per member).
pub const BITMAP_CHUNK_DEFAULT: u64 = 64 << 20;
/// Least `bitmap_chunk`: one 4 KiB block per bit.
pub const BITMAP_CHUNK_MIN: u64 = 4 << 10;
/// Default `clean_delay`: a volume left alone this long is recorded clean, so a crash while
/// idle needs no resync (md's safe_mode_delay is 200 ms; each clean → dirty turn costs one
/// superblock write per member before the next write).
pub const CLEAN_DELAY_DEFAULT: Duration = Duration::from_secs(5);
/// Least `write_hole_log_size` (the engine refuses less than its smallest ring, which for
/// large strips may be more).
pub const PPL_LOG_MIN: u64 = 1 << 20;
/// Most `write_hole_log_size`.
pub const PPL_LOG_MAX: u64 = 1 << 30;
/// The log's reserve a parity volume gets without `write_hole_log_size` once its regions are
/// [`PPL_LOG_RESERVE_FROM_REGION_BYTES`] or more: a ring 16× the 512 KiB the metadata area
/// holds makes room with far fewer member flushes (write-back RAID 5 on a disk: 0.42 → 0.80
/// of the IOPS without the log, docs/benchmarks "The write path's CPU and the log").
pub const PPL_LOG_DEFAULT_RESERVE_BYTES: u64 = 8 << 20;
/// Regions from which a parity volume's log gets [`PPL_LOG_DEFAULT_RESERVE_BYTES`]: the
/// reserve then costs at most 1/128 of the capacity.
pub const PPL_LOG_RESERVE_FROM_REGION_BYTES: u64 = 1 << 30;
/// Default `checksum_error_limit` (md fails a member after 20 read errors it corrected in an
/// hour; a checksum error is as clear a sign, but one bad sector run spans several blocks).
pub const CHECKSUM_ERROR_LIMIT_DEFAULT: u64 = 100;
/// Default `max_read_errors`: md's (`MD_DEFAULT_MAX_CORRECTED_READ_ERRORS`).
pub const MAX_READ_ERRORS_DEFAULT: u32 = 20;

/// The log reserve of a parity volume without `write_hole_log_size`: what its strips need
/// (`strip_reserve`: `None` when the metadata area holds its ring), and at least
/// [`PPL_LOG_DEFAULT_RESERVE_BYTES`] over regions of [`PPL_LOG_RESERVE_FROM_REGION_BYTES`]
/// or more (`region_len`: the largest). `None`: the log stays in the metadata area. Pure.
pub fn default_log_reserve_bytes(strip_reserve: Option<u64>, region_len: u64) -> Option<u64> {
    match region_len >= PPL_LOG_RESERVE_FROM_REGION_BYTES {
        true => Some(
            strip_reserve
                .unwrap_or(0)
                .max(PPL_LOG_DEFAULT_RESERVE_BYTES),
        ),
        false => strip_reserve,
    }
}

/// Bytes the checksum reserve before a region of `region_len` bytes takes: a 4 KiB header
/// and 8 bytes per 4 KiB block in whole 4 KiB pages (the engine's `checksum::area_bytes`),
/// rounded up to 1 MiB so regions stay on MiB boundaries.
pub fn checksum_reserve_bytes(region_len: u64) -> u64 {
    checksum_area_bytes(region_len).next_multiple_of(1 << 20)
}

/// Bytes the checksum area of a region of `region_len` bytes takes: a 4 KiB header and 8
/// bytes per 4 KiB block in whole 4 KiB pages (the engine's `checksum::area_bytes`).
pub fn checksum_area_bytes(region_len: u64) -> u64 {
    let entries = region_len.div_ceil(4096) * 8;
    4096 + entries.next_multiple_of(4096)
}

/// What the daemon does when none of a volume's members carries its superblock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CreatePolicy {
    /// Create the array (superblocks, sync) when every member is new or blank: missing
    /// (created now, sparse), in memory, or with an all-zero metadata area and no superblock.
    /// Members holding anything else are refused, never overwritten.
    #[default]
    Auto,
    /// Refuse to serve until `nbraid create` has written the superblocks.
    Never,
}

impl fmt::Display for CreatePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CreatePolicy::Auto => "auto",
            CreatePolicy::Never => "never",
        })
    }
}

/// A volume's metadata settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetadataOptions {
    pub create: CreatePolicy,
    /// Bytes of the volume per write-intent bit (`None`: `bitmap_chunk = "off"`: every
    /// unclean start resyncs the whole volume).
    pub bitmap_chunk_bytes: Option<u64>,
    /// Record the volume clean after this long without writes (`None`: only at shutdown).
    pub clean_delay: Option<Duration>,
    /// `write_hole = "ppl"` (default): the partial-parity log closes the RAID 5/6 write hole.
    pub ppl: bool,
    /// `write_hole_log_size`: bytes reserved for the log before the volume's region on every
    /// member (`None`: the log lives in the metadata area).
    pub ppl_log_bytes: Option<u64>,
    /// `write_hole_log_size` as the config writes it. For an existing volume
    /// [`Self::ppl_log_bytes`] is its records' reserve (fixed at create), which this may
    /// differ from: `nbraid check` and `apply` say so.
    pub ppl_log_bytes_written: Option<u64>,
    /// `checksums = "on"` (default): per-block checksums in a reserve before the regions.
    pub checksums: bool,
    /// `checksums = "enable"`: a volume recorded without checksums gets them (no reserve
    /// before its regions; an area where the member has room and a background pass).
    pub checksums_enable: bool,
    /// The checksum reserve before the volume's region (and its log's reserve) on every
    /// member, sized from the region at placement (`None`: checksums off).
    pub checksum_reserve_bytes: Option<u64>,
    /// Bytes kept right after the regions for the checksum areas of an existing volume
    /// whose regions outgrew the reserve before them (`crate::Pins`): the most any member
    /// keeps (a JBOD's members that did not grow keep none); 0 otherwise.
    pub checksum_after_region_bytes: u64,
    /// `checksum_error_limit`: bad blocks a member may return before it is failed.
    pub checksum_error_limit: u64,
    /// `max_read_errors`: read errors the redundancy corrected (halved per hour without
    /// one) a member may return before it is failed; 0: never.
    pub max_read_errors: u32,
}

impl MetadataOptions {
    /// These settings without the log's size (`write_hole_log_size`: an existing array never
    /// takes a new one, which a reload says apart from the keys a restart takes).
    pub fn without_log_size(&self) -> MetadataOptions {
        MetadataOptions {
            ppl_log_bytes: None,
            ppl_log_bytes_written: None,
            ..*self
        }
    }
}

impl Default for MetadataOptions {
    fn default() -> Self {
        MetadataOptions {
            create: CreatePolicy::Auto,
            bitmap_chunk_bytes: Some(BITMAP_CHUNK_DEFAULT),
            clean_delay: Some(CLEAN_DELAY_DEFAULT),
            ppl: true,
            ppl_log_bytes: None,
            ppl_log_bytes_written: None,
            checksums: true,
            checksums_enable: false,
            checksum_reserve_bytes: None,
            checksum_after_region_bytes: 0,
            checksum_error_limit: CHECKSUM_ERROR_LIMIT_DEFAULT,
            max_read_errors: MAX_READ_ERRORS_DEFAULT,
        }
    }
}

fn is_off(v: &RawSize) -> bool {
    matches!(v, RawSize::Text(t) if t.trim().eq_ignore_ascii_case("off"))
}

/// The metadata keys of volume `v` (`who` names it in messages).
pub(crate) fn metadata_options(v: &RawVolume, who: &str) -> Result<MetadataOptions, Problem> {
    let mut opts = MetadataOptions::default();
    if let Some(c) = &v.create {
        opts.create = match c.get_ref().as_str() {
            "auto" => CreatePolicy::Auto,
            "never" => CreatePolicy::Never,
            other => {
                return Err(Problem::new(
                    c.span(),
                    ErrorKind::Option,
                    format!("{who}: create = \"{other}\" is not a policy; valid: \"auto\" (create the array on new or blank members), \"never\" (only `nbraid create` does)"),
                ))
            }
        };
    }
    if let Some(b) = &v.bitmap_chunk {
        opts.bitmap_chunk_bytes = if is_off(b.get_ref()) {
            None
        } else {
            Some(bitmap_chunk(b, who)?)
        };
    }
    if let Some(w) = &v.write_hole {
        opts.ppl = match w.get_ref().as_str() {
            "ppl" => true,
            "off" => false,
            other => {
                return Err(Problem::new(
                    w.span(),
                    ErrorKind::Option,
                    format!("{who}: write_hole = \"{other}\" is not a choice; valid: \"ppl\" (default: a partial-parity log closes the RAID 5/6 write hole), \"off\""),
                ))
            }
        };
    }
    if let Some(s) = &v.write_hole_log_size {
        if !opts.ppl {
            return Err(Problem::new(
                s.span(),
                ErrorKind::Option,
                format!("{who}: write_hole_log_size needs write_hole = \"ppl\" (the default); remove it"),
            ));
        }
        opts.ppl_log_bytes = Some(log_size(s, who)?);
        opts.ppl_log_bytes_written = opts.ppl_log_bytes;
    }
    checksum_keys(v, who, &mut opts)?;
    if let Some(l) = &v.max_read_errors {
        opts.max_read_errors = max_read_errors(l, who)?;
    }
    if let Some(d) = &v.clean_delay {
        opts.clean_delay = if is_off(d.get_ref()) {
            None
        } else {
            Some(clean_delay(d, who)?)
        };
    }
    Ok(opts)
}

/// `checksums` and `checksum_error_limit`.
fn checksum_keys(v: &RawVolume, who: &str, opts: &mut MetadataOptions) -> Result<(), Problem> {
    if let Some(c) = &v.checksums {
        (opts.checksums, opts.checksums_enable) = match c.get_ref().as_str() {
            "on" => (true, false),
            "off" => (false, false),
            "enable" => (false, true),
            other => {
                return Err(Problem::new(
                    c.span(),
                    ErrorKind::Option,
                    format!("{who}: checksums = \"{other}\" is not a choice; valid: \"on\" (default: a checksum per 4 KiB block, bad blocks rebuilt from the redundancy), \"off\", \"enable\" (a volume created without them gets them: its regions stay, a background pass computes them)"),
                ))
            }
        };
    }
    if let Some(l) = &v.checksum_error_limit {
        if !opts.checksums && !opts.checksums_enable {
            return Err(Problem::new(
                l.span(),
                ErrorKind::Option,
                format!(
                    "{who}: checksum_error_limit needs checksums = \"on\" (the default); remove it"
                ),
            ));
        }
        opts.checksum_error_limit = u64::try_from(*l.get_ref())
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| {
                Problem::new(
                    l.span(),
                    ErrorKind::Option,
                    format!("{who}: checksum_error_limit {} is out of range; give a count of at least 1 (default {CHECKSUM_ERROR_LIMIT_DEFAULT})", l.get_ref()),
                )
            })?;
    }
    Ok(())
}

fn max_read_errors(l: &Spanned<i64>, who: &str) -> Result<u32, Problem> {
    u32::try_from(*l.get_ref()).map_err(|_| {
        Problem::new(
            l.span(),
            ErrorKind::Option,
            format!("{who}: max_read_errors {} is out of range; give a count of corrected read errors from 0 (never fail a member for them) to {} (default {MAX_READ_ERRORS_DEFAULT})", l.get_ref(), u32::MAX),
        )
    })
}

fn bitmap_chunk(b: &Spanned<RawSize>, who: &str) -> Result<u64, Problem> {
    let bad = |msg: String| {
        Problem::new(
            b.span(),
            ErrorKind::Size,
            format!("{who}: bitmap_chunk {msg}"),
        )
    };
    let bytes = match b.get_ref() {
        RawSize::Int(i) => return Err(bad(no_unit(*i))),
        RawSize::Text(t) => parse_size(t)
            .map_err(|e| bad(format!("{e}; or \"off\" for no bitmap; {SIZE_UNITS_HELP}")))?,
    };
    if bytes < BITMAP_CHUNK_MIN || !bytes.is_power_of_two() {
        return Err(bad(format!(
            "{} must be a power of two of at least {} (default {}), or \"off\"",
            b.get_ref().shown(),
            format_size(BITMAP_CHUNK_MIN),
            format_size(BITMAP_CHUNK_DEFAULT)
        )));
    }
    Ok(bytes)
}

fn log_size(s: &Spanned<RawSize>, who: &str) -> Result<u64, Problem> {
    let bad = |msg: String| {
        Problem::new(
            s.span(),
            ErrorKind::Size,
            format!(
                "{who}: write_hole_log_size {msg}; give whole 4 KiB blocks from {} to {} (8 MiB suits most disks)",
                format_size(PPL_LOG_MIN),
                format_size(PPL_LOG_MAX)
            ),
        )
    };
    let bytes = match s.get_ref() {
        RawSize::Int(i) => return Err(bad(no_unit(*i))),
        RawSize::Text(t) => parse_size(t).map_err(|e| bad(format!("{e}; {SIZE_UNITS_HELP}")))?,
    };
    if !(PPL_LOG_MIN..=PPL_LOG_MAX).contains(&bytes) || !bytes.is_multiple_of(4096) {
        return Err(bad(format!("{} is out of range", s.get_ref().shown())));
    }
    Ok(bytes)
}

fn clean_delay(d: &Spanned<RawSize>, who: &str) -> Result<Duration, Problem> {
    let (min, max) = (Duration::from_millis(10), Duration::from_secs(3600));
    let bad = |msg: String| {
        Problem::new(
            d.span(),
            ErrorKind::Option,
            format!(
                "{who}: clean_delay {msg}; give {} to {}, or \"off\"",
                format_duration(min),
                format_duration(max)
            ),
        )
    };
    let t = match d.get_ref() {
        RawSize::Int(i) => return Err(bad(format!("{i} has no unit; {DURATION_HELP}"))),
        RawSize::Text(t) => parse_duration(t).map_err(bad)?,
    };
    if t < min || t > max {
        return Err(bad(format!("{} is out of range", d.get_ref().shown())));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use crate::{parse, CreatePolicy, ErrorKind};
    use std::path::Path;
    use std::time::Duration;

    fn volume(extra: &str) -> Result<crate::Config, crate::ConfigError> {
        let text = format!(
            "[[member]]\nid = \"a\"\npath = \"memory:\"\nsize = \"8MiB\"\n\
             [[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"a\"]\n{extra}\n"
        );
        parse(&text, Path::new("t.toml"))
    }

    #[test]
    fn defaults_and_values() {
        let m = volume("").unwrap().volumes[0].metadata;
        assert_eq!(m.create, CreatePolicy::Auto);
        assert_eq!(m.bitmap_chunk_bytes, Some(64 << 20));
        assert_eq!(m.clean_delay, Some(Duration::from_secs(5)));
        let m = volume("create = \"never\"\nbitmap_chunk = \"1MiB\"\nclean_delay = \"200ms\"")
            .unwrap()
            .volumes[0]
            .metadata;
        assert_eq!(m.create, CreatePolicy::Never);
        assert_eq!(m.bitmap_chunk_bytes, Some(1 << 20));
        assert_eq!(m.clean_delay, Some(Duration::from_millis(200)));
        let m = volume("bitmap_chunk = \"off\"\nclean_delay = \"off\"")
            .unwrap()
            .volumes[0]
            .metadata;
        assert_eq!((m.bitmap_chunk_bytes, m.clean_delay), (None, None));
        assert!(m.ppl);
        let m = volume("write_hole = \"off\"").unwrap().volumes[0].metadata;
        assert!(!m.ppl);
    }

    #[test]
    fn checksums_are_on_by_default_with_a_reserve_before_the_region() {
        let c = volume("").unwrap();
        let (m, r) = (c.volumes[0].metadata, c.volumes[0].regions[0]);
        assert!(m.checksums);
        assert_eq!(m.checksum_reserve_bytes, Some(1 << 20));
        assert_eq!(m.checksum_error_limit, super::CHECKSUM_ERROR_LIMIT_DEFAULT);
        // 8 MiB member: 1 MiB metadata, 1 MiB checksum reserve, 6 MiB region.
        assert_eq!((r.start, r.len), (2 << 20, 6 << 20));
        let c = volume("checksums = \"off\"").unwrap();
        let (m, r) = (c.volumes[0].metadata, c.volumes[0].regions[0]);
        assert!(!m.checksums);
        assert_eq!(m.checksum_reserve_bytes, None);
        assert_eq!((r.start, r.len), (1 << 20, 7 << 20));
        // "enable": placed as "off" (the regions of a volume created without them stay).
        let c = volume("checksums = \"enable\"\nchecksum_error_limit = 5").unwrap();
        let (m, r) = (c.volumes[0].metadata, c.volumes[0].regions[0]);
        assert!(m.checksums_enable && !m.checksums);
        assert_eq!(m.checksum_reserve_bytes, None);
        assert_eq!((r.start, r.len), (1 << 20, 7 << 20));
        let m = volume("checksum_error_limit = 5").unwrap().volumes[0].metadata;
        assert_eq!(m.checksum_error_limit, 5);
        for bad in [
            "checksums = \"maybe\"",
            "checksum_error_limit = 0",
            "checksums = \"off\"\nchecksum_error_limit = 5",
        ] {
            let e = volume(bad).unwrap_err();
            assert_eq!(e.kind(), Some(ErrorKind::Option), "{bad}: {e}");
        }
    }

    #[test]
    fn max_read_errors_defaults_to_mds_and_takes_a_count_or_zero() {
        let m = volume("").unwrap().volumes[0].metadata;
        assert_eq!(m.max_read_errors, super::MAX_READ_ERRORS_DEFAULT);
        assert_eq!(m.max_read_errors, 20);
        for (text, want) in [("max_read_errors = 5", 5), ("max_read_errors = 0", 0)] {
            let m = volume(text).unwrap().volumes[0].metadata;
            assert_eq!(m.max_read_errors, want, "{text}");
        }
        for bad in [
            "max_read_errors = -1",
            "max_read_errors = 4294967296",
            "max_read_errors = \"20\"",
        ] {
            let e = volume(bad).unwrap_err();
            assert!(e.to_string().contains("max_read_errors"), "{bad}: {e}");
        }
        let e = volume("max_read_errors = -1").unwrap_err();
        assert_eq!(e.kind(), Some(ErrorKind::Option), "{e}");
        // `nbraid check` says a limit other than md's.
        let said = |text: &str| volume(text).unwrap().explain();
        assert!(!said("").contains("read errors"), "{}", said(""));
        let five = said("max_read_errors = 5");
        assert!(
            five.contains("a member fails past 5 corrected read errors"),
            "{five}"
        );
        let zero = said("max_read_errors = 0");
        assert!(zero.contains("read errors never fail a member"), "{zero}");
    }

    #[test]
    fn the_checksum_reserve_holds_an_entry_per_block_in_whole_mib() {
        use super::checksum_reserve_bytes;
        assert_eq!(checksum_reserve_bytes(4096), 1 << 20);
        // 1 GiB: 2 MiB of entries and the header.
        assert_eq!(checksum_reserve_bytes(1 << 30), 3 << 20);
        assert_eq!(checksum_reserve_bytes(1 << 40), (2 << 30) + (1 << 20));
    }

    fn raid5(extra: &str) -> Result<crate::Config, crate::ConfigError> {
        let members: String = (0..3)
            .map(|i| format!("[[member]]\nid = \"m{i}\"\npath = \"memory:\"\nsize = \"64MiB\"\n"))
            .collect();
        let text = format!(
            "{members}[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nmembers = [\"m0\", \"m1\", \"m2\"]\n{extra}\n"
        );
        parse(&text, Path::new("t.toml"))
    }

    /// The log's reserve sits between the metadata area and the region on every member, and
    /// the capacity shrinks by it.
    #[test]
    fn large_regions_get_the_default_log_reserve_small_ones_keep_the_metadata_area() {
        use super::default_log_reserve_bytes as d;
        let (mib, gib) = (1u64 << 20, 1u64 << 30);
        assert_eq!(d(None, gib - 1), None);
        assert_eq!(d(Some(2 * mib), gib - 1), Some(2 * mib));
        assert_eq!(d(None, gib), Some(8 * mib));
        assert_eq!(d(Some(2 * mib), 4 * gib), Some(8 * mib));
        assert_eq!(d(Some(16 * mib), 4 * gib), Some(16 * mib));
    }

    #[test]
    fn write_hole_log_size_reserves_room_before_the_region() {
        let plain = raid5("").unwrap();
        assert_eq!(plain.volumes[0].metadata.ppl_log_bytes, None);
        let c = raid5("write_hole_log_size = \"8 MiB\"").unwrap();
        let v = &c.volumes[0];
        assert_eq!(v.metadata.ppl_log_bytes, Some(8 << 20));
        let sums = v.metadata.checksum_reserve_bytes.unwrap();
        for r in &v.regions {
            assert_eq!(r.start, crate::METADATA_RESERVED + sums + (8 << 20));
        }
        assert_eq!(plain.volumes[0].capacity() - v.capacity(), 2 * (8 << 20));
    }

    /// Every strip of RAID 5 and RAID 6 gets its log: inside the metadata area while its
    /// ring fits there, else in a reserve before the region sized from the strip (the
    /// capacity shrinks by it); a given size below the ring is refused, naming the need.
    #[test]
    fn every_strip_gets_room_for_its_write_hole_log() {
        let strips = std::iter::successors(Some(nbraid_layout::STRIP_MIN), |s| Some(s * 2))
            .take_while(|&s| s <= nbraid_layout::STRIP_MAX);
        for strip in strips {
            for level in ["raid5", "raid6"] {
                let members: String = (0..4)
                    .map(|i| {
                        format!(
                            "[[member]]\nid = \"m{i}\"\npath = \"memory:\"\nsize = \"256MiB\"\n"
                        )
                    })
                    .collect();
                let text = format!(
                    "{members}[[volume]]\nname = \"v\"\nlevel = \"{level}\"\nmembers = [\"m0\", \"m1\", \"m2\", \"m3\"]\nstrip_size = \"{strip}B\"\n"
                );
                let c = parse(&text, Path::new("t.toml")).unwrap();
                let v = &c.volumes[0];
                let root = v.geometry.root();
                let ring = nbraid_layout::volume_log_ring_bytes(root).unwrap();
                let what = format!("{level} strip {strip}: ring {ring}");
                match v.metadata.ppl_log_bytes {
                    None => assert!(
                        ring <= nbraid_layout::LOG_IN_METADATA_AREA_MAX_BYTES,
                        "{what}"
                    ),
                    Some(reserve) => {
                        assert!(reserve >= ring, "{what}: reserve {reserve}");
                        let sums = v.metadata.checksum_reserve_bytes.unwrap();
                        for r in &v.regions {
                            let start = crate::METADATA_RESERVED + sums + reserve;
                            assert_eq!(r.start, start, "{what}");
                        }
                    }
                }
            }
        }
        let e =
            raid5("strip_size = \"1MiB\"\nwrite_hole_log_size = \"1MiB\"").expect_err("too small");
        assert!(
            e.to_string()
                .contains("smaller than the log its strips need"),
            "{e}"
        );
    }

    #[test]
    fn write_hole_log_size_is_refused_where_it_cannot_apply() {
        for (text, kind, says) in [
            (
                raid5("write_hole_log_size = \"512KiB\""),
                ErrorKind::Size,
                "out of range",
            ),
            (
                raid5("write_hole_log_size = \"1MiB\"\nwrite_hole = \"off\""),
                ErrorKind::Option,
                "needs write_hole = \"ppl\"",
            ),
            (
                raid5("write_hole_log_size = \"64MiB\""),
                ErrorKind::Fit,
                "write-hole log of volume",
            ),
            (
                volume("write_hole_log_size = \"1MiB\""),
                ErrorKind::Option,
                "only to volumes with RAID 5/6 parity",
            ),
        ] {
            let e = text.expect_err(says);
            assert_eq!(e.kind(), Some(kind), "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    #[test]
    fn bad_values_are_located_and_explained() {
        for (extra, kind, says) in [
            ("create = \"yes\"", ErrorKind::Option, "valid: \"auto\""),
            ("bitmap_chunk = \"3MiB\"", ErrorKind::Size, "power of two"),
            ("bitmap_chunk = 512", ErrorKind::Size, "no unit"),
            ("bitmap_chunk = \"512B\"", ErrorKind::Size, "at least 4 KiB"),
            ("write_hole = \"journal\"", ErrorKind::Option, "\"ppl\""),
            ("clean_delay = 5", ErrorKind::Option, "no unit"),
            ("clean_delay = \"2h\"", ErrorKind::Option, "out of range"),
        ] {
            let e = volume(extra).expect_err(extra);
            assert_eq!(e.kind(), Some(kind), "{extra}: {e}");
            let text = e.to_string();
            assert!(text.contains(says), "{extra}: {text}");
            assert!(text.contains("t.toml:9:"), "{extra}: {text}");
        }
    }
}

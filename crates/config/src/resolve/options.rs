//! A volume's options (`spans`, `strip_size`, `parity_layout`, `read_policy`, `cache`,
//! `cache_size`, `block_size`): each parsed, defaulted, and refused where its level has no use
//! for it. Pure functions of the raw table.

use nbraid_layout::{CacheMode, Level, ParityLayout, ReadPolicy, STRIP_DEFAULT};

use super::cx::R;
use crate::error::{ErrorKind, Problem};
use crate::field::{size_field, strip_field};
use crate::model::{BLOCK_SIZES, BLOCK_SIZE_DEFAULT, CACHE_SIZE_DEFAULT};
use crate::raw::RawVolume;

/// A volume's options, checked against its level (`None`: a declared tree, checked against
/// its nodes later).
pub(super) struct VolumeOptions {
    pub spans: Option<usize>,
    pub strip: u64,
    pub parity_layout: ParityLayout,
    pub read_policy: ReadPolicy,
    pub cache: CacheMode,
    pub block_size: u32,
}

/// Every option of `v`, in the order their problems are reported.
pub(super) fn volume_options(v: &RawVolume, who: &str, level: Option<Level>) -> R<VolumeOptions> {
    Ok(VolumeOptions {
        spans: spans(v, who, level)?,
        strip: strip(v, who, level)?,
        parity_layout: parity_layout(v, who, level)?,
        read_policy: read_policy(v, who, level)?,
        cache: cache(v, who)?,
        block_size: block_size(v, who)?,
    })
}

fn spans(v: &RawVolume, who: &str, level: Option<Level>) -> R<Option<usize>> {
    match &v.spans {
        None => Ok(None),
        Some(s) if level.is_none() => Err(Problem::new(
            s.span(),
            ErrorKind::Members,
            format!("{who}: spans does not apply to a declared tree (its nodes say how members group); remove it"),
        )),
        Some(s) if *s.get_ref() < 1 => Err(Problem::new(
            s.span(),
            ErrorKind::Members,
            format!("{who}: spans = {} is not valid; spans is a count of at least 2 (for raid10, raid50, raid60)", s.get_ref()),
        )),
        Some(s) => Ok(Some(*s.get_ref() as usize)),
    }
}

fn strip(v: &RawVolume, who: &str, level: Option<Level>) -> R<u64> {
    let Some(s) = &v.strip_size else {
        return Ok(STRIP_DEFAULT);
    };
    if let Some(level @ (Level::Jbod | Level::Raid1)) = level {
        return Err(Problem::new(
            s.span(),
            ErrorKind::Option,
            format!("{who}: strip_size does not apply to {level} (it has no strips); remove it, or use a striped level (raid0, raid5, raid6, raid10, raid50, raid60)"),
        ));
    }
    strip_field(s, who, "strip_size")
}

fn parity_layout(v: &RawVolume, who: &str, level: Option<Level>) -> R<ParityLayout> {
    let Some(p) = &v.parity_layout else {
        return Ok(ParityLayout::default());
    };
    if let Some(level) = level.filter(|l| l.parity() == 0) {
        return Err(Problem::new(
            p.span(),
            ErrorKind::Option,
            format!("{who}: parity_layout does not apply to {level} (it has no parity); it applies to raid5, raid6, raid50, raid60"),
        ));
    }
    p.get_ref().parse().map_err(|e: String| {
        Problem::new(
            p.span(),
            ErrorKind::Option,
            format!("{who}: parity_layout: {e}"),
        )
    })
}

fn read_policy(v: &RawVolume, who: &str, level: Option<Level>) -> R<ReadPolicy> {
    let Some(p) = &v.read_policy else {
        return Ok(ReadPolicy::LeastPending);
    };
    if let Some(level) = level.filter(|l| !matches!(l, Level::Raid1 | Level::Raid10)) {
        return Err(Problem::new(
            p.span(),
            ErrorKind::Option,
            format!("{who}: read_policy does not apply to {level} (it has no mirrors); it applies to raid1 and raid10"),
        ));
    }
    p.get_ref()
        .parse()
        .map_err(|e: String| Problem::new(p.span(), ErrorKind::Option, format!("{who}: {e}")))
}

/// `cache`, and `cache_size` for a write-back cache only.
fn cache(v: &RawVolume, who: &str) -> R<CacheMode> {
    let mut cache = match &v.cache {
        None => CacheMode::WriteBack {
            bytes: CACHE_SIZE_DEFAULT,
        },
        Some(c) => CacheMode::from_name(c.get_ref(), CACHE_SIZE_DEFAULT)
            .map_err(|e| Problem::new(c.span(), ErrorKind::Option, format!("{who}: {e}")))?,
    };
    if let Some(c) = &v.cache_size {
        let CacheMode::WriteBack { bytes } = &mut cache else {
            return Err(Problem::new(
                c.span(),
                ErrorKind::Option,
                format!("{who}: cache_size applies only to cache = \"write-back\"; remove it or set cache = \"write-back\""),
            ));
        };
        *bytes = size_field(c, who, "cache_size")?;
    }
    Ok(cache)
}

fn block_size(v: &RawVolume, who: &str) -> R<u32> {
    let Some(b) = &v.block_size else {
        return Ok(BLOCK_SIZE_DEFAULT);
    };
    let ok = u32::try_from(*b.get_ref())
        .ok()
        .filter(|b| BLOCK_SIZES.contains(b));
    ok.ok_or_else(|| {
        Problem::new(
            b.span(),
            ErrorKind::Option,
            format!(
                "{who}: block_size {} is not supported; valid: 512, 4096",
                b.get_ref()
            ),
        )
    })
}

//! Random configs: whatever is asked, `parse` answers with a config whose regions are sound or
//! with one located error, and never panics. Case counts are sized for CI; `NBRAID_SOAK=1`
//! runs many more; `NBRAID_PROPS_TRACE=1` prints what each case came to.

use nbraid_config::{
    self as config, checksum_area_bytes, ConfigError, VolumeSize, JBOD_ALIGN, METADATA_RESERVED,
};
use nbraid_layout::Level;
use proptest::prelude::*;
use std::path::Path;

fn cases(default: u32) -> ProptestConfig {
    let n = if std::env::var_os("NBRAID_SOAK").is_some() {
        default * 50
    } else {
        default
    };
    ProptestConfig::with_cases(n)
}

#[derive(Clone, Debug)]
struct VolSpec {
    level: Level,
    /// Indices into the member list (may repeat or be out of range: both are errors).
    members: Vec<usize>,
    spans: Option<i64>,
    strip: Option<u64>,
    size: Option<u64>,
}

/// A volume over `n` members: mostly a valid choice for its level (enough distinct members,
/// spans that divide them, options that apply), sometimes a wrong one.
fn vol_spec(n: usize) -> impl Strategy<Value = VolSpec> {
    (
        prop::sample::select(Level::ALL.to_vec()),
        2usize..5,
        0usize..3,
    )
        .prop_flat_map(move |(level, spans, extra)| {
            // A valid member count: spans × (smallest span + extra), or min + extra.
            let (count, spans) = if level.has_spans() {
                let per = level.min_members() / 2 + extra.min(1);
                (spans * per, Some(spans as i64))
            } else {
                (level.min_members() + extra, None)
            };
            let count = count.min(n);
            let members = prop_oneof![
                12 => prop::sample::subsequence((0..n).collect::<Vec<_>>(), count).prop_shuffle(),
                1 => prop::collection::vec(0usize..n + 1, 1..9),
            ];
            let spans = prop_oneof![
                8 => Just(spans),
                2 => Just(None),
                1 => (0i64..4).prop_map(Some),
            ];
            let striped = !matches!(level, Level::Jbod | Level::Raid1);
            let strip = prop_oneof![
                4 => Just(None),
                8 => (12u32..21).prop_map(move |s| striped.then_some(1u64 << s)),
                1 => (1u64..(1 << 22)).prop_map(Some),
            ];
            let size = prop_oneof![
                3 => Just(None),
                2 => (1u64..(64 << 20)).prop_map(Some),
                1 => (1u64..(8 << 30)).prop_map(Some),
            ];
            (Just(level), members, spans, strip, size)
        })
        .prop_map(|(level, members, spans, strip, size)| VolSpec {
            level,
            members,
            spans,
            strip,
            size,
        })
}

/// Member sizes and volumes over them.
fn config_spec() -> impl Strategy<Value = (Vec<u64>, Vec<VolSpec>)> {
    prop_oneof![1 => 1usize..4, 6 => 6usize..14]
        .prop_flat_map(|n| {
            prop::collection::vec(
                prop_oneof![1 => (1u64 << 20)..(4 << 20), 8 => (16u64 << 20)..(1 << 31)],
                n,
            )
        })
        .prop_flat_map(|sizes| {
            let n = sizes.len();
            (Just(sizes), prop::collection::vec(vol_spec(n), 1..4))
        })
}

fn render(member_sizes: &[u64], vols: &[VolSpec]) -> String {
    let mut t = String::new();
    for (i, s) in member_sizes.iter().enumerate() {
        t.push_str(&format!(
            "[[member]]\nid = \"m{i}\"\npath = \"props/m{i}.img\"\nsize = {s}\n"
        ));
    }
    for (k, v) in vols.iter().enumerate() {
        let members: Vec<String> = v.members.iter().map(|m| format!("\"m{m}\"")).collect();
        t.push_str(&format!(
            "[[volume]]\nname = \"v{k}\"\nlevel = \"{}\"\nmembers = [{}]\n",
            v.level,
            members.join(", ")
        ));
        if let Some(s) = v.spans {
            t.push_str(&format!("spans = {s}\n"));
        }
        if let Some(s) = v.strip {
            t.push_str(&format!("strip_size = {s}\n"));
        }
        if let Some(s) = v.size {
            t.push_str(&format!("size = {s}\n"));
        }
    }
    t
}

fn located(e: &ConfigError, text: &str) {
    match e {
        ConfigError::Invalid {
            file, line, column, ..
        } => {
            assert_eq!(file, "props/arrays.toml");
            let lines: Vec<&str> = text.split('\n').collect();
            assert!(*line >= 1 && *line <= lines.len(), "{e}");
            assert!(
                *column >= 1 && *column <= lines[*line - 1].chars().count() + 1,
                "{e}"
            );
            assert_eq!(e.to_string().lines().count(), 1, "{e}");
        }
        ConfigError::Read { .. } => panic!("parse never reads the config: {e}"),
    }
}

proptest! {
    #![proptest_config(cases(512))]

    #[test]
    fn regions_are_disjoint_and_inside_members((member_sizes, vols) in config_spec()) {
        let text = render(&member_sizes, &vols);
        let config = match config::parse(&text, Path::new("props/arrays.toml")) {
            Ok(c) => c,
            Err(e) => {
                located(&e, &text);
                if std::env::var_os("NBRAID_PROPS_TRACE").is_some() {
                    eprintln!("ERR {e}");
                }
                return Ok(());
            }
        };
        if std::env::var_os("NBRAID_PROPS_TRACE").is_some() {
            eprintln!("OK {} volumes", config.volumes.len());
        }
        let mut taken: Vec<Vec<(u64, u64)>> = vec![Vec::new(); config.members.len()];
        for v in &config.volumes {
            prop_assert_eq!(v.members.len(), v.regions.len());
            for (&m, r) in v.members.iter().zip(&v.regions) {
                // A region of 0 bytes is one no record can describe (the volume would be
                // created once, then never assembled).
                prop_assert!(r.len > 0, "an empty region on m{}", m);
                // The checksum reserve before every region holds that region's area (the
                // daemon refuses to create the volume otherwise).
                if let Some(reserve) = v.metadata.checksum_reserve_bytes {
                    prop_assert!(checksum_area_bytes(r.len) <= reserve,
                        "m{}: a reserve of {} for a region of {}", m, reserve, r.len);
                }
                prop_assert!(r.start >= METADATA_RESERVED);
                prop_assert!(r.start + r.len <= config.members[m].size);
                for &(s, e) in &taken[m] {
                    prop_assert!(r.start >= e || r.start + r.len <= s,
                        "overlap on m{}: {:?} and {}..{}", m, r, s, e);
                }
                taken[m].push((r.start, r.start + r.len));
                // The write-hole log's reserve, right before the region (large strips).
                if let Some(log) = v.metadata.ppl_log_bytes {
                    prop_assert!(r.start >= METADATA_RESERVED + log);
                    taken[m].push((r.start - log, r.start));
                }
            }
            if v.level() == Some(Level::Jbod) {
                prop_assert!(v.regions.iter().all(|r| r.len % JBOD_ALIGN == 0));
                let sum: u64 = v.regions.iter().map(|r| r.len).sum();
                prop_assert_eq!(v.capacity(), sum);
            } else {
                let len = v.regions[0].len;
                prop_assert!(len > 0 && len % v.shape.as_ref().unwrap().strip == 0);
                prop_assert!(v.regions.iter().all(|r| r.len == len));
                prop_assert_eq!(v.capacity(), len * v.geometry.data_members() as u64);
            }
            if let VolumeSize::Bytes(b) = v.requested {
                prop_assert!(v.capacity() >= b);
            }
            let cap = v.capacity();
            prop_assert!(cap > 0);
            prop_assert!(v.geometry.map(cap - 1, 1).is_ok());
            prop_assert!(v.geometry.map(cap, 1).is_err());
        }
        let summary = config.summary();
        for (m, s) in summary.members.iter().enumerate() {
            let used: u64 = taken[m].iter().map(|(s, e)| e - s).sum();
            prop_assert_eq!(s.used_bytes, used);
        }
    }

    /// Any edit of a good config (bytes cut out, junk put in) gives a config or a located error.
    #[test]
    fn edited_configs_never_panic(
        which in 0usize..16,
        cut_at in any::<prop::sample::Index>(),
        cut_len in 0usize..40,
        insert in "[\\[\\]=,\"\\n#a-z0-9._ -]{0,12}",
    ) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        prop_assume!(!files.is_empty());
        let original = std::fs::read_to_string(&files[which % files.len()]).unwrap();
        let at = cut_at.index(original.len() + 1);
        let mut at = at.min(original.len());
        while !original.is_char_boundary(at) {
            at -= 1;
        }
        let mut end = (at + cut_len).min(original.len());
        while !original.is_char_boundary(end) {
            end -= 1;
        }
        let text = format!("{}{}{}", &original[..at], insert, &original[end..]);
        if let Err(e) = config::parse(&text, Path::new("props/arrays.toml")) {
            located(&e, &text);
        }
    }
}

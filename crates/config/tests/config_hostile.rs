//! A config is bytes from a user: every shipped example in `configs/`, mutated (bytes flipped,
//! cut short, a key given a hostile value — huge, negative, 0/1/3/2^40 strips, unicode,
//! duplicate ids, members listed twice, empty lists, trees nested in themselves), is loaded and
//! the layout it builds is mapped. The answer is a config or one located error — naming the
//! key when it points at the line the mutation wrote — never a panic, never an allocation out
//! of proportion with the text (the allocator below measures each), never a slow case.
//! Case counts are sized to run in seconds; `NBRAID_SOAK=1` runs many more.

use nbraid_config::{self as config, ConfigError};
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The system allocator, noting the largest single request of the thread measuring.
struct Measured;

thread_local! {
    static LARGEST_BYTES: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call goes to `System` unchanged; the note is a const-initialised
// thread-local `Cell` (no allocation, no destructor).
unsafe impl GlobalAlloc for Measured {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        System.realloc(ptr, layout, new_size)
    }
}

fn note(len: usize) {
    let _ = LARGEST_BYTES.try_with(|l| l.set(l.get().max(len)));
}

#[global_allocator]
static ALLOC: Measured = Measured;

/// The largest single allocation `f` made on this thread, with its result.
fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST_BYTES.with(|l| l.set(0));
    let out = f();
    (out, LARGEST_BYTES.with(Cell::get))
}

/// No single allocation of a case's parse and layout may exceed this: the config text is at
/// most a few KiB here, and nothing a config says is allocated by its size.
const ALLOCATION_MAX_BYTES: usize = 16 << 20;

/// A case taking longer than this is a finding too (a hostile count looped over).
const CASE_TIME_MAX: Duration = Duration::from_secs(2);

fn cases(default: u32) -> ProptestConfig {
    let n = match std::env::var_os("NBRAID_SOAK") {
        Some(_) => default * 50,
        None => default,
    };
    ProptestConfig::with_cases(n)
}

fn examples() -> Vec<(PathBuf, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no configs in {}", dir.display());
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            (f, text)
        })
        .collect()
}

/// Every key a `[[member]]`, `[[volume]]` or `[daemon]` table may hold, with hostile values.
const MEMBER_KEYS: &[&str] = &["id", "path", "size", "timeout", "connections"];
const VOLUME_KEYS: &[&str] = &[
    "name",
    "level",
    "tree",
    "members",
    "spans",
    "strip_size",
    "size",
    "parity_layout",
    "read_policy",
    "cache",
    "cache_size",
    "read_only",
    "block_size",
    "create",
    "bitmap_chunk",
    "clean_delay",
    "spares",
    "rebuild_rate",
    "write_hole",
    "write_hole_log_size",
    "checksums",
    "checksum_error_limit",
    "max_read_errors",
];
const DAEMON_KEYS: &[&str] = &[
    "listen",
    "max_connections",
    "max_handshakes",
    "payload_min_bytes_per_s",
    "in_flight_memory",
    "in_flight_memory_per_connection",
    "handshake_timeout",
    "idle_timeout",
    "stall_timeout",
    "tls",
    "tls_certificates",
    "control",
    "metrics_listen",
];

/// A tree nested `depth` times in itself: `{ mirror = [{ mirror = [ ... "d0" ...] }, "d1"] }`.
fn nested(kind: &str, depth: usize) -> String {
    let mut t = "\"d0\"".to_string();
    for _ in 0..depth {
        t = format!("{{ {kind} = [{t}, \"d1\"] }}");
    }
    t
}

/// Values no key should take quietly, and a few it should.
fn hostile_values() -> Vec<String> {
    let mut v: Vec<String> = [
        "0",
        "1",
        "3",
        "-1",
        "-4096",
        "4096",
        "512",
        "1099511627776", // 2^40
        "9223372036854775807",
        "-9223372036854775808",
        "\"0B\"",
        "\"1B\"",
        "\"3B\"",
        "\"1TiB\"",
        "\"1PiB\"",
        "\"8EiB\"",
        "\"16383PiB\"",
        "\"8191PiB\"",
        "\"4095PiB\"",
        "\"99999999999999999999999PiB\"",
        "\"1e300GiB\"",
        "\"-4KiB\"",
        "\"0.5B\"",
        "\"NaNGiB\"",
        "\"infKiB\"",
        "\"4KiB\"",
        "\"64KiB\"",
        "\"off\"",
        "\"all\"",
        "\"adaptive\"",
        "\"enable\"",
        "\"9999999d\"",
        "\"0s\"",
        "\"\"",
        "\"💾\"",
        "\"d\u{0301}0\"",
        "\"\u{202e}0d\"",
        "\"a\\u0000b\"",
        "\"../../../../dev/zero\"",
        "\"/dev/zero\"",
        "\"nbd://127.0.0.1:1/x\"",
        "\"nbd+unix:///x?socket=/nonexistent\"",
        "\"raid5\"",
        "\"raid6\"",
        "\"ppl\"",
        "true",
        "1.5",
        "nan",
        "inf",
        "[]",
        "[[]]",
        "{}",
        "[\"d0\", \"d0\"]",
        "[\"d0\", \"d1\", \"d0\"]",
        "[\"d0\", \"nope\"]",
        "[0, 1]",
        "{ mirror = [] }",
        "{ mirror = [\"d0\", \"d0\"] }",
        "{ raid5 = [\"d0\", \"d1\", \"d2\"], strip = 0 }",
        "{ raid5 = [\"d0\", \"d1\", \"d2\"], strip = 3 }",
        "{ raid5 = [\"d0\", \"d1\", \"d2\"], strip = 1099511627776 }",
        "{ stripe = [{ mirror = [\"d0\", \"d1\"] }, { mirror = [\"d2\", \"d3\"] }], strip = 1 }",
        "{ stripe = [{ mirror = [\"d0\", \"d1\"] }, { mirror = [\"d2\", \"d3\"] }], strip = -1 }",
        "{ concat = [\"d0\", { concat = [\"d0\", \"d1\"] }] }",
        "{ mirror = [\"d0\", \"d1\"], raid5 = [\"d2\", \"d3\", \"d4\"] }",
        "\"d0\"",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push(format!("\"{}\"", "x".repeat(5000)));
    v.push(format!("[{}]", vec!["\"d0\""; 3000].join(", ")));
    v.push(format!(
        "[{}]",
        (0..2000)
            .map(|i| format!("\"d{i}\""))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    for kind in ["mirror", "stripe", "concat", "raid5"] {
        v.push(nested(kind, 9));
        v.push(nested(kind, 200));
    }
    v
}

/// One mutation of a config's text.
#[derive(Clone, Debug)]
enum Mutation {
    /// XOR the byte at this index with a mask (the result may not be UTF-8: then skipped).
    Flip(prop::sample::Index, u8),
    /// Keep only the text before this index.
    Truncate(prop::sample::Index),
    /// Give `key` of the `table`-th table of its kind a value (replacing the key's line).
    Set {
        kind: TableKind,
        table: usize,
        key: &'static str,
        value: usize,
    },
    /// Give `key` of every `[[member]]` the same value (sizes that overflow only together).
    SetEveryMember { key: &'static str, value: usize },
    /// Give the `table`-th member the id of the first (a duplicate id).
    DuplicateId { table: usize },
    /// Repeat the `table`-th `[[member]]` or `[[volume]]` table as written.
    RepeatTable { kind: TableKind, table: usize },
}

#[derive(Clone, Copy, Debug)]
enum TableKind {
    Member,
    Volume,
    Daemon,
}

impl TableKind {
    fn header(self) -> &'static str {
        match self {
            TableKind::Member => "[[member]]",
            TableKind::Volume => "[[volume]]",
            TableKind::Daemon => "[daemon]",
        }
    }
}

fn mutation(values: usize) -> impl Strategy<Value = Mutation> {
    let key_of = |keys: &'static [&'static str]| prop::sample::select(keys.to_vec());
    prop_oneof![
        2 => (any::<prop::sample::Index>(), 1u8..=255).prop_map(|(i, m)| Mutation::Flip(i, m)),
        1 => any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        8 => (0usize..6, key_of(VOLUME_KEYS), 0..values).prop_map(|(table, key, value)| {
            Mutation::Set { kind: TableKind::Volume, table, key, value }
        }),
        3 => (0usize..8, key_of(MEMBER_KEYS), 0..values).prop_map(|(table, key, value)| {
            Mutation::Set { kind: TableKind::Member, table, key, value }
        }),
        1 => (key_of(DAEMON_KEYS), 0..values).prop_map(|(key, value)| Mutation::Set {
            kind: TableKind::Daemon,
            table: 0,
            key,
            value,
        }),
        1 => (key_of(MEMBER_KEYS), 0..values)
            .prop_map(|(key, value)| Mutation::SetEveryMember { key, value }),
        1 => (1usize..8).prop_map(|table| Mutation::DuplicateId { table }),
        1 => (0usize..4, prop_oneof![Just(TableKind::Member), Just(TableKind::Volume)])
            .prop_map(|(table, kind)| Mutation::RepeatTable { kind, table }),
    ]
}

/// The line range `[start, end)` of the `table`-th table of `kind` in `lines` (its header
/// included), if there is one.
fn table_lines(lines: &[String], kind: TableKind, table: usize) -> Option<(usize, usize)> {
    let start = (lines.iter().enumerate())
        .filter(|(_, l)| l.trim() == kind.header())
        .map(|(i, _)| i)
        .nth(table)?;
    let end = (start + 1..lines.len())
        .find(|&i| lines[i].trim_start().starts_with('['))
        .unwrap_or(lines.len());
    Some((start, end))
}

/// `text` mutated, and the 1-based line a `Set` wrote (the line an error about it points at).
fn apply(
    text: &str,
    m: &Mutation,
    values: &[String],
) -> Option<(String, Option<(usize, &'static str)>)> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    match m {
        Mutation::Flip(i, mask) => {
            let mut bytes = text.as_bytes().to_vec();
            let at = i
                .index(bytes.len().max(1))
                .min(bytes.len().saturating_sub(1));
            *bytes.get_mut(at)? ^= mask;
            return String::from_utf8(bytes).ok().map(|t| (t, None));
        }
        Mutation::Truncate(i) => {
            let mut at = i.index(text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            return Some((text[..at].to_string(), None));
        }
        Mutation::Set {
            kind,
            table,
            key,
            value,
        } => {
            let (start, end) = match table_lines(&lines, *kind, *table) {
                Some(r) => r,
                None if matches!(kind, TableKind::Daemon) => {
                    lines.insert(0, "[daemon]".into());
                    (0, 1)
                }
                None => return None,
            };
            // The key's own line(s) go; a multi-line value (a tree over lines) goes with it.
            let mut i = start + 1;
            let mut end = end;
            while i < end {
                let l = lines[i].trim_start();
                let is_key = l.starts_with(key) && l[key.len()..].trim_start().starts_with('=');
                if is_key {
                    let mut last = i;
                    if l.ends_with('[') || l.ends_with('{') {
                        while last + 1 < end && !lines[last].trim_end().ends_with('}') {
                            last += 1;
                        }
                    }
                    lines.drain(i..=last);
                    end -= last + 1 - i;
                } else {
                    i += 1;
                }
            }
            lines.insert(start + 1, format!("{key} = {}", values[*value]));
            return Some((lines.join("\n") + "\n", Some((start + 2, *key))));
        }
        Mutation::SetEveryMember { key, value } => {
            let mut text = text.to_string();
            for table in 0.. {
                let m = Mutation::Set {
                    kind: TableKind::Member,
                    table,
                    key,
                    value: *value,
                };
                match apply(&text, &m, values) {
                    Some((t, _)) => text = t,
                    None => break,
                }
            }
            return Some((text, None));
        }
        Mutation::DuplicateId { table } => {
            let (s0, e0) = table_lines(&lines, TableKind::Member, 0)?;
            let first = (s0..e0).find(|&i| lines[i].trim_start().starts_with("id"))?;
            let id = lines[first].clone();
            let (s, e) = table_lines(&lines, TableKind::Member, *table)?;
            let at = (s..e).find(|&i| lines[i].trim_start().starts_with("id"))?;
            lines[at] = id;
        }
        Mutation::RepeatTable { kind, table } => {
            let (s, e) = table_lines(&lines, *kind, *table)?;
            let copy: Vec<String> = lines[s..e].to_vec();
            lines.extend(copy);
        }
    }
    Some((lines.join("\n") + "\n", None))
}

/// The layout a config built, walked where a start would: each volume's first and last
/// byte mapped, one past the end refused, and the summary `nbraid check` prints.
fn walk(c: &config::Config) {
    for v in &c.volumes {
        let cap = v.capacity();
        assert!(cap > 0, "volume {} offers 0 bytes", v.name);
        assert!(v.geometry.map(0, 1).is_ok(), "{}: byte 0", v.name);
        assert!(
            v.geometry.map(cap - 1, 1).is_ok(),
            "{}: the last byte",
            v.name
        );
        assert!(v.geometry.map(cap, 1).is_err(), "{}: past the end", v.name);
        let _ = v.geometry.map(cap / 2, (cap / 2).min(16 << 20));
        for (&m, r) in v.members.iter().zip(&v.regions) {
            assert!(
                r.start + r.len <= c.members[m].size,
                "{}: region past m{m}",
                v.name
            );
        }
    }
    for m in &c.members {
        // Past the largest file offset nothing can be created, read or written.
        assert!(
            m.size <= i64::MAX as u64,
            "member {}: size {}",
            m.id,
            m.size
        );
    }
    let _ = c.summary().to_string();
    let _ = c.explain();
}

/// Direction overrides and isolates, zero-width marks, the BOM.
fn invisible(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

/// Whether `message` names `key`, or says what it is about in words a user reads as it (a
/// volume `size` that "does not fit").
fn names(message: &str, key: &str) -> bool {
    message.contains(key) || (key == "size" && message.contains("does not fit"))
}

fn located(e: &ConfigError, text: &str, set: Option<(usize, &str)>) {
    let ConfigError::Invalid {
        line,
        column,
        message,
        ..
    } = e
    else {
        panic!("parse never reads the config: {e}");
    };
    let lines: Vec<&str> = text.split('\n').collect();
    assert!(*line >= 1 && *line <= lines.len(), "{e}");
    assert!(
        *column >= 1 && *column <= lines[*line - 1].chars().count() + 1,
        "{e}"
    );
    assert!(!message.trim().is_empty(), "an empty message: {e}");
    // What the config carried into the message prints as what it is, and a hostile value of
    // thousands of characters is not repeated whole.
    assert!(
        !message.chars().any(|c| c.is_control() || invisible(c)),
        "an unprintable character in: {message:?}"
    );
    let longest_run = message
        .split(' ')
        .map(|w| w.chars().count())
        .max()
        .unwrap_or(0);
    assert!(
        longest_run <= 300,
        "a run of {longest_run} characters in: {e}"
    );
    // An error at the line a hostile value was written on names that key.
    if let Some((set_line, key)) = set {
        if *line == set_line && !message.contains("TOML parse error") {
            assert!(
                names(message, key),
                "line {set_line} sets {key}; the error does not name it: {e}\n{text}"
            );
        }
    }
}

/// `text` parsed (and walked, if it loads): the result, the largest single allocation in
/// bytes, and the time it took.
fn parse_measured(text: &str) -> (Result<config::Config, ConfigError>, usize, Duration) {
    let started = Instant::now();
    let (result, largest) = largest_allocation(|| {
        let parsed = config::parse(text, Path::new("hostile/arrays.toml"));
        if let Ok(c) = &parsed {
            walk(c);
        }
        parsed
    });
    (result, largest, started.elapsed())
}

proptest! {
    #![proptest_config(cases(384))]

    #[test]
    fn hostile_edits_of_every_example_load_or_name_the_key(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec(mutation(hostile_values().len()), 1..4),
    ) {
        let examples = examples();
        let values = hostile_values();
        let (file, original) = &examples[which.index(examples.len())];
        let mut text = original.clone();
        let mut set = None;
        for m in &edits {
            let Some((t, s)) = apply(&text, m, &values) else { continue };
            text = t;
            // Only the last edit's line is known to still be where it was written.
            set = s;
        }
        let (result, largest, took) = parse_measured(&text);
        prop_assert!(largest <= ALLOCATION_MAX_BYTES,
            "{}: an allocation of {largest} bytes for a {}-byte config:\n{text}", file.display(), text.len());
        prop_assert!(took <= CASE_TIME_MAX, "{}: {took:?}:\n{text}", file.display());
        if let Err(e) = &result {
            located(e, &text, set);
        }
    }
}

/// Every hostile value for every key of the first volume, member and daemon table of every
/// example, one at a time: the whole table of cases, not a sample.
#[test]
fn every_hostile_value_of_every_key() {
    let values = hostile_values();
    let tables = [
        (TableKind::Volume, VOLUME_KEYS),
        (TableKind::Member, MEMBER_KEYS),
        (TableKind::Daemon, DAEMON_KEYS),
    ];
    for (file, original) in examples() {
        for value in 0..values.len() {
            let m = Mutation::SetEveryMember { key: "size", value };
            let Some((text, _)) = apply(&original, &m, &values) else {
                continue;
            };
            let (result, largest, _) = parse_measured(&text);
            let what = format!("{}: every size = {}", file.display(), values[value]);
            assert!(
                largest <= ALLOCATION_MAX_BYTES,
                "{what}: an allocation of {largest} bytes"
            );
            if let Err(e) = &result {
                located(e, &text, None);
            }
        }
        for (kind, keys) in tables {
            for key in keys {
                for value in 0..values.len() {
                    let m = Mutation::Set {
                        kind,
                        table: 0,
                        key,
                        value,
                    };
                    let Some((text, set)) = apply(&original, &m, &values) else {
                        continue;
                    };
                    let (result, largest, took) = parse_measured(&text);
                    let what = format!("{}: {key} = {}", file.display(), values[value]);
                    if std::env::var_os("NBRAID_PROPS_TRACE").is_some() {
                        let got = result.as_ref().map(|_| "ok".to_string());
                        let shown: String = what.chars().take(120).collect();
                        eprintln!(
                            "{shown} => {largest} B: {}",
                            got.unwrap_or_else(|e| e.to_string())
                        );
                    }
                    assert!(
                        largest <= ALLOCATION_MAX_BYTES,
                        "{what}: an allocation of {largest} bytes"
                    );
                    assert!(took <= CASE_TIME_MAX, "{what}: {took:?}");
                    if let Err(e) = &result {
                        located(e, &text, set);
                    }
                }
            }
        }
    }
}

fn raid1(name: &str, id0: &str) -> String {
    format!(
        "[[member]]\nid = \"{id0}\"\npath = \"x/a.img\"\nsize = \"64MiB\"\n\
         [[member]]\nid = \"b\"\npath = \"x/b.img\"\nsize = \"64MiB\"\n\
         [[volume]]\nname = \"{name}\"\nlevel = \"raid1\"\nmembers = [\"{id0}\", \"b\"]\n"
    )
}

/// A name shown by status and events may not hide a direction override or a zero-width mark
/// (`"\u{202e}0d"` prints as `d0`); the error shows it escaped.
#[test]
fn an_invisible_character_in_a_name_is_refused_and_shown() {
    for (text, what) in [
        (raid1("db\u{202e}", "a"), "volume name"),
        (raid1("db", "a\u{200b}"), "member id"),
    ] {
        let e = config::parse(&text, Path::new("x/arrays.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(what), "{e}");
        assert!(e.contains("invisible character U+20"), "{e}");
        assert!(!e.contains('\u{202e}') && !e.contains('\u{200b}'), "{e:?}");
    }
}

/// A hostile value of thousands of characters is named, not repeated whole.
#[test]
fn a_huge_value_is_cut_in_the_error() {
    let text = raid1("db", "a").replace("\"64MiB\"", &format!("\"{}\"", "9".repeat(100_000)));
    let e = config::parse(&text, Path::new("x/arrays.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("size") && e.contains("more characters)"),
        "{}",
        &e[..e.len().min(600)]
    );
    assert!(e.len() < 2000, "{} bytes", e.len());
}

/// A member size past the largest file offset (`off_t`) is no size a file or device can have
/// (check showed a 16 EiB member "created sparse on assembly").
#[test]
fn a_member_larger_than_any_file_is_refused() {
    let text = raid1("db", "a").replacen("\"64MiB\"", "\"16383PiB\"", 1);
    let e = config::parse(&text, Path::new("x/arrays.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("member \"a\": size \"16383PiB\" is larger than any file or device can be"),
        "{e}"
    );
    let text = raid1("db", "a").replacen("\"64MiB\"", "\"8191PiB\"", 1);
    assert!(config::parse(&text, Path::new("x/arrays.toml")).is_ok());
}

/// Members each within the largest file offset but past it together: the volume's capacity
/// would wrap (`nbraid check` panicked adding three 8191 PiB JBOD members, and multiplying
/// RAID 0's).
#[test]
fn members_past_what_a_volume_can_address_are_refused() {
    for level in ["jbod", "raid0", "raid1"] {
        let text = raid1("db", "a")
            .replace("\"64MiB\"", "\"8191PiB\"")
            .replace("raid1", level);
        // Two members of 8191 PiB hold 16 EiB together, whatever the level makes of them.
        let e = config::parse(&text, Path::new("x/arrays.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("volume \"db\": its members hold")
                && e.contains("more than a volume can address"),
            "{level}: {e}"
        );
    }
}

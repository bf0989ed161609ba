//! From TOML text to a checked [`Config`]: schema errors located by toml, semantic errors
//! located by the spans of the fields they concern; member regions placed by [`super::allocate`].

use super::allocate::{allocate, Usage};
use super::error::{line_col, ErrorKind, Problem};
use super::field::{size_field, strip_field};
use super::listen::{Listener, DEFAULT_LISTEN, LISTEN_HELP};
use super::raw::{RawConfig, RawMember, RawSize, RawVolume};
use super::schema_error::{one_line, schema_problem};
use super::size::{format_size, format_size_exact};
use super::tls::TlsMode;
use super::tree::{self, Plan};
use super::volume_meta;
use super::{
    CacheMode, Config, ConfigError, Member, MemberStorage, ReadPolicy, Volume, VolumeSize,
    BLOCK_SIZES, BLOCK_SIZE_DEFAULT, CACHE_SIZE_DEFAULT, MEMBER_MIN, MEMORY_PATH,
    METADATA_RESERVED,
};
use nbraid_layout::{LayoutError, Level, Node, ParityLayout, Shape, STRIP_DEFAULT};
use serde_spanned::Spanned;
use std::collections::HashMap;
use std::io::{Seek, SeekFrom};
use std::ops::Range;
use std::path::{Component, Path, PathBuf};

type R<T> = Result<T, Problem>;

pub(super) fn parse(text: &str, file: &Path) -> Result<Config, ConfigError> {
    let located = |p: Problem| p.located(text, file);
    let raw: RawConfig = from_toml(text, file)?;
    let base = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let cx = Cx { text, base: &base };
    cx.resolve(raw, file).map_err(located)
}

/// `text` as `T`: not TOML is a syntax error, TOML that `T` does not take a schema error.
pub(super) fn from_toml<T: serde::de::DeserializeOwned>(
    text: &str,
    file: &Path,
) -> Result<T, ConfigError> {
    if let Err(e) = text.parse::<toml::Table>() {
        let span = e.span().unwrap_or(0..0);
        return Err(Problem::new(
            span,
            ErrorKind::Syntax,
            format!("not valid TOML: {}", one_line(e.message())),
        )
        .located(text, file));
    }
    toml::from_str(text).map_err(|e| schema_problem(text, &e).located(text, file))
}

/// Lexically cleans a path: drops `.`, folds `..` into the component before it.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if matches!(out.components().next_back(), Some(Component::Normal(_))) {
                    out.pop();
                } else {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

/// What is at a member path.
enum Probe {
    Missing,
    /// A RAM member: nothing on disk to look at.
    Memory,
    Remote,
    Found(MemberStorage, Option<(u64, u64)>),
    Unusable(String),
}

fn probe(path: &Path) -> Probe {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let md = match std::fs::metadata(path) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Probe::Missing,
        Err(e) => return Probe::Unusable(format!("cannot be inspected: {e}")),
    };
    let id = Some((md.dev(), md.ino()));
    let ft = md.file_type();
    if ft.is_file() {
        Probe::Found(MemberStorage::File { len: md.len() }, id)
    } else if ft.is_block_device() {
        let len = std::fs::File::open(path).and_then(|mut f| f.seek(SeekFrom::End(0)));
        match len {
            Ok(len) => Probe::Found(MemberStorage::BlockDevice { len }, id),
            Err(e) => Probe::Unusable(format!("is a block device whose size cannot be read: {e}")),
        }
    } else if ft.is_dir() {
        Probe::Unusable("is a directory; valid: a regular file or a block device".into())
    } else {
        Probe::Unusable("is neither a regular file nor a block device".into())
    }
}

/// What a volume gives for its geometry.
enum Given<'a> {
    Level(Level),
    Tree(&'a Spanned<tree::RawTree>),
}

struct Cx<'a> {
    text: &'a str,
    base: &'a Path,
}

mod member;

impl Cx<'_> {
    fn line(&self, span: &Range<usize>) -> usize {
        line_col(self.text, span.start).0
    }

    fn resolve(&self, raw: RawConfig, file: &Path) -> R<Config> {
        let (listen, own_tls) = self.listen(&raw)?;
        let limits = super::limits::resolve(raw.daemon.as_ref().map(|d| d.get_ref()))?;
        let bench = super::bench::resolve(raw.bench.as_ref(), "bench.", self.text)?;
        let tls = super::tls::resolve(
            raw.daemon.as_ref().map(|d| d.get_ref()),
            self.base,
            &own_tls,
        )?;
        let mut members: Vec<Member> = Vec::new();
        let mut spans: Vec<Range<usize>> = Vec::new();
        let mut ids: Vec<Option<(u64, u64)>> = Vec::new();
        for m in raw.member {
            let (member, id) = self.member(m.get_ref(), &members, &spans, &ids)?;
            members.push(member);
            spans.push(m.get_ref().id.span());
            ids.push(id);
        }
        if raw.volume.is_empty() {
            return Err(Problem::new(
                0..0,
                ErrorKind::Schema,
                "the config defines no volumes; add a [[volume]] table with name, level and members",
            ));
        }
        let mut usage: Vec<Usage> = members
            .iter()
            .map(|_| Usage {
                cursor: METADATA_RESERVED,
                users: Vec::new(),
            })
            .collect();
        let mut volumes: Vec<Volume> = Vec::new();
        let mut names: HashMap<String, usize> = HashMap::new();
        for v in &raw.volume {
            let span = v.span();
            let v = v.get_ref();
            let name = v.name.get_ref();
            if let Some(line) = names.get(name) {
                return Err(Problem::new(
                    v.name.span(),
                    ErrorKind::Duplicate,
                    format!(
                        "volume \"{name}\": duplicate volume name (first used at line {line}); \
                         volume names are NBD export names and must be unique"
                    ),
                ));
            }
            names.insert(name.clone(), self.line(&v.name.span()));
            volumes.push(self.volume(v, span, &members, &mut usage)?);
        }
        let raw_volumes: Vec<&RawVolume> = raw.volume.iter().map(|v| v.get_ref()).collect();
        super::spares::resolve(&raw_volumes, &mut volumes, &members)?;
        let control = match raw.daemon.as_ref().and_then(|d| d.get_ref().control.as_ref()) {
            Some(c) if c.get_ref().is_empty() => {
                return Err(Problem::new(
                    c.span(),
                    ErrorKind::Listen,
                    "daemon: control is empty; give the control socket's path, or remove it for the default (the config's path with .ctl)",
                ))
            }
            Some(c) => self.base.join(c.get_ref()),
            None => file.with_extension("ctl"),
        };
        let service = super::service::resolve(raw.daemon.as_ref().map(|d| d.get_ref()), self.base)?;
        Ok(Config {
            file: file.to_path_buf(),
            listen,
            limits,
            tls,
            control,
            service,
            bench,
            members,
            volumes,
        })
    }

    /// The listeners, each with its own TLS mode if its entry names one (and the entry's span).
    #[allow(clippy::type_complexity)]
    fn listen(&self, raw: &RawConfig) -> R<(Vec<Listener>, Vec<(Option<TlsMode>, Range<usize>)>)> {
        let Some(list) = raw
            .daemon
            .as_ref()
            .and_then(|d| d.get_ref().listen.as_ref())
        else {
            let default = Listener::parse(DEFAULT_LISTEN, self.base).expect("default parses");
            return Ok((vec![default], vec![(None, 0..0)]));
        };
        if list.get_ref().is_empty() {
            return Err(Problem::new(
                list.span(),
                ErrorKind::Listen,
                format!("daemon: listen is empty; give at least one address ({LISTEN_HELP}), or remove it for the default \"{DEFAULT_LISTEN}\""),
            ));
        }
        let mut out: Vec<Listener> = Vec::new();
        let mut own_tls = Vec::new();
        for a in list.get_ref() {
            let text = &a.get_ref().address;
            let tls = a
                .get_ref()
                .tls
                .as_deref()
                .map(TlsMode::parse)
                .transpose()
                .map_err(|why| {
                    Problem::new(
                        a.span(),
                        ErrorKind::Option,
                        format!("daemon: listen address \"{text}\": {why}"),
                    )
                })?;
            own_tls.push((tls, a.span()));
            let l = Listener::parse(text, self.base).map_err(|why| {
                Problem::new(
                    a.span(),
                    ErrorKind::Listen,
                    format!("daemon: listen address \"{text}\" is not valid: {why}; {LISTEN_HELP}"),
                )
            })?;
            if out.contains(&l) {
                return Err(Problem::new(
                    a.span(),
                    ErrorKind::Duplicate,
                    format!("daemon: listen address \"{text}\" is given twice"),
                ));
            }
            out.push(l);
        }
        Ok((out, own_tls))
    }

    /// A size field in bytes (`who`: `member "d0"`, `field`: `size`).
    fn size(&self, raw: &Spanned<RawSize>, who: &str, field: &str) -> R<u64> {
        size_field(raw, who, field)
    }

    fn volume(
        &self,
        v: &RawVolume,
        vspan: Range<usize>,
        members: &[Member],
        usage: &mut [Usage],
    ) -> R<Volume> {
        let name = v.name.get_ref().clone();
        check_name(&name, "volume name", v.name.span())?;
        if name.len() > 4096 {
            return Err(Problem::new(
                v.name.span(),
                ErrorKind::Name,
                "volume name is longer than NBD's 4096-byte limit for export names",
            ));
        }
        let who = format!("volume \"{name}\"");
        // A named level or a declared tree: exactly one.
        let given = match (&v.level, &v.tree) {
            (Some(_), Some(t)) => {
                return Err(Problem::new(
                    t.span(),
                    ErrorKind::Tree,
                    format!("{who}: gives both level and tree; give one: level names a RAID level (level = \"raid50\"), tree declares the nesting (tree = {{ mirror = [...] }})"),
                ))
            }
            (None, None) => {
                return Err(Problem::new(
                    vspan,
                    ErrorKind::Schema,
                    format!("{who}: missing field `level` (or `tree`, to declare the nesting)"),
                ))
            }
            (Some(l), None) => Given::Level(l.get_ref().parse().map_err(|e: String| {
                Problem::new(l.span(), ErrorKind::Level, format!("{who}: level: {e}"))
            })?),
            (None, Some(t)) => Given::Tree(t),
        };
        let level = match given {
            Given::Level(l) => Some(l),
            Given::Tree(_) => None,
        };

        // Members: known, each once.
        let listed = match &v.members {
            Some(list) => Some(self.member_list(&who, list.get_ref(), members)?),
            None if level.is_some() => {
                return Err(Problem::new(
                    vspan,
                    ErrorKind::Schema,
                    format!("{who}: missing field `members`"),
                ))
            }
            None => None,
        };

        let spans = match &v.spans {
            None => None,
            Some(s) if level.is_none() => {
                return Err(Problem::new(
                    s.span(),
                    ErrorKind::Members,
                    format!("{who}: spans does not apply to a declared tree (its nodes say how members group); remove it"),
                ))
            }
            Some(s) if *s.get_ref() < 1 => {
                return Err(Problem::new(
                    s.span(),
                    ErrorKind::Members,
                    format!("{who}: spans = {} is not valid; spans is a count of at least 2 (for raid10, raid50, raid60)", s.get_ref()),
                ))
            }
            Some(s) => Some(*s.get_ref() as usize),
        };

        let strip = match &v.strip_size {
            None => STRIP_DEFAULT,
            Some(s) => {
                if matches!(level, Some(Level::Jbod | Level::Raid1)) {
                    let level = level.expect("matched");
                    return Err(Problem::new(
                        s.span(),
                        ErrorKind::Option,
                        format!("{who}: strip_size does not apply to {level} (it has no strips); remove it, or use a striped level (raid0, raid5, raid6, raid10, raid50, raid60)"),
                    ));
                }
                strip_field(s, &who, "strip_size")?
            }
        };

        let parity_layout = match &v.parity_layout {
            None => ParityLayout::default(),
            Some(p) => {
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
                })?
            }
        };

        let read_policy = match &v.read_policy {
            None => ReadPolicy::LeastPending,
            Some(p) => {
                if let Some(level) = level.filter(|l| !matches!(l, Level::Raid1 | Level::Raid10)) {
                    return Err(Problem::new(
                        p.span(),
                        ErrorKind::Option,
                        format!("{who}: read_policy does not apply to {level} (it has no mirrors); it applies to raid1 and raid10"),
                    ));
                }
                p.get_ref().parse().map_err(|e: String| {
                    Problem::new(p.span(), ErrorKind::Option, format!("{who}: {e}"))
                })?
            }
        };

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
            *bytes = self.size(c, &who, "cache_size")?;
        }

        let block_size = match &v.block_size {
            None => BLOCK_SIZE_DEFAULT,
            Some(b) => {
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
                })?
            }
        };

        let (plan, idx) = match given {
            Given::Level(level) => {
                let idx: Vec<usize> = listed
                    .unwrap_or_default()
                    .into_iter()
                    .map(|m| m.0)
                    .collect();
                let shape = Shape::new(level, idx.len(), spans, strip, parity_layout)
                    .map_err(|e| self.shape_problem(&who, v, level, idx.len(), e))?;
                (Plan::Named(shape), idx)
            }
            Given::Tree(t) => {
                let input = tree::TreeInput {
                    text: self.text,
                    who: &who,
                    members,
                    listed,
                    strip_default: strip,
                    layout_default: parity_layout,
                };
                let d = tree::resolve(input, t)?;
                tree::check_volume_options(&who, v, &d)?;
                (Plan::Declared(d.spec), d.members)
            }
        };

        let requested = match &v.size {
            None => VolumeSize::All,
            Some(s) => match s.get_ref() {
                RawSize::Text(t) if t.eq_ignore_ascii_case("all") => VolumeSize::All,
                _ => VolumeSize::Bytes(self.size(s, &who, "size").map_err(|mut p| {
                    p.message.push_str(", or \"all\"");
                    p
                })?),
            },
        };
        let mut metadata = volume_meta::metadata_options(v, &who)?;
        // A log whose ring the metadata area cannot hold (large strips) gets a reserve sized
        // from the strip, as if `write_hole_log_size` had asked for it: every parity volume
        // has its log. The strips, hence the ring, do not depend on where regions start.
        if metadata.ppl && metadata.ppl_log_bytes.is_none() {
            let trial = allocate(&who, plan.sizing(), requested, &idx, members, usage)
                .ok()
                .and_then(|regions| plan.geometry(&regions).ok());
            metadata.ppl_log_bytes = trial.and_then(|g| nbraid_layout::log_reserve_bytes(g.root()));
        }
        // The write-hole log's reserve comes before the volume's region on every member.
        if let Some(log_bytes) = metadata.ppl_log_bytes {
            for &m in &idx {
                usage[m].cursor += log_bytes;
                let what = format!("the write-hole log of volume \"{name}\"");
                usage[m].users.push((what, log_bytes));
            }
        }
        let size_span = v.size.as_ref().map_or(v.name.span(), |s| s.span());
        let regions = allocate(&who, plan.sizing(), requested, &idx, members, usage)
            .map_err(|m| Problem::new(size_span.clone(), ErrorKind::Fit, m))?;
        let fit =
            |e: LayoutError| Problem::new(size_span.clone(), ErrorKind::Fit, format!("{who}: {e}"));
        let geometry = plan.geometry(&regions).map_err(fit)?;
        if geometry.capacity() == 0 {
            return Err(Problem::new(
                size_span.clone(),
                ErrorKind::Fit,
                format!(
                    "{who}: its members' regions ({} each) are too small to hold one stripe of the tree; give the members more room or a smaller strip",
                    format_size(regions.first().map_or(0, |r| r.len))
                ),
            ));
        }
        let logged = tree::any_node(geometry.root(), &|n| matches!(n, Node::Parity(_)));
        if let (false, Some(s)) = (logged, &v.write_hole_log_size) {
            return Err(Problem::new(
                s.span(),
                ErrorKind::Option,
                format!("{who}: write_hole_log_size applies only to volumes with RAID 5/6 parity (raid5, raid6, raid50, raid60 or a tree with a parity node); remove it"),
            ));
        }
        let ring = nbraid_layout::volume_log_ring_bytes(geometry.root());
        if let (Some(s), Some(given), Some(need)) =
            (&v.write_hole_log_size, metadata.ppl_log_bytes, ring)
        {
            if given < need {
                return Err(Problem::new(
                    s.span(),
                    ErrorKind::Option,
                    format!(
                        "{who}: write_hole_log_size {} is smaller than the log its strips need ({}: two of the largest stripe write's entries); give at least \"{}\", or remove it to have it sized from the strip",
                        format_size(given),
                        format_size(need),
                        format_size_exact(need.next_multiple_of(1 << 20))
                    ),
                ));
            }
        }
        for (&m, r) in idx.iter().zip(&regions) {
            usage[m].cursor = r.start + r.len;
            if r.len > 0 {
                usage[m].users.push((format!("volume \"{name}\""), r.len));
            }
        }

        if let (true, Some(cache_size)) = (
            tree::any_node(geometry.root(), &|n| matches!(n, Node::Parity(_))),
            cache.cache_bytes(),
        ) {
            let width = geometry.full_stripe_width().unwrap_or(0);
            if cache_size < width {
                let span = v.cache_size.as_ref().map_or(v.name.span(), |c| c.span());
                return Err(Problem::new(
                    span,
                    ErrorKind::Option,
                    format!(
                        "{who}: cache_size {} is smaller than one full stripe ({}); set cache_size = \"{}\" or more",
                        format_size(cache_size),
                        format_size(width),
                        format_size_exact(width)
                    ),
                ));
            }
        }

        Ok(Volume {
            name,
            shape: plan.into_shape(),
            members: idx,
            regions,
            geometry,
            requested,
            read_policy,
            cache,
            read_only: v.read_only.unwrap_or(false),
            block_size,
            metadata,
            heal: Default::default(),
        })
    }

    /// A volume's `members`: config indices and the span of each entry; each known, each once.
    fn member_list(
        &self,
        who: &str,
        list: &[Spanned<String>],
        members: &[Member],
    ) -> R<Vec<(usize, Range<usize>)>> {
        let mut idx: Vec<(usize, Range<usize>)> = Vec::new();
        for m in list {
            let id = m.get_ref();
            let Some(i) = members.iter().position(|x| &x.id == id) else {
                let defined = defined_members(members);
                return Err(Problem::new(
                    m.span(),
                    ErrorKind::UnknownMember,
                    format!("{who}: members: unknown member \"{id}\"; defined members: {defined}"),
                ));
            };
            if idx.iter().any(|(j, _)| *j == i) {
                return Err(Problem::new(
                    m.span(),
                    ErrorKind::Duplicate,
                    format!("{who}: members: member \"{id}\" is listed twice; a member can give a volume only one column"),
                ));
            }
            idx.push((i, m.span()));
        }
        Ok(idx)
    }

    /// A shape error located at the field to change, with the valid choices.
    fn shape_problem(
        &self,
        who: &str,
        v: &RawVolume,
        level: Level,
        n: usize,
        e: LayoutError,
    ) -> Problem {
        let spans_span = v.spans.as_ref().map(|s| s.span());
        let members_span = v.members.as_ref().map_or(v.name.span(), |m| m.span());
        match e {
            LayoutError::TooFewMembers { .. } => Problem::new(
                members_span,
                ErrorKind::Members,
                format!("{who}: members: {e}"),
            ),
            LayoutError::SpansNotAllowed { .. } => Problem::new(
                spans_span.unwrap_or(members_span),
                ErrorKind::Members,
                format!("{who}: {e}; remove spans"),
            ),
            LayoutError::SpansDontDivide { .. } | LayoutError::SpanTooSmall { .. } => {
                let valid: Vec<String> = (2..=n)
                    .filter(|&s| {
                        Shape::new(level, n, Some(s), STRIP_DEFAULT, ParityLayout::default())
                            .is_ok()
                    })
                    .map(|s| s.to_string())
                    .collect();
                let default = if v.spans.is_none() {
                    format!(
                        " (spans defaults to {} for {level})",
                        level.default_spans(n)
                    )
                } else {
                    String::new()
                };
                let hint = if valid.is_empty() {
                    format!("no spans value works for {n} members of {level}")
                } else {
                    format!("valid spans for {n} members: {}", valid.join(", "))
                };
                Problem::new(
                    spans_span.unwrap_or(members_span),
                    ErrorKind::Members,
                    format!("{who}: {e}{default}; {hint}"),
                )
            }
            other => Problem::new(v.name.span(), ErrorKind::Members, format!("{who}: {other}")),
        }
    }
}

/// "d0, d1, d2", or what to do when no member is defined: for unknown-member messages.
pub(super) fn defined_members(members: &[Member]) -> String {
    if members.is_empty() {
        return "none yet; add [[member]] tables".into();
    }
    let ids: Vec<&str> = members.iter().map(|m| m.id.as_str()).collect();
    ids.join(", ")
}

fn state_len(state: MemberStorage) -> u64 {
    match state {
        MemberStorage::Missing | MemberStorage::Memory | MemberStorage::Remote => 0,
        MemberStorage::File { len } | MemberStorage::BlockDevice { len } => len,
    }
}

fn check_name(name: &str, what: &str, span: Range<usize>) -> R<()> {
    if name.is_empty() {
        return Err(Problem::new(
            span,
            ErrorKind::Name,
            format!("{what} is empty"),
        ));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Problem::new(
            span,
            ErrorKind::Name,
            format!("{what} \"{name}\" contains whitespace or control characters; use letters, digits, '-', '_' or '.'"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_lexically() {
        assert_eq!(normalize(Path::new("./a/./b/../c")), PathBuf::from("a/c"));
        assert_eq!(normalize(Path::new("../x")), PathBuf::from("../x"));
        assert_eq!(normalize(Path::new("/a/b/../../c")), PathBuf::from("/c"));
        assert_eq!(normalize(Path::new(".")), PathBuf::from("."));
    }
}

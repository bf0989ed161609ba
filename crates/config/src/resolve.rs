//! From TOML text to a checked [`Config`]: schema errors located by toml, semantic errors
//! located by the spans of the fields they concern; member regions placed by [`super::allocate`].

use super::allocate::Usage;
use super::error::{ErrorKind, Problem};
use super::field::size_field;
use super::listen::{Listener, DEFAULT_LISTEN, LISTEN_HELP};
use super::raw::{RawConfig, RawSize, RawTree, RawVolume};
use super::schema_error::from_toml;
use super::size::{format_size, format_size_exact};
use super::tls::TlsMode;
use super::tree;
use super::tree_spec::Plan;
use super::volume_meta::{self, MetadataOptions};
use crate::error::ConfigError;
use crate::model::{
    defined_members, Config, Member, Volume, VolumeSize, METADATA_RESERVED, VOLUME_NAME_MAX_BYTES,
};
use nbraid_layout::CacheMode;
use nbraid_layout::{
    Geometry, LayoutError, Level, Node, ParityLayout, Region, Shape, STRIP_DEFAULT,
};
use serde_spanned::Spanned;
use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

pub(super) fn parse(text: &str, file: &Path, pins: &crate::Pins) -> Result<Config, ConfigError> {
    let located = |p: Problem| p.located(text, file);
    let raw: RawConfig = from_toml(text, file)?;
    let base = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let cx = Cx {
        text,
        base: &base,
        pins,
    };
    cx.resolve(raw, file).map_err(located)
}

/// Lexically cleans a path: drops `.`, folds `..` into the component before it.
/// A volume's `members` as config indices, each with the span of its entry.
type Listed = Vec<(usize, Range<usize>)>;

/// What a volume declares its layout with.
enum Given<'a> {
    Level(Level),
    Tree(&'a Spanned<RawTree>),
}

impl Given<'_> {
    /// The named level; `None` for a declared tree.
    fn level(&self) -> Option<Level> {
        match self {
            Given::Level(l) => Some(*l),
            Given::Tree(_) => None,
        }
    }
}

mod cx;
mod least;
mod member;
mod meta_area;
mod options;
mod pinned;
mod placement;
mod placing;

use cx::{check_name, Cx, R};
use member::{MemberTable, Small};
use meta_area::{Areas, Claim};
use placement::Placement;
use placing::Placing;

/// A volume's declaration, checked: what it is, before where it goes.
struct Declared {
    name: String,
    /// How messages name the volume: `volume "v0"`.
    who: String,
    plan: Plan,
    /// Its members in layout order, by index in the config's members.
    idx: Vec<usize>,
    opts: options::VolumeOptions,
    requested: VolumeSize,
    /// The metadata its settings ask for, before any reserve is sized.
    asked: MetadataOptions,
}

/// The volume names used so far, each with the line it was first used at: a name is an NBD
/// export name, so used once.
#[derive(Default)]
struct VolumeNames {
    first_line: HashMap<String, usize>,
}

impl VolumeNames {
    /// Takes `name` (used at `line`); `Err(first_line)` when it was used before.
    fn claim(&mut self, name: &str, line: usize) -> Result<(), usize> {
        if let Some(&first_line) = self.first_line.get(name) {
            return Err(first_line);
        }
        self.first_line.insert(name.to_string(), line);
        Ok(())
    }
}

/// Volume `v` uses the name a volume before it took at `first_line`.
fn duplicate_volume(v: &RawVolume, first_line: usize) -> Problem {
    let name = v.name.get_ref();
    Problem::new(
        v.name.span(),
        ErrorKind::Duplicate,
        format!(
            "volume \"{name}\": duplicate volume name (first used at line {first_line}); \
             volume names are NBD export names and must be unique"
        ),
    )
}

/// A config with no `[[volume]]` table.
fn no_volumes() -> Problem {
    Problem::new(
        0..0,
        ErrorKind::Schema,
        "the config defines no volumes; add a [[volume]] table with name, level and members",
    )
}

/// The control socket's path: `given` (relative to the config's directory `base`), or by
/// default the config `file`'s path with `.ctl`. An empty one is refused.
fn control_path(given: Option<&Spanned<String>>, base: &Path, file: &Path) -> R<PathBuf> {
    match given {
        Some(c) if c.get_ref().is_empty() => Err(Problem::new(
            c.span(),
            ErrorKind::Listen,
            "daemon: control is empty; give the control socket's path, or remove it for the default (the config's path with .ctl)",
        )),
        Some(c) => Ok(base.join(c.get_ref())),
        None => Ok(file.with_extension("ctl")),
    }
}

impl Cx<'_> {
    /// The checks run in this order, so the first problem reported stays the same: the
    /// daemon's listeners, limits, bench and TLS settings, the members, the volumes (and
    /// their spares), the control socket, the service settings.
    fn resolve(&self, raw: RawConfig, file: &Path) -> R<Config> {
        let daemon = raw.daemon.as_ref().map(|d| d.get_ref());
        let (listen, own_tls) = self.listen(&raw)?;
        let limits = super::limits::resolve(daemon)?;
        let bench = super::bench::resolve(raw.bench.as_ref(), "bench.", self.text)?;
        let tls = super::tls::resolve(daemon, self.base, &own_tls)?;
        let table = MemberTable::read(self, &raw.member)?;
        let volumes = self.volumes(&raw.volume, &table)?;
        let members = table.members;
        let given = daemon.and_then(|d| d.control.as_ref());
        let control = control_path(given, self.base, file)?;
        let span = given.map_or(0..0, |c| c.span());
        crate::control_path::check(&control, file, &members, &listen, span)?;
        let service = super::service::resolve(daemon, self.base)?;
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

    /// The volumes in file order, each placed on its members after those before it; then
    /// their spares. A member too small for any volume is refused naming the first volume
    /// on it, or — none uses it — what any volume needs.
    fn volumes(&self, raw: &[Spanned<RawVolume>], table: &MemberTable) -> R<Vec<Volume>> {
        let members = &table.members;
        if raw.is_empty() {
            return Err(table.small.first().map_or_else(no_volumes, Small::unused));
        }
        let mut usage: Vec<Usage> = members
            .iter()
            .map(|_| Usage {
                cursor: METADATA_RESERVED,
                ..Usage::default()
            })
            .collect();
        let mut names = VolumeNames::default();
        let mut volumes: Vec<Volume> = Vec::with_capacity(raw.len());
        for v in raw {
            let (vspan, v) = (v.span(), v.get_ref());
            let line = self.line(&v.name.span());
            names
                .claim(v.name.get_ref(), line)
                .map_err(|first_line| duplicate_volume(v, first_line))?;
            volumes.push(self.volume(v, vspan, members, &table.small, &mut usage)?);
        }
        let unused = |s: &&Small| !volumes.iter().any(|v| v.members.contains(&s.member));
        if let Some(s) = table.small.iter().find(unused) {
            return Err(s.unused());
        }
        let raw_volumes: Vec<&RawVolume> = raw.iter().map(|v| v.get_ref()).collect();
        let sizes_checked = !self.pins.is_finding_short_members();
        super::spares::resolve(&raw_volumes, &mut volumes, members, sizes_checked)?;
        Ok(volumes)
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

    /// Volume `v` (its table at `vspan`), placed on its members after the volumes before it
    /// (`usage`). The checks run in this order, so the first problem reported stays the same:
    /// its declaration ([`Self::declared`]), then its metadata and placement.
    fn volume(
        &self,
        v: &RawVolume,
        vspan: Range<usize>,
        members: &[Member],
        small: &[Small],
        usage: &mut [Usage],
    ) -> R<Volume> {
        let d = self.declared(v, vspan, members)?;
        let placing = Placing {
            at: Placement {
                who: &d.who,
                plan: &d.plan,
                requested: d.requested,
                idx: &d.idx,
                members,
            },
            name: &d.name,
            asked: d.asked,
            pins: self.pins,
        };
        let mut metadata = placing.with_reserves(usage);
        let recorded = placing.recorded();
        if !recorded {
            placing.at.refuse_small(small, &metadata, usage)?;
        }
        let (regions, geometry) = placing.place(v, &mut metadata, usage)?;
        check_log_size(v, &d.who, &geometry, metadata.ppl_log_bytes)?;
        check_cache_holds_a_stripe(v, &d.who, &geometry, &d.opts.cache)?;
        let trial = self.pins.is_before_default_log();
        let claim = Claim::for_volume(recorded, trial, placing.at.remote());
        let areas = Areas::new(&d.who, &d.idx, members, &geometry, &metadata);
        areas.claim(v, &d.name, claim, usage)?;
        // A disk's sector size never changes under its data: an existing volume is served
        // with the block size its records keep.
        let block_size = self.pins.block_size(&d.name).unwrap_or(d.opts.block_size);
        Ok(Volume {
            name: d.name,
            shape: d.plan.into_shape(),
            members: d.idx,
            regions,
            geometry,
            requested: d.requested,
            read_policy: d.opts.read_policy,
            cache: d.opts.cache,
            read_only: v.read_only.unwrap_or(false),
            block_size,
            block_size_written: d.opts.block_size,
            metadata,
            heal: Default::default(),
        })
    }

    /// Volume `v`'s declaration, checked in this order: name, level or tree, members,
    /// options, shape, size, metadata settings.
    fn declared(&self, v: &RawVolume, vspan: Range<usize>, members: &[Member]) -> R<Declared> {
        let (name, who) = volume_name(v)?;
        let given = given(v, vspan.clone(), &who)?;
        let level = given.level();
        let listed = self.listed_members(v, vspan, &who, level, members)?;
        let opts = options::volume_options(v, &who, level)?;
        let (plan, idx) = self.plan(v, &who, given, listed, &opts, members)?;
        members_addressable(&who, &idx, members, v.name.span())?;
        let requested = requested_size(v, &who)?;
        let asked = volume_meta::metadata_options(v, &who)?;
        Ok(Declared {
            name,
            who,
            plan,
            idx,
            opts,
            requested,
            asked,
        })
    }

    /// The volume's `members`: required with a level, optional (the tree names them) with a
    /// tree.
    fn listed_members(
        &self,
        v: &RawVolume,
        vspan: Range<usize>,
        who: &str,
        level: Option<Level>,
        members: &[Member],
    ) -> R<Option<Listed>> {
        match &v.members {
            Some(list) => Ok(Some(self.member_list(who, list.get_ref(), members)?)),
            None if level.is_some() => Err(Problem::new(
                vspan,
                ErrorKind::Schema,
                format!("{who}: missing field `members`"),
            )),
            None => Ok(None),
        }
    }

    /// The layout plan and the volume's members in layout order: a named level's shape over
    /// the listed members, or a declared tree resolved with the options as its defaults.
    fn plan(
        &self,
        v: &RawVolume,
        who: &str,
        given: Given,
        listed: Option<Listed>,
        opts: &options::VolumeOptions,
        members: &[Member],
    ) -> R<(Plan, Vec<usize>)> {
        match given {
            Given::Level(level) => {
                let idx: Vec<usize> = listed
                    .unwrap_or_default()
                    .into_iter()
                    .map(|m| m.0)
                    .collect();
                let shape =
                    Shape::new(level, idx.len(), opts.spans, opts.strip, opts.parity_layout)
                        .map_err(|e| self.shape_problem(who, v, level, idx.len(), e))?;
                Ok((Plan::Named(shape), idx))
            }
            Given::Tree(t) => {
                let input = tree::TreeInput {
                    text: self.text,
                    who,
                    members,
                    listed,
                    strip_default: opts.strip,
                    layout_default: opts.parity_layout,
                };
                let d = tree::resolve(input, t)?;
                tree::check_volume_options(who, v, &d)?;
                Ok((Plan::Declared(d.spec), d.members))
            }
        }
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

/// The volume's name (checked: no whitespace, at most the [`VOLUME_NAME_MAX_BYTES`] a
/// superblock record holds) and how messages name the volume.
fn volume_name(v: &RawVolume) -> R<(String, String)> {
    let name = v.name.get_ref().clone();
    check_name(&name, "volume name", v.name.span())?;
    if name.len() > VOLUME_NAME_MAX_BYTES {
        return Err(Problem::new(
            v.name.span(),
            ErrorKind::Name,
            format!(
                "volume name \"{name}\" is {} bytes long; a volume's superblock records hold names of at most {VOLUME_NAME_MAX_BYTES} bytes (it is also the NBD export name): give a shorter name",
                name.len()
            ),
        ));
    }
    let who = format!("volume \"{name}\"");
    Ok((name, who))
}

/// A named level or a declared tree: exactly one.
fn given<'a>(v: &'a RawVolume, vspan: Range<usize>, who: &str) -> R<Given<'a>> {
    match (&v.level, &v.tree) {
        (Some(_), Some(t)) => Err(Problem::new(
            t.span(),
            ErrorKind::Tree,
            format!("{who}: gives both level and tree; give one: level names a RAID level (level = \"raid50\"), tree declares the nesting (tree = {{ mirror = [...] }})"),
        )),
        (None, None) => Err(Problem::new(
            vspan,
            ErrorKind::Schema,
            format!("{who}: missing field `level` (or `tree`, to declare the nesting)"),
        )),
        (Some(l), None) => Ok(Given::Level(l.get_ref().parse().map_err(|e: String| {
            Problem::new(l.span(), ErrorKind::Level, format!("{who}: level: {e}"))
        })?)),
        (None, Some(t)) => Ok(Given::Tree(t)),
    }
}

/// The volume's `size`: `"all"` (the default) or bytes.
fn requested_size(v: &RawVolume, who: &str) -> R<VolumeSize> {
    Ok(match &v.size {
        None => VolumeSize::All,
        Some(s) => match s.get_ref() {
            RawSize::Text(t) if t.eq_ignore_ascii_case("all") => VolumeSize::All,
            _ => VolumeSize::Bytes(size_field(s, who, "size").map_err(|mut p| {
                p.message.push_str(", or \"all\"");
                p
            })?),
        },
    })
}

/// `write_hole_log_size` applies only to a geometry with parity, and must hold the ring its
/// strips need.
fn check_log_size(v: &RawVolume, who: &str, geometry: &Geometry, given: Option<u64>) -> R<()> {
    let logged = tree::any_node(geometry.root(), &|n| matches!(n, Node::Parity(_)));
    if let (false, Some(s)) = (logged, &v.write_hole_log_size) {
        return Err(Problem::new(
            s.span(),
            ErrorKind::Option,
            format!("{who}: write_hole_log_size applies only to volumes with RAID 5/6 parity (raid5, raid6, raid50, raid60 or a tree with a parity node); remove it"),
        ));
    }
    let ring = nbraid_layout::volume_log_ring_bytes(geometry.root());
    if let (Some(s), Some(given), Some(need)) = (&v.write_hole_log_size, given, ring) {
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
    Ok(())
}

/// Marks the volume's regions used: the next volume starts after them.
fn claim_regions(name: &str, idx: &[usize], regions: &[Region], usage: &mut [Usage]) {
    for (&m, r) in idx.iter().zip(regions) {
        usage[m].cursor = r.start + r.len;
        if r.len > 0 {
            usage[m].users.push((format!("volume \"{name}\""), r.len));
        }
    }
}

/// A write-back cache over parity holds at least one full stripe.
fn check_cache_holds_a_stripe(
    v: &RawVolume,
    who: &str,
    geometry: &Geometry,
    cache: &CacheMode,
) -> R<()> {
    let parity = tree::any_node(geometry.root(), &|n| matches!(n, Node::Parity(_)));
    let (true, Some(cache_size)) = (parity, cache.cache_bytes()) else {
        return Ok(());
    };
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
    Ok(())
}

/// Most bytes a volume's members may hold together: the largest offset a block device or an
/// NBD client addresses (`off_t`). Below it no capacity, region or offset computed over them
/// wraps (three 8 EiB members of a JBOD overflowed the capacity's sum).
const VOLUME_MEMBERS_MAX_BYTES: u64 = i64::MAX as u64;

/// Volume `who`'s members (`idx`) hold at most [`VOLUME_MEMBERS_MAX_BYTES`] together.
fn members_addressable(who: &str, idx: &[usize], members: &[Member], span: Range<usize>) -> R<()> {
    let total: u128 = idx.iter().map(|&i| u128::from(members[i].size)).sum();
    if total <= u128::from(VOLUME_MEMBERS_MAX_BYTES) {
        return Ok(());
    }
    Err(Problem::new(
        span,
        ErrorKind::Size,
        format!(
            "{who}: its members hold {total} bytes together, more than a volume can address \
             ({VOLUME_MEMBERS_MAX_BYTES} bytes, the largest block device offset); give the \
             members their real sizes"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_name_used_again_names_the_line_it_was_first_used_at() {
        let mut names = VolumeNames::default();
        assert_eq!(names.claim("v0", 3), Ok(()));
        assert_eq!(names.claim("v1", 9), Ok(()));
        assert_eq!(names.claim("v0", 14), Err(3));
        // The first use stays the one named.
        assert_eq!(names.claim("v0", 20), Err(3));
    }

    #[test]
    fn the_control_path_defaults_beside_the_config_and_is_never_empty() {
        let (base, file) = (Path::new("/etc/nbraid"), Path::new("/etc/nbraid/a.toml"));
        let default = control_path(None, base, file).expect("default");
        assert_eq!(default, Path::new("/etc/nbraid/a.ctl"));
        let given = Spanned::new(5..9, "run/a.sock".to_string());
        let joined = control_path(Some(&given), base, file).expect("given");
        assert_eq!(joined, Path::new("/etc/nbraid/run/a.sock"));
        let absolute = Spanned::new(5..9, "/run/a.sock".to_string());
        let kept = control_path(Some(&absolute), base, file).expect("absolute");
        assert_eq!(kept, Path::new("/run/a.sock"));
        let empty = Spanned::new(5..7, String::new());
        let refused = control_path(Some(&empty), base, file).expect_err("empty");
        assert_eq!((refused.span, refused.kind), (5..7, ErrorKind::Listen));
        assert!(refused.message.starts_with("daemon: control is empty"));
    }
}

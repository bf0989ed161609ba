//! From TOML text to a checked [`Config`]: schema errors located by toml, semantic errors
//! located by the spans of the fields they concern; member regions placed by [`super::allocate`].

use super::allocate::{self, allocate, Usage};
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

use cx::{check_name, Cx, R};
use member::Small;
use meta_area::{Areas, Claim};
use placement::Placement;

impl Cx<'_> {
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
        let mut ids: Vec<Option<member::Identity>> = Vec::new();
        let mut small: Vec<Small> = Vec::new();
        for m in raw.member {
            let (member, id) = member::member(self, m.get_ref(), &members, &spans, &ids)?;
            small.extend(Small::of(members.len(), m.get_ref(), &member));
            members.push(member);
            spans.push(m.get_ref().id.span());
            ids.push(id);
        }
        if let (true, Some(s)) = (raw.volume.is_empty(), small.first()) {
            return Err(s.unused());
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
                ..Usage::default()
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
            volumes.push(self.volume(v, span, &members, &small, &mut usage)?);
        }
        let unused = |s: &&Small| !volumes.iter().any(|v| v.members.contains(&s.member));
        if let Some(s) = small.iter().find(unused) {
            return Err(s.unused());
        }
        let raw_volumes: Vec<&RawVolume> = raw.volume.iter().map(|v| v.get_ref()).collect();
        super::spares::resolve(&raw_volumes, &mut volumes, &members)?;
        let given = raw
            .daemon
            .as_ref()
            .and_then(|d| d.get_ref().control.as_ref());
        let control = match given {
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
        let span = given.map_or(0..0, |c| c.span());
        crate::control_path::check(&control, file, &members, &listen, span)?;
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

    /// `asked` with the reserves volume `name` placed `at` takes on its members after the
    /// volumes before it (`usage`): its write-hole log's and its block checksums'.
    fn with_reserves(
        &self,
        at: &Placement,
        name: &str,
        asked: MetadataOptions,
        usage: &[Usage],
    ) -> MetadataOptions {
        let mut metadata = asked;
        // A log whose ring the metadata area cannot hold (large strips) gets a reserve sized
        // from the strip, as if `write_hole_log_size` had asked for it: every parity volume
        // has its log (and large regions a larger one). The strips, hence the ring, do not
        // depend on where regions start. A volume the records place keeps its recorded log.
        if let (true, Some(recorded)) = (metadata.ppl, self.pins.log_reserve_bytes(name)) {
            metadata.ppl_log_bytes = recorded;
        } else if metadata.ppl && metadata.ppl_log_bytes.is_none() {
            let default = !self.pins.is_before_default_log();
            metadata.ppl_log_bytes = at.trial_log_reserve(usage, default);
            // Read to find the records (`Pins::before_default_log`): a reserve the members
            // cannot hold is left out, so the records are found and the config is read again
            // with them (`nbraid_assembly::pins`). Strips larger than the records' (a
            // reshape into them) need a larger ring than the one recorded; refused here, the
            // records were never read and the refusal named this reserve, which the volume
            // does not take (its log stays where recorded), instead of whether the new shape
            // fits its recorded regions.
            if !default {
                let fits = |log| at.places_after_log(usage, log, &metadata);
                metadata.ppl_log_bytes = metadata.ppl_log_bytes.filter(|&log| fits(log));
            }
            // A log whose ring fits the metadata area, but whose members' areas the volumes
            // before it filled (Matrix), gets a reserve too — not in the read for older
            // records (`nbraid_assembly::pins` falls back to it to find them): an existing
            // volume whose records hold no log area would get a reserve the full members
            // cannot hold, both reads would fail and its records would never be read.
            // Nor a volume with a member on an NBD server: nothing can pin it, so it keeps
            // the rule it was created under (as [`Placement::trial_log_reserve`]).
            if metadata.ppl_log_bytes.is_none() && default && !at.remote() {
                metadata.ppl_log_bytes = at.log_reserve_for_room(usage, &metadata);
            }
        }
        if metadata.checksums {
            metadata.checksum_reserve_bytes = at.checksum_reserve(usage, metadata.ppl_log_bytes);
        }
        metadata
    }

    /// The largest size volume `name` (placed `at`, asking `asked`) fits at with the
    /// reserves that size takes — a larger size takes no smaller reserves, so the sizes
    /// that fit are those below some bound, found by halving over whole strips of each
    /// member. `None`: not even one strip fits (or no size was asked for).
    fn largest_fitting(
        &self,
        at: &Placement,
        name: &str,
        asked: MetadataOptions,
        usage: &[Usage],
    ) -> Option<u64> {
        let VolumeSize::Bytes(_) = at.requested else {
            return None;
        };
        let sizing = at.plan.sizing();
        let strip = sizing.unit().max(1);
        let free = (at.idx.iter())
            .map(|&m| at.members[m].size.saturating_sub(usage[m].cursor))
            .min()?;
        let fits = |strips: u64| {
            let size = sizing.capacity_at(strips * strip);
            let trial = Placement {
                requested: VolumeSize::Bytes(size),
                ..*at
            };
            let metadata = self.with_reserves(&trial, name, asked, usage);
            let mut placed = usage.to_vec();
            trial.reserve_checksums(name, metadata.checksum_reserve_bytes, &mut placed);
            trial.reserve_log(name, metadata.ppl_log_bytes, &mut placed);
            let sized = allocate(at.who, sizing, trial.requested, at.idx, at.members, &placed);
            (size > 0 && sized.is_ok()).then_some(size)
        };
        // Invariant: `low` strips fit (or are 0), `high` do not.
        let (mut low, mut high) = (0, free / strip + 1);
        while high - low > 1 {
            let mid = low + (high - low) / 2;
            match fits(mid) {
                Some(_) => low = mid,
                None => high = mid,
            }
        }
        fits(low)
    }

    /// Volume `v` (its table at `vspan`), placed on its members after the volumes before it
    /// (`usage`). The checks run in this order, so the first problem reported stays the same:
    /// name, level or tree, members, options, shape, size, metadata, placement.
    fn volume(
        &self,
        v: &RawVolume,
        vspan: Range<usize>,
        members: &[Member],
        small: &[Small],
        usage: &mut [Usage],
    ) -> R<Volume> {
        let (name, who) = volume_name(v)?;
        let given = given(v, vspan.clone(), &who)?;
        let level = given.level();
        let listed = self.listed_members(v, vspan, &who, level, members)?;
        let opts = options::volume_options(v, &who, level)?;
        let (plan, idx) = self.plan(v, &who, given, listed, &opts, members)?;
        members_addressable(&who, &idx, members, v.name.span())?;
        let requested = requested_size(v, &who)?;
        let asked = volume_meta::metadata_options(v, &who)?;
        let at = Placement {
            who: &who,
            plan: &plan,
            requested,
            idx: &idx,
            members,
        };
        let mut metadata = self.with_reserves(&at, &name, asked, usage);
        // On each member: the checksum reserve, the log's reserve, the region — or, for a
        // volume the records place, the region where they put it (`pins.rs`).
        let unpinned = |metadata: &MetadataOptions, usage: &mut [Usage]| {
            let before = usage.to_vec();
            at.reserve_checksums(&name, metadata.checksum_reserve_bytes, usage);
            at.reserve_log(&name, metadata.ppl_log_bytes, usage);
            let (regions, geometry) = at.regions(v, usage).map_err(|mut p| {
                // The size it suggests was measured without the reserves that size takes.
                if let VolumeSize::Bytes(_) = at.requested {
                    let fits = self.largest_fitting(&at, &name, asked, &before);
                    p.message = allocate::suggesting(&p.message, fits);
                }
                p
            })?;
            claim_regions(&name, &idx, &regions, usage);
            Ok((regions, geometry))
        };
        let recorded = self.pins.starts(&name).is_some();
        if !recorded {
            at.refuse_small(small, &metadata, usage)?;
        }
        let (regions, geometry) = match recorded.then_some(self.pins) {
            None => unpinned(&metadata, usage)?,
            Some(pins) => {
                let kept: Vec<Usage> = idx.iter().map(|&m| usage[m].clone()).collect();
                match at.pinned(v, &name, pins, &mut metadata, usage) {
                    Ok(placed) => placed,
                    // Settings the records contradict (`checksums = "on"` over a volume
                    // created without the reserve): placed as a new volume would be, so the
                    // start refuses this volume alone, naming the way out, as it always did.
                    Err(p) if p.kind == ErrorKind::Option => {
                        idx.iter().zip(kept).for_each(|(&m, u)| usage[m] = u);
                        unpinned(&metadata, usage)?
                    }
                    Err(p) => return Err(p),
                }
            }
        };
        check_log_size(v, &who, &geometry, metadata.ppl_log_bytes)?;
        check_cache_holds_a_stripe(v, &who, &geometry, &opts.cache)?;
        let claim = match (recorded, self.pins.is_before_default_log(), at.remote()) {
            (true, _, _) => Claim::Recorded,
            (false, true, _) => Claim::Trial,
            (false, false, true) => Claim::Remote,
            (false, false, false) => Claim::New,
        };
        let areas = Areas::new(&who, &idx, members, &geometry, &metadata);
        areas.claim(v, &name, claim, usage)?;
        // A disk's sector size never changes under its data: an existing volume is served
        // with the block size its records keep.
        let block_size = self.pins.block_size(&name).unwrap_or(opts.block_size);
        Ok(Volume {
            name,
            shape: plan.into_shape(),
            members: idx,
            regions,
            geometry,
            requested,
            read_policy: opts.read_policy,
            cache: opts.cache,
            read_only: v.read_only.unwrap_or(false),
            block_size,
            block_size_written: opts.block_size,
            metadata,
            heal: Default::default(),
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

//! One `[[member]]` table: its id, path (file, block device, `memory:` or an NBD URI), size
//! against what is found there, and a remote member's connection keys.

use std::io::{Seek, SeekFrom};
use std::ops::Range;
use std::path::{Component, Path, PathBuf};

use super::cx::{check_name, Cx, R};
use super::least::Least;
use crate::error::{ErrorKind, Problem};
use crate::model::{Member, MemberStorage, MEMBER_MIN, MEMORY_PATH, METADATA_RESERVED};
use crate::raw::{RawMember, RawSize};
use crate::size::{format_size, format_size_exact};
use crate::volume_meta::checksum_reserve_bytes;
use nbraid_layout::STRIP_DEFAULT;
use serde_spanned::Spanned;

/// What makes two paths one member: the same file through two names (links, `..`), or the
/// same block device through two device nodes (`/dev/loop3` and a `mknod` alias, or a
/// `/dev/disk/by-id` link): a device node's own inode says nothing, its number does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Identity {
    File { dev: u64, ino: u64 },
    Device { rdev: u64 },
}

impl Identity {
    /// How a refusal names what two members share: `block device 7:3`, or nothing for a file
    /// (its two paths say it).
    fn shown(self) -> Option<String> {
        match self {
            Identity::File { .. } => None,
            Identity::Device { rdev } => Some(format!(
                "block device {}:{}",
                libc::major(rdev),
                libc::minor(rdev)
            )),
        }
    }
}

/// The config's members in file order, with what checking the next one against them needs.
pub(super) struct MemberTable {
    pub members: Vec<Member>,
    /// By member: the span of its id (a duplicate names the line it was first defined at).
    id_spans: Vec<Range<usize>>,
    /// By member: the file or device it is (`None`: nothing found there, or a memory member).
    file_ids: Vec<Option<Identity>>,
    /// The members too small for any volume, refused once the volumes say which needs them.
    pub small: Vec<Small>,
}

impl MemberTable {
    /// The `[[member]]` tables, each checked against those before it.
    pub fn read(cx: &Cx, raw: &[Spanned<RawMember>]) -> R<MemberTable> {
        let mut table = MemberTable {
            members: Vec::with_capacity(raw.len()),
            id_spans: Vec::with_capacity(raw.len()),
            file_ids: Vec::with_capacity(raw.len()),
            small: Vec::new(),
        };
        for m in raw {
            let (member, file_id) = member(cx, m.get_ref(), &table)?;
            let index = table.members.len();
            table.small.extend(Small::of(index, m.get_ref(), &member));
            table.members.push(member);
            table.id_spans.push(m.get_ref().id.span());
            table.file_ids.push(file_id);
        }
        Ok(table)
    }

    /// The member that is the same file or device as a new one at `path` (`file_id`: what
    /// is there): the same path — unless `memory`, whose members share a name, not bytes —
    /// or the same file or device through another name.
    fn same_disk(&self, path: &Path, file_id: Option<Identity>, memory: bool) -> Option<usize> {
        (self.members.iter().zip(&self.file_ids)).position(|(m, fid)| {
            (!memory && m.path == path) || (file_id.is_some() && *fid == file_id)
        })
    }
}

/// Member `raw`, checked against those `before` it (ids, paths, files, devices): the one rule
/// that keeps two members off one disk, for `nbraid check` and the daemon's start alike.
fn member(cx: &Cx, raw: &RawMember, before: &MemberTable) -> R<(Member, Option<Identity>)> {
    let id = raw.id.get_ref().clone();
    check_name(&id, "member id", raw.id.span())?;
    if let Some(i) = before.members.iter().position(|m| m.id == id) {
        return Err(Problem::new(
            raw.id.span(),
            ErrorKind::Duplicate,
            format!(
                "member \"{id}\": duplicate member id (first defined at line {}); member ids must be unique",
                cx.line(&before.id_spans[i])
            ),
        ));
    }
    let who = format!("member \"{id}\"");
    let (path_text, path, probed) = locate(cx, raw, &who, &id)?;
    let file_id = match &probed {
        Probe::Found(_, id) => *id,
        _ => None,
    };
    let memory = matches!(probed, Probe::Memory);
    if let Some(i) = before.same_disk(&path, file_id, memory) {
        let first = &before.members[i];
        let what = match file_id.and_then(Identity::shown) {
            Some(dev) if first.path != path => {
                format!(": both name {dev} (\"{}\")", first.path.display())
            }
            Some(dev) => format!(": {dev}"),
            None => String::new(),
        };
        return Err(Problem::new(
            raw.path.span(),
            ErrorKind::Duplicate,
            format!(
                "{who}: path \"{path_text}\" is already used by member \"{}\" (line {}){what}; every member needs its own file or device",
                first.id,
                cx.line(&before.id_spans[i])
            ),
        ));
    }
    let size = given_size(cx, raw, &who)?;
    let sized_by_path = size.is_none();
    let need = (cx.pins.member_need(&id), cx.pins.takes_short(&id));
    let (size, state) = size_and_state(raw, &who, &path, probed, size, need)?;
    let remote = matches!(state, MemberStorage::Remote);
    let remote = crate::remote_member::remote_settings(raw, &who, remote)?;
    Ok((
        Member {
            id,
            path_text,
            path,
            size,
            sized_by_path,
            state,
            remote,
        },
        file_id,
    ))
}

/// The member's path as written, resolved (files against the config's directory), and what
/// is there.
fn locate(cx: &Cx, raw: &RawMember, who: &str, id: &str) -> R<(String, PathBuf, Probe)> {
    let path_text = raw.path.get_ref().clone();
    if path_text.trim().is_empty() {
        return Err(Problem::new(
            raw.path.span(),
            ErrorKind::MemberPath,
            format!("{who}: path is empty; give a file (e.g. \"data/{id}.img\") or a block device"),
        ));
    }
    let (path, probed) = if path_text.trim() == MEMORY_PATH {
        (PathBuf::from(MEMORY_PATH), Probe::Memory)
    } else if crate::model::is_remote(&path_text) {
        if let Some(why) = crate::remote_member::socket_problem(&path_text) {
            return Err(Problem::new(
                raw.path.span(),
                ErrorKind::MemberPath,
                format!("{who}: socket=: {why}"),
            ));
        }
        (PathBuf::from(path_text.trim()), Probe::Remote)
    } else {
        let path = normalize(&cx.base.join(&path_text));
        let probed = probe(&path);
        (path, probed)
    };
    Ok((path_text, path, probed))
}

/// The member's `size`, if given (one below [`MEMBER_MIN`] is refused once it is known what
/// the member holds: [`Small`]).
fn given_size<'r>(
    cx: &Cx,
    raw: &'r RawMember,
    who: &str,
) -> R<Option<(u64, &'r Spanned<RawSize>)>> {
    let Some(s) = &raw.size else {
        return Ok(None);
    };
    let size = cx.size(s, who, "size")?;
    // File and device offsets are signed 64-bit (off_t): past them no file can be created,
    // read or written, and the engine's offsets would wrap.
    if size > MEMBER_MAX_BYTES {
        return Err(Problem::new(
            s.span(),
            ErrorKind::Size,
            format!(
                "{who}: size {} is larger than any file or device can be ({} bytes, \
                 the largest file offset); give the member's real size",
                s.get_ref().shown(),
                MEMBER_MAX_BYTES
            ),
        ));
    }
    Ok(Some((size, s)))
}

/// Largest member `size`: the largest file offset (`off_t`), 8 EiB - 1.
const MEMBER_MAX_BYTES: u64 = i64::MAX as u64;

/// A member below [`MEMBER_MIN`]: too small for any volume. It is refused with what the
/// first volume on it needs ([`Least`]), computed from that volume's geometry, or — no volume
/// uses it — with what the smallest and a default volume need.
pub(super) struct Small {
    /// Its index in the config's members.
    pub member: usize,
    who: String,
    /// Its `size`, or its path when the size is the file's.
    span: Range<usize>,
    /// `size "1MiB"`, or `"d0.img", which holds only 4096 bytes,`: the subject of "is too
    /// small".
    said: String,
}

impl Small {
    /// Member `member` (`raw`, resolved as `m`) if it is below [`MEMBER_MIN`].
    pub fn of(member: usize, raw: &RawMember, m: &Member) -> Option<Small> {
        if m.size >= MEMBER_MIN {
            return None;
        }
        let (span, said) = match &raw.size {
            Some(s) => (s.span(), format!("size {}", s.get_ref().shown())),
            None => (
                raw.path.span(),
                format!(
                    "\"{}\", which holds only {} bytes,",
                    m.path.display(),
                    m.size
                ),
            ),
        };
        let who = format!("member \"{}\"", m.id);
        Some(Small {
            member,
            who,
            span,
            said,
        })
    }

    /// Refused: the first volume on it (`volume`: how messages name it) needs `least`.
    pub fn too_small_for(&self, volume: &str, least: &Least) -> Problem {
        let need = least.total_bytes();
        Problem::new(
            self.span.clone(),
            ErrorKind::Size,
            format!(
                "{}: {} is too small for {volume}: it needs at least {} (size = \"{}\"): {}",
                self.who,
                self.said,
                format_size(need),
                format_size_exact(need),
                least.parts()
            ),
        )
    }

    /// Refused: no volume uses it, so what the smallest volume and one with the defaults need.
    pub fn unused(&self) -> Problem {
        let tiny = Least::new(
            METADATA_RESERVED,
            nbraid_layout::STRIP_MIN,
            "one 4 KiB block",
        );
        let mut default = Least::new(METADATA_RESERVED, STRIP_DEFAULT, "one 64 KiB strip");
        default.checksum_bytes = checksum_reserve_bytes(STRIP_DEFAULT);
        Problem::new(
            self.span.clone(),
            ErrorKind::Size,
            format!(
                "{}: {} is too small to hold a volume: a member needs at least {} (size = \"{}\") for one with the defaults — {} — and {} (size = \"{}\") for the smallest (a jbod with checksums = \"off\": {})",
                self.who,
                self.said,
                format_size(default.total_bytes()),
                format_size_exact(default.total_bytes()),
                default.parts(),
                format_size(tiny.total_bytes()),
                format_size_exact(tiny.total_bytes()),
                tiny.parts()
            ),
        )
    }
}

/// The member's size and storage from what is at its path and the size given: a missing file,
/// a memory or a remote member needs a size; an existing file or device holds at least it (or
/// gives its own). `need`: the end of what its records keep on it (`crate::Pins`), and
/// whether one holding less than its `size` is taken as short — a member that holds less is
/// short: sized as its size or its records say, left out by assembly.
fn size_and_state(
    raw: &RawMember,
    who: &str,
    path: &Path,
    probed: Probe,
    size: Option<(u64, &Spanned<RawSize>)>,
    (need, short_taken): (Option<u64>, bool),
) -> R<(u64, MemberStorage)> {
    let refuse = |why: String| Err(Problem::new(raw.path.span(), ErrorKind::MemberPath, why));
    match (probed, size) {
        (Probe::Unusable(why), _) => refuse(format!("{who}: path \"{}\" {why}", path.display())),
        (Probe::Missing, None) => refuse(format!(
            "{who}: path \"{}\" does not exist, so the member needs a size to be created with; add e.g. size = \"4GiB\"",
            path.display()
        )),
        (Probe::Missing, Some((bytes, _))) => Ok((bytes, MemberStorage::Missing)),
        (Probe::Memory, Some((bytes, _))) => Ok((bytes, MemberStorage::Memory)),
        (Probe::Remote, Some((bytes, _))) => Ok((bytes, MemberStorage::Remote)),
        (Probe::Remote, None) => refuse(format!(
            "{who}: a remote member needs a size (the config is read without \
             connecting; the export must hold at least that); add e.g. size = \"4GiB\""
        )),
        (Probe::Memory, None) => refuse(format!(
            "{who}: a memory member needs a size; add e.g. size = \"1GiB\""
        )),
        (Probe::Found(state, _), Some((bytes, s))) => {
            let actual = state_len(state);
            // A member with data on it stays in the config, short: its volumes start
            // without it (within their tolerance), the others as if it were fine.
            if actual < bytes && !short_taken {
                // A file grows with truncate; a device does not: it is the disk it is.
                let way_out = match state {
                    MemberStorage::BlockDevice { .. } => format!(
                        "lower size to at most \"{}\" (or leave it out: the device's size), or use a larger device",
                        format_size_exact(actual)
                    ),
                    _ => format!(
                        "lower size, or grow the file (truncate -s {} {})",
                        format_size_exact(bytes),
                        path.display()
                    ),
                };
                return Err(Problem::new(
                    s.span(),
                    ErrorKind::MemberPath,
                    format!(
                        "{who}: size is {} but \"{}\" holds only {} ({actual} bytes); an existing member must be at least its size: {way_out}",
                        s.get_ref().shown(),
                        path.display(),
                        format_size(actual),
                    ),
                ));
            }
            Ok((bytes, state))
        }
        (Probe::Found(state, _), None) => Ok((state_len(state).max(need.unwrap_or(0)), state)),
    }
}

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
    Found(MemberStorage, Option<Identity>),
    Unusable(String),
}

fn probe(path: &Path) -> Probe {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let md = match std::fs::metadata(path) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Probe::Missing,
        Err(e) => return Probe::Unusable(format!("cannot be inspected: {e}")),
    };
    let ft = md.file_type();
    if ft.is_file() {
        let id = Identity::File {
            dev: md.dev(),
            ino: md.ino(),
        };
        Probe::Found(MemberStorage::File { len: md.len() }, Some(id))
    } else if ft.is_block_device() {
        let id = Some(Identity::Device { rdev: md.rdev() });
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
fn state_len(state: MemberStorage) -> u64 {
    match state {
        MemberStorage::Missing | MemberStorage::Memory | MemberStorage::Remote => 0,
        MemberStorage::File { len } | MemberStorage::BlockDevice { len } => len,
    }
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

    fn table(members: &[(&str, Option<Identity>)]) -> MemberTable {
        let text: String = (members.iter())
            .map(|(path, _)| {
                format!("[[member]]\nid = \"{path}\"\npath = \"{path}\"\nsize = \"8MiB\"\n")
            })
            .collect();
        let raw: crate::raw::RawConfig = toml::from_str(&text).expect("members");
        let cx = Cx {
            text: &text,
            base: Path::new("/cfg"),
            pins: &crate::Pins::new(),
        };
        let mut table = MemberTable::read(&cx, &raw.member).expect("table");
        table.file_ids = members.iter().map(|(_, id)| *id).collect();
        table
    }

    #[test]
    fn a_disk_is_the_same_by_its_path_or_by_what_is_there() {
        let (file, device) = (
            Identity::File { dev: 8, ino: 12 },
            Identity::Device { rdev: 0x703 },
        );
        let t = table(&[("/cfg/d0.img", Some(file)), ("/cfg/d1.img", Some(device))]);
        let path = Path::new("/cfg/d1.img");
        assert_eq!(t.same_disk(path, None, false), Some(1));
        assert_eq!(
            t.same_disk(Path::new("/cfg/x.img"), Some(device), false),
            Some(1)
        );
        assert_eq!(
            t.same_disk(Path::new("/cfg/link.img"), Some(file), false),
            Some(0)
        );
        assert_eq!(t.same_disk(Path::new("/cfg/x.img"), None, false), None);
        // Memory members all name one path, and are each their own bytes.
        assert_eq!(t.same_disk(path, None, true), None);
    }
}

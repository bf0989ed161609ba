//! Whether a file member's path still names the file the daemon has open.
//!
//! `rm d1.img` while the daemon serves leaves the member healthy to the engine: it writes the
//! open, deleted file, and a scrub reads it back clean. But that file lives only until the
//! daemon stops; the next start finds the member missing, and the redundancy the operator
//! counted on is gone. A path renamed, or made to name another file, does the same at the
//! next start. So `status` compares the member's open descriptor (`fstat`: device, inode,
//! names left) with a `stat` of its path, and says what it finds and the way out; the
//! events' watcher (`service::observe`) logs it once, as a `member-path-lost` event. The member is not failed: its
//! data is good and readable, and `nbraid replace` rebuilds a new file from it too.
//! Block devices are compared by device number (udev may make a node anew for the same
//! disk); remote and memory members have no path to check.

use nbraid_core::{Member, OpenFile};
use std::os::unix::fs::{FileTypeExt, MetadataExt};

/// What a `stat` of a member's path found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AtPath {
    Nothing,
    /// A file: its device and inode, and its device number if it is a block device.
    File {
        dev: u64,
        ino: u64,
        block_device: Option<u64>,
    },
    /// The path could not be looked at (permissions, I/O): why.
    Unreadable(String),
}

impl AtPath {
    fn stat(path: &str) -> AtPath {
        match std::fs::metadata(path) {
            Ok(m) => AtPath::File {
                dev: m.dev(),
                ino: m.ino(),
                block_device: m.file_type().is_block_device().then(|| m.rdev()),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => AtPath::Nothing,
            Err(e) => AtPath::Unreadable(e.to_string()),
        }
    }
}

/// How a member's path and its open file disagree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathProblem {
    /// The open file has no name left (`rm`): it lives only while the daemon holds it.
    Deleted,
    /// Nothing is at the path: the file was moved or renamed (it keeps a name elsewhere), or
    /// a device's node is gone.
    Gone,
    /// The path names another file or device now.
    Replaced,
    /// The path could not be looked at: why.
    Unchecked(String),
}

/// Whether the path (as `at_path` found it) still names the open file.
pub fn path_problem(open: &OpenFile, at_path: &AtPath) -> Option<PathProblem> {
    if open.block_device.is_none() && open.links == 0 {
        return Some(PathProblem::Deleted);
    }
    match at_path {
        AtPath::Nothing => Some(PathProblem::Gone),
        AtPath::Unreadable(why) => Some(PathProblem::Unchecked(why.clone())),
        AtPath::File { block_device, .. } if open.block_device.is_some() => {
            (*block_device != open.block_device).then_some(PathProblem::Replaced)
        }
        AtPath::File { dev, ino, .. } => {
            ((*dev, *ino) != (open.dev, open.ino)).then_some(PathProblem::Replaced)
        }
    }
}

/// Member `member`'s path problem now, if it is a local file that has one.
pub fn member_path_problem(member: &dyn Member) -> Option<PathProblem> {
    match member.open_file()? {
        Ok(open) => path_problem(&open, &AtPath::stat(member.name())),
        Err(e) => Some(PathProblem::Unchecked(format!("its open file: {e}"))),
    }
}

impl PathProblem {
    /// The word `status --json` gives it.
    pub fn name(&self) -> &'static str {
        match self {
            PathProblem::Deleted => "deleted",
            PathProblem::Gone => "gone",
            PathProblem::Replaced => "replaced",
            PathProblem::Unchecked(_) => "unchecked",
        }
    }

    /// What it means for member `id` of `volume` at `path`, and the way out.
    pub fn describe(&self, volume: &str, id: &str, path: &str) -> String {
        let replace = format!("nbraid replace {volume} {id} NEWFILE");
        match self {
            PathProblem::Deleted => format!(
                "member {id}'s file {path} was deleted while it serves: its data lives only until nbraidd stops (the next start finds no member there), so the redundancy is not what it seems; rebuild it onto a new file now: {replace}"
            ),
            PathProblem::Gone => format!(
                "nothing is at member {id}'s path {path} any more (moved, renamed, or a device node removed): it serves from what it has open, but the next start does not find it there; put it back at its path, or rebuild it onto a new file: {replace}"
            ),
            PathProblem::Replaced => format!(
                "member {id}'s path {path} names another file now, not the one it serves from: the next start would open that one in its place; put the member's file back, or rebuild it onto a new file: {replace}"
            ),
            PathProblem::Unchecked(why) => format!(
                "member {id}'s path {path} cannot be checked ({why}): whether it still names the file it serves from is not known"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(links: u64) -> OpenFile {
        OpenFile {
            dev: 8,
            ino: 100,
            links,
            block_device: None,
        }
    }

    fn at(dev: u64, ino: u64, block_device: Option<u64>) -> AtPath {
        AtPath::File {
            dev,
            ino,
            block_device,
        }
    }

    #[test]
    fn a_file_member_is_deleted_gone_or_replaced_by_its_inode_and_links() {
        assert_eq!(path_problem(&file(1), &at(8, 100, None)), None);
        let deleted = Some(PathProblem::Deleted);
        assert_eq!(path_problem(&file(0), &AtPath::Nothing), deleted);
        assert_eq!(
            path_problem(&file(0), &at(8, 101, None)),
            deleted,
            "rm, then a new file"
        );
        assert_eq!(
            path_problem(&file(1), &AtPath::Nothing),
            Some(PathProblem::Gone)
        );
        let replaced = Some(PathProblem::Replaced);
        assert_eq!(path_problem(&file(1), &at(8, 101, None)), replaced);
        assert_eq!(
            path_problem(&file(1), &at(9, 100, None)),
            replaced,
            "another file system"
        );
        let unreadable = AtPath::Unreadable("permission denied".into());
        assert_eq!(
            path_problem(&file(1), &unreadable),
            Some(PathProblem::Unchecked("permission denied".into()))
        );
    }

    #[test]
    fn a_device_member_is_compared_by_its_device_number_not_its_node() {
        let disk = OpenFile {
            dev: 5,
            ino: 300,
            links: 0,
            block_device: Some(0x0700),
        };
        assert_eq!(
            path_problem(&disk, &at(5, 301, Some(0x0700))),
            None,
            "a node made anew"
        );
        assert_eq!(
            path_problem(&disk, &at(5, 300, Some(0x0701))),
            Some(PathProblem::Replaced)
        );
        assert_eq!(
            path_problem(&disk, &at(8, 100, None)),
            Some(PathProblem::Replaced)
        );
        assert_eq!(
            path_problem(&disk, &AtPath::Nothing),
            Some(PathProblem::Gone)
        );
    }
}

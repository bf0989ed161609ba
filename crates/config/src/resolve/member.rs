//! One `[[member]]` table: its id, path (file, block device, `memory:` or an NBD URI), size
//! against what is found there, and a remote member's connection keys. (A child of `resolve`
//! for its context and helpers.)

use super::*;

impl Cx<'_> {
    /// Member `raw`, checked against those `before` it (ids, paths, files).
    pub(super) fn member(
        &self,
        raw: &RawMember,
        before: &[Member],
        id_spans: &[Range<usize>],
        file_ids: &[Option<(u64, u64)>],
    ) -> R<(Member, Option<(u64, u64)>)> {
        let id = raw.id.get_ref().clone();
        check_name(&id, "member id", raw.id.span())?;
        if let Some(i) = before.iter().position(|m| m.id == id) {
            return Err(Problem::new(
                raw.id.span(),
                ErrorKind::Duplicate,
                format!(
                    "member \"{id}\": duplicate member id (first defined at line {}); member ids must be unique",
                    self.line(&id_spans[i])
                ),
            ));
        }
        let who = format!("member \"{id}\"");
        let path_text = raw.path.get_ref().clone();
        if path_text.trim().is_empty() {
            return Err(Problem::new(
                raw.path.span(),
                ErrorKind::MemberPath,
                format!(
                    "{who}: path is empty; give a file (e.g. \"data/{id}.img\") or a block device"
                ),
            ));
        }
        let memory = path_text.trim() == MEMORY_PATH;
        let remote = crate::is_remote(&path_text);
        let path = if memory {
            PathBuf::from(MEMORY_PATH)
        } else if remote {
            PathBuf::from(path_text.trim())
        } else {
            normalize(&self.base.join(&path_text))
        };
        let probed = if memory {
            Probe::Memory
        } else if remote {
            Probe::Remote
        } else {
            probe(&path)
        };
        let file_id = match &probed {
            Probe::Found(_, id) => *id,
            _ => None,
        };
        if let Some(i) = before.iter().zip(file_ids).position(|(m, fid)| {
            (!memory && m.path == path) || (file_id.is_some() && *fid == file_id)
        }) {
            return Err(Problem::new(
                raw.path.span(),
                ErrorKind::Duplicate,
                format!(
                    "{who}: path \"{path_text}\" is already used by member \"{}\" (line {}); every member needs its own file or device",
                    before[i].id,
                    self.line(&id_spans[i])
                ),
            ));
        }
        let size = match &raw.size {
            Some(s) => Some((self.size(s, &who, "size")?, s)),
            None => None,
        };
        if let Some((bytes, s)) = size {
            if bytes < MEMBER_MIN {
                return Err(Problem::new(
                    s.span(),
                    ErrorKind::Size,
                    format!(
                        "{who}: size {} is too small; a member needs at least {} ({} of metadata reserve and one 4 KiB block)",
                        s.get_ref().shown(),
                        format_size_exact(MEMBER_MIN),
                        format_size(METADATA_RESERVED)
                    ),
                ));
            }
        }
        let (size, state) = match (probed, size) {
            (Probe::Unusable(why), _) => {
                return Err(Problem::new(
                    raw.path.span(),
                    ErrorKind::MemberPath,
                    format!("{who}: path \"{}\" {why}", path.display()),
                ))
            }
            (Probe::Missing, None) => {
                return Err(Problem::new(
                    raw.path.span(),
                    ErrorKind::MemberPath,
                    format!(
                        "{who}: path \"{}\" does not exist, so the member needs a size to be created with; add e.g. size = \"4GiB\"",
                        path.display()
                    ),
                ))
            }
            (Probe::Missing, Some((bytes, _))) => (bytes, MemberStorage::Missing),
            (Probe::Memory, Some((bytes, _))) => (bytes, MemberStorage::Memory),
            (Probe::Remote, Some((bytes, _))) => (bytes, MemberStorage::Remote),
            (Probe::Remote, None) => {
                return Err(Problem::new(
                    raw.path.span(),
                    ErrorKind::MemberPath,
                    format!(
                        "{who}: a remote member needs a size (the config is read without \
                         connecting; the export must hold at least that); add e.g. size = \"4GiB\""
                    ),
                ))
            }
            (Probe::Memory, None) => {
                return Err(Problem::new(
                    raw.path.span(),
                    ErrorKind::MemberPath,
                    format!("{who}: a memory member needs a size; add e.g. size = \"1GiB\""),
                ))
            }
            (Probe::Found(state, _), Some((bytes, s))) => {
                let actual = state_len(state);
                if actual < bytes {
                    return Err(Problem::new(
                        s.span(),
                        ErrorKind::MemberPath,
                        format!(
                            "{who}: size is {} but \"{}\" holds only {} ({actual} bytes); an existing member must be at least its size: lower size, or grow the file (truncate -s {} {})",
                            s.get_ref().shown(),
                            path.display(),
                            format_size(actual),
                            format_size_exact(bytes),
                            path.display()
                        ),
                    ));
                }
                (bytes, state)
            }
            (Probe::Found(state, _), None) => {
                let actual = state_len(state);
                if actual < MEMBER_MIN {
                    return Err(Problem::new(
                        raw.path.span(),
                        ErrorKind::MemberPath,
                        format!(
                            "{who}: \"{}\" holds only {actual} bytes; a member needs at least {}",
                            path.display(),
                            format_size_exact(MEMBER_MIN)
                        ),
                    ));
                }
                (actual, state)
            }
        };
        let remote = crate::remote_member::remote_settings(raw, &who, remote)?;
        Ok((
            Member {
                id,
                path_text,
                path,
                size,
                state,
                remote,
            },
            file_id,
        ))
    }
}

//! The replaces under way at the last shutdown, as a start will take them
//! (`nbraid_core::metadata::replace_at_start`, the open's own rule): `nbraid check` and
//! `nbraid status` without a daemon say which goes on, from where, and which is dropped.
//! Read from the newest record and the probes as the start reads them.

use nbraid_config::{format_size, Config, Volume};
use nbraid_core::metadata::{is_replacement, replace_at_start, Assembly, Probe, ReplaceAtStart};
use serde::Serialize;

/// A replace the records list, and what the next start does with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReplaceUnderWay {
    pub role: usize,
    /// The replacement's file, where it was found among the members no role claims.
    pub replacement: Option<String>,
    /// The records' checkpoint: the volume's bytes below it were on the replacement.
    pub checkpoint_bytes: u64,
    /// Where the copy goes on at the next start, `None` when it is dropped.
    pub resumes_from_bytes: Option<u64>,
    /// Why the next start drops it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped: Option<String>,
}

/// The replaces volume `v`'s newest record lists, as a start over `asm` takes them
/// (`probes`: the config's members, spares, then members added at run time, whose paths
/// are `added`).
pub fn under_way(
    config: &Config,
    v: &Volume,
    asm: &Assembly,
    (probes, added): (&[Probe], &[String]),
) -> Vec<ReplaceUnderWay> {
    let record = |pos: usize| crate::records::record_of(probes.get(pos)?, &v.name, Some(asm.array));
    let Some(newest) = (asm.roles.get(asm.newest_role))
        .and_then(|r| r.as_ref().ok())
        .and_then(|&pos| record(pos))
    else {
        return Vec::new();
    };
    let claimed: Vec<usize> = asm.roles.iter().filter_map(|r| r.clone().ok()).collect();
    let paths: Vec<&str> = (v.members.iter().chain(&v.heal.spares))
        .map(|&m| config.members[m].path_text.as_str())
        .chain(added.iter().map(String::as_str))
        .collect();
    (newest.replacements.iter())
        .map(|x| {
            let role = x.role as usize;
            let current = matches!(asm.roles.get(role), Some(Ok(_)))
                && !asm.rebuilding.iter().any(|&(r, _)| r == role);
            let found = (0..probes.len())
                .filter(|p| !claimed.contains(p))
                .find(|&p| is_replacement(&probes[p], (asm.array, &v.name), x.member));
            let at_start = replace_at_start(
                asm.reshape.is_some(),
                (role, current),
                found.is_some(),
                (x.checkpoint_bytes, asm.clean),
            );
            let (resumes_from_bytes, dropped) = match at_start {
                ReplaceAtStart::GoesOn { from_bytes } => (Some(from_bytes), None),
                ReplaceAtStart::Dropped(why) => (None, Some(why)),
            };
            ReplaceUnderWay {
                role,
                replacement: found.and_then(|p| paths.get(p)).map(|p| p.to_string()),
                checkpoint_bytes: x.checkpoint_bytes,
                resumes_from_bytes,
                dropped,
            }
        })
        .collect()
}

impl ReplaceUnderWay {
    /// For people: the replace, and what the next start does with it.
    pub fn text(&self) -> String {
        let by = self
            .replacement
            .as_deref()
            .map_or(String::new(), |p| format!(" by {p}"));
        let was = format!(
            "a replace of role {}{by} was under way at the last shutdown, copied to {}",
            self.role,
            format_size(self.checkpoint_bytes)
        );
        match (self.resumes_from_bytes, &self.dropped) {
            (Some(from), _) if from == self.checkpoint_bytes => {
                format!("{was}: the next start goes on with it from there")
            }
            (Some(_), _) => format!(
                "{was}: the next start copies it again from the start (the shutdown was not clean: a write in flight may have missed the replacement)"
            ),
            (None, why) => format!(
                "{was}: the next start drops it ({}); its replacement, if found, stands by as a spare, and `nbraid replace` starts it again",
                why.as_deref().unwrap_or("?")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replace(resumes_from_bytes: Option<u64>, dropped: Option<&str>) -> ReplaceUnderWay {
        ReplaceUnderWay {
            role: 3,
            replacement: Some("new.img".into()),
            checkpoint_bytes: 16 << 20,
            resumes_from_bytes,
            dropped: dropped.map(String::from),
        }
    }

    #[test]
    fn the_text_says_where_the_copy_goes_on_or_why_it_is_dropped() {
        let was =
            "a replace of role 3 by new.img was under way at the last shutdown, copied to 16 MiB: ";
        assert_eq!(
            replace(Some(16 << 20), None).text(),
            format!("{was}the next start goes on with it from there")
        );
        assert!(replace(Some(0), None).text().starts_with(&format!(
            "{was}the next start copies it again from the start"
        )));
        assert!(replace(None, Some("a reshape is under way"))
            .text()
            .starts_with(&format!(
                "{was}the next start drops it (a reshape is under way)"
            )));
    }
}

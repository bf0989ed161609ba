//! Settings the config changes on an existing volume that are not taken as written, said
//! instead of taken silently — by `nbraid check` (against the records) and by `nbraid apply`'s
//! plan (against the running daemon too):
//!
//! - `write_hole_log_size`: the log's reserve sits right before the volume's region, so it
//!   is fixed when the array is created; a start keeps the records' reserve. Never taken.
//! - `block_size`: a disk's sector size never changes under its data (a partition table, a
//!   file system, anything addressed in blocks would no longer line up), so a start serves
//!   the block size the records keep and says so loudly. Never taken. Records from before
//!   the block size was recorded (docs/FORMAT.md, the member entries) do not know it: the start takes the
//!   config's and its next commit records it.
//! - `write_hole` (`"ppl"` ↔ `"off"`): the daemon logs or not from its start; a start takes
//!   the config's (an area was reserved at create either way). Taken at the next start.
//!
//! The settings never taken are [`fixed_at_create`], read from a config loaded pinned to
//! the records ([`crate::pins`]): the one rule the start's warnings, `nbraid check` and
//! `nbraid apply` all say.

use nbraid_config::{format_size, Volume};
use serde::Serialize;

/// When a changed setting takes effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Taken {
    /// At the next start of nbraidd (the running daemon keeps what it started with).
    NextStart,
    /// Never on this array: fixed when it was created.
    Never,
}

/// One setting the config gives otherwise than the volume has it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SettingChange {
    /// The config key.
    pub key: &'static str,
    /// What the config says, as it would write it.
    pub config: String,
    /// What the volume has now.
    pub now: String,
    pub taken: Taken,
    /// Why, and what to write instead where it is never taken.
    pub why: String,
}

impl SettingChange {
    /// One line for people: `write_hole_log_size "4MiB" (now 2 MiB): never taken — ...`.
    pub fn text(&self) -> String {
        let when = match self.taken {
            Taken::NextStart => "taken at the next start of nbraidd",
            Taken::Never => "not taken",
        };
        format!(
            "{} = {} (now {}): {when}: {}",
            self.key, self.config, self.now, self.why
        )
    }
}

/// Where a log of `bytes` lives, in words (`None`: the metadata area's 512 KiB).
fn log_place(bytes: Option<u64>) -> String {
    match bytes {
        Some(b) => format!("a {} reserve before the region", format_size(b)),
        None => "512 KiB in the metadata area".into(),
    }
}

/// The settings volume `v`'s config writes otherwise than its records keep, never taken:
/// `write_hole_log_size` ([`log_size_kept`]) and `block_size` ([`block_size_kept`]). `v` is
/// of a config loaded pinned to the records (`nbraid_assembly::pins`). Pure; empty when they
/// agree.
pub fn fixed_at_create(v: &Volume) -> Vec<SettingChange> {
    let mut out = log_size_kept(v);
    out.extend(block_size_kept(v));
    out
}

/// `block_size` as volume `v` writes it (`v.block_size_written`) against the one its records
/// keep (`v.block_size` of a config loaded pinned to them). Pure; empty when they agree.
pub fn block_size_kept(v: &Volume) -> Option<SettingChange> {
    let (written, kept) = (v.block_size_written, v.block_size);
    (written != kept).then(|| SettingChange {
        key: "block_size",
        config: written.to_string(),
        now: format!("{kept}-byte blocks"),
        taken: Taken::Never,
        why: format!(
            "volume {}'s records keep {kept}-byte blocks, and a disk's sector size never \
             changes under its data (a partition table, a file system, anything addressed in \
             blocks would no longer line up); a start serves {kept} — write block_size = \
             {kept} to say so",
            v.name
        ),
    })
}

/// `write_hole_log_size` as volume `v` writes it against the log its records keep
/// (`v.metadata.ppl_log_bytes` of a config loaded pinned to them: `nbraid_assembly::pins`).
/// Pure; empty when they agree or the config leaves the size out.
pub fn log_size_kept(v: &Volume) -> Vec<SettingChange> {
    let m = &v.metadata;
    match m.ppl_log_bytes_written {
        Some(written) if m.ppl && Some(written) != m.ppl_log_bytes => vec![SettingChange {
            key: "write_hole_log_size",
            config: format!("\"{}\"", format_size(written).replace(' ', "")),
            now: log_place(m.ppl_log_bytes),
            taken: Taken::Never,
            why: format!(
                "the log's place is fixed when the array is created (its reserve sits right \
                 before the region); a start keeps {} — write {} to say so",
                log_place(m.ppl_log_bytes),
                match m.ppl_log_bytes {
                    Some(b) => format!(
                        "write_hole_log_size = \"{}\"",
                        format_size(b).replace(' ', "")
                    ),
                    None => "no write_hole_log_size".into(),
                }
            ),
        }],
        _ => Vec::new(),
    }
}

/// `write_hole` as volume `v` says it against the running daemon's (`logged`: its status'
/// `write_hole_logged`), for a volume with parity groups. Pure.
pub fn against_daemon(v: &Volume, logged: bool) -> Vec<SettingChange> {
    let root = v.geometry.root();
    let parity = (0..root.member_count()).any(|m| root.under_parity(m));
    if !parity || v.metadata.ppl == logged {
        return Vec::new();
    }
    let (config, now, why) = match v.metadata.ppl {
        false => (
            "\"off\"",
            "logged",
            "the running daemon logs partial parity until it stops; from the next start the \
             RAID 5/6 write hole is open (a crash then a lost member may corrupt data nobody wrote)",
        ),
        true => (
            "\"ppl\"",
            "not logged",
            "the running daemon writes no log; the next start logs where the records hold a \
             log area (`nbraid check` warns where they hold none)",
        ),
    };
    vec![SettingChange {
        key: "write_hole",
        config: config.into(),
        now: now.into(),
        taken: Taken::NextStart,
        why: why.into(),
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn raid5(extra: &str) -> nbraid_config::Config {
        let mut t = String::new();
        for i in 0..3 {
            t += &format!("[[member]]\nid = \"d{i}\"\npath = \"memory:\"\nsize = \"64MiB\"\n");
        }
        t += "[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nmembers = [\"d0\", \"d1\", \"d2\"]\n";
        t += extra;
        nbraid_config::parse(&t, Path::new("x/a.toml")).unwrap()
    }

    #[test]
    fn a_log_size_the_records_do_not_keep_is_said_never_taken() {
        let mut c = raid5("write_hole_log_size = \"4MiB\"\n");
        assert!(fixed_at_create(&c.volumes[0]).is_empty());
        // As a pinned load leaves it: the records' 2 MiB reserve.
        c.volumes[0].metadata.ppl_log_bytes = Some(2 << 20);
        let got = fixed_at_create(&c.volumes[0]);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].taken, Taken::Never);
        let t = got[0].text();
        assert!(
            t.starts_with(
                "write_hole_log_size = \"4MiB\" (now a 2 MiB reserve before the region): not taken"
            ),
            "{t}"
        );
        assert!(t.contains("write write_hole_log_size = \"2MiB\""), "{t}");
        // The records' log in the metadata area.
        c.volumes[0].metadata.ppl_log_bytes = None;
        let t = fixed_at_create(&c.volumes[0])[0].text();
        assert!(
            t.contains("512 KiB in the metadata area") && t.contains("no write_hole_log_size"),
            "{t}"
        );
    }

    #[test]
    fn a_block_size_the_records_do_not_keep_is_said_never_taken() {
        let mut c = raid5("block_size = 4096\n");
        assert!(fixed_at_create(&c.volumes[0]).is_empty());
        // As a load pinned to records that keep 512-byte blocks leaves it.
        c.volumes[0].block_size = 512;
        let got = fixed_at_create(&c.volumes[0]);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!((got[0].key, got[0].taken), ("block_size", Taken::Never));
        let t = got[0].text();
        assert!(
            t.starts_with("block_size = 4096 (now 512-byte blocks): not taken: volume v's records keep 512-byte blocks"),
            "{t}"
        );
        assert!(
            t.contains("a start serves 512 — write block_size = 512"),
            "{t}"
        );
        // The config leaves it out (4096, the default) over records of 512.
        let mut c = raid5("");
        c.volumes[0].block_size = 512;
        let t = fixed_at_create(&c.volumes[0])[0].text();
        assert!(
            t.starts_with("block_size = 4096 (now 512-byte blocks)")
                && t.contains("write block_size = 512"),
            "{t}"
        );
    }

    #[test]
    fn a_pinned_load_serves_the_recorded_block_size_and_remembers_the_written_one() {
        let mut t = String::new();
        for i in 0..3 {
            t += &format!("[[member]]\nid = \"d{i}\"\npath = \"memory:\"\nsize = \"64MiB\"\n");
        }
        t += "[[volume]]\nname = \"v\"\nlevel = \"raid5\"\nmembers = [\"d0\", \"d1\", \"d2\"]\nblock_size = 4096\n";
        let path = Path::new("x/a.toml");
        let mut pins = nbraid_config::Pins::new();
        pins.pin_block_size("v", 512);
        let c = nbraid_config::parse_pinned(&t, path, &pins).unwrap();
        let v = &c.volumes[0];
        assert_eq!((v.block_size, v.block_size_written), (512, 4096));
        assert_eq!(fixed_at_create(v)[0].key, "block_size");
        // Not pinned (records from before the field, or none): the config's.
        let c = nbraid_config::parse(&t, path).unwrap();
        let v = &c.volumes[0];
        assert_eq!((v.block_size, v.block_size_written), (4096, 4096));
        assert!(fixed_at_create(v).is_empty());
    }

    #[test]
    fn write_hole_against_the_daemon_is_taken_at_the_next_start() {
        let off = raid5("write_hole = \"off\"\n");
        assert!(against_daemon(&off.volumes[0], false).is_empty());
        let got = against_daemon(&off.volumes[0], true);
        assert_eq!(got[0].taken, Taken::NextStart);
        assert!(
            got[0]
                .text()
                .starts_with("write_hole = \"off\" (now logged): taken at the next start"),
            "{}",
            got[0].text()
        );
        let on = raid5("");
        assert!(against_daemon(&on.volumes[0], true).is_empty());
        assert_eq!(against_daemon(&on.volumes[0], false)[0].key, "write_hole");
    }
}

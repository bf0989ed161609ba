//! `nbraid status --config FILE` when no daemon answers on the config's control socket: what
//! the members' superblocks say instead (read as `nbraid check` reads them: plain reads,
//! nothing written, a daemon starting meanwhile not disturbed) — each volume's state, who
//! holds each role and who is out and why — so a stopped array can be looked at without
//! starting it. Still a failure (exit 1): a script asking `status` learns the daemon is down.

use crate::records::Records;
use serde_json::json;
use std::path::Path;

/// No daemon answered; `report` (the superblocks' view, text or JSON) goes to stdout, the
/// message to stderr.
#[derive(Debug)]
pub struct NotServing {
    pub report: String,
    message: String,
}

impl std::fmt::Display for NotServing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for NotServing {}

/// Whether a failed connection means nothing listens there (no socket file, or a socket
/// left by a daemon that is gone), as opposed to a socket we may not use.
pub(super) fn nobody_listens(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            )
        })
}

/// The superblocks' view of `config_file`'s volumes (only `volume` if named), as the error
/// `status` returns when its daemon is not running.
pub(super) fn not_serving(
    config_file: &Path,
    volume: Option<&str>,
    json: bool,
    why: &anyhow::Error,
) -> anyhow::Error {
    // Pinned to the records, as `nbraid check` and the start load it: a member grown while
    // stopped moves the config's own placement, not the volume's.
    let config = match nbraid_assembly::pins::load(config_file) {
        Ok(c) => c,
        Err(e) => return anyhow::Error::new(e).context(format!("{why:#}")),
    };
    let records: Vec<Records> = (crate::records::look(&config).into_iter())
        .filter(|r| volume.is_none_or(|v| r.volume == v))
        .collect();
    let socket = config.control.display().to_string();
    let report = match json {
        true => {
            let v = json!({
                "daemon": "not running",
                "control_socket": socket,
                "source": "superblocks",
                "volumes": records,
            });
            format!("{v:#}\n")
        }
        false => {
            let head = format!(
                "no daemon serves {} (control socket {socket}); what the members' superblocks say:\n",
                config_file.display()
            );
            head + &records_text(&records)
        }
    };
    NotServing {
        report,
        message: format!("{why:#}; the superblocks' view is printed above"),
    }
    .into()
}

/// One block a volume: its state, each role's holder (and why it is out), the notes.
fn records_text(records: &[Records]) -> String {
    let mut out = String::new();
    for r in records {
        out.push_str(&format!("  {}: {}\n", r.volume, r.state));
        for (role, id) in r.members.iter().enumerate() {
            let path = r.paths.get(role).map_or("?", String::as_str);
            let out_why = r.absent.get(role).copied().flatten();
            out.push_str(&format!(
                "    role {role}: {id} ({path}){}\n",
                out_why.map_or(String::new(), |w| format!(" {w}"))
            ));
        }
        for n in &r.notes {
            out.push_str(&format!("    note: {n}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(absent: Vec<Option<&'static str>>) -> Records {
        Records {
            volume: "db".into(),
            state: "degraded: role 1 failed (d1: d1.img)".into(),
            members: vec!["d0".into(), "d1".into()],
            paths: vec!["d0.img".into(), "d1.img".into()],
            absent,
            notes: vec!["a note".into()],
            reshape: None,
            replaces: Vec::new(),
        }
    }

    #[test]
    fn each_role_names_its_member_its_file_and_why_it_is_out() {
        let t = records_text(&[records(vec![None, Some("failed")])]);
        assert_eq!(
            t,
            "  db: degraded: role 1 failed (d1: d1.img)\n    role 0: d0 (d0.img)\n    role 1: d1 (d1.img) failed\n    note: a note\n"
        );
    }

    #[test]
    fn a_missing_socket_or_a_dead_daemons_socket_is_nobody_listening() {
        let gone = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert!(nobody_listens(
            &anyhow::Error::new(gone).context("connecting")
        ));
        let dead = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(nobody_listens(&anyhow::Error::new(dead)));
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert!(!nobody_listens(&anyhow::Error::new(denied)));
    }
}

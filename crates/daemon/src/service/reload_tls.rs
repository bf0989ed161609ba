//! What a reload says about the TLS certificates. The server reads them once, at the start,
//! and keeps presenting what it read; a reload looks at the folder again. Files that no
//! longer load as a start loads them (a key that is not the certificate's, a file that is not
//! PEM, one that cannot be read) refuse the reload, as the next start would refuse to start;
//! files replaced since the start are said to wait for a restart. Before, both reloaded with
//! "nothing changed live" while the server kept the certificate read at its start.

use nbraid_config::TlsSettings;
use nbraid_nbd::{ServerTls, TlsMode};
use std::path::{Path, PathBuf};

/// The files the server's TLS reads from the certificates' folder.
fn names(verify_clients: bool) -> &'static [&'static str] {
    match verify_clients {
        true => &["server-cert.pem", "server-key.pem", "ca-cert.pem"],
        false => &["server-cert.pem", "server-key.pem"],
    }
}

/// The server's TLS files as read at one moment: the folder, and each file's name and bytes
/// (`None`: it could not be read). Empty when no listener offers TLS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    dir: Option<PathBuf>,
    files: Vec<(&'static str, Option<Vec<u8>>)>,
}

impl TlsFiles {
    /// What `tls` makes the server read, read now.
    pub fn read(tls: &TlsSettings) -> TlsFiles {
        let Some(dir) = tls.certificates.as_deref().filter(|_| tls.any_on()) else {
            return TlsFiles::default();
        };
        let files = (names(tls.verify_clients).iter())
            .map(|&n| (n, std::fs::read(dir.join(n)).ok()))
            .collect();
        TlsFiles {
            dir: Some(dir.to_path_buf()),
            files,
        }
    }
}

/// Whether the certificates `tls` names load as a start loads them; why not, for the
/// reload's refusal.
pub fn loads(tls: &TlsSettings) -> Result<(), String> {
    let Some(dir) = tls.certificates_in_use() else {
        return Ok(());
    };
    ServerTls::from_dir(TlsMode::Required, dir, tls.verify_clients)
        .map(|_| ())
        .map_err(|e| refusal(dir, &e.to_string()))
}

fn refusal(dir: &Path, why: &str) -> String {
    format!(
        "loading the TLS certificates in {}: {why}: a start would refuse them; the server \
         keeps presenting the ones it read at its start",
        dir.display()
    )
}

/// What a reload says of the certificates' files read at the start (`started`) and now
/// (`now`): the files whose bytes changed wait for a restart. Nothing when the TLS settings
/// changed (that is said already) or no file did.
pub fn files_at_restart(
    started: &TlsFiles,
    now: &TlsFiles,
    settings_changed: bool,
) -> Option<String> {
    if settings_changed || started == now {
        return None;
    }
    let dir = now.dir.as_deref()?;
    let changed: Vec<&str> = (now.files.iter())
        .filter(|(n, bytes)| !started.files.iter().any(|(m, b)| m == n && b == bytes))
        .map(|(n, _)| *n)
        .collect();
    Some(format!(
        "tls: {} in {} changed since the start: the server presents the certificates it read \
         then until a restart",
        changed.join(", "),
        dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(cert: &[u8], key: &[u8]) -> TlsFiles {
        TlsFiles {
            dir: Some(PathBuf::from("/etc/nbraid/pki")),
            files: vec![
                ("server-cert.pem", Some(cert.to_vec())),
                ("server-key.pem", Some(key.to_vec())),
            ],
        }
    }

    #[test]
    fn replaced_files_are_named_and_said_to_wait_for_a_restart() {
        let started = files(b"cert 1", b"key 1");
        assert_eq!(files_at_restart(&started, &started.clone(), false), None);
        let said = files_at_restart(&started, &files(b"cert 2", b"key 1"), false).unwrap();
        assert!(
            said.starts_with("tls: server-cert.pem in /etc/nbraid/pki changed since the start")
                && said.contains("until a restart"),
            "{said}"
        );
        let both = files_at_restart(&started, &files(b"cert 2", b"key 2"), false).unwrap();
        assert!(
            both.contains("server-cert.pem, server-key.pem in"),
            "{both}"
        );
        // Changed settings are said as such.
        assert_eq!(
            files_at_restart(&started, &files(b"cert 2", b"key 1"), true),
            None
        );
        // TLS off both times: nothing to say.
        let off = TlsFiles::default();
        assert_eq!(files_at_restart(&off, &off, false), None);
    }
}

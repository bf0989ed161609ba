//! `[daemon]` TLS: `tls = "off" | "optional" | "required"` for every listener (a listen entry
//! written as a table, `{ address = "tcp:0.0.0.0:10809", tls = "required" }`, has its own),
//! `tls_certificates = "DIR"` (`ca-cert.pem`, `server-cert.pem`, `server-key.pem`, as qemu,
//! nbdkit and libnbd lay them out; relative to the config's folder), `tls_verify_clients`
//! (client certificates signed by `DIR/ca-cert.pem`), `insecure_listen = true`, the
//! explicit consent to serve a non-loopback TCP address without TLS, and
//! `insecure_unverified_clients = true`, the consent to serve one with TLS required but any
//! client let in (TLS without client certificates only hides the traffic: whoever reaches the
//! port still reads and writes every volume).

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::error::{ErrorKind, Problem};
use super::listen::Listener;
use super::raw::RawDaemon;

/// The spec's TLS modes (off; SELECTIVETLS for every export; FORCEDTLS).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TlsMode {
    #[default]
    Off,
    Optional,
    Required,
}

impl TlsMode {
    /// Parses a mode as the config writes it.
    pub fn parse(text: &str) -> Result<TlsMode, String> {
        match text {
            "off" => Ok(TlsMode::Off),
            "optional" => Ok(TlsMode::Optional),
            "required" => Ok(TlsMode::Required),
            other => Err(format!(
                "tls = \"{other}\" is not valid; valid: \"off\", \"optional\", \"required\""
            )),
        }
    }
}

/// What `[daemon]` says about TLS.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TlsSettings {
    /// `[daemon] tls`: the mode of every listener that does not name its own.
    pub mode: TlsMode,
    /// The mode of each listener, in the order of `Config::listen` (its own, or `mode`).
    pub listeners: Vec<TlsMode>,
    /// The certificates' folder (set whenever `mode` is not off).
    pub certificates: Option<PathBuf>,
    pub verify_clients: bool,
    /// Serve non-loopback TCP without TLS anyway (with a warning at start).
    pub insecure_listen: bool,
    /// Serve non-loopback TCP with TLS required but no client certificates checked (with a
    /// warning at start).
    pub insecure_unverified_clients: bool,
}

/// `own`: each listener's own mode if it names one, with the span of its entry.
pub(crate) fn resolve(
    raw: Option<&RawDaemon>,
    base: &Path,
    own: &[(Option<TlsMode>, Range<usize>)],
) -> Result<TlsSettings, Problem> {
    let mut s = TlsSettings {
        listeners: own.iter().map(|(m, _)| m.unwrap_or_default()).collect(),
        ..TlsSettings::default()
    };
    let Some(raw) = raw else { return Ok(s) };
    let bad = |span: Range<usize>, m: String| Problem::new(span, ErrorKind::Option, m);
    if let Some(v) = &raw.tls {
        s.mode =
            TlsMode::parse(v.get_ref()).map_err(|why| bad(v.span(), format!("daemon: {why}")))?;
    }
    s.listeners = own.iter().map(|(m, _)| m.unwrap_or(s.mode)).collect();
    s.certificates = raw
        .tls_certificates
        .as_ref()
        .map(|d| base.join(d.get_ref()));
    s.verify_clients = raw.tls_verify_clients.unwrap_or(false);
    s.insecure_listen = raw.insecure_listen.unwrap_or(false);
    s.insecure_unverified_clients = raw.insecure_unverified_clients.unwrap_or(false);
    if s.certificates.is_none() && s.any_on() {
        // Point at what turned TLS on: `tls` if a listener takes it from there, else the
        // first listener with a mode of its own.
        let inherits_on = own.iter().any(|(m, _)| m.is_none()) && s.mode != TlsMode::Off;
        let span = match &raw.tls {
            Some(v) if inherits_on => v.span(),
            _ => own
                .iter()
                .find(|(m, _)| m.is_some_and(|m| m != TlsMode::Off))
                .map_or(0..0, |(_, span)| span.clone()),
        };
        return Err(bad(
            span,
            "daemon: tls needs tls_certificates = \"DIR\" (a folder with server-cert.pem and server-key.pem)".into(),
        ));
    }
    if let (Some(dir), Some(key)) = (&s.certificates, &raw.tls_certificates) {
        let is_file = |p: &Path| p.is_file();
        let missing = s.any_on().then(|| {
            folder_problem(dir, found_at(dir))
                .or_else(|| missing_certificate(dir, s.verify_clients, is_file))
        });
        if let Some(why) = missing.flatten() {
            let given = key.get_ref();
            return Err(bad(
                key.span(),
                format!("daemon: tls_certificates = \"{given}\": {why}"),
            ));
        }
    }
    Ok(s)
}

/// The files the server's TLS reads from the certificates' folder, as qemu, nbdkit and
/// libnbd lay them out: its certificate and key, and the CA when clients are verified.
fn certificate_files(verify_clients: bool) -> &'static [&'static str] {
    match verify_clients {
        true => &["server-cert.pem", "server-key.pem", "ca-cert.pem"],
        false => &["server-cert.pem", "server-key.pem"],
    }
}

/// What is at the certificates' folder's path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Found {
    Nothing,
    Folder,
    /// A file, or something else that is not a folder.
    NotFolder,
}

/// What is at `dir` (links followed). A path that cannot be looked at (no permission)
/// counts as a folder: its files' checks then name what cannot be read.
fn found_at(dir: &Path) -> Found {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Found::Folder,
        Ok(_) => Found::NotFolder,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Found::Nothing,
        Err(_) => Found::Folder,
    }
}

/// Why the certificates' folder `dir` is unusable as a folder (`found`: what is there), so a
/// missing or mistyped folder is not reported as a folder lacking its first file.
fn folder_problem(dir: &Path, found: Found) -> Option<String> {
    let what = match found {
        Found::Folder => return None,
        Found::Nothing => "does not exist",
        Found::NotFolder => "is not a folder",
    };
    Some(format!(
        "{} {what}; give the folder that holds server-cert.pem and server-key.pem",
        dir.display()
    ))
}

/// Which file the certificates' folder `dir` lacks (`is_file` says what is there), so a
/// check or a reload refuses what the next start would: an empty folder, a key forgotten.
fn missing_certificate(
    dir: &Path,
    verify_clients: bool,
    is_file: impl Fn(&Path) -> bool,
) -> Option<String> {
    let files = certificate_files(verify_clients);
    let missing = files.iter().find(|f| !is_file(&dir.join(f)))?;
    let why = match verify_clients {
        true => " (tls_verify_clients = true: clients' certificates are checked against it)",
        false => "",
    };
    Some(format!(
        "the folder {} has no {missing}{why}; TLS reads {} there",
        dir.display(),
        files.join(", ")
    ))
}

impl TlsSettings {
    /// Whether any listener offers TLS (the certificates are then needed).
    pub fn any_on(&self) -> bool {
        self.listeners.iter().any(|m| *m != TlsMode::Off)
    }

    /// The certificates' folder the listeners present from: `None` with TLS off everywhere.
    pub fn certificates_in_use(&self) -> Option<&std::path::Path> {
        self.certificates.as_deref().filter(|_| self.any_on())
    }
}

/// Whether `listener` may start with TLS `mode` (its own) under `tls`: `Ok(None)` fine,
/// `Ok(Some(warning))` served only because the config consents, `Err(why)` refused. Only this
/// machine can reach a Unix socket or a loopback address, so those may run without TLS;
/// anything else needs TLS required *and* client certificates verified (TLS alone lets in
/// whoever connects), or the config's explicit consent: `insecure_listen = true` for less than
/// TLS required, `insecure_unverified_clients = true` (or `insecure_listen`) for TLS without
/// client verification.
pub fn listener_policy(
    listener: &Listener,
    mode: TlsMode,
    tls: &TlsSettings,
) -> Result<Option<String>, String> {
    if listener.is_local() || (mode == TlsMode::Required && tls.verify_clients) {
        return Ok(None);
    }
    let anyone = "anyone on the network can read and write its volumes";
    if mode == TlsMode::Required {
        if tls.insecure_unverified_clients || tls.insecure_listen {
            let key = if tls.insecure_unverified_clients {
                "insecure_unverified_clients"
            } else {
                "insecure_listen"
            };
            return Ok(Some(format!(
                "WARNING: {listener} is reachable from other machines and serves any client \
                 that speaks TLS, without checking a client certificate ([daemon] {key} = \
                 true): {anyone}"
            )));
        }
        return Err(format!(
            "{listener} is reachable from other machines and has TLS required but does not \
             verify clients: any client that speaks TLS would read and write every volume; \
             set [daemon] tls_verify_clients = true (client certificates signed by \
             ca-cert.pem), listen on loopback or a Unix socket, or accept the risk with \
             insecure_unverified_clients = true"
        ));
    }
    let what = match mode {
        TlsMode::Off => "without TLS",
        _ => "with TLS optional (clients may skip it)",
    };
    if tls.insecure_listen {
        return Ok(Some(format!(
            "WARNING: {listener} is reachable from other machines and served {what} \
             ([daemon] insecure_listen = true): {anyone}"
        )));
    }
    Err(format!(
        "{listener} is reachable from other machines and would be served {what}; set \
         [daemon] tls = \"required\" (or this listener's own tls = \"required\") with \
         tls_certificates and tls_verify_clients = true, listen on loopback or a Unix socket, \
         or accept the risk with insecure_listen = true"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificates_folder_lacking_a_file_is_named_with_the_file() {
        let dir = Path::new("/etc/pki");
        let has = |names: &'static [&str]| move |p: &Path| names.iter().any(|n| p == dir.join(n));
        let e = missing_certificate(dir, false, has(&[])).unwrap();
        assert!(e.contains("/etc/pki has no server-cert.pem"), "{e}");
        let e = missing_certificate(dir, false, has(&["server-cert.pem"])).unwrap();
        assert!(e.contains("has no server-key.pem"), "{e}");
        let both = has(&["server-cert.pem", "server-key.pem"]);
        assert_eq!(missing_certificate(dir, false, both), None);
        let e = missing_certificate(dir, true, both).unwrap();
        assert!(e.contains("has no ca-cert.pem (tls_verify_clients"), "{e}");
    }

    #[test]
    fn a_certificates_folder_that_is_missing_or_not_a_folder_is_said_so() {
        let dir = Path::new("/etc/pki");
        assert_eq!(folder_problem(dir, Found::Folder), None);
        let e = folder_problem(dir, Found::Nothing).unwrap();
        assert!(e.starts_with("/etc/pki does not exist;"), "{e}");
        let e = folder_problem(dir, Found::NotFolder).unwrap();
        assert!(e.starts_with("/etc/pki is not a folder;"), "{e}");

        let tmp = tempfile::tempdir().unwrap();
        let text = "[daemon]\nlisten = [\"tcp:127.0.0.1:10809\"]\ntls = \"required\"\n\
                    tls_certificates = \"pki\"\n[[member]]\nid = \"d0\"\npath = \"memory:\"\n\
                    size = \"8MiB\"\n[[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"d0\"]\n";
        let file = tmp.path().join("a.toml");
        let pki = tmp.path().join("pki");
        let e = crate::parse(text, &file).expect_err("refused").to_string();
        assert!(
            e.contains(&format!("{} does not exist", pki.display())),
            "{e}"
        );
        std::fs::write(&pki, "").unwrap();
        let e = crate::parse(text, &file).expect_err("refused").to_string();
        assert!(
            e.contains(&format!("{} is not a folder", pki.display())),
            "{e}"
        );
    }

    #[test]
    fn a_config_whose_certificates_folder_is_empty_does_not_check() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("pki")).unwrap();
        let text = "[daemon]\nlisten = [\"tcp:127.0.0.1:10809\"]\ntls = \"required\"\n\
                    tls_certificates = \"pki\"\n[[member]]\nid = \"d0\"\npath = \"d0.img\"\n\
                    size = \"8MiB\"\n[[volume]]\nname = \"v\"\nlevel = \"jbod\"\nmembers = [\"d0\"]\n";
        let file = dir.path().join("a.toml");
        let e = crate::parse(text, &file).expect_err("refused").to_string();
        let pki = dir.path().join("pki");
        assert!(
            e.contains("tls_certificates = \"pki\"")
                && e.contains(&format!("{} has no server-cert.pem", pki.display())),
            "{e}"
        );
        std::fs::write(pki.join("server-cert.pem"), "").unwrap();
        std::fs::write(pki.join("server-key.pem"), "").unwrap();
        assert!(crate::parse(text, &file).is_ok());
        // Certificates named but TLS off: nothing is read from the folder.
        let off = text.replace("tls = \"required\"", "tls = \"off\"");
        std::fs::remove_file(pki.join("server-key.pem")).unwrap();
        assert!(crate::parse(&off, &file).is_ok());
    }

    #[test]
    fn local_listeners_need_no_tls_others_need_it_or_consent() {
        let unix = Listener::Unix("/run/x.sock".into());
        let lo = Listener::Tcp("127.0.0.1:10809".parse().unwrap());
        let lo6 = Listener::Tcp("[::1]:10809".parse().unwrap());
        let any = Listener::Tcp("0.0.0.0:10809".parse().unwrap());
        let off = TlsSettings::default();
        for l in [&unix, &lo, &lo6] {
            assert_eq!(listener_policy(l, TlsMode::Off, &off), Ok(None));
        }
        let e = listener_policy(&any, TlsMode::Off, &off).unwrap_err();
        assert!(
            e.contains("0.0.0.0:10809") && e.contains("insecure_listen"),
            "{e}"
        );
        assert!(listener_policy(&any, TlsMode::Optional, &off).is_err());
        let verified = TlsSettings {
            verify_clients: true,
            ..off.clone()
        };
        assert_eq!(
            listener_policy(&any, TlsMode::Required, &verified),
            Ok(None)
        );
        assert!(listener_policy(&any, TlsMode::Optional, &verified).is_err());
        let consent = TlsSettings {
            insecure_listen: true,
            ..off.clone()
        };
        let w = listener_policy(&any, TlsMode::Off, &consent)
            .unwrap()
            .unwrap();
        assert!(w.starts_with("WARNING"), "{w}");
    }

    #[test]
    fn tls_required_beyond_loopback_needs_verified_clients_or_consent() {
        let any = Listener::Tcp("0.0.0.0:10809".parse().unwrap());
        let lo = Listener::Tcp("127.0.0.1:10809".parse().unwrap());
        let unverified = TlsSettings::default();
        let e = listener_policy(&any, TlsMode::Required, &unverified).unwrap_err();
        for says in [
            "does not verify clients",
            "tls_verify_clients = true",
            "insecure_unverified_clients",
        ] {
            assert!(e.contains(says), "missing {says:?} in: {e}");
        }
        assert_eq!(
            listener_policy(&lo, TlsMode::Required, &unverified),
            Ok(None)
        );
        for consent in [
            TlsSettings {
                insecure_unverified_clients: true,
                ..TlsSettings::default()
            },
            TlsSettings {
                insecure_listen: true,
                ..TlsSettings::default()
            },
        ] {
            let w = listener_policy(&any, TlsMode::Required, &consent)
                .unwrap()
                .unwrap();
            assert!(
                w.starts_with("WARNING") && w.contains("without checking a client certificate"),
                "{w}"
            );
        }
        // The consent to unverified clients is no consent to plain text.
        let only_unverified = TlsSettings {
            insecure_unverified_clients: true,
            ..TlsSettings::default()
        };
        assert!(listener_policy(&any, TlsMode::Off, &only_unverified).is_err());
    }
}

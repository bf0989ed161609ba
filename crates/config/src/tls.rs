//! `[daemon]` TLS: `tls = "off" | "optional" | "required"` for every listener,
//! `tls_certificates = "DIR"` (`ca-cert.pem`, `server-cert.pem`, `server-key.pem`, as qemu,
//! nbdkit and libnbd lay them out; relative to the config's folder), `tls_verify_clients`
//! (client certificates signed by `DIR/ca-cert.pem`), and `insecure_listen = true`, the
//! explicit consent to serve a non-loopback TCP address without TLS.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_spanned::Spanned;

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

/// What `[daemon]` says about TLS.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TlsSettings {
    pub mode: TlsMode,
    /// The certificates' folder (set whenever `mode` is not off).
    pub certificates: Option<PathBuf>,
    pub verify_clients: bool,
    /// Serve non-loopback TCP without TLS anyway (with a warning at start).
    pub insecure_listen: bool,
}

pub(crate) fn resolve(raw: Option<&RawDaemon>, base: &Path) -> Result<TlsSettings, Problem> {
    let mut s = TlsSettings::default();
    let Some(raw) = raw else { return Ok(s) };
    let bad = |v: &Spanned<String>, m: String| Problem::new(v.span(), ErrorKind::Option, m);
    if let Some(v) = &raw.tls {
        s.mode = match v.get_ref().as_str() {
            "off" => TlsMode::Off,
            "optional" => TlsMode::Optional,
            "required" => TlsMode::Required,
            other => {
                return Err(bad(
                    v,
                    format!("daemon: tls = \"{other}\" is not valid; valid: \"off\", \"optional\", \"required\""),
                ))
            }
        };
    }
    s.certificates = raw
        .tls_certificates
        .as_ref()
        .map(|d| base.join(d.get_ref()));
    s.verify_clients = raw.tls_verify_clients.unwrap_or(false);
    s.insecure_listen = raw.insecure_listen.unwrap_or(false);
    if s.mode != TlsMode::Off && s.certificates.is_none() {
        let v = raw.tls.as_ref().expect("mode set from tls");
        return Err(bad(
            v,
            "daemon: tls needs tls_certificates = \"DIR\" (a folder with server-cert.pem and server-key.pem)".into(),
        ));
    }
    Ok(s)
}

/// Whether `listener` may start under `tls`: `Ok(None)` fine, `Ok(Some(warning))` served
/// only because the config consents, `Err(why)` refused. Only this machine can reach a Unix
/// socket or a loopback address, so those may run without TLS; anything else needs TLS
/// required, or `insecure_listen = true`.
pub fn listener_policy(listener: &Listener, tls: &TlsSettings) -> Result<Option<String>, String> {
    if listener.is_local() || tls.mode == TlsMode::Required {
        return Ok(None);
    }
    let what = match tls.mode {
        TlsMode::Off => "without TLS",
        _ => "with TLS optional (clients may skip it)",
    };
    if tls.insecure_listen {
        return Ok(Some(format!(
            "WARNING: {listener} is reachable from other machines and served {what} \
             ([daemon] insecure_listen = true): anyone on the network can read and write its volumes"
        )));
    }
    Err(format!(
        "{listener} is reachable from other machines and would be served {what}; set \
         [daemon] tls = \"required\" with tls_certificates, listen on loopback or a Unix socket, \
         or accept the risk with insecure_listen = true"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_listeners_need_no_tls_others_need_it_or_consent() {
        let unix = Listener::Unix("/run/x.sock".into());
        let lo = Listener::Tcp("127.0.0.1:10809".parse().unwrap());
        let lo6 = Listener::Tcp("[::1]:10809".parse().unwrap());
        let any = Listener::Tcp("0.0.0.0:10809".parse().unwrap());
        let off = TlsSettings::default();
        for l in [&unix, &lo, &lo6] {
            assert_eq!(listener_policy(l, &off), Ok(None));
        }
        let e = listener_policy(&any, &off).unwrap_err();
        assert!(
            e.contains("0.0.0.0:10809") && e.contains("insecure_listen"),
            "{e}"
        );
        let optional = TlsSettings {
            mode: TlsMode::Optional,
            ..off.clone()
        };
        assert!(listener_policy(&any, &optional).is_err());
        let required = TlsSettings {
            mode: TlsMode::Required,
            ..off.clone()
        };
        assert_eq!(listener_policy(&any, &required), Ok(None));
        let consent = TlsSettings {
            insecure_listen: true,
            ..off
        };
        let w = listener_policy(&any, &consent).unwrap().unwrap();
        assert!(w.starts_with("WARNING"), "{w}");
    }
}

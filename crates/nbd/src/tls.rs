//! TLS for NBD (`NBD_OPT_STARTTLS`, the spec's "TLS" section) with rustls: X.509 server
//! certificates, optionally client certificates checked against a CA. Certificates come from a
//! directory laid out as GnuTLS, qemu, nbdkit and libnbd expect it: `ca-cert.pem`,
//! `server-cert.pem`, `server-key.pem` (server); `ca-cert.pem`, `client-cert.pem`,
//! `client-key.pem` (client).
//!
//! TLS-PSK is not offered: rustls implements no external pre-shared keys (neither TLS 1.3
//! external PSK nor TLS 1.2 PSK cipher suites), only resumption tickets.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// The spec's TLS modes for a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// No TLS: `NBD_OPT_STARTTLS` is answered `NBD_REP_ERR_UNSUP`.
    #[default]
    Off,
    /// Clients may upgrade with `NBD_OPT_STARTTLS` or not (SELECTIVETLS, all exports).
    Optional,
    /// Every option before `NBD_OPT_STARTTLS` is refused with `NBD_REP_ERR_TLS_REQD`
    /// (FORCEDTLS).
    Required,
}

impl fmt::Display for TlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsMode::Off => "off",
            TlsMode::Optional => "optional",
            TlsMode::Required => "required",
        })
    }
}

/// Why TLS settings could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {why}")]
    Pem { path: PathBuf, why: String },
    #[error("{path} holds no certificate")]
    NoCertificate { path: PathBuf },
    #[error("TLS settings: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("client certificate verification: {0}")]
    Verifier(String),
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError::Pem {
            path: path.into(),
            why: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: path.into() });
    }
    Ok(certs)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::Pem {
        path: path.into(),
        why: e.to_string(),
    })
}

fn roots(ca: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(ca)? {
        roots.add(c)?;
    }
    Ok(roots)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Why every client refuses the server certificate in `dir` (`server-cert.pem`, the first
/// in the file) at `now_unix_s`: it expired, or is not valid yet. rustls serves it either
/// way. `None` when it is in date, or cannot be read (loading it says why).
pub fn server_certificate_out_of_date(dir: &Path, now_unix_s: i64) -> Option<String> {
    let path = dir.join("server-cert.pem");
    let chain = certs(&path).ok()?;
    let (not_before, not_after) = crate::tls_validity::validity_unix_s(chain.first()?)?;
    let text = crate::tls_validity::utc_text;
    let why = if now_unix_s > not_after {
        format!("expired at {}", text(not_after))
    } else if now_unix_s < not_before {
        format!("is not valid before {}", text(not_before))
    } else {
        return None;
    };
    Some(format!(
        "the server certificate {} {why}: every client refuses it (the TLS handshake fails) \
         until a valid one is in its place and nbraidd restarted",
        path.display()
    ))
}

/// The server certificates in `dir` judged as the start loads them, for a check run before
/// it (`nbraid check`): `Err`, why a start would refuse them (the start's own loader's
/// error); else what the start warns of at `now_unix_s` (out of date).
pub fn check_server_dir(
    dir: &Path,
    verify_clients: bool,
    now_unix_s: i64,
) -> Result<Option<String>, TlsError> {
    ServerTls::from_dir(TlsMode::Required, dir, verify_clients)?;
    Ok(server_certificate_out_of_date(dir, now_unix_s))
}

/// A listener's TLS: its mode and the server's certificate.
#[derive(Clone)]
pub struct ServerTls {
    pub mode: TlsMode,
    pub(crate) acceptor: Option<tokio_rustls::TlsAcceptor>,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("mode", &self.mode)
            .finish()
    }
}

impl ServerTls {
    /// No TLS.
    pub fn off() -> ServerTls {
        ServerTls {
            mode: TlsMode::Off,
            acceptor: None,
        }
    }

    /// The same certificates in another mode (one set shared by listeners of different modes).
    pub fn with_mode(&self, mode: TlsMode) -> ServerTls {
        ServerTls {
            mode,
            acceptor: self.acceptor.clone().filter(|_| mode != TlsMode::Off),
        }
    }

    /// `mode` with the certificate in `dir` (`server-cert.pem`, `server-key.pem`); with
    /// `verify_clients`, clients must present a certificate signed by `dir/ca-cert.pem`.
    pub fn from_dir(
        mode: TlsMode,
        dir: &Path,
        verify_clients: bool,
    ) -> Result<ServerTls, TlsError> {
        if mode == TlsMode::Off {
            return Ok(Self::off());
        }
        let chain = certs(&dir.join("server-cert.pem"))?;
        let key = key(&dir.join("server-key.pem"))?;
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?;
        let builder = if verify_clients {
            let roots = Arc::new(roots(&dir.join("ca-cert.pem"))?);
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider())
                .build()
                .map_err(|e| TlsError::Verifier(e.to_string()))?;
            builder.with_client_cert_verifier(v)
        } else {
            builder.with_no_client_auth()
        };
        let config = builder.with_single_cert(chain, key)?;
        Ok(ServerTls {
            mode,
            acceptor: Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
        })
    }
}

/// The client's TLS: whom to trust and what certificate to present.
#[derive(Clone)]
pub struct ClientTls {
    connector: tokio_rustls::TlsConnector,
    /// Name checked against the server's certificate (the host by default).
    pub server_name: Option<String>,
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl ClientTls {
    /// Trusts `dir/ca-cert.pem`; presents `dir/client-cert.pem` and `dir/client-key.pem`
    /// when both exist.
    pub fn from_dir(dir: &Path) -> Result<ClientTls, TlsError> {
        let roots = roots(&dir.join("ca-cert.pem"))?;
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
        let (cert, key) = (dir.join("client-cert.pem"), dir.join("client-key.pem"));
        let config = if cert.exists() && key.exists() {
            builder.with_client_auth_cert(certs(&cert)?, self::key(&key)?)?
        } else {
            builder.with_no_client_auth()
        };
        Ok(ClientTls {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
            server_name: None,
        })
    }

    fn name(&self, host: &str) -> Result<ServerName<'static>, String> {
        let n = self.server_name.as_deref().unwrap_or(host);
        ServerName::try_from(n.to_string()).map_err(|e| format!("bad TLS server name {n:?}: {e}"))
    }

    /// The TLS handshake over `s` (after the server acknowledged `NBD_OPT_STARTTLS`),
    /// checking the server's certificate against `host` (or [`ClientTls::server_name`]).
    pub async fn connect_raw<S>(
        &self,
        host: &str,
        s: S,
    ) -> Result<tokio_rustls::client::TlsStream<S>, String>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let name = self.name(host)?;
        self.connector
            .connect(name, s)
            .await
            .map_err(|e| format!("TLS handshake with {host}: {e}"))
    }
}

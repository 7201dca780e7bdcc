//! The listening side: [`ServerTls`] (certificate, key, whom to admit);
//! [`super::incoming`] (in `accept.rs`) is the TLS connection stream a
//! tonic server serves.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{alpn, provider, read_certs, read_key, read_roots, Build, Reload, TlsError, Watched};

/// Whom a port admits at the TLS layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// Anyone who completes the handshake (callers authenticate by token).
    None,
    /// Callers presenting a certificate signed by this CA file; callers
    /// without a certificate are admitted too (they authenticate by token).
    Optional(PathBuf),
    /// Only callers presenting a certificate signed by this CA file (the
    /// gateway's peer port).
    Required(PathBuf),
}

/// A port's TLS configuration, re-read when its files change. Cloning
/// shares it.
#[derive(Clone)]
pub struct ServerTls {
    inner: Arc<Watched<rustls::ServerConfig>>,
    auth: ClientAuth,
    /// Handshakes one peer address may start per second, and in a burst
    /// ([`super::accept`]).
    handshake_rate: HandshakeRate,
}

/// How many TLS handshakes one peer IP address may start: `per_second`
/// sustained, after a `burst` (a token bucket per address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandshakeRate {
    /// Sustained handshakes per second.
    pub per_second: std::num::NonZeroU32,
    /// Handshakes at once after a quiet spell.
    pub burst: std::num::NonZeroU32,
}

impl Default for HandshakeRate {
    /// [`super::HANDSHAKE_RATE_PER_ADDRESS`] and
    /// [`super::HANDSHAKE_BURST_PER_ADDRESS`].
    fn default() -> Self {
        HandshakeRate {
            per_second: super::HANDSHAKE_RATE_PER_ADDRESS,
            burst: super::HANDSHAKE_BURST_PER_ADDRESS,
        }
    }
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.inner.files())
            .field("client_auth", &self.auth)
            .field("handshake_rate", &self.handshake_rate)
            .finish()
    }
}

impl ServerTls {
    /// Loads the certificate chain `cert`, its key `key` and, per `auth`, the
    /// CA that signs client certificates.
    ///
    /// # Errors
    /// A file that cannot be read or used, named in the error.
    pub fn load(cert: &Path, key: &Path, auth: ClientAuth) -> Result<Self, TlsError> {
        let mut files = vec![cert.to_path_buf(), key.to_path_buf()];
        let build: Build<rustls::ServerConfig> = match &auth {
            ClientAuth::None => build_open,
            ClientAuth::Optional(ca) => {
                files.push(ca.clone());
                build_optional
            }
            ClientAuth::Required(ca) => {
                files.push(ca.clone());
                build_required
            }
        };
        Ok(ServerTls {
            inner: Arc::new(Watched::load(files, build)?),
            auth,
            handshake_rate: HandshakeRate::default(),
        })
    }

    /// A port presenting the in-memory PEM certificate chain `cert_pem` and
    /// key `key_pem`, admitting anyone who completes the handshake. Nothing
    /// is read from disk, so [`Reload::reload`] never changes it.
    ///
    /// # Errors
    /// The PEM does not parse, or the key does not match the certificate.
    pub fn from_pem(cert_pem: &str, key_pem: &crate::secret::Secret) -> Result<Self, TlsError> {
        let contents = vec![
            cert_pem.as_bytes().to_vec(),
            key_pem.expose().as_bytes().to_vec(),
        ];
        Ok(ServerTls {
            inner: Arc::new(Watched::fixed(
                &["<in-memory certificate>", "<in-memory key>"],
                contents,
                build_open,
            )?),
            auth: ClientAuth::None,
            handshake_rate: HandshakeRate::default(),
        })
    }

    /// The same port, each peer address starting at most `rate` handshakes.
    #[must_use]
    pub fn with_handshake_rate(mut self, rate: HandshakeRate) -> Self {
        self.handshake_rate = rate;
        self
    }

    /// The per-address handshake rate of this port.
    pub fn handshake_rate(&self) -> HandshakeRate {
        self.handshake_rate
    }

    /// Whom this port admits.
    pub fn client_auth(&self) -> &ClientAuth {
        &self.auth
    }

    /// The configuration new connections use.
    pub fn current(&self) -> Arc<rustls::ServerConfig> {
        self.inner.current()
    }
}

impl Reload for ServerTls {
    fn reload(&self) -> Result<bool, TlsError> {
        self.inner.reload()
    }

    fn describe(&self) -> String {
        describe(self.inner.files())
    }
}

/// The files' paths, comma-separated, for logs.
pub(crate) fn describe(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Certificate and key, then the client verifier `verifier` builds.
fn build_with(
    files: &[PathBuf],
    contents: &[Vec<u8>],
    verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
) -> Result<rustls::ServerConfig, TlsError> {
    let certs = read_certs(&files[0], &contents[0])?;
    let key = read_key(&files[1], &contents[1])?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(super::VERSIONS)
        .map_err(|source| TlsError::Rustls {
            path: files[0].clone(),
            source,
        })?;
    let builder = match verifier {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|source| TlsError::Rustls {
            path: files[0].clone(),
            source,
        })?;
    config.alpn_protocols = alpn();
    Ok(config)
}

fn build_open(files: &[PathBuf], contents: &[Vec<u8>]) -> Result<rustls::ServerConfig, TlsError> {
    build_with(files, contents, None)
}

fn client_verifier(
    files: &[PathBuf],
    contents: &[Vec<u8>],
    optional: bool,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let roots = read_roots(&files[2], &contents[2])?;
    let builder =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
    let builder = if optional {
        builder.allow_unauthenticated()
    } else {
        builder
    };
    builder
        .build()
        .map_err(|e| TlsError::invalid(&files[2], format!("cannot verify clients with it: {e}")))
}

fn build_optional(
    files: &[PathBuf],
    contents: &[Vec<u8>],
) -> Result<rustls::ServerConfig, TlsError> {
    let verifier = client_verifier(files, contents, true)?;
    build_with(files, contents, Some(verifier))
}

fn build_required(
    files: &[PathBuf],
    contents: &[Vec<u8>],
) -> Result<rustls::ServerConfig, TlsError> {
    let verifier = client_verifier(files, contents, false)?;
    build_with(files, contents, Some(verifier))
}

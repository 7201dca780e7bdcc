//! Transport security for every gRPC port and channel of the workspace:
//! TLS 1.3 through rustls with the ring provider, from PEM files that are
//! re-read when they change, or from PEM held in memory
//! ([`ServerTls::from_pem`], [`ClientTls::from_ca_pem`]: never reloaded; a
//! sandbox runtime's ephemeral CA).
//!
//! - [`ServerTls`]: what a listening port presents (certificate chain and
//!   key) and whom it admits ([`ClientAuth`]: a client certificate signed by
//!   a CA, required on the gateway's peer port). [`incoming`] turns a TCP
//!   listener into a stream of TLS connections for tonic's
//!   `serve_with_incoming`: each handshake runs in its own task, bounded in
//!   time ([`HANDSHAKE_TIMEOUT`], and [`FIRST_BYTE_TIMEOUT`] for the
//!   client's first byte) and in number ([`MAX_HANDSHAKES`] on the port and
//!   [`MAX_HANDSHAKES_PER_ADDRESS`] for one peer address run at once;
//!   [`MAX_PENDING_PER_ADDRESS`] connections of one address may wait, one
//!   more is refused with an alert [`refused_for_limit`] recognises).
//! - [`ClientTls`]: what a dialling side trusts (a CA) and optionally
//!   presents (a client certificate); [`ClientTls::connector`] is the
//!   connector `proto::client::connect` gives tonic.
//!
//! # Reloading
//! Both read their files again on [`ServerTls::reload`] /
//! [`ClientTls::reload`], which [`Reloader::spawn`] calls every
//! [`RELOAD_EVERY`]. Kubernetes updates a mounted Secret by swapping the
//! directory's `..data` link; the paths stay and their contents change, so
//! comparing contents catches it. A new configuration applies to new
//! connections only: established connections and their streams stay up. A
//! file that cannot be read, does not parse, holds an expired certificate or
//! a key that does not match is refused with an error naming the file; the
//! previous configuration stays in use.
//!
//! # Files
//! Certificates are PEM (`-----BEGIN CERTIFICATE-----`), the first one the
//! end-entity certificate, then any intermediates. Keys are PEM PKCS#8,
//! PKCS#1 (RSA) or SEC1 (EC). A CA file holds one or more PEM certificates.

mod accept;
mod client;
mod files;
#[cfg(feature = "generate")]
pub mod generate;
mod server;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

pub use accept::{
    incoming, refused_for_limit, FIRST_BYTE_TIMEOUT, HANDSHAKE_BURST_PER_ADDRESS,
    HANDSHAKE_RATE_PER_ADDRESS, HANDSHAKE_TIMEOUT, MAX_HANDSHAKES, MAX_HANDSHAKES_PER_ADDRESS,
    MAX_PENDING, MAX_PENDING_PER_ADDRESS,
};
pub use client::HandshakeTimedOut;
pub use client::{ClientTls, TlsConnector};
pub use files::{check_validity, common_name, read_certs, read_key, read_roots};
pub use server::{ClientAuth, HandshakeRate, ServerTls};

/// How often [`Reloader::spawn`] looks at the files again.
pub const RELOAD_EVERY: Duration = Duration::from_secs(2);

/// Why TLS material could not be used. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file cannot be read.
    #[error("{path}: cannot be read: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file does not hold what it should.
    #[error("{path}: {problem}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The certificate is outside its validity period.
    #[error("{path}: certificate {problem}")]
    Validity {
        /// The file.
        path: PathBuf,
        /// "expired at ..." or "is not valid before ...".
        problem: String,
    },
    /// rustls refused the combination (e.g. a key that does not match the
    /// certificate).
    #[error("{path}: {source}")]
    Rustls {
        /// The file the combination came from (the certificate file).
        path: PathBuf,
        /// What rustls said.
        source: rustls::Error,
    },
}

impl TlsError {
    fn invalid(path: &Path, problem: impl Into<String>) -> Self {
        TlsError::Invalid {
            path: path.to_path_buf(),
            problem: problem.into(),
        }
    }
}

/// The crypto provider every configuration uses (ring).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The protocol versions every configuration allows: TLS 1.3 only.
const VERSIONS: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// ALPN: gRPC is HTTP/2.
fn alpn() -> Vec<Vec<u8>> {
    vec![b"h2".to_vec()]
}

/// Builds a configuration from its files' paths (for errors) and contents.
pub(crate) type Build<T> = fn(&[PathBuf], &[Vec<u8>]) -> Result<T, TlsError>;

/// A configuration built from files, rebuilt when their contents change.
/// Cloning shares it.
pub(crate) struct Watched<T> {
    /// The files, in the order `build` takes their contents.
    files: Vec<PathBuf>,
    /// Builds the configuration from the files' contents.
    build: Build<T>,
    /// The contents the current configuration was built from.
    seen: std::sync::Mutex<Vec<Vec<u8>>>,
    /// The configuration new connections use.
    current: RwLock<Arc<T>>,
}

impl<T> Watched<T> {
    /// Reads `files` and builds the first configuration.
    pub(crate) fn load(files: Vec<PathBuf>, build: Build<T>) -> Result<Self, TlsError> {
        let contents = read_all(&files)?;
        let config = build(&files, &contents)?;
        Ok(Watched {
            files,
            build,
            seen: std::sync::Mutex::new(contents),
            current: RwLock::new(Arc::new(config)),
        })
    }

    /// A configuration built once from in-memory contents: no files, so
    /// `reload` never changes it (`Ok(false)`). `names` stand in for the
    /// files' paths in errors.
    pub(crate) fn fixed(
        names: &[&str],
        contents: Vec<Vec<u8>>,
        build: Build<T>,
    ) -> Result<Self, TlsError> {
        let names: Vec<PathBuf> = names.iter().map(PathBuf::from).collect();
        let config = build(&names, &contents)?;
        Ok(Watched {
            files: Vec::new(),
            build,
            seen: std::sync::Mutex::new(Vec::new()),
            current: RwLock::new(Arc::new(config)),
        })
    }

    /// The configuration in use.
    pub(crate) fn current(&self) -> Arc<T> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Reads the files again; when their contents changed, builds and
    /// switches to the new configuration. `Ok(true)` when it switched.
    ///
    /// # Errors
    /// The new contents are refused (the old configuration stays).
    pub(crate) fn reload(&self) -> Result<bool, TlsError> {
        let contents = read_all(&self.files)?;
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if *seen == contents {
            return Ok(false);
        }
        let config = (self.build)(&self.files, &contents)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
        *seen = contents;
        Ok(true)
    }

    /// The files, for logs.
    pub(crate) fn files(&self) -> &[PathBuf] {
        &self.files
    }
}

fn read_all(files: &[PathBuf]) -> Result<Vec<Vec<u8>>, TlsError> {
    files
        .iter()
        .map(|path| {
            std::fs::read(path).map_err(|source| TlsError::Read {
                path: path.clone(),
                source,
            })
        })
        .collect()
}

/// Something whose files can be re-read: [`ServerTls`] and [`ClientTls`].
pub trait Reload: Send + Sync + 'static {
    /// Reads the files again; `Ok(true)` when the configuration changed.
    ///
    /// # Errors
    /// The new contents are refused; the previous configuration stays.
    fn reload(&self) -> Result<bool, TlsError>;
    /// The files, for logs.
    fn describe(&self) -> String;
}

/// Re-reads TLS files in the background.
pub struct Reloader;

impl Reloader {
    /// Calls `target.reload()` every `every` until the runtime stops or the
    /// returned task is aborted. A change is logged at info; a refusal at
    /// error (naming the file), once until it changes.
    pub fn spawn<R: Reload>(target: R, every: Duration) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            interval.tick().await;
            // The last refusal, logged once until it changes.
            let mut last_error = String::new();
            loop {
                interval.tick().await;
                match target.reload() {
                    Ok(changed) => {
                        if changed {
                            tracing::info!(
                                files = %target.describe(),
                                "TLS files changed: new connections use them"
                            );
                        }
                        last_error.clear();
                    }
                    Err(e) => {
                        let text = e.to_string();
                        if text != last_error {
                            tracing::error!(
                                files = %target.describe(),
                                error = %text,
                                "TLS files cannot be used: keeping the previous configuration"
                            );
                            last_error = text;
                        }
                    }
                }
            }
        })
    }
}

#[cfg(all(test, feature = "generate"))]
mod tests;

//! `[openshell.gateway.auth]` (bearer tokens, inline or from files) and
//! `[openshell.gateway.tls]` (this gateway's certificate, key and CA).

use std::path::PathBuf;

use proto::secret::Secret;
use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// `[openshell.gateway.auth]`. `Debug` prints the tokens as `<redacted>`
/// ([`Secret`]).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// Bearer tokens with the `platform_admin` role.
    pub admin_tokens: Option<Vec<Secret>>,
    /// Bearer tokens that may only read.
    pub viewer_tokens: Option<Vec<Secret>>,
    /// Files each holding one admin token (a mounted Secret), read at
    /// start and added to `admin_tokens`.
    pub admin_token_files: Option<Vec<PathBuf>>,
    /// Files each holding one read-only token, added to `viewer_tokens`.
    pub viewer_token_files: Option<Vec<PathBuf>>,
    /// A CA (PEM) whose client certificates, presented on the client port,
    /// identify a caller next to tokens: the leaf's subject common name is
    /// looked up in the two lists below. Not the cluster CA (`tls.ca_file`,
    /// which signs gateways: a certificate it signed passes the peer port).
    pub client_ca_file: Option<PathBuf>,
    /// Common names of client certificates with the `platform_admin` role.
    pub admin_certificate_names: Option<Vec<String>>,
    /// Common names of client certificates that may only read.
    pub viewer_certificate_names: Option<Vec<String>>,
}

impl AuthSection {
    /// Lays `other` over `self` (flags over file): the admin tokens and
    /// their files are replaced together when `other` gives either, and so
    /// are the viewer tokens.
    pub fn overlay(mut self, other: AuthSection) -> AuthSection {
        if other.admin_tokens.is_some() || other.admin_token_files.is_some() {
            self.admin_tokens = other.admin_tokens;
            self.admin_token_files = other.admin_token_files;
        }
        if other.viewer_tokens.is_some() || other.viewer_token_files.is_some() {
            self.viewer_tokens = other.viewer_tokens;
            self.viewer_token_files = other.viewer_token_files;
        }
        if other.client_ca_file.is_some() {
            self.client_ca_file = other.client_ca_file;
        }
        if other.admin_certificate_names.is_some() {
            self.admin_certificate_names = other.admin_certificate_names;
        }
        if other.viewer_certificate_names.is_some() {
            self.viewer_certificate_names = other.viewer_certificate_names;
        }
        self
    }

    /// The tokens, with those of the token files read and added.
    ///
    /// # Errors
    /// [`ConfigError::SecretFile`] naming a token file that cannot be read
    /// or holds no token.
    pub fn read_token_files(mut self) -> Result<AuthSection, ConfigError> {
        fn read(
            tokens: &mut Option<Vec<Secret>>,
            files: &Option<Vec<PathBuf>>,
            key: &str,
        ) -> Result<(), ConfigError> {
            for file in files.iter().flatten() {
                let token = proto::secret::read_secret_file(key, file)
                    .map_err(|e| ConfigError::SecretFile(e.to_string()))?;
                tokens.get_or_insert_with(Vec::new).push(token.into());
            }
            Ok(())
        }
        read(
            &mut self.admin_tokens,
            &self.admin_token_files,
            "openshell.gateway.auth.admin_token_files",
        )?;
        read(
            &mut self.viewer_tokens,
            &self.viewer_token_files,
            "openshell.gateway.auth.viewer_token_files",
        )?;
        Ok(self)
    }
}

/// `[openshell.gateway.tls]`: this gateway's certificate, its key and the
/// CA that signs every gateway's certificate (PEM files, re-read when they
/// change).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// Certificate chain served on both ports and presented to peers.
    pub cert_file: Option<PathBuf>,
    /// Its private key.
    pub key_file: Option<PathBuf>,
    /// The CA every gateway's certificate chains to: peers are verified
    /// against it, and supervisors and the CLI trust it.
    pub ca_file: Option<PathBuf>,
    /// TLS handshakes one client IP address may start per second on each
    /// port (default 100; 1..=100000); more wait their turn.
    pub handshake_rate_per_address: Option<u32>,
    /// Handshakes one address may start at once before that rate applies
    /// (default 200; 1..=100000).
    pub handshake_burst_per_address: Option<u32>,
}

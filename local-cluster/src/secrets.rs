//! The secrets of a local cluster, as files under one directory (mode 0700),
//! the way an operator provides them:
//!
//! - `ca.crt`, `ca.key`: a throwaway CA every party trusts;
//! - `<stem>.crt`, `<stem>.key`: a certificate per gateway (or any other
//!   party), issued by [`Secrets::issue`] / [`Secrets::gateway_cert`];
//! - `signing.key`: the grant signing key (64 hex characters) every gateway
//!   signs grants with;
//! - `trusted-grant-keys`: its public key, the file supervisors (and their
//!   runtimes) verify grants with;
//! - `admin.token`: the operator's admin token;
//! - `<member>.credential`: a credential per supervisor (what it presents
//!   with `--credential-file`);
//! - `member-credentials` ([`MEMBER_CREDENTIALS_FILE`]): the gateways'
//!   `member_id credential` lines.
//!
//! Keys and secrets are mode 0600 from creation. [`Secrets::prepare`]
//! generates what is missing and reuses what is there (a second `dev` run
//! keeps its CA); the two derived files (trusted keys, member credentials)
//! are written afresh from what they derive from.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use proto::tls::generate::{Ca, GenerateError, Issued, Usage};
use proto::tls::ClientTls;

use crate::supervisor::SupervisorSecurity;

/// The grant signing key file.
pub const SIGNING_KEY_FILE: &str = "signing.key";
/// The admin token file.
pub const ADMIN_TOKEN_FILE: &str = "admin.token";
/// The gateways' member credentials file (`member_id credential` lines).
pub const MEMBER_CREDENTIALS_FILE: &str = "member-credentials";
/// The supervisors' trusted grant keys file.
pub const TRUSTED_KEYS_FILE: &str = "trusted-grant-keys";

/// Why the secrets could not be generated, written or read.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// A file or directory could not be written or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The OS's random source failed.
    #[error("the OS random source: {0}")]
    Random(String),
    /// The CA or a certificate could not be generated or loaded.
    #[error(transparent)]
    Generate(#[from] GenerateError),
    /// A secret file holds something else than a secret of its kind.
    #[error("{path}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The client TLS configuration (trusting the CA) could not be built.
    #[error("trusting {path}: {reason}")]
    ClientTls {
        /// The CA certificate.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SecretsError + '_ {
    move |source| SecretsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// 32 random bytes from the OS, as 64 hex characters (keys, tokens,
/// credentials).
///
/// # Errors
/// [`SecretsError::Random`] when the OS has no random source.
pub fn random_hex() -> Result<String, SecretsError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| SecretsError::Random(e.to_string()))?;
    Ok(hex::encode(bytes))
}

/// Writes `text` to `path` afresh, mode 0600 from creation (no window in
/// which another user may read it).
pub(crate) fn write_private(path: &Path, text: &str) -> Result<(), SecretsError> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(path)(e)),
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io(path))?;
    file.write_all(text.as_bytes()).map_err(io(path))?;
    file.sync_all().map_err(io(path))
}

/// The secret in `path` (read and validated as `flag` would be), generated
/// and written first when the file does not exist.
fn secret_file(flag: &str, path: &Path) -> Result<String, SecretsError> {
    if !path.exists() {
        write_private(path, &random_hex()?)?;
    }
    proto::secret::read_secret_file(flag, path).map_err(|e| SecretsError::Invalid {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// The secrets of one local cluster (see the module doc).
pub struct Secrets {
    /// Where every file lives.
    pub dir: PathBuf,
    /// The CA every certificate chains to.
    pub ca: Ca,
    /// The grant signing key file.
    pub signing_key: PathBuf,
    /// The admin token file (gateways accept it; clients present it).
    pub admin_token_file: PathBuf,
    /// The gateways' member credentials file.
    pub member_credentials: PathBuf,
    /// The supervisors' trusted grant keys file.
    pub trusted_keys: PathBuf,
    /// The admin token.
    admin_token: proto::secret::Secret,
    /// member id -> its credential.
    members: BTreeMap<String, String>,
}

impl std::fmt::Debug for Secrets {
    /// Paths and member ids only (the contents are secret).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("dir", &self.dir)
            .field("ca", &self.ca.cert)
            .field("signing_key", &self.signing_key)
            .field("admin_token_file", &self.admin_token_file)
            .field("member_credentials", &self.member_credentials)
            .field("trusted_keys", &self.trusted_keys)
            .field("members", &self.members.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Secrets {
    /// The CA (named `ca_name` when created), signing key, trusted keys,
    /// admin token and a credential for each of `members` under `dir`
    /// (created, mode 0700): loaded when present, generated when not.
    ///
    /// # Errors
    /// [`SecretsError`] naming the file that could not be generated, read
    /// or written.
    pub fn prepare<S: AsRef<str>>(
        dir: &Path,
        ca_name: &str,
        members: &[S],
    ) -> Result<Secrets, SecretsError> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io(dir))?;
        let ca = if dir.join("ca.crt").exists() {
            Ca::load(dir)?
        } else {
            Ca::create(dir, ca_name)?
        };
        let signing_key = dir.join(SIGNING_KEY_FILE);
        let seed = secret_file("--signing-key-file", &signing_key)?;
        let public = proto::grant::GrantSigner::from_seed_hex(&seed)
            .map_err(|e| SecretsError::Invalid {
                path: signing_key.clone(),
                reason: e.to_string(),
            })?
            .public_key_hex();
        let trusted_keys = dir.join(TRUSTED_KEYS_FILE);
        std::fs::write(
            &trusted_keys,
            format!("# the public key of {SIGNING_KEY_FILE}\n{public}\n"),
        )
        .map_err(io(&trusted_keys))?;
        let admin_token_file = dir.join(ADMIN_TOKEN_FILE);
        let admin_token = secret_file("--admin-token-file", &admin_token_file)?.into();
        let mut listing = String::from("# member_id credential\n");
        let mut by_member = BTreeMap::new();
        for member in members {
            let member = member.as_ref();
            let credential = secret_file("--credential-file", &credential_file(dir, member))?;
            listing.push_str(&format!("{member} {credential}\n"));
            by_member.insert(member.to_string(), credential);
        }
        let member_credentials = dir.join(MEMBER_CREDENTIALS_FILE);
        write_private(&member_credentials, &listing)?;
        Ok(Secrets {
            dir: dir.to_path_buf(),
            ca,
            signing_key,
            admin_token_file,
            member_credentials,
            trusted_keys,
            admin_token,
            members: by_member,
        })
    }

    /// The CA certificate file (`--tls-ca-file` of every party).
    pub fn ca_file(&self) -> &Path {
        &self.ca.cert
    }

    /// The admin token.
    pub fn admin_token(&self) -> &str {
        self.admin_token.expose()
    }

    /// `member`'s credential (none: not a member of this cluster).
    pub fn credential(&self, member: &str) -> Option<&str> {
        self.members.get(member).map(String::as_str)
    }

    /// The file holding `member`'s credential (what its supervisor
    /// presents with `--credential-file`).
    pub fn credential_file(&self, member: &str) -> PathBuf {
        credential_file(&self.dir, member)
    }

    /// The member ids of this cluster, in order.
    pub fn members(&self) -> impl Iterator<Item = &str> {
        self.members.keys().map(String::as_str)
    }

    /// Issues `<stem>.crt` / `<stem>.key` in `dir` (created) for `names`
    /// (IP addresses or DNS names), replacing any there.
    ///
    /// # Errors
    /// A name the generator refuses, or writing failed.
    pub fn issue(
        &self,
        dir: &Path,
        stem: &str,
        names: &[String],
        usage: Usage,
    ) -> Result<Issued, SecretsError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        Ok(self.ca.issue(dir, stem, names, usage)?)
    }

    /// A gateway's certificate `<stem>` for `names` in the secrets'
    /// directory, server and client use (a gateway serves both ports and
    /// dials its peers with it): the one there when both files exist,
    /// issued when not.
    ///
    /// # Errors
    /// As [`Secrets::issue`].
    pub fn gateway_cert(&self, stem: &str, names: &[String]) -> Result<Issued, SecretsError> {
        let files = Issued {
            cert: self.dir.join(format!("{stem}.crt")),
            key: self.dir.join(format!("{stem}.key")),
        };
        if files.cert.exists() && files.key.exists() {
            return Ok(files);
        }
        self.issue(&self.dir, stem, names, Usage::ServerAndClient)
    }

    /// The secret files of a gateway besides its certificate; with the
    /// member credentials file when `members` is [`Members::Listed`] (a
    /// gateway then admits only the members listed there).
    pub fn gateway_files(&self, members: Members) -> GatewayFiles<'_> {
        GatewayFiles {
            ca: self.ca_file(),
            signing_key: &self.signing_key,
            admin_token: &self.admin_token_file,
            member_credentials: (members == Members::Listed)
                .then_some(self.member_credentials.as_path()),
        }
    }

    /// The secret-file flags of a gateway holding the certificate
    /// `issued` ([`GatewayFiles::flags`]): for a test of the flags
    /// themselves; launchers write a [`crate::gateway::GatewaySpec`].
    pub fn gateway_flags(&self, issued: &Issued, members: Members) -> Vec<String> {
        self.gateway_files(members).flags(issued)
    }

    /// What the supervisor of `member` presents and trusts: the CA, its
    /// credential file and the trusted grant keys.
    pub fn supervisor_security(&self, member: &str) -> SupervisorSecurity {
        SupervisorSecurity {
            insecure: false,
            tls_ca_file: Some(self.ca_file().to_path_buf()),
            credential_file: Some(self.credential_file(member)),
            credential: None,
            trusted_keys_file: Some(self.trusted_keys.clone()),
        }
    }

    /// What a client trusting the CA dials with.
    ///
    /// # Errors
    /// [`SecretsError::ClientTls`] when the CA certificate cannot be
    /// loaded.
    pub fn client_tls(&self) -> Result<ClientTls, SecretsError> {
        ClientTls::load(&self.ca.cert, None).map_err(|e| SecretsError::ClientTls {
            path: self.ca.cert.clone(),
            reason: e.to_string(),
        })
    }
}

/// The secret files a gateway is given besides its own certificate.
#[derive(Clone, Copy, Debug)]
pub struct GatewayFiles<'a> {
    /// The CA certificate.
    pub ca: &'a Path,
    /// The grant signing key.
    pub signing_key: &'a Path,
    /// The admin token.
    pub admin_token: &'a Path,
    /// The member credentials file (none: not given).
    pub member_credentials: Option<&'a Path>,
}

impl GatewayFiles<'_> {
    /// The flags of a gateway holding the certificate `issued` and these
    /// files: the one place a launcher's secret-file flags are spelled.
    pub fn flags(&self, issued: &Issued) -> Vec<String> {
        let mut flags = vec![
            "--tls-cert-file".to_string(),
            path(&issued.cert),
            "--tls-key-file".into(),
            path(&issued.key),
            "--tls-ca-file".into(),
            path(self.ca),
            "--signing-key-file".into(),
            path(self.signing_key),
            "--admin-token-file".into(),
            path(self.admin_token),
        ];
        if let Some(file) = self.member_credentials {
            flags.extend(["--member-credentials-file".to_string(), path(file)]);
        }
        flags
    }
}

/// Whether a gateway is given the member credentials file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Members {
    /// Only the members of [`Secrets::prepare`] may join, each with its
    /// own credential.
    Listed,
    /// No member credentials file (a test of TLS alone).
    Unlisted,
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// `<dir>/<member>.credential`.
fn credential_file(dir: &Path, member: &str) -> PathBuf {
    dir.join(format!("{member}.credential"))
}

/// The addresses a certificate of a process on this machine's loopback is
/// valid for.
pub fn loopback_names() -> Vec<String> {
    vec!["127.0.0.1".to_string(), "localhost".to_string()]
}

#[cfg(test)]
mod tests;

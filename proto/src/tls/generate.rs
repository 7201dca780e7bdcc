//! A throwaway certificate authority for `openshell-pool dev` and tests
//! (feature `generate`): a CA, then certificates it signs, each written as a
//! PEM pair (`<stem>.crt`, `<stem>.key`; keys mode 0600). Or all in
//! memory ([`Ca::ephemeral`], [`Ca::issue_pem`]): a sandbox runtime's own CA,
//! whose private keys never touch a disk.
//!
//! Not for production: real deployments take certificates from their own CA
//! (cert-manager, a corporate PKI); see docs/security.md.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Why material could not be generated or written.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// rcgen refused the parameters.
    #[error("generating {what}: {source}")]
    Rcgen {
        /// What was being generated.
        what: String,
        /// What rcgen said.
        source: rcgen::Error,
    },
    /// A file could not be written or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A certificate and its key, as files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    /// The PEM certificate.
    pub cert: PathBuf,
    /// The PEM private key (mode 0600).
    pub key: PathBuf,
}

/// A certificate and its key, as PEM text in memory (`Debug` prints the
/// key as `<redacted>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuedPem {
    /// The PEM certificate.
    pub cert: String,
    /// The PEM private key.
    pub key: crate::secret::Secret,
}

/// What a certificate may be used for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    /// A server only (a supervisor never serves; a CLI never does).
    Server,
    /// A client only.
    Client,
    /// Both: a gateway serves its ports and dials its peers.
    ServerAndClient,
}

/// A calendar date: (year, month, day).
pub type Date = (i32, u8, u8);

/// A certificate authority whose key is in memory.
pub struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    /// The CA certificate file (what every side trusts); empty for an
    /// [`Ca::ephemeral`] CA, which has no file.
    pub cert: PathBuf,
    /// The CA certificate, PEM.
    pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").field("cert", &self.cert).finish()
    }
}

fn rcgen_err(what: &str) -> impl FnOnce(rcgen::Error) -> GenerateError + '_ {
    move |source| GenerateError::Rcgen {
        what: what.to_string(),
        source,
    }
}

/// Writes `contents` to `path`, mode `mode` from creation (no window in
/// which a key is readable by others).
fn write_file(path: &Path, contents: &str, mode: u32) -> Result<(), GenerateError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| GenerateError::Io {
        path: path.to_path_buf(),
        source,
    };
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io)?;
    file.write_all(contents.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)
}

impl Ca {
    /// Creates a CA named `name` and writes `ca.crt` and `ca.key` in `dir`.
    ///
    /// # Errors
    /// Generation or writing failed.
    pub fn create(dir: &Path, name: &str) -> Result<Ca, GenerateError> {
        let mut ca = Ca::ephemeral(name)?;
        let cert_file = dir.join("ca.crt");
        write_file(&cert_file, &ca.pem, 0o644)?;
        write_file(&dir.join("ca.key"), &ca.issuer.key().serialize_pem(), 0o600)?;
        ca.cert = cert_file;
        Ok(ca)
    }

    /// Creates a CA named `name` in memory only: no file is written (its
    /// `cert` path is empty; [`Ca::cert_pem`] is its certificate).
    ///
    /// # Errors
    /// Generation failed.
    pub fn ephemeral(name: &str) -> Result<Ca, GenerateError> {
        let key = rcgen::KeyPair::generate().map_err(rcgen_err("the CA key"))?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())
            .map_err(rcgen_err("the CA parameters"))?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).map_err(rcgen_err("the CA"))?;
        Ok(Ca {
            issuer: rcgen::Issuer::new(params, key),
            cert: PathBuf::new(),
            pem: cert.pem(),
        })
    }

    /// The CA certificate, PEM (public: what every side trusts).
    pub fn cert_pem(&self) -> &str {
        &self.pem
    }

    /// Loads the CA `create` wrote in `dir`.
    ///
    /// # Errors
    /// The files are missing or do not parse.
    pub fn load(dir: &Path) -> Result<Ca, GenerateError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|source| GenerateError::Io { path, source })
        };
        let key = rcgen::KeyPair::from_pem(&read("ca.key")?).map_err(rcgen_err("ca.key"))?;
        let pem = read("ca.crt")?;
        let issuer = rcgen::Issuer::from_ca_cert_pem(&pem, key).map_err(rcgen_err("ca.crt"))?;
        Ok(Ca {
            issuer,
            cert: dir.join("ca.crt"),
            pem,
        })
    }

    /// Issues a certificate for `names` (DNS names or IP addresses), writing
    /// `<stem>.crt` and `<stem>.key` in `dir`.
    ///
    /// # Errors
    /// A name rcgen refuses, or writing failed.
    pub fn issue(
        &self,
        dir: &Path,
        stem: &str,
        names: &[String],
        usage: Usage,
    ) -> Result<Issued, GenerateError> {
        self.issue_valid(dir, stem, names, usage, None)
    }

    /// [`Ca::issue`] with a validity period (`not_before`, `not_after`)
    /// (tests: an expired certificate).
    ///
    /// # Errors
    /// As [`Ca::issue`].
    pub fn issue_valid(
        &self,
        dir: &Path,
        stem: &str,
        names: &[String],
        usage: Usage,
        validity: Option<(Date, Date)>,
    ) -> Result<Issued, GenerateError> {
        let pem = self.sign(stem, names, usage, validity)?;
        let issued = Issued {
            cert: dir.join(format!("{stem}.crt")),
            key: dir.join(format!("{stem}.key")),
        };
        write_file(&issued.cert, &pem.cert, 0o644)?;
        write_file(&issued.key, pem.key.expose(), 0o600)?;
        Ok(issued)
    }

    /// Issues a certificate for `names` (common name `stem`) in memory:
    /// nothing is written.
    ///
    /// # Errors
    /// A name rcgen refuses.
    pub fn issue_pem(
        &self,
        stem: &str,
        names: &[String],
        usage: Usage,
    ) -> Result<IssuedPem, GenerateError> {
        self.sign(stem, names, usage, None)
    }

    fn sign(
        &self,
        stem: &str,
        names: &[String],
        usage: Usage,
        validity: Option<(Date, Date)>,
    ) -> Result<IssuedPem, GenerateError> {
        let key = rcgen::KeyPair::generate().map_err(rcgen_err(stem))?;
        let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(rcgen_err(stem))?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, stem);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = match usage {
            Usage::Server => vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth],
            Usage::Client => vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth],
            Usage::ServerAndClient => vec![
                rcgen::ExtendedKeyUsagePurpose::ServerAuth,
                rcgen::ExtendedKeyUsagePurpose::ClientAuth,
            ],
        };
        if let Some(((y0, m0, d0), (y1, m1, d1))) = validity {
            params.not_before = rcgen::date_time_ymd(y0, m0, d0);
            params.not_after = rcgen::date_time_ymd(y1, m1, d1);
        }
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(rcgen_err(stem))?;
        Ok(IssuedPem {
            cert: cert.pem(),
            key: key.serialize_pem().into(),
        })
    }
}

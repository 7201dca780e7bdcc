//! The supervisor's settings: flags and `OPENSHELL_*` environment variables,
//! validated at start-up with errors that name the flag.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proto::client::{ClientConfig, Role};
use proto::secret::Secret;

use crate::trusted_keys::TrustedKeys;

/// A setting that is missing or invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A required setting is missing.
    #[error("{flag} (or {env}) is required")]
    Missing {
        /// The flag.
        flag: &'static str,
        /// The environment variable.
        env: &'static str,
    },
    /// A setting the supervisor needs unless `--insecure` is missing.
    #[error("no {what}: set {flag} (or {env}); only --insecure runs without it, for experiments")]
    Insecure {
        /// What is missing.
        what: &'static str,
        /// The flag that provides it.
        flag: &'static str,
        /// The environment variable.
        env: &'static str,
    },
    /// A setting is invalid.
    #[error("{flag} = {value:?}: {problem}")]
    Invalid {
        /// The flag.
        flag: &'static str,
        /// The value given.
        value: String,
        /// What is wrong.
        problem: String,
    },
}

/// Raw settings as parsed (all optional), before validation. `Debug`
/// prints the credential as `<redacted>` ([`Secret`]).
#[derive(Clone, Debug, Default)]
pub struct RawAgentConfig {
    /// Gateway endpoints, host:port.
    pub gateways: Vec<String>,
    /// `--pool-member-id`.
    pub member_id: Option<String>,
    /// `--pool-member-uid`.
    pub member_uid: Option<String>,
    /// `--pool-advertise-ip`.
    pub advertise_ip: Option<String>,
    /// `--listen`: accepted (and checked) so that old configurations still
    /// parse, otherwise ignored: the supervisor opens no gRPC port (exec
    /// travels on its stream to the gateway).
    pub listen: Option<String>,
    /// HTTP health endpoints listen address.
    pub http_listen: Option<String>,
    /// Sessions this supervisor hosts at most.
    pub capacity: Option<u32>,
    /// Supervisor credential presented to gateways.
    pub credential: Option<Secret>,
    /// `--credential-file`, where `credential` was read from: re-read at
    /// every hello, so a rotated token (a Kubernetes projected
    /// ServiceAccount token) is the one presented.
    pub credential_file: Option<PathBuf>,
    /// `--runtime-dir`: accepted from old configurations, ignored (logged).
    pub runtime_dir: Option<PathBuf>,
    /// `--runtime-bin`: accepted from old configurations, ignored (logged).
    pub runtime_bin: Option<PathBuf>,
    /// Try gateways in the listed order instead of from a random one.
    pub listed_order: bool,
    /// `--trusted-grant-keys-file`: the grant public keys this supervisor
    /// and its runtimes trust.
    pub trusted_grant_keys_file: Option<PathBuf>,
    /// `--insecure`: run without a credential or trusted grant keys
    /// (learning the grant key from the gateway's hello).
    pub insecure: bool,
    /// `--tls-ca-file`: the CA the gateways' certificates chain to (PEM);
    /// without it the attach stream is plaintext.
    pub tls_ca_file: Option<PathBuf>,
    /// `--no-drain-on-stop`: on SIGTERM leave the sessions to their runtimes
    /// at once (the member expires) instead of draining and leaving.
    pub no_drain_on_stop: bool,
    /// `--drain-timeout-ms`: how long a stop waits for the drain (default
    /// [`DEFAULT_DRAIN_TIMEOUT_MS`]).
    pub drain_timeout_ms: Option<u64>,
}

/// How long a stop waits for the pool to move this member's sandboxes away
/// before it leaves anyway (`--drain-timeout-ms`). Kubernetes'
/// `terminationGracePeriodSeconds` must exceed it.
pub const DEFAULT_DRAIN_TIMEOUT_MS: u64 = 25_000;

/// The longest `--drain-timeout-ms` (one hour).
pub const MAX_DRAIN_TIMEOUT_MS: u64 = 3_600_000;

/// Validated settings.
#[derive(Clone)]
pub struct AgentConfig {
    /// Gateway endpoints, host:port (at least one).
    pub gateways: Vec<String>,
    /// Pool member id.
    pub member_id: String,
    /// Pool member uid (the Pod uid in Kubernetes).
    pub member_uid: String,
    /// The IP announced in `HostHello` (informational: the pool status
    /// shows it; no gateway dials it).
    pub advertise_ip: IpAddr,
    /// Ignored (see [`RawAgentConfig::listen`]).
    pub listen: SocketAddr,
    /// HTTP health endpoints address.
    pub http_listen: Option<SocketAddr>,
    /// Capacity in sessions.
    pub capacity: u32,
    /// Credential for gateways (empty: none).
    pub credential: Secret,
    /// `--credential-file`: re-read at every hello ([`Self::current_credential`]).
    pub credential_file: Option<CredentialFile>,
    /// `--runtime-dir` if given: ignored, only warned about.
    pub runtime_dir: Option<PathBuf>,
    /// `--runtime-bin` if given: ignored, only warned about.
    pub runtime_bin: Option<PathBuf>,
    /// Pause after a failed attach, doubled up to `max_backoff`, jittered.
    pub min_backoff: Duration,
    /// Largest pause between attach attempts.
    pub max_backoff: Duration,
    /// How often a session heartbeats its runtime.
    pub runtime_heartbeat: Duration,
    /// Start with the first listed gateway (else a random one, to spread
    /// supervisors over gateways).
    pub listed_order: bool,
    /// How the attach stream to a gateway connects (deadlines, keepalive).
    pub gateway_client: ClientConfig,
    /// How calls to sandbox runtimes connect and how long they may take.
    pub runtime_client: ClientConfig,
    /// The grant keys this supervisor trusts (re-read on change): a gateway
    /// announcing another key is refused, and runtimes get the same file.
    /// None only with `insecure`.
    pub trusted_keys: Option<TrustedKeys>,
    /// Runs without the secure defaults (logged as a warning at start).
    pub insecure: bool,
    /// On the first SIGTERM/SIGINT, drain this member and leave the pool
    /// before exiting (`--drain-on-stop`, the default).
    pub drain_on_stop: bool,
    /// How long a stop waits for the drain before it leaves anyway.
    pub drain_timeout: Duration,
}

impl std::fmt::Debug for AgentConfig {
    /// Prints every field but the secrets, which show as `<redacted>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentConfig")
            .field("gateways", &self.gateways)
            .field("member_id", &self.member_id)
            .field("member_uid", &self.member_uid)
            .field("advertise_ip", &self.advertise_ip)
            .field("listen", &self.listen)
            .field("http_listen", &self.http_listen)
            .field("capacity", &self.capacity)
            .field("credential", &self.credential)
            .field("credential_file", &self.credential_file)
            .field("runtime_dir", &self.runtime_dir)
            .field("runtime_bin", &self.runtime_bin)
            .field("min_backoff", &self.min_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("runtime_heartbeat", &self.runtime_heartbeat)
            .field("listed_order", &self.listed_order)
            .field("gateway_client", &self.gateway_client)
            .field("runtime_client", &self.runtime_client)
            .field("trusted_keys", &self.trusted_keys)
            .field("insecure", &self.insecure)
            .field("drain_on_stop", &self.drain_on_stop)
            .field("drain_timeout", &self.drain_timeout)
            .finish()
    }
}

impl RawAgentConfig {
    /// Validates the settings.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the first flag at fault.
    pub fn validate(self) -> Result<AgentConfig, ConfigError> {
        let member_id = required(
            self.member_id,
            "--pool-member-id",
            "OPENSHELL_POOL_MEMBER_ID",
        )?;
        let member_uid = required(
            self.member_uid,
            "--pool-member-uid",
            "OPENSHELL_POOL_MEMBER_UID",
        )?;
        let ip_text = required(
            self.advertise_ip,
            "--pool-advertise-ip",
            "OPENSHELL_POOL_ADVERTISE_IP",
        )?;
        let advertise_ip: IpAddr = ip_text.parse().map_err(|_| ConfigError::Invalid {
            flag: "--pool-advertise-ip",
            value: ip_text.clone(),
            problem: "must be an IP address, e.g. 10.0.0.7".into(),
        })?;
        check_identity("--pool-member-id", &member_id)?;
        check_identity("--pool-member-uid", &member_uid)?;
        let gateways = check_gateways(self.gateways)?;
        let listen_text = self.listen.unwrap_or_else(|| format!("{advertise_ip}:0"));
        let listen = parse_socket_addr("--listen", listen_text)?;
        let http_listen = self
            .http_listen
            .map(|text| parse_socket_addr("--http-listen", text))
            .transpose()?;
        let capacity = self.capacity.unwrap_or(16);
        if capacity == 0 || capacity > 10_000 {
            return Err(ConfigError::Invalid {
                flag: "--capacity",
                value: capacity.to_string(),
                problem: "must be within 1..=10000".into(),
            });
        }
        let runtime_dir = self.runtime_dir;
        let credential = self.credential.unwrap_or_default();
        let trusted_keys = self
            .trusted_grant_keys_file
            .as_deref()
            .map(load_trusted_keys)
            .transpose()?;
        if !self.insecure {
            check_secure(
                credential.expose(),
                trusted_keys.as_ref(),
                self.tls_ca_file.is_some(),
            )?;
        }
        let runtime_bin = self.runtime_bin;
        let drain_timeout_ms = self.drain_timeout_ms.unwrap_or(DEFAULT_DRAIN_TIMEOUT_MS);
        if drain_timeout_ms > MAX_DRAIN_TIMEOUT_MS {
            return Err(ConfigError::Invalid {
                flag: "--drain-timeout-ms",
                value: drain_timeout_ms.to_string(),
                problem: format!("must be within 0..={MAX_DRAIN_TIMEOUT_MS}"),
            });
        }
        let gateway_tls = self
            .tls_ca_file
            .as_deref()
            .map(|ca| {
                proto::tls::ClientTls::load(ca, None).map_err(|e| ConfigError::Invalid {
                    flag: "--tls-ca-file",
                    value: ca.display().to_string(),
                    problem: e.to_string(),
                })
            })
            .transpose()?;
        Ok(AgentConfig {
            gateways,
            member_id,
            member_uid,
            advertise_ip,
            listen,
            http_listen,
            capacity,
            credential_file: self
                .credential_file
                .map(|path| CredentialFile::new(path, credential.clone())),
            credential,
            runtime_dir,
            runtime_bin,
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            runtime_heartbeat: Duration::from_millis(250),
            listed_order: self.listed_order,
            gateway_client: ClientConfig::for_role(Role::SupervisorToGateway).with_tls(gateway_tls),
            runtime_client: ClientConfig::for_role(Role::SupervisorToRuntime),
            trusted_keys,
            insecure: self.insecure,
            drain_on_stop: !self.no_drain_on_stop,
            drain_timeout: Duration::from_millis(drain_timeout_ms),
        })
    }
}

/// The credential file (`--credential-file`), re-read at every hello: the
/// kubelet rotates a projected ServiceAccount token in place (an atomic
/// `..data` symlink swap), and a supervisor that kept the first one would be
/// refused once it expires.
#[derive(Clone)]
pub struct CredentialFile {
    /// The file.
    path: PathBuf,
    /// The last credential read from it, presented when a re-read fails.
    /// A std mutex: held for a clone or an assignment only.
    last: Arc<Mutex<Secret>>,
}

impl std::fmt::Debug for CredentialFile {
    /// The path only: the contents are secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CredentialFile({})", self.path.display())
    }
}

impl CredentialFile {
    /// The file at `path`, whose contents at start were `first`.
    pub fn new(path: PathBuf, first: Secret) -> Self {
        CredentialFile {
            path,
            last: Arc::new(Mutex::new(first)),
        }
    }

    /// The file's credential now (a trailing newline trimmed); if it cannot
    /// be read or is empty, the last one read, with a warning.
    pub fn read(&self) -> Secret {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match proto::secret::read_secret_file("--credential-file", &self.path) {
            Ok(credential) => *last = credential.into(),
            Err(error) => {
                tracing::warn!(%error, "credential file not re-read: presenting the last credential read from it")
            }
        }
        last.clone()
    }
}

impl AgentConfig {
    /// The credential a hello presents: the credential file re-read, else
    /// the credential given at start.
    pub fn current_credential(&self) -> Secret {
        match &self.credential_file {
            Some(file) => file.read(),
            None => self.credential.clone(),
        }
    }
}

/// Secure by default: what a supervisor needs unless `--insecure`, each
/// refusal one line naming the missing thing and its flag: the CA the
/// gateways' certificates are verified with, the credential, the trusted
/// grant keys.
fn check_secure(
    credential: &str,
    trusted_keys: Option<&TrustedKeys>,
    tls_ca: bool,
) -> Result<(), ConfigError> {
    if credential.is_empty() {
        return Err(ConfigError::Insecure {
            what: "supervisor credential",
            flag: "--credential-file",
            env: "OPENSHELL_SUPERVISOR_TOKEN_FILE",
        });
    }
    if trusted_keys.is_none() {
        return Err(ConfigError::Insecure {
            what: "trusted grant keys",
            flag: "--trusted-grant-keys-file",
            env: "OPENSHELL_TRUSTED_GRANT_KEYS_FILE",
        });
    }
    if !tls_ca {
        return Err(ConfigError::Insecure {
            what: "CA to verify gateways with",
            flag: "--tls-ca-file",
            env: "OPENSHELL_TLS_CA_FILE",
        });
    }
    Ok(())
}

/// Loads the trusted grant keys file (its path made absolute: runtimes are
/// given the same path and re-read it themselves).
fn load_trusted_keys(path: &std::path::Path) -> Result<TrustedKeys, ConfigError> {
    let invalid = |problem: String| ConfigError::Invalid {
        flag: "--trusted-grant-keys-file",
        value: path.display().to_string(),
        problem,
    };
    let path = std::path::absolute(path).map_err(|e| invalid(e.to_string()))?;
    TrustedKeys::load(&path).map_err(invalid)
}

/// A member id or uid: 1..=256 bytes of printable ASCII without spaces
/// ([`proto::text::check_printable`]; the gateway also holds a member id
/// to the identifier rule).
fn check_identity(flag: &'static str, value: &str) -> Result<(), ConfigError> {
    // The gateway's rule for a hello's uid and address (it refuses the
    // stream otherwise): said here at start-up instead of on every attach.
    proto::text::check_printable(flag, value, 256).map_err(|problem| ConfigError::Invalid {
        flag,
        value: value.to_string(),
        problem,
    })
}

/// The gateway endpoints: at least one, each `host:port`.
fn check_gateways(gateways: Vec<String>) -> Result<Vec<String>, ConfigError> {
    let gateways: Vec<String> = gateways
        .into_iter()
        .filter(|g| !g.trim().is_empty())
        .collect();
    if gateways.is_empty() {
        return Err(ConfigError::Missing {
            flag: "--gateways",
            env: "OPENSHELL_GATEWAYS",
        });
    }
    for g in &gateways {
        if g.rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok())
            .is_none()
        {
            return Err(ConfigError::Invalid {
                flag: "--gateways",
                value: g.clone(),
                problem: "each endpoint must be host:port".into(),
            });
        }
    }
    Ok(gateways)
}

/// An `ip:port` flag value.
fn parse_socket_addr(flag: &'static str, text: String) -> Result<SocketAddr, ConfigError> {
    text.parse().map_err(|_| ConfigError::Invalid {
        flag,
        value: text,
        problem: "must be ip:port".into(),
    })
}

fn required(
    value: Option<String>,
    flag: &'static str,
    env: &'static str,
) -> Result<String, ConfigError> {
    match value {
        Some(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        _ => Err(ConfigError::Missing { flag, env }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw() -> RawAgentConfig {
        RawAgentConfig {
            gateways: vec!["127.0.0.1:7001".into()],
            member_id: Some("m1".into()),
            member_uid: Some("u1".into()),
            advertise_ip: Some("127.0.0.1".into()),
            insecure: true,
            ..Default::default()
        }
    }

    #[test]
    fn without_insecure_a_ca_a_credential_and_trusted_keys_are_required() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let ca = proto::tls::generate::Ca::create(dir.path(), "test CA")
            .unwrap_or_else(|e| panic!("{e}"));
        let keys = dir.path().join("trusted");
        let signer = proto::grant::GrantSigner::from_seed_hex(&"11".repeat(32))
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&keys, format!("# k\n{}\n", signer.public_key_hex()))
            .unwrap_or_else(|e| panic!("{e}"));
        let secure = |credential: Option<&str>, keys: Option<&std::path::Path>| RawAgentConfig {
            insecure: false,
            credential: credential.map(Secret::from),
            trusted_grant_keys_file: keys.map(|k| k.to_path_buf()),
            tls_ca_file: Some(ca.cert.clone()),
            ..raw()
        };
        let e = secure(None, Some(&keys))
            .validate()
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("no supervisor credential: set --credential-file (or OPENSHELL_SUPERVISOR_TOKEN_FILE); only --insecure runs without it, for experiments")
        );
        let e = secure(Some("c"), None)
            .validate()
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("no trusted grant keys: set --trusted-grant-keys-file (or OPENSHELL_TRUSTED_GRANT_KEYS_FILE); only --insecure runs without it, for experiments")
        );
        let e = RawAgentConfig {
            tls_ca_file: None,
            ..secure(Some("c"), Some(&keys))
        }
        .validate()
        .err()
        .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("no CA to verify gateways with: set --tls-ca-file (or OPENSHELL_TLS_CA_FILE); only --insecure runs without it, for experiments")
        );
        let config = secure(Some("c"), Some(&keys))
            .validate()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(config.gateway_client.tls.is_some());
        let trusted = config.trusted_keys.unwrap_or_else(|| panic!("no keys"));
        assert!(trusted.current().trusts(&signer.public_key_hex()));
        std::fs::write(&keys, "not a key\n").unwrap_or_else(|e| panic!("{e}"));
        let e = secure(Some("c"), Some(&keys))
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.starts_with("--trusted-grant-keys-file") && e.contains("line 1"),
            "{e}"
        );
        // --insecure: neither is needed.
        assert!(RawAgentConfig {
            insecure: true,
            ..secure(None, None)
        }
        .validate()
        .is_ok());
    }

    #[test]
    fn the_credential_file_is_re_read_at_every_hello() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("token");
        std::fs::write(&file, "first-token\n").unwrap_or_else(|e| panic!("{e}"));
        let mut r = raw();
        r.credential = Some("first-token".into());
        r.credential_file = Some(file.clone());
        let config = r.validate().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.current_credential().expose(), "first-token");
        std::fs::write(&file, "rotated-token").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.current_credential().expose(), "rotated-token");
        std::fs::remove_file(&file).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.current_credential().expose(), "rotated-token");
        assert!(!format!("{config:?}").contains("rotated-token"));
        assert_eq!(
            raw()
                .validate()
                .map(|c| c.current_credential().expose().to_string())
                .ok(),
            Some(String::new())
        );
    }

    #[test]
    fn debug_redacts_the_credential() {
        let mut r = raw();
        r.credential = Some("cred-s3cret".into());
        let shown = format!("{r:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        let config = r.validate().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.credential.expose(), "cred-s3cret");
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn missing_or_invalid_identity_names_the_flag() {
        let mut r = raw();
        r.member_id = None;
        assert_eq!(
            r.validate().err().map(|e| e.to_string()),
            Some("--pool-member-id (or OPENSHELL_POOL_MEMBER_ID) is required".into())
        );
        let mut r = raw();
        r.advertise_ip = Some("not-an-ip".into());
        assert!(r
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
            .starts_with("--pool-advertise-ip"));
        let mut r = raw();
        r.gateways = vec![];
        assert!(r
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
            .starts_with("--gateways"));
        assert!(raw().validate().is_ok());
    }
}

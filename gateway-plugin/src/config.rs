//! Gateway configuration: a TOML file with OpenShell's section names, flags and
//! environment variables over it, validated at start-up.
//!
//! ```toml
//! [openshell.gateway]
//! node_id = 1
//! listen_addr = "127.0.0.1:7001"           # client port: CLI, supervisors
//! peer_listen_addr = "127.0.0.1:7101"      # peer port: other gateways (mutual TLS)
//! advertise_addr = "127.0.0.1:7101"        # this node in the membership (the peer port)
//! data_dir = "/var/lib/openshell/gateway"
//! cluster_id = "openshell"
//! initial_voters = ["1=127.0.0.1:7101", "2=127.0.0.1:7102", "3=127.0.0.1:7103"]
//! signing_key_file = "/etc/openshell/signing.key"
//!
//! [openshell.gateway.tls]
//! cert_file = "/etc/openshell/tls/tls.crt"  # served on both ports, presented to peers
//! key_file = "/etc/openshell/tls/tls.key"
//! ca_file = "/etc/openshell/tls/ca.crt"     # signs every gateway's certificate
//!
//! [openshell.gateway.auth]
//! admin_token_files = ["/etc/openshell/admin.token"]   # or admin_tokens = ["..."]
//!
//! [openshell.gateway.raft]
//! heartbeat_interval_ms = 50
//! election_timeout_min_ms = 150
//! election_timeout_max_ms = 300
//! snapshot_after_logs = 5000
//! logs_to_keep = 1000
//! snapshot_chunk_bytes = 1048576
//! write_timeout_ms = 5000
//! max_snapshot_bytes = 1073741824
//! max_message_bytes = 67108864
//!
//! [openshell.gateway.supervisor_pool]
//! tick_interval_ms = 250
//! heartbeat_ttl_ms = 2000
//! recovery_deadline_ms = 60000
//! operation_deadline_ms = 600000
//! status_interval_ms = 250
//! retention_ticks = 14400                # finished records kept this many ticks (config_pool)
//! member_credentials_file = "/etc/openshell/member-credentials"
//! # supervisor_token = "..."   # deprecated: any supervisor holding it joins as any member
//! ```
//!
//! Every error names the key (`openshell.gateway.raft.heartbeat_interval_ms`)
//! and the allowed range. Unknown keys are errors.
//!
//! # Secure by default
//! Without `insecure = true` (`--insecure`) a gateway refuses to start
//! unless it has a signing key file, TLS files, a peer port and at least one
//! admin token: [`ConfigError::NotSecured`] names each one missing and its
//! flag. `--insecure` lets any of them be missing (plaintext gRPC, one port
//! for everything when no peer port is given, open APIs without tokens, a
//! development signing key); files that are given are still used.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use raft_store::{codec, NodeConfig};
use serde::{Deserialize, Serialize};

use crate::config_error::in_range;
pub use crate::config_error::ConfigError;
pub use crate::config_pool::{PoolSettings, SupervisorPoolSection};
pub use crate::config_tls::{AuthSection, GatewayTls, TlsSection};

/// `[openshell.gateway.raft]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RaftSection {
    /// Leader heartbeat interval, ms (10..=10000, default 50).
    pub heartbeat_interval_ms: Option<u64>,
    /// Election timeout lower bound, ms (> 2 × heartbeat, default 150).
    pub election_timeout_min_ms: Option<u64>,
    /// Election timeout upper bound, ms (> min, default 300).
    pub election_timeout_max_ms: Option<u64>,
    /// Entries between snapshots (10..=10000000, default 5000).
    pub snapshot_after_logs: Option<u64>,
    /// Entries kept behind a snapshot (0..=10000000, default 1000).
    pub logs_to_keep: Option<u64>,
    /// Largest snapshot chunk, bytes (4096..=33554432, default 1 MiB).
    pub snapshot_chunk_bytes: Option<u64>,
    /// How long a write may wait for a leader, ms (100..=600000, default 5000).
    pub write_timeout_ms: Option<u64>,
    /// Largest snapshot received from a leader, bytes (1 MiB..=64 GiB,
    /// default 1 GiB); a chunk ending past it is refused.
    pub max_snapshot_bytes: Option<u64>,
    /// Largest raft message, bytes (256 KiB..=64 MiB, default 64 MiB).
    pub max_message_bytes: Option<u64>,
}

/// `[openshell.gateway]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySection {
    /// This gateway's raft node id (>= 1).
    pub node_id: Option<u64>,
    /// Address the client port binds (CLI, supervisors, object store).
    pub listen_addr: Option<String>,
    /// Address the peer port binds (raft and forwarded calls between
    /// gateways, mutual TLS). Required unless `insecure`; without it an
    /// insecure gateway serves everything on `listen_addr`.
    pub peer_listen_addr: Option<String>,
    /// This node's address in the raft membership, where other gateways
    /// reach it: the peer port (default: peer_listen_addr, else
    /// listen_addr).
    pub advertise_addr: Option<String>,
    /// Data directory.
    pub data_dir: Option<PathBuf>,
    /// Cluster id (default "openshell").
    pub cluster_id: Option<String>,
    /// Voters of a new cluster, `id=host:port`; the lowest id bootstraps it.
    /// `initial_members` is the former name, still read.
    #[serde(alias = "initial_members")]
    pub initial_voters: Option<Vec<String>>,
    /// Raft timing and snapshot policy.
    pub raft: Option<RaftSection>,
    /// Pool timing.
    pub supervisor_pool: Option<SupervisorPoolSection>,
    /// File holding the cluster signing key (64 hex characters, the ed25519
    /// seed); every gateway of the cluster needs the same key.
    pub signing_key_file: Option<PathBuf>,
    /// Address of the HTTP endpoints (/healthz, /readyz, /metrics).
    pub http_listen_addr: Option<String>,
    /// Bearer tokens.
    pub auth: Option<AuthSection>,
    /// TLS files.
    pub tls: Option<TlsSection>,
    /// Where runtimes are launched (`[openshell.gateway.sandbox_driver]`).
    pub sandbox_driver: Option<crate::config_driver::SandboxDriverSection>,
    /// Allow running without TLS, tokens or a signing key (development).
    pub insecure: Option<bool>,
    /// The voter autopilot (`[openshell.gateway.autopilot]`).
    pub autopilot: Option<crate::config_statefulset::AutopilotSection>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct OpenShellSection {
    gateway: Option<GatewaySection>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct FileRoot {
    openshell: Option<OpenShellSection>,
}

/// Reads `[openshell.gateway]` from a TOML file.
///
/// # Errors
/// [`ConfigError::File`] naming the file and the offending key.
pub fn read_file(path: &Path) -> Result<GatewaySection, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
        path: path.to_path_buf(),
        problem: e.to_string(),
    })?;
    let root: FileRoot = toml::from_str(&text).map_err(|e| {
        // One line: "line L: <what is wrong>", not toml's multi-line snippet.
        let line = e
            .span()
            .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
        let problem = match line {
            Some(line) => format!("line {line}: {}", e.message().trim()),
            None => e.message().trim().to_string(),
        };
        ConfigError::File {
            path: path.to_path_buf(),
            problem: problem.replace('\n', " "),
        }
    })?;
    Ok(root.openshell.and_then(|o| o.gateway).unwrap_or_default())
}

/// `section` as the TOML text [`read_file`] reads back: how a launcher (a
/// local cluster, a test harness) hands a gateway its configuration with
/// `--config`, in the gateway's own types rather than re-spelled flags.
///
/// # Errors
/// When a value has no TOML form (none of the section's types lacks one).
pub fn to_toml(section: &GatewaySection) -> Result<String, toml::ser::Error> {
    toml::to_string(&FileRoot {
        openshell: Some(OpenShellSection {
            gateway: Some(section.clone()),
        }),
    })
}

impl GatewaySection {
    /// Overlays `other`'s set values on `self` (flags over file).
    pub fn overlay(mut self, other: GatewaySection) -> GatewaySection {
        macro_rules! take {
            ($($f:ident),*) => { $( if other.$f.is_some() { self.$f = other.$f; } )* };
        }
        take!(
            node_id,
            listen_addr,
            peer_listen_addr,
            advertise_addr,
            data_dir,
            cluster_id,
            initial_voters,
            signing_key_file,
            http_listen_addr,
            insecure
        );
        let mut tls = self.tls.unwrap_or_default();
        if let Some(o) = other.tls {
            macro_rules! take_tls {
                ($($f:ident),*) => { $( if o.$f.is_some() { tls.$f = o.$f; } )* };
            }
            take_tls!(cert_file, key_file, ca_file);
        }
        self.tls = Some(tls);
        if let Some(o) = other.sandbox_driver {
            self.sandbox_driver = Some(self.sandbox_driver.unwrap_or_default().overlay(o));
        }
        if let Some(o) = other.autopilot {
            self.autopilot = Some(self.autopilot.unwrap_or_default().overlay(o));
        }
        let auth = self.auth.unwrap_or_default();
        let auth = match other.auth {
            Some(o) => auth.overlay(o),
            None => auth,
        };
        self.auth = Some(auth);
        let mut raft = self.raft.unwrap_or_default();
        if let Some(o) = other.raft {
            macro_rules! take_raft {
                ($($f:ident),*) => { $( if o.$f.is_some() { raft.$f = o.$f; } )* };
            }
            take_raft!(
                heartbeat_interval_ms,
                election_timeout_min_ms,
                election_timeout_max_ms,
                snapshot_after_logs,
                logs_to_keep,
                snapshot_chunk_bytes,
                write_timeout_ms,
                max_snapshot_bytes,
                max_message_bytes
            );
        }
        self.raft = Some(raft);
        let mut pool = self.supervisor_pool.unwrap_or_default();
        if let Some(o) = other.supervisor_pool {
            macro_rules! take_pool {
                ($($f:ident),*) => { $( if o.$f.is_some() { pool.$f = o.$f; } )* };
            }
            take_pool!(
                tick_interval_ms,
                heartbeat_ttl_ms,
                recovery_deadline_ms,
                operation_deadline_ms,
                status_interval_ms,
                retention_ticks,
                supervisor_token,
                member_credentials_file,
                member_identity,
                member_identity_audience,
                member_identity_service_account
            );
        }
        self.supervisor_pool = Some(pool);
        self
    }
}

/// The validated configuration a gateway runs with.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// The raft node.
    pub node: NodeConfig,
    /// Address the client port binds.
    pub listen_addr: SocketAddr,
    /// Address the peer port binds (`None`: an insecure gateway serving
    /// everything on `listen_addr`).
    pub peer_listen_addr: Option<SocketAddr>,
    /// TLS of both ports and of calls to peers (`None`: plaintext,
    /// `--insecure`).
    pub tls: Option<GatewayTls>,
    /// Started with `--insecure` (logged as a warning at start).
    pub insecure: bool,
    /// Voters of a new cluster (empty: join an existing one as a learner).
    pub initial_voters: Vec<(u64, String)>,
    /// Pool timing and supervisor credential.
    pub pool: PoolSettings,
    /// Signs takeover grants.
    pub signer: proto::grant::GrantSigner,
    /// True when the signer is the insecure development key.
    pub insecure_signing_key: bool,
    /// HTTP endpoints address, if served.
    pub http_listen: Option<SocketAddr>,
    /// Bearer tokens.
    pub auth: crate::auth::Auth,
    /// Where this gateway launches runtimes when it leads, and what they
    /// trust.
    pub launcher: crate::config_driver::LauncherConfig,
    /// The voter autopilot, if configured.
    pub autopilot: Option<crate::config_statefulset::AutopilotConfig>,
}

/// Parses a raft node, `id=host:port`.
pub fn parse_node(text: &str) -> Result<(u64, String), String> {
    let (id, addr) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not id=host:port"))?;
    let id: u64 = id
        .trim()
        .parse()
        .map_err(|_| format!("{text:?}: node id {id:?} is not a number"))?;
    if id == 0 {
        return Err(format!("{text:?}: node id 0 is reserved"));
    }
    let addr = addr.trim();
    if addr
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .is_none()
    {
        return Err(format!("{text:?}: {addr:?} is not host:port"));
    }
    Ok((id, addr.to_string()))
}

impl GatewaySection {
    /// Validates the merged settings.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the first key at fault.
    pub fn validate(self) -> Result<GatewayConfig, ConfigError> {
        let node_id = self.node_id.ok_or(ConfigError::Missing {
            key: "openshell.gateway.node_id",
            flag: "--node-id",
        })?;
        let node_id = in_range("openshell.gateway.node_id", node_id, 1, u64::MAX)?;
        let listen = self.listen_addr.ok_or(ConfigError::Missing {
            key: "openshell.gateway.listen_addr",
            flag: "--listen",
        })?;
        let (listen_addr, peer_listen_addr, advertise) = crate::config_tls::ports(
            &listen,
            self.peer_listen_addr.as_deref(),
            self.advertise_addr,
        )?;
        let data_dir = self.data_dir.ok_or(ConfigError::Missing {
            key: "openshell.gateway.data_dir",
            flag: "--data-dir",
        })?;
        let cluster_id = self.cluster_id.unwrap_or_else(|| "openshell".to_string());
        // The identifier rule, as a backup's header is checked against it.
        if let Some(rule) = proto::ids::id_rule(&cluster_id) {
            return Err(ConfigError::Invalid {
                key: "openshell.gateway.cluster_id",
                value: cluster_id.escape_debug().to_string(),
                problem: format!(
                    "{rule} (1 to 128 of [A-Za-z0-9._-], not starting with '.' or '-')"
                ),
            });
        }
        let mut initial_voters = Vec::new();
        for m in self.initial_voters.unwrap_or_default() {
            let voter = parse_node(&m).map_err(|problem| ConfigError::Invalid {
                key: "openshell.gateway.initial_voters",
                value: m.clone(),
                problem,
            })?;
            initial_voters.push(voter);
        }
        check_distinct_voters(&initial_voters)?;
        let driver_section = self.sandbox_driver.unwrap_or_default();
        let autopilot = self.autopilot.unwrap_or_default().validate()?;
        let launcher = driver_section.validate_launcher(&data_dir)?;
        let mut node = NodeConfig::new(node_id, &advertise, data_dir, &cluster_id);
        validate_raft(&mut node, self.raft.unwrap_or_default())?;
        let pool = crate::config_pool::validate_pool(self.supervisor_pool.unwrap_or_default())?;
        let (signer, insecure_signing_key) =
            load_signer(self.signing_key_file.as_deref(), &cluster_id)?;
        let http_listen = match &self.http_listen_addr {
            None => None,
            Some(text) => Some(text.parse().map_err(|_| ConfigError::Invalid {
                key: "openshell.gateway.http_listen_addr",
                value: text.clone(),
                problem: "must be ip:port, e.g. 127.0.0.1:9001".into(),
            })?),
        };
        let auth_section = self.auth.unwrap_or_default().read_token_files()?;
        let insecure = self.insecure.unwrap_or(false);
        let tls = crate::config_tls::secure(
            insecure,
            &self.tls.unwrap_or_default(),
            peer_listen_addr.is_some(),
            insecure_signing_key,
            &auth_section,
        )?;
        node.peer_tls = tls.as_ref().map(|t| t.peer_client.clone());
        let auth = crate::auth::Auth::new(
            auth_section.admin_tokens.unwrap_or_default(),
            auth_section.viewer_tokens.unwrap_or_default(),
        );
        Ok(GatewayConfig {
            node,
            listen_addr,
            peer_listen_addr,
            tls,
            insecure,
            initial_voters,
            pool,
            signer,
            insecure_signing_key,
            http_listen,
            auth,
            launcher,
            autopilot,
        })
    }
}

/// Refuses initial voters that name one node id twice, or one address under
/// two ids (one process would count as two voters).
fn check_distinct_voters(voters: &[(u64, String)]) -> Result<(), ConfigError> {
    for (i, (id, addr)) in voters.iter().enumerate() {
        for (other_id, other_addr) in &voters[..i] {
            let problem = if other_id == id {
                format!("node id {id} is listed twice ({other_addr} and {addr}); give each voter its own id")
            } else if other_addr == addr {
                format!(
                    "address {addr} is listed for node ids {other_id} and {id}; one gateway process is one \
                     voter: give each voter its own address"
                )
            } else {
                continue;
            };
            return Err(ConfigError::Invalid {
                key: "openshell.gateway.initial_voters",
                value: voters
                    .iter()
                    .map(|(id, addr)| format!("{id}={addr}"))
                    .collect::<Vec<_>>()
                    .join(","),
                problem,
            });
        }
    }
    Ok(())
}

/// Validates `[openshell.gateway.raft]` into `node`.
fn validate_raft(node: &mut NodeConfig, raft: RaftSection) -> Result<(), ConfigError> {
    let heartbeat = in_range(
        "openshell.gateway.raft.heartbeat_interval_ms",
        raft.heartbeat_interval_ms.unwrap_or(50),
        10,
        10_000,
    )?;
    let election_min = in_range(
        "openshell.gateway.raft.election_timeout_min_ms",
        raft.election_timeout_min_ms.unwrap_or(150),
        heartbeat * 2 + 1,
        60_000,
    )?;
    let election_max = in_range(
        "openshell.gateway.raft.election_timeout_max_ms",
        raft.election_timeout_max_ms.unwrap_or(300),
        election_min + 1,
        120_000,
    )?;
    node.heartbeat_interval = Duration::from_millis(heartbeat);
    node.election_timeout_min = Duration::from_millis(election_min);
    node.election_timeout_max = Duration::from_millis(election_max);
    node.snapshot_after_logs = in_range(
        "openshell.gateway.raft.snapshot_after_logs",
        raft.snapshot_after_logs.unwrap_or(5000),
        10,
        10_000_000,
    )?;
    node.logs_to_keep = in_range(
        "openshell.gateway.raft.logs_to_keep",
        raft.logs_to_keep.unwrap_or(1000),
        0,
        10_000_000,
    )?;
    node.snapshot_chunk_bytes = in_range(
        "openshell.gateway.raft.snapshot_chunk_bytes",
        raft.snapshot_chunk_bytes.unwrap_or(1024 * 1024),
        4096,
        32 * 1024 * 1024,
    )?;
    node.write_timeout = Duration::from_millis(in_range(
        "openshell.gateway.raft.write_timeout_ms",
        raft.write_timeout_ms.unwrap_or(5000),
        100,
        600_000,
    )?);
    node.max_snapshot_bytes = in_range(
        "openshell.gateway.raft.max_snapshot_bytes",
        raft.max_snapshot_bytes
            .unwrap_or(raft_store::network::incoming_snapshot::DEFAULT_MAX_SNAPSHOT_BYTES),
        1024 * 1024,
        64 * 1024 * 1024 * 1024,
    )?;
    let lo = codec::MIN_MESSAGE_BYTES as u64;
    let hi = codec::MAX_MESSAGE_BYTES as u64;
    let key = "openshell.gateway.raft.max_message_bytes";
    node.max_message_bytes = in_range(key, raft.max_message_bytes.unwrap_or(hi), lo, hi)? as usize;
    Ok(())
}

/// The grant signer: from the key file, or (without one) the insecure
/// development key derived from the cluster id (`true` says so).
fn load_signer(
    path: Option<&std::path::Path>,
    cluster_id: &str,
) -> Result<(proto::grant::GrantSigner, bool), ConfigError> {
    match path {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Invalid {
                key: "openshell.gateway.signing_key_file",
                value: path.display().to_string(),
                problem: format!("cannot be read: {e}"),
            })?;
            let signer = proto::grant::GrantSigner::from_seed_hex(&text).map_err(|e| {
                ConfigError::Invalid {
                    key: "openshell.gateway.signing_key_file",
                    value: path.display().to_string(),
                    problem: format!("{e} (the file must hold 64 hex characters)"),
                }
            })?;
            Ok((signer, false))
        }
        None => Ok((
            proto::grant::GrantSigner::insecure_development_key(cluster_id),
            true,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> GatewaySection {
        GatewaySection {
            node_id: Some(1),
            listen_addr: Some("127.0.0.1:7001".into()),
            data_dir: Some("/tmp/x".into()),
            insecure: Some(true),
            ..Default::default()
        }
    }

    #[test]
    fn without_insecure_every_missing_piece_is_named_in_one_line() {
        let mut s = base();
        s.insecure = None;
        let e = s
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(!e.contains('\n'), "{e}");
        for flag in [
            "--signing-key-file",
            "--tls-cert-file",
            "--tls-key-file",
            "--tls-ca-file",
            "--peer-listen",
            "--admin-token-file",
            "--insecure",
        ] {
            assert!(e.contains(flag), "{flag} not named: {e}");
        }
    }

    #[test]
    fn debug_redacts_every_token() {
        let mut s = base();
        s.auth = Some(AuthSection {
            admin_tokens: Some(vec!["adm1n-s3cret".into()]),
            viewer_tokens: Some(vec!["v1ewer-s3cret".into()]),
            ..Default::default()
        });
        s.supervisor_pool = Some(SupervisorPoolSection {
            supervisor_token: Some("sup-s3cret".into()),
            ..Default::default()
        });
        let shown = format!("{s:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        s.insecure = Some(true);
        let config = s.validate().unwrap_or_else(|e| panic!("{e}"));
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn errors_name_the_key_and_range() {
        let mut s = base();
        s.raft = Some(RaftSection {
            heartbeat_interval_ms: Some(5),
            ..Default::default()
        });
        let e = s
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("openshell.gateway.raft.heartbeat_interval_ms = 5"),
            "{e}"
        );
        assert!(e.contains("10..=10000"), "{e}");
        let mut s = base();
        s.node_id = None;
        let e = s
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("openshell.gateway.node_id is required"), "{e}");
        let mut s = base();
        s.initial_voters = Some(vec!["x=1".into()]);
        let e = s
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("openshell.gateway.initial_voters"), "{e}");
        for bad in ["../../x\0", "", "-x", "a b"] {
            let mut s = base();
            s.cluster_id = Some(bad.into());
            let e = s
                .validate()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("openshell.gateway.cluster_id"), "{bad:?}: {e}");
            assert!(!e.contains('\0'), "{e}");
        }
    }

    #[test]
    fn initial_voters_name_each_id_and_address_once() {
        let refused = |voters: &[&str]| {
            let mut s = base();
            s.initial_voters = Some(voters.iter().map(|v| v.to_string()).collect());
            s.validate()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let e = refused(&["1=127.0.0.1:7001", "1=127.0.0.1:7002"]);
        assert!(e.contains("node id 1 is listed twice"), "{e}");
        let e = refused(&["1=127.0.0.1:7001", "2=127.0.0.1:7001"]);
        assert!(
            e.contains("address 127.0.0.1:7001 is listed for node ids 1 and 2"),
            "{e}"
        );
        assert_eq!(refused(&["1=127.0.0.1:7001", "2=127.0.0.1:7002"]), "");
    }

    #[test]
    fn flags_override_file_and_unknown_keys_fail() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("gw.toml");
        std::fs::write(
            &path,
            "[openshell.gateway]\nnode_id = 2\nlisten_addr = \"127.0.0.1:1\"\ndata_dir = \"/d\"\n[openshell.gateway.raft]\nheartbeat_interval_ms = 40\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let file = read_file(&path).unwrap_or_else(|e| panic!("{e}"));
        let merged = file.overlay(GatewaySection {
            node_id: Some(3),
            insecure: Some(true),
            ..Default::default()
        });
        let config = merged.validate().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.node.node_id, 3);
        assert_eq!(config.node.heartbeat_interval, Duration::from_millis(40));
        std::fs::write(&path, "[openshell.gateway]\nnode_idd = 2\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let e = read_file(&path)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("node_idd"), "{e}");
    }

    #[test]
    fn initial_voters_are_read_under_their_former_name_too() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("gw.toml");
        for key in ["initial_voters", "initial_members"] {
            std::fs::write(
                &path,
                format!("[openshell.gateway]\n{key} = [\"1=127.0.0.1:7001\"]\n"),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let file = read_file(&path).unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_eq!(
                file.initial_voters,
                Some(vec!["1=127.0.0.1:7001".to_string()]),
                "{key}"
            );
        }
    }

    #[test]
    fn a_section_written_as_toml_reads_back_the_same() {
        let dir = tempfile::tempdir().expect("tempdir");
        let token = dir.path().join("admin.token");
        std::fs::write(&token, "t0ken\n").expect("write");
        let mut s = base();
        s.insecure = None;
        s.peer_listen_addr = Some("127.0.0.1:7101".into());
        s.initial_voters = Some(vec!["1=127.0.0.1:7101".into(), "2=127.0.0.1:7102".into()]);
        s.raft = Some(RaftSection {
            heartbeat_interval_ms: Some(40),
            ..Default::default()
        });
        s.auth = Some(AuthSection {
            admin_token_files: Some(vec![token.clone()]),
            ..Default::default()
        });
        let file = dir.path().join("gateway.toml");
        std::fs::write(&file, to_toml(&s).expect("toml")).expect("write");
        let back = read_file(&file).expect("read back");
        assert_eq!(back.node_id, Some(1));
        assert_eq!(back.peer_listen_addr, s.peer_listen_addr);
        assert_eq!(back.initial_voters, s.initial_voters);
        assert_eq!(back.insecure, None, "an unset key stays unset");
        assert_eq!(back.raft.and_then(|r| r.heartbeat_interval_ms), Some(40));
        let auth = back
            .auth
            .expect("auth")
            .read_token_files()
            .expect("token file");
        assert_eq!(auth.admin_tokens, Some(vec!["t0ken".to_string()]));
    }

    #[test]
    fn flags_replace_the_files_tokens_and_token_files_together() {
        let file = AuthSection {
            admin_tokens: Some(vec!["from-file".into()]),
            admin_token_files: Some(vec!["/etc/t".into()]),
            viewer_tokens: Some(vec!["viewer".into()]),
            ..Default::default()
        };
        let flags = AuthSection {
            admin_tokens: Some(vec!["from-flag".into()]),
            ..Default::default()
        };
        let merged = file.overlay(flags);
        assert_eq!(merged.admin_tokens, Some(vec!["from-flag".to_string()]));
        assert_eq!(merged.admin_token_files, None);
        assert_eq!(merged.viewer_tokens, Some(vec!["viewer".to_string()]));
        let missing = AuthSection {
            admin_token_files: Some(vec!["/nonexistent/admin.token".into()]),
            ..Default::default()
        };
        let e = missing
            .read_token_files()
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("openshell.gateway.auth.admin_token_files"),
            "{e}"
        );
        assert!(e.contains("/nonexistent/admin.token"), "{e}");
    }
}

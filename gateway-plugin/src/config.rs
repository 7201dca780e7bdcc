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
//! status_interval_ms = 500           # default: heartbeat_ttl_ms / 4 up to 1 s, at least a tick
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
use std::time::Duration;

use raft_store::{codec, NodeConfig};

use crate::config_driver::ValidateDriver;
use crate::config_error::in_range;
pub use crate::config_error::ConfigError;
pub use crate::config_pool::{PoolSettings, SupervisorPoolSection};
use crate::config_statefulset::ValidateAutopilot;
pub use crate::config_tls::{AuthSection, GatewayTls, TlsSection};
pub use gateway_config::{read_file, to_toml, GatewaySection, RaftSection};

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
    /// Worker threads of the async runtime the gateway binary builds
    /// (`None`: one per CPU the process may use). A program that embeds
    /// the gateway builds its own runtime and ignores it.
    pub worker_threads: Option<usize>,
}

/// Most worker threads `openshell.gateway.worker_threads` may ask for.
pub const MAX_WORKER_THREADS: u64 = 1024;

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

/// Validation of `[openshell.gateway]` (the section is `gateway_config`'s)
/// into what a gateway runs with.
pub trait ValidateGateway {
    /// Validates the merged settings.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the first key at fault.
    fn validate(self) -> Result<GatewayConfig, ConfigError>;
}

impl ValidateGateway for GatewaySection {
    fn validate(self) -> Result<GatewayConfig, ConfigError> {
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
        let worker_threads = match self.worker_threads {
            None => None,
            Some(n) => Some(in_range(
                "openshell.gateway.worker_threads",
                n,
                1,
                MAX_WORKER_THREADS,
            )?),
        };
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
        )
        .with_certificates(
            auth_section.admin_certificate_names.unwrap_or_default(),
            auth_section.viewer_certificate_names.unwrap_or_default(),
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
            // In range, so it fits.
            worker_threads: worker_threads.and_then(|n| usize::try_from(n).ok()),
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
}

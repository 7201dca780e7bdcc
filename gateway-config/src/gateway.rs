//! `[openshell.gateway]`: the top section with its subsections, read from
//! a TOML file ([`read_file`]), written back ([`to_toml`]) and laid under
//! the flags ([`GatewaySection::overlay`]).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::autopilot::AutopilotSection;
use crate::driver::SandboxDriverSection;
use crate::error::ConfigError;
use crate::pool::SupervisorPoolSection;
use crate::tls::{AuthSection, TlsSection};

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
    pub sandbox_driver: Option<SandboxDriverSection>,
    /// Allow running without TLS, tokens or a signing key (development).
    pub insecure: Option<bool>,
    /// The voter autopilot (`[openshell.gateway.autopilot]`).
    pub autopilot: Option<AutopilotSection>,
    /// Worker threads of the gateway's async runtime (1..=1024; default:
    /// one per CPU the process may use, the cgroup's CPU quota included).
    pub worker_threads: Option<u64>,
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
            insecure,
            worker_threads
        );
        let mut tls = self.tls.unwrap_or_default();
        if let Some(o) = other.tls {
            macro_rules! take_tls {
                ($($f:ident),*) => { $( if o.$f.is_some() { tls.$f = o.$f; } )* };
            }
            take_tls!(
                cert_file,
                key_file,
                ca_file,
                handshake_rate_per_address,
                handshake_burst_per_address
            );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_written_as_toml_reads_back_the_same() {
        let dir = tempfile::tempdir().expect("tempdir");
        let token = dir.path().join("admin.token");
        std::fs::write(&token, "t0ken\n").expect("write");
        let mut s = GatewaySection {
            node_id: Some(1),
            listen_addr: Some("127.0.0.1:7001".into()),
            data_dir: Some("/tmp/x".into()),
            ..Default::default()
        };
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
        assert_eq!(auth.admin_tokens, Some(vec!["t0ken".into()]));
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
        assert_eq!(merged.admin_tokens, Some(vec!["from-flag".into()]));
        assert_eq!(merged.admin_token_files, None);
        assert_eq!(merged.viewer_tokens, Some(vec!["viewer".into()]));
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

//! A gateway of a local cluster as a spec in the gateway's own
//! configuration type ([`GatewaySection`], `[openshell.gateway]`), written
//! out as the `--config` file the gateway reads ([`GatewaySpec::write`]):
//! the one place a launcher says how a gateway is configured. A launcher's
//! own policy (a test's timing, a harness's address) goes in the section
//! or, as flags laid over the file, in [`GatewaySpec::extra_args`].

use std::path::{Path, PathBuf};

pub use gateway_config::SandboxDriverSection;
/// The gateway's own configuration types a spec is made of.
pub use gateway_config::{
    read_file, AuthSection, GatewaySection, RaftSection, SupervisorPoolSection, TlsSection,
};
use proto::tls::generate::Issued;

use crate::secrets::{write_private, GatewayFiles, SecretsError};

/// Why a spec could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The section has no TOML form.
    #[error("gateway {node_id}'s configuration: {source}")]
    Toml {
        /// The gateway.
        node_id: u64,
        /// Why.
        source: toml::ser::Error,
    },
    /// The file could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// One gateway: its configuration and the flags laid over it.
#[derive(Clone, Debug)]
pub struct GatewaySpec {
    /// `[openshell.gateway]` as the gateway reads it.
    pub config: GatewaySection,
    /// Flags after `--config` (flags win over the file): what a caller
    /// varies per start, e.g. a test's own timing.
    pub extra_args: Vec<String>,
}

impl GatewaySpec {
    /// Node `node_id` of cluster `cluster_id`, serving clients on
    /// `listen`, its data in `data_dir`. Neither secured nor insecure yet:
    /// [`GatewaySpec::secured`] or [`GatewaySpec::insecure`] says which.
    pub fn new(node_id: u64, listen: &str, data_dir: &Path, cluster_id: &str) -> GatewaySpec {
        GatewaySpec {
            config: GatewaySection {
                node_id: Some(node_id),
                listen_addr: Some(listen.to_string()),
                data_dir: Some(data_dir.to_path_buf()),
                cluster_id: Some(cluster_id.to_string()),
                ..GatewaySection::default()
            },
            extra_args: Vec::new(),
        }
    }

    /// The node id.
    pub fn node_id(&self) -> u64 {
        self.config.node_id.unwrap_or_default()
    }

    /// Plaintext and open APIs (`insecure = true`): development and tests
    /// only.
    pub fn insecure(mut self) -> GatewaySpec {
        self.config.insecure = Some(true);
        self
    }

    /// TLS on both ports with the certificate `issued`, and the secret
    /// files of `files` (CA, signing key, admin token, member credentials).
    pub fn secured(mut self, files: &GatewayFiles<'_>, issued: &Issued) -> GatewaySpec {
        self.config = self.config.overlay(files.section(issued));
        self
    }

    /// The peer port (raft and forwarded calls between gateways).
    pub fn peer_listen(mut self, addr: &str) -> GatewaySpec {
        self.config.peer_listen_addr = Some(addr.to_string());
        self
    }

    /// The address other gateways reach this one at, when not its peer
    /// port (a proxy in front of it).
    pub fn advertise(mut self, addr: &str) -> GatewaySpec {
        self.config.advertise_addr = Some(addr.to_string());
        self
    }

    /// The HTTP endpoints (/healthz, /readyz, /metrics).
    pub fn http_listen(mut self, addr: &str) -> GatewaySpec {
        self.config.http_listen_addr = Some(addr.to_string());
        self
    }

    /// The voters of a new cluster, `(node id, member address)`.
    pub fn initial_voters<'a>(
        mut self,
        voters: impl IntoIterator<Item = (u64, &'a str)>,
    ) -> GatewaySpec {
        self.config.initial_voters = Some(
            voters
                .into_iter()
                .map(|(id, addr)| format!("{id}={addr}"))
                .collect(),
        );
        self
    }

    /// Raft timing: the heartbeat and the election timeout's bounds, ms.
    pub fn raft_timing(mut self, heartbeat_ms: u64, election_ms: (u64, u64)) -> GatewaySpec {
        let raft = self.config.raft.get_or_insert_with(RaftSection::default);
        raft.heartbeat_interval_ms = Some(heartbeat_ms);
        raft.election_timeout_min_ms = Some(election_ms.0);
        raft.election_timeout_max_ms = Some(election_ms.1);
        self
    }

    /// Runtimes launched by the process driver under `dir`, running
    /// `runtime_bin`; `netns` is the driver's `process_netns` (`auto`,
    /// `on`, `off`).
    pub fn process_driver(mut self, dir: &Path, runtime_bin: &Path, netns: &str) -> GatewaySpec {
        let driver = self.driver();
        driver.kind = Some("process".into());
        driver.process_dir = Some(dir.to_path_buf());
        driver.runtime_bin = Some(runtime_bin.to_path_buf());
        driver.process_netns = Some(netns.to_string());
        self
    }

    /// The process driver's runtimes run in the network namespace `netns`
    /// and advertise `ip` (a harness whose hosts are namespaces).
    pub fn runtimes_in_namespace(mut self, netns: &str, ip: &str) -> GatewaySpec {
        let driver = self.driver();
        driver.process_runtime_netns = Some(netns.to_string());
        driver.process_runtime_ip = Some(ip.to_string());
        self
    }

    /// The trusted grant keys file runtimes verify grants with.
    pub fn runtime_trusted_keys(mut self, file: &Path) -> GatewaySpec {
        self.driver().runtime_trusted_keys_file = Some(file.display().to_string());
        self
    }

    /// Flags laid over the file.
    pub fn with_args<I, S>(mut self, args: I) -> GatewaySpec
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.extra_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Writes the configuration to `path` (mode 0600: it names secret
    /// files), replacing any file there; returns the gateway's arguments:
    /// `--config <path>` and then [`GatewaySpec::extra_args`].
    ///
    /// # Errors
    /// [`SpecError`] naming the file or the gateway.
    pub fn write(&self, path: &Path) -> Result<Vec<String>, SpecError> {
        let text = gateway_config::to_toml(&self.config).map_err(|source| SpecError::Toml {
            node_id: self.node_id(),
            source,
        })?;
        write_private(path, &text).map_err(|e| match e {
            SecretsError::Io { path, source } => SpecError::Io { path, source },
            other => SpecError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::other(other.to_string()),
            },
        })?;
        let mut args = vec!["--config".to_string(), path.display().to_string()];
        args.extend(self.extra_args.iter().cloned());
        Ok(args)
    }

    fn driver(&mut self) -> &mut SandboxDriverSection {
        self.config
            .sandbox_driver
            .get_or_insert_with(SandboxDriverSection::default)
    }
}

impl GatewayFiles<'_> {
    /// The part of a gateway's configuration these files make, with the
    /// certificate `issued`: TLS on both ports, the signing key, the admin
    /// token file and the member credentials file.
    pub fn section(&self, issued: &Issued) -> GatewaySection {
        GatewaySection {
            tls: Some(TlsSection {
                cert_file: Some(issued.cert.clone()),
                key_file: Some(issued.key.clone()),
                ca_file: Some(self.ca.to_path_buf()),
                ..TlsSection::default()
            }),
            signing_key_file: Some(self.signing_key.to_path_buf()),
            auth: Some(AuthSection {
                admin_token_files: Some(vec![self.admin_token.to_path_buf()]),
                ..AuthSection::default()
            }),
            supervisor_pool: self.member_credentials.map(|file| SupervisorPoolSection {
                member_credentials_file: Some(file.to_path_buf()),
                ..SupervisorPoolSection::default()
            }),
            ..GatewaySection::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_spec_is_what_the_gateway_reads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let secrets =
            crate::secrets::Secrets::prepare(dir.path(), "test CA", &["m1"]).expect("secrets");
        let issued = secrets
            .gateway_cert("gateway-1", &crate::secrets::loopback_names())
            .expect("cert");
        let spec = GatewaySpec::new(1, "127.0.0.1:7001", &dir.path().join("data"), "c1")
            .secured(
                &secrets.gateway_files(crate::secrets::Members::Listed),
                &issued,
            )
            .peer_listen("127.0.0.1:7101")
            .initial_voters([(1, "127.0.0.1:7101"), (2, "127.0.0.1:7102")])
            .raft_timing(40, (200, 400))
            .process_driver(&dir.path().join("runtimes"), Path::new("/bin/sh"), "off")
            .with_args(["--heartbeat-ms", "30"]);
        let file = dir.path().join("gateway-1.toml");
        let args = spec.write(&file).expect("write");
        assert_eq!(
            args[..2],
            ["--config".to_string(), file.display().to_string()]
        );
        assert_eq!(args[2..], ["--heartbeat-ms", "30"]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // The gateway's own reader reads every value back (that the gateway
        // accepts it, secure mode complete, is gateway-plugin's t96 with
        // the real binary's --check-config).
        let read = gateway_config::read_file(&file).expect("read");
        assert_eq!(read.node_id, Some(1));
        assert_eq!(read.initial_voters.map(|v| v.len()), Some(2));
        assert_eq!(read.insecure, None);
        let tls = read.tls.unwrap_or_default();
        assert_eq!(tls.cert_file, Some(issued.cert.clone()));
        assert_eq!(tls.ca_file.as_deref(), Some(secrets.ca_file()));
        let auth = read.auth.unwrap_or_default();
        assert_eq!(
            auth.admin_token_files,
            Some(vec![secrets.admin_token_file.clone()])
        );
        let pool = read.supervisor_pool.unwrap_or_default();
        assert_eq!(
            pool.member_credentials_file,
            Some(secrets.member_credentials.clone())
        );
        let raft = read.raft.unwrap_or_default();
        assert_eq!(raft.heartbeat_interval_ms, Some(40));
        assert_eq!(raft.election_timeout_max_ms, Some(400));
        let driver = read.sandbox_driver.unwrap_or_default();
        assert_eq!(driver.kind.as_deref(), Some("process"));
        assert_eq!(driver.process_netns.as_deref(), Some("off"));
    }
}

//! `[openshell.gateway.sandbox_driver]`: where this gateway, when it leads,
//! launches sandbox runtimes (docs/design/0003-sandbox-driver.md).
//!
//! ```toml
//! [openshell.gateway.sandbox_driver]
//! kind = "process"                  # none (default) | process | kubernetes
//! process_dir = "/var/lib/openshell/runtimes"   # shared by gateways on one host
//! runtime_bin = "/usr/local/bin/openshell-sandbox-runtime"
//! process_netns = "auto"            # auto | on | off
//! process_runtime_netns = "workloads" # optional: every runtime joins this
//! process_runtime_ip = "10.0.0.2"     #   existing namespace, listening here
//! kubernetes_namespace = "openshell"            # default: the gateway's own
//! pod_template_file = "/etc/openshell/runtime-pod.yaml"
//! # The trusted grant keys file runtimes read and re-read (a path where the
//! # runtime runs: this host for process, a ConfigMap the Pod template mounts
//! # for kubernetes). Default: runtimes trust this cluster's signing key as
//! # given at launch (a key rotation then needs this file).
//! runtime_trusted_keys_file = "/etc/openshell/trusted-grant-keys"
//! ```

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

pub use gateway_config::driver::SandboxDriverSection;

use crate::config_error::ConfigError;

/// Network namespaces for the process driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Netns {
    /// When root and `ip netns` works.
    Auto,
    /// Always (refused at start when not possible).
    On,
    /// Never: runtimes listen on 127.0.0.1.
    Off,
}

/// The validated launcher settings: the driver and what runtimes trust.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LauncherConfig {
    /// Where runtimes are launched.
    pub driver: DriverConfig,
    /// The trusted grant keys file runtimes read, if any (else the
    /// cluster's signing key is given at launch).
    pub runtime_trusted_keys_file: Option<String>,
}

/// The validated driver choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriverConfig {
    /// No launcher: this gateway launches nothing.
    None,
    /// Local processes.
    Process {
        /// The driver's directory.
        dir: PathBuf,
        /// The runtime binary.
        runtime_bin: PathBuf,
        /// Network namespaces.
        netns: Netns,
        /// The existing namespace every runtime joins, and its address
        /// (None: `netns` decides).
        shared_netns: Option<(String, Ipv4Addr)>,
    },
    /// Kubernetes Pods.
    Kubernetes {
        /// Namespace (None: the client's default).
        namespace: Option<String>,
        /// Pod template file.
        pod_template_file: PathBuf,
    },
}

/// Validation of `[openshell.gateway.sandbox_driver]` (the section is
/// `gateway_config`'s).
pub trait ValidateDriver: Sized {
    /// The launcher's settings.
    ///
    /// # Errors
    /// [`ConfigError`] naming the key at fault.
    fn validate_launcher(self, data_dir: &Path) -> Result<LauncherConfig, ConfigError>;
    /// The driver choice.
    ///
    /// # Errors
    /// [`ConfigError`] naming the key at fault.
    fn validate(self, data_dir: &Path) -> Result<DriverConfig, ConfigError>;
}

impl ValidateDriver for SandboxDriverSection {
    /// Validates the section into the launcher's settings.
    ///
    /// # Errors
    /// As [`SandboxDriverSection::validate`]; a process driver's keys file
    /// must exist (it is a path on this host).
    fn validate_launcher(self, data_dir: &Path) -> Result<LauncherConfig, ConfigError> {
        let file = self.runtime_trusted_keys_file.clone();
        let driver = self.validate(data_dir)?;
        if let (DriverConfig::Process { .. }, Some(path)) = (&driver, &file) {
            if !Path::new(path).is_file() {
                return Err(ConfigError::Invalid {
                    key: "openshell.gateway.sandbox_driver.runtime_trusted_keys_file",
                    value: path.clone(),
                    problem: "no such file (the process driver's runtimes read it on this host)"
                        .into(),
                });
            }
        }
        Ok(LauncherConfig {
            driver,
            runtime_trusted_keys_file: file,
        })
    }

    /// Validates the section; `data_dir` gives the process driver's default
    /// directory.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] / [`ConfigError::Missing`] naming the key.
    fn validate(self, data_dir: &Path) -> Result<DriverConfig, ConfigError> {
        let kind = self.kind.as_deref().unwrap_or("none");
        match kind {
            "none" => Ok(DriverConfig::None),
            "process" => Ok(DriverConfig::Process {
                dir: self
                    .process_dir
                    .unwrap_or_else(|| data_dir.join("runtimes")),
                runtime_bin: runtime_bin(self.runtime_bin)?,
                netns: netns(self.process_netns.as_deref())?,
                shared_netns: shared_netns(self.process_runtime_netns, self.process_runtime_ip)?,
            }),
            "kubernetes" => {
                let pod_template_file = self.pod_template_file.ok_or(ConfigError::Missing {
                    key: "openshell.gateway.sandbox_driver.pod_template_file",
                    flag: "--pod-template-file",
                })?;
                if let Some(ns) = &self.kubernetes_namespace {
                    if !is_dns_label(ns) {
                        return Err(ConfigError::Invalid {
                            key: "openshell.gateway.sandbox_driver.kubernetes_namespace",
                            value: ns.clone(),
                            problem: "must be a DNS label (1-63 of [a-z0-9-])".into(),
                        });
                    }
                }
                Ok(DriverConfig::Kubernetes {
                    namespace: self.kubernetes_namespace,
                    pod_template_file,
                })
            }
            other => Err(ConfigError::Invalid {
                key: "openshell.gateway.sandbox_driver.kind",
                value: other.to_string(),
                problem: "must be none, process or kubernetes".into(),
            }),
        }
    }
}

fn netns(text: Option<&str>) -> Result<Netns, ConfigError> {
    match text.unwrap_or("auto") {
        "auto" => Ok(Netns::Auto),
        "on" => Ok(Netns::On),
        "off" => Ok(Netns::Off),
        other => Err(ConfigError::Invalid {
            key: "openshell.gateway.sandbox_driver.process_netns",
            value: other.to_string(),
            problem: "must be auto, on or off".into(),
        }),
    }
}

/// `process_runtime_netns` and `process_runtime_ip`: both or neither.
fn shared_netns(
    name: Option<String>,
    ip: Option<String>,
) -> Result<Option<(String, Ipv4Addr)>, ConfigError> {
    const NETNS_KEY: &str = "openshell.gateway.sandbox_driver.process_runtime_netns";
    const IP_KEY: &str = "openshell.gateway.sandbox_driver.process_runtime_ip";
    match (name, ip) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(ConfigError::Missing {
            key: IP_KEY,
            flag: "--process-runtime-ip",
        }),
        (None, Some(_)) => Err(ConfigError::Missing {
            key: NETNS_KEY,
            flag: "--process-runtime-netns",
        }),
        (Some(name), Some(ip)) => {
            if name.is_empty() || name.contains('/') {
                return Err(ConfigError::Invalid {
                    key: NETNS_KEY,
                    value: name,
                    problem: "must be a namespace name (ip netns list)".into(),
                });
            }
            let parsed = ip.parse::<Ipv4Addr>().map_err(|e| ConfigError::Invalid {
                key: IP_KEY,
                value: ip.clone(),
                problem: format!("must be an IPv4 address: {e}"),
            })?;
            Ok(Some((name, parsed)))
        }
    }
}

/// The runtime binary: given, or next to this executable; it must exist.
fn runtime_bin(given: Option<PathBuf>) -> Result<PathBuf, ConfigError> {
    const KEY: &str = "openshell.gateway.sandbox_driver.runtime_bin";
    let path = match given {
        Some(path) => path,
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|d| d.join("openshell-sandbox-runtime")))
            .ok_or(ConfigError::Missing {
                key: KEY,
                flag: "--runtime-bin",
            })?,
    };
    if !path.is_file() {
        return Err(ConfigError::Invalid {
            key: KEY,
            value: path.display().to_string(),
            problem: "no such file: give the openshell-sandbox-runtime binary with --runtime-bin"
                .into(),
        });
    }
    Ok(path)
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(kind: &str) -> SandboxDriverSection {
        SandboxDriverSection {
            kind: Some(kind.into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_default_is_no_driver() {
        let c = SandboxDriverSection::default().validate(Path::new("/d"));
        assert_eq!(c.ok(), Some(DriverConfig::None));
    }

    #[test]
    fn a_bad_choice_names_its_key() {
        let e = section("docker").validate(Path::new("/d")).err();
        let text = e.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("sandbox_driver.kind"), "{text}");
        let mut s = section("process");
        s.runtime_bin = Some("/nonexistent/runtime".into());
        let text = s.validate(Path::new("/d")).err().map(|e| e.to_string());
        assert!(
            text.as_deref().unwrap_or("").contains("--runtime-bin"),
            "{text:?}"
        );
        let text = section("kubernetes")
            .validate(Path::new("/d"))
            .err()
            .map(|e| e.to_string());
        assert!(
            text.as_deref()
                .unwrap_or("")
                .contains("--pod-template-file"),
            "{text:?}"
        );
    }

    #[test]
    fn the_process_driver_defaults_to_the_data_dir() {
        let mut s = section("process");
        s.runtime_bin = Some("/bin/sh".into());
        s.process_netns = Some("off".into());
        assert_eq!(
            s.validate(Path::new("/d")).ok(),
            Some(DriverConfig::Process {
                dir: "/d/runtimes".into(),
                runtime_bin: "/bin/sh".into(),
                netns: Netns::Off,
                shared_netns: None,
            })
        );
    }

    #[test]
    fn a_shared_namespace_needs_its_address() {
        let mut s = section("process");
        s.runtime_bin = Some("/bin/sh".into());
        s.process_runtime_netns = Some("workloads".into());
        let text = s
            .clone()
            .validate(Path::new("/d"))
            .err()
            .map(|e| e.to_string());
        assert!(
            text.as_deref()
                .unwrap_or("")
                .contains("--process-runtime-ip"),
            "{text:?}"
        );
        s.process_runtime_ip = Some("10.0.0.300".into());
        let text = s
            .clone()
            .validate(Path::new("/d"))
            .err()
            .map(|e| e.to_string());
        assert!(
            text.as_deref().unwrap_or("").contains("process_runtime_ip"),
            "{text:?}"
        );
        s.process_runtime_ip = Some("10.0.0.2".into());
        match s.validate(Path::new("/d")) {
            Ok(DriverConfig::Process { shared_netns, .. }) => assert_eq!(
                shared_netns,
                Some(("workloads".to_string(), Ipv4Addr::new(10, 0, 0, 2)))
            ),
            other => panic!("{other:?}"),
        }
    }
}

//! `[openshell.gateway.sandbox_driver]`: where the leading gateway launches
//! sandbox runtimes (validated in gateway-plugin's `config_driver.rs`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The section as read (file and flags).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxDriverSection {
    /// `none`, `process` or `kubernetes`.
    pub kind: Option<String>,
    /// Process driver: its directory (default `<data_dir>/runtimes`).
    pub process_dir: Option<PathBuf>,
    /// Process driver: the runtime binary (default: `openshell-sandbox-runtime`
    /// next to the gateway's own executable).
    pub runtime_bin: Option<PathBuf>,
    /// Process driver: `auto`, `on` or `off`: a network namespace per runtime.
    pub process_netns: Option<String>,
    /// Process driver: an existing network namespace every runtime joins
    /// (instead of one each); needs `process_runtime_ip`.
    pub process_runtime_netns: Option<String>,
    /// Process driver: the address of `process_runtime_netns` runtimes
    /// listen on (each at a port it binds).
    pub process_runtime_ip: Option<String>,
    /// Kubernetes driver: the namespace of runtime Pods (default: the
    /// client's, e.g. the gateway Pod's own).
    pub kubernetes_namespace: Option<String>,
    /// Kubernetes driver: the Pod template file.
    pub pod_template_file: Option<PathBuf>,
    /// The trusted grant keys file runtimes read (a path where they run).
    pub runtime_trusted_keys_file: Option<String>,
}

impl SandboxDriverSection {
    /// Overlays `other`'s set values (flags over file).
    pub fn overlay(mut self, other: SandboxDriverSection) -> SandboxDriverSection {
        macro_rules! take {
            ($($f:ident),*) => { $( if other.$f.is_some() { self.$f = other.$f; } )* };
        }
        take!(
            kind,
            process_dir,
            runtime_bin,
            process_netns,
            process_runtime_netns,
            process_runtime_ip,
            kubernetes_namespace,
            pod_template_file,
            runtime_trusted_keys_file
        );
        self
    }
}

//! A runtime's [`RuntimeState`] read from its Pod.
//!
//! | Pod | State |
//! | --- | --- |
//! | being deleted (`deletionTimestamp` set: evicted, drained, deleted by someone) | `Failed { "Terminating: ..." }` |
//! | `Pending`, condition `PodScheduled=False` reason `Unschedulable` | `Failed { "Unschedulable: <scheduler's message>" }` |
//! | `Pending`, container `runtime` waiting with `ErrImagePull`, `ImagePullBackOff`, `InvalidImageName` or `CreateContainerConfigError` | `Failed { "<reason>: <message>" }` |
//! | `Pending` otherwise (scheduling, `ContainerCreating`, ...) | `Pending { detail }` |
//! | `Running`, a `podIP`, container `runtime` ready or started | `Running(<podIP>:7400)` |
//! | `Running`, container `runtime` terminated | `Failed { "Running: terminated ..." }` |
//! | `Running` otherwise | `Pending { detail }` |
//! | `Succeeded`, `Failed` | `Failed { "<phase>: <terminated reason> (exit code N)" }` |
//! | `Unknown` (node lost contact) | `Pending { "Unknown: ..." }`: the node may come back |
//!
//! Which waiting reasons are terminal, and why:
//! - `InvalidImageName`: the image reference cannot be parsed; nothing
//!   changes that but a new template.
//! - `CreateContainerConfigError`: the template refers to a ConfigMap,
//!   Secret or key that does not exist, or asks `runAsNonRoot` of an image
//!   that runs as root; a template error.
//! - `ErrImagePull` and `ImagePullBackOff`: the kubelet keeps retrying, and
//!   a registry outage may pass; but most causes (a wrong tag, missing pull
//!   credentials) do not, and the launcher has no other bound on how long a
//!   launch stays pending. A sandbox waiting for an image that never comes
//!   would hide the reason from its user: the launch fails with the
//!   kubelet's message at the first pull error (`ImagePullBackOff` only
//!   ever follows an `ErrImagePull`), and the user creates the sandbox again.
//! - `Unschedulable`: the rule (a Pod that cannot be scheduled is a
//!   launch failure with the scheduler's reason), even where a cluster
//!   autoscaler might add a node later.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use super::template::RUNTIME_CONTAINER;
use crate::{Endpoint, RuntimeState, RUNTIME_PORT};

/// Container waiting reasons that fail the launch (see the module doc).
pub const TERMINAL_WAITING: [&str; 4] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "CreateContainerConfigError",
    "InvalidImageName",
];

/// The state of runtime `name` as its Pod shows it; `ca_pem` is the CA of
/// its TLS Secret.
pub fn runtime_state(name: &str, pod: &Pod, ca_pem: &str) -> RuntimeState {
    let failed = |reason: String| RuntimeState::Failed { reason };
    if pod.metadata.deletion_timestamp.is_some() {
        return failed("Terminating: the Pod is being deleted".to_string());
    }
    let status = pod.status.clone().unwrap_or_default();
    let phase = status
        .phase
        .clone()
        .unwrap_or_else(|| "Pending".to_string());
    let container = status
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == RUNTIME_CONTAINER);
    match phase.as_str() {
        "Pending" => {
            let unschedulable = status.conditions.iter().flatten().find(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            });
            if let Some(c) = unschedulable {
                return failed(format!(
                    "Unschedulable: {}",
                    c.message.clone().unwrap_or_default()
                ));
            }
            let waiting = container.and_then(|c| c.state.as_ref()?.waiting.as_ref());
            match waiting.and_then(|w| w.reason.as_deref().map(|r| (r, w.message.as_deref()))) {
                Some((reason, message)) if TERMINAL_WAITING.contains(&reason) => {
                    failed(format!("{reason}: {}", message.unwrap_or_default()))
                }
                Some((reason, _)) => RuntimeState::Pending {
                    detail: reason.to_string(),
                },
                None => RuntimeState::Pending {
                    detail: status
                        .conditions
                        .iter()
                        .flatten()
                        .find(|c| c.status == "False")
                        .map_or_else(|| "Pending".to_string(), |c| format!("{} not yet", c.type_)),
                },
            }
        }
        "Running" => {
            if let Some(t) = container.and_then(terminated) {
                return failed(format!("Running: {t}"));
            }
            let serving = container.is_some_and(|c| c.ready || c.started == Some(true));
            match status.pod_ip.as_deref().filter(|ip| !ip.is_empty()) {
                Some(ip) if serving => RuntimeState::Running(Endpoint {
                    name: name.to_string(),
                    address: address(ip),
                    ca_pem: ca_pem.to_string(),
                }),
                _ => RuntimeState::Pending {
                    detail: "Running: container not started".to_string(),
                },
            }
        }
        "Unknown" => RuntimeState::Pending {
            detail: format!("Unknown: {}", status.reason.unwrap_or_default()),
        },
        _ => {
            let why = container
                .and_then(terminated)
                .or_else(|| {
                    status
                        .reason
                        .map(|r| format!("{r}: {}", status.message.unwrap_or_default()))
                })
                .unwrap_or_else(|| "no container status".to_string());
            failed(format!("{phase}: {why}"))
        }
    }
}

/// `ip:7400`, with brackets for IPv6.
fn address(ip: &str) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{RUNTIME_PORT}")
    } else {
        format!("{ip}:{RUNTIME_PORT}")
    }
}

/// `<reason> (exit code N)` of a terminated container.
fn terminated(c: &ContainerStatus) -> Option<String> {
    let t = c.state.as_ref()?.terminated.as_ref()?;
    let mut s = format!(
        "{} (exit code {})",
        t.reason.as_deref().unwrap_or("terminated"),
        t.exit_code
    );
    if let Some(m) = t.message.as_deref().filter(|m| !m.is_empty()) {
        s.push_str(": ");
        s.push_str(m);
    }
    Some(s)
}

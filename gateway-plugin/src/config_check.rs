//! `openshell-gateway --check-config`: what a start would refuse, found
//! without starting. [`crate::config::GatewaySection::validate`] already
//! reads every referenced file (TLS files parsed and matched, signing key,
//! member credentials); [`check`] adds the sandbox driver's checks a start
//! makes when it builds the driver, without creating its directory or
//! contacting the Kubernetes API, and [`summary`] is the line printed on
//! success. Nothing binds a port, creates the data directory or contacts
//! anything.
//!
//! Not checked (a start finds them): ports already in use, the data
//! directory's contents (another cluster's, locked by a running gateway),
//! Kubernetes API credentials (they exist only inside the Pod), and whether
//! a replica source can be read (the autopilot warns while it cannot).

use std::path::Path;

use crate::config::GatewayConfig;
use crate::config_driver::{DriverConfig, Netns};
use crate::launcher::driver::DriverSetupError;

/// The driver checks a start makes, offline.
///
/// # Errors
/// The [`DriverSetupError`] a start would give (same words).
pub fn check(config: &GatewayConfig) -> Result<(), DriverSetupError> {
    match &config.launcher.driver {
        DriverConfig::None => Ok(()),
        DriverConfig::Process {
            dir,
            runtime_bin,
            netns,
            shared_netns,
        } => {
            let refused = |message: String| DriverSetupError {
                kind: "process",
                message: format!("process driver: {message}"),
            };
            if runtime_bin.file_name().is_none() {
                return Err(refused(format!(
                    "runtime executable {} has no file name",
                    runtime_bin.display()
                )));
            }
            if dir.exists() && !dir.is_dir() {
                return Err(refused(format!("{}: not a directory", dir.display())));
            }
            if *netns == Netns::On {
                sandbox_driver::process::netns::available().map_err(|why| {
                    refused(format!(
                        "network namespaces requested (On) but unavailable: {why}"
                    ))
                })?;
            }
            if let Some((name, _)) = shared_netns {
                let path = Path::new("/run/netns").join(name);
                if !path.exists() {
                    return Err(refused(format!(
                        "shared namespace {name}: {} does not exist (ip netns add it first)",
                        path.display()
                    )));
                }
                // SAFETY: geteuid has no preconditions.
                if unsafe { libc::geteuid() } != 0 {
                    return Err(refused(format!(
                        "shared namespace {name}: entering it needs root"
                    )));
                }
            }
            Ok(())
        }
        DriverConfig::Kubernetes {
            pod_template_file, ..
        } => sandbox_driver::kubernetes::PodTemplate::load(pod_template_file)
            .map(|_| ())
            .map_err(|e| DriverSetupError {
                kind: "kubernetes",
                message: e.to_string(),
            }),
    }
}

/// The line `--check-config` prints on success (after
/// `openshell-gateway: `).
pub fn summary(config: &GatewayConfig) -> String {
    let driver = match &config.launcher.driver {
        DriverConfig::None => "none",
        DriverConfig::Process { .. } => "process",
        DriverConfig::Kubernetes { .. } => "kubernetes",
    };
    let autopilot = config.autopilot.as_ref().map_or_else(
        || "off".to_string(),
        |a| format!("{} peers {}", a.replicas, a.peer_address),
    );
    let workers = config
        .worker_threads
        .map_or_else(|| "one per CPU".to_string(), |n| n.to_string());
    format!(
        "configuration ok (node {}, cluster {}, listen {}, peer {}, advertise {}, tls {}, sandbox driver {driver}, \
         initial voters {}, autopilot {autopilot}, worker threads {workers})",
        config.node.node_id,
        config.node.cluster_id,
        config.listen_addr,
        config
            .peer_listen_addr
            .map_or_else(|| "none".to_string(), |a| a.to_string()),
        config.node.advertise_addr,
        if config.tls.is_some() { "on" } else { "off" },
        config.initial_voters.len(),
    )
}

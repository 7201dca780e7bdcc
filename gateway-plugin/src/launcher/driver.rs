//! Builds the configured [`SandboxDriver`] at start: a driver that cannot
//! work (namespaces asked for without root, no Kubernetes credentials, a
//! bad Pod template) stops the gateway at start with the reason, rather
//! than failing every launch later.

use std::sync::Arc;

use sandbox_driver::SandboxDriver;

use crate::config_driver::{DriverConfig, Netns};

/// Why the configured driver could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("sandbox driver {kind}: {message}")]
pub struct DriverSetupError {
    /// `process` or `kubernetes`.
    pub kind: &'static str,
    /// What is wrong and what to fix.
    pub message: String,
}

/// The driver `config` asks for (None: `none`).
///
/// # Errors
/// [`DriverSetupError`] naming the driver and the cause.
pub async fn build(
    config: &DriverConfig,
) -> Result<Option<Arc<dyn SandboxDriver>>, DriverSetupError> {
    match config {
        DriverConfig::None => Ok(None),
        DriverConfig::Process {
            dir,
            runtime_bin,
            netns,
            shared_netns,
        } => {
            use sandbox_driver::process::{NetnsMode, ProcessConfig, ProcessDriver, SharedNetns};
            let netns = match netns {
                Netns::Auto => NetnsMode::Auto,
                Netns::On => NetnsMode::On,
                Netns::Off => NetnsMode::Off,
            };
            let setup = |e: sandbox_driver::DriverError| DriverSetupError {
                kind: "process",
                message: e.to_string(),
            };
            let mut driver = ProcessDriver::new(ProcessConfig {
                dir: dir.clone(),
                runtime_bin: runtime_bin.clone(),
                netns,
            })
            .map_err(setup)?;
            if let Some((name, ip)) = shared_netns {
                driver = driver
                    .with_shared_netns(SharedNetns {
                        name: name.clone(),
                        ip: *ip,
                    })
                    .map_err(setup)?;
            }
            Ok(Some(Arc::new(driver)))
        }
        DriverConfig::Kubernetes {
            namespace,
            pod_template_file,
        } => {
            use sandbox_driver::kubernetes::{KubernetesDriver, PodTemplate};
            let setup = |message: String| DriverSetupError {
                kind: "kubernetes",
                message,
            };
            let template =
                PodTemplate::load(pod_template_file).map_err(|e| setup(e.to_string()))?;
            let driver = KubernetesDriver::from_environment(namespace.clone(), template)
                .await
                .map_err(|e| setup(e.to_string()))?;
            Ok(Some(Arc::new(driver)))
        }
    }
}

//! The Kubernetes driver: one Pod per sandbox generation, named
//! [`runtime_name`](crate::runtime_name), created from a [`PodTemplate`]
//! through the Kubernetes API (kube-rs), with its TLS identity in a Secret
//! `<name>-tls` mounted into the Pod (docs/kubernetes.md).
//!
//! - [`KubernetesDriver::ensure`]: creates the Secret, then the Pod. A 409
//!   on either adopts what exists: the Secret's own `ca.crt` is used (a new
//!   leader records the CA the first leader created) and the existing Pod's
//!   state is returned; never a second Pod. After a Pod is created the
//!   Secret gets an ownerReference to it, so Kubernetes removes the Secret
//!   with the Pod even if nobody calls `delete`.
//! - [`KubernetesDriver::list`]: one list call of the Pods labelled
//!   `app.kubernetes.io/managed-by=openshell-gateway,
//!   app.kubernetes.io/name=openshell-sandbox-runtime`; the sandbox id comes
//!   from the Pod's `openshell.io/sandbox-id` annotation (ids need not be
//!   valid label values), the generation from the `openshell.io/generation`
//!   label, the CA from the `openshell.io/runtime-ca` annotation (a copy of
//!   the Secret's public `ca.crt` made at creation, so that listing needs no
//!   Secret reads). Pods without the annotation are not ours and are skipped.
//! - [`KubernetesDriver::delete`]: deletes the Pod and the Secret; 404 is
//!   success.
//!
//! Errors: a connection error, no answer within [`CALL_TIMEOUT`], 5xx or 429 is [`DriverError::Unavailable`]
//! (retried); any other 4xx but 404/409 is [`DriverError::Refused`] with
//! the API's message (a bad template fails the launch, it does not loop).
//! States: [`state`].
//!
//! Layout: [`template`] (the checked Pod template), [`objects`] (the Pod
//! and Secret, built without I/O), [`state`] (Pod -> [`RuntimeState`]).

pub mod objects;
pub mod state;
pub mod template;

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};

pub use template::{PodTemplate, TemplateError};

use crate::{DriverError, LaunchSpec, Observed, RuntimeState, SandboxDriver};

/// `app.kubernetes.io/name` label key.
pub const LABEL_NAME: &str = "app.kubernetes.io/name";
/// `app.kubernetes.io/managed-by` label key.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Label: the runtime name.
pub const LABEL_RUNTIME: &str = "openshell.io/runtime";
/// Label: the sandbox generation.
pub const LABEL_GENERATION: &str = "openshell.io/generation";
/// Value of [`LABEL_NAME`].
pub const RUNTIME_APP: &str = "openshell-sandbox-runtime";
/// Value of [`LABEL_MANAGED_BY`].
pub const MANAGED_BY: &str = "openshell-gateway";
/// Annotation: the exact sandbox id.
pub const ANNOTATION_SANDBOX_ID: &str = "openshell.io/sandbox-id";
/// Annotation on the Pod: PEM of the runtime's CA certificate (public).
pub const ANNOTATION_CA: &str = "openshell.io/runtime-ca";
/// The Pod volume of the TLS Secret.
pub const TLS_VOLUME: &str = "runtime-tls";
/// Where the TLS Secret is mounted in the `runtime` container.
pub const TLS_MOUNT_PATH: &str = "/var/run/openshell/runtime-tls";
/// The Pod volume (emptyDir) mounted at `/tmp` when the root file system is
/// read-only.
pub const TMP_VOLUME: &str = "runtime-tmp";

const DRIVER: &str = "kubernetes";

/// What the Kubernetes driver needs besides its client.
#[derive(Clone, Debug)]
pub struct KubernetesConfig {
    /// The namespace of the runtime Pods and Secrets.
    pub namespace: String,
    /// The template of every runtime Pod.
    pub template: PodTemplate,
}

/// The longest a driver call (`ensure`, `list`, `delete`, with all their
/// requests) may take before it is [`DriverError::Unavailable`]. kube's own
/// read timeout is minutes: an API server that accepts connections but
/// does not answer (paused, overloaded) would otherwise stall the launcher's
/// pass. A call cut short is safe to repeat (creates are idempotent by name).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Runtimes as Pods; see the module doc.
#[derive(Clone)]
pub struct KubernetesDriver {
    pods: Api<Pod>,
    secrets: Api<Secret>,
    template: PodTemplate,
    call_timeout: Duration,
    /// `kubernetes:<namespace>`.
    scope: String,
}

impl std::fmt::Debug for KubernetesDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesDriver").finish_non_exhaustive()
    }
}

impl KubernetesDriver {
    /// A driver on the Kubernetes API the environment gives (in a Pod: its
    /// service account; elsewhere: the kubeconfig), in `namespace` (None:
    /// the client's default, e.g. the gateway Pod's own namespace).
    ///
    /// # Errors
    /// [`DriverError::Refused`] when no credentials are found.
    pub async fn from_environment(
        namespace: Option<String>,
        template: PodTemplate,
    ) -> Result<Self, DriverError> {
        let client = kube::Client::try_default()
            .await
            .map_err(|e| DriverError::Refused {
                driver: "kubernetes",
                message: format!(
                    "no Kubernetes API credentials (in-cluster service account or kubeconfig): {e}"
                ),
            })?;
        let namespace = namespace.unwrap_or_else(|| client.default_namespace().to_string());
        Ok(Self::new(
            client,
            KubernetesConfig {
                namespace,
                template,
            },
        ))
    }

    /// A driver creating Pods in `config.namespace` through `client`.
    pub fn new(client: kube::Client, config: KubernetesConfig) -> Self {
        Self {
            pods: Api::namespaced(client.clone(), &config.namespace),
            secrets: Api::namespaced(client, &config.namespace),
            template: config.template,
            call_timeout: CALL_TIMEOUT,
            scope: format!("{DRIVER}:{}", config.namespace),
        }
    }

    /// The same driver with another [`CALL_TIMEOUT`].
    #[must_use]
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// `call`, or `Unavailable` after the call timeout.
    async fn bounded<T>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T, DriverError>>,
    ) -> Result<T, DriverError> {
        tokio::time::timeout(self.call_timeout, call)
            .await
            .unwrap_or_else(|_| {
                Err(DriverError::Unavailable {
                    driver: DRIVER,
                    message: format!(
                        "{what}: the API did not answer within {:?}",
                        self.call_timeout
                    ),
                })
            })
    }

    /// Creates the TLS Secret of `spec`, or adopts the existing one; returns
    /// its CA certificate.
    async fn ensure_secret(&self, spec: &LaunchSpec) -> Result<String, DriverError> {
        let name = spec.name();
        let identity = crate::identity::issue(DRIVER, &name, &[])?;
        let secret = objects::tls_secret(spec, &identity);
        match self.secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => Ok(identity.ca_pem),
            Err(e) if status_code(&e) == Some(409) => {
                let existing = self
                    .secrets
                    .get(&objects::secret_name(&name))
                    .await
                    .map_err(error)?;
                let ca = existing
                    .data
                    .as_ref()
                    .and_then(|d| d.get("ca.crt"))
                    .and_then(|b| String::from_utf8(b.0.clone()).ok())
                    .filter(|s| !s.is_empty());
                tracing::info!(runtime = %name, "adopted the existing TLS Secret");
                ca.ok_or_else(|| DriverError::Refused {
                    driver: DRIVER,
                    message: format!(
                        "Secret {} exists without ca.crt",
                        objects::secret_name(&name)
                    ),
                })
            }
            Err(e) => Err(error(e)),
        }
    }

    /// Makes the Pod `pod` the owner of its Secret (best effort: `delete`
    /// removes the Secret anyway).
    async fn own_secret(&self, name: &str, pod: &Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let owner = OwnerReference {
            api_version: "v1".to_string(),
            kind: "Pod".to_string(),
            name: name.to_string(),
            uid,
            ..OwnerReference::default()
        };
        let patch = serde_json::json!({ "metadata": { "ownerReferences": [owner] } });
        let secret = objects::secret_name(name);
        if let Err(e) = self
            .secrets
            .patch(&secret, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(runtime = %name, error = %e, "could not set the Secret's ownerReference");
        }
    }
}

#[async_trait]
impl SandboxDriver for KubernetesDriver {
    fn kind(&self) -> &'static str {
        DRIVER
    }

    fn scope(&self) -> &str {
        &self.scope
    }

    async fn ensure(&self, spec: &LaunchSpec) -> Result<RuntimeState, DriverError> {
        self.bounded("ensure", self.ensure_unbounded(spec)).await
    }

    async fn list(&self) -> Result<Vec<Observed>, DriverError> {
        self.bounded("list", self.list_unbounded()).await
    }

    async fn delete(&self, name: &str) -> Result<(), DriverError> {
        self.bounded("delete", self.delete_unbounded(name)).await
    }
}

impl KubernetesDriver {
    async fn ensure_unbounded(&self, spec: &LaunchSpec) -> Result<RuntimeState, DriverError> {
        let name = spec.name();
        spec.trust_args(DRIVER)?;
        let ca_pem = self.ensure_secret(spec).await?;
        let pod = objects::pod(&self.template, spec, &ca_pem);
        let pod = match self.pods.create(&PostParams::default(), &pod).await {
            Ok(created) => {
                tracing::info!(runtime = %name, sandbox = %spec.sandbox_id, "created the runtime Pod");
                self.own_secret(&name, &created).await;
                created
            }
            Err(e) if status_code(&e) == Some(409) => {
                tracing::info!(runtime = %name, "adopting the existing runtime Pod");
                self.pods.get(&name).await.map_err(error)?
            }
            Err(e) => return Err(error(e)),
        };
        Ok(state::runtime_state(&name, &pod, &ca_pem))
    }

    async fn list_unbounded(&self) -> Result<Vec<Observed>, DriverError> {
        let selector = format!("{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_NAME}={RUNTIME_APP}");
        let pods = self
            .pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(error)?;
        Ok(pods.items.iter().filter_map(observed).collect())
    }

    async fn delete_unbounded(&self, name: &str) -> Result<(), DriverError> {
        let gone_ok = |r: Result<(), kube::Error>| match r {
            Err(e) if status_code(&e) != Some(404) => Err(error(e)),
            _ => Ok(()),
        };
        let dp = DeleteParams::default();
        gone_ok(self.pods.delete(name, &dp).await.map(drop))?;
        gone_ok(
            self.secrets
                .delete(&objects::secret_name(name), &dp)
                .await
                .map(drop),
        )?;
        tracing::info!(runtime = %name, "deleted the runtime Pod and Secret");
        Ok(())
    }
}

/// A listed Pod as an [`Observed`] runtime; `None` for a Pod that is not a
/// runtime of this driver (no sandbox-id annotation, no generation label).
fn observed(pod: &Pod) -> Option<Observed> {
    let name = pod.metadata.name.clone()?;
    let annotations = pod.metadata.annotations.as_ref()?;
    let sandbox_id = annotations.get(ANNOTATION_SANDBOX_ID)?.clone();
    let generation = pod
        .metadata
        .labels
        .as_ref()?
        .get(LABEL_GENERATION)?
        .parse()
        .ok()?;
    let ca_pem = annotations.get(ANNOTATION_CA).cloned().unwrap_or_default();
    let state = match state::runtime_state(&name, pod, &ca_pem) {
        RuntimeState::Running(_) if ca_pem.is_empty() => RuntimeState::Failed {
            reason: format!("the Pod has no {ANNOTATION_CA} annotation"),
        },
        s => s,
    };
    Some(Observed {
        name,
        sandbox_id,
        generation,
        state,
    })
}

/// The HTTP status of an API error.
fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// A kube error as a [`DriverError`]: 5xx, 429 and anything that is not an
/// API answer (connection, TLS, decoding) is `Unavailable`; other 4xx are
/// `Refused` with the API's message.
fn error(e: kube::Error) -> DriverError {
    match &e {
        kube::Error::Api(s) if (400..500).contains(&s.code) && s.code != 429 => {
            DriverError::Refused {
                driver: DRIVER,
                message: format!("{} ({} {})", s.message, s.code, s.reason),
            }
        }
        _ => DriverError::Unavailable {
            driver: DRIVER,
            message: e.to_string(),
        },
    }
}

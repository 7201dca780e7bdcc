//! Where the autopilot reads the desired voter count: a file holding one
//! integer (re-read every pass), or `spec.replicas` of a StatefulSet
//! through the Kubernetes API (in-cluster service account or kubeconfig),
//! each call bounded by [`CALL_TIMEOUT`].

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;

use crate::config_statefulset::ReplicaSource;

/// The longest one Kubernetes API call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads a [`ReplicaSource`]; keeps the Kubernetes client once built.
pub struct Replicas {
    /// The source.
    source: ReplicaSource,
    /// The Kubernetes client, built at the first read of a StatefulSet.
    client: Option<kube::Client>,
}

impl Replicas {
    /// A reader of `source` (nothing is read or contacted yet).
    pub fn new(source: ReplicaSource) -> Self {
        Replicas {
            source,
            client: None,
        }
    }

    /// The source, for logs.
    pub fn source(&self) -> &ReplicaSource {
        &self.source
    }

    /// The desired voter count now.
    ///
    /// # Errors
    /// One line saying what could not be read, and where.
    pub async fn read(&mut self) -> Result<u64, String> {
        match self.source.clone() {
            ReplicaSource::File(path) => {
                let text = tokio::fs::read_to_string(&path)
                    .await
                    .map_err(|e| format!("replica file {}: {e}", path.display()))?;
                text.trim().parse::<u64>().map_err(|_| {
                    format!(
                        "replica file {}: {:?} is not one non-negative integer",
                        path.display(),
                        text.trim()
                    )
                })
            }
            ReplicaSource::StatefulSet { name, namespace } => {
                tokio::time::timeout(CALL_TIMEOUT, self.statefulset(&name, namespace.as_deref()))
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!(
                            "StatefulSet {name}: the Kubernetes API did not answer within {} s",
                            CALL_TIMEOUT.as_secs()
                        ))
                    })
            }
        }
    }

    /// `spec.replicas` of StatefulSet `name` (absent: 1, the API's default).
    async fn statefulset(&mut self, name: &str, namespace: Option<&str>) -> Result<u64, String> {
        let client = match &self.client {
            Some(client) => client.clone(),
            None => {
                let client = kube::Client::try_default().await.map_err(|e| {
                    format!(
                        "StatefulSet {name}: no Kubernetes API credentials (in-cluster service account \
                         or kubeconfig): {e}"
                    )
                })?;
                self.client = Some(client.clone());
                client
            }
        };
        let namespace = namespace.unwrap_or_else(|| client.default_namespace());
        let api: kube::Api<StatefulSet> = kube::Api::namespaced(client.clone(), namespace);
        let set = api
            .get(name)
            .await
            .map_err(|e| format!("StatefulSet {namespace}/{name}: {e}"))?;
        let replicas = set.spec.and_then(|s| s.replicas).unwrap_or(1);
        u64::try_from(replicas).map_err(|_| {
            format!("StatefulSet {namespace}/{name}: spec.replicas {replicas} is negative")
        })
    }
}

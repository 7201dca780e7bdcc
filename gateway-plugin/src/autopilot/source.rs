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

    /// A reader of `source` on an existing Kubernetes client (an embedding
    /// gateway's, or a test's mock API).
    pub fn with_client(source: ReplicaSource, client: kube::Client) -> Self {
        Replicas {
            source,
            client: Some(client),
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

#[cfg(test)]
mod tests {
    use super::*;

    use http::{Request, Response};
    use kube::client::Body;
    use tower_test::mock;

    /// A reader of StatefulSet `rel-gw` (namespace: the client's, `ns`)
    /// whose API answers `status` with `body`; returns the read and the
    /// path the reader asked for.
    async fn read_with(status: u16, body: &str) -> (Result<u64, String>, String) {
        let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "ns");
        let source = ReplicaSource::StatefulSet {
            name: "rel-gw".into(),
            namespace: None,
        };
        let mut replicas = Replicas::with_client(source, client);
        let body = body.to_string();
        let api = tokio::spawn(async move {
            let Some((request, send)) = handle.next_request().await else {
                return String::new();
            };
            let path = request.uri().path().to_string();
            let response = Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Body::from(body.into_bytes()));
            if let Ok(response) = response {
                send.send_response(response);
            }
            path
        });
        let read = replicas.read().await;
        (read, api.await.unwrap_or_default())
    }

    #[tokio::test]
    async fn statefulset_replicas_are_read_from_its_spec() {
        let (read, path) = read_with(200, r#"{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"rel-gw"},"spec":{"replicas":5,"selector":{},"serviceName":"p","template":{}}}"#).await;
        assert_eq!(path, "/apis/apps/v1/namespaces/ns/statefulsets/rel-gw");
        assert_eq!(read, Ok(5));
        let (read, _) = read_with(404, r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"statefulsets.apps \"rel-gw\" not found","reason":"NotFound","code":404}"#).await;
        let e = read.unwrap_err();
        assert!(e.starts_with("StatefulSet ns/rel-gw: "), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    #[tokio::test]
    async fn a_replica_file_holds_one_integer() {
        let dir = std::env::temp_dir().join(format!("openshell-replicas-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("replicas");
        let mut replicas = Replicas::new(ReplicaSource::File(path.clone()));
        assert!(replicas.read().await.is_err(), "missing file");
        let _ = std::fs::write(&path, " 4\n");
        assert_eq!(replicas.read().await, Ok(4));
        let _ = std::fs::write(&path, "four");
        assert!(replicas
            .read()
            .await
            .unwrap_err()
            .contains("not one non-negative integer"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

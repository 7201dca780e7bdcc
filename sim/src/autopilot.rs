//! The gateways' voter autopilot in the simulation: the real
//! `gateway_plugin::autopilot::Autopilot` runs on every gateway (it acts
//! only while its node leads) and reads the desired voter count from a
//! StatefulSet's `spec.replicas` through the Kubernetes API, as in a
//! cluster. The API is the one boundary served here (the autopilot's own
//! tests mock it the same way): a `tower` service answering every `GET` of
//! the StatefulSet with the replica count the nemesis scales.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gateway_plugin::autopilot::source::Replicas;
use gateway_plugin::autopilot::Autopilot;
use gateway_plugin::config_statefulset::{AutopilotConfig, ReplicaSource};
use gateway_plugin::state::GatewayState;
use kube::client::Body;
use raft_store::RaftNode;

/// How long the simulated API takes to answer.
const API_LATENCY: Duration = Duration::from_millis(5);

/// The gateways' StatefulSet: its replica count, shared by every
/// gateway's autopilot and the nemesis that scales it. Cloning shares it.
#[derive(Clone, Debug)]
pub struct StatefulSet {
    replicas: Arc<AtomicU64>,
}

impl StatefulSet {
    /// A StatefulSet of `replicas` gateways.
    pub fn new(replicas: u64) -> Self {
        StatefulSet {
            replicas: Arc::new(AtomicU64::new(replicas)),
        }
    }

    /// `kubectl scale --replicas N`.
    pub fn scale(&self, replicas: u64) {
        self.replicas.store(replicas, Ordering::SeqCst);
    }

    /// The replica count now.
    pub fn replicas(&self) -> u64 {
        self.replicas.load(Ordering::SeqCst)
    }

    /// The autopilot of `node`, reading this StatefulSet through the
    /// simulated API; desired voters are node ids `1..=replicas` at
    /// `n{id}:port`, as the sim's hosts are named.
    pub fn autopilot(&self, node: RaftNode<GatewayState>, port: u16) -> Autopilot {
        let replicas = self.replicas.clone();
        let api = tower::service_fn(move |_request: http::Request<Body>| {
            let count = replicas.load(Ordering::SeqCst);
            async move {
                tokio::time::sleep(API_LATENCY).await;
                let body = format!(
                    r#"{{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{{"name":"gateway","namespace":"sim"}},"spec":{{"replicas":{count},"selector":{{}},"serviceName":"gateway","template":{{}}}}}}"#
                );
                let mut response = http::Response::new(Body::from(body.into_bytes()));
                response.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/json"),
                );
                Ok::<_, Infallible>(response)
            }
        });
        let source = ReplicaSource::StatefulSet {
            name: "gateway".into(),
            namespace: Some("sim".into()),
        };
        let config = AutopilotConfig {
            replicas: source.clone(),
            peer_address: format!("n{{node_id}}:{port}"),
        };
        let client = kube::Client::new(api, "sim");
        Autopilot::with_replicas(node, config, Replicas::with_client(source, client))
    }
}

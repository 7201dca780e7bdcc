//! Wiring: one raft node, every gRPC service on one port, bootstrap of a new
//! cluster, graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use proto::cluster::cluster_admin_server::ClusterAdminServer;
use proto::objects::object_store_server::ObjectStoreServer;
use raft_store::RaftNode;

use proto::pool_admin::pool_admin_server::PoolAdminServer;
use proto::supervisor_host::supervisor_host_server::SupervisorHostServer;

use crate::cluster_admin_service::ClusterAdminService;
use crate::config::GatewayConfig;
use crate::health::Health;
use crate::hub::Hub;
use crate::metrics::Metrics;
use crate::object_store_service::ObjectStoreService;
use crate::pool_admin_service::PoolAdminService;
use crate::state::GatewayState;
use crate::supervisor_host_service::SupervisorHostService;

/// Why a gateway could not start or stopped serving. Each variant names
/// what failed; its source says why (the binary prints the chain).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The raft node did not start (bad data directory, foreign cluster, ...).
    #[error("starting raft node {node_id}")]
    StartNode {
        /// This gateway's node id.
        node_id: u64,
        /// Why.
        #[source]
        source: raft_store::Error,
    },
    /// The gRPC port could not be bound.
    #[error("binding {addr} (is another process using the port?)")]
    Bind {
        /// The listen address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP endpoints' port could not be bound.
    #[error("binding the HTTP endpoints on {addr}")]
    BindHttp {
        /// The HTTP listen address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The gRPC server failed while serving.
    #[error("gRPC server failed")]
    Serve(#[source] tonic::transport::Error),
}

/// Runs a gateway until `shutdown` completes.
///
/// # Errors
/// When the node cannot start (bad data directory, port in use) or the server
/// fails.
pub async fn run(
    config: GatewayConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let node: RaftNode<GatewayState> =
        RaftNode::start(config.node.clone())
            .await
            .map_err(|source| ServeError::StartNode {
                node_id: config.node.node_id,
                source,
            })?;
    let listener = tokio::net::TcpListener::bind(config.listen_addr)
        .await
        .map_err(|source| ServeError::Bind {
            addr: config.listen_addr,
            source,
        })?;
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tracing::info!(
        node = config.node.node_id,
        listen = %config.listen_addr,
        advertise = %config.node.advertise_addr,
        "gateway listening"
    );
    bootstrap(&node, &config);
    let metrics = Metrics::new();
    warn_insecure_defaults(&config);
    let commit_at_start = node.status().commit_index;
    tracing::info!(
        commit_at_start,
        "start-up commit index: ready once applied up to it and caught up with the leader"
    );
    let hub = Hub::new(
        node.clone(),
        config.pool.clone(),
        config.signer.clone(),
        metrics.clone(),
    );
    let (health, health_task) = Health::start(node.clone(), commit_at_start);
    // Background tasks end with the runtime; aborted on return via the guard.
    let tasks = [
        tokio::spawn(hub.clone().run_heartbeats()),
        tokio::spawn(hub.clone().run_snapshot_pusher()),
        tokio::spawn(hub.clone().run_coordinator()),
        tokio::spawn(crate::address_check::watch(
            node.clone(),
            config.node.advertise_addr.clone(),
        )),
        health_task,
    ];
    let mut aborts: Vec<tokio::task::AbortHandle> =
        tasks.iter().map(|t| t.abort_handle()).collect();
    if let Some(addr) = config.http_listen {
        let listener = crate::http::bind(addr)
            .await
            .map_err(|source| ServeError::BindHttp { addr, source })?;
        tracing::info!(%addr, "HTTP endpoints listening (/healthz /readyz /metrics)");
        let serve = crate::http::serve(
            listener,
            node.clone(),
            hub.clone(),
            metrics.clone(),
            health,
            std::future::pending(),
        );
        aborts.push(
            tokio::spawn(async move {
                if let Err(e) = serve.await {
                    tracing::error!(error = %e, "HTTP endpoints failed");
                }
            })
            .abort_handle(),
        );
    }
    let _abort = AbortOnDrop(aborts);
    let result = tonic::transport::Server::builder()
        .add_service(node.transport_service())
        .add_service(
            ClusterAdminServer::new(ClusterAdminService::new(
                node.clone(),
                config.auth.clone(),
                metrics.clone(),
            ))
            .max_encoding_message_size(64 * 1024 * 1024),
        )
        .add_service(ObjectStoreServer::new(ObjectStoreService::new(
            node.clone(),
            config.auth.clone(),
            metrics.clone(),
        )))
        .add_service(SupervisorHostServer::new(SupervisorHostService::new(
            hub.clone(),
        )))
        .add_service(PoolAdminServer::new(PoolAdminService::new(
            hub.clone(),
            config.auth.clone(),
        )))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .map_err(ServeError::Serve);
    node.shutdown().await;
    result
}

/// Says, at start-up, which development defaults leave this gateway open.
fn warn_insecure_defaults(config: &GatewayConfig) {
    if config.insecure_signing_key {
        tracing::warn!(
            "no --signing-key-file: grants are signed with an INSECURE development key derived from the \
             cluster id; set openshell.gateway.signing_key_file in production"
        );
    }
    if !config.auth.enabled() {
        tracing::warn!("no bearer tokens configured: every API is open; set [openshell.gateway.auth] in production");
    }
}

/// The node listed first (lowest id) among the initial voters bootstraps the
/// cluster if its log is empty; the others wait to be contacted.
fn bootstrap(node: &RaftNode<GatewayState>, config: &GatewayConfig) {
    let voters = config.initial_voters.clone();
    let lowest = voters.iter().map(|(id, _)| *id).min();
    if lowest != Some(node.id()) {
        return;
    }
    let node = node.clone();
    tokio::spawn(async move {
        match node.raft().is_initialized().await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => {
                tracing::error!(error = %e, "cannot tell whether raft is initialized");
                return;
            }
        }
        for attempt in 1..=10 {
            match node.initialize(voters.clone()).await {
                Ok(_) => {
                    tracing::info!(?voters, "bootstrapped a new cluster");
                    return;
                }
                Err(e) => {
                    tracing::warn!(attempt, error = %e, "bootstrap failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    });
}

/// Aborts background tasks when the server returns.
struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Completes on SIGINT or SIGTERM (Kubernetes stops Pods with SIGTERM).
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term => {},
    }
}

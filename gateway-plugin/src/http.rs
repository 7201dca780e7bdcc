//! The gateway's HTTP endpoints for Kubernetes and Prometheus.
//!
//! - `/healthz`: liveness; 200 while raft runs, 503 once it stopped for good
//!   (e.g. a full disk), so that the process is restarted.
//! - `/readyz`: 200 while this gateway knows a leader and is caught up with
//!   its commit index, with hysteresis; 503 with the reason otherwise. Both
//!   verdicts come from [`crate::health`], evaluated continuously.
//! - `/metrics`: Prometheus text format.

use std::future::Future;
use std::net::SocketAddr;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use raft_store::RaftNode;

use crate::health::Health;
use crate::hub::Hub;
use crate::metrics::Metrics;
use crate::state::GatewayState;

#[derive(Clone)]
struct Http {
    node: RaftNode<GatewayState>,
    hub: std::sync::Arc<Hub>,
    metrics: Metrics,
    /// Liveness and readiness, evaluated by their own task.
    health: Health,
}

/// Serves the endpoints on `listener` until `shutdown`.
///
/// # Errors
/// When the HTTP server fails.
pub async fn serve(
    listener: tokio::net::TcpListener,
    node: RaftNode<GatewayState>,
    hub: std::sync::Arc<Hub>,
    metrics: Metrics,
    health: Health,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(node, hub, metrics, health))
        .with_graceful_shutdown(shutdown)
        .await
}

/// The endpoints as a router (what [`serve`] serves; a host embedding the
/// gateway serves or merges it).
pub fn router(
    node: RaftNode<GatewayState>,
    hub: std::sync::Arc<Hub>,
    metrics: Metrics,
    health: Health,
) -> Router {
    let state = Http {
        node,
        hub,
        metrics,
        health,
    };
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(state)
}

/// Binds the HTTP address.
///
/// # Errors
/// When the address cannot be bound.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

async fn healthz(State(http): State<Http>) -> (StatusCode, String) {
    match http.health.verdict().fatal {
        None => (StatusCode::OK, "ok\n".into()),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not live: raft stopped: {reason}; restart this gateway\n"),
        ),
    }
}

async fn readyz(State(http): State<Http>) -> (StatusCode, String) {
    let verdict = http.health.verdict();
    let code = if verdict.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, format!("{}\n", verdict.reason))
}

async fn metrics_text(State(http): State<Http>) -> String {
    let m = &http.metrics;
    m.raft.refresh(&http.node);
    m.pool
        .attached_supervisors
        .set(crate::metrics::raft::gauge(http.hub.attached() as u64));
    let tick = http.hub.settings().tick_interval;
    http.node.read_local(|state, _| m.pool.refresh(state, tick));
    m.render()
}

//! `/healthz` (liveness: the process serves HTTP, whatever the gateways do)
//! and `/readyz` (a gateway accepted the authenticated stream and the member
//! is not draining, with the incarnation the pool granted; 503 with the
//! reason otherwise) and `/metrics` (Prometheus text: stream state,
//! reconnects, runtimes supervised; see [`super::metrics`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use super::Agent;

/// Serves the health endpoints on `listener`.
pub async fn serve(listener: tokio::net::TcpListener, agent: Arc<Agent>) {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(agent);
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "health endpoints failed");
    }
}

async fn readyz(State(agent): State<Arc<Agent>>) -> (StatusCode, String) {
    match agent.readiness() {
        Ok(incarnation) => (
            StatusCode::OK,
            format!("ready: incarnation {incarnation}\n"),
        ),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        ),
    }
}

async fn metrics_text(State(agent): State<Arc<Agent>>) -> String {
    agent.metrics_text()
}

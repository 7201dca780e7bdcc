//! The gateway's HTTP endpoints for Kubernetes and Prometheus.
//!
//! - `/healthz`: liveness; 200 while the process serves HTTP.
//! - `/readyz`: 200 once this gateway knows a leader and has caught up: it
//!   applied the log up to the commit index it saw at start-up, and up to the
//!   leader's commit index at the first probe that found a leader (a
//!   read-index round, so a node that restarts far behind is not ready until
//!   it caught up). After that, ready while a leader is known; 503 with the
//!   reason otherwise.
//! - `/metrics`: Prometheus text format.

use std::future::Future;
use std::net::SocketAddr;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use raft_store::RaftNode;

use crate::hub::Hub;
use crate::metrics::Metrics;
use crate::state::GatewayState;

#[derive(Clone)]
struct Http {
    node: RaftNode<GatewayState>,
    hub: std::sync::Arc<Hub>,
    metrics: Metrics,
    /// The commit index this gateway knew when it started.
    commit_at_start: u64,
    /// Set once the node applied up to a leader-confirmed read index.
    caught_up: std::sync::Arc<std::sync::atomic::AtomicBool>,
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
    commit_at_start: u64,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let state = Http {
        node,
        hub,
        metrics,
        commit_at_start,
        caught_up: Default::default(),
    };
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(state);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Binds the HTTP address.
///
/// # Errors
/// When the address cannot be bound.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

async fn readyz(State(http): State<Http>) -> (StatusCode, String) {
    use std::sync::atomic::Ordering;
    let status = http.node.status();
    let Some((leader, _)) = status.leader else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: no leader known\n".into(),
        );
    };
    if status.applied_index < http.commit_at_start {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: applied {} of the {} entries committed at start-up\n",
                status.applied_index, http.commit_at_start
            ),
        );
    }
    if !http.caught_up.load(Ordering::SeqCst) {
        let read =
            tokio::time::timeout(std::time::Duration::from_secs(1), http.node.read_index()).await;
        match read {
            Ok(Ok(_)) => http.caught_up.store(true, Ordering::SeqCst),
            Ok(Err(e)) => return (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {e}\n")),
            Err(_) => {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "not ready: still applying up to the leader's commit index\n".into(),
                )
            }
        }
    }
    (
        StatusCode::OK,
        format!("ready: leader {leader}, applied {}\n", status.applied_index),
    )
}

async fn metrics_text(State(http): State<Http>) -> String {
    let status = http.node.status();
    let m = &http.metrics;
    m.raft_term.set(status.term as i64);
    m.raft_is_leader.set(i64::from(
        status.leader.as_ref().map(|(id, _)| *id) == Some(status.node_id),
    ));
    m.raft_commit_index.set(status.commit_index as i64);
    m.raft_applied_index.set(status.applied_index as i64);
    m.pool_attached_supervisors.set(http.hub.attached() as i64);
    http.node.read_local(|state, _| {
        let pool_status = state.pool.status();
        m.pool_now_tick.set(pool_status.now_tick as i64);
        m.pool_members.reset();
        for view in &pool_status.members {
            let label = format!("{:?}", view.member.state).to_ascii_lowercase();
            m.pool_members.with_label_values(&[label.as_str()]).inc();
        }
        m.pool_sandboxes.reset();
        for (phase, count) in &pool_status.sandboxes_by_phase {
            let label = phase.to_ascii_lowercase();
            m.pool_sandboxes
                .with_label_values(&[label.as_str()])
                .set(*count as i64);
        }
    });
    m.render()
}

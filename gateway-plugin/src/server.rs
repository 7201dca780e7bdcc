//! Wiring: one raft node, the gRPC services on the client and peer ports
//! ([`crate::ports`]), bootstrap of a new cluster, and the bounded stop.
//!
//! # Stopping
//! When `shutdown` completes (the binary: the first SIGTERM or SIGINT),
//! [`run`] stops in at most [`STOP_BOUND`] (plus, with the autopilot, up to
//! [`crate::autopilot::LEAVE_BOUND`] first for a gateway being scaled away
//! to stop voting: [`crate::autopilot::wait_removed`]):
//!
//! 1. `/readyz` answers 503 "shutting down" and new supervisor streams are
//!    refused (UNAVAILABLE, refusal `GATEWAY_LEAVING`);
//! 2. a leader hands leadership over to a caught-up voter (within
//!    [`HANDOVER_BOUND`]; skipped when no voter is caught up; abandoned
//!    when that voter stops answering, e.g. stopping at the same time);
//! 3. every attached supervisor is sent `GatewayLeaving` and its stream
//!    ends: it attaches to another gateway at once, keeping its incarnation;
//! 4. the gRPC server stops accepting and waits for the calls in flight,
//!    until the bound; connections still open then are dropped;
//! 5. raft stops.
//!
//! A second signal exits at once ([`Signals`], used by the binary).

use std::future::Future;

use crate::config::GatewayConfig;
use crate::embed::Gateway;
use crate::ports::{self, Listeners};

pub use crate::embed::{HANDOVER_BOUND, STOP_BOUND};
pub use crate::ports::{
    GatewayServer, ServeError, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT, MAX_CONCURRENT_STREAMS,
    MAX_PENDING_ACCEPT_RESETS, MAX_REQUEST_BYTES,
};

/// Runs a gateway until `shutdown` completes, then stops within
/// [`STOP_BOUND`] (see the module doc).
///
/// # Errors
/// When a port is in use (nothing is created then), the node cannot start
/// (bad data directory), or the server fails.
pub async fn run(
    config: GatewayConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let listeners = Listeners::bind(&config).await?;
    let gateway = Gateway::start(config).await?;
    let http = listeners.http.map(|(addr, listener)| {
        tracing::info!(%addr, "HTTP endpoints listening (/healthz /readyz /metrics)");
        // Served until the process exits: probes see "shutting down"
        // throughout a stop.
        let app = gateway.http_router();
        AbortOnDrop(
            tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::error!(error = %e, "HTTP endpoints failed");
                }
            })
            .abort_handle(),
        )
    });
    let (mut serving, stop_serving) = serve_ports(listeners.client, listeners.peer, &gateway)?;
    tokio::select! {
        (served, _, _) = futures::future::select_all(serving.iter_mut()) => {
            // A server failed before any stop was asked for.
            gateway.node().shutdown().await;
            return match served {
                Ok(result) => result.map_err(ServeError::Serve),
                Err(e) => {
                    tracing::error!(error = %e, "gRPC server task ended");
                    Ok(())
                }
            };
        }
        () = shutdown => {}
    }
    if let Some(autopilot) = &gateway.config().autopilot {
        crate::autopilot::wait_removed(gateway.node(), autopilot, crate::autopilot::LEAVE_BOUND)
            .await;
    }
    let aborts: Vec<_> = serving.iter().map(|s| s.abort_handle()).collect();
    let drain = async move {
        let _ = stop_serving.send(true);
        futures::future::join_all(serving.iter_mut()).await
    };
    let result = match gateway.stop(drain).await {
        Some(served) => served
            .into_iter()
            .map(|served| match served {
                Ok(result) => result.map_err(ServeError::Serve),
                Err(e) => {
                    tracing::error!(error = %e, "gRPC server task ended");
                    Ok(())
                }
            })
            .collect::<Result<Vec<()>, _>>()
            .map(|_| ()),
        None => {
            tracing::warn!(
                "connections still open at the stop bound: dropping them and exiting anyway"
            );
            for serving in aborts {
                serving.abort();
            }
            Ok(())
        }
    };
    drop(http);
    result
}

/// Serves the client port and, if bound, the peer port (else the peer
/// services join the client port: an `--insecure` gateway); returns their
/// tasks and the switch that stops them.
fn serve_ports(
    client: tokio::net::TcpListener,
    peer: Option<tokio::net::TcpListener>,
    gateway: &Gateway,
) -> Result<(Vec<ports::Serving>, tokio::sync::watch::Sender<bool>), ServeError> {
    let (stop_serving, stopped) = tokio::sync::watch::channel(false);
    let serving = match peer {
        Some(peer) => vec![
            ports::serve(
                gateway
                    .server_builder()
                    .add_routes(gateway.client_routes()?),
                client,
                gateway.client_tls(),
                stopped.clone(),
            ),
            ports::serve(
                gateway.server_builder().add_routes(gateway.peer_routes()),
                peer,
                gateway.peer_tls(),
                stopped,
            ),
        ],
        None => vec![ports::serve(
            gateway
                .server_builder()
                .add_routes(gateway.single_port_routes()?),
            client,
            gateway.client_tls(),
            stopped,
        )],
    };
    Ok((serving, stop_serving))
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Completes on SIGINT or SIGTERM (Kubernetes stops Pods with SIGTERM).
pub async fn shutdown_signal() {
    Signals::new().next().await;
}

/// SIGTERM and SIGINT, listened to for the life of the process: the first
/// one starts the stop, a second one exits at once.
pub struct Signals {
    /// SIGTERM, unless it could not be listened to.
    term: Option<tokio::signal::unix::Signal>,
    /// SIGINT, unless it could not be listened to.
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Starts listening (inside a tokio runtime). A signal that cannot be
    /// listened to is logged and never completes.
    pub fn new() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        let listen = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for {name}");
                None
            }
        };
        Signals {
            term: listen(SignalKind::terminate(), "SIGTERM"),
            int: listen(SignalKind::interrupt(), "SIGINT"),
        }
    }

    /// The next SIGTERM or SIGINT; returns the exit code a process killed by
    /// it would have (143 for SIGTERM, 130 for SIGINT).
    pub async fn next(&mut self) -> i32 {
        async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = recv(&mut self.term) => 143,
            () = recv(&mut self.int) => 130,
        }
    }
}

impl Default for Signals {
    fn default() -> Self {
        Self::new()
    }
}

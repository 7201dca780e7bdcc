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
//!    [`HANDOVER_BOUND`]; skipped when no voter is caught up);
//! 3. every attached supervisor is sent `GatewayLeaving` and its stream
//!    ends: it attaches to another gateway at once, keeping its incarnation;
//! 4. the gRPC server stops accepting and waits for the calls in flight,
//!    until the bound; connections still open then are dropped;
//! 5. raft stops.
//!
//! A second signal exits at once ([`Signals`], used by the binary).

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use crate::config::GatewayConfig;
use crate::embed::Gateway;
use crate::ports::{self, Listeners};

pub use crate::embed::{HANDOVER_BOUND, STOP_BOUND};

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
    /// A gRPC port could not be bound (checked before the data directory
    /// is created or opened).
    #[error("{flag} {addr}: cannot bind the gRPC port (is another process using it?)")]
    Bind {
        /// The flag and key of the port.
        flag: &'static str,
        /// The listen address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP endpoints' port could not be bound (checked before the data
    /// directory is created or opened).
    #[error(
        "--http-listen (http_listen_addr) {addr}: cannot bind the HTTP endpoints' port (is another process using it?)"
    )]
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
    /// The configured sandbox driver cannot work (checked before the data
    /// directory is created or opened).
    #[error(transparent)]
    Driver(#[from] crate::launcher::driver::DriverSetupError),
    /// The reflection service could not be built (a build defect).
    #[error(transparent)]
    Reflection(#[from] proto::discovery::ReflectionError),
}

/// Logs where this gateway listens, and warns about insecure defaults.
pub(crate) fn announce(config: &GatewayConfig) {
    tracing::info!(
        node = config.node.node_id,
        listen = %config.listen_addr,
        peer_listen = ?config.peer_listen_addr,
        advertise = %config.node.advertise_addr,
        tls = config.tls.is_some(),
        "gateway listening"
    );
    warn_insecure_defaults(config);
}

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

/// A tonic server with the gateway's limits and layers.
pub type GatewayServer = tonic::transport::Server<ports::GatewayLayers>;

/// A server with the limits every port shares, one tracing span per call
/// ([`crate::logs::RpcLayer`]) and every call timed by service, method and
/// code ([`crate::rpc_metrics`]).
pub(crate) fn server(config: &GatewayConfig, metrics: &crate::metrics::Metrics) -> GatewayServer {
    tonic::transport::Server::builder()
        .max_concurrent_streams(Some(MAX_CONCURRENT_STREAMS))
        .http2_max_pending_accept_reset_streams(Some(MAX_PENDING_ACCEPT_RESETS))
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .timeout(unary_timeout(config))
        .layer(crate::logs::RpcLayer)
        .layer(crate::rpc_metrics::RpcMetricsLayer::new(metrics))
}

/// Largest request message of the admin, object store, pool admin and
/// supervisor services (an object's payload is at most 32 KiB); a larger one
/// is refused with `OUT_OF_RANGE` before it is decoded. The raft transport
/// keeps its own 64 MiB limit (snapshot chunks, append batches).
pub const MAX_REQUEST_BYTES: usize = 2 * 1024 * 1024;
/// Concurrent HTTP/2 streams one connection may open.
pub const MAX_CONCURRENT_STREAMS: u32 = 256;
/// Streams a client may open and cancel before the server accepted them,
/// per connection, before the connection is closed with
/// `ENHANCE_YOUR_CALM` (h2's defence against rapid-reset floods; its default
/// is 20). A raft leader cancels every AppendEntries that outlives
/// openraft's TTL (the heartbeat interval, 50 ms by default), so on a
/// loaded machine 20 cancelled appends piled up on a follower, its
/// connection from the leader was torn down with every append in flight,
/// and writes stalled for over 30 s after a paused leader came back
/// (`openshell-jepsen bench-failover`). Still bounded: at most
/// [`MAX_CONCURRENT_STREAMS`] streams are open at once on a connection.
pub const MAX_PENDING_ACCEPT_RESETS: usize = 1024;
/// HTTP/2 keepalive ping interval of the server.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a keepalive ping may go unanswered before the connection closes.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// The deadline of a call until its response starts: above the longest a
/// call may legitimately wait (a write waiting for a leader, an exec at its
/// cap) plus a margin. Streams are bounded until their response starts only
/// (the supervisor stream's first message has its own, shorter deadline).
fn unary_timeout(config: &GatewayConfig) -> Duration {
    config
        .node
        .write_timeout
        .max(Duration::from_millis(proto::exec::MAX_TIMEOUT_MS))
        + Duration::from_secs(30)
}

/// Says, at start-up, which development defaults leave this gateway open.
fn warn_insecure_defaults(config: &GatewayConfig) {
    if config.insecure {
        tracing::warn!(
            "started with --insecure: what is not configured stays open (plaintext gRPC without TLS \
             files, APIs without tokens, a development signing key); never on a shared network"
        );
    }
    if config.tls.is_none() {
        tracing::warn!("no TLS: every gRPC port is plaintext; anyone who can reach the ports can read and inject traffic");
    }
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

//! The gateway's listening ports and what each serves, the one gRPC server
//! every port runs (its limits and layers: [`server`], [`MAX_REQUEST_BYTES`])
//! and what may fail on the way ([`ServeError`]). Below both users: the
//! embeddable [`crate::embed::Gateway`] and the serve loop
//! ([`crate::server::run`]) import this module, it imports neither.
//!
//! | port | flag | serves | who may connect |
//! |------|------|--------|-----------------|
//! | client | `--listen` | ClusterAdmin, PoolAdmin, ObjectStore, SupervisorHost | anyone completing TLS; calls need a token or a supervisor credential |
//! | peer | `--peer-listen` | RaftTransport, ClusterAdmin (calls forwarded to the leader) | gateways: a client certificate the cluster CA signed (mutual TLS) |
//! | HTTP | `--http-listen` | /healthz, /readyz, /metrics (plain HTTP) | probes and scrapers; nothing secret |
//!
//! An `--insecure` gateway without `--peer-listen` serves both gRPC sets on
//! the client port, in plaintext (development only).
//!
//! Every port is bound before the data directory is touched, so a busy port
//! leaves nothing behind ([`Listeners::bind`]).

use std::net::SocketAddr;
use std::time::Duration;

use tonic::transport::server::Router;

/// The layers of every gateway server ([`GatewayServer`]):
/// the call's tracing span, and within it its metrics.
pub(crate) type GatewayLayers = tower::layer::util::Stack<
    crate::rpc_metrics::RpcMetricsLayer,
    tower::layer::util::Stack<crate::logs::RpcLayer, tower::layer::util::Identity>,
>;

use crate::config::GatewayConfig;

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
        // The runtime it runs on: the binary's (`worker_threads`) or an
        // embedding program's own.
        runtime_workers = tokio::runtime::Handle::current().metrics().num_workers(),
        "gateway listening"
    );
    warn_insecure_defaults(config);
}

/// The ports, bound.
pub(crate) struct Listeners {
    /// `--listen`: the client port.
    pub client: tokio::net::TcpListener,
    /// `--peer-listen`: the peer port, if this gateway has one.
    pub peer: Option<tokio::net::TcpListener>,
    /// `--http-listen`, if given: the probes and metrics.
    pub http: Option<(SocketAddr, tokio::net::TcpListener)>,
}

impl Listeners {
    /// Binds every configured port.
    ///
    /// # Errors
    /// A port in use, named by its flag.
    pub async fn bind(config: &GatewayConfig) -> Result<Self, ServeError> {
        let client = tokio::net::TcpListener::bind(config.listen_addr)
            .await
            .map_err(|source| ServeError::Bind {
                flag: "--listen (listen_addr)",
                addr: config.listen_addr,
                source,
            })?;
        let peer =
            match config.peer_listen_addr {
                Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.map_err(
                    |source| ServeError::Bind {
                        flag: "--peer-listen (peer_listen_addr)",
                        addr,
                        source,
                    },
                )?),
                None => None,
            };
        let http = match config.http_listen {
            Some(addr) => Some((
                addr,
                crate::http::bind(addr)
                    .await
                    .map_err(|source| ServeError::BindHttp { addr, source })?,
            )),
            None => None,
        };
        Ok(Listeners { client, peer, http })
    }
}

/// A gRPC server's task.
pub(crate) type Serving = tokio::task::JoinHandle<Result<(), tonic::transport::Error>>;

/// Serves `router` on `listener`, over TLS with `tls` (else plaintext),
/// until `stop` turns true; then stops accepting and drains.
pub(crate) fn serve(
    router: Router<GatewayLayers>,
    listener: tokio::net::TcpListener,
    tls: Option<proto::tls::ServerTls>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Serving {
    let stopped = async move {
        let _ = stop.wait_for(|stop| *stop).await;
    };
    match tls {
        Some(tls) => tokio::spawn(
            router.serve_with_incoming_shutdown(proto::tls::incoming(listener, tls), stopped),
        ),
        None => {
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            tokio::spawn(router.serve_with_incoming_shutdown(incoming, stopped))
        }
    }
}

/// A tonic server with the gateway's limits and layers.
pub type GatewayServer = tonic::transport::Server<GatewayLayers>;

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
        .layer(crate::rpc_metrics::RpcMetricsLayer::new(&metrics.grpc))
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
/// (`openshell-bench failover`). Still bounded: at most
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

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

use proto::cluster::cluster_admin_server::ClusterAdminServer;
use proto::objects::object_store_server::ObjectStoreServer;
use raft_store::RaftNode;

use proto::pool_admin::pool_admin_server::PoolAdminServer;
use proto::supervisor_host::supervisor_host_server::SupervisorHostServer;

use crate::auth::authenticated;
use crate::cluster_admin_service::ClusterAdminService;
use crate::config::GatewayConfig;
use crate::health::Health;
use crate::hub::Hub;
use crate::metrics::Metrics;
use crate::object_store_service::ObjectStoreService;
use crate::pool_admin_service::PoolAdminService;
use crate::ports::{self, Listeners};
use crate::state::GatewayState;
use crate::supervisor_host_service::SupervisorHostService;

/// The longest a stop takes, from `shutdown` completing to [`run`]
/// returning (the runbook promises an exit within 10 s).
pub const STOP_BOUND: Duration = Duration::from_secs(9);
/// The longest a stopping leader spends handing leadership over.
pub const HANDOVER_BOUND: Duration = Duration::from_secs(4);
/// Kept at the end of [`STOP_BOUND`] for raft's own shutdown.
const RAFT_SHUTDOWN_BOUND: Duration = Duration::from_secs(1);
/// A voter at most this many entries behind the leader counts as caught up
/// (a candidate for the hand-over).
const HANDOVER_MAX_LAG: u64 = 100;

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
}

/// Logs where this gateway listens, and warns about insecure defaults.
fn announce(config: &GatewayConfig) {
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

/// The node's config, reporting to `metrics` (log fsync, batches,
/// snapshots, leader changes).
fn observed(config: &GatewayConfig, metrics: &Metrics) -> raft_store::NodeConfig {
    raft_store::NodeConfig {
        observer: metrics.raft_observer(),
        ..config.node.clone()
    }
}

/// Starts the sandbox launcher (it acts only while this node leads), or
/// says that this gateway launches nothing.
fn spawn_launcher(
    driver: Option<std::sync::Arc<dyn sandbox_driver::SandboxDriver>>,
    hub: &std::sync::Arc<Hub>,
    config: &GatewayConfig,
) -> Option<tokio::task::AbortHandle> {
    let Some(driver) = driver else {
        tracing::warn!(
            "no sandbox driver (--sandbox-driver none): this gateway launches no runtimes when it leads"
        );
        return None;
    };
    let launcher = crate::launcher::Launcher::new(
        hub.clone(),
        driver,
        config.launcher.runtime_trusted_keys_file.clone(),
    );
    Some(tokio::spawn(launcher.run()).abort_handle())
}

/// Starts the voter autopilot, if configured (it acts only while this node
/// leads).
fn spawn_autopilot(
    node: &RaftNode<GatewayState>,
    config: &GatewayConfig,
) -> Option<tokio::task::AbortHandle> {
    let autopilot = crate::autopilot::Autopilot::new(node.clone(), config.autopilot.clone()?);
    Some(tokio::spawn(autopilot.run()).abort_handle())
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
    let driver = crate::launcher::driver::build(&config.launcher.driver).await?;
    let metrics = Metrics::new();
    let node: RaftNode<GatewayState> =
        RaftNode::start(observed(&config, &metrics))
            .await
            .map_err(|source| ServeError::StartNode {
                node_id: config.node.node_id,
                source,
            })?;
    announce(&config);
    bootstrap(&node, &config);
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
    aborts.extend(spawn_launcher(driver, &hub, &config));
    if let Some(tls) = &config.tls {
        use proto::tls::{Reloader, RELOAD_EVERY};
        aborts.push(Reloader::spawn(tls.client_port.clone(), RELOAD_EVERY).abort_handle());
        aborts.push(Reloader::spawn(tls.peer_port.clone(), RELOAD_EVERY).abort_handle());
        aborts.push(Reloader::spawn(tls.peer_client.clone(), RELOAD_EVERY).abort_handle());
    }
    if let Some((addr, listener)) = listeners.http {
        tracing::info!(%addr, "HTTP endpoints listening (/healthz /readyz /metrics)");
        // Served until the process exits: probes see "shutting down"
        // throughout a stop.
        let serve = crate::http::serve(
            listener,
            node.clone(),
            hub.clone(),
            metrics.clone(),
            health.clone(),
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
    aborts.extend(spawn_autopilot(&node, &config));
    let _abort = AbortOnDrop(aborts);
    let (mut serving, stop_serving) = serve_ports(
        listeners.client,
        listeners.peer,
        &node,
        &hub,
        &config,
        &metrics,
    );
    tokio::select! {
        (served, _, _) = futures::future::select_all(serving.iter_mut()) => {
            // A server failed before any stop was asked for.
            node.shutdown().await;
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
    if let Some(autopilot) = &config.autopilot {
        crate::autopilot::wait_removed(&node, autopilot, crate::autopilot::LEAVE_BOUND).await;
    }
    let stopping = Stopping {
        node,
        hub,
        health,
        serving,
        stop_serving,
    };
    stopping.run().await
}

/// Serves the client port and, if bound, the peer port (else the peer
/// services join the client port: an `--insecure` gateway); returns their
/// tasks and the switch that stops them.
fn serve_ports(
    client: tokio::net::TcpListener,
    peer: Option<tokio::net::TcpListener>,
    node: &RaftNode<GatewayState>,
    hub: &std::sync::Arc<Hub>,
    config: &GatewayConfig,
    metrics: &Metrics,
) -> (Vec<ports::Serving>, tokio::sync::watch::Sender<bool>) {
    let (stop_serving, stopped) = tokio::sync::watch::channel(false);
    let client_tls = config.tls.as_ref().map(|t| t.client_port.clone());
    let clients = client_router(node, hub, config, metrics);
    let serving = match peer {
        Some(peer) => vec![
            ports::serve(clients, client, client_tls, stopped.clone()),
            ports::serve(
                peer_router(node, config, metrics).add_service(relay(hub, config)),
                peer,
                config.tls.as_ref().map(|t| t.peer_port.clone()),
                stopped,
            ),
        ],
        None => vec![ports::serve(
            peer_services(node, config, metrics, clients).add_service(relay(hub, config)),
            client,
            client_tls,
            stopped,
        )],
    };
    (serving, stop_serving)
}

/// A server with the limits every port shares, timing every call
/// ([`crate::rpc_metrics`]).
fn server(config: &GatewayConfig, metrics: &Metrics) -> ports::Server {
    tonic::transport::Server::builder()
        .layer(crate::rpc_metrics::RpcMetricsLayer::new(metrics))
        .max_concurrent_streams(Some(MAX_CONCURRENT_STREAMS))
        .http2_max_pending_accept_reset_streams(Some(MAX_PENDING_ACCEPT_RESETS))
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .timeout(unary_timeout(config))
}

/// ClusterAdmin: served on the client port, and on the peer port for calls
/// another gateway forwards to the leader.
fn cluster_admin(
    node: &RaftNode<GatewayState>,
    config: &GatewayConfig,
    metrics: &Metrics,
) -> ClusterAdminServer<ClusterAdminService> {
    ClusterAdminServer::new(ClusterAdminService::new(
        node.clone(),
        config.auth.clone(),
        metrics.clone(),
    ))
    .max_encoding_message_size(64 * 1024 * 1024)
    .max_decoding_message_size(MAX_REQUEST_BYTES)
}

/// The peer port's services: the raft transport (its own, large decoding
/// limit) and ClusterAdmin for forwarded calls.
fn peer_router(
    node: &RaftNode<GatewayState>,
    config: &GatewayConfig,
    metrics: &Metrics,
) -> ports::Router {
    server(config, metrics)
        .add_service(node.transport_service())
        .add_service(cluster_admin(node, config, metrics))
}

/// The peer port's services added to `router` (an `--insecure` gateway
/// without a peer port; ClusterAdmin is there already).
fn peer_services(
    node: &RaftNode<GatewayState>,
    _config: &GatewayConfig,
    _metrics: &Metrics,
    router: ports::Router,
) -> ports::Router {
    router.add_service(node.transport_service())
}

/// PeerRelay (an exec relayed to the gateway holding the owner's stream):
/// peer port only, since relays go to membership (peer) addresses.
fn relay(
    hub: &std::sync::Arc<Hub>,
    config: &GatewayConfig,
) -> proto::gateway::peer_relay_server::PeerRelayServer<crate::peer_relay_service::PeerRelayService>
{
    crate::peer_relay_service::service(hub.clone(), config.auth.clone())
}

/// The client port's services.
fn client_router(
    node: &RaftNode<GatewayState>,
    hub: &std::sync::Arc<Hub>,
    config: &GatewayConfig,
    metrics: &Metrics,
) -> ports::Router {
    server(config, metrics)
        .add_service(authenticated(
            &config.auth,
            metrics,
            "cluster_admin",
            cluster_admin(node, config, metrics),
        ))
        .add_service(authenticated(
            &config.auth,
            metrics,
            "object_store",
            ObjectStoreServer::new(ObjectStoreService::new(
                node.clone(),
                config.auth.clone(),
                metrics.clone(),
            ))
            .max_decoding_message_size(MAX_REQUEST_BYTES),
        ))
        .add_service(
            SupervisorHostServer::new(SupervisorHostService::new(hub.clone()))
                .max_decoding_message_size(MAX_REQUEST_BYTES),
        )
        .add_service(authenticated(
            &config.auth,
            metrics,
            "pool_admin",
            PoolAdminServer::new(PoolAdminService::new(hub.clone(), config.auth.clone()))
                .max_decoding_message_size(MAX_REQUEST_BYTES),
        ))
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

/// A gateway between `shutdown` and the return of [`run`].
struct Stopping {
    /// Hands leadership over, then stops.
    node: RaftNode<GatewayState>,
    /// Refuses new streams, then moves the attached ones.
    hub: std::sync::Arc<Hub>,
    /// Turns not ready at once.
    health: Health,
    /// The gRPC servers' tasks (client port, peer port).
    serving: Vec<ports::Serving>,
    /// Tells the gRPC servers to stop accepting and drain.
    stop_serving: tokio::sync::watch::Sender<bool>,
}

impl Stopping {
    /// The stop of the module doc, bounded by [`STOP_BOUND`].
    async fn run(mut self) -> Result<(), ServeError> {
        let started = tokio::time::Instant::now();
        let deadline = started + STOP_BOUND;
        self.health.set_leaving();
        self.hub.begin_leaving();
        tracing::info!(
            bound_ms = STOP_BOUND.as_millis() as u64,
            "stopping: /readyz answers 503, new supervisor streams are refused"
        );
        self.hand_over_leadership().await;
        let moved = self.hub.move_supervisors();
        tracing::info!(
            moved,
            "told the attached supervisors to move to another gateway"
        );
        let _ = self.stop_serving.send(true);
        let drained = tokio::time::timeout_at(
            deadline - RAFT_SHUTDOWN_BOUND,
            futures::future::join_all(self.serving.iter_mut()),
        )
        .await;
        let result = match drained {
            Ok(served) => served
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
            Err(_) => {
                tracing::warn!(
                    "connections still open at the stop bound: dropping them and exiting anyway"
                );
                for serving in &self.serving {
                    serving.abort();
                }
                Ok(())
            }
        };
        let raft_bound = deadline
            .saturating_duration_since(tokio::time::Instant::now())
            .max(Duration::from_millis(100));
        if tokio::time::timeout(raft_bound, self.node.shutdown())
            .await
            .is_err()
        {
            tracing::warn!("raft did not stop within the bound; exiting anyway");
        }
        tracing::info!(
            took_ms = started.elapsed().as_millis() as u64,
            "gateway stopped"
        );
        result
    }

    /// A leader moves leadership to the most caught-up voter (at most
    /// [`HANDOVER_MAX_LAG`] entries behind), within [`HANDOVER_BOUND`], so
    /// the cluster does not wait for an election timeout after it leaves.
    /// Skipped when this node does not lead or no voter is caught up.
    async fn hand_over_leadership(&self) {
        let status = self.node.status();
        if !self.node.is_leader() {
            return;
        }
        let target = status
            .nodes
            .iter()
            .filter(|n| n.voter && n.id != status.node_id)
            .filter_map(|n| n.lag.map(|lag| (lag, n.id)))
            .filter(|(lag, _)| *lag <= HANDOVER_MAX_LAG)
            .min();
        let Some((lag, to)) = target else {
            tracing::warn!("leading, but no voter is caught up: leaving without a hand-over");
            return;
        };
        tracing::info!(to, lag, "leading: handing leadership over before stopping");
        match tokio::time::timeout(HANDOVER_BOUND, self.node.transfer_leader(Some(to))).await {
            Ok(Ok((leader, term))) => {
                tracing::info!(leader, term, "handed leadership over")
            }
            Ok(Err(e)) => tracing::warn!(to, error = %e, "leadership hand-over failed"),
            Err(_) => tracing::warn!(
                to,
                bound_ms = HANDOVER_BOUND.as_millis() as u64,
                "leadership hand-over did not finish within its bound"
            ),
        }
    }
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

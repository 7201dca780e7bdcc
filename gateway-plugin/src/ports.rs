//! The gateway's listening ports and what each serves.
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

use tonic::transport::server::Router;

/// The layers of every gateway server ([`crate::server::GatewayServer`]):
/// the call's tracing span, and within it its metrics.
pub(crate) type GatewayLayers = tower::layer::util::Stack<
    crate::rpc_metrics::RpcMetricsLayer,
    tower::layer::util::Stack<crate::logs::RpcLayer, tower::layer::util::Identity>,
>;

use crate::config::GatewayConfig;
use crate::server::ServeError;

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

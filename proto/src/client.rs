//! Every outbound gRPC channel of the workspace is built here, by [`connect`].
//!
//! One function so that transport security, deadlines and keepalive are set
//! in exactly one place for every caller: gateway to gateway (raft, write and
//! admin forwarding), supervisor to gateway, supervisor to sandbox runtime, the operator CLI and the Jepsen clients.
//! Each caller names its [`Role`] and passes a [`ClientConfig`]; the role's
//! defaults are [`ClientConfig::for_role`], and whoever embeds a component may
//! override any field.
//!
//! # Example
//! ```no_run
//! # async fn example() -> Result<(), proto::client::ClientError> {
//! use proto::client::{connect, ClientConfig, Role};
//! use proto::objects::object_store_client::ObjectStoreClient;
//!
//! let config = ClientConfig::for_role(Role::Cli);
//! let channel = connect(Role::Cli, "127.0.0.1:7001", &config).await?;
//! let _client = ObjectStoreClient::new(channel);
//! # Ok(()) }
//! ```

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

/// How long a peer or forwarding connection may go without a frame read
/// (while a call is in flight) before it is pinged.
pub const PEER_KEEPALIVE_INTERVAL: Duration = Duration::from_millis(500);

/// How long that ping may go unanswered before the connection is closed:
/// a dead peer connection is noticed within
/// `PEER_KEEPALIVE_INTERVAL + PEER_KEEPALIVE_TIMEOUT` (1 s).
pub const PEER_KEEPALIVE_TIMEOUT: Duration = Duration::from_millis(500);

/// Who opens a channel, and so which defaults apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Gateway to gateway: raft RPCs, forwarded writes and read-index.
    Peer,
    /// Gateway to the leader gateway: a forwarded admin call.
    Forwarding,
    /// Supervisor to a gateway: the long-lived attach stream.
    SupervisorToGateway,
    /// Supervisor to a sandbox runtime: activate, heartbeat, exec.
    SupervisorToRuntime,
    /// The operator CLI to a gateway.
    Cli,
    /// The Jepsen harness's clients to a gateway under test.
    Jepsen,
    /// An application's `openshell-client` (the Rust client crate) to a
    /// gateway: it retries and fails over itself, so each attempt is short.
    Client,
}

impl Role {
    /// Every role, for tests and documentation tables.
    pub const ALL: [Role; 7] = [
        Role::Peer,
        Role::Forwarding,
        Role::SupervisorToGateway,
        Role::SupervisorToRuntime,
        Role::Cli,
        Role::Jepsen,
        Role::Client,
    ];

    /// The role's name in logs and errors.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Peer => "peer",
            Role::Forwarding => "forwarding",
            Role::SupervisorToGateway => "supervisor-to-gateway",
            Role::SupervisorToRuntime => "supervisor-to-runtime",
            Role::Cli => "cli",
            Role::Jepsen => "jepsen",
            Role::Client => "client",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a channel connects and how long its calls may take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientConfig {
    /// How long establishing the connection may take.
    pub connect_timeout: Duration,
    /// The deadline of every call on the channel; `None` leaves it to each
    /// call (long-lived streams, raft RPCs bounded by openraft itself).
    pub request_timeout: Option<Duration>,
    /// HTTP/2 keepalive ping interval; `None` sends no pings.
    pub keepalive_interval: Option<Duration>,
    /// How long a keepalive ping may go unanswered before the connection is
    /// closed (only with `keepalive_interval`).
    pub keepalive_timeout: Duration,
    /// Connect at the first call instead of before [`connect`] returns.
    /// Lazy channels suit cached peer channels (a peer that is down now may
    /// be up at the next call); eager ones let a caller try the next
    /// endpoint at once.
    pub lazy: bool,
    /// TLS (the CA the server must chain to, and any client certificate);
    /// `None` dials plaintext, which only a server started with
    /// `--insecure` accepts.
    pub tls: Option<crate::tls::ClientTls>,
    /// The local address connections are made from; `None` (the default)
    /// leaves it to the system. The scale bench spreads its scripted
    /// supervisors over many addresses of its test network, as real
    /// supervisors dial from their own machines, so that the gateways'
    /// per-address handshake limits see them apart.
    pub local_address: Option<std::net::IpAddr>,
}

impl ClientConfig {
    /// The defaults of `role`.
    pub fn for_role(role: Role) -> Self {
        let base = ClientConfig {
            connect_timeout: Duration::from_secs(1),
            request_timeout: None,
            keepalive_interval: None,
            keepalive_timeout: Duration::from_secs(5),
            lazy: false,
            tls: None,
            local_address: None,
        };
        match role {
            // Raft RPCs carry their own deadline (openraft's heartbeat and
            // install-snapshot timeouts). A connection that died without
            // closing (TCP in retransmission backoff after heavy loss, a
            // flow a middlebox dropped) fails nothing, every call on it just
            // times out: a ping after 500 ms without a frame read, unanswered
            // for 500 ms more, closes it within a second, and the next call
            // dials a new one (issue 33: with pings every 10 s a follower
            // stayed cut off for seconds after the loss stopped).
            Role::Peer | Role::Forwarding => ClientConfig {
                connect_timeout: Duration::from_millis(500),
                keepalive_interval: Some(PEER_KEEPALIVE_INTERVAL),
                keepalive_timeout: PEER_KEEPALIVE_TIMEOUT,
                lazy: true,
                ..base
            },
            // The attach stream lives for the process; pings notice a
            // gateway that vanished or stalled (paused, frozen) within
            // 1.5 s, so the supervisor re-attaches elsewhere before its
            // heartbeat TTL (2 s by default) runs out after the new
            // leader's grace (docs/operations.md, "A paused or stalled
            // gateway").
            Role::SupervisorToGateway => ClientConfig {
                keepalive_interval: Some(Duration::from_millis(500)),
                keepalive_timeout: Duration::from_secs(1),
                ..base
            },
            // A runtime answers quickly, except an activation that waits for
            // the recovery deadline (60 s by default).
            Role::SupervisorToRuntime => ClientConfig {
                connect_timeout: Duration::from_millis(500),
                request_timeout: Some(Duration::from_secs(70)),
                ..base
            },
            // An operator's command: the TCP connect and the TLS handshake
            // get 3 s each (Go's and kubectl's handshake timeout is 10 s).
            // At 800 ms a fresh CLI process on a loaded machine, or through
            // a Service proxy, gave up on a healthy gateway as unreachable;
            // a dead endpoint in a list now costs 3 s before the next.
            Role::Cli => ClientConfig {
                connect_timeout: Duration::from_secs(3),
                request_timeout: Some(Duration::from_secs(60)),
                ..base
            },
            Role::Jepsen => ClientConfig {
                request_timeout: Some(Duration::from_secs(1)),
                lazy: true,
                ..base
            },
            // One attempt of a call the client may retry elsewhere: a
            // write commits within the gateway's write timeout (5 s by
            // default), so an attempt waits a little longer than that.
            Role::Client => ClientConfig {
                connect_timeout: Duration::from_millis(500),
                request_timeout: Some(Duration::from_secs(6)),
                ..base
            },
        }
    }

    /// The same configuration with another per-call deadline.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// The same configuration dialling TLS with `tls` (`None`: plaintext).
    pub fn with_tls(mut self, tls: Option<crate::tls::ClientTls>) -> Self {
        self.tls = tls;
        self
    }

    /// The same configuration connecting from the local address `local`
    /// (`None`: the system chooses).
    pub fn with_local_address(mut self, local: Option<std::net::IpAddr>) -> Self {
        self.local_address = local;
        self
    }

    /// The same configuration with another connect timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }
}

/// Why a channel could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The address is not a valid `host:port` authority.
    #[error("{role}: invalid address {addr:?}: {source}")]
    InvalidAddress {
        /// The role that asked.
        role: Role,
        /// The address given.
        addr: String,
        /// What tonic said.
        source: tonic::transport::Error,
    },
    /// The connection could not be established (eager channels only).
    #[error("{role}: {addr} is unreachable: {source}")]
    Unreachable {
        /// The role that asked.
        role: Role,
        /// The address dialled.
        addr: String,
        /// What tonic said.
        source: tonic::transport::Error,
    },
}

/// Adds `authorization: Bearer <token>` to every call (no header without a
/// token). Shared by the CLI and the client crate.
#[derive(Clone, Default)]
pub struct Bearer(Option<tonic::metadata::AsciiMetadataValue>);

impl std::fmt::Debug for Bearer {
    /// Never the token itself.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Bearer(<redacted>)"
        } else {
            "Bearer(none)"
        })
    }
}

/// A token a header cannot carry (a control character or non-ASCII).
#[derive(Debug, thiserror::Error)]
#[error("the token holds characters a header cannot carry")]
pub struct InvalidToken;

impl Bearer {
    /// The interceptor for `token` (`None`: no header).
    ///
    /// # Errors
    /// [`InvalidToken`] when the token cannot be a header value.
    pub fn new(token: Option<&str>) -> Result<Self, InvalidToken> {
        match token {
            None => Ok(Bearer(None)),
            Some(t) => format!("Bearer {t}")
                .parse()
                .map(|v| Bearer(Some(v)))
                .map_err(|_| InvalidToken),
        }
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", token.clone());
        }
        Ok(request)
    }
}

/// A channel to `addr` (`host:port`) for `role`, configured by `config`.
///
/// The one place the workspace builds a tonic channel (tests aside). With
/// `config.tls` the channel speaks TLS 1.3 ([`crate::tls::ClientTls`]:
/// the server's certificate must chain to the configured CA and name the
/// address's host; a client certificate is presented when configured);
/// without it, plaintext.
///
/// # Errors
/// [`ClientError::InvalidAddress`] for an address that is not `host:port`;
/// [`ClientError::Unreachable`] when an eager channel cannot connect within
/// `config.connect_timeout`.
pub async fn connect(
    role: Role,
    addr: &str,
    config: &ClientConfig,
) -> Result<Channel, ClientError> {
    let endpoint = endpoint(role, addr, config)?.local_address(config.local_address);
    let connector = |tls: &crate::tls::ClientTls| {
        tls.connector()
            .with_timeout(config.connect_timeout)
            .with_local_address(config.local_address)
    };
    let connected = match (&config.tls, config.lazy) {
        (Some(tls), true) => return Ok(endpoint.connect_with_connector_lazy(connector(tls))),
        (None, true) => return Ok(endpoint.connect_lazy()),
        (Some(tls), false) => endpoint.connect_with_connector(connector(tls)).await,
        (None, false) => endpoint.connect().await,
    };
    connected.map_err(|source| ClientError::Unreachable {
        role,
        addr: addr.to_string(),
        source,
    })
}

/// A TCP connection to `host:port` (`host` a name or an address; each of
/// its addresses is tried in turn), made from `local` when given.
pub(crate) async fn dial_tcp(
    host: &str,
    port: u16,
    local: Option<std::net::IpAddr>,
) -> std::io::Result<tokio::net::TcpStream> {
    let Some(local) = local else {
        return tokio::net::TcpStream::connect((host, port)).await;
    };
    let mut last = None;
    for remote in tokio::net::lookup_host((host, port)).await? {
        let socket = if remote.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        let attempt = match socket.bind(std::net::SocketAddr::new(local, 0)) {
            Ok(()) => socket.connect(remote).await,
            Err(e) => Err(std::io::Error::new(
                e.kind(),
                format!("binding the local address {local}: {e}"),
            )),
        };
        match attempt {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{host}:{port} resolves to no address"),
        )
    }))
}

/// A byte stream a [`Dialer`] opened: what a TCP connection is to
/// [`connect`].
pub trait Conn: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> Conn for T {}

/// Opens a connection to a channel's address (the URI's authority) in place
/// of TCP: the deterministic simulation (the `sim` crate) dials over its
/// simulated network with one. A gateway never has one.
pub type Dialer = tower::util::BoxCloneSyncService<
    tonic::codegen::http::Uri,
    hyper_util::rt::TokioIo<Box<dyn Conn>>,
    std::io::Error,
>;

/// [`connect`] over the connections `dialer` opens instead of TCP, with
/// `config`'s timeouts and keepalive. Plaintext: `config.tls` is not
/// applied (the simulation's peers run as with `--insecure`), so only a
/// caller that was given a dialer (the simulation) reaches this.
///
/// # Errors
/// As [`connect`].
pub async fn connect_via(
    role: Role,
    addr: &str,
    config: &ClientConfig,
    dialer: &Dialer,
) -> Result<Channel, ClientError> {
    let endpoint = endpoint(role, addr, config)?;
    if config.lazy {
        return Ok(endpoint.connect_with_connector_lazy(dialer.clone()));
    }
    endpoint
        .connect_with_connector(dialer.clone())
        .await
        .map_err(|source| ClientError::Unreachable {
            role,
            addr: addr.to_string(),
            source,
        })
}

/// The endpoint of `addr` with `config`'s timeouts and keepalive.
fn endpoint(role: Role, addr: &str, config: &ClientConfig) -> Result<Endpoint, ClientError> {
    let mut endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|source| ClientError::InvalidAddress {
            role,
            addr: addr.to_string(),
            source,
        })?
        .connect_timeout(match &config.tls {
            // The connector bounds the TCP connect and the handshake apart
            // (so a caller can tell a handshake that timed out); this is
            // only the backstop over both.
            Some(_) => config.connect_timeout * 2 + Duration::from_millis(200),
            None => config.connect_timeout,
        })
        .tcp_nodelay(true);
    if let Some(timeout) = config.request_timeout {
        endpoint = endpoint.timeout(timeout);
    }
    if let Some(interval) = config.keepalive_interval {
        endpoint = endpoint
            .http2_keep_alive_interval(interval)
            .keep_alive_timeout(config.keepalive_timeout);
    }
    Ok(endpoint)
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    use super::*;
    use crate::objects::object_store_client::ObjectStoreClient;
    use crate::objects::GetRequest;

    /// A peer that accepts connections and never answers: every call on a
    /// channel to it ends only by the channel's own deadline.
    async fn silent_server() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr").to_string();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {}
                });
            }
        });
        addr
    }

    /// The address the next connection accepted on `listener` came from.
    async fn accepted_from(listener: &TcpListener) -> std::net::IpAddr {
        let (_, peer) = tokio::time::timeout(Duration::from_secs(5), listener.accept())
            .await
            .expect("a connection within 5 s")
            .expect("accept");
        peer.ip()
    }

    /// Dials `addr` (a listener that answers nothing) with `config` from
    /// `local` and checks where the connection came from.
    async fn check_connects_from(listener: &TcpListener, local: &str, config: ClientConfig) {
        let local: std::net::IpAddr = local.parse().expect("ip");
        let config = config.with_local_address(Some(local));
        let target = listener.local_addr().expect("local addr").to_string();
        // Neither a plaintext HTTP/2 nor a TLS handshake is answered: only
        // where the connection came from is looked at.
        let dial = tokio::spawn(async move {
            let channel = connect(Role::Cli, &target, &config).await?;
            let _ = ObjectStoreClient::new(channel)
                .get(GetRequest::default())
                .await;
            Ok::<_, ClientError>(())
        });
        assert_eq!(accepted_from(listener).await, local);
        dial.abort();
    }

    #[tokio::test]
    async fn a_channel_connects_from_the_local_address_it_is_given() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base =
            ClientConfig::for_role(Role::Cli).with_connect_timeout(Duration::from_millis(300));
        check_connects_from(&listener, "127.0.0.3", base.clone()).await;
        check_connects_from(
            &listener,
            "127.0.0.4",
            ClientConfig {
                lazy: true,
                ..base.clone()
            },
        )
        .await;
        #[cfg(feature = "generate")]
        {
            let ca = crate::tls::generate::Ca::ephemeral("local address ca").expect("ca");
            let tls = crate::tls::ClientTls::from_ca_pem(ca.cert_pem()).expect("client tls");
            let secure = base.with_tls(Some(tls));
            check_connects_from(&listener, "127.0.0.5", secure.clone()).await;
            check_connects_from(
                &listener,
                "127.0.0.6",
                ClientConfig {
                    lazy: true,
                    ..secure
                },
            )
            .await;
        }
        let e = dial_tcp("127.0.0.1", 1, Some("192.0.2.1".parse().expect("ip")))
            .await
            .expect_err("192.0.2.1 is no address of this host");
        assert!(
            e.to_string()
                .contains("binding the local address 192.0.2.1"),
            "{e}"
        );
    }

    /// How long one call to the silent server takes to fail.
    async fn time_one_call(role: Role, addr: &str, config: &ClientConfig) -> Duration {
        let channel = connect(role, addr, config).await.expect("channel");
        let mut client = ObjectStoreClient::new(channel);
        let started = Instant::now();
        let result =
            tokio::time::timeout(Duration::from_secs(5), client.get(GetRequest::default()))
                .await
                .unwrap_or_else(|_| panic!("{role}: the call outlived its configured deadline"));
        let took = started.elapsed();
        assert!(result.is_err(), "{role}: a silent server cannot answer");
        took
    }

    #[tokio::test]
    async fn every_role_takes_its_call_deadline_from_client_config() {
        let addr = silent_server().await;
        for role in Role::ALL {
            let short =
                ClientConfig::for_role(role).with_request_timeout(Duration::from_millis(150));
            let long =
                ClientConfig::for_role(role).with_request_timeout(Duration::from_millis(900));
            let (a, b) = (
                time_one_call(role, &addr, &short).await,
                time_one_call(role, &addr, &long).await,
            );
            assert!(
                a >= Duration::from_millis(150) && a < Duration::from_millis(850),
                "{role}: a 150 ms deadline ended the call after {a:?}"
            );
            assert!(
                b >= Duration::from_millis(900),
                "{role}: a 900 ms deadline ended the call after {b:?}"
            );
        }
    }

    #[tokio::test]
    async fn an_eager_channel_to_a_closed_port_is_unreachable_and_names_its_role() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr").to_string();
        drop(listener);
        let config = ClientConfig::for_role(Role::Cli);
        assert!(!config.lazy);
        let err = connect(Role::Cli, &addr, &config)
            .await
            .expect_err("closed port");
        assert!(
            matches!(
                err,
                ClientError::Unreachable {
                    role: Role::Cli,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().starts_with("cli: "), "{err}");
    }

    #[tokio::test]
    async fn an_invalid_address_is_refused_before_dialling() {
        let config = ClientConfig::for_role(Role::Peer);
        let err = connect(Role::Peer, "not a host", &config)
            .await
            .expect_err("bad address");
        assert!(matches!(err, ClientError::InvalidAddress { .. }), "{err}");
    }

    #[test]
    fn peer_and_forwarding_channels_notice_a_dead_connection_within_a_second() {
        for role in [Role::Peer, Role::Forwarding] {
            let config = ClientConfig::for_role(role);
            let interval = config.keepalive_interval.expect("pings");
            assert!(
                interval + config.keepalive_timeout <= Duration::from_secs(1),
                "{role}"
            );
        }
    }

    #[test]
    fn roles_that_cache_channels_are_lazy_and_interactive_ones_eager() {
        assert!(ClientConfig::for_role(Role::Peer).lazy);
        assert!(ClientConfig::for_role(Role::Forwarding).lazy);
        assert!(!ClientConfig::for_role(Role::Cli).lazy);
        assert!(!ClientConfig::for_role(Role::SupervisorToGateway).lazy);
    }
}

//! `openshell-client`: a Rust client of the gateway's object store
//! (`openshell.objects.v1.ObjectStore`) and pool API
//! (`openshell.pool_admin.v1.PoolAdmin`).
//!
//! It talks to any of the gateways it is given, fails over between them,
//! bounds every call by a deadline, and retries a call whose outcome it
//! does not know. A write is retried safely: it carries a client request id
//! (128 random bits, one per write, the same on every retry of it), and the
//! gateways' state machine applies a request id at most once (it remembers
//! the outcome of the last 100 000 identified writes and answers a retry
//! with it; see `docs/client.md`).
//!
//! # Layout
//! - [`Client`], [`ClientBuilder`]: endpoints, transport security, token,
//!   deadlines; the object-store calls ([`Client::get`], [`Client::put`],
//!   [`Client::delete`], [`Client::list`]) in [`objects`](mod@objects) and
//!   the pool calls ([`Client::create_sandbox`], [`Client::delete_sandbox`],
//!   [`Client::get_sandbox`], [`Client::list_sandboxes`],
//!   [`Client::pool_status`]) in [`pool`](mod@pool).
//! - [`admin`](mod@admin): the cluster administration calls and the pool's
//!   operator calls (operations, `exec`) the `openshell-pool` CLI makes.
//! - [`retry`]: the retry loop ([`RetryPolicy`]: which failures are retried,
//!   backoff, the deadline, the rounds; leader hints; [`Repeat`]).
//! - [`error`]: [`Error`], typed (a conflict is not a lost connection).
//!
//! # Retry rules
//! An attempt that ends in `UNAVAILABLE`, `UNKNOWN`, `ABORTED`,
//! `DEADLINE_EXCEEDED`, a transport error or the attempt's own timeout is
//! retried on the next endpoint after a pause (50 ms, doubling, at most
//! 1 s) until the call's deadline (30 s by default) or, with
//! [`ClientBuilder::max_rounds`], until every endpoint failed that many
//! times ([`Error::Unanswered`]). A gateway that names the leader
//! (`FAILED_PRECONDITION` with a leader address) sends the next attempt
//! there. Any other status is an answer and is returned at once:
//! `INVALID_ARGUMENT`, `FAILED_PRECONDITION` (a failed compare-and-swap is
//! [`Error::Conflict`]; a request id already used for another write is
//! [`Error::RequestIdReused`]), `PERMISSION_DENIED`, `NOT_FOUND`, no quorum
//! ([`Error::NoQuorum`]), ... A call that must not run twice
//! ([`Repeat::Once`]) is retried only where the gateway surely did not act.
//!
//! # Example
//! ```no_run
//! # async fn example() -> Result<(), openshell_client::Error> {
//! use openshell_client::{Client, Condition, Object};
//!
//! let client = Client::builder()
//!     .endpoints(["10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.3:7001"])
//!     .ca_file("/etc/openshell/ca.pem")
//!     .token("s3cret")
//!     .deadline(std::time::Duration::from_secs(10))
//!     .build()?;
//! let current = client.get("config", "limits").await?;
//! let version = current.map(|o| o.resource_version).unwrap_or(0);
//! let object = Object {
//!     r#type: "config".into(),
//!     id: "limits".into(),
//!     payload: b"max=10".to_vec(),
//!     ..Object::default()
//! };
//! let written = client
//!     .put(object, Condition::MatchResourceVersion(version))
//!     .await?;
//! println!("stored at {}", written.value.object.map(|o| o.resource_version).unwrap_or(0));
//! # Ok(()) }
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use proto::client::{Bearer, ClientConfig};
use proto::tls::ClientTls;

pub mod admin;
pub mod cells;
pub mod error;
pub mod objects;
pub mod pool;
pub mod retry;
pub mod watch;

pub use cells::{CellError, CellMap, Cells};
pub use error::{Cause, Failure};
pub use error::{Error, Result};
pub use objects::Condition;
pub use pool::Headroom;
pub use proto::client::Role;
pub use proto::objects::{DeleteResponse, Object, PutResponse};
pub use proto::objects::{WatchEvent, WatchEventKind, WatchResponse};
pub use proto::pool_admin::{CreateSandboxRequest, PoolChange, Sandbox, SupervisorPoolStatus};
pub use retry::{Repeat, RetryPolicy};
pub use watch::{WatchSpec, Watcher};

/// A write's outcome and how it was reached.
#[derive(Clone, Debug)]
pub struct Written<T> {
    /// What the gateway answered.
    pub value: T,
    /// The request id the write carried on every attempt.
    pub request_id: String,
    /// How many attempts it took (1: the first answered).
    pub attempts: u32,
    /// True when the answer is the outcome of an earlier attempt that
    /// applied the write (its answer was lost): the retry applied nothing.
    pub replayed: bool,
    /// The gateway that answered.
    pub endpoint: String,
}

/// A client of a set of gateways. Cloning shares its channels.
#[derive(Clone)]
pub struct Client {
    endpoints: Arc<retry::Endpoints>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoints", &self.endpoints.addrs())
            .field("policy", &self.endpoints.policy)
            .finish()
    }
}

impl Client {
    /// A builder; [`ClientBuilder::build`] makes the client.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The retry policy in force.
    pub fn policy(&self) -> &RetryPolicy {
        &self.endpoints.policy
    }

    /// After a stream from `endpoint` broke (a watch): the next call dials
    /// it afresh and starts at the endpoint after it.
    pub fn avoid(&self, endpoint: &str) {
        self.endpoints.failed(endpoint);
    }
}

/// How the client reaches the gateways.
#[derive(Clone, Debug)]
enum Security {
    /// Plaintext, for gateways started with `--insecure`.
    Insecure,
    /// TLS verifying the gateways against this CA file.
    CaFile(PathBuf),
    /// TLS as configured by the caller.
    Tls(ClientTls),
}

/// Configures a [`Client`]. Endpoints and a choice of transport security
/// are required; everything else has a default.
#[derive(Clone, Debug, Default)]
pub struct ClientBuilder {
    endpoints: Vec<String>,
    security: Option<Security>,
    token: Option<String>,
    policy: RetryPolicy,
    connect_timeout: Option<Duration>,
    role: Option<Role>,
}

impl ClientBuilder {
    /// The gateways (`host:port`), tried in this order at first.
    pub fn endpoints<I, S>(mut self, endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.endpoints = endpoints.into_iter().map(Into::into).collect();
        self
    }

    /// TLS, trusting gateways whose certificate chains to the CA in `path`.
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.security = Some(Security::CaFile(path.into()));
        self
    }

    /// TLS as configured by `tls` (a client certificate, say).
    pub fn tls(mut self, tls: ClientTls) -> Self {
        self.security = Some(Security::Tls(tls));
        self
    }

    /// Plaintext, for gateways started with `--insecure`.
    pub fn insecure(mut self) -> Self {
        self.security = Some(Security::Insecure);
        self
    }

    /// The bearer token sent with every call (writes need `platform_admin`).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The bearer token, when there is one (`None` sends no header).
    pub fn token_opt(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    /// Who the client is: the channels' connect timeout and keepalive
    /// follow [`ClientConfig::for_role`] (default [`Role::Client`]; the CLI
    /// passes [`Role::Cli`]).
    pub fn role(mut self, role: Role) -> Self {
        self.role = Some(role);
        self
    }

    /// At most `rounds` passes over the endpoints, then
    /// [`Error::Unanswered`] (default: until the deadline).
    pub fn max_rounds(mut self, rounds: u32) -> Self {
        self.policy.max_rounds = Some(rounds.max(1));
        self
    }

    /// The deadline of one call, every retry included (default 30 s).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.policy.deadline = deadline;
        self
    }

    /// The longest one attempt may take (default 6 s: a gateway commits or
    /// gives up on a write within its write timeout, 5 s by default).
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.policy.attempt_timeout = timeout;
        self
    }

    /// The pause after the first failed attempt (doubling) and the longest
    /// pause (defaults 50 ms and 1 s).
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.policy.initial_backoff = initial;
        self.policy.max_backoff = max.max(initial);
        self
    }

    /// How long connecting to one gateway may take (default 500 ms).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// The client. Connects lazily: nothing is dialled until a call.
    ///
    /// # Errors
    /// [`Error::NoEndpoints`], [`Error::NoSecurity`], [`Error::Tls`] for a
    /// CA file that cannot be used, [`Error::InvalidToken`].
    pub fn build(self) -> Result<Client> {
        if self.endpoints.is_empty() {
            return Err(Error::NoEndpoints);
        }
        let tls = match self.security.ok_or(Error::NoSecurity)? {
            Security::Insecure => None,
            Security::Tls(tls) => Some(tls),
            Security::CaFile(path) => Some(
                ClientTls::load(&path, None)
                    .map_err(|e| Error::Tls(format!("CA file {}: {e}", path.display())))?,
            ),
        };
        let role = self.role.unwrap_or(Role::Client);
        let mut config = ClientConfig::for_role(role)
            .with_tls(tls)
            .with_request_timeout(self.policy.attempt_timeout);
        if let Some(timeout) = self.connect_timeout {
            config = config.with_connect_timeout(timeout);
        }
        let bearer = Bearer::new(self.token.as_deref()).map_err(|_| Error::InvalidToken)?;
        Ok(Client {
            endpoints: Arc::new(retry::Endpoints::new(
                self.endpoints,
                role,
                config,
                bearer,
                self.policy,
            )),
        })
    }
}

/// A fresh request id: 128 random bits as 32 hex digits.
///
/// # Errors
/// [`Error::Random`] when the OS gives no randomness.
pub fn new_request_id() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| Error::Random(e.to_string()))?;
    Ok(hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_32_hex_digits_and_distinct() {
        let a = new_request_id().expect("random");
        let b = new_request_id().expect("random");
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn a_client_needs_endpoints_and_a_choice_of_security() {
        assert!(matches!(
            Client::builder().insecure().build(),
            Err(Error::NoEndpoints)
        ));
        assert!(matches!(
            Client::builder().endpoints(["127.0.0.1:1"]).build(),
            Err(Error::NoSecurity)
        ));
        assert!(matches!(
            Client::builder()
                .endpoints(["127.0.0.1:1"])
                .insecure()
                .token("bad\ntoken")
                .build(),
            Err(Error::InvalidToken)
        ));
        assert!(matches!(
            Client::builder()
                .endpoints(["127.0.0.1:1"])
                .ca_file("/nonexistent/ca.pem")
                .build(),
            Err(Error::Tls(_))
        ));
    }

    /// Nothing listens: every attempt fails to connect, the client rotates
    /// and gives up at its deadline, naming the last failure.
    #[tokio::test]
    async fn a_call_to_dead_gateways_ends_at_its_deadline() {
        let client = Client::builder()
            .endpoints(["127.0.0.1:9", "127.0.0.1:10"])
            .insecure()
            .deadline(Duration::from_millis(600))
            .backoff(Duration::from_millis(20), Duration::from_millis(100))
            .build()
            .expect("client");
        let started = std::time::Instant::now();
        let err = client.get("t", "a").await.expect_err("nothing listens");
        let took = started.elapsed();
        match err {
            Error::DeadlineExceeded { attempts, .. } => assert!(attempts >= 2, "{attempts}"),
            other => panic!("{other}"),
        }
        assert!(took < Duration::from_secs(3), "{took:?}");
    }

    /// One round (the CLI's policy): each dead gateway is tried once, and
    /// the error keeps every failed attempt with its connect cause, well
    /// before the deadline.
    #[tokio::test]
    async fn one_round_over_dead_gateways_ends_unanswered_naming_each() {
        let client = Client::builder()
            .endpoints(["127.0.0.1:9", "127.0.0.1:10"])
            .insecure()
            .max_rounds(1)
            .deadline(Duration::from_secs(30))
            .build()
            .expect("client");
        let started = std::time::Instant::now();
        let err = client
            .cluster_status(false)
            .await
            .expect_err("nothing listens");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        match err {
            Error::Unanswered {
                attempts, failures, ..
            } => {
                assert_eq!(attempts, 2);
                let tried: Vec<&str> = failures.iter().map(|f| f.endpoint.as_str()).collect();
                assert_eq!(tried, ["127.0.0.1:9", "127.0.0.1:10"]);
                assert!(failures
                    .iter()
                    .all(|f| matches!(f.cause, error::Cause::Connect(_))));
            }
            other => panic!("{other}"),
        }
    }
}

//! The gateways the CLI talks to, through `openshell-client` (its one
//! failover and retry policy: any gateway, leader hints followed, one round
//! over `--endpoints`; request ids on its writes), and the errors a user
//! sees.
//!
//! Every channel speaks TLS verifying the gateway against the CA of
//! `--ca-file`, unless the user chose `--insecure` (plaintext, for a gateway
//! started with `--insecure`). A handshake that fails is one line naming the
//! gateway and the cause ([`CliError::Tls`]), never a transport dump.

use std::time::Duration;

use openshell_client::{Cause, Client, Failure, Role};
use proto::metadata::NO_QUORUM;
use proto::secret::Secret;
use proto::tls::ClientTls;
use tonic::{Code, Status};

use crate::transport;

/// What went wrong, as the user should read it.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// No endpoint answered.
    #[error("no gateway reachable at {0}: start one (`openshell-pool dev`) or pass --endpoints host:port,...")]
    Unreachable(String),
    /// A gateway answered but cannot serve the call: raft stopped for good
    /// (its storage failed), it is shutting down, or the connection broke
    /// mid-call; names the gateway and its words.
    #[error("{0}")]
    Unavailable(String),
    /// The TLS handshake with a gateway failed (unknown CA, wrong name,
    /// a plaintext gateway), or a plaintext call met a TLS gateway.
    #[error("{0}")]
    Tls(String),
    /// Missing or wrong token, or not allowed.
    #[error("unauthorized: {0}; pass --token-file (OPENSHELL_TOKEN_FILE) or --token (changes need the platform_admin role)")]
    Unauthorized(String),
    /// Unknown id.
    #[error("{0}")]
    NotFound(String),
    /// No leader.
    #[error(
        "no leader: {0}; check that a majority of gateways is up (`openshell-pool raft status`)"
    )]
    NoLeader(String),
    /// A leader is known but could not commit the change: no majority of
    /// the voters is reachable (same exit code as no leader).
    #[error("{0}; check that a majority of gateways is up (`openshell-pool raft status`)")]
    NoQuorum(String),
    /// The request was refused.
    #[error("{0}")]
    Refused(String),
    /// A local problem (file, flags).
    #[error("{0}")]
    Local(String),
    /// A flag the command needs is missing (same exit code as clap's usage
    /// errors).
    #[error("{0}")]
    Usage(String),
    /// `raft check`: replicas at the same applied index hold different
    /// states.
    #[error("{0}")]
    ReplicasDiffer(String),
    /// A command run by `sandbox exec` exited non-zero.
    #[error("the command exited with status {0}")]
    ExitStatus(i32),
}

impl CliError {
    /// The process exit code: 1 refused, 2 usage (clap, or neither
    /// `--ca-file` nor `--insecure`), 3 unreachable or TLS failure,
    /// 4 unauthorized, 5 not found, 6 no leader or no quorum, 7 replicas
    /// differ (`raft check`); `sandbox exec` passes the command's own status
    /// through.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Refused(_) | CliError::Local(_) => 1,
            CliError::Usage(_) => 2,
            CliError::Unreachable(_) | CliError::Unavailable(_) | CliError::Tls(_) => 3,
            CliError::Unauthorized(_) => 4,
            CliError::NotFound(_) => 5,
            CliError::NoLeader(_) | CliError::NoQuorum(_) => 6,
            CliError::ReplicasDiffer(_) => 7,
            CliError::ExitStatus(code) => *code,
        }
    }
}

impl From<Status> for CliError {
    fn from(status: Status) -> Self {
        let message = status.message().to_string();
        match status.code() {
            Code::Unauthenticated | Code::PermissionDenied => CliError::Unauthorized(message),
            Code::Unavailable if status.metadata().contains_key(NO_QUORUM) => {
                CliError::NoQuorum(message)
            }
            Code::NotFound => CliError::NotFound(message),
            Code::Unavailable if message.contains("leader") => CliError::NoLeader(message),
            Code::Unavailable => CliError::Unavailable(message),
            _ => CliError::Refused(message),
        }
    }
}

/// The longest one call to a gateway may take (the CLI's request deadline,
/// [`proto::client::ClientConfig::for_role`]`(`[`Role::Cli`]`)`).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The gateways the CLI talks to: `openshell-client` configured for an
/// operator (role [`Role::Cli`], one round over the endpoints, each call
/// bounded by `CALL_TIMEOUT`, 60 s).
#[derive(Clone)]
pub struct Gateway {
    /// host:port of each gateway.
    endpoints: Vec<String>,
    /// Bearer token.
    token: Option<Secret>,
    /// TLS to the gateways (`None`: plaintext, `--insecure`).
    tls: Option<ClientTls>,
    /// The client every command calls through.
    client: Client,
}

impl std::fmt::Debug for Gateway {
    /// The endpoints and the CA file; the token shows as `<redacted>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("endpoints", &self.endpoints)
            .field("token", &self.token)
            .field("tls", &self.tls)
            .finish()
    }
}

impl Gateway {
    /// The gateways at `endpoints` with `token`, over TLS verifying them
    /// against `tls` (`None`: plaintext, `--insecure`).
    ///
    /// # Errors
    /// [`CliError::Usage`] without an endpoint, [`CliError::Local`] for a
    /// token a header cannot carry.
    pub fn new(
        endpoints: Vec<String>,
        token: Option<Secret>,
        tls: Option<ClientTls>,
    ) -> Result<Gateway, CliError> {
        let client = build(&endpoints, &token, tls.as_ref(), CALL_TIMEOUT)?;
        Ok(Gateway {
            endpoints,
            token,
            tls,
            client,
        })
    }

    /// The client every command calls through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A client whose calls may each take `timeout` instead of the CLI's
    /// default (`sandbox exec`: its own timeout plus a margin, so the CLI
    /// never gives up before the command's timeout).
    ///
    /// # Errors
    /// As [`Gateway::new`].
    pub fn client_within(&self, timeout: Duration) -> Result<Client, CliError> {
        build(&self.endpoints, &self.token, self.tls.as_ref(), timeout)
    }

    /// The endpoints the CLI was given, in order.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// A client of `endpoint` alone (no failover: a command that asks each
    /// gateway for its own view), each call bounded by `timeout`.
    ///
    /// # Errors
    /// As [`Gateway::new`].
    pub fn client_of(&self, endpoint: &str, timeout: Duration) -> Result<Client, CliError> {
        build(
            &[endpoint.to_string()],
            &self.token,
            self.tls.as_ref(),
            timeout,
        )
    }

    /// Awaits `call` and maps its error for the user.
    ///
    /// # Errors
    /// What the call failed on ([`Gateway::explain`]).
    pub async fn ask<T>(
        &self,
        call: impl std::future::Future<Output = openshell_client::Result<T>>,
    ) -> Result<T, CliError> {
        call.await.map_err(|e| self.explain(e))
    }

    /// What a failed call means for the user: the answer a gateway gave,
    /// or, when none answered, the most telling failure (a TLS handshake
    /// that failed, or a TLS gateway cut off a plaintext call, names the
    /// gateway and the cause; else the last gateway's status; else "no
    /// gateway reachable").
    pub fn explain(&self, e: openshell_client::Error) -> CliError {
        use openshell_client::Error;
        match e {
            Error::NotFound(m) => CliError::NotFound(m),
            Error::Unauthorized { message, .. } => CliError::Unauthorized(message),
            Error::NoQuorum(m) => CliError::NoQuorum(m),
            Error::AlreadyExists(m) | Error::InvalidArgument(m) => CliError::Refused(m),
            Error::Conflict { message, .. }
            | Error::RequestIdReused { message, .. }
            | Error::Refused { message, .. } => CliError::Refused(message),
            Error::DeadlineExceeded { failures, .. } | Error::Unanswered { failures, .. } => {
                self.unanswered(&failures)
            }
            setup => setup_error(setup),
        }
    }

    /// [`Gateway::explain`] when no gateway answered.
    fn unanswered(&self, failures: &[Failure]) -> CliError {
        let tls = self.tls.as_ref();
        // A TLS failure says more than "unreachable": the first one wins.
        let handshake = failures.iter().find_map(|f| match &f.cause {
            Cause::Connect(e) => Some(transport::connect_error(&f.endpoint, tls, e))
                .filter(|e| matches!(e, CliError::Tls(_))),
            Cause::Status(status) => transport::plaintext_refused(&f.endpoint, tls, status)
                .or_else(|| transport::certificate_refused(&f.endpoint, tls, status)),
            Cause::TimedOut(_) => None,
        });
        if let Some(e) = handshake {
            return e;
        }
        // The last gateway that said why (a leader hint is not a reason).
        let last = failures.iter().rev().find_map(|f| match &f.cause {
            Cause::Status(status) if status.code() != Code::FailedPrecondition => {
                Some(match CliError::from(status.clone()) {
                    CliError::Unavailable(m) => {
                        CliError::Unavailable(format!("gateway {}: {m}", f.endpoint))
                    }
                    other => other,
                })
            }
            Cause::TimedOut(after) => Some(CliError::Refused(format!(
                "gateway {}: no answer within {} s",
                f.endpoint,
                after.as_secs()
            ))),
            _ => None,
        });
        last.unwrap_or_else(|| CliError::Unreachable(unreachable_causes(failures, &self.endpoints)))
    }
}

/// Each endpoint tried and why it could not be reached (the innermost
/// cause: "Connection refused", "connection reset by peer", ...), or the
/// endpoints alone when nothing was tried.
fn unreachable_causes(failures: &[Failure], endpoints: &[String]) -> String {
    let tried: Vec<String> = failures
        .iter()
        .filter_map(|f| match &f.cause {
            Cause::Connect(e) => Some(format!("{} ({})", f.endpoint, innermost(e.as_ref()))),
            _ => None,
        })
        .collect();
    if tried.is_empty() {
        endpoints.join(",")
    } else {
        tried.join(", ")
    }
}

/// The last error of `e`'s source chain, in its own words.
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut error = e;
    while let Some(source) = error.source() {
        error = source;
    }
    proto::text::escaped(&error.to_string()).into_owned()
}

/// The CLI's client of `endpoints`: role [`Role::Cli`], one round over the
/// endpoints, each attempt bounded by `timeout`.
fn build(
    endpoints: &[String],
    token: &Option<Secret>,
    tls: Option<&ClientTls>,
    timeout: Duration,
) -> Result<Client, CliError> {
    let builder = Client::builder()
        .endpoints(endpoints.iter().cloned())
        .role(Role::Cli)
        .token_opt(token.as_ref().map(|t| t.expose().to_string()))
        .max_rounds(1)
        .attempt_timeout(timeout)
        // One round plus a leader hint, each attempt its whole timeout.
        .deadline(
            timeout.saturating_mul(
                u32::try_from(endpoints.len())
                    .unwrap_or(u32::MAX)
                    .saturating_add(2),
            ),
        )
        .backoff(Duration::from_millis(20), Duration::from_millis(100));
    let builder = match tls {
        Some(tls) => builder.tls(tls.clone()),
        None => builder.insecure(),
    };
    builder.build().map_err(setup_error)
}

/// A client that could not be set up, in the flags' words.
fn setup_error(e: openshell_client::Error) -> CliError {
    use openshell_client::Error;
    match e {
        Error::NoEndpoints => CliError::Usage("--endpoints names no gateway".into()),
        Error::NoSecurity => CliError::Usage(transport::NO_SECURITY.into()),
        Error::InvalidToken => {
            CliError::Local("--token holds characters a header cannot carry".into())
        }
        other => CliError::Local(other.to_string()),
    }
}

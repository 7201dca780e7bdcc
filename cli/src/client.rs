//! Connecting to any gateway, transport security, bearer tokens, leader
//! hints, and the errors a user sees.
//!
//! Every channel speaks TLS verifying the gateway against the CA of
//! `--ca-file`, unless the user chose `--insecure` (plaintext, for a gateway
//! started with `--insecure`). A handshake that fails is one line naming the
//! gateway and the cause ([`CliError::Tls`]), never a transport dump.

use std::time::Duration;

use proto::client::{self, ClientConfig, Role};
use proto::metadata::{LEADER_ADDR, NO_QUORUM};
use proto::tls::ClientTls;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::transport;

/// What went wrong, as the user should read it.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// No endpoint answered.
    #[error("no gateway reachable at {0}: start one (`openshell-pool dev`) or pass --endpoints host:port,...")]
    Unreachable(String),
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
    /// A command run by `sandbox exec` exited non-zero.
    #[error("the command exited with status {0}")]
    ExitStatus(i32),
}

impl CliError {
    /// The process exit code: 1 refused, 2 usage (clap, or neither
    /// `--ca-file` nor `--insecure`), 3 unreachable or TLS failure,
    /// 4 unauthorized, 5 not found, 6 no leader or no quorum; `sandbox exec`
    /// passes the command's own status through.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Refused(_) | CliError::Local(_) => 1,
            CliError::Usage(_) => 2,
            CliError::Unreachable(_) | CliError::Tls(_) => 3,
            CliError::Unauthorized(_) => 4,
            CliError::NotFound(_) => 5,
            CliError::NoLeader(_) | CliError::NoQuorum(_) => 6,
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
            Code::Unavailable => CliError::Unreachable(message),
            _ => CliError::Refused(message),
        }
    }
}

/// Adds the bearer token to every call (shared with the client crate).
pub use proto::client::Bearer;

/// An authenticated channel to one gateway.
pub type Authed = InterceptedService<Channel, Bearer>;

/// The gateways the CLI talks to.
#[derive(Clone)]
pub struct Gateway {
    /// host:port of each gateway.
    pub endpoints: Vec<String>,
    /// Bearer token.
    pub token: Option<String>,
    /// TLS to the gateways, verifying them against the CA of `--ca-file`
    /// (`None`: plaintext, `--insecure`).
    pub tls: Option<ClientTls>,
}

impl std::fmt::Debug for Gateway {
    /// The endpoints and the CA file; the token shows as `<redacted>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("endpoints", &self.endpoints)
            .field("token", &proto::secret::redact_opt(&self.token))
            .field("tls", &self.tls)
            .finish()
    }
}

impl Gateway {
    fn bearer(&self) -> Result<Bearer, CliError> {
        Bearer::new(self.token.as_deref())
            .map_err(|_| CliError::Local("--token holds characters a header cannot carry".into()))
    }

    /// An eager channel to `addr` with the CLI's deadlines
    /// ([`ClientConfig::for_role`]`(`[`Role::Cli`]`)`) and its transport
    /// security, the request deadline replaced by `deadline` when given.
    ///
    /// # Errors
    /// [`CliError::Tls`] when the TLS handshake failed (one line naming the
    /// gateway and the cause), else [`CliError::Unreachable`].
    async fn connect(&self, addr: &str, deadline: Option<Duration>) -> Result<Channel, CliError> {
        let mut config = ClientConfig::for_role(Role::Cli).with_tls(self.tls.clone());
        if let Some(deadline) = deadline {
            config = config.with_request_timeout(deadline);
        }
        client::connect(Role::Cli, addr, &config)
            .await
            .map_err(|e| transport::connect_error(addr, self.tls.as_ref(), &e))
    }

    /// A channel to the first endpoint that answers.
    ///
    /// # Errors
    /// [`CliError::Unreachable`] when none does.
    pub async fn channel(&self) -> Result<InterceptedService<Channel, Bearer>, CliError> {
        let mut tls_error = None;
        for addr in &self.endpoints {
            match self.connect(addr, None).await {
                Ok(channel) => return Ok(InterceptedService::new(channel, self.bearer()?)),
                Err(e @ CliError::Tls(_)) => tls_error = tls_error.or(Some(e)),
                Err(_) => {}
            }
        }
        Err(tls_error.unwrap_or_else(|| CliError::Unreachable(self.endpoints.join(","))))
    }

    /// Runs `call` on the first gateway that answers. A gateway that
    /// answers "not the leader" with a hint is followed to the leader once; a
    /// gateway that is up but has no leader (cut off, or removed from the
    /// cluster) is skipped for the next endpoint.
    ///
    /// # Errors
    /// The last error, mapped for the user.
    pub async fn call<T, F, Fut>(&self, call: F) -> Result<T, CliError>
    where
        F: Fn(Authed) -> Fut,
        Fut: std::future::Future<Output = Result<T, Status>>,
    {
        self.call_within(None, call).await
    }

    /// [`Gateway::call`] with a request deadline of `deadline` instead of
    /// the CLI's default (`sandbox exec`: its own timeout plus a margin, so
    /// the CLI never gives up before the command's timeout).
    ///
    /// # Errors
    /// The last error, mapped for the user.
    pub async fn call_within<T, F, Fut>(
        &self,
        deadline: Option<Duration>,
        call: F,
    ) -> Result<T, CliError>
    where
        F: Fn(Authed) -> Fut,
        Fut: std::future::Future<Output = Result<T, Status>>,
    {
        let mut last: Option<CliError> = None;
        // A TLS failure says more than "unreachable": it wins at the end.
        let mut tls_error: Option<CliError> = None;
        for addr in &self.endpoints {
            let channel = match self.connect(addr, deadline).await {
                Ok(channel) => channel,
                Err(e @ CliError::Tls(_)) => {
                    tls_error = tls_error.or(Some(e));
                    continue;
                }
                Err(_) => continue,
            };
            let status = match call(InterceptedService::new(channel, self.bearer()?)).await {
                Ok(v) => return Ok(v),
                Err(status) => status,
            };
            // The connection broke before any answer: with --insecure, most
            // likely a TLS gateway.
            if let Some(e) = transport::plaintext_refused(addr, self.tls.as_ref(), &status) {
                tls_error = tls_error.or(Some(e));
                continue;
            }
            match status.code() {
                Code::FailedPrecondition => {
                    let hint = status
                        .metadata()
                        .get(LEADER_ADDR)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    let Some(leader) = hint else {
                        return Err(status.into());
                    };
                    match self.connect(&leader, deadline).await {
                        Ok(channel) => {
                            return Ok(call(InterceptedService::new(channel, self.bearer()?)).await?)
                        }
                        Err(e) => last = Some(e),
                    }
                }
                // No quorum: every gateway would reach the same leader.
                _ if status.metadata().contains_key(NO_QUORUM) => return Err(status.into()),
                Code::Unavailable => last = Some(status.into()),
                _ => return Err(status.into()),
            }
        }
        Err(tls_error
            .or(last)
            .unwrap_or_else(|| CliError::Unreachable(self.endpoints.join(","))))
    }
}

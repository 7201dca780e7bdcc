//! The supervision hub of one gateway: the [`Hub`] type that the supervisor
//! host service, the HTTP endpoints and the background tasks share, the pool
//! timing it runs on ([`PoolSettings`]), and its proposal path. Each concern
//! lives in its own module:
//!
//! - [`streams`]: the registry of attached supervisor streams (attach,
//!   detach, is_current, touch).
//! - [`heartbeats`]: the one heartbeat batch proposed per tick interval.
//! - [`snapshots`]: pushing assignment snapshots to attached streams (what
//!   each incarnation may see is decided by `pool::visibility`).
//! - [`leader`]: the leader-only pool coordinator loop.
//! - [`leave`]: a stopping supervisor's own drain (`HostStatus.stopping`)
//!   and leave (`HostLeave`).
//! - [`exec`]: exec over an attached supervisor's own stream (the pending
//!   calls of each stream; gateways never dial supervisors).
//!
//! Liveness without clocks: a supervisor sends `HostStatus` every
//! `status_interval`; once per tick interval the hub proposes ONE `Heartbeat`
//! command naming every member whose status arrived recently. Freshness is
//! then judged in ticks inside apply; no wall clock crosses machines.

use std::sync::Arc;
use std::time::Duration;

use pool::Command;
use proto::grant::GrantSigner;
use raft_store::RaftNode;
use tonic::Status;

use crate::metrics::Metrics;
use crate::state::GatewayState;

pub mod exec;
pub mod heartbeats;
pub mod leader;
pub mod leave;
pub mod snapshots;
pub mod streams;

use streams::Streams;

/// Pool timing, from `[openshell.gateway.supervisor_pool]`.
#[derive(Clone, PartialEq, Eq)]
pub struct PoolSettings {
    /// The leader appends a `Tick` this often (its monotonic clock).
    pub tick_interval: Duration,
    /// A member expires after this many ticks without a heartbeat.
    pub heartbeat_ttl_ticks: u64,
    /// A recovering sandbox fails after this many ticks without an owner.
    pub recovery_deadline_ticks: u64,
    /// A maintenance operation fails after this many ticks.
    pub operation_deadline_ticks: u64,
    /// Finished pool records are garbage-collected this many ticks after
    /// they finished (`retention_ticks`).
    pub retention_ticks: u64,
    /// Supervisors send `HostStatus` this often.
    pub status_interval: Duration,
    /// DEPRECATED shared credential: any supervisor holding it may join as
    /// any member id not listed in `member_credentials` (None: none).
    pub supervisor_token: Option<String>,
    /// The credential of each member id (`member_credentials_file`): a
    /// listed member must present its own; re-read on change.
    pub member_credentials: Option<crate::member_credentials::MemberCredentialsFile>,
    /// `--member-identity kubernetes`: members not in the file prove their
    /// Pod name by TokenReview ([`crate::member_identity`]).
    pub member_identity: Option<std::sync::Arc<crate::member_identity::KubernetesIdentity>>,
}

impl std::fmt::Debug for PoolSettings {
    /// Prints every field but the secrets, which show as `<redacted>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolSettings")
            .field("tick_interval", &self.tick_interval)
            .field("heartbeat_ttl_ticks", &self.heartbeat_ttl_ticks)
            .field("recovery_deadline_ticks", &self.recovery_deadline_ticks)
            .field("operation_deadline_ticks", &self.operation_deadline_ticks)
            .field("retention_ticks", &self.retention_ticks)
            .field("status_interval", &self.status_interval)
            .field(
                "supervisor_token",
                &proto::secret::redact_opt(&self.supervisor_token),
            )
            .field("member_credentials", &self.member_credentials)
            .field("member_identity", &self.member_identity)
            .finish()
    }
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            tick_interval: Duration::from_millis(250),
            heartbeat_ttl_ticks: 8,
            recovery_deadline_ticks: 240,
            operation_deadline_ticks: 2400,
            retention_ticks: pool::DEFAULT_RETENTION_TICKS,
            status_interval: Duration::from_millis(250),
            supervisor_token: None,
            member_credentials: None,
            member_identity: None,
        }
    }
}

impl PoolSettings {
    /// The pool config these settings ask for.
    pub fn pool_config(&self) -> pool::Configure {
        pool::Configure {
            heartbeat_ttl_ticks: self.heartbeat_ttl_ticks,
            recovery_deadline_ticks: self.recovery_deadline_ticks,
            operation_deadline_ticks: self.operation_deadline_ticks,
            retention_ticks: self.retention_ticks,
        }
    }
}

/// The hub. Shared by the supervisor host service and the background tasks
/// ([`Hub::run_heartbeats`], [`Hub::run_snapshot_pusher`],
/// [`Hub::run_coordinator`]).
pub struct Hub {
    /// The raft node whose state the hub reads and proposes to.
    node: RaftNode<GatewayState>,
    /// Pool timing and the supervisor credential.
    settings: PoolSettings,
    /// Signs the grant of every pushed assignment.
    signer: GrantSigner,
    /// The gateway's metrics.
    metrics: Metrics,
    /// The attached supervisor streams.
    streams: Streams,
}

impl Hub {
    /// A hub for `node`, signing grants with `signer`.
    pub fn new(
        node: RaftNode<GatewayState>,
        settings: PoolSettings,
        signer: GrantSigner,
        metrics: Metrics,
    ) -> Arc<Self> {
        Arc::new(Hub {
            node,
            settings,
            signer,
            metrics,
            streams: Streams::default(),
        })
    }

    /// The node.
    pub fn node(&self) -> &RaftNode<GatewayState> {
        &self.node
    }

    /// The settings.
    pub fn settings(&self) -> &PoolSettings {
        &self.settings
    }

    /// The grant signer (its public key goes to supervisors).
    pub fn signer(&self) -> &GrantSigner {
        &self.signer
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Whether `command` would change nothing in this node's applied state
    /// (so far: an `Acknowledge` of a term already acknowledged,
    /// [`pool::PoolState::already_acknowledged`]); such a command is not
    /// written. Supervisors resend the acks a snapshot still shows
    /// unacknowledged, so a burst of assignments would otherwise cost one
    /// raft write per ack per snapshot.
    pub fn already_applied(&self, command: &Command) -> bool {
        match command {
            Command::Acknowledge(c) => self
                .node
                .read_local(|state, _| state.pool.already_acknowledged(c)),
            _ => false,
        }
    }

    /// Proposes a pool command; returns its outcome.
    ///
    /// # Errors
    /// The write error mapped to a status.
    pub async fn propose(&self, command: &Command) -> Result<pool::Outcome, Status> {
        Ok(self.propose_with_id(command, "").await?.0)
    }

    /// Proposes a pool command carrying the client request id `request_id`
    /// (empty: none; see [`crate::requests`]) and returns its outcome and
    /// whether it is replayed: a retry of an applied id gets the first
    /// attempt's outcome. A command with an id is resent across a leader
    /// change (it cannot apply twice).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` naming `request_id` for a malformed id; the write
    /// error mapped to a status.
    pub async fn propose_with_id(
        &self,
        command: &Command,
        request_id: &str,
    ) -> Result<(pool::Outcome, bool), Status> {
        crate::requests::check_request_id(request_id).map_err(Status::invalid_argument)?;
        let bytes = GatewayState::pool_command_with_id(command, request_id);
        let applied = if request_id.is_empty() {
            self.node.write(bytes).await
        } else {
            let timeout = self.node.config().write_timeout;
            self.node.write_idempotent(bytes, timeout).await
        }
        .map_err(crate::status::write)?;
        let replayed = GatewayState::replayed(&applied.response).map_err(Status::internal)?;
        let outcome = GatewayState::pool_outcome(&applied.response).map_err(Status::internal)?;
        Ok((outcome, replayed.is_some()))
    }
}

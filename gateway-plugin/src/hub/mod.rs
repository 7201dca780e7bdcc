//! The supervision hub of one gateway: the [`Hub`] type that the supervisor
//! host service, the HTTP endpoints and the background tasks share, and its
//! proposal path; the pool timing it runs on is [`PoolSettings`]
//! (`config_pool.rs`). Each concern
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

use pool::Command;
use proto::grant::GrantSigner;
use raft_store::RaftNode;
use tonic::Status;

use crate::config_pool::PoolSettings;
use crate::metrics::Metrics;
use crate::state::{GatewayState, Replied, Reply};

pub mod exec;
pub mod heartbeats;
pub mod leader;
pub mod leave;
pub mod proposals;
pub mod snapshots;
pub mod streams;

use streams::Streams;

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
    /// Whether this gateway's heartbeat batches are written and applied
    /// here: see [`heartbeats`].
    beats: std::sync::Mutex<heartbeats::BeatsHealth>,
    /// A pass left a planned view unsent (a full stream channel): the next
    /// applied batch plans again even if nothing changed.
    push_again: std::sync::atomic::AtomicBool,
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
            beats: std::sync::Mutex::new(heartbeats::BeatsHealth::new()),
            push_again: std::sync::atomic::AtomicBool::new(false),
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

    /// Proposes a command that a leader-side actor of raft `term` planned
    /// (the coordinator, the launcher): stamped with `term` (`pool::fence`:
    /// apply refuses it once another leader's term is applied) and proposed
    /// through this node's own raft only, never forwarded: a node that no
    /// longer leads `term` proposes nothing.
    ///
    /// # Errors
    /// [`raft_store::Leading`]: not leading `term`, or the outcome unknown.
    pub async fn propose_as_leader(
        &self,
        term: u64,
        command: Command,
    ) -> Result<pool::Outcome, raft_store::Leading> {
        let bytes = GatewayState::pool_command(&command.planned_in(term));
        let applied = self.node.propose_as_leader(term, bytes).await?;
        GatewayState::pool_outcome(&applied.response).map_err(raft_store::Leading::Failed)
    }

    /// Proposes the pool commands of one coordinator step as the leader of
    /// raft `term`, in order, sharing log entries
    /// ([`RaftNode::propose_all_as_leader`]): the takeovers of a dead
    /// member owning hundreds of sandboxes commit in one or two entries,
    /// not one round trip each. Each command still carries its term and
    /// preconditions, so apply judges each on its own.
    ///
    /// # Errors
    /// [`raft_store::Leading`]: not leading `term` (nothing proposed).
    pub async fn propose_all_as_leader(
        &self,
        term: u64,
        commands: Vec<Command>,
    ) -> Result<Vec<Result<pool::Outcome, raft_store::Leading>>, raft_store::Leading> {
        let bytes = commands
            .into_iter()
            .map(|command| GatewayState::pool_command(&command.planned_in(term)))
            .collect();
        let applied = self.node.propose_all_as_leader(term, bytes).await?;
        Ok(applied
            .into_iter()
            .map(|outcome| {
                outcome.and_then(|applied| {
                    GatewayState::pool_outcome(&applied.response)
                        .map_err(raft_store::Leading::Failed)
                })
            })
            .collect())
    }

    /// Proposes a pool command; returns its outcome.
    ///
    /// # Errors
    /// The write error mapped to a status.
    pub async fn propose(&self, command: &Command) -> Result<pool::Outcome, Status> {
        Ok(self.propose_with_id(command, "", &[]).await?.0)
    }

    /// Proposes a pool command carrying the client request id `request_id`
    /// (empty: none; see [`crate::requests`]) and the fingerprint of the
    /// client's request it was made from, and returns its outcome and
    /// whether it is replayed: a retry of an applied id gets the first
    /// attempt's outcome. A command with an id is resent across a leader
    /// change (it cannot apply twice).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` naming `request_id` for a malformed id;
    /// `FAILED_PRECONDITION` ([`crate::status::request_id_reused`]) when the
    /// id was used for another write; the write error mapped to a status.
    pub async fn propose_with_id(
        &self,
        command: &Command,
        request_id: &str,
        fingerprint: &[u8],
    ) -> Result<(pool::Outcome, bool), Status> {
        crate::requests::check_request_id(request_id).map_err(Status::invalid_argument)?;
        let bytes = GatewayState::pool_command_with_id(command, request_id, fingerprint);
        let applied = if request_id.is_empty() {
            self.node.write(bytes).await
        } else {
            let timeout = self.node.config().write_timeout;
            self.node.write_idempotent(bytes, timeout).await
        }
        .map_err(crate::status::write)?;
        let Replied { reply, replayed } =
            GatewayState::reply(&applied.response).map_err(Status::internal)?;
        match (reply, replayed) {
            (Reply::RequestIdReused { first }, _) => {
                Err(crate::status::request_id_reused(request_id, first))
            }
            (Reply::Pool(outcome), replayed) => Ok((outcome, replayed.is_some())),
            // A record from before fingerprints, of an object-store write:
            // the id was reused all the same.
            (Reply::Objects(_), Some(first)) => {
                Err(crate::status::request_id_reused(request_id, first))
            }
            (Reply::Objects(_), None) => Err(Status::internal(
                "a pool write answered with an object-store result",
            )),
        }
    }
}

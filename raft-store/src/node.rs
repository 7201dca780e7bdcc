//! [`RaftNode`]: one replica of the gateway raft group, the API a gateway
//! embeds. It wires the pieces below it and owns the two retry loops:
//!
//! - Writes are accepted on every node: the leader proposes through the
//!   [`crate::batcher`]; a follower forwards to the leader (one hop,
//!   [`crate::network::client`]) and retries across an election within
//!   [`NodeConfig::write_timeout`], retrying only when the write certainly was
//!   not appended. A forward follows leadership: it is abandoned as soon as
//!   this node's raft metrics show another leader or a newer term, and its
//!   unknown outcome is reported, or, for an idempotent command
//!   ([`Resend::Idempotent`], e.g. a heartbeat), the command is sent again
//!   to the new leader. The write path lives in the child module `write`
//!   (`node/write.rs`).
//! - Linearizable reads on every node through read-index: the leader confirms
//!   its leadership with a quorum and names its commit index; the reading node
//!   waits until it applied that index, then reads locally. A follower asks
//!   the leader in short attempts (two election timeouts, at least 1 s) and
//!   abandons an attempt as soon as its raft metrics show another leader or
//!   a newer term, so a read does not wait out a leader that was paused,
//!   killed or cut off; the attempts are bounded by the read's deadline.
//! - Membership administration ([`crate::membership`]) and leadership
//!   transfer ([`crate::leadership`]) run on the leader; elsewhere they return
//!   [`AdminError::NotLeader`] with the leader's address.
//!
//! Nothing below imports this module: the transport service
//! ([`crate::network::server`]) is built from the raft handle, the peer
//! authenticator, the proposer and the election hold.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::RaftError;
use proto::raft::raft_transport_server::RaftTransportServer;
use tokio::time::Instant;

use crate::batcher::Proposer;
use crate::campaign::Campaigns;
use crate::db::DataDir;
use crate::error::{AdminError, Error, ReadError, Result};
use crate::leadership::{ElectionHold, LeaderTransfer};
use crate::log_store::LogStore;
use crate::membership::{self, MembershipAdmin};
use crate::network::client::Channels;
use crate::network::forward_batch::{ForwardBatcher, ForwardStats};
use crate::network::peer::NetworkFactory;
use crate::network::server::{PeerAuthenticator, TransportService};
use crate::state_machine::{Applied as AppliedState, StateMachine, StateMachineStore};
use crate::store::{NodeLog, NodeMachine, Stores, StoresOf};
use crate::types::typ::Raft;
use crate::types::NodeId;

mod leading;
mod state_digest;
mod status;
mod write;

pub use leading::Leading;
pub use status::{ClusterStatus, NodeStatus};

// The types of this API that now live below it keep their `node::` paths.
pub use crate::batcher::Proposed;
pub use crate::config::NodeConfig;
pub use crate::membership::MembershipChange;
pub use crate::types::Applied;
pub use write::Resend;

struct Inner<SM: StateMachine> {
    config: NodeConfig,
    raft: Raft,
    /// Local proposals (this node's writes and forwarded ones), batched.
    proposer: Proposer,
    /// The log and the applied state, whatever stores they are.
    stores: Box<dyn Stores<SM>>,
    /// Channels to peers: forwarding, remote read-index, transfer calls.
    channels: Channels,
    /// Forwarded writes, batched per leader.
    forwards: ForwardBatcher,
    /// This node's election timer hold (served to a transfer run elsewhere).
    hold: ElectionHold,
    /// The elections openraft leaves for later (shared with the transport).
    campaigns: Campaigns,
    /// Membership administration through this node's raft.
    admin: MembershipAdmin,
    /// Leadership transfer away from this node.
    transfer: LeaderTransfer,
}

/// One replica of the raft group. Cloning shares it.
///
/// It runs on sled and snapshot files ([`RaftNode::start`]) unless started
/// on other storage ([`RaftNode::start_on`], the simulation's in-memory
/// stores); either way it is one type.
pub struct RaftNode<SM: StateMachine> {
    inner: Arc<Inner<SM>>,
}

impl<SM: StateMachine> Clone for RaftNode<SM> {
    fn clone(&self) -> Self {
        RaftNode {
            inner: self.inner.clone(),
        }
    }
}

/// Opens the log and the state machine of a data directory (blocking).
fn open_storage<SM: StateMachine>(
    config: &NodeConfig,
) -> Result<(LogStore, StateMachineStore<SM>)> {
    // A directory another process holds is refused before anything in it is
    // touched (opening the snapshots removes temporary files).
    crate::db::refuse_if_in_use(&config.data_dir)?;
    // A damaged snapshot is refused before the database is opened
    // (opening sled may rewrite its files).
    let snapshots_first = config.data_dir.join("snapshots").is_dir();
    let early = if snapshots_first {
        Some(StateMachineStore::<SM>::open(&config.data_dir)?)
    } else {
        None
    };
    let dir = DataDir::open(
        &config.data_dir,
        &config.cluster_id,
        config.node_id,
        config.cache_capacity,
    )?;
    dir.durability.observe_with(config.observer.clone());
    let log = LogStore::new(&dir)
        .map_err(|e| Error::DataDir {
            path: config.data_dir.join("raft"),
            problem: format!("log metadata cannot be read ({e}); refusing to start"),
        })?
        .with_sync(config.log_sync);
    // A restarted leader must win an election again (see the method).
    log.forget_leadership(config.node_id)
        .map_err(|e| Error::DataDir {
            path: config.data_dir.join("raft"),
            problem: format!("the vote cannot be rewritten ({e}); refusing to start"),
        })?;
    let state_machine = match early {
        Some(sm) => sm,
        None => StateMachineStore::<SM>::open(&config.data_dir)?,
    }
    .with_observer(config.observer.clone());
    Ok((log, state_machine))
}

impl<SM: StateMachine> RaftNode<SM> {
    /// Opens the data directory and starts raft. Serve
    /// [`RaftNode::transport_service`] on the advertised address next.
    ///
    /// # Errors
    /// [`Error::Config`] for invalid settings, [`Error::DataDir`] for a data
    /// directory that is damaged or belongs to another cluster or node.
    pub async fn start(config: NodeConfig) -> Result<Self> {
        // Checked before the data directory is touched.
        config.raft_config()?;
        let open_config = config.clone();
        let (log, state_machine) =
            tokio::task::spawn_blocking(move || open_storage::<SM>(&open_config))
                .await
                .map_err(|e| Error::Raft(format!("start-up task failed: {e}")))??;
        Self::start_on(config, log, state_machine, None).await
    }
}

impl<SM: StateMachine> RaftNode<SM> {
    /// Starts raft over `log` and `state_machine`, already opened, dialling
    /// peers through `dialer` (`None`: TCP, with `config.peer_tls`). The
    /// deterministic simulation starts its nodes here, over in-memory
    /// storage and its simulated network; [`RaftNode::start`] opens sled.
    ///
    /// # Errors
    /// [`Error::Config`] for invalid settings; [`Error::Raft`] when raft
    /// cannot start over the storage.
    pub async fn start_on<L: NodeLog, M: NodeMachine<SM>>(
        config: NodeConfig,
        log: L,
        state_machine: M,
        dialer: Option<proto::client::Dialer>,
    ) -> Result<Self> {
        let raft_config = Arc::new(config.raft_config()?);
        let mut channels = Channels::new(&config.cluster_id, config.peer_tls.clone())
            .with_max_message_bytes(config.max_message_bytes);
        if let Some(dialer) = dialer {
            channels = channels.with_dialer(dialer);
        }
        let raft = Raft::new(
            config.node_id,
            raft_config,
            NetworkFactory::new(channels.clone()),
            log.clone(),
            state_machine.clone(),
        )
        .await
        .map_err(|e| Error::Raft(e.to_string()))?;
        tracing::info!(node = config.node_id, addr = %config.advertise_addr, dir = %config.data_dir.display(), "raft node started");
        let proposer = Proposer::start(raft.clone(), config.observer.clone());
        // Ends when raft stops (its metrics channel closes).
        tokio::spawn(crate::observe::watch_leader(
            raft.clone(),
            config.observer.clone(),
        ));
        state_digest::start_periodic(&state_machine, &config);
        let hold = ElectionHold::new();
        let campaigns = Campaigns::new(
            raft.clone(),
            config.node_id,
            hold.clone(),
            config.heartbeat_interval,
            config.election_timeout_min,
            config.election_timeout_max,
        );
        campaigns.start_timer();
        let admin = MembershipAdmin {
            raft: raft.clone(),
            me: config.node_id,
            write_timeout: config.write_timeout,
            retry_pause: config.retry_pause(),
            channels: channels.clone(),
            election_timeout_max: config.election_timeout_max,
        };
        let transfer = LeaderTransfer {
            raft: raft.clone(),
            me: config.node_id,
            channels: channels.clone(),
            proposer: proposer.clone(),
            hold: hold.clone(),
            election_timeout_max: config.election_timeout_max,
            write_timeout: config.write_timeout,
        };
        Ok(RaftNode {
            inner: Arc::new(Inner {
                config,
                raft,
                proposer,
                stores: Box::new(StoresOf {
                    log,
                    machine: state_machine,
                }),
                channels,
                forwards: ForwardBatcher::default(),
                hold,
                campaigns,
                admin,
                transfer,
            }),
        })
    }

    /// The gRPC raft transport of this node, to serve on its address.
    pub fn transport_service(&self) -> RaftTransportServer<TransportService<SM>> {
        let config = &self.inner.config;
        let service = TransportService::new(
            self.inner.raft.clone(),
            PeerAuthenticator::new(&config.cluster_id),
            self.inner.proposer.clone(),
            self.inner.hold.clone(),
            self.inner.campaigns.clone(),
        )
        .with_max_snapshot_bytes(config.max_snapshot_bytes);
        RaftTransportServer::new(service)
            .max_decoding_message_size(config.max_message_bytes)
            .max_encoding_message_size(config.max_message_bytes)
    }

    /// How a call to a peer's membership address (its peer port) connects:
    /// `role`'s defaults with this node's peer TLS.
    pub fn peer_client_config(&self, role: proto::client::Role) -> proto::client::ClientConfig {
        self.inner.channels.client_config(role)
    }

    /// Forward calls and forwarded writes this node sent to leaders since it
    /// started (with follower-side batching, fewer calls than writes).
    pub fn forward_stats(&self) -> ForwardStats {
        self.inner.forwards.stats().clone()
    }

    /// Proposals waiting for this node's write batcher (its own writes and
    /// those forwarded to it while it leads), out of
    /// [`crate::batcher::QUEUE_DEPTH`].
    pub fn proposals_queued(&self) -> usize {
        self.inner.proposer.queued()
    }

    /// The openraft handle.
    pub fn raft(&self) -> &Raft {
        &self.inner.raft
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.inner.config.node_id
    }

    /// This node's configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.inner.config
    }

    /// The cluster id.
    pub fn cluster_id(&self) -> &str {
        &self.inner.config.cluster_id
    }

    /// The leader this node knows of, with its address.
    pub fn leader(&self) -> Option<(NodeId, String)> {
        membership::leader(&self.inner.raft)
    }

    /// Whether this node is the leader.
    pub fn is_leader(&self) -> bool {
        self.inner.raft.metrics().borrow().current_leader == Some(self.id())
    }

    /// Runs `f` on this node's applied state (no consistency guarantee beyond
    /// "some applied prefix of the log"); see [`RaftNode::read_index`].
    pub fn read_local<T>(&self, f: impl FnOnce(&SM, u64) -> T) -> T {
        self.read_applied(|a: &AppliedState<SM>| {
            f(&a.machine, a.last_applied.map(|l| l.index).unwrap_or(0))
        })
    }

    /// Proposes `command` through this node's raft, batched with other
    /// proposals queued at the same time. Fails with [`Proposed::NotLeader`]
    /// (certainly not applied) when this node is not the leader.
    pub async fn propose_local(&self, command: Vec<u8>) -> Result<Applied, Proposed> {
        self.inner.proposer.propose(command).await
    }

    /// Pause between retries: a fraction of the election timeout.
    fn retry_pause(&self) -> Duration {
        self.inner.config.retry_pause()
    }

    /// Returns an index such that every write acknowledged before the call is
    /// at or below it, after this node applied up to it (read-index).
    ///
    /// # Errors
    /// [`ReadError::NoLeader`] when no leader confirmed within the write
    /// timeout; [`ReadError::Timeout`] when this node could not catch up.
    pub async fn read_index(&self) -> Result<u64, ReadError> {
        let deadline = Instant::now() + self.inner.config.write_timeout;
        let index = self.leader_read_index(deadline).await?;
        let remaining = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        self.inner
            .raft
            .wait(Some(remaining))
            .applied_index_at_least(Some(index), "read-index")
            .await
            .map_err(|_| ReadError::Timeout { read_index: index })?;
        Ok(index)
    }

    /// The leader's read index (its commit index, confirmed by a quorum),
    /// asked of the leader, without waiting for this node to apply up to
    /// it: how far behind this node is. Retries until `deadline`.
    ///
    /// # Errors
    /// [`ReadError::NoLeader`] when no leader answered by `deadline`;
    /// [`ReadError::Fatal`] when raft stopped.
    pub async fn leader_read_index(&self, deadline: Instant) -> Result<u64, ReadError> {
        let started = Instant::now();
        loop {
            let index = if self.is_leader() {
                // A leader cut off from its quorum cannot confirm its
                // leadership; never wait for it past the deadline.
                let remaining = deadline.saturating_duration_since(Instant::now());
                match tokio::time::timeout(remaining, self.inner.raft.get_read_log_id()).await {
                    Ok(Ok((read, _))) => Some(read.map(|l| l.index).unwrap_or(0)),
                    Ok(Err(RaftError::APIError(_))) | Err(_) => None,
                    Ok(Err(RaftError::Fatal(e))) => return Err(ReadError::Fatal(e.to_string())),
                }
            } else if let Some((leader, addr)) = self.leader() {
                self.remote_read_index(leader, &addr, deadline).await
            } else {
                None
            };
            if let Some(index) = index {
                return Ok(index);
            }
            if Instant::now() >= deadline {
                return Err(ReadError::NoLeader {
                    waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                });
            }
            tokio::time::sleep(self.retry_pause()).await;
        }
    }

    /// One attempt to get `leader`'s read index: at most
    /// [`read_index_attempt`] (and never past `deadline`), abandoned as soon
    /// as this node's raft metrics show another leader or a newer term. A
    /// leader that was paused, killed or cut off would otherwise hold the
    /// read until the caller's deadline although a new leader was elected
    /// meanwhile. `None`: ask again (a read index may be asked any number of
    /// times).
    async fn remote_read_index(
        &self,
        leader: NodeId,
        addr: &str,
        deadline: Instant,
    ) -> Option<u64> {
        let attempt = deadline.min(Instant::now() + read_index_attempt(&self.inner.config));
        let mut metrics = self.inner.raft.metrics();
        let term = metrics.borrow_and_update().current_term;
        let moved = |m: &openraft::RaftMetrics<NodeId, openraft::BasicNode>| {
            m.current_term != term || m.current_leader.is_some_and(|l| l != leader)
        };
        let leadership_moved = async {
            loop {
                if metrics.changed().await.is_err() {
                    // Raft stopped: let the call end on its own.
                    std::future::pending::<()>().await;
                }
                if moved(&metrics.borrow_and_update()) {
                    return;
                }
            }
        };
        tokio::select! {
            biased;
            index = self.inner.channels.read_index(leader, addr, attempt) => index,
            () = leadership_moved => {
                tracing::debug!(leader, term, "read-index abandoned: leadership moved");
                None
            }
        }
    }

    /// Why this node's raft stopped for good (a storage error such as a
    /// full disk, or a broken invariant), if it did. Such a node no longer
    /// takes part in the cluster and only a restart can bring it back: the
    /// gateway's liveness probe fails on it.
    pub fn fatal_error(&self) -> Option<String> {
        match &self.inner.raft.metrics().borrow().running_state {
            Ok(()) => None,
            Err(fatal) => Some(fatal.to_string()),
        }
    }

    /// A linearizable read: read-index, then `f` on the applied state.
    pub async fn read<T>(&self, f: impl FnOnce(&SM, u64) -> T) -> Result<T, ReadError> {
        self.read_index().await?;
        Ok(self.read_local(f))
    }

    /// Bootstraps a new cluster whose voters are `voters` (id, address).
    /// Calling it again with the same voters is a no-op.
    pub async fn initialize(
        &self,
        voters: Vec<(NodeId, String)>,
    ) -> Result<MembershipChange, AdminError> {
        self.inner.admin.initialize(voters).await
    }

    /// Adds a learner. With `blocking`, returns once it caught up with the
    /// leader; otherwise returns at once with its replication progress.
    pub async fn add_learner(
        &self,
        id: NodeId,
        addr: &str,
        blocking: bool,
    ) -> Result<MembershipChange, AdminError> {
        self.inner.admin.add_learner(id, addr, blocking).await
    }

    /// Promotes a learner to voter; unless `force`, only one that
    /// acknowledged the leader's appends recently (see
    /// [`crate::membership`]).
    pub async fn promote(&self, id: NodeId, force: bool) -> Result<MembershipChange, AdminError> {
        self.inner.admin.promote(id, force).await
    }

    /// Removes a voter or a learner from the cluster.
    pub async fn remove(&self, id: NodeId) -> Result<MembershipChange, AdminError> {
        self.inner.admin.remove(id).await
    }

    /// Turns voter `id` into a learner: it stops voting but keeps receiving
    /// the log, so it sees the change itself (a removal it would never
    /// see). Remove it next with [`RaftNode::remove`].
    pub async fn demote(&self, id: NodeId) -> Result<MembershipChange, AdminError> {
        self.inner.admin.demote(id).await
    }

    /// Asks `addr` once which node of this cluster answers there (the
    /// `Identify` check of add-learner, without adding anything).
    ///
    /// # Errors
    /// [`AdminError::Refused`] when nothing of this cluster answers;
    /// [`AdminError::InvalidArgument`] for an address that is not one.
    pub async fn identify(&self, addr: &str) -> Result<NodeId, AdminError> {
        self.inner.admin.identify_once(addr).await
    }

    /// Finishes a membership change left half-done (a joint configuration
    /// nobody drives any more) by proposing its target voters alone, within
    /// the write timeout; nothing when there is none. Leader only.
    ///
    /// # Errors
    /// [`AdminError::NotLeader`] off the leader; [`AdminError::NoQuorum`]
    /// when it cannot commit in time (it goes on in the background).
    pub async fn finish_membership_change(&self) -> Result<(), AdminError> {
        let deadline = Instant::now() + self.inner.admin.write_timeout;
        self.inner.admin.finish_unfinished(deadline).await
    }

    /// Holds this node's election timer for `hold` (part of a leadership
    /// transfer run by another node).
    pub fn hold_election(&self, hold: Duration) {
        self.inner.hold.hold(hold);
    }

    /// Moves leadership to `to` (or, with `None`, to the most caught-up other
    /// voter). Runs on the leader; see [`crate::leadership`] for how.
    pub async fn transfer_leader(&self, to: Option<NodeId>) -> Result<(NodeId, u64), AdminError> {
        self.inner.transfer.transfer(to).await
    }

    /// Builds a snapshot now; returns its last included index.
    pub async fn trigger_snapshot(&self) -> Result<u64, AdminError> {
        let applied = self
            .inner
            .raft
            .metrics()
            .borrow()
            .last_applied
            .map(|l| l.index)
            .unwrap_or(0);
        self.inner
            .raft
            .trigger()
            .snapshot()
            .await
            .map_err(|e| AdminError::Failed(e.to_string()))?;
        let metrics = self
            .inner
            .raft
            .wait(Some(Duration::from_secs(30)))
            .metrics(
                |m| m.snapshot.map(|s| s.index).unwrap_or(0) >= applied,
                "snapshot built",
            )
            .await
            .map_err(|_| AdminError::Timeout("snapshot was not built within 30 s".into()))?;
        Ok(metrics.snapshot.map(|s| s.index).unwrap_or(0))
    }

    /// A consistent backup: after read-index, the applied state's snapshot
    /// encoding with the (term, index) it reflects.
    ///
    /// # Errors
    /// [`ReadError`] when no leader confirms a read index.
    pub async fn backup(&self) -> Result<(u64, u64, Vec<u8>), ReadError> {
        self.read_index().await?;
        Ok(self.read_applied(|a| {
            let (term, index) = a
                .last_applied
                .map(|l| (l.leader_id.term, l.index))
                .unwrap_or((0, 0));
            (term, index, a.machine.snapshot())
        }))
    }

    /// Runs `f` on this node's applied state.
    pub(crate) fn read_applied<T>(&self, f: impl FnOnce(&AppliedState<SM>) -> T) -> T {
        let mut f = Some(f);
        let mut out = None;
        self.inner.stores.read_applied(&mut |applied| {
            if let Some(f) = f.take() {
                out = Some(f(applied));
            }
        });
        match out {
            Some(out) => out,
            // Both `Stores` implementations call the closure exactly once.
            None => unreachable!("Stores::read_applied did not run its closure"),
        }
    }

    /// Stops raft. The data directory stays as it is.
    pub async fn shutdown(&self) {
        if let Err(e) = self.inner.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
    }
}

/// The longest one remote read-index attempt waits: two election timeouts
/// (a leader answers within a heartbeat round trip; one that does not
/// answer by then has been replaced or cut off), at least a second so a
/// loaded machine does not turn slow answers into retries.
fn read_index_attempt(config: &NodeConfig) -> Duration {
    (config.election_timeout_max * 2).max(Duration::from_secs(1))
}

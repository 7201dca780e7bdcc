//! [`RaftNode`]: one replica of the gateway raft group, the API a gateway
//! embeds.
//!
//! - Writes are accepted on every node: the leader proposes; a follower
//!   forwards to the leader (one hop) and retries across an election within
//!   [`NodeConfig::write_timeout`], retrying only when the write certainly was
//!   not appended.
//! - Linearizable reads on every node through read-index: the leader confirms
//!   its leadership with a quorum and names its commit index; the reading node
//!   waits until it applied that index, then reads locally.
//! - Membership administration runs on the leader; elsewhere it returns
//!   [`AdminError::NotLeader`] with the leader's address.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, ChangeMembers, ServerState, SnapshotPolicy};
use proto::raft::raft_transport_server::RaftTransportServer;
use proto::raft::{
    forward_response, read_index_response, CampaignRequest, ForwardRequest, HoldElectionRequest,
    ReadIndexRequest,
};

use crate::db::DataDir;
use crate::error::{AdminError, Error, ReadError, Result, WriteError};
use crate::log_store::LogStore;
use crate::network::client::{Channels, NetworkFactory};
use crate::network::server::TransportService;
use crate::network::MAX_MESSAGE_BYTES;
use crate::state_machine::{Applied as AppliedState, StateMachineStore};
use crate::types::typ::Raft;
use crate::types::Command;
use crate::{NodeId, StateMachine};
use tokio::sync::{mpsc, oneshot};

/// How one node runs. [`NodeConfig::new`] fills in openraft's defaults.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's raft id (non-zero).
    pub node_id: NodeId,
    /// host:port other nodes and clients use to reach this node.
    pub advertise_addr: String,
    /// The data directory.
    pub data_dir: PathBuf,
    /// The cluster this node belongs to; a data directory or peer of another
    /// cluster is refused.
    pub cluster_id: String,
    /// Leader heartbeat interval.
    pub heartbeat_interval: Duration,
    /// Lower bound of the randomized election timeout.
    pub election_timeout_min: Duration,
    /// Upper bound of the randomized election timeout.
    pub election_timeout_max: Duration,
    /// Build a snapshot after this many log entries since the last one.
    pub snapshot_after_logs: u64,
    /// Entries kept in the log behind a snapshot (for followers slightly behind).
    pub logs_to_keep: u64,
    /// Largest snapshot chunk streamed to a follower.
    pub snapshot_chunk_bytes: u64,
    /// How long a write may wait for a leader, including forwarding retries.
    pub write_timeout: Duration,
    /// sled page-cache size in bytes.
    pub cache_capacity: u64,
    /// Secret every replica presents on raft transport calls and requires
    /// from callers (None: only the cluster id is checked).
    pub peer_token: Option<String>,
}

impl NodeConfig {
    /// A configuration with openraft's default timing (heartbeat 50 ms,
    /// election 150–300 ms, snapshot every 5000 entries, 1000 kept).
    pub fn new(
        node_id: NodeId,
        advertise_addr: &str,
        data_dir: impl Into<PathBuf>,
        cluster_id: &str,
    ) -> Self {
        NodeConfig {
            node_id,
            advertise_addr: advertise_addr.to_string(),
            data_dir: data_dir.into(),
            cluster_id: cluster_id.to_string(),
            heartbeat_interval: Duration::from_millis(50),
            election_timeout_min: Duration::from_millis(150),
            election_timeout_max: Duration::from_millis(300),
            snapshot_after_logs: 5000,
            logs_to_keep: 1000,
            snapshot_chunk_bytes: 1024 * 1024,
            write_timeout: Duration::from_secs(5),
            cache_capacity: 64 * 1024 * 1024,
            peer_token: None,
        }
    }

    fn raft_config(&self) -> Result<openraft::Config> {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        if self.node_id == 0 {
            return Err(Error::Config(
                "node id must be at least 1 (0 means \"none\" on the wire)".into(),
            ));
        }
        if self.cluster_id.is_empty() {
            return Err(Error::Config("cluster id must not be empty".into()));
        }
        if self.snapshot_chunk_bytes == 0
            || self.snapshot_chunk_bytes as usize > MAX_MESSAGE_BYTES / 2
        {
            return Err(Error::Config(format!(
                "snapshot chunk size must be within 1..={} bytes",
                MAX_MESSAGE_BYTES / 2
            )));
        }
        let config = openraft::Config {
            cluster_name: self.cluster_id.clone(),
            heartbeat_interval: ms(self.heartbeat_interval),
            election_timeout_min: ms(self.election_timeout_min),
            election_timeout_max: ms(self.election_timeout_max),
            install_snapshot_timeout: 2_000,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_after_logs),
            max_in_snapshot_log_to_keep: self.logs_to_keep,
            snapshot_max_chunk_size: self.snapshot_chunk_bytes,
            ..Default::default()
        };
        config.validate().map_err(|e| Error::Config(e.to_string()))
    }
}

/// The outcome of a write that was applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The log index that applied it (the resource version of what it wrote).
    pub log_index: u64,
    /// The state machine's response, in its wire format.
    pub response: Vec<u8>,
}

/// One node in [`ClusterStatus`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    /// Raft id.
    pub id: NodeId,
    /// Advertised address.
    pub addr: String,
    /// Voter (true) or learner.
    pub voter: bool,
    /// Last index the leader knows the node holds (only on the leader).
    pub matched_index: Option<u64>,
    /// Leader's last index minus `matched_index` (only on the leader).
    pub lag: Option<u64>,
}

/// What `raft status` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterStatus {
    /// The node answering.
    pub node_id: NodeId,
    /// Leader, if known.
    pub leader: Option<(NodeId, String)>,
    /// Current term.
    pub term: u64,
    /// Last committed index this node knows.
    pub commit_index: u64,
    /// Last applied index.
    pub applied_index: u64,
    /// Last log index.
    pub last_log_index: u64,
    /// Index of the latest snapshot.
    pub snapshot_index: u64,
    /// Index up to which the log was purged.
    pub purged_index: u64,
    /// Leader, Follower, Candidate or Learner.
    pub state: String,
    /// Voters and learners.
    pub nodes: Vec<NodeStatus>,
    /// The cluster id.
    pub cluster_id: String,
}

/// Result of a membership change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipChange {
    /// Log index of the membership entry (0 when nothing changed).
    pub log_index: u64,
    /// Voters after the change.
    pub voters: Vec<(NodeId, String)>,
    /// Learners after the change.
    pub learners: Vec<(NodeId, String)>,
    /// For a non-blocking add-learner: the learner's matched index.
    pub learner_matched: u64,
    /// The leader's last log index.
    pub leader_last_index: u64,
}

struct Inner<SM: StateMachine> {
    config: NodeConfig,
    raft: Raft,
    /// Local proposals, grouped into batch entries by the batcher task.
    proposals: mpsc::Sender<Proposal>,
    log: LogStore,
    state_machine: StateMachineStore<SM>,
    channels: Channels,
    /// Local proposals (`propose_local`: this node's writes and forwarded
    /// ones) wait on this while a leadership transfer runs here (write lock
    /// held by the transfer), so that no entry refreshes the followers' lease.
    transfer: tokio::sync::RwLock<()>,
    /// Elections are held (disabled) until this many ms after `epoch`.
    hold_until_ms: AtomicU64,
    /// Reference point of `hold_until_ms`.
    epoch: Instant,
}

/// One replica of the raft group. Cloning shares it.
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

/// What one attempt to forward a write to the leader came to.
enum Forwarded {
    Applied(Applied),
    /// Certainly not appended: retry.
    Retry,
}

impl<SM: StateMachine> RaftNode<SM> {
    /// Opens the data directory and starts raft. Serve
    /// [`RaftNode::transport_service`] on the advertised address next.
    ///
    /// # Errors
    /// [`Error::Config`] for invalid settings, [`Error::DataDir`] for a data
    /// directory that is damaged or belongs to another cluster or node.
    pub async fn start(config: NodeConfig) -> Result<Self> {
        let raft_config = Arc::new(config.raft_config()?);
        let open_config = config.clone();
        let (log, state_machine) = tokio::task::spawn_blocking(move || -> Result<_> {
            // A damaged snapshot is refused before the database is opened
            // (opening sled may rewrite its files).
            let snapshots_first = open_config.data_dir.join("snapshots").is_dir();
            let early = if snapshots_first {
                Some(StateMachineStore::<SM>::open(&open_config.data_dir)?)
            } else {
                None
            };
            let dir = DataDir::open(
                &open_config.data_dir,
                &open_config.cluster_id,
                open_config.node_id,
                open_config.cache_capacity,
            )?;
            let log = LogStore::new(&dir).map_err(|e| Error::DataDir {
                path: open_config.data_dir.join("raft"),
                problem: format!("log metadata cannot be read ({e}); refusing to start"),
            })?;
            let state_machine = match early {
                Some(sm) => sm,
                None => StateMachineStore::<SM>::open(&open_config.data_dir)?,
            };
            Ok((log, state_machine))
        })
        .await
        .map_err(|e| Error::Raft(format!("start-up task failed: {e}")))??;
        let channels = Channels::new(&config.cluster_id, config.peer_token.as_deref());
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
        let (proposals, queue) = mpsc::channel(4096);
        tokio::spawn(run_batcher(raft.clone(), queue));
        Ok(RaftNode {
            inner: Arc::new(Inner {
                config,
                proposals,
                raft,
                log,
                state_machine,
                channels,
                transfer: tokio::sync::RwLock::new(()),
                hold_until_ms: AtomicU64::new(0),
                epoch: Instant::now(),
            }),
        })
    }

    /// The gRPC raft transport of this node, to serve on its address.
    pub fn transport_service(&self) -> RaftTransportServer<TransportService<SM>> {
        RaftTransportServer::new(TransportService::new(self.clone()))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
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
        let metrics = self.inner.raft.metrics().borrow().clone();
        let leader = metrics.current_leader?;
        let addr = metrics
            .membership_config
            .membership()
            .get_node(&leader)
            .map(|n| n.addr.clone())?;
        Some((leader, addr))
    }

    /// Whether this node is the leader.
    pub fn is_leader(&self) -> bool {
        self.inner.raft.metrics().borrow().current_leader == Some(self.id())
    }

    /// Runs `f` on this node's applied state (no consistency guarantee beyond
    /// "some applied prefix of the log"); see [`RaftNode::read_index`].
    pub fn read_local<T>(&self, f: impl FnOnce(&SM, u64) -> T) -> T {
        self.inner.state_machine.read(|a: &AppliedState<SM>| {
            f(&a.machine, a.last_applied.map(|l| l.index).unwrap_or(0))
        })
    }

    /// Proposes `command` (in the state machine's wire format), forwarding to
    /// the leader when this node is not it.
    ///
    /// # Errors
    /// [`WriteError::Rejected`] for a malformed command, [`WriteError::NoLeader`]
    /// when no leader took it within the write timeout (certainly not applied),
    /// [`WriteError::Unknown`] when it was sent but its outcome is unknown.
    pub async fn write(&self, command: Vec<u8>) -> Result<Applied, WriteError> {
        SM::validate(&command).map_err(WriteError::Rejected)?;
        let started = Instant::now();
        let deadline = started + self.inner.config.write_timeout;
        let waited_ms = || u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        loop {
            let hint = {
                let remaining = deadline.saturating_duration_since(Instant::now());
                let attempt = tokio::time::timeout(remaining, self.propose_local(command.clone()));
                match attempt.await {
                    Err(_) => {
                        return Err(WriteError::Unknown(format!(
                            "no commit within {} ms",
                            waited_ms()
                        )))
                    }
                    Ok(Ok(applied)) => return Ok(applied),
                    Ok(Err(Proposed::NotLeader(hint))) => hint.filter(|(id, _)| *id != self.id()),
                    Ok(Err(Proposed::Fatal(e))) => return Err(WriteError::Fatal(e)),
                }
            };
            if let Some((leader, node)) = hint {
                match self.forward(leader, &node.addr, &command, deadline).await? {
                    Forwarded::Applied(applied) => return Ok(applied),
                    Forwarded::Retry => {}
                }
            }
            if Instant::now() >= deadline {
                return Err(WriteError::NoLeader {
                    waited_ms: waited_ms(),
                });
            }
            tokio::time::sleep(self.retry_pause()).await;
        }
    }

    /// Proposes `command` through this node's raft, batched with other
    /// proposals queued at the same time. Fails with [`Proposed::NotLeader`]
    /// (certainly not applied) when this node is not the leader.
    pub async fn propose_local(&self, command: Vec<u8>) -> Result<Applied, Proposed> {
        // Every local proposal, forwarded ones included, waits while a
        // leadership transfer runs here: an appended entry would refresh the
        // followers' leader lease and they would refuse the target's votes.
        let _transfer = self.inner.transfer.read().await;
        let (reply, outcome) = oneshot::channel();
        self.inner
            .proposals
            .send(Proposal { command, reply })
            .await
            .map_err(|_| Proposed::Fatal("the batcher stopped".into()))?;
        outcome
            .await
            .map_err(|_| Proposed::Fatal("the batcher dropped the proposal".into()))?
    }

    /// Pause between retries: a fraction of the election timeout.
    fn retry_pause(&self) -> Duration {
        self.inner.config.election_timeout_min / 4
    }

    async fn forward(
        &self,
        leader: NodeId,
        addr: &str,
        command: &[u8],
        deadline: Instant,
    ) -> Result<Forwarded, WriteError> {
        let span = tracing::debug_span!("forward_write", leader);
        let _enter = span.enter();
        let Ok(mut client) = self.inner.channels.client(addr) else {
            return Ok(Forwarded::Retry);
        };
        let mut request = tonic::Request::new(ForwardRequest {
            command: command.to_vec(),
            cluster_id: self.cluster_id().to_string(),
        });
        request.set_timeout(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
        );
        match client.forward(request).await {
            Ok(reply) => match reply.into_inner().result {
                Some(forward_response::Result::Applied(a)) => Ok(Forwarded::Applied(Applied {
                    log_index: a.log_index,
                    response: a.response,
                })),
                Some(forward_response::Result::NotLeader(_)) => Ok(Forwarded::Retry),
                None => Err(WriteError::Unknown(format!(
                    "leader {leader} sent an empty forward reply"
                ))),
            },
            Err(status) if status.code() == tonic::Code::InvalidArgument => {
                Err(WriteError::Rejected(status.message().to_string()))
            }
            Err(status) if never_sent(&status) => Ok(Forwarded::Retry),
            Err(status) => Err(WriteError::Unknown(format!(
                "forwarding to leader {leader} at {addr}: {status}"
            ))),
        }
    }

    /// Returns an index such that every write acknowledged before the call is
    /// at or below it, after this node applied up to it (read-index).
    ///
    /// # Errors
    /// [`ReadError::NoLeader`] when no leader confirmed within the write
    /// timeout; [`ReadError::Timeout`] when this node could not catch up.
    pub async fn read_index(&self) -> Result<u64, ReadError> {
        let started = Instant::now();
        let deadline = started + self.inner.config.write_timeout;
        loop {
            let index = if self.is_leader() {
                match self.inner.raft.get_read_log_id().await {
                    Ok((read, _)) => Some(read.map(|l| l.index).unwrap_or(0)),
                    Err(RaftError::APIError(_)) => None,
                    Err(RaftError::Fatal(e)) => return Err(ReadError::Fatal(e.to_string())),
                }
            } else if let Some((leader, addr)) = self.leader() {
                self.remote_read_index(leader, &addr, deadline).await
            } else {
                None
            };
            if let Some(index) = index {
                let remaining = deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1));
                self.inner
                    .raft
                    .wait(Some(remaining))
                    .applied_index_at_least(Some(index), "read-index")
                    .await
                    .map_err(|_| ReadError::Timeout { read_index: index })?;
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

    async fn remote_read_index(
        &self,
        leader: NodeId,
        addr: &str,
        deadline: Instant,
    ) -> Option<u64> {
        let mut client = self.inner.channels.client(addr).ok()?;
        let mut request = tonic::Request::new(ReadIndexRequest {
            cluster_id: self.cluster_id().to_string(),
        });
        request.set_timeout(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
        );
        match client.read_index(request).await {
            Ok(reply) => match reply.into_inner().result {
                Some(read_index_response::Result::ReadIndex(i)) => Some(i),
                _ => None,
            },
            Err(status) => {
                tracing::debug!(leader, %status, "read-index from leader failed");
                None
            }
        }
    }

    /// A linearizable read: read-index, then `f` on the applied state.
    pub async fn read<T>(&self, f: impl FnOnce(&SM, u64) -> T) -> Result<T, ReadError> {
        self.read_index().await?;
        Ok(self.read_local(f))
    }

    fn not_leader(&self) -> AdminError {
        match self.leader() {
            Some((leader_id, leader_addr)) if leader_id != self.id() => AdminError::NotLeader {
                leader_id,
                leader_addr,
            },
            _ => AdminError::NoLeader,
        }
    }

    fn membership(&self) -> (BTreeMap<NodeId, String>, BTreeMap<NodeId, String>) {
        let metrics = self.inner.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let mut v = BTreeMap::new();
        let mut l = BTreeMap::new();
        for (id, node) in membership.nodes() {
            if voters.contains(id) {
                v.insert(*id, node.addr.clone());
            } else {
                l.insert(*id, node.addr.clone());
            }
        }
        (v, l)
    }

    fn change_result(&self, log_index: u64) -> MembershipChange {
        let (voters, learners) = self.membership();
        MembershipChange {
            log_index,
            voters: voters.into_iter().collect(),
            learners: learners.into_iter().collect(),
            learner_matched: 0,
            leader_last_index: self
                .inner
                .raft
                .metrics()
                .borrow()
                .last_log_index
                .unwrap_or(0),
        }
    }

    fn admin_error(&self, e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>) -> AdminError {
        match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => self.not_leader(),
            RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
                AdminError::InvalidArgument(e.to_string())
            }
            RaftError::Fatal(e) => AdminError::Failed(format!("raft stopped: {e}")),
        }
    }

    /// Bootstraps a new cluster whose voters are `members` (id, address).
    /// Calling it again with the same voters is a no-op.
    pub async fn initialize(
        &self,
        members: Vec<(NodeId, String)>,
    ) -> Result<MembershipChange, AdminError> {
        if members.is_empty() {
            return Err(AdminError::InvalidArgument(
                "initialize needs at least one member".into(),
            ));
        }
        let wanted: BTreeMap<NodeId, BasicNode> = members
            .iter()
            .map(|(id, addr)| (*id, BasicNode::new(addr)))
            .collect();
        if wanted.contains_key(&0) {
            return Err(AdminError::InvalidArgument("node id 0 is reserved".into()));
        }
        match self.inner.raft.initialize(wanted.clone()).await {
            Ok(()) => Ok(self.change_result(0)),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {
                let (voters, _) = self.membership();
                let same = voters.keys().copied().collect::<BTreeSet<_>>()
                    == wanted.keys().copied().collect();
                if same {
                    Ok(self.change_result(0))
                } else {
                    Err(AdminError::AlreadyInitialized(format!(
                        "the cluster's voters are {:?}",
                        voters
                    )))
                }
            }
            Err(RaftError::APIError(e)) => Err(AdminError::InvalidArgument(e.to_string())),
            Err(RaftError::Fatal(e)) => Err(AdminError::Failed(format!("raft stopped: {e}"))),
        }
    }

    /// Adds a learner. With `blocking`, returns once it caught up with the
    /// leader; otherwise returns at once with its replication progress.
    pub async fn add_learner(
        &self,
        id: NodeId,
        addr: &str,
        blocking: bool,
    ) -> Result<MembershipChange, AdminError> {
        if id == 0 {
            return Err(AdminError::InvalidArgument("node id 0 is reserved".into()));
        }
        if addr.parse::<std::net::SocketAddr>().is_err() && !addr.contains(':') {
            return Err(AdminError::InvalidArgument(format!(
                "address {addr:?} is not host:port"
            )));
        }
        let (voters, _) = self.membership();
        if voters.contains_key(&id) {
            return Err(AdminError::InvalidArgument(format!(
                "node {id} is already a voter"
            )));
        }
        let written = self
            .inner
            .raft
            .add_learner(id, BasicNode::new(addr), blocking)
            .await
            .map_err(|e| self.admin_error(e))?;
        let mut change = self.change_result(written.log_id.index);
        change.learner_matched = self.matched_index(id).unwrap_or(0);
        Ok(change)
    }

    fn matched_index(&self, id: NodeId) -> Option<u64> {
        let metrics = self.inner.raft.metrics().borrow().clone();
        if metrics.current_leader == Some(id) && id == self.id() {
            return metrics.last_log_index;
        }
        metrics
            .replication
            .as_ref()?
            .get(&id)
            .copied()
            .flatten()
            .map(|l| l.index)
    }

    /// Promotes a learner to voter.
    pub async fn promote(&self, id: NodeId) -> Result<MembershipChange, AdminError> {
        let (voters, learners) = self.membership();
        if voters.contains_key(&id) {
            return Ok(self.change_result(0));
        }
        if !learners.contains_key(&id) {
            return Err(AdminError::UnknownNode(id));
        }
        self.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])))
            .await
    }

    /// Removes a voter or a learner from the cluster.
    pub async fn remove(&self, id: NodeId) -> Result<MembershipChange, AdminError> {
        let (voters, learners) = self.membership();
        let change = if voters.contains_key(&id) {
            if voters.len() == 1 {
                return Err(AdminError::InvalidArgument(format!(
                    "node {id} is the last voter"
                )));
            }
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else if learners.contains_key(&id) {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        } else {
            return Err(AdminError::UnknownNode(id));
        };
        self.change_membership(change).await
    }

    /// Proposes a membership change, waiting (within the write timeout) for
    /// a change still in progress to finish first.
    async fn change_membership(
        &self,
        change: ChangeMembers<NodeId, BasicNode>,
    ) -> Result<MembershipChange, AdminError> {
        let deadline = Instant::now() + self.inner.config.write_timeout;
        loop {
            match self
                .inner
                .raft
                .change_membership(change.clone(), false)
                .await
            {
                Ok(written) => return Ok(self.change_result(written.log_id.index)),
                Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(
                    openraft::error::ChangeMembershipError::InProgress(_),
                ))) if Instant::now() < deadline => {
                    tokio::time::sleep(self.retry_pause()).await;
                }
                Err(e) => return Err(self.admin_error(e)),
            }
        }
    }

    /// Holds this node's election timer for `hold` (part of a leadership
    /// transfer run by another node).
    pub fn hold_election(&self, hold: Duration) {
        let until =
            u64::try_from((self.inner.epoch.elapsed() + hold).as_millis()).unwrap_or(u64::MAX);
        self.inner.hold_until_ms.fetch_max(until, Ordering::SeqCst);
        self.inner.raft.runtime_config().elect(false);
        let node = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(hold).await;
            let now = u64::try_from(node.inner.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
            if now >= node.inner.hold_until_ms.load(Ordering::SeqCst) {
                node.inner.raft.runtime_config().elect(true);
            }
        });
    }

    /// Moves leadership to `to` (or, with `None`, to the most caught-up other
    /// voter). Runs on the leader.
    ///
    /// openraft 0.9 has no transfer primitive, so this one is built from its
    /// switches: writes here pause, every other voter holds its election timer,
    /// the leader stops heartbeats, and once the target is caught up and the
    /// followers' leader lease ran out, the target campaigns. Only it can win.
    pub async fn transfer_leader(&self, to: Option<NodeId>) -> Result<(NodeId, u64), AdminError> {
        if !self.is_leader() {
            return Err(self.not_leader());
        }
        let (voters, _) = self.membership();
        let target = match to {
            Some(id) if id == self.id() => {
                return Ok((id, self.inner.raft.metrics().borrow().current_term))
            }
            Some(id) if !voters.contains_key(&id) => return Err(AdminError::UnknownNode(id)),
            Some(id) => id,
            None => voters
                .keys()
                .copied()
                .filter(|id| *id != self.id())
                .max_by_key(|id| self.matched_index(*id).unwrap_or(0))
                .ok_or_else(|| {
                    AdminError::InvalidArgument("no other voter to transfer to".into())
                })?,
        };
        let target_addr = voters.get(&target).cloned().unwrap_or_default();
        let election_max = self.inner.config.election_timeout_max;
        let hold = election_max * 10;
        let _pause_writes = self.inner.transfer.write().await;
        let span = tracing::info_span!("transfer_leader", from = self.id(), to = target);
        let _enter = span.enter();
        for (id, addr) in voters.iter().filter(|(id, _)| **id != target) {
            if *id == self.id() {
                self.hold_election(hold);
                continue;
            }
            if let Ok(mut client) = self.inner.channels.client(addr) {
                let request = HoldElectionRequest {
                    cluster_id: self.cluster_id().to_string(),
                    hold_ms: u64::try_from(hold.as_millis()).unwrap_or(60_000),
                };
                if let Err(status) = client.hold_election(request).await {
                    tracing::warn!(node = id, %status, "could not hold the election timer of a voter");
                }
            }
        }
        let result = self
            .finish_transfer(target, &target_addr, election_max)
            .await;
        self.inner.raft.runtime_config().heartbeat(true);
        result
    }

    async fn finish_transfer(
        &self,
        target: NodeId,
        addr: &str,
        election_max: Duration,
    ) -> Result<(NodeId, u64), AdminError> {
        let caught_up_by = Instant::now() + self.inner.config.write_timeout;
        loop {
            let last = self.inner.raft.metrics().borrow().last_log_index;
            if self.matched_index(target) >= last {
                break;
            }
            if Instant::now() >= caught_up_by {
                return Err(AdminError::Timeout(format!(
                    "node {target} did not catch up with the leader"
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.inner.raft.runtime_config().heartbeat(false);
        // Let every follower's leader lease (election_timeout_max) run out.
        tokio::time::sleep(election_max + election_max / 2).await;
        let mut client = self
            .inner
            .channels
            .client(addr)
            .map_err(AdminError::InvalidArgument)?;
        client
            .campaign(CampaignRequest {
                cluster_id: self.cluster_id().to_string(),
            })
            .await
            .map_err(|s| {
                AdminError::Failed(format!("node {target} could not campaign: {}", s.message()))
            })?;
        let metrics = self
            .inner
            .raft
            .wait(Some(self.inner.config.write_timeout))
            .metrics(|m| m.current_leader == Some(target), "leadership moved")
            .await
            .map_err(|_| AdminError::Timeout(format!("node {target} did not become leader")))?;
        Ok((target, metrics.current_term))
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

    /// Leader, term, indexes, voters, learners and (on the leader)
    /// replication lag.
    pub fn status(&self) -> ClusterStatus {
        let metrics = self.inner.raft.metrics().borrow().clone();
        let (voters, learners) = self.membership();
        let last = metrics.last_log_index.unwrap_or(0);
        let is_leader = metrics.current_leader == Some(self.id());
        let node = |id: NodeId, addr: String, voter: bool| {
            let matched = if is_leader {
                self.matched_index(id)
            } else {
                None
            };
            NodeStatus {
                id,
                addr,
                voter,
                matched_index: matched,
                lag: matched.map(|m| last.saturating_sub(m)),
            }
        };
        let mut nodes: Vec<NodeStatus> = voters
            .into_iter()
            .map(|(id, addr)| node(id, addr, true))
            .collect();
        nodes.extend(learners.into_iter().map(|(id, addr)| node(id, addr, false)));
        ClusterStatus {
            node_id: self.id(),
            leader: self.leader(),
            term: metrics.current_term,
            commit_index: self
                .inner
                .log
                .committed_index()
                .max(metrics.last_applied.map(|l| l.index).unwrap_or(0)),
            applied_index: metrics.last_applied.map(|l| l.index).unwrap_or(0),
            last_log_index: last,
            snapshot_index: metrics.snapshot.map(|l| l.index).unwrap_or(0),
            purged_index: metrics.purged.map(|l| l.index).unwrap_or(0),
            state: match metrics.state {
                ServerState::Leader => "leader",
                ServerState::Follower => "follower",
                ServerState::Candidate => "candidate",
                ServerState::Learner => "learner",
                ServerState::Shutdown => "shutdown",
            }
            .to_string(),
            nodes,
            cluster_id: self.cluster_id().to_string(),
        }
    }

    /// A consistent backup: after read-index, the applied state's snapshot
    /// encoding with the (term, index) it reflects.
    ///
    /// # Errors
    /// [`ReadError`] when no leader confirms a read index.
    pub async fn backup(&self) -> Result<(u64, u64, Vec<u8>), ReadError> {
        self.read_index().await?;
        Ok(self.inner.state_machine.read(|a| {
            let (term, index) = a
                .last_applied
                .map(|l| (l.leader_id.term, l.index))
                .unwrap_or((0, 0));
            (term, index, a.machine.snapshot())
        }))
    }

    /// The applied index and a crc32 and length of the deterministic snapshot
    /// encoding of the applied state: replicas at the same applied index must
    /// agree byte for byte.
    pub fn state_digest(&self) -> (u64, u32, u64) {
        self.read_local(|machine, index| {
            let bytes = machine.snapshot();
            (index, crc32fast::hash(&bytes), bytes.len() as u64)
        })
    }

    /// Stops raft. The data directory stays as it is.
    pub async fn shutdown(&self) {
        if let Err(e) = self.inner.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
    }
}

/// Why a local proposal was not applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Proposed {
    /// This node is not the leader (with the leader it knows of); the
    /// command was certainly not applied.
    NotLeader(Option<(NodeId, BasicNode)>),
    /// Raft stopped.
    Fatal(String),
}

/// One write waiting for the batcher.
struct Proposal {
    command: Vec<u8>,
    reply: oneshot::Sender<Result<Applied, Proposed>>,
}

/// Most commands in one log entry.
const MAX_BATCH: usize = 256;
/// Batches proposed to raft and not yet answered. While one is being made
/// durable the next ones queue here, so they grow: one fsync then commits
/// many writes (openraft 0.9 makes the leader wait for each append's flush).
const BATCHES_IN_FLIGHT: usize = 2;

/// Groups queued proposals into batch entries and proposes them.
async fn run_batcher(raft: Raft, mut queue: mpsc::Receiver<Proposal>) {
    let in_flight = Arc::new(tokio::sync::Semaphore::new(BATCHES_IN_FLIGHT));
    while let Some(first) = queue.recv().await {
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        let raft = raft.clone();
        tokio::spawn(async move {
            let (commands, replies): (Vec<Vec<u8>>, Vec<_>) =
                batch.into_iter().map(|p| (p.command, p.reply)).unzip();
            let span = tracing::trace_span!("propose_batch", commands = commands.len());
            let _enter = span.enter();
            match raft.client_write(Command(commands)).await {
                Ok(written) => {
                    let mut responses = written.data.0.into_iter();
                    for reply in replies {
                        let response = responses.next().unwrap_or_default();
                        let _ = reply.send(Ok(Applied {
                            log_index: written.log_id.index,
                            response,
                        }));
                    }
                }
                Err(e) => {
                    let failure = match e {
                        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
                            Proposed::NotLeader(f.leader_id.zip(f.leader_node))
                        }
                        other => Proposed::Fatal(other.to_string()),
                    };
                    for reply in replies {
                        let _ = reply.send(Err(failure.clone()));
                    }
                }
            }
            drop(permit);
        });
    }
}

/// Whether a failed gRPC call certainly never reached the peer (so retrying
/// cannot apply a write twice).
fn never_sent(status: &tonic::Status) -> bool {
    if status.code() != tonic::Code::Unavailable {
        return false;
    }
    let text = format!("{status:?}").to_ascii_lowercase();
    text.contains("connection refused")
        || text.contains("tcp connect error")
        || text.contains("dns error")
}

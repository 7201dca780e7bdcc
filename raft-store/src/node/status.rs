//! What `raft status` shows of one node ([`RaftNode::status`]), and the
//! size of its data directory.

use std::path::Path;
use std::time::Duration;

use openraft::error::Fatal;
use openraft::ServerState;

use super::RaftNode;
use crate::membership;
use crate::state_machine::StateMachine;
use crate::types::NodeId;

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
    /// Milliseconds since the node last acknowledged an append from this
    /// leader (only on the leader; `None` if it never did).
    pub last_ack_ms: Option<u64>,
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
    /// A membership change half done (joint configuration): the voters it
    /// leads to.
    pub unfinished_change: Option<Vec<NodeId>>,
    /// On the leader: milliseconds since a quorum last acknowledged it;
    /// `None` on other nodes, or while no quorum acknowledged this leader.
    pub quorum_ack_ms: Option<u64>,
    /// What keeps this node from serving as it should, in words (raft
    /// stopped, no leader known, not a member of the group); empty when
    /// nothing does. What `etcdctl endpoint status` calls errors.
    pub errors: Vec<String>,
}

impl ClusterStatus {
    /// Whether this node leads with a quorum heard from within `within`:
    /// a leader cut off from its majority is still `leader` in raft's view
    /// until it steps down, but cannot commit anything.
    pub fn leads_with_quorum(&self, within: Duration) -> bool {
        self.leader.as_ref().map(|(id, _)| *id) == Some(self.node_id)
            && self
                .quorum_ack_ms
                .is_some_and(|ms| u128::from(ms) <= within.as_millis())
    }
}

impl<SM: StateMachine> RaftNode<SM> {
    /// Leader, term, indexes, voters, learners and (on the leader)
    /// replication lag.
    pub fn status(&self) -> ClusterStatus {
        let metrics = self.inner.raft.metrics().borrow().clone();
        let (voters, learners) = membership::nodes(&self.inner.raft);
        let last = metrics.last_log_index.unwrap_or(0);
        let is_leader = metrics.current_leader == Some(self.id());
        let node = |id: NodeId, addr: String, voter: bool| {
            let matched = if is_leader {
                membership::matched_index(&self.inner.raft, self.id(), id)
            } else {
                None
            };
            let acked = if is_leader && id != self.id() {
                self.inner.channels.acks().since(id)
            } else {
                None
            };
            NodeStatus {
                id,
                addr,
                voter,
                matched_index: matched,
                lag: matched.map(|m| last.saturating_sub(m)),
                last_ack_ms: acked.map(|a| u64::try_from(a.as_millis()).unwrap_or(u64::MAX)),
            }
        };
        let mut nodes: Vec<NodeStatus> = voters
            .into_iter()
            .map(|(id, addr)| node(id, addr, true))
            .collect();
        nodes.extend(learners.into_iter().map(|(id, addr)| node(id, addr, false)));
        let errors = status_errors(
            &metrics.running_state,
            self.leader().is_some(),
            nodes.iter().any(|n| n.id == self.id()),
        );
        ClusterStatus {
            errors,
            node_id: self.id(),
            leader: self.leader(),
            term: metrics.current_term,
            commit_index: self
                .inner
                .stores
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
            unfinished_change: membership::unfinished_change(&self.inner.raft)
                .map(|voters| voters.into_iter().collect()),
            quorum_ack_ms: if is_leader {
                metrics.millis_since_quorum_ack
            } else {
                None
            },
        }
    }

    /// Bytes of the files under this node's data directory (log, state,
    /// snapshots), as `du` would count them, read now (blocking: a few
    /// files, but call it off the async runtime's hot path).
    pub fn data_size_bytes(&self) -> u64 {
        dir_size(&self.inner.config.data_dir)
    }
}

/// The problems a node's status names (see [`ClusterStatus::errors`]).
fn status_errors(
    running: &Result<(), Fatal<NodeId>>,
    leader_known: bool,
    member: bool,
) -> Vec<String> {
    let mut errors = Vec::new();
    if let Err(fatal) = running {
        errors.push(format!("raft stopped: {fatal}"));
    }
    if !leader_known {
        errors.push("no leader known".to_string());
    }
    if !member {
        errors.push("not a member of the group (removed, or never added)".to_string());
    }
    errors
}

/// The total size of the regular files under `dir` (0 when unreadable).
fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(t) if t.is_dir() => dir_size(&entry.path()),
            Ok(t) if t.is_file() => entry.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

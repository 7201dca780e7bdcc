//! Membership: what this node knows of the cluster (leader, voters,
//! learners, replication progress, read from raft's metrics) and the
//! membership administration that runs on the leader (initialize, add a
//! learner, promote, remove). Elsewhere administration returns
//! [`AdminError::NotLeader`] with the leader's address.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use openraft::error::{ChangeMembershipError, ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, ChangeMembers};

use crate::error::AdminError;
use crate::types::typ::Raft;
use crate::types::NodeId;

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

/// Voters and learners by id, with their addresses.
pub type Nodes = (BTreeMap<NodeId, String>, BTreeMap<NodeId, String>);

/// The leader `raft` knows of, with its address.
pub fn leader(raft: &Raft) -> Option<(NodeId, String)> {
    let metrics = raft.metrics().borrow().clone();
    let leader = metrics.current_leader?;
    let addr = metrics
        .membership_config
        .membership()
        .get_node(&leader)
        .map(|n| n.addr.clone())?;
    Some((leader, addr))
}

/// The voters and the learners of the membership `raft` knows.
pub fn nodes(raft: &Raft) -> Nodes {
    let metrics = raft.metrics().borrow().clone();
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

/// The last log index the leader `me` knows node `id` holds (its own last
/// index for itself); `None` off the leader or for an unknown node.
pub fn matched_index(raft: &Raft, me: NodeId, id: NodeId) -> Option<u64> {
    let metrics = raft.metrics().borrow().clone();
    if metrics.current_leader == Some(id) && id == me {
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

/// The error of an administrative call made on node `me`, which is not the
/// leader: where to go instead, if a leader is known.
pub fn not_leader(raft: &Raft, me: NodeId) -> AdminError {
    match leader(raft) {
        Some((leader_id, leader_addr)) if leader_id != me => AdminError::NotLeader {
            leader_id,
            leader_addr,
        },
        _ => AdminError::NoLeader,
    }
}

/// Membership administration through one node's raft.
pub(crate) struct MembershipAdmin {
    /// The node's raft handle.
    pub raft: Raft,
    /// The node's id.
    pub me: NodeId,
    /// How long a change may wait for one still in progress.
    pub write_timeout: Duration,
    /// Pause between such waits.
    pub retry_pause: Duration,
}

impl MembershipAdmin {
    fn change_result(&self, log_index: u64) -> MembershipChange {
        let (voters, learners) = nodes(&self.raft);
        MembershipChange {
            log_index,
            voters: voters.into_iter().collect(),
            learners: learners.into_iter().collect(),
            learner_matched: 0,
            leader_last_index: self.raft.metrics().borrow().last_log_index.unwrap_or(0),
        }
    }

    fn admin_error(&self, e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>) -> AdminError {
        match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => {
                not_leader(&self.raft, self.me)
            }
            RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
                AdminError::InvalidArgument(e.to_string())
            }
            RaftError::Fatal(e) => AdminError::Failed(format!("raft stopped: {e}")),
        }
    }

    /// Bootstraps a new cluster whose voters are `wanted` (id, address).
    /// Calling it again with the same voters is a no-op.
    pub async fn initialize(
        &self,
        wanted: Vec<(NodeId, String)>,
    ) -> Result<MembershipChange, AdminError> {
        if wanted.is_empty() {
            return Err(AdminError::InvalidArgument(
                "initialize needs at least one voter".into(),
            ));
        }
        let wanted: BTreeMap<NodeId, BasicNode> = wanted
            .iter()
            .map(|(id, addr)| (*id, BasicNode::new(addr)))
            .collect();
        if wanted.contains_key(&0) {
            return Err(AdminError::InvalidArgument("node id 0 is reserved".into()));
        }
        match self.raft.initialize(wanted.clone()).await {
            Ok(()) => Ok(self.change_result(0)),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {
                let (voters, _) = nodes(&self.raft);
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
        let (voters, _) = nodes(&self.raft);
        if voters.contains_key(&id) {
            return Err(AdminError::InvalidArgument(format!(
                "node {id} is already a voter"
            )));
        }
        let written = self
            .raft
            .add_learner(id, BasicNode::new(addr), blocking)
            .await
            .map_err(|e| self.admin_error(e))?;
        let mut change = self.change_result(written.log_id.index);
        change.learner_matched = matched_index(&self.raft, self.me, id).unwrap_or(0);
        Ok(change)
    }

    /// Promotes a learner to voter.
    pub async fn promote(&self, id: NodeId) -> Result<MembershipChange, AdminError> {
        let (voters, learners) = nodes(&self.raft);
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
        let (voters, learners) = nodes(&self.raft);
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
        let deadline = Instant::now() + self.write_timeout;
        loop {
            match self.raft.change_membership(change.clone(), false).await {
                Ok(written) => return Ok(self.change_result(written.log_id.index)),
                Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(
                    ChangeMembershipError::InProgress(_),
                ))) if Instant::now() < deadline => {
                    tokio::time::sleep(self.retry_pause).await;
                }
                Err(e) => return Err(self.admin_error(e)),
            }
        }
    }
}

//! Membership: what this node knows of the cluster (leader, voters,
//! learners, replication progress, read from raft's metrics) and the
//! membership administration that runs on the leader (initialize, add a
//! learner, promote, remove). Elsewhere administration returns
//! [`AdminError::NotLeader`] with the leader's address.
//!
//! The rules an operator relies on:
//!
//! - Adding a learner first asks its address which node answers there
//!   (the `Identify` RPC): another node, or none, is refused before the
//!   membership changes (none only for a blocking add: a non-blocking one
//!   adds a learner that does not answer yet). A blocking add then waits at
//!   most [`LEARNER_CATCH_UP`] for the learner to match the leader's log.
//! - A promotion is refused unless the learner acknowledged the leader's
//!   appends within [`MembershipAdmin::recent_ack`] and matched its commit
//!   index ([`AppendAcks`], kept by the raft network client), unless forced.
//! - Every change is bounded by the write timeout: a change the leader
//!   cannot commit (no quorum) fails with [`AdminError::NoQuorum`] while it
//!   keeps running in the background, so it completes by itself once a
//!   majority is back. A change left half-done (a joint configuration,
//!   e.g. after the leader changed) is finished by the next promote or
//!   remove (or add-learner) before it proposes its own change.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openraft::error::{ChangeMembershipError, ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, ChangeMembers};
use tokio::time::Instant;

use crate::error::AdminError;
use crate::network::client::{AppendAcks, Channels, PeerCallError};
use crate::types::typ::Raft;
use crate::types::NodeId;

/// How long a blocking add-learner waits for the learner to catch up.
pub const LEARNER_CATCH_UP: Duration = Duration::from_secs(30);

/// How long one `Identify` call may take.
const IDENTIFY_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the leader keeps asking an address that does not answer (a
/// gateway just started may not listen yet).
const IDENTIFY_WITHIN: Duration = Duration::from_secs(5);

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

/// Whether the membership `raft` knows is a joint configuration (a change
/// proposed but not finished), and its target voters.
pub fn unfinished_change(raft: &Raft) -> Option<BTreeSet<NodeId>> {
    let metrics = raft.metrics().borrow().clone();
    let joint = metrics.membership_config.membership().get_joint_config();
    if joint.len() > 1 {
        joint.last().cloned()
    } else {
        None
    }
}

/// The log index of the membership entry `raft` runs under when that entry
/// is not applied yet (a change still in flight); `None` once applied.
fn membership_in_flight(raft: &Raft) -> Option<u64> {
    let metrics = raft.metrics().borrow().clone();
    let at = metrics.membership_config.log_id().map(|l| l.index)?;
    let applied = metrics.last_applied.map(|l| l.index).unwrap_or(0);
    (at > applied).then_some(at)
}

/// Membership administration through one node's raft.
pub(crate) struct MembershipAdmin {
    /// The node's raft handle.
    pub raft: Raft,
    /// The node's id.
    pub me: NodeId,
    /// Bound of every change, including waits for one still in progress.
    pub write_timeout: Duration,
    /// Pause between such waits.
    pub retry_pause: Duration,
    /// Channels to peers: identifies a learner's address, and holds when
    /// each target last acknowledged an append.
    pub channels: Channels,
    /// The followers' leader lease; scales "recently" for a promotion.
    pub election_timeout_max: Duration,
}

impl MembershipAdmin {
    /// How recently a learner must have acknowledged an append to be
    /// promoted: four election timeouts, at least one second.
    pub fn recent_ack(&self) -> Duration {
        (self.election_timeout_max * 4).max(Duration::from_secs(1))
    }

    fn acks(&self) -> &AppendAcks {
        self.channels.acks()
    }

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
            RaftError::APIError(ClientWriteError::ChangeMembershipError(
                ChangeMembershipError::InProgress(e),
            )) => AdminError::NoQuorum(format!(
                "an earlier membership change (log index {}) is still not committed after {} ms; \
                 a majority of the voters must be up and reachable for it to complete",
                e.membership_log_id.map(|l| l.index).unwrap_or(0),
                self.write_timeout.as_millis()
            )),
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
        let (voters, learners) = nodes(&self.raft);
        if voters.contains_key(&id) {
            return Err(AdminError::InvalidArgument(format!(
                "node {id} is already a voter"
            )));
        }
        if let Some(known) = learners.get(&id).filter(|known| *known != addr) {
            return Err(AdminError::InvalidArgument(format!(
                "node {id} is already a learner at {known}; remove it first to change its address"
            )));
        }
        if self.raft.metrics().borrow().current_leader != Some(self.me) {
            return Err(not_leader(&self.raft, self.me));
        }
        self.check_identity(id, addr, blocking).await?;
        // openraft's `add_learner` without blocking is this change; here it
        // is bounded by the write timeout like every other.
        let deadline = Instant::now() + self.write_timeout;
        self.finish_unfinished(deadline).await?;
        let add = ChangeMembers::AddNodes(BTreeMap::from([(id, BasicNode::new(addr))]));
        let mut change = self.change_membership(add, deadline).await?;
        if blocking {
            self.wait_caught_up(id, change.log_index).await?;
        }
        change.learner_matched = matched_index(&self.raft, self.me, id).unwrap_or(0);
        change.leader_last_index = self.raft.metrics().borrow().last_log_index.unwrap_or(0);
        Ok(change)
    }

    /// Asks `addr` once (within [`IDENTIFY_TIMEOUT`]) which node of this
    /// cluster answers there; any failure (nothing listening, another
    /// cluster, an older version) is the error.
    pub async fn identify_once(&self, addr: &str) -> Result<NodeId, AdminError> {
        match self.channels.identify(addr, IDENTIFY_TIMEOUT).await {
            Ok(id) => Ok(id),
            Err(PeerCallError::BadAddress(e)) => Err(AdminError::InvalidArgument(e.to_string())),
            Err(PeerCallError::Failed(status)) => Err(AdminError::Refused(format!(
                "no gateway of this cluster answered at {addr} ({}: {})",
                status.code(),
                status.message()
            ))),
        }
    }

    /// Asks `addr` which node answers there, for up to [`IDENTIFY_WITHIN`]
    /// while nothing answers; refuses anything but `id`. When nothing
    /// answers at all, a non-`blocking` add goes ahead (the operator chose
    /// not to wait for the node; the transport still refuses to let another
    /// node answer for it later), a blocking one is refused.
    async fn check_identity(
        &self,
        id: NodeId,
        addr: &str,
        blocking: bool,
    ) -> Result<(), AdminError> {
        let deadline = Instant::now() + IDENTIFY_WITHIN;
        let answer = loop {
            match self.channels.identify(addr, IDENTIFY_TIMEOUT).await {
                Err(PeerCallError::Failed(status))
                    if matches!(
                        status.code(),
                        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
                    ) && Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(PeerCallError::Failed(status))
                    if !blocking
                        && matches!(
                            status.code(),
                            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
                        ) =>
                {
                    tracing::warn!(node = id, addr, %status, "adding a learner nothing answers for (--no-wait): its progress stays unknown until it does");
                    return Ok(());
                }
                answer => break answer,
            }
        };
        match answer {
            Ok(answered) if answered == id => Ok(()),
            Ok(answered) => Err(AdminError::Refused(format!(
                "the gateway at {addr} is node {answered}, not node {id}; \
                 nothing changed: give node {id}'s own address"
            ))),
            Err(PeerCallError::BadAddress(e)) => Err(AdminError::InvalidArgument(e.to_string())),
            Err(PeerCallError::Failed(status)) if status.code() == tonic::Code::Unimplemented => {
                Err(AdminError::Refused(format!(
                    "the gateway at {addr} cannot say which node it is (an older version): \
                     upgrade it first; nothing changed"
                )))
            }
            Err(PeerCallError::Failed(status)) => Err(AdminError::Refused(format!(
                "no gateway of this cluster answered at {addr} as node {id} ({}: {}); \
                 nothing changed: start node {id} there first",
                status.code(),
                status.message()
            ))),
        }
    }

    /// Waits (at most [`LEARNER_CATCH_UP`]) until learner `id` matched the
    /// leader's log up to `index` at least.
    async fn wait_caught_up(&self, id: NodeId, index: u64) -> Result<(), AdminError> {
        let deadline = Instant::now() + LEARNER_CATCH_UP;
        loop {
            let matched = matched_index(&self.raft, self.me, id);
            if matched >= Some(index) {
                return Ok(());
            }
            if self.raft.metrics().borrow().current_leader != Some(self.me) {
                return Err(not_leader(&self.raft, self.me));
            }
            if Instant::now() >= deadline {
                let matched = matched.map_or("nothing yet".to_string(), |m| format!("index {m}"));
                return Err(AdminError::Timeout(format!(
                    "node {id} was added as a learner but has not caught up within {} s \
                     (matched {matched}, the leader is at {index} or later); it stays a learner: \
                     watch `raft status`, and promote it once its lag is near 0, or remove it",
                    LEARNER_CATCH_UP.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Promotes a learner to voter: unless `force`, only one that
    /// acknowledged the leader's appends recently and matched its commit
    /// index (waiting for that within the write timeout).
    pub async fn promote(&self, id: NodeId, force: bool) -> Result<MembershipChange, AdminError> {
        let deadline = Instant::now() + self.write_timeout;
        self.finish_unfinished(deadline).await?;
        let (voters, learners) = nodes(&self.raft);
        if voters.contains_key(&id) {
            return Ok(self.change_result(0));
        }
        if !learners.contains_key(&id) {
            return Err(AdminError::UnknownNode(id));
        }
        if !force {
            self.wait_learner_live(id, deadline).await?;
        }
        self.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), deadline)
            .await
    }

    /// Waits until learner `id` acknowledged an append within
    /// [`Self::recent_ack`] and matched the commit index this leader had
    /// when asked; refuses when `deadline` passes first.
    async fn wait_learner_live(&self, id: NodeId, deadline: Instant) -> Result<(), AdminError> {
        let commit = self
            .raft
            .metrics()
            .borrow()
            .last_applied
            .map(|l| l.index)
            .unwrap_or(0);
        let recent = self.recent_ack();
        loop {
            let acked = self.acks().since(id);
            let matched = matched_index(&self.raft, self.me, id);
            if acked.is_some_and(|a| a <= recent) && matched >= Some(commit) {
                return Ok(());
            }
            if self.raft.metrics().borrow().current_leader != Some(self.me) {
                return Err(not_leader(&self.raft, self.me));
            }
            if Instant::now() >= deadline {
                let acked = acked.map_or("never under this leader".to_string(), |a| {
                    format!("{} ms ago", a.as_millis())
                });
                let matched = matched.map_or("unknown".to_string(), |m| m.to_string());
                return Err(AdminError::Refused(format!(
                    "node {id} is not promoted: it last acknowledged the leader {acked} \
                     (needed within {} ms) and matched index {matched} (needed {commit}); \
                     it is down, unreachable, far behind, or another node answers at its \
                     address. Check `raft status`; pass --force to promote it anyway",
                    recent.as_millis()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Removes a voter or a learner from the cluster. Re-running a removal
    /// left half-done finishes it and succeeds.
    pub async fn remove(&self, id: NodeId) -> Result<MembershipChange, AdminError> {
        let deadline = Instant::now() + self.write_timeout;
        let (voters, learners) = nodes(&self.raft);
        let was_member = voters.contains_key(&id) || learners.contains_key(&id);
        self.finish_unfinished(deadline).await?;
        let (voters, learners) = nodes(&self.raft);
        if was_member && !voters.contains_key(&id) && !learners.contains_key(&id) {
            // Finishing the earlier change removed it.
            return Ok(self.change_result(0));
        }
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
        self.change_membership(change, deadline).await
    }

    /// Turns voter `id` into a learner (it keeps receiving the log, so it
    /// sees that it no longer votes); a learner already is one.
    pub async fn demote(&self, id: NodeId) -> Result<MembershipChange, AdminError> {
        let deadline = Instant::now() + self.write_timeout;
        self.finish_unfinished(deadline).await?;
        let (voters, learners) = nodes(&self.raft);
        if learners.contains_key(&id) {
            return Ok(self.change_result(0));
        }
        if !voters.contains_key(&id) {
            return Err(AdminError::UnknownNode(id));
        }
        if voters.len() == 1 {
            return Err(AdminError::InvalidArgument(format!(
                "node {id} is the last voter"
            )));
        }
        self.change_membership_retaining(
            ChangeMembers::RemoveVoters(BTreeSet::from([id])),
            deadline,
            true,
        )
        .await
    }

    /// Finishes a change left half-done (a joint configuration whose second
    /// step was never proposed, e.g. because the leader changed): proposes
    /// its target voters alone.
    pub(crate) async fn finish_unfinished(&self, deadline: Instant) -> Result<(), AdminError> {
        if self.raft.metrics().borrow().current_leader != Some(self.me) {
            return Err(not_leader(&self.raft, self.me));
        }
        if unfinished_change(&self.raft).is_none() {
            return Ok(());
        }
        // Its proposer may still be driving it: let that step commit first.
        self.wait_in_flight(deadline).await?;
        let Some(target) = unfinished_change(&self.raft) else {
            return Ok(());
        };
        tracing::info!(voters = ?target, "finishing an unfinished membership change first");
        self.change_membership(ChangeMembers::ReplaceAllVoters(target), deadline)
            .await
            .map(|_| ())
    }

    /// Waits (until `deadline`) until no membership change is in flight.
    async fn wait_in_flight(&self, deadline: Instant) -> Result<(), AdminError> {
        while let Some(at) = membership_in_flight(&self.raft) {
            if Instant::now() >= deadline {
                return Err(AdminError::NoQuorum(format!(
                    "an earlier membership change (log index {at}) is still not committed \
                     after {} ms; a majority of the voters must be up and reachable for it \
                     to complete",
                    self.write_timeout.as_millis()
                )));
            }
            tokio::time::sleep(self.retry_pause).await;
        }
        Ok(())
    }

    /// Proposes a membership change, waiting (until `deadline`) for a change
    /// still in progress to finish first.
    ///
    /// The change runs in its own task: when it is not committed by
    /// `deadline` (no quorum) the caller gets [`AdminError::NoQuorum`] and
    /// the task goes on, so the change completes (both steps of a joint
    /// change) once a majority is back, or ends when this node stops leading.
    async fn change_membership(
        &self,
        change: ChangeMembers<NodeId, BasicNode>,
        deadline: Instant,
    ) -> Result<MembershipChange, AdminError> {
        self.change_membership_retaining(change, deadline, false)
            .await
    }

    /// [`Self::change_membership`]; with `retain`, voters it removes stay
    /// as learners.
    async fn change_membership_retaining(
        &self,
        change: ChangeMembers<NodeId, BasicNode>,
        deadline: Instant,
        retain: bool,
    ) -> Result<MembershipChange, AdminError> {
        loop {
            // Wait here for a change still in flight rather than have
            // openraft refuse (and log) every retry.
            self.wait_in_flight(deadline).await?;
            let raft = self.raft.clone();
            let proposal = change.clone();
            let task = tokio::spawn(async move { raft.change_membership(proposal, retain).await });
            let left = deadline.saturating_duration_since(Instant::now());
            let outcome = match tokio::time::timeout(left, task).await {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(join)) => {
                    return Err(AdminError::Failed(format!(
                        "membership change task: {join}"
                    )))
                }
                Err(_) => {
                    return Err(AdminError::NoQuorum(format!(
                        "the membership change ({change:?}) was proposed but not committed within \
                         {} ms: a majority of the voters must be up and reachable. It completes by \
                         itself once they are; check with `raft status`, and re-run the same \
                         command to finish it if the leader changed meanwhile",
                        self.write_timeout.as_millis()
                    )))
                }
            };
            match outcome {
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

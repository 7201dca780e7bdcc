//! Leadership transfer, which openraft 0.9 lacks as a primitive, built from
//! its switches and its ordinary vote rules.
//!
//! # Why the old transfer waited ~465 ms
//!
//! openraft 0.9 refuses a vote request while the receiver's *committed*
//! vote (the leader it follows, or itself as leader) was touched less than
//! `leader_lease` (= `election_timeout_max`) ago (`Engine::handle_vote_req`:
//! `vote.is_committed() && now <= vote_last_modified + leader_lease`). A
//! follower touches its vote on every AppendEntries from the leader; the
//! leader touched its own vote only once, when it was established. The old
//! transfer therefore stopped heartbeats and slept 1.5 × the lease so that
//! *every* voter would grant the target.
//!
//! # The transfer
//!
//! The target needs a majority, not every voter. Where the leader and the
//! target alone are a majority of every configuration (any 2- or 3-voter
//! cluster) the leader's own grant is enough, and the leader's lease on its
//! own vote ran out `leader_lease` after it was elected (normally long ago):
//!
//! 1. every voter but the target holds its election timer
//!    ([`ElectionHold`], asked over the `HoldElection` RPC), so no third
//!    node competes with the target;
//! 2. *fast path only*: wait until this leader has led for longer than the
//!    lease (usually no wait), before any write is paused;
//! 3. the leader pauses its proposals ([`Proposer::pause`]; proposals
//!    already admitted finish first), so its log stops growing;
//! 4. it waits until the target has matched its whole log;
//! 5. *slow path only* (the leader and the target are not a majority, e.g.
//!    5 voters): it stops heartbeats and waits until the followers' lease
//!    ran out, as before;
//! 6. the target campaigns (the `Campaign` RPC) with term + 1; the old
//!    leader grants (its lease is over, the target's log is at least as
//!    up to date as its own), which makes it step down; followers still
//!    under the lease refuse, which changes nothing; with the old leader's
//!    vote the target has a majority and is leader;
//! 7. the leader resumes its proposals once its metrics name the target:
//!    held writes then go to the new leader.
//!
//! # Why this keeps safety (I1-I8, linearizable reads)
//!
//! Nothing here bypasses a raft rule: the target becomes leader only by
//! winning an ordinary election, with votes persisted by a majority whose
//! logs are no more up to date than its own (openraft checks the
//! candidate's last log id against each voter's before granting). So there
//! is at most one leader per term and every committed entry is in the new
//! leader's log (I7); the state machine applies the same log on every node,
//! so I1-I6 and I8, which are decided inside apply, are untouched.
//! Linearizable reads do not rest on the lease either: openraft 0.9 serves a
//! read index only after a quorum acknowledged a heartbeat carrying the
//! leader's vote (`Raft::get_read_log_id`, used by `RaftNode::read_index`),
//! and the old leader gives up leadership (and cannot gather such a quorum:
//! a majority holds a greater vote) the moment it grants the target. The
//! lease the old transfer waited out only keeps a stable leader from being
//! disturbed; the leader skipping it here is the leader consenting to its
//! own replacement. The held election timers and the paused proposals are
//! liveness measures (only the target campaigns; its log is the longest).
//!
//! [`ElectionHold`] is also what the transport serves to a transfer run by
//! another node.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::batcher::Proposer;
use crate::error::AdminError;
use crate::membership::{matched_index, nodes, not_leader};
use crate::network::client::{Channels, PeerCallError};
use crate::types::typ::Raft;
use crate::types::NodeId;

/// Holds this node's election timer (disables elections) for a while: the
/// timer and the campaign rules of `campaign.rs` look at it (openraft's own
/// timer is off). Cloning shares it.
#[derive(Clone)]
pub struct ElectionHold {
    inner: Arc<Hold>,
}

impl Default for ElectionHold {
    fn default() -> Self {
        Self::new()
    }
}

struct Hold {
    /// Elections are held (disabled) until this many ms after `epoch`.
    until_ms: AtomicU64,
    /// Reference point of `until_ms`.
    epoch: Instant,
}

impl ElectionHold {
    /// An election hold that holds nothing yet.
    pub fn new() -> Self {
        ElectionHold {
            inner: Arc::new(Hold {
                until_ms: AtomicU64::new(0),
                epoch: Instant::now(),
            }),
        }
    }

    /// Whether a hold is running (elections are disabled).
    pub fn is_held(&self) -> bool {
        let now = u64::try_from(self.inner.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        now < self.inner.until_ms.load(Ordering::SeqCst)
    }

    /// Holds elections for `hold`; a longer hold already running wins.
    /// Elections resume when the longest hold ends.
    pub fn hold(&self, hold: Duration) {
        let inner = &self.inner;
        let until = u64::try_from((inner.epoch.elapsed() + hold).as_millis()).unwrap_or(u64::MAX);
        inner.until_ms.fetch_max(until, Ordering::SeqCst);
    }
}

/// Moves leadership away from this node (see the module doc).
pub(crate) struct LeaderTransfer {
    /// This node's raft handle.
    pub raft: Raft,
    /// This node's id.
    pub me: NodeId,
    /// Channels to the other voters.
    pub channels: Channels,
    /// Paused for the whole transfer.
    pub proposer: Proposer,
    /// This node's own election hold.
    pub hold: ElectionHold,
    /// The leader lease (openraft's `leader_lease` is `election_timeout_max`).
    pub election_timeout_max: Duration,
    /// How long the target may take to catch up and to win.
    pub write_timeout: Duration,
}

impl LeaderTransfer {
    /// Moves leadership to `to` (or, with `None`, to the most caught-up other
    /// voter); returns the new leader and its term. Runs on the leader.
    pub async fn transfer(&self, to: Option<NodeId>) -> Result<(NodeId, u64), AdminError> {
        if !self.is_leader() {
            return Err(not_leader(&self.raft, self.me));
        }
        let (voters, _) = nodes(&self.raft);
        let target = match to {
            Some(id) if id == self.me => {
                return Ok((id, self.raft.metrics().borrow().current_term))
            }
            Some(id) if !voters.contains_key(&id) => return Err(AdminError::UnknownNode(id)),
            Some(id) => id,
            None => voters
                .keys()
                .copied()
                .filter(|id| *id != self.me)
                .max_by_key(|id| matched_index(&self.raft, self.me, *id).unwrap_or(0))
                .ok_or_else(|| {
                    AdminError::InvalidArgument("no other voter to transfer to".into())
                })?,
        };
        let target_addr = voters.get(&target).cloned().unwrap_or_default();
        let fast = self.pair_is_majority(target);
        let span = tracing::info_span!("transfer_leader", from = self.me, to = target, fast);
        async {
            // Holds first (an RPC per voter), outside the write pause.
            let hold = self.election_timeout_max * 10;
            for (id, addr) in voters.iter().filter(|(id, _)| **id != target) {
                if *id == self.me {
                    self.hold.hold(hold);
                    continue;
                }
                match self.channels.hold_election(*id, addr, hold).await {
                    Ok(()) | Err(PeerCallError::BadAddress(_)) => {}
                    Err(PeerCallError::Failed(status)) => {
                        tracing::warn!(node = id, %status, "could not hold the election timer of a voter");
                    }
                }
            }
            if fast {
                self.wait_own_lease().await?;
            }
            let _pause_writes = self.proposer.pause().await;
            if !self.is_leader() {
                return Err(not_leader(&self.raft, self.me));
            }
            let result = self.finish(target, &target_addr, fast).await;
            self.raft.runtime_config().heartbeat(true);
            result
        }
        .instrument(span)
        .await
    }

    /// Whether this node still leads.
    fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().current_leader == Some(self.me)
    }

    /// Whether this leader and `target` alone are a majority of every
    /// configuration (both halves of a joint one): then this leader's vote
    /// is all the target needs besides its own.
    fn pair_is_majority(&self, target: NodeId) -> bool {
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        pair_is_majority(membership.get_joint_config(), self.me, target)
    }

    /// Waits until this leader's lease on its own vote ran out (it grants
    /// no vote before): `election_timeout_max` after it was elected.
    /// Nothing is paused yet; usually there is nothing to wait.
    async fn wait_own_lease(&self) -> Result<(), AdminError> {
        let since = self
            .raft
            .with_raft_state(|state| state.vote_last_modified().map(|t| t.elapsed()))
            .await
            .map_err(|e| AdminError::Failed(e.to_string()))?;
        let lease = self.election_timeout_max;
        if let Some(rest) = since.and_then(|since| lease.checked_sub(since)) {
            // A few ms past the lease: openraft refuses up to and including it.
            let rest = rest + Duration::from_millis(5);
            tracing::info!(
                wait_ms = rest.as_millis(),
                "waiting until this leader grants votes"
            );
            tokio::time::sleep(rest).await;
        }
        Ok(())
    }

    /// Waits for the target to catch up, (slow path) lets the followers'
    /// lease lapse, and has the target campaign.
    async fn finish(
        &self,
        target: NodeId,
        addr: &str,
        fast: bool,
    ) -> Result<(NodeId, u64), AdminError> {
        let election_max = self.election_timeout_max;
        self.raft
            .wait(Some(self.write_timeout))
            .metrics(
                |m| {
                    let matched = m.replication.as_ref().and_then(|r| r.get(&target).copied());
                    matched.flatten().map(|l| l.index) >= m.last_log_index
                },
                "the target matched the leader's log",
            )
            .await
            .map_err(|_| {
                AdminError::Timeout(format!("node {target} did not catch up with the leader"))
            })?;
        if !fast {
            self.raft.runtime_config().heartbeat(false);
            // Let every follower's leader lease (election_timeout_max) run out.
            tokio::time::sleep(election_max + election_max / 2).await;
        }
        self.channels
            .campaign(target, addr)
            .await
            .map_err(|e| match e {
                PeerCallError::BadAddress(e) => AdminError::InvalidArgument(e.to_string()),
                PeerCallError::Failed(s) => {
                    AdminError::Failed(format!("node {target} could not campaign: {}", s.message()))
                }
            })?;
        let metrics = self
            .raft
            .wait(Some(self.write_timeout))
            .metrics(|m| m.current_leader == Some(target), "leadership moved")
            .await
            .map_err(|_| AdminError::Timeout(format!("node {target} did not become leader")))?;
        Ok((target, metrics.current_term))
    }
}

/// Whether `a` and `b` together are a majority of every configuration in
/// `configs` (one, or the two of a joint configuration).
fn pair_is_majority(configs: &[std::collections::BTreeSet<NodeId>], a: NodeId, b: NodeId) -> bool {
    configs.iter().all(|voters| {
        let granted = usize::from(voters.contains(&a)) + usize::from(voters.contains(&b));
        granted * 2 > voters.len()
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::pair_is_majority;

    fn set(ids: &[u64]) -> BTreeSet<u64> {
        ids.iter().copied().collect()
    }

    #[test]
    fn leader_and_target_are_a_majority_of_three_not_of_four_or_five() {
        assert!(pair_is_majority(&[set(&[1, 2])], 1, 2));
        assert!(pair_is_majority(&[set(&[1, 2, 3])], 1, 2));
        assert!(!pair_is_majority(&[set(&[1, 2, 3, 4])], 1, 2));
        assert!(!pair_is_majority(&[set(&[1, 2, 3, 4, 5])], 1, 2));
    }

    #[test]
    fn a_joint_configuration_needs_a_majority_of_both_halves() {
        assert!(pair_is_majority(&[set(&[1, 2, 3]), set(&[1, 2, 4])], 1, 2));
        assert!(!pair_is_majority(&[set(&[1, 2, 3]), set(&[2, 4, 5])], 1, 2));
    }
}

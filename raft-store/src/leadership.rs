//! Leadership transfer, which openraft 0.9 lacks as a primitive, built from
//! its switches:
//!
//! 1. the leader pauses its proposals ([`Proposer::pause`]), so no entry
//!    refreshes the followers' leader lease;
//! 2. every voter but the target holds its election timer
//!    ([`ElectionHold`], asked over the `HoldElection` RPC);
//! 3. once the target is caught up, the leader stops heartbeats and waits
//!    until the followers' leader lease ran out;
//! 4. the target campaigns (the `Campaign` RPC); only it can win.
//!
//! [`ElectionHold`] is also what the transport serves to a transfer run by
//! another node.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::batcher::Proposer;
use crate::error::AdminError;
use crate::membership::{matched_index, nodes, not_leader};
use crate::network::client::{Channels, PeerCallError};
use crate::types::typ::Raft;
use crate::types::NodeId;

/// Holds this node's election timer (disables elections) for a while.
/// Cloning shares it.
#[derive(Clone)]
pub struct ElectionHold {
    inner: Arc<Hold>,
}

struct Hold {
    raft: Raft,
    /// Elections are held (disabled) until this many ms after `epoch`.
    until_ms: AtomicU64,
    /// Reference point of `until_ms`.
    epoch: Instant,
}

impl ElectionHold {
    /// The election hold of the node whose raft is `raft`.
    pub fn new(raft: Raft) -> Self {
        ElectionHold {
            inner: Arc::new(Hold {
                raft,
                until_ms: AtomicU64::new(0),
                epoch: Instant::now(),
            }),
        }
    }

    /// Holds elections for `hold`; a longer hold already running wins.
    /// Elections resume when the longest hold ends.
    pub fn hold(&self, hold: Duration) {
        let inner = &self.inner;
        let until = u64::try_from((inner.epoch.elapsed() + hold).as_millis()).unwrap_or(u64::MAX);
        inner.until_ms.fetch_max(until, Ordering::SeqCst);
        inner.raft.runtime_config().elect(false);
        let inner = self.inner.clone();
        tokio::spawn(async move {
            tokio::time::sleep(hold).await;
            let now = u64::try_from(inner.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
            if now >= inner.until_ms.load(Ordering::SeqCst) {
                inner.raft.runtime_config().elect(true);
            }
        });
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
    /// The followers' leader lease.
    pub election_timeout_max: Duration,
    /// How long the target may take to catch up and to win.
    pub write_timeout: Duration,
}

impl LeaderTransfer {
    /// Moves leadership to `to` (or, with `None`, to the most caught-up other
    /// voter); returns the new leader and its term. Runs on the leader.
    pub async fn transfer(&self, to: Option<NodeId>) -> Result<(NodeId, u64), AdminError> {
        let is_leader = self.raft.metrics().borrow().current_leader == Some(self.me);
        if !is_leader {
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
        let hold = self.election_timeout_max * 10;
        let _pause_writes = self.proposer.pause().await;
        let span = tracing::info_span!("transfer_leader", from = self.me, to = target);
        async {
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
            let result = self.finish(target, &target_addr).await;
            self.raft.runtime_config().heartbeat(true);
            result
        }
        .instrument(span)
        .await
    }

    /// Waits for the target to catch up, lets the followers' lease lapse,
    /// and has the target campaign.
    async fn finish(&self, target: NodeId, addr: &str) -> Result<(NodeId, u64), AdminError> {
        let election_max = self.election_timeout_max;
        let caught_up_by = Instant::now() + self.write_timeout;
        loop {
            let last = self.raft.metrics().borrow().last_log_index;
            if matched_index(&self.raft, self.me, target) >= last {
                break;
            }
            if Instant::now() >= caught_up_by {
                return Err(AdminError::Timeout(format!(
                    "node {target} did not catch up with the leader"
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.raft.runtime_config().heartbeat(false);
        // Let every follower's leader lease (election_timeout_max) run out.
        tokio::time::sleep(election_max + election_max / 2).await;
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

//! The write path of [`RaftNode`]: propose locally, or forward to the leader
//! (one hop, batched with the other writes this node forwards at that
//! moment: `crate::network::forward_batch`) and retry across an election
//! within the write's timeout,
//! retrying only when the write certainly was not appended, or when the
//! command may apply twice ([`Resend::Idempotent`]).
//!
//! A forward follows leadership: while it is in flight this node watches its
//! own raft metrics, and as soon as they show another leader or a newer term
//! than when the forward started, the call is abandoned instead of waiting
//! for a deposed leader (paused, cut off) until the deadline. The deposed
//! leader may still have appended the command, so the outcome is unknown.

use std::time::Duration;

use openraft::{BasicNode, RaftMetrics};
use tokio::time::Instant;

use super::RaftNode;
use crate::batcher::{check_size, Proposed};
use crate::error::WriteError;
use crate::network::client::Forwarded;
use crate::state_machine::StateMachine;
use crate::types::{Applied, NodeId};

/// Whether a write may be sent again after an attempt whose outcome is
/// unknown (a forward abandoned when leadership moved, or cut off after it
/// was sent).
///
/// A resent command may apply twice: the first attempt may still commit
/// through the deposed leader, or may already have. Only a command whose
/// effect is the same however often it applies may be resent; any other
/// write reports the unknown outcome to its caller, who decides (an
/// object-store put can be retried with a resource-version precondition).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resend {
    /// Never resend: an unknown outcome is [`WriteError::Unknown`].
    Never,
    /// Resend until the deadline: the command is idempotent in effect.
    Idempotent,
}

impl<SM: StateMachine> RaftNode<SM> {
    /// Proposes `command` (in the state machine's wire format), forwarding to
    /// the leader when this node is not it, within
    /// [`crate::NodeConfig::write_timeout`]. A forward that is in flight when
    /// leadership moves is abandoned and reported as
    /// [`WriteError::Unknown`] (the deposed leader may still have appended
    /// it), never resent: see [`Resend`].
    ///
    /// # Errors
    /// [`WriteError::Rejected`] for a malformed command, [`WriteError::NoLeader`]
    /// when no leader took it within the write timeout (certainly not applied),
    /// [`WriteError::Unknown`] when it was sent but its outcome is unknown,
    /// [`WriteError::ReplyMismatch`] when it applied but its response is lost.
    pub async fn write(&self, command: Vec<u8>) -> Result<Applied, WriteError> {
        let timeout = self.inner.config.write_timeout;
        self.write_with(command, timeout, Resend::Never).await
    }

    /// Proposes a command whose effect is the same however many times it
    /// applies (a liveness heartbeat, say), within `timeout`: a forward
    /// abandoned because leadership moved, or whose outcome is unknown, is
    /// sent again to the leader this node now knows ([`Resend::Idempotent`]).
    ///
    /// # Errors
    /// As [`RaftNode::write`]; [`WriteError::Unknown`] only when the last
    /// attempt's outcome is unknown at `timeout`.
    pub async fn write_idempotent(
        &self,
        command: Vec<u8>,
        timeout: Duration,
    ) -> Result<Applied, WriteError> {
        self.write_with(command, timeout, Resend::Idempotent).await
    }

    /// Proposes `command` within `timeout`; `resend` says whether an
    /// attempt whose outcome is unknown may be sent again.
    ///
    /// # Errors
    /// As [`RaftNode::write`].
    pub async fn write_with(
        &self,
        command: Vec<u8>,
        timeout: Duration,
        resend: Resend,
    ) -> Result<Applied, WriteError> {
        // The write path's one check on this node (services do not check
        // again); a leader checks a forwarded command once more, as the
        // node it enters (`TransportService::forward`).
        // Fields first, so that an oversized command names the field to
        // shorten; then the size of the whole.
        SM::validate(&command).map_err(|e| WriteError::Rejected(e.to_string()))?;
        check_size(&command).map_err(|e| WriteError::Rejected(e.to_string()))?;
        let started = Instant::now();
        let deadline = started + timeout;
        let waited_ms = || u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut unknown = None;
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
                    Ok(Err(Proposed::Abandoned(why))) => {
                        if resend == Resend::Never {
                            return Err(WriteError::Unknown(why));
                        }
                        unknown = Some(why);
                        None
                    }
                    Ok(Err(Proposed::ReplyMismatch {
                        log_index,
                        commands,
                        replies,
                    })) => {
                        return Err(WriteError::ReplyMismatch {
                            log_index,
                            commands,
                            replies,
                        })
                    }
                }
            };
            if let Some((leader, node)) = hint {
                match self.forward(leader, &node.addr, &command, deadline).await {
                    Ok(Forwarded::Applied(applied)) => return Ok(applied),
                    Ok(Forwarded::Retry) => {}
                    Err(WriteError::Unknown(why)) if resend == Resend::Idempotent => {
                        unknown = Some(why);
                    }
                    Err(e) => return Err(e),
                }
            }
            if Instant::now() >= deadline {
                return Err(match unknown {
                    Some(why) => WriteError::Unknown(why),
                    None => WriteError::NoLeader {
                        waited_ms: waited_ms(),
                    },
                });
            }
            tokio::time::sleep(self.retry_pause()).await;
        }
    }

    /// Forwards `command` to `leader` at `addr`, following leadership: the
    /// call is abandoned as soon as this node's raft metrics show another
    /// leader or a newer term than when it started (a deposed leader, paused
    /// or cut off, may hold it until the deadline). An abandoned forward may
    /// still have been appended by the deposed leader, so it is
    /// [`WriteError::Unknown`]; a forward not started because leadership
    /// already moved is [`Forwarded::Retry`] (certainly not sent).
    async fn forward(
        &self,
        leader: NodeId,
        addr: &str,
        command: &[u8],
        deadline: Instant,
    ) -> Result<Forwarded, WriteError> {
        let mut metrics = self.inner.raft.metrics();
        let term = metrics.borrow_and_update().current_term;
        let moved = |m: &RaftMetrics<NodeId, BasicNode>| {
            m.current_term != term || m.current_leader.is_some_and(|l| l != leader)
        };
        if moved(&metrics.borrow()) {
            return Ok(Forwarded::Retry);
        }
        let leadership_moved = async {
            loop {
                if metrics.changed().await.is_err() {
                    // Raft stopped: let the call end on its own.
                    std::future::pending::<()>().await;
                }
                let m = metrics.borrow_and_update();
                if moved(&m) {
                    return (m.current_leader, m.current_term);
                }
            }
        };
        tokio::select! {
            biased;
            forwarded = self.inner.forwards.forward(&self.inner.channels, leader, addr, command, deadline) => forwarded,
            (now, now_term) = leadership_moved => {
                tracing::debug!(leader, term, ?now, now_term, "forward abandoned: leadership moved");
                Err(WriteError::Unknown(format!(
                    "the forward to leader {leader} (term {term}) was abandoned when leadership \
                     moved (leader {now:?}, term {now_term}); the deposed leader may still commit it"
                )))
            }
        }
    }
}

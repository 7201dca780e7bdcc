//! Reads and proposals of a leader-side actor, bound to one raft term.
//!
//! The application's leader-side actors (a coordinator, a launcher, an
//! autopilot) act for the leader of one term. What they read and propose
//! must be of that leader, never of another: a read served through another
//! node's read-index hands a deposed leader its successor's fresh state (to
//! compare with its own stale observations), and a proposal forwarded to
//! the successor lands a deposed leader's decision in the successor's term.
//! So these calls never leave this node:
//!
//! - [`RaftNode::read_as_leader`] confirms with a quorum that this node
//!   still leads `term` (openraft's read-index), waits for local apply, and
//!   checks again that it leads `term` before it reads;
//! - [`RaftNode::propose_as_leader`] proposes through this node's own raft
//!   only while it leads `term`; a node that lost leadership gets
//!   [`Leading::NotLeading`] and the command is certainly not appended.
//!
//! They do not fence on their own: an entry this node appended while it led
//! `term` can still commit under the next leader. What the application
//! decides must therefore also carry `term` for its state machine to check
//! at apply (the pool does: `pool::fence`).

use std::time::Duration;

use openraft::error::RaftError;
use tokio::time::Instant;

use super::RaftNode;
use crate::batcher::Proposed;
use crate::state_machine::StateMachine;
use crate::types::{Applied, NodeId};

/// Why a call bound to a raft term did not run (nothing was read or
/// appended, except where a variant says otherwise).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum Leading {
    /// This node does not lead `term` (any more).
    #[error("this node does not lead raft term {term} (current term {current_term}, leader {current_leader:?})")]
    NotLeading {
        /// The term the caller acts for.
        term: u64,
        /// This node's current term.
        current_term: u64,
        /// The leader this node knows of.
        current_leader: Option<NodeId>,
    },
    /// A quorum did not confirm this node's leadership of `term` within
    /// the write timeout (cut off, or the followers are slow).
    #[error("leadership of raft term {term} not confirmed by a quorum within {waited_ms} ms")]
    NotConfirmed {
        /// The term the caller acts for.
        term: u64,
        /// How long it waited.
        waited_ms: u64,
    },
    /// This node did not apply up to the read index in time.
    #[error("timed out applying up to read index {read_index}")]
    Timeout {
        /// The index the read must observe.
        read_index: u64,
    },
    /// The proposal was appended, but this node stopped leading before it
    /// committed: the outcome is unknown.
    #[error("outcome unknown: {0}")]
    Unknown(String),
    /// Raft stopped, or the command was refused as malformed.
    #[error("{0}")]
    Failed(String),
}

impl<SM: StateMachine> RaftNode<SM> {
    /// Whether this node leads raft `term`.
    ///
    /// # Errors
    /// [`Leading::NotLeading`] naming the current term and leader.
    pub fn check_leading(&self, term: u64) -> Result<(), Leading> {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        if m.current_term == term && m.current_leader == Some(self.id()) {
            Ok(())
        } else {
            Err(Leading::NotLeading {
                term,
                current_term: m.current_term,
                current_leader: m.current_leader,
            })
        }
    }

    /// A linearizable read by the leader of `term`, served by this node
    /// alone (see the module doc): `f` runs on the applied state with its
    /// applied index, which includes every write acknowledged before the
    /// call.
    ///
    /// # Errors
    /// [`Leading::NotLeading`] before or after the read index;
    /// [`Leading::NotConfirmed`] when no quorum confirmed it in time;
    /// [`Leading::Timeout`]; [`Leading::Failed`] when raft stopped.
    pub async fn read_as_leader<T>(
        &self,
        term: u64,
        f: impl FnOnce(&SM, u64) -> T,
    ) -> Result<T, Leading> {
        self.check_leading(term)?;
        let started = Instant::now();
        let timeout = self.inner.config.write_timeout;
        let waited_ms = || u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let read_index =
            match tokio::time::timeout(timeout, self.inner.raft.get_read_log_id()).await {
                Ok(Ok((read, _))) => read.map_or(0, |l| l.index),
                Ok(Err(RaftError::Fatal(e))) => return Err(Leading::Failed(e.to_string())),
                Ok(Err(RaftError::APIError(_))) => {
                    self.check_leading(term)?;
                    return Err(Leading::NotConfirmed {
                        term,
                        waited_ms: waited_ms(),
                    });
                }
                Err(_) => {
                    return Err(Leading::NotConfirmed {
                        term,
                        waited_ms: waited_ms(),
                    })
                }
            };
        let remaining = timeout
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1));
        self.inner
            .raft
            .wait(Some(remaining))
            .applied_index_at_least(Some(read_index), "leader read")
            .await
            .map_err(|_| Leading::Timeout { read_index })?;
        // The read index confirmed `term` at one moment; a read served after
        // another leader took over would mix its writes into this leader's
        // view.
        self.check_leading(term)?;
        Ok(self.read_local(f))
    }

    /// Proposes `command` as the leader of `term`, through this node's own
    /// raft only (never forwarded).
    ///
    /// # Errors
    /// [`Leading::NotLeading`] (certainly not appended) when this node does
    /// not lead `term`; [`Leading::Unknown`] when it stopped leading while
    /// the entry was in flight; [`Leading::Failed`] for a malformed command
    /// or a stopped raft.
    pub async fn propose_as_leader(&self, term: u64, command: Vec<u8>) -> Result<Applied, Leading> {
        self.check_leading(term)?;
        Self::admissible(&command)?;
        let proposed = self.propose_local(command).await;
        self.as_leader_of(term, proposed)
    }

    /// Proposes every command of `commands` as the leader of `term`, as
    /// [`RaftNode::propose_as_leader`] does one: all are queued to the
    /// batcher, in order, before any answer is awaited, so they share log
    /// entries (up to the batcher's limits) instead of one commit round
    /// trip each. One outcome per command, in order; a command that is
    /// malformed or too large fails alone, and nothing is proposed when
    /// this node does not lead `term`.
    ///
    /// # Errors
    /// [`Leading::NotLeading`] (nothing appended) when this node does not
    /// lead `term`; each command's own outcome otherwise.
    pub async fn propose_all_as_leader(
        &self,
        term: u64,
        commands: Vec<Vec<u8>>,
    ) -> Result<Vec<Result<Applied, Leading>>, Leading> {
        self.check_leading(term)?;
        let mut outcomes: Vec<Option<Result<Applied, Leading>>> = Vec::new();
        let mut admitted = Vec::new();
        for command in commands {
            match Self::admissible(&command) {
                Ok(()) => {
                    admitted.push(command);
                    outcomes.push(None);
                }
                Err(refused) => outcomes.push(Some(Err(refused))),
            }
        }
        let mut proposed = self.inner.proposer.propose_all(admitted).await.into_iter();
        Ok(outcomes
            .into_iter()
            .map(|refused| match refused {
                Some(refused) => refused,
                None => match proposed.next() {
                    Some(outcome) => self.as_leader_of(term, outcome),
                    None => Err(Leading::Failed("the batcher lost a proposal".into())),
                },
            })
            .collect())
    }

    /// A command the batcher and the state machine accept.
    fn admissible(command: &[u8]) -> Result<(), Leading> {
        crate::batcher::check_size(command).map_err(|e| Leading::Failed(e.to_string()))?;
        SM::validate(command).map_err(|e| Leading::Failed(e.to_string()))
    }

    /// A local proposal's outcome, in the terms of leading `term`.
    fn as_leader_of(
        &self,
        term: u64,
        proposed: Result<Applied, Proposed>,
    ) -> Result<Applied, Leading> {
        match proposed {
            Ok(applied) => Ok(applied),
            // Certainly not appended: the batcher found this node not
            // leading (its metrics may lag the batcher's by a moment).
            Err(Proposed::NotLeader(_)) => {
                Err(self
                    .check_leading(term)
                    .err()
                    .unwrap_or(Leading::NotLeading {
                        term,
                        current_term: term,
                        current_leader: None,
                    }))
            }
            Err(Proposed::Abandoned(why)) => Err(Leading::Unknown(why)),
            Err(Proposed::Fatal(why)) => Err(Leading::Failed(why)),
            Err(mismatch @ Proposed::ReplyMismatch { .. }) => {
                Err(Leading::Failed(format!("{mismatch:?}")))
            }
        }
    }
}

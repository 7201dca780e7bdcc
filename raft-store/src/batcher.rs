//! The leader's write batcher: local proposals (this node's writes and the
//! writes followers forward here) queue into one task that proposes up to
//! [`MAX_BATCH`] of them (and at most [`MAX_BATCH_BYTES`]) as one log entry,
//! [`BATCHES_IN_FLIGHT`] entries at a time, and hands every proposer its own
//! response.
//!
//! Why bytes are bounded: sled 0.34 writes any page larger than a quarter of
//! its segment size to a file of its own under `blobs/` and never syncs it,
//! so an entry that made a page that large could be acknowledged while it
//! lived only in the page cache. A command is at most [`MAX_COMMAND_BYTES`]
//! and an entry at most [`MAX_BATCH_BYTES`] (or one command), so a leaf page
//! of sled's log tree (at most 17 entries before it splits) stays well under
//! the blob threshold of the segment size new databases get (see
//! `crate::db`); `docs/storage.md` has the arithmetic.
//!
//! [`Proposer`] is the handle: the node's write path and the transport's
//! forward service both propose through it. It also owns the write pause a
//! leadership transfer takes (see [`crate::leadership`]).
//!
//! Why batch: openraft 0.9 submits every `client_write` as its own one-entry
//! append and waits for that append's flush before it handles the next
//! message, so without batching the leader fsyncs once per write. While one
//! batch is being made durable the next one grows, so one fsync commits many
//! writes. Every command of a batch applies at the entry's index, atomically.

use std::sync::Arc;

use openraft::error::{ClientWriteError, RaftError};
use openraft::BasicNode;
use tokio::sync::{mpsc, oneshot, RwLock, RwLockWriteGuard, Semaphore};
use tracing::Instrument;

use crate::error::InvalidCommand;
use crate::types::typ::Raft;
use crate::types::{Applied, Command, NodeId};

/// Most commands in one log entry.
pub const MAX_BATCH: usize = 256;
/// Most bytes of commands in one log entry; a single larger command (up to
/// [`MAX_COMMAND_BYTES`]) is an entry of its own.
pub const MAX_BATCH_BYTES: usize = 64 * 1024;
/// Largest command, in bytes, that the store accepts (object payloads are
/// bounded lower, see `crate::objects::MAX_PAYLOAD_BYTES`).
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;
/// Batches proposed to raft and not yet answered. While one is being made
/// durable the next ones queue here, so they grow: one fsync then commits
/// many writes (openraft 0.9 makes the leader wait for each append's flush).
pub const BATCHES_IN_FLIGHT: usize = 2;
/// Proposals that may wait for the batcher before `propose` waits too.
pub const QUEUE_DEPTH: usize = 4096;

/// Why a local proposal was not applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Proposed {
    /// This node is not the leader (with the leader it knows of); the
    /// command was certainly not applied.
    NotLeader(Option<(NodeId, BasicNode)>),
    /// Raft stopped.
    Fatal(String),
    /// This node stopped leading while the batch was in flight: the entry
    /// may still commit through the next leader (or may have been cut off
    /// its log), so the outcome is unknown.
    Abandoned(String),
    /// The batch entry was applied at `log_index`, but the state machine
    /// returned `replies` responses for its `commands` commands: a broken
    /// invariant. The command took effect; its response is lost.
    ReplyMismatch {
        /// The log index of the batch entry.
        log_index: u64,
        /// Commands in the batch.
        commands: usize,
        /// Responses that came back.
        replies: usize,
    },
}

/// One write waiting for the batcher.
struct Proposal {
    command: Vec<u8>,
    reply: oneshot::Sender<Result<Applied, Proposed>>,
}

/// Proposes commands through this node's raft, batched. Cloning shares the
/// batcher task; it stops when the last clone is dropped.
#[derive(Clone)]
pub struct Proposer {
    /// Local proposals, grouped into batch entries by the batcher task.
    queue: mpsc::Sender<Proposal>,
    /// Every proposal waits on this (read side) while a leadership transfer
    /// runs here (write side held by the transfer), so that no entry
    /// refreshes the followers' leader lease.
    transfer: Arc<RwLock<()>>,
}

impl Proposer {
    /// Starts the batcher task over `raft`. Needs a tokio runtime.
    pub fn start(raft: Raft, observer: crate::observe::SharedObserver) -> Self {
        let (queue, proposals) = mpsc::channel(QUEUE_DEPTH);
        tokio::spawn(run_batcher(raft, proposals, observer));
        Proposer {
            queue,
            transfer: Arc::new(RwLock::new(())),
        }
    }

    /// Proposes `command` (in the state machine's wire format), batched with
    /// other proposals queued at the same time.
    ///
    /// # Errors
    /// [`Proposed::NotLeader`] (certainly not applied) when this node is not
    /// the leader; [`Proposed::Fatal`] when raft or the batcher stopped;
    /// [`Proposed::ReplyMismatch`] when the batch applied but its responses
    /// cannot be matched to its commands.
    pub async fn propose(&self, command: Vec<u8>) -> Result<Applied, Proposed> {
        // Every local proposal, forwarded ones included, waits while a
        // leadership transfer runs here: an appended entry would refresh the
        // followers' leader lease and they would refuse the target's votes.
        let _transfer = self.transfer.read().await;
        let (reply, outcome) = oneshot::channel();
        self.queue
            .send(Proposal { command, reply })
            .await
            .map_err(|_| Proposed::Fatal("the batcher stopped".into()))?;
        outcome
            .await
            .map_err(|_| Proposed::Fatal("the batcher dropped the proposal".into()))?
    }

    /// Proposes every command of `commands` (a follower's forwarded batch):
    /// all are queued before any answer is awaited, so they join the same
    /// batch entries as if each had been proposed alone at that moment. One
    /// outcome per command, in order, as [`Proposer::propose`] gives it.
    pub async fn propose_all(&self, commands: Vec<Vec<u8>>) -> Vec<Result<Applied, Proposed>> {
        let _transfer = self.transfer.read().await;
        let mut waiting = Vec::with_capacity(commands.len());
        for command in commands {
            let (reply, outcome) = oneshot::channel();
            let queued = self.queue.send(Proposal { command, reply }).await;
            waiting.push(queued.ok().map(|()| outcome));
        }
        let mut outcomes = Vec::with_capacity(waiting.len());
        for outcome in waiting {
            outcomes.push(match outcome {
                None => Err(Proposed::Fatal("the batcher stopped".into())),
                Some(outcome) => outcome.await.unwrap_or_else(|_| {
                    Err(Proposed::Fatal("the batcher dropped the proposal".into()))
                }),
            });
        }
        outcomes
    }

    /// Proposals waiting in the queue for the batcher task (this node's
    /// writes and the writes forwarded to it), out of [`QUEUE_DEPTH`]; at
    /// that depth a proposer waits to be queued.
    pub fn queued(&self) -> usize {
        self.queue.max_capacity() - self.queue.capacity()
    }

    /// Pauses proposals until the returned guard is dropped (a leadership
    /// transfer holds it); waits for proposals already admitted.
    pub async fn pause(&self) -> RwLockWriteGuard<'_, ()> {
        self.transfer.write().await
    }
}

/// Refuses a command over [`MAX_COMMAND_BYTES`] before it is proposed or
/// forwarded.
///
/// # Errors
/// [`InvalidCommand`] naming the size and the limit.
pub fn check_size(command: &[u8]) -> Result<(), InvalidCommand> {
    if command.len() > MAX_COMMAND_BYTES {
        return Err(InvalidCommand::new(format!(
            "command is {} bytes; the limit is {MAX_COMMAND_BYTES}: write it in smaller parts",
            command.len()
        )));
    }
    Ok(())
}

/// Groups queued proposals into batch entries and proposes them.
async fn run_batcher(
    raft: Raft,
    mut queue: mpsc::Receiver<Proposal>,
    observer: crate::observe::SharedObserver,
) {
    let in_flight = Arc::new(Semaphore::new(BATCHES_IN_FLIGHT));
    // A proposal taken from the queue that did not fit the previous batch.
    let mut carried: Option<Proposal> = None;
    loop {
        let first = match carried.take() {
            Some(p) => p,
            None => match queue.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let mut bytes = first.command.len();
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(p) if bytes + p.command.len() > MAX_BATCH_BYTES => {
                    carried = Some(p);
                    break;
                }
                Ok(p) => {
                    bytes += p.command.len();
                    batch.push(p);
                }
                Err(_) => break,
            }
        }
        let raft = raft.clone();
        observer.batch_proposed(batch.len());
        let span = tracing::trace_span!("propose_batch", commands = batch.len());
        tokio::spawn(
            async move {
                propose_batch(&raft, batch).await;
                drop(permit);
            }
            .instrument(span),
        );
    }
}

/// Proposes one batch as one log entry and answers each of its proposers.
///
/// A batch proposed while this node leads is abandoned as soon as its raft
/// metrics show another term or another leader: openraft 0.9 does not
/// always answer a `client_write` whose entry a deposed leader had appended
/// (seen after a `SIGSTOP` of the leader: two such writes held both
/// [`BATCHES_IN_FLIGHT`] permits, and when the node led again no write
/// committed on it, every one timing out, for over 30 s). Its proposers get
/// [`Proposed::Abandoned`] and the permit goes back.
async fn propose_batch(raft: &Raft, batch: Vec<Proposal>) {
    let (commands, replies): (Vec<Vec<u8>>, Vec<_>) =
        batch.into_iter().map(|p| (p.command, p.reply)).unzip();
    let mut metrics = raft.metrics();
    let (me, term, leading) = {
        let m = metrics.borrow_and_update();
        (m.id, m.current_term, m.current_leader == Some(m.id))
    };
    let deposed = async {
        if !leading {
            // Not leading now: client_write answers ForwardToLeader.
            return std::future::pending().await;
        }
        loop {
            if metrics.changed().await.is_err() {
                // Raft stopped: client_write answers on its own.
                return std::future::pending().await;
            }
            let m = metrics.borrow_and_update();
            if m.current_term != term || m.current_leader != Some(me) {
                return (m.current_leader, m.current_term);
            }
        }
    };
    let written = tokio::select! {
        biased;
        written = raft.client_write(Command(commands)) => written,
        (leader, now) = deposed => {
            tracing::debug!(term, ?leader, now, commands = replies.len(), "batch abandoned: leadership moved");
            let why = format!(
                "node {me} stopped leading (term {term}) while the write was in flight (now leader {leader:?}, term {now}); it may still commit through the next leader"
            );
            for reply in replies {
                let _ = reply.send(Err(Proposed::Abandoned(why.clone())));
            }
            return;
        }
    };
    let outcomes = match written {
        Ok(written) => distribute(written.log_id.index, written.data.0, replies.len()),
        Err(e) => {
            let failure = match e {
                RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
                    Proposed::NotLeader(f.leader_id.zip(f.leader_node))
                }
                other => Proposed::Fatal(other.to_string()),
            };
            vec![Err(failure); replies.len()]
        }
    };
    for (reply, outcome) in replies.into_iter().zip(outcomes) {
        // A proposer that stopped waiting (its write timed out) is not an
        // error of the batch.
        let _ = reply.send(outcome);
    }
}

/// Matches the responses of a batch applied at `log_index` to its
/// `commands` commands, in order. A count that differs is a broken
/// invariant (the state machine storage answers every command of a normal
/// entry): every proposer of the batch gets [`Proposed::ReplyMismatch`]
/// instead of a response that may belong to another command.
fn distribute(
    log_index: u64,
    responses: Vec<Vec<u8>>,
    commands: usize,
) -> Vec<Result<Applied, Proposed>> {
    if responses.len() != commands {
        tracing::error!(
            log_index,
            commands,
            replies = responses.len(),
            "a batch's response count differs from its command count"
        );
        let mismatch = Proposed::ReplyMismatch {
            log_index,
            commands,
            replies: responses.len(),
        };
        return vec![Err(mismatch); commands];
    }
    responses
        .into_iter()
        .map(|response| {
            Ok(Applied {
                log_index,
                response,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_command_gets_its_own_response_at_the_batch_index() {
        let outcomes = distribute(7, vec![b"a".to_vec(), b"b".to_vec()], 2);
        assert_eq!(
            outcomes,
            vec![
                Ok(Applied {
                    log_index: 7,
                    response: b"a".to_vec()
                }),
                Ok(Applied {
                    log_index: 7,
                    response: b"b".to_vec()
                }),
            ]
        );
    }

    #[test]
    fn a_reply_count_that_differs_from_the_command_count_is_an_error() {
        let mismatch = Proposed::ReplyMismatch {
            log_index: 9,
            commands: 3,
            replies: 2,
        };
        let outcomes = distribute(9, vec![Vec::new(), Vec::new()], 3);
        assert_eq!(outcomes, vec![Err(mismatch); 3]);
        let mismatch = Proposed::ReplyMismatch {
            log_index: 9,
            commands: 1,
            replies: 0,
        };
        assert_eq!(distribute(9, Vec::new(), 1), vec![Err(mismatch)]);
    }
}

//! Follower-side batching of forwarded writes: the writes a follower
//! forwards to one leader queue into one task per leader, which sends every
//! write queued at that moment (up to [`MAX_BATCH`] commands and
//! [`MAX_BATCH_BYTES`]) in one `ForwardBatch` call, at most
//! [`FORWARDS_IN_FLIGHT`] calls at a time, and hands every caller its own
//! result. This is the leader's batcher (`crate::batcher`) on the other side
//! of the hop: while calls are in flight the next batch grows, so one call
//! carries many writes instead of one call (one HTTP/2 stream, one task on
//! the leader) per write.
//!
//! What each caller gets is what a call of its own would have given
//! ([`Forwarded`] or a [`WriteError`]): a batch that certainly never reached
//! the leader (`never_sent`, or another node answering at its address) is
//! [`Forwarded::Retry`] for every caller; a batch sent whose reply is lost is
//! [`WriteError::Unknown`] for every caller; a reply whose result count
//! differs from the command count is `Unknown` for every caller (never a
//! result that may belong to another command). A leader that predates
//! `ForwardBatch` answers `UNIMPLEMENTED` before looking at the commands, so
//! the batch falls back to one `Forward` call per command. A caller that
//! stopped waiting before its batch was sent (its write abandoned when
//! leadership moved) is left out of the batch.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use proto::raft::{forward_result, ForwardBatchRequest};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;
use tracing::Instrument;

use super::client::{never_sent, until, Channels, Forwarded, NODE_ID};
use crate::batcher::{MAX_BATCH, MAX_BATCH_BYTES};
use crate::error::WriteError;
use crate::types::{Applied, NodeId};

/// `ForwardBatch` calls to one leader in flight at once; while they are, the
/// next batch grows.
pub const FORWARDS_IN_FLIGHT: usize = 4;
/// Forwarded writes that may wait for the batching task before a caller waits too.
const QUEUE_DEPTH: usize = 4096;

/// What one forwarded write comes to.
pub type ForwardOutcome = Result<Forwarded, WriteError>;

/// One write waiting to be forwarded.
struct Pending {
    command: Vec<u8>,
    deadline: Instant,
    reply: oneshot::Sender<ForwardOutcome>,
}

/// Forward calls and forwarded writes this node sent since it started
/// (with batching, `calls` <= `writes`). Cloning shares the counters.
#[derive(Clone, Debug, Default)]
pub struct ForwardStats {
    calls: Arc<AtomicU64>,
    writes: Arc<AtomicU64>,
}

impl ForwardStats {
    /// Forward calls (`ForwardBatch`, or `Forward` to an older leader) sent.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Writes those calls carried.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    fn sent(&self, calls: u64, writes: u64) {
        self.calls.fetch_add(calls, Ordering::Relaxed);
        self.writes.fetch_add(writes, Ordering::Relaxed);
    }
}

/// (leader, address) -> the queue of its batching task.
type Queues = BTreeMap<(NodeId, String), mpsc::Sender<Pending>>;

/// The batching tasks of one node, one per leader. Cloning shares them.
#[derive(Clone, Default)]
pub struct ForwardBatcher {
    /// (leader, address) -> its task's queue. A std lock: held only to look
    /// up or insert. Queues of other leaders are dropped when a new leader's
    /// is made (their tasks end once their last writes are answered).
    queues: Arc<Mutex<Queues>>,
    /// Calls and writes sent.
    stats: ForwardStats,
}

impl ForwardBatcher {
    /// Calls and writes forwarded so far.
    pub fn stats(&self) -> &ForwardStats {
        &self.stats
    }

    /// Forwards `command` to `leader` at `addr` in the next batch to it;
    /// waits for its own result until `deadline`.
    pub(crate) async fn forward(
        &self,
        channels: &Channels,
        leader: NodeId,
        addr: &str,
        command: &[u8],
        deadline: Instant,
    ) -> ForwardOutcome {
        let (reply, outcome) = oneshot::channel();
        let pending = Pending {
            command: command.to_vec(),
            deadline,
            reply,
        };
        let queue = self.queue(channels, leader, addr);
        if queue.send(pending).await.is_err() {
            // The task ended before taking it: nothing was sent.
            return Ok(Forwarded::Retry);
        }
        match tokio::time::timeout(until(deadline), outcome).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(WriteError::Unknown(format!(
                "forwarding to leader {leader} at {addr}: the batch was dropped"
            ))),
            Err(_) => Err(WriteError::Unknown(format!(
                "forwarding to leader {leader} at {addr}: no answer within the write timeout"
            ))),
        }
    }

    /// The queue of `leader`'s task, started on first use.
    fn queue(&self, channels: &Channels, leader: NodeId, addr: &str) -> mpsc::Sender<Pending> {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let key = (leader, addr.to_string());
        if let Some(queue) = queues.get(&key) {
            return queue.clone();
        }
        queues.clear();
        let (queue, pending) = mpsc::channel(QUEUE_DEPTH);
        let span = tracing::debug_span!("forward_batcher", leader, addr);
        let task = run(
            channels.clone(),
            self.stats.clone(),
            leader,
            key.1.clone(),
            pending,
        );
        tokio::spawn(task.instrument(span));
        queues.insert(key, queue.clone());
        queue
    }
}

/// Takes every write queued at the moment (bounded) and sends it as one
/// call, [`FORWARDS_IN_FLIGHT`] calls at a time.
async fn run(
    channels: Channels,
    stats: ForwardStats,
    leader: NodeId,
    addr: String,
    mut queue: mpsc::Receiver<Pending>,
) {
    let in_flight = Arc::new(Semaphore::new(FORWARDS_IN_FLIGHT));
    let mut carried: Option<Pending> = None;
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
        // A caller that stopped waiting reported its write as unknown (or
        // timed out): sending it now could only apply it behind its back.
        batch.retain(|p| !p.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        let channels = channels.clone();
        let stats = stats.clone();
        let addr = addr.clone();
        let span = tracing::trace_span!("forward_batch", commands = batch.len());
        tokio::spawn(
            async move {
                send(&channels, &stats, leader, &addr, batch).await;
                drop(permit);
            }
            .instrument(span),
        );
    }
}

/// Sends one batch and answers each of its callers.
async fn send(
    channels: &Channels,
    stats: &ForwardStats,
    leader: NodeId,
    addr: &str,
    batch: Vec<Pending>,
) {
    let deadline = batch
        .iter()
        .map(|p| p.deadline)
        .max()
        .unwrap_or_else(Instant::now);
    let (commands, replies): (Vec<Vec<u8>>, Vec<_>) =
        batch.into_iter().map(|p| (p.command, p.reply)).unzip();
    tracing::debug!(commands = commands.len(), "forward batch sent");
    let outcomes = match call(channels, stats, leader, addr, &commands, deadline).await {
        Some(outcomes) => outcomes,
        None => {
            // An older leader without ForwardBatch: one Forward per command.
            let mut outcomes = Vec::with_capacity(commands.len());
            for command in &commands {
                stats.sent(1, 1);
                outcomes.push(channels.forward(leader, addr, command, deadline).await);
            }
            outcomes
        }
    };
    tracing::debug!(commands = commands.len(), "forward batch answered");
    for (reply, outcome) in replies.into_iter().zip(outcomes) {
        // A caller that stopped waiting is not an error of the batch.
        let _ = reply.send(outcome);
    }
}

/// One `ForwardBatch` call: an outcome per command, or `None` when the
/// leader does not serve the call (`UNIMPLEMENTED`: nothing was proposed).
async fn call(
    channels: &Channels,
    stats: &ForwardStats,
    leader: NodeId,
    addr: &str,
    commands: &[Vec<u8>],
    deadline: Instant,
) -> Option<Vec<ForwardOutcome>> {
    let all =
        |outcome: &dyn Fn() -> ForwardOutcome| Some(commands.iter().map(|_| outcome()).collect());
    let Ok(mut client) = channels.client(addr).await else {
        return all(&|| Ok(Forwarded::Retry));
    };
    let mut request = tonic::Request::new(ForwardBatchRequest {
        commands: commands.to_vec(),
        cluster_id: channels.cluster_id().to_string(),
        target_node_id: leader,
    });
    request.set_timeout(until(deadline));
    stats.sent(1, commands.len() as u64);
    let watch = channels.watch(addr);
    let reply = client.forward_batch(request).await;
    match &reply {
        Ok(_) => watch.answered(),
        Err(status) => watch.failed(status),
    }
    let reply = match reply {
        Ok(reply) => reply.into_inner(),
        Err(status) if status.code() == tonic::Code::Unimplemented => return None,
        Err(status) if status.code() == tonic::Code::InvalidArgument => {
            let why = status.message().to_string();
            return all(&|| Err(WriteError::Rejected(why.clone())));
        }
        Err(status) if never_sent(&status) => return all(&|| Ok(Forwarded::Retry)),
        // Another node answers at the leader's address: it refused the call
        // before looking at it, so nothing was appended.
        Err(status) if status.metadata().contains_key(NODE_ID) => {
            return all(&|| Ok(Forwarded::Retry))
        }
        Err(status) => {
            let why = format!("forwarding to leader {leader} at {addr}: {status}");
            return all(&|| Err(WriteError::Unknown(why.clone())));
        }
    };
    if reply.results.len() != commands.len() {
        let why = format!(
            "leader {leader} sent {} results for {} forwarded commands",
            reply.results.len(),
            commands.len()
        );
        tracing::error!(leader, "{why}");
        return all(&|| Err(WriteError::Unknown(why.clone())));
    }
    Some(
        reply
            .results
            .into_iter()
            .map(|r| outcome(leader, r.result))
            .collect(),
    )
}

/// What one command's result in a batch reply comes to.
fn outcome(leader: NodeId, result: Option<forward_result::Result>) -> ForwardOutcome {
    match result {
        Some(forward_result::Result::Applied(a)) => Ok(Forwarded::Applied(Applied {
            log_index: a.log_index,
            response: a.response,
        })),
        Some(forward_result::Result::NotLeader(_)) => Ok(Forwarded::Retry),
        Some(forward_result::Result::Rejected(why)) => Err(WriteError::Rejected(why)),
        Some(forward_result::Result::Unknown(why)) => Err(WriteError::Unknown(format!(
            "forwarded to leader {leader}: {why}"
        ))),
        None => Err(WriteError::Unknown(format!(
            "leader {leader} sent an empty result for a forwarded command"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_result_maps_as_a_call_of_its_own_would() {
        let applied = outcome(
            2,
            Some(forward_result::Result::Applied(proto::raft::Applied {
                log_index: 7,
                response: b"r".to_vec(),
            })),
        );
        assert!(
            matches!(&applied, Ok(Forwarded::Applied(a)) if a.log_index == 7 && a.response == b"r"),
            "{applied:?}"
        );
        let not_leader = outcome(
            2,
            Some(forward_result::Result::NotLeader(Default::default())),
        );
        assert!(matches!(not_leader, Ok(Forwarded::Retry)), "{not_leader:?}");
        let rejected = outcome(2, Some(forward_result::Result::Rejected("bad".into())));
        assert!(
            matches!(rejected, Err(WriteError::Rejected(_))),
            "{rejected:?}"
        );
        let unknown = outcome(2, Some(forward_result::Result::Unknown("lost".into())));
        assert!(
            matches!(unknown, Err(WriteError::Unknown(_))),
            "{unknown:?}"
        );
        assert!(matches!(outcome(2, None), Err(WriteError::Unknown(_))));
    }
}

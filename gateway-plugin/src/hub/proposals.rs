//! One attached stream's proposals (`TermAck`, `SandboxReport`), written in
//! the order the supervisor sent them by a task of their own, so the
//! stream's reader never waits on a commit: a supervisor acknowledging
//! hundreds of new terms at once (a takeover, a bulk launch) keeps its
//! `HostStatus` heard while the acknowledgements are written. Before, the
//! reader proposed each message and waited for it before reading the next,
//! and a member given 500 sandboxes at once was expired by its own
//! acknowledgements: its status messages queued behind them past the TTL.
//!
//! What is queued is written together, in waves that keep each sandbox's
//! commands in the order sent (an acknowledgement before the reports of
//! its term) and hold one command per sandbox, so 500 acknowledgements
//! share a few log entries instead of taking 500 commit round trips.
//!
//! Bounded: at most [`QUEUED_PER_STREAM`] proposals wait and
//! [`WRITTEN_TOGETHER`] are in flight; past that the reader waits too
//! (HTTP/2 flow control then slows the supervisor).
//!
//! An acknowledgement whose write ends without an outcome (the leader
//! changed while it was in flight, or none could be reached) is proposed
//! again, once a tick, while the stream is current, up to
//! [`ACK_ATTEMPTS`] times: the supervisor sent it once and resends it only
//! when a snapshot shows it still owed, and nothing new may be pushed to
//! it in a quiet pool. Before, such an acknowledgement was lost after a
//! leader change and its sandbox stayed `admitting` (found by the scale
//! bench at 100,000 sandboxes: 48 of them after one election).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use futures::future::join_all;
use pool::Command;
use tokio::sync::{mpsc, oneshot};

use super::Hub;

/// Proposals of one stream that may wait to be written.
pub const QUEUED_PER_STREAM: usize = 4096;
/// Most proposals of one stream taken from its queue and written together.
pub const WRITTEN_TOGETHER: usize = 256;
/// Most times an acknowledgement whose write had no outcome is written
/// (one tick apart): 10 s at the default tick, longer than an election.
pub const ACK_ATTEMPTS: u32 = 40;

enum Job {
    Propose(Command),
    /// Answered once every proposal queued before it was written.
    Settle(oneshot::Sender<()>),
}

/// The writer of one stream's proposals. Dropping it lets the writer
/// finish what is queued, then end.
pub struct StreamProposals {
    jobs: mpsc::Sender<Job>,
}

impl StreamProposals {
    /// Starts the writer of `member`'s stream `stream_id`.
    pub fn start(hub: Arc<Hub>, member: String, stream_id: u64) -> StreamProposals {
        let (jobs, queued) = mpsc::channel(QUEUED_PER_STREAM);
        tokio::spawn(write_in_order(hub, member, stream_id, queued));
        StreamProposals { jobs }
    }

    /// Queues `command` behind the stream's earlier proposals (waits only
    /// while [`QUEUED_PER_STREAM`] are queued).
    pub async fn push(&self, command: Command) {
        // The writer ends only when this sender is dropped.
        let _ = self.jobs.send(Job::Propose(command)).await;
    }

    /// Waits until every proposal queued so far was written (before a
    /// `HostLeave`, which must follow them).
    pub async fn settle(&self) {
        let (done, settled) = oneshot::channel();
        if self.jobs.send(Job::Settle(done)).await.is_ok() {
            let _ = settled.await;
        }
    }
}

async fn write_in_order(
    hub: Arc<Hub>,
    member: String,
    stream_id: u64,
    mut queued: mpsc::Receiver<Job>,
) {
    while let Some(first) = queued.recv().await {
        let mut jobs = vec![first];
        while jobs.len() < WRITTEN_TOGETHER {
            match queued.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let mut commands = Vec::new();
        for job in jobs {
            match job {
                Job::Propose(command) => commands.push(command),
                Job::Settle(done) => {
                    write(&hub, &member, stream_id, std::mem::take(&mut commands)).await;
                    let _ = done.send(());
                }
            }
        }
        write(&hub, &member, stream_id, commands).await;
    }
}

/// Writes `commands` (in the order sent) in waves: each sandbox's commands
/// stay in order, one wave holds at most one command per sandbox, and a
/// wave's commands are written together (they share the leader's log
/// entries instead of one commit round trip each). A repeated
/// acknowledgement (a supervisor resends an ack a snapshot still shows
/// owed) is written once.
async fn write(hub: &Hub, member: &str, stream_id: u64, commands: Vec<Command>) {
    let mut lanes: BTreeMap<String, VecDeque<Command>> = BTreeMap::new();
    for command in commands {
        if hub.already_applied(&command) {
            // A resent ack of a term this node already applied as
            // acknowledged: nothing to write.
            continue;
        }
        let sandbox = match &command {
            Command::Acknowledge(c) => c.sandbox.clone(),
            Command::Report(c) => c.sandbox.clone(),
            _ => String::new(),
        };
        let lane = lanes.entry(sandbox).or_default();
        if matches!(command, Command::Acknowledge(_)) && lane.contains(&command) {
            continue;
        }
        lane.push_back(command);
    }
    let mut unwritten = Vec::new();
    while !lanes.is_empty() {
        let wave: Vec<Command> = lanes.values_mut().filter_map(VecDeque::pop_front).collect();
        lanes.retain(|_, lane| !lane.is_empty());
        unwritten.extend(propose_wave(hub, member, stream_id, wave).await);
    }
    let mut attempt = 1;
    while !unwritten.is_empty() && attempt < ACK_ATTEMPTS {
        tokio::time::sleep(hub.settings().tick_interval).await;
        if !hub.is_current(member, stream_id) {
            // A new stream of the member resends every ack it owes.
            return;
        }
        unwritten.retain(|ack| !hub.already_applied(ack));
        unwritten = propose_wave(hub, member, stream_id, unwritten).await;
        attempt += 1;
    }
    if !unwritten.is_empty() {
        tracing::warn!(
            %member,
            acknowledgements = unwritten.len(),
            attempts = ACK_ATTEMPTS,
            "acknowledgements not written; left to the supervisor's resend"
        );
    }
}

/// Proposes `wave` together; returns its acknowledgements whose write had
/// no outcome (to be written again: an acknowledgement applies once).
async fn propose_wave(hub: &Hub, member: &str, stream_id: u64, wave: Vec<Command>) -> Vec<Command> {
    let outcomes = join_all(wave.iter().map(|c| hub.propose(c))).await;
    let mut unwritten = Vec::new();
    for (command, outcome) in wave.into_iter().zip(outcomes) {
        match outcome {
            Ok(pool::Outcome::Rejected(reason)) => {
                tracing::info!(%member, command = command.name(), %reason, "supervisor command rejected")
            }
            Ok(pool::Outcome::Applied(_)) => {}
            Err(status) => {
                tracing::warn!(%member, %status, "supervisor command not applied");
                // Its view goes out again in full after the next applied
                // batch: the supervisor resends the acks it still owes.
                hub.forget_shown(member, stream_id);
                if matches!(command, Command::Acknowledge(_)) && no_outcome(&status) {
                    unwritten.push(command);
                }
            }
        }
    }
    unwritten
}

/// True when a write's error leaves its outcome open or says no leader
/// took it (worth writing again); false for a refusal of the command.
fn no_outcome(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unknown
            | tonic::Code::Unavailable
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Aborted
            | tonic::Code::Cancelled
    )
}

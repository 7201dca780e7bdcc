//! What the task of a watcher (`ObjectStore.Watch`, `PoolAdmin.WatchPool`)
//! waits on between two responses: this gateway applying new entries, a
//! progress response falling due, the watcher leaving, or the watch having
//! to end (the gateway stops, raft stopped).

use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tonic::Status;

use crate::state::GatewayState;

/// Progress interval when the request names none.
pub const DEFAULT_PROGRESS_MS: u32 = 5_000;
/// Bounds of a request's `progress_interval_ms`.
pub const PROGRESS_MS: std::ops::RangeInclusive<u32> = 100..=60_000;

/// The progress interval a request's `progress_interval_ms` asks for.
///
/// # Errors
/// `INVALID_ARGUMENT` naming `progress_interval_ms` out of [`PROGRESS_MS`]
/// (0 is the default).
pub fn progress_interval(ms: u32) -> Result<Duration, Status> {
    let ms = match ms {
        0 => DEFAULT_PROGRESS_MS,
        ms if PROGRESS_MS.contains(&ms) => ms,
        ms => {
            return Err(Status::invalid_argument(format!(
            "`progress_interval_ms` is {ms}; it must be from {} to {} (0: {DEFAULT_PROGRESS_MS})",
            PROGRESS_MS.start(),
            PROGRESS_MS.end()
        )))
        }
    };
    Ok(Duration::from_millis(u64::from(ms)))
}

/// Counts one watcher in `openshell_watchers{kind}` while it lives.
pub struct Counted(prometheus::IntGauge);

impl Counted {
    /// Counts a watcher of `kind` (`objects`, `pool`) in `metrics`.
    pub fn new(metrics: &crate::metrics::Metrics, kind: &str) -> Self {
        let gauge = metrics.watchers.with_label_values(&[kind]);
        gauge.inc();
        Counted(gauge)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Why [`Waiter::wait`] returned.
#[derive(Debug, PartialEq, Eq)]
pub enum Wake {
    /// This gateway applied new entries.
    Applied,
    /// The deadline passed: a progress response is due.
    Progress,
    /// The watcher went away: end quietly.
    Closed,
    /// The watch must end: the status was sent to the watcher.
    Ended,
}

/// The signals one watcher's task waits on.
pub struct Waiter {
    metrics: watch::Receiver<raft_store::types::typ::RaftMetrics>,
    /// The applied log id last seen (the metrics change on more than that).
    applied: Option<raft_store::types::typ::LogId>,
    stopping: watch::Receiver<bool>,
}

impl Waiter {
    /// The signals of `node`'s applied entries and of the gateway's stop.
    pub fn new(node: &raft_store::RaftNode<GatewayState>, stopping: watch::Receiver<bool>) -> Self {
        let metrics = node.raft().metrics();
        let applied = metrics.borrow().last_applied;
        Waiter {
            metrics,
            applied,
            stopping,
        }
    }

    /// Waits for the first of: new applied entries, `deadline`, the
    /// watcher (`tx`'s receiver) leaving, the gateway stopping or raft
    /// stopping. On the last two, sends `UNAVAILABLE` (resume elsewhere).
    pub async fn wait<T>(
        &mut self,
        tx: &mpsc::Sender<Result<T, Status>>,
        deadline: Instant,
    ) -> Wake {
        let ended = loop {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => return Wake::Progress,
                changed = self.metrics.changed() => {
                    if changed.is_err() {
                        break "raft stopped on this gateway";
                    }
                    let applied = self.metrics.borrow_and_update().last_applied;
                    if applied != self.applied {
                        self.applied = applied;
                        return Wake::Applied;
                    }
                }
                () = tx.closed() => return Wake::Closed,
                _ = self.stopping.wait_for(|s| *s) => break "this gateway is stopping",
            }
        };
        let status = Status::unavailable(format!("{ended}: watch again through another gateway"));
        let _ = tx.send(Err(status)).await;
        Wake::Ended
    }
}

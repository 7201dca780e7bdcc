//! `ObjectStore.Watch`: one task per watcher, reading the applied state's
//! journal ([`raft_store::object_events`]) whenever this gateway applies
//! new entries, and sending what the watch covers.
//!
//! Bounded: at most [`MAX_WATCHERS`] watchers per gateway; each holds at
//! most one response ready to send ([`RESPONSE_EVENTS`] events, about
//! [`RESPONSE_BYTES`]) and reads the journal only once the previous one
//! was taken, so a slow watcher costs no memory: it falls behind, and once
//! the journal dropped the events it still had to receive it is cut with
//! `RESOURCE_EXHAUSTED` naming the oldest revision held. Watchers end with
//! `UNAVAILABLE` when the gateway stops, so a client resumes on another.

use std::sync::Arc;
use std::time::Duration;

use proto::objects::{WatchRequest, WatchResponse};
use raft_store::object_events::{Compacted, Found, WatchKey};
use raft_store::RaftNode;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tonic::metadata::MetadataValue;
use tonic::Status;
use tracing::Instrument;

use crate::metrics::Metrics;
use crate::state::GatewayState;
use crate::status;
use crate::watch_wait::{progress_interval, Counted, Waiter, Wake};

/// Watchers one gateway serves at once, at most.
pub const MAX_WATCHERS: usize = 1024;
/// Events in one response, at most.
pub const RESPONSE_EVENTS: usize = 256;
/// Bytes of events in one response: a response is closed once it passes
/// this (an object is at most 32 KiB, so a response stays under 1.1 MiB).
pub const RESPONSE_BYTES: usize = 1024 * 1024;

/// The watchers of one gateway.
#[derive(Clone)]
pub struct Watchers {
    node: RaftNode<GatewayState>,
    slots: Arc<Semaphore>,
    stopping: watch::Receiver<bool>,
    metrics: Metrics,
}

/// A validated watch request.
struct Watch {
    key: WatchKey,
    from: u64,
    stale: bool,
    progress: Duration,
}

impl Watchers {
    /// The watchers of `node`, counted in `metrics`; they end when
    /// `stopping` turns true.
    pub fn new(
        node: RaftNode<GatewayState>,
        stopping: watch::Receiver<bool>,
        metrics: Metrics,
    ) -> Self {
        Watchers {
            node,
            slots: Arc::new(Semaphore::new(MAX_WATCHERS)),
            stopping,
            metrics,
        }
    }

    fn refused(&self, reason: &str) {
        self.metrics
            .watch_refusals
            .with_label_values(&["objects", reason])
            .inc();
    }

    /// Starts a watcher for `request`: the stream of its responses.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` naming the field, `RESOURCE_EXHAUSTED` when
    /// [`MAX_WATCHERS`] watch already, `UNAVAILABLE`/`DEADLINE_EXCEEDED`
    /// when a linearizable start cannot read, `OUT_OF_RANGE` when the
    /// revision is compacted.
    pub async fn start(
        &self,
        request: WatchRequest,
    ) -> Result<mpsc::Receiver<Result<WatchResponse, Status>>, Status> {
        let watch = validate(request)?;
        let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() else {
            self.refused("limit");
            return Err(Status::resource_exhausted(format!(
                "this gateway serves {MAX_WATCHERS} watchers already; watch through another \
                 gateway or close a watcher"
            )));
        };
        // A linearizable start: this gateway has applied every write
        // acknowledged before the call once `read` returns.
        let revision = if watch.stale {
            self.node.read_local(|s, _| s.objects.revision())
        } else {
            self.node
                .read(|s, _| s.objects.revision())
                .await
                .map_err(status::read)?
        };
        let from = if watch.from == 0 {
            revision + 1
        } else {
            watch.from
        };
        // The first response (at once, events or not): the watcher knows
        // where it stands; an old revision fails the call itself.
        let first = self.next(&watch.key, from).map_err(|c| {
            self.refused("compacted");
            compacted(Status::out_of_range(c.to_string()), c)
        })?;
        let (tx, rx) = mpsc::channel(1);
        let worker = Worker {
            node: self.node.clone(),
            key: watch.key,
            progress: watch.progress,
            stopping: self.stopping.clone(),
            metrics: self.metrics.clone(),
            _counted: Counted::new(&self.metrics, "objects"),
            _slot: slot,
        };
        let span = tracing::debug_span!("watch", from);
        tokio::spawn(worker.run(tx, first, from).instrument(span));
        Ok(rx)
    }

    fn next(&self, key: &WatchKey, from: u64) -> Result<Found, Compacted> {
        read_journal(&self.node, key, from)
    }
}

fn read_journal(
    node: &RaftNode<GatewayState>,
    key: &WatchKey,
    from: u64,
) -> Result<Found, Compacted> {
    node.read_local(|s, _| {
        s.object_events.since(
            key,
            from,
            s.objects.revision(),
            RESPONSE_EVENTS,
            RESPONSE_BYTES,
        )
    })
}

fn validate(request: WatchRequest) -> Result<Watch, Status> {
    if request.r#type.is_empty() {
        if !request.id.is_empty() || !request.id_prefix.is_empty() {
            return Err(Status::invalid_argument(
                "`id` and `id_prefix` need a `type`: name the type of the objects to watch",
            ));
        }
    } else {
        status::check_id("type", &request.r#type)?;
    }
    if !request.id.is_empty() {
        if !request.id_prefix.is_empty() {
            return Err(Status::invalid_argument(
                "set `id` (one object) or `id_prefix` (several), not both",
            ));
        }
        status::check_id("id", &request.id)?;
    }
    if request.id_prefix.len() > raft_store::objects::MAX_FIELD_BYTES {
        return Err(Status::invalid_argument(format!(
            "`id_prefix` is {} bytes; at most {}",
            request.id_prefix.len(),
            raft_store::objects::MAX_FIELD_BYTES
        )));
    }
    let progress = progress_interval(request.progress_interval_ms)?;
    Ok(Watch {
        key: WatchKey {
            object_type: request.r#type,
            id: request.id,
            id_prefix: request.id_prefix,
        },
        from: request.from_revision,
        stale: request.stale,
        progress,
    })
}

/// `status` carrying the oldest revision held.
fn compacted(mut status: Status, c: Compacted) -> Status {
    if let Ok(v) = MetadataValue::try_from(c.oldest.to_string()) {
        status.metadata_mut().insert(status::COMPACTED_REVISION, v);
    }
    status
}

/// One watcher's task.
struct Worker {
    node: RaftNode<GatewayState>,
    key: WatchKey,
    progress: Duration,
    stopping: watch::Receiver<bool>,
    metrics: Metrics,
    /// Counted while the watcher runs.
    _counted: Counted,
    /// Held while the watcher runs.
    _slot: OwnedSemaphorePermit,
}

impl Worker {
    /// Sends `first` and what follows, never an event before `from` (a
    /// watch may start at a revision this gateway has not reached).
    async fn run(self, tx: mpsc::Sender<Result<WatchResponse, Status>>, first: Found, from: u64) {
        let mut waiter = Waiter::new(&self.node, self.stopping.clone());
        let mut found = first;
        let mut next = from;
        loop {
            next = next.max(found.through.saturating_add(1));
            let more = !found.events.is_empty();
            let response = WatchResponse {
                events: found.events.iter().map(|e| (**e).clone()).collect(),
                revision: found.through,
            };
            // Waits for the watcher to take the previous response: the one
            // buffered response is all a slow watcher costs.
            if tx.send(Ok(response)).await.is_err() {
                return;
            }
            let Some(read) = self.quiet(&tx, &mut waiter, next, more).await else {
                return;
            };
            found = match read {
                Ok(f) => f,
                Err(c) => {
                    self.metrics
                        .watch_refusals
                        .with_label_values(&["objects", "fell_behind"])
                        .inc();
                    let status = Status::resource_exhausted(format!(
                        "this watcher fell behind: {c}; re-read with List and watch from there"
                    ));
                    let _ = tx.send(Err(compacted(status, c))).await;
                    return;
                }
            };
        }
    }

    /// The next response's read: at once when events are waiting (`more`:
    /// the last response was full of them), else once this gateway applies
    /// an entry bringing events for the watch, or when a progress response
    /// is due; `None`: the watch is over (the watcher left, the gateway
    /// stops or raft stopped).
    async fn quiet(
        &self,
        tx: &mpsc::Sender<Result<WatchResponse, Status>>,
        waiter: &mut Waiter,
        next: u64,
        more: bool,
    ) -> Option<Result<Found, Compacted>> {
        let deadline = tokio::time::Instant::now() + self.progress;
        if more {
            match self.read(next) {
                Ok(f) if f.events.is_empty() => {}
                read => return Some(read),
            }
        }
        loop {
            match waiter.wait(tx, deadline).await {
                Wake::Progress => return Some(self.read(next)),
                Wake::Applied => match self.read(next) {
                    Ok(f) if f.events.is_empty() => continue,
                    read => return Some(read),
                },
                Wake::Closed | Wake::Ended => return None,
            }
        }
    }

    fn read(&self, from: u64) -> Result<Found, Compacted> {
        read_journal(&self.node, &self.key, from)
    }
}

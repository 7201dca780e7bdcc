//! [`Observer`]: what a node tells its embedder about its own work, for
//! metrics. The library records nothing itself (no global registry, no
//! metrics crate): the embedder passes an observer in
//! [`crate::NodeConfig::observer`] and turns the calls into whatever it
//! exports (the gateway: Prometheus histograms and counters).
//!
//! Every method has an empty default and is called on the path it measures
//! (the flusher thread, the batcher task, a snapshot task, a watcher task):
//! keep them short and never block in them.

use std::sync::Arc;
use std::time::Duration;

use crate::types::NodeId;

/// Receives a node's measurements. Each method is a no-op by default.
pub trait Observer: Send + Sync + 'static {
    /// One group commit of the log: sled `flush` plus the `fdatasync` of
    /// every file it wrote, covering `requests` waiting appends and votes;
    /// `ok` is false when it failed.
    fn log_synced(&self, requests: usize, elapsed: Duration, ok: bool) {
        let _ = (requests, elapsed, ok);
    }

    /// The batcher proposed one log entry carrying `commands` commands.
    fn batch_proposed(&self, commands: usize) {
        let _ = commands;
    }

    /// A snapshot of `bytes` bytes was built and written (the state
    /// machine's encoding and the file's write and sync).
    fn snapshot_built(&self, bytes: u64, elapsed: Duration) {
        let _ = (bytes, elapsed);
    }

    /// A snapshot of `bytes` bytes received from the leader was installed.
    fn snapshot_installed(&self, bytes: u64, elapsed: Duration) {
        let _ = (bytes, elapsed);
    }

    /// The periodic digest of the applied state (every
    /// [`crate::NodeConfig::digest_every`] indexes) was taken.
    fn state_digest(&self, digest: crate::digest::Digest) {
        let _ = digest;
    }

    /// This node saw a new leader (`None`: it lost the leader it knew) in
    /// `term`.
    fn leader_changed(&self, term: u64, leader: Option<NodeId>) {
        let _ = (term, leader);
    }
}

/// The observer that records nothing (the default).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoObserver;

impl Observer for NoObserver {}

/// A shared observer, as [`crate::NodeConfig`] holds it.
pub type SharedObserver = Arc<dyn Observer>;

/// The default: [`NoObserver`].
pub fn none() -> SharedObserver {
    Arc::new(NoObserver)
}

/// Calls [`Observer::leader_changed`] each time the leader this node knows
/// changes, until raft stops. Spawned by [`crate::RaftNode::start`].
pub(crate) async fn watch_leader(raft: crate::types::typ::Raft, observer: SharedObserver) {
    let mut metrics = raft.metrics();
    let mut known = {
        let m = metrics.borrow_and_update();
        m.current_leader
    };
    if known.is_some() {
        observer.leader_changed(metrics.borrow().current_term, known);
    }
    while metrics.changed().await.is_ok() {
        let (term, leader) = {
            let m = metrics.borrow_and_update();
            (m.current_term, m.current_leader)
        };
        if leader != known {
            known = leader;
            observer.leader_changed(term, leader);
        }
    }
}

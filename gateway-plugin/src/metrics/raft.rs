//! The replicated log's metrics: raft-store's [`Observer`] calls (log
//! fsync, batches, snapshots, leader changes) and the node's status read at
//! each scrape (term, indexes, leadership, replication lag per peer,
//! forwarding).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{Histogram, IntCounter, IntGauge, IntGaugeVec};
use raft_store::{NodeId, Observer, RaftNode};

use super::{advance, Reg, LATENCY_BUCKETS};
use crate::state::GatewayState;

/// Buckets of the commands one log entry carries (up to the batcher's
/// `MAX_BATCH`, 256).
const BATCH_BUCKETS: [f64; 9] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// The replicated log's collectors. Cheap to clone.
#[derive(Clone)]
pub struct RaftMetrics {
    /// Current raft term.
    pub term: IntGauge,
    /// 1 on a leader that a majority acknowledged within the election
    /// timeout, else 0.
    pub is_leader: IntGauge,
    /// Times this node saw the leader change (to another node or to none).
    pub leader_changes: IntCounter,
    /// Last committed index known here.
    pub commit_index: IntGauge,
    /// Last applied index.
    pub applied_index: IntGauge,
    /// Last index in this node's log.
    pub last_log_index: IntGauge,
    /// Index of this node's latest snapshot.
    pub snapshot_index: IntGauge,
    /// On the leader: entries each peer is behind its last index.
    pub replication_lag: IntGaugeVec,
    /// One group commit of the log: sled flush plus fdatasync.
    pub log_fsync: Histogram,
    /// Group commits that failed.
    pub log_fsync_failures: IntCounter,
    /// Commands per log entry the batcher proposed.
    pub batch_commands: Histogram,
    /// Size of the latest snapshot built or installed here.
    pub snapshot_size: IntGauge,
    /// Building a snapshot (encode, write, sync).
    pub snapshot_build: Histogram,
    /// Installing a snapshot received from the leader.
    pub snapshot_install: Histogram,
    /// Forward calls this gateway sent to the leader.
    pub forward_calls: IntCounter,
    /// Writes those calls carried.
    pub forwarded_writes: IntCounter,
    /// Proposals waiting for this gateway's write batcher.
    pub proposals_queued: IntGauge,
    /// Applied index of the latest periodic state digest.
    pub state_digest_index: IntGauge,
    /// crc32 of the state at `state_digest_index`.
    pub state_digest_crc32: IntGauge,
    /// The forwarding totals last exported (calls, writes).
    forwards_seen: Arc<Mutex<(u64, u64)>>,
}

impl RaftMetrics {
    /// Registers the collectors in `reg`.
    pub(crate) fn new(reg: &Reg<'_>) -> Self {
        RaftMetrics {
            term: reg.gauge("openshell_raft_term", "Current raft term"),
            is_leader: reg.gauge(
                "openshell_raft_is_leader",
                "1 if this gateway is the raft leader and a majority acknowledged it within the election timeout",
            ),
            leader_changes: reg.counter(
                "openshell_raft_leader_changes_total",
                "Times this gateway saw the raft leader change (to another node or to none)",
            ),
            commit_index: reg.gauge(
                "openshell_raft_commit_index",
                "Last committed log index known here",
            ),
            applied_index: reg.gauge("openshell_raft_applied_index", "Last applied log index"),
            last_log_index: reg.gauge(
                "openshell_raft_last_log_index",
                "Last index in this gateway's raft log",
            ),
            snapshot_index: reg.gauge(
                "openshell_raft_snapshot_index",
                "Log index of this gateway's latest snapshot",
            ),
            replication_lag: reg.gauge_vec(
                "openshell_raft_replication_lag_entries",
                "On the leader: log entries each peer is behind the leader's last index",
                &["peer"],
            ),
            log_fsync: reg.histogram(
                "openshell_raft_log_fsync_duration_seconds",
                "One group commit of the raft log: sled flush plus fdatasync of its files",
                &LATENCY_BUCKETS,
            ),
            log_fsync_failures: reg.counter(
                "openshell_raft_log_fsync_failures_total",
                "Group commits of the raft log that failed",
            ),
            batch_commands: reg.histogram(
                "openshell_raft_batch_commands",
                "Commands carried by each log entry this gateway's batcher proposed",
                &BATCH_BUCKETS,
            ),
            snapshot_size: reg.gauge(
                "openshell_raft_snapshot_size_bytes",
                "Size of the latest snapshot built or installed by this gateway",
            ),
            snapshot_build: reg.histogram(
                "openshell_raft_snapshot_build_duration_seconds",
                "Building a snapshot: encoding the state, writing and syncing the file",
                &LATENCY_BUCKETS,
            ),
            snapshot_install: reg.histogram(
                "openshell_raft_snapshot_install_duration_seconds",
                "Installing a snapshot received from the leader",
                &LATENCY_BUCKETS,
            ),
            forward_calls: reg.counter(
                "openshell_raft_forward_calls_total",
                "Forward calls this gateway sent to the raft leader",
            ),
            forwarded_writes: reg.counter(
                "openshell_raft_forwarded_writes_total",
                "Writes this gateway forwarded to the raft leader (several per call when batched)",
            ),
            proposals_queued: reg.gauge(
                "openshell_raft_proposals_queued",
                "Proposals waiting for this gateway's write batcher (its own writes and, on the leader, \
                 those forwarded to it), at the scrape; at 4096 the queue is full and proposers wait",
            ),
            state_digest_index: reg.gauge(
                "openshell_raft_state_digest_index",
                "Applied index of this gateway's latest periodic state digest (every multiple of 1024): \
                 every replica digests the same indexes",
            ),
            state_digest_crc32: reg.gauge(
                "openshell_raft_state_digest_crc32",
                "crc32 of the applied state at openshell_raft_state_digest_index: replicas at an equal \
                 index must report an equal value (alert when they differ)",
            ),
            forwards_seen: Arc::default(),
        }
    }

    /// Reads the node's status into the gauges (at each scrape).
    pub fn refresh(&self, node: &RaftNode<GatewayState>) {
        let status = node.status();
        self.term.set(gauge(status.term));
        // Counted as leader only while a majority acknowledged it within the
        // election timeout: a leader cut off from its quorum commits nothing.
        self.is_leader.set(i64::from(
            status.leads_with_quorum(node.config().election_timeout_max),
        ));
        self.commit_index.set(gauge(status.commit_index));
        self.applied_index.set(gauge(status.applied_index));
        self.last_log_index.set(gauge(status.last_log_index));
        self.snapshot_index.set(gauge(status.snapshot_index));
        // Only the leader knows its peers' progress; a removed peer's
        // series goes away.
        self.replication_lag.reset();
        for peer in status.nodes.iter().filter(|n| n.id != status.node_id) {
            if let Some(lag) = peer.lag {
                self.replication_lag
                    .with_label_values(&[&peer.id.to_string()])
                    .set(gauge(lag));
            }
        }
        self.proposals_queued
            .set(i64::try_from(node.proposals_queued()).unwrap_or(i64::MAX));
        let forwards = node.forward_stats();
        let mut seen = self.forwards_seen.lock().unwrap_or_else(|p| p.into_inner());
        let (calls, writes) = &mut *seen;
        advance(&self.forward_calls, calls, forwards.calls());
        advance(&self.forwarded_writes, writes, forwards.writes());
    }
}

/// A count as a gauge value (saturating: no index reaches `i64::MAX`).
pub(crate) fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Observer for RaftMetrics {
    fn log_synced(&self, _requests: usize, elapsed: Duration, ok: bool) {
        self.log_fsync.observe(elapsed.as_secs_f64());
        if !ok {
            self.log_fsync_failures.inc();
        }
    }

    fn batch_proposed(&self, commands: usize) {
        self.batch_commands.observe(commands as f64);
    }

    fn snapshot_built(&self, bytes: u64, elapsed: Duration) {
        self.snapshot_size.set(gauge(bytes));
        self.snapshot_build.observe(elapsed.as_secs_f64());
    }

    fn snapshot_installed(&self, bytes: u64, elapsed: Duration) {
        self.snapshot_size.set(gauge(bytes));
        self.snapshot_install.observe(elapsed.as_secs_f64());
    }

    fn state_digest(&self, digest: raft_store::digest::Digest) {
        // Set back to back: a scrape in between may pair the new crc with
        // the previous index, once (alert on a mismatch that lasts).
        self.state_digest_crc32.set(i64::from(digest.crc32));
        self.state_digest_index.set(gauge(digest.applied_index));
    }

    fn leader_changed(&self, _term: u64, _leader: Option<NodeId>) {
        self.leader_changes.inc();
    }
}

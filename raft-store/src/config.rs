//! [`NodeConfig`]: how one node runs (identity, timing, snapshot policy,
//! storage and peer secret), and its translation into openraft's
//! `Config`, which is where its values are checked.

use std::path::PathBuf;
use std::time::Duration;

use openraft::SnapshotPolicy;

use crate::codec::{MAX_MESSAGE_BYTES, MIN_MESSAGE_BYTES};
use crate::error::{Error, Result};
use crate::types::NodeId;

/// How one node runs. [`NodeConfig::new`] fills in openraft's defaults.
#[derive(Clone)]
pub struct NodeConfig {
    /// This node's raft id (non-zero).
    pub node_id: NodeId,
    /// host:port other nodes and clients use to reach this node.
    pub advertise_addr: String,
    /// The data directory.
    pub data_dir: PathBuf,
    /// The cluster this node belongs to; a data directory or peer of another
    /// cluster is refused.
    pub cluster_id: String,
    /// Leader heartbeat interval.
    pub heartbeat_interval: Duration,
    /// Lower bound of the randomized election timeout.
    pub election_timeout_min: Duration,
    /// Upper bound of the randomized election timeout.
    pub election_timeout_max: Duration,
    /// Build a snapshot after this many log entries since the last one.
    pub snapshot_after_logs: u64,
    /// Entries kept in the log behind a snapshot (for followers slightly behind).
    pub logs_to_keep: u64,
    /// Largest snapshot chunk streamed to a follower (at most half of
    /// `max_message_bytes`).
    pub snapshot_chunk_bytes: u64,
    /// Largest raft transport message sent or accepted, in bytes
    /// ([`MIN_MESSAGE_BYTES`]..=[`MAX_MESSAGE_BYTES`], the default). An
    /// append-entries batch over it is split (openraft's
    /// `PayloadTooLarge`), never sent. Every node of a cluster should use
    /// the same value; a follower that refuses a larger message also makes
    /// the leader send fewer entries.
    pub max_message_bytes: usize,
    /// How long a write may wait for a leader, including forwarding retries.
    pub write_timeout: Duration,
    /// sled page-cache size in bytes.
    pub cache_capacity: u64,
    /// Largest snapshot this node receives from a leader, in bytes; a chunk
    /// ending past it is refused (`network::incoming_snapshot`).
    pub max_snapshot_bytes: u64,
    /// TLS of every outbound call to a peer (raft, forwarded writes and
    /// admin calls): the CA peers' certificates chain to and this node's
    /// own certificate, presented as a client certificate. `None` dials
    /// plaintext (a cluster started with `--insecure`). Who may call this
    /// node is decided where its peer port is served (mutual TLS there).
    pub peer_tls: Option<proto::tls::ClientTls>,
    /// Whether the raft log waits for the disk before it acknowledges an
    /// append or a vote ([`LogSync::Durable`], the default). Only
    /// benchmarks set it: no gateway flag or configuration key reaches it.
    pub log_sync: LogSync,
    /// Receives this node's measurements (log sync latency, batch sizes,
    /// snapshots, leader changes) for the embedder's metrics; records
    /// nothing by default ([`crate::observe`]).
    pub observer: crate::observe::SharedObserver,
    /// Digest the applied state after every index that is a multiple of
    /// this (reported to [`Self::observer`]; equal on every replica at equal
    /// index); 0: never. See [`crate::digest`].
    pub digest_every: u64,
}

/// Whether the raft log's appends and votes wait for the disk.
///
/// [`LogSync::UnsafeNoSyncForBenchmarks`] exists to measure where the time
/// goes (the non-disk floor of one write, the CPU ceiling of many): with it
/// a power loss or a crash of the machine loses acknowledged writes and
/// votes, which breaks raft's safety. It is a field of [`NodeConfig`] only,
/// set by code (the commit-latency bench), never by a gateway flag or TOML
/// key (`gateway-plugin` test t106 checks that).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogSync {
    /// Appends and votes are acknowledged after sled `flush` and
    /// `fdatasync` (see `crate::durability`).
    #[default]
    Durable,
    /// Appends and votes are acknowledged as soon as sled holds them in
    /// memory; nothing waits for the flusher thread. Benchmarks only.
    UnsafeNoSyncForBenchmarks,
}

impl std::fmt::Debug for NodeConfig {
    /// Prints every field but the secrets, which show as `<redacted>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConfig")
            .field("node_id", &self.node_id)
            .field("advertise_addr", &self.advertise_addr)
            .field("data_dir", &self.data_dir)
            .field("cluster_id", &self.cluster_id)
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("election_timeout_min", &self.election_timeout_min)
            .field("election_timeout_max", &self.election_timeout_max)
            .field("snapshot_after_logs", &self.snapshot_after_logs)
            .field("logs_to_keep", &self.logs_to_keep)
            .field("snapshot_chunk_bytes", &self.snapshot_chunk_bytes)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("write_timeout", &self.write_timeout)
            .field("cache_capacity", &self.cache_capacity)
            .field("max_snapshot_bytes", &self.max_snapshot_bytes)
            .field("peer_tls", &self.peer_tls)
            .field("log_sync", &self.log_sync)
            .field("digest_every", &self.digest_every)
            .finish_non_exhaustive()
    }
}

impl NodeConfig {
    /// A configuration with openraft's default timing (heartbeat 50 ms,
    /// election 150–300 ms, snapshot every 5000 entries, 1000 kept).
    pub fn new(
        node_id: NodeId,
        advertise_addr: &str,
        data_dir: impl Into<PathBuf>,
        cluster_id: &str,
    ) -> Self {
        NodeConfig {
            node_id,
            advertise_addr: advertise_addr.to_string(),
            data_dir: data_dir.into(),
            cluster_id: cluster_id.to_string(),
            heartbeat_interval: Duration::from_millis(50),
            election_timeout_min: Duration::from_millis(150),
            election_timeout_max: Duration::from_millis(300),
            snapshot_after_logs: 5000,
            logs_to_keep: 1000,
            snapshot_chunk_bytes: 1024 * 1024,
            max_message_bytes: MAX_MESSAGE_BYTES,
            write_timeout: Duration::from_secs(5),
            cache_capacity: 64 * 1024 * 1024,
            max_snapshot_bytes: crate::network::incoming_snapshot::DEFAULT_MAX_SNAPSHOT_BYTES,
            peer_tls: None,
            log_sync: LogSync::Durable,
            observer: crate::observe::none(),
            digest_every: crate::digest::DEFAULT_EVERY,
        }
    }

    /// Pause between retries of a write, a read-index or a membership
    /// change: a fraction of the election timeout.
    pub(crate) fn retry_pause(&self) -> Duration {
        self.election_timeout_min / 4
    }

    /// openraft's configuration for this node.
    ///
    /// # Errors
    /// [`Error::Config`] for a node id of 0, an empty cluster id, a snapshot
    /// chunk size out of range, or timing openraft refuses.
    pub(crate) fn raft_config(&self) -> Result<openraft::Config> {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        if self.node_id == 0 {
            return Err(Error::Config(
                "node id must be at least 1 (0 means \"none\" on the wire)".into(),
            ));
        }
        if self.cluster_id.is_empty() {
            return Err(Error::Config("cluster id must not be empty".into()));
        }
        if !(MIN_MESSAGE_BYTES..=MAX_MESSAGE_BYTES).contains(&self.max_message_bytes) {
            return Err(Error::Config(format!(
                "max_message_bytes {} is out of range {MIN_MESSAGE_BYTES}..={MAX_MESSAGE_BYTES}",
                self.max_message_bytes
            )));
        }
        if self.snapshot_chunk_bytes == 0
            || self.snapshot_chunk_bytes as usize > self.max_message_bytes / 2
        {
            return Err(Error::Config(format!(
                "snapshot chunk size must be within 1..={} bytes (half of max_message_bytes)",
                self.max_message_bytes / 2
            )));
        }
        let config = openraft::Config {
            cluster_name: self.cluster_id.clone(),
            heartbeat_interval: ms(self.heartbeat_interval),
            election_timeout_min: ms(self.election_timeout_min),
            election_timeout_max: ms(self.election_timeout_max),
            install_snapshot_timeout: 2_000,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_after_logs),
            max_in_snapshot_log_to_keep: self.logs_to_keep,
            snapshot_max_chunk_size: self.snapshot_chunk_bytes,
            // The election timer is `campaign.rs`'s (its module doc says
            // why); `trigger().elect()` still campaigns.
            enable_elect: false,
            ..Default::default()
        };
        config.validate().map_err(|e| Error::Config(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_settings() {
        let config = NodeConfig::new(1, "127.0.0.1:1", "/tmp/x", "c");
        let shown = format!("{config:?}");
        assert!(shown.contains("peer_tls: None"), "{shown}");
    }

    #[test]
    fn the_log_is_durable_by_default() {
        assert_eq!(LogSync::default(), LogSync::Durable);
        let config = NodeConfig::new(1, "127.0.0.1:1", "/tmp/x", "c");
        assert_eq!(config.log_sync, LogSync::Durable);
    }
}

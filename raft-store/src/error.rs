//! Typed errors, one enum per boundary.
//!
//! - [`Error`]: opening and running a node (data directory, I/O, raft fatal).
//! - [`WriteError`]: a write through [`crate::node::RaftNode::write`].
//! - [`ReadError`]: a linearizable read through [`crate::node::RaftNode::read_index`].
//! - [`AdminError`]: membership administration.
//! - [`InvalidCommand`], [`SnapshotError`]: what a
//!   [`crate::state_machine::StateMachine`] reports from `validate` and
//!   `restore`.

use std::path::PathBuf;

use crate::types::NodeId;

/// Opening or running a node.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The data directory cannot be used; nothing in it was changed.
    #[error("data directory {path}: {problem}")]
    DataDir {
        /// The directory or file at fault.
        path: PathBuf,
        /// What is wrong and what to do.
        problem: String,
    },
    /// Another process holds the data directory's database open (sled's
    /// file lock): another gateway, an old pod still holding the volume, or
    /// an offline tool. Nothing in the directory was read or changed.
    #[error(
        "data directory {path} is in use by another process{}: its database is locked by a running \
         openshell-gateway or offline tool; stop that process first (for a pod, wait until the old pod has \
         terminated and released the volume) and retry; nothing was changed, and the data is intact (do not \
         wipe or replace it)",
        holder_text(.holder)
    )]
    InUse {
        /// The data directory.
        path: PathBuf,
        /// The pid holding the lock, when `/proc/locks` names it.
        holder: Option<u32>,
    },
    /// An I/O error on a file of the data directory.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// sled failed.
    #[error("sled database {path}: {source}")]
    Sled {
        /// The database directory.
        path: PathBuf,
        /// sled's error.
        #[source]
        source: sled::Error,
    },
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// openraft refused to start or stopped.
    #[error("raft: {0}")]
    Raft(String),
    /// An administrative call failed.
    #[error(transparent)]
    Admin(#[from] AdminError),
}

/// " (pid N)" when the lock holder is known.
fn holder_text(holder: &Option<u32>) -> String {
    holder
        .map(|pid| format!(" (pid {pid})"))
        .unwrap_or_default()
}

/// Result of fallible node operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A write that did not (certainly) take effect.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum WriteError {
    /// No leader was known within the retry bound; the write was not appended.
    #[error("no leader elected within {waited_ms} ms; the write was not applied, retry later")]
    NoLeader {
        /// How long the node waited for a leader.
        waited_ms: u64,
    },
    /// The write was sent but its outcome is unknown (timeout or lost
    /// connection after sending): it may or may not have been applied.
    #[error("outcome unknown: {0}")]
    Unknown(String),
    /// The command is malformed; it was not appended.
    #[error("command rejected: {0}")]
    Rejected(String),
    /// The node is shutting down or raft stopped.
    #[error("raft stopped: {0}")]
    Fatal(String),
    /// The write was applied at `log_index`, but the state machine answered
    /// its batch of `commands` commands with `replies` responses, so no
    /// response can be matched to its command. A broken invariant of the
    /// state-machine storage; do not retry (the write took effect).
    #[error(
        "applied at log index {log_index}, but {replies} responses came back for {commands} commands; the response is lost"
    )]
    ReplyMismatch {
        /// The log index of the batch entry.
        log_index: u64,
        /// Commands in the batch.
        commands: usize,
        /// Responses the state machine returned.
        replies: usize,
    },
}

/// A linearizable read that could not be served.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ReadError {
    /// No leader could confirm a read index within the retry bound.
    #[error("no leader could confirm a read index within {waited_ms} ms; retry later")]
    NoLeader {
        /// How long the node waited.
        waited_ms: u64,
    },
    /// This node did not apply up to the read index in time.
    #[error("timed out waiting to apply up to read index {read_index}")]
    Timeout {
        /// The index the read must observe.
        read_index: u64,
    },
    /// The node is shutting down or raft stopped.
    #[error("raft stopped: {0}")]
    Fatal(String),
}

/// A membership administration call that failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum AdminError {
    /// This node is not the leader; the call must go to `leader_id`.
    #[error("not the leader; the leader is node {leader_id} at {leader_addr}")]
    NotLeader {
        /// The leader's id.
        leader_id: NodeId,
        /// The leader's address.
        leader_addr: String,
    },
    /// No leader is known.
    #[error("no leader is known; wait for an election or check quorum")]
    NoLeader,
    /// The node id is neither a voter nor a learner of the cluster.
    #[error("node {0} is not in the cluster (neither voter nor learner)")]
    UnknownNode(NodeId),
    /// The request is invalid.
    #[error("invalid request: {0}")]
    InvalidArgument(String),
    /// The cluster is already initialized with another membership.
    #[error("already initialized: {0}")]
    AlreadyInitialized(String),
    /// The operation did not complete in time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// Another failure, described.
    #[error("{0}")]
    Failed(String),
    /// The leader could not commit a membership change within the write
    /// timeout: no majority of the voters acknowledged it. The message says
    /// what was proposed and how it completes.
    #[error("no quorum: {0}")]
    NoQuorum(String),
    /// The cluster's state does not allow the change (a learner that has not
    /// caught up, an address where another node answers); nothing changed
    /// unless the message says otherwise.
    #[error("{0}")]
    Refused(String),
}

/// A command a [`crate::state_machine::StateMachine`] refuses to propose
/// (`validate`): the reason says what is malformed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{reason}")]
pub struct InvalidCommand {
    /// What is malformed.
    pub reason: String,
}

impl InvalidCommand {
    /// A refusal for `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        InvalidCommand {
            reason: reason.into(),
        }
    }
}

/// A snapshot state a [`crate::state_machine::StateMachine`] cannot decode
/// (`restore`): the reason says what is damaged.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{reason}")]
pub struct SnapshotError {
    /// What is damaged.
    pub reason: String,
}

impl SnapshotError {
    /// A decoding failure for `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        SnapshotError {
            reason: reason.into(),
        }
    }
}

//! The openraft type configuration, the batch [`Command`] and [`Reply`] it
//! carries, and the outcome of an applied write ([`Applied`]).
//!
//! Commands and responses are opaque bytes in the state machine's own wire
//! format, so the raft layer stays generic and the log encoding is owned by
//! the state machine (see [`crate::state_machine::StateMachine`]).

use std::io::Cursor;

use serde::{Deserialize, Serialize};

/// A raft node id. 0 is reserved for "none" on the wire.
pub type NodeId = u64;

/// One log entry's payload: a batch of one or more commands, each in the
/// state machine's wire format, applied in order at the entry's index.
///
/// The leader groups writes that queue up while the previous entry is being
/// made durable (see [`crate::batcher`]), so one fsync commits many writes. All
/// commands of a batch share the log index; the batch applies atomically (no
/// reader sees a state between two of its commands).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command(pub Vec<Vec<u8>>);

/// The state machine's responses to one entry, one per command in order.
/// Blank and membership entries reply with no responses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply(pub Vec<Vec<u8>>);

/// The outcome of a write that was applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The log index that applied it (the resource version of what it wrote).
    pub log_index: u64,
    /// The state machine's response, in its wire format.
    pub response: Vec<u8>,
}

openraft::declare_raft_types!(
    /// Type configuration of the gateway raft group.
    pub TypeConfig:
        D = Command,
        R = Reply,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        SnapshotData = Cursor<Vec<u8>>,
);

/// Aliases that keep signatures short.
pub mod typ {
    use super::TypeConfig;
    pub type Entry = openraft::Entry<TypeConfig>;
    pub type LogId = openraft::LogId<u64>;
    pub type Vote = openraft::Vote<u64>;
    pub type StorageError = openraft::StorageError<u64>;
    pub type StoredMembership = openraft::StoredMembership<u64, openraft::BasicNode>;
    pub type SnapshotMeta = openraft::SnapshotMeta<u64, openraft::BasicNode>;
    pub type Snapshot = openraft::Snapshot<TypeConfig>;
    pub type Raft = openraft::Raft<TypeConfig>;
    pub type RaftError<E = openraft::error::Infallible> = openraft::error::RaftError<u64, E>;
    pub type RpcError<E = openraft::error::Infallible> =
        openraft::error::RPCError<u64, openraft::BasicNode, RaftError<E>>;
    pub type ClientWriteError = openraft::error::ClientWriteError<u64, openraft::BasicNode>;
    pub type CheckIsLeaderError = openraft::error::CheckIsLeaderError<u64, openraft::BasicNode>;
}

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
///
/// Encoded as a sequence of byte strings: the same bytes bincode writes for
/// a sequence of `u8` sequences (a length, then the bytes), but copied whole
/// instead of one `u8` at a time, which kept a follower catching up on large
/// entries from answering within the heartbeat-bounded AppendEntries deadline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command(#[serde(with = "byte_strings")] pub Vec<Vec<u8>>);

/// The state machine's responses to one entry, one per command in order.
/// Blank and membership entries reply with no responses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reply(#[serde(with = "byte_strings")] pub Vec<Vec<u8>>);

/// `Vec<Vec<u8>>` as a sequence of byte strings (see [`Command`]).
mod byte_strings {
    use serde::{Deserialize, Deserializer, Serializer};
    use serde_bytes::{ByteBuf, Bytes};

    pub fn serialize<S: Serializer>(items: &[Vec<u8>], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(items.iter().map(|item| Bytes::new(item)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<Vec<u8>>, D::Error> {
        let items = Vec::<ByteBuf>::deserialize(deserializer)?;
        Ok(items.into_iter().map(ByteBuf::into_vec).collect())
    }
}

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
        AsyncRuntime = crate::runtime::Runtime,
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
    pub type RaftMetrics = openraft::RaftMetrics<u64, openraft::BasicNode>;
    pub type RaftError<E = openraft::error::Infallible> = openraft::error::RaftError<u64, E>;
    pub type RpcError<E = openraft::error::Infallible> =
        openraft::error::RPCError<u64, openraft::BasicNode, RaftError<E>>;
    pub type ClientWriteError = openraft::error::ClientWriteError<u64, openraft::BasicNode>;
    pub type CheckIsLeaderError = openraft::error::CheckIsLeaderError<u64, openraft::BasicNode>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-string encoding is the same bytes as the plain
    /// `Vec<Vec<u8>>` encoding logs and snapshots were written with.
    #[test]
    fn command_encoding_is_unchanged_on_the_wire() {
        let payload = vec![vec![1u8, 2, 3], Vec::new(), vec![255u8; 300]];
        let plain = bincode::serialize(&payload).expect("plain");
        assert_eq!(crate::codec::encode(&Command(payload.clone())), plain);
        assert_eq!(crate::codec::encode(&Reply(payload.clone())), plain);
        let back: Command = crate::codec::decode(&plain, "command").expect("decode");
        assert_eq!(back.0, payload);
    }
}

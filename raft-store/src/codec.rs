//! The versioned binary encoding of what raft-store writes to disk and sends
//! between replicas: log entries, votes, log ids, snapshot metadata and the
//! openraft RPC bodies.
//!
//! This is a wire format. Version [`ENCODING_V1`] is bincode 1 (fixed-width
//! little-endian integers, length-prefixed sequences) of openraft 0.9's serde
//! representation. A change of openraft's types or of the encoding needs a new
//! version number and a reader for the old one; the version travels with every
//! RPC ([`proto::raft::RaftPayload::encoding`]) and is recorded in the data
//! directory's identity record.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The only encoding this build writes and reads.
pub const ENCODING_V1: u32 = 1;

/// Largest gRPC message a replica sends or accepts by default
/// (`NodeConfig::max_message_bytes`). An append-entries batch whose
/// encoding is larger is never sent: the sender answers openraft with
/// `PayloadTooLarge` and openraft sends fewer entries
/// (`network::client`). Re-exported as `network::MAX_MESSAGE_BYTES`; it
/// lives here, below both directions of the network and the
/// configuration, so none of them imports another for it.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Smallest message limit a node may be configured with: one log entry
/// (at most `batcher::MAX_BATCH_BYTES`, or one command of at most
/// `batcher::MAX_COMMAND_BYTES`, both 64 KiB) with room to spare, so a
/// single entry always fits and a smaller batch always exists.
pub const MIN_MESSAGE_BYTES: usize = 256 * 1024;

/// A value that could not be decoded.
#[derive(Debug, thiserror::Error)]
#[error("cannot decode {what}: {source}")]
pub struct DecodeError {
    /// What was being decoded, e.g. "log entry 42".
    pub what: String,
    /// The decoder's complaint.
    #[source]
    pub source: bincode::Error,
}

/// Encodes `value`. Encoding an in-memory openraft value cannot fail; a failure
/// is a bug (e.g. a map with non-string keys in a future type), so it panics.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    match bincode::serialize(value) {
        Ok(bytes) => bytes,
        Err(e) => panic!("encoding an in-memory value failed: {e}"),
    }
}

/// Decodes bytes written by [`encode`]; `what` names the value in the error.
pub fn decode<T: DeserializeOwned>(
    bytes: &[u8],
    what: impl Into<String>,
) -> Result<T, DecodeError> {
    bincode::deserialize(bytes).map_err(|source| DecodeError {
        what: what.into(),
        source,
    })
}

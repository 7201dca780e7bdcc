//! The raft transport codec (`raft_store::codec::decode`) for every payload a
//! replica decodes: the three RPC requests the server takes from the
//! network, the three replies the client takes back, and the records the
//! log store reads from disk (entry, vote, log id).
//!
//! Selector (first byte, modulo 9): 0 AppendEntriesRequest, 1 VoteRequest,
//! 2 InstallSnapshotRequest, 3-5 their replies, 6 log entry, 7 vote, 8 log id.

use openraft::error::InstallSnapshotError;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use raft_store::codec;
use raft_store::types::typ::{Entry, LogId, RaftError, Vote};
use raft_store::types::{NodeId, TypeConfig};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Runs one input.
pub fn run(data: &[u8]) {
    let (selector, bytes) = super::split(data);
    match selector % 9 {
        0 => round_trip::<AppendEntriesRequest<TypeConfig>>(bytes),
        1 => round_trip::<VoteRequest<NodeId>>(bytes),
        2 => round_trip::<InstallSnapshotRequest<TypeConfig>>(bytes),
        3 => round_trip::<Result<AppendEntriesResponse<NodeId>, RaftError>>(bytes),
        4 => round_trip::<Result<VoteResponse<NodeId>, RaftError>>(bytes),
        5 => {
            round_trip::<Result<InstallSnapshotResponse<NodeId>, RaftError<InstallSnapshotError>>>(
                bytes,
            )
        }
        6 => round_trip::<Entry>(bytes),
        7 => round_trip::<Vote>(bytes),
        _ => round_trip::<LogId>(bytes),
    }
}

/// Decodes `bytes` as `T`; what decodes must encode to bytes that decode to
/// the same encoding again (the codec is a function of the value).
fn round_trip<T: Serialize + DeserializeOwned>(bytes: &[u8]) {
    let Ok(value) = codec::decode::<T>(bytes, "fuzz input") else {
        return;
    };
    let encoded = codec::encode(&value);
    match codec::decode::<T>(&encoded, "re-encoded value") {
        Ok(again) => assert!(
            codec::encode(&again) == encoded,
            "re-encoding a decoded {} changed it",
            std::any::type_name::<T>()
        ),
        Err(e) => panic!(
            "a decoded {} does not decode after encoding: {e}",
            std::any::type_name::<T>()
        ),
    }
}

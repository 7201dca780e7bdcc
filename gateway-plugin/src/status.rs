//! One mapping from each boundary's errors to gRPC `Status`, with the leader
//! hint in metadata (`x-openshell-leader-id`, `x-openshell-leader-addr`) when
//! the call must go to the leader.

use raft_store::{AdminError, ReadError, WriteError};
use tonic::metadata::MetadataValue;
use tonic::Status;

pub use proto::metadata::{FORWARDED, LEADER_ADDR, LEADER_ID};

/// Maps an administration error.
pub fn admin(e: AdminError) -> Status {
    match &e {
        AdminError::NotLeader {
            leader_id,
            leader_addr,
        } => {
            let mut status = Status::failed_precondition(e.to_string());
            if let Ok(v) = MetadataValue::try_from(leader_id.to_string()) {
                status.metadata_mut().insert(LEADER_ID, v);
            }
            if let Ok(v) = MetadataValue::try_from(leader_addr.as_str()) {
                status.metadata_mut().insert(LEADER_ADDR, v);
            }
            status
        }
        AdminError::NoLeader => Status::unavailable(e.to_string()),
        AdminError::UnknownNode(_) => Status::not_found(e.to_string()),
        AdminError::InvalidArgument(_) => Status::invalid_argument(e.to_string()),
        AdminError::AlreadyInitialized(_) => Status::already_exists(e.to_string()),
        AdminError::Timeout(_) => Status::deadline_exceeded(e.to_string()),
        AdminError::Failed(_) => Status::internal(e.to_string()),
    }
}

/// Maps a write error. `UNKNOWN` means the write may or may not have applied.
pub fn write(e: WriteError) -> Status {
    match &e {
        WriteError::NoLeader { .. } => Status::unavailable(e.to_string()),
        WriteError::Unknown(_) => Status::unknown(e.to_string()),
        WriteError::Rejected(_) => Status::invalid_argument(e.to_string()),
        WriteError::Fatal(_) => Status::unavailable(e.to_string()),
        // Applied, but the response is lost: not retryable, not UNKNOWN.
        WriteError::ReplyMismatch { .. } => Status::internal(e.to_string()),
    }
}

/// Maps a read error.
pub fn read(e: ReadError) -> Status {
    match &e {
        ReadError::NoLeader { .. } | ReadError::Fatal(_) => Status::unavailable(e.to_string()),
        ReadError::Timeout { .. } => Status::deadline_exceeded(e.to_string()),
    }
}

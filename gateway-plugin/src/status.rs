//! One mapping from each boundary's errors to gRPC `Status`: raft-store's
//! admin, write and read errors (with the leader hint in metadata,
//! `x-openshell-leader-id` and `x-openshell-leader-addr`, when the call must
//! go to the leader; `x-openshell-no-quorum` on a membership change the
//! leader could not commit), a pool command's typed rejection, and an object-store
//! precondition failure (with the current resource version).

use proto::objects::{RejectReason, Rejection};
use raft_store::{AdminError, ReadError, WriteError};
use tonic::metadata::MetadataValue;
use tonic::Status;

pub use proto::metadata::{
    COMPACTED_REVISION, FORWARDED, LEADER_ADDR, LEADER_ID, NO_QUORUM, REQUEST_ID_REUSED,
    RESOURCE_VERSION,
};

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
        // Any other gateway would reach the same leader: marked, so a client
        // reports it at once instead of trying the next gateway.
        AdminError::NoQuorum(_) => {
            let mut status = Status::unavailable(e.to_string());
            status
                .metadata_mut()
                .insert(NO_QUORUM, MetadataValue::from_static("1"));
            status
        }
        AdminError::Refused(_) => Status::failed_precondition(e.to_string()),
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

/// A state digest not taken at the asked index: `Passed` (ask a later
/// index) is FAILED_PRECONDITION, `NotReached` DEADLINE_EXCEEDED,
/// `TooFarAhead` INVALID_ARGUMENT, `Busy` RESOURCE_EXHAUSTED.
pub fn digest(e: &raft_store::digest::DigestError) -> Status {
    use raft_store::digest::DigestError;
    let message = e.to_string();
    match e {
        DigestError::Passed { .. } => Status::failed_precondition(message),
        DigestError::NotReached { .. } => Status::deadline_exceeded(message),
        DigestError::TooFarAhead { .. } => Status::invalid_argument(message),
        DigestError::Busy => Status::resource_exhausted(message),
    }
}

/// Checks an identifier from a request against the one rule
/// ([`pool::ids`]): `INVALID_ARGUMENT` naming the field and the rule broken.
pub fn check_id(field: &str, id: &str) -> Result<(), Status> {
    pool::ids::check_id(field, id).map_err(|e| Status::invalid_argument(e.to_string()))
}

/// The refusal of a write whose `request_id` was first used for another
/// write, applied at log index `first` ([`crate::requests`]): nothing was
/// applied. `FAILED_PRECONDITION` (the request is well-formed; the state,
/// an id already taken, refuses it), with `first` in
/// [`REQUEST_ID_REUSED`] so that a client tells it from a failed
/// compare-and-swap. Not retryable: the same request gets the same answer.
pub fn request_id_reused(request_id: &str, first: u64) -> Status {
    let mut status = Status::failed_precondition(format!(
        "request_id {request_id:?} was already used for another write (applied at log index {first}); \
         nothing was written: use a fresh request_id for every new write, and the same one only to retry the same request"
    ));
    if let Ok(v) = MetadataValue::try_from(first.to_string()) {
        status.metadata_mut().insert(REQUEST_ID_REUSED, v);
    }
    status
}

/// Maps a pool rejection (a failed precondition: nothing changed).
pub fn pool_rejection(reason: &pool::Reason) -> Status {
    use pool::Reason;
    let text = reason.to_string();
    match reason {
        Reason::UnknownMember(_) | Reason::UnknownSandbox(_) | Reason::UnknownOperation(_) => {
            Status::not_found(text)
        }
        Reason::EmptyId
        | Reason::ZeroCapacity
        | Reason::InvalidMaxParallel(_)
        | Reason::InvalidConfig(_)
        | Reason::InvalidTarget(_) => Status::invalid_argument(text),
        Reason::CapacityExhausted | Reason::NoEligibleMember | Reason::LaunchRefused(_) => {
            Status::resource_exhausted(text)
        }
        Reason::SandboxExists(_) | Reason::OperationExists(_) => Status::already_exists(text),
        _ => Status::failed_precondition(text),
    }
}

/// Maps an object-store rejection (certain: nothing changed); the current
/// resource version travels in [`RESOURCE_VERSION`].
pub fn object_rejection(r: Rejection) -> Status {
    let reason = RejectReason::try_from(r.reason).unwrap_or(RejectReason::Unspecified);
    let mut status = match reason {
        RejectReason::AlreadyExists => {
            Status::already_exists("object already exists (must_create)")
        }
        RejectReason::NotFound => Status::not_found("object does not exist"),
        _ => Status::failed_precondition(format!(
            "resource version mismatch: the object is at {}",
            r.current_resource_version
        )),
    };
    if let Ok(v) = MetadataValue::try_from(r.current_resource_version.to_string()) {
        status.metadata_mut().insert(RESOURCE_VERSION, v);
    }
    status
}

//! Bounds on a snapshot streamed to this node (InstallSnapshot chunks),
//! checked before openraft sees a chunk:
//!
//! - the snapshot id is an identifier (`proto::ids`: 1 to 128 characters of
//!   `[A-Za-z0-9._-]`, not starting with `.` or `-`);
//! - no chunk ends past [`NodeConfig::max_snapshot_bytes`](crate::config::NodeConfig)
//!   (openraft 0.9 announces no total size; the bound is the size a
//!   snapshot may have). Without it a chunk at offset 2^40 made the
//!   receiving buffer grow to that size and the process abort;
//! - the last chunk (`done`) completes a snapshot that
//!   [`StateMachine::restore`] decodes. Without it an undecodable snapshot
//!   reached the state machine's install, whose error openraft treats as a
//!   storage failure: the node stopped.
//!
//! A refusal is a gRPC error to the leader, which retries the chunk a few
//! times and then streams the snapshot again from its start; this node
//! keeps serving. To decode the whole snapshot at its last chunk, the
//! chunks received since offset 0 are kept here too: a snapshot being
//! received takes twice its size in memory, at most twice the bound.

use std::marker::PhantomData;
use std::sync::Mutex;

use tonic::Status;

use crate::state_machine::StateMachine;
use crate::types::typ::SnapshotMeta;

/// Default bound of a received snapshot: 1 GiB.
pub const DEFAULT_MAX_SNAPSHOT_BYTES: u64 = 1024 * 1024 * 1024;

/// The snapshot being received, as far as it was received in order.
struct Receiving {
    /// Its id (a new id at offset 0 starts a new one).
    id: String,
    /// The bytes from offset 0.
    data: Vec<u8>,
}

/// The bounds of the module doc, for snapshots of state machine `SM`.
pub struct IncomingSnapshot<SM: StateMachine> {
    /// Largest snapshot accepted, in bytes.
    max_bytes: u64,
    /// The one snapshot being received (openraft receives one at a time).
    /// A std mutex: held only to append a chunk, never across an await.
    receiving: Mutex<Option<Receiving>>,
    /// Only `SM::restore` is used.
    machine: PhantomData<fn() -> SM>,
}

impl<SM: StateMachine> IncomingSnapshot<SM> {
    /// Bounds snapshots to `max_bytes`.
    pub fn new(max_bytes: u64) -> Self {
        IncomingSnapshot {
            max_bytes,
            receiving: Mutex::new(None),
            machine: PhantomData,
        }
    }

    /// The bound, in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Checks one chunk (`data` at `offset` of the snapshot `meta`; `done`
    /// on the last) before openraft receives it. On the last chunk, returns
    /// the whole snapshot for [`IncomingSnapshot::verify`] (a decode of up
    /// to the bound: the caller runs it off the async workers).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for a snapshot id outside the identifier rule;
    /// `RESOURCE_EXHAUSTED` for a chunk that ends past the bound;
    /// `FAILED_PRECONDITION` for a last chunk whose snapshot was not
    /// received from its start here (the leader then streams it again from
    /// offset 0).
    pub fn check(
        &self,
        meta: &SnapshotMeta,
        offset: u64,
        data: &[u8],
        done: bool,
    ) -> Result<Option<Vec<u8>>, Status> {
        let id = &meta.snapshot_id;
        proto::ids::check_id("snapshot_id", id)
            .map_err(|e| refuse(Status::invalid_argument(e.to_string())))?;
        let end = offset.saturating_add(data.len() as u64);
        if end > self.max_bytes {
            return Err(refuse(Status::resource_exhausted(format!(
                "snapshot {id}: a chunk ends at byte {end}, past this node's bound of {} bytes \
                 (openshell.gateway.raft.max_snapshot_bytes)",
                self.max_bytes
            ))));
        }
        let mut receiving = self.receiving.lock().unwrap_or_else(|p| p.into_inner());
        if offset == 0 {
            *receiving = Some(Receiving {
                id: id.clone(),
                data: Vec::new(),
            });
        }
        match receiving.as_mut() {
            // A resent chunk replaces what followed its offset.
            Some(r) if r.id == *id && offset <= r.data.len() as u64 => {
                r.data.truncate(offset as usize);
                r.data.extend_from_slice(data);
            }
            // Not received in order here: openraft decides (a chunk of
            // another snapshot not at 0 is a mismatch the leader resolves
            // by starting over); the last chunk is refused below.
            _ => *receiving = None,
        }
        if !done {
            return Ok(None);
        }
        let Some(complete) = receiving.take() else {
            return Err(refuse(Status::failed_precondition(format!(
                "snapshot {id} was not received in order from its start; send it again from offset 0"
            ))));
        };
        Ok(Some(complete.data))
    }

    /// Whether the complete snapshot `id` decodes as an `SM` state.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` naming what does not decode.
    pub fn verify(id: &str, data: &[u8]) -> Result<(), Status> {
        SM::restore(data).map(drop).map_err(|e| {
            refuse(Status::invalid_argument(format!(
                "snapshot {id} ({} bytes) does not decode: {e}",
                data.len()
            )))
        })
    }
}

/// Logs a refused chunk and hands the status back.
fn refuse(status: Status) -> Status {
    tracing::warn!(code = ?status.code(), reason = status.message(), "refused a snapshot chunk");
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::Objects;

    fn meta(id: &str) -> SnapshotMeta {
        SnapshotMeta {
            snapshot_id: id.into(),
            ..Default::default()
        }
    }

    #[test]
    fn chunks_past_the_bound_or_with_a_bad_id_are_refused() {
        let guard = IncomingSnapshot::<Objects>::new(1024);
        let code = |r: Result<Option<Vec<u8>>, Status>| r.unwrap_err().code();
        assert_eq!(
            code(guard.check(&meta("1-2-3"), 1 << 40, b"x", false)),
            tonic::Code::ResourceExhausted
        );
        assert_eq!(
            code(guard.check(&meta("1-2-3"), u64::MAX, b"x", false)),
            tonic::Code::ResourceExhausted
        );
        assert_eq!(
            code(guard.check(&meta("1-2-3"), 1000, &[0; 25], false)),
            tonic::Code::ResourceExhausted
        );
        assert_eq!(
            code(guard.check(&meta("../../x"), 0, b"x", false)),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            code(guard.check(&meta(""), 0, b"x", false)),
            tonic::Code::InvalidArgument
        );
    }

    #[test]
    fn the_last_chunk_must_complete_a_decodable_snapshot() {
        let guard = IncomingSnapshot::<Objects>::new(1 << 20);
        let verify = |id: &str, data: Option<Vec<u8>>| {
            IncomingSnapshot::<Objects>::verify(id, &data.expect("complete"))
        };
        // Garbage in one chunk, then in two.
        let complete = guard
            .check(&meta("a"), 0, b"\xff\xff garbage", true)
            .unwrap();
        assert_eq!(
            verify("a", complete).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            guard.check(&meta("b"), 0, b"\xff\xff", false).unwrap(),
            None
        );
        let complete = guard.check(&meta("b"), 2, b" garbage", true).unwrap();
        assert_eq!(complete.as_deref(), Some(&b"\xff\xff garbage"[..]));
        assert!(verify("b", complete).is_err());
        // A good one, with a chunk resent.
        let good = Objects::default().snapshot();
        let (head, tail) = good.split_at(good.len() / 2);
        guard.check(&meta("c"), 0, head, false).unwrap();
        guard.check(&meta("c"), 0, head, false).unwrap();
        let complete = guard
            .check(&meta("c"), head.len() as u64, tail, true)
            .unwrap();
        assert_eq!(complete.as_deref(), Some(&good[..]));
        verify("c", complete).unwrap();
        // A last chunk of a snapshot never started here.
        assert_eq!(
            guard.check(&meta("d"), 5, b"x", true).unwrap_err().code(),
            tonic::Code::FailedPrecondition
        );
    }
}

//! Jepsen operations as typed values: what each event's `value` holds, per
//! workload and `f` (HISTORY.md; the shapes are documented next to each
//! workload). The workloads write these structs and the checkers read them
//! back, so a missing or misspelt field is an [`ValueError`] naming the
//! event instead of a `""` or `0` read in its place.
//!
//! - [`pool`]: the pool workload's values (sandbox views, status reads,
//!   grants, acks, reports, drains).
//!
//! The register workload's values (`read`, `write`, `cas`) are decoded by
//! [`crate::checker::linear::ops_by_key`] into [`crate::checker::linear::RegOp`].

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::history::{Event, OpType};

pub mod pool;

/// An event whose `value` is not of the shape its `f` and `type` promise.
#[derive(Debug, thiserror::Error)]
#[error("event {index} ({kind:?} {f}): {source}")]
pub struct ValueError {
    /// The event's index.
    pub index: u64,
    /// Its `type`.
    pub kind: OpType,
    /// Its `f`.
    pub f: String,
    /// What serde found wrong (names the missing or unknown field).
    #[source]
    pub source: serde_json::Error,
}

impl ValueError {
    /// A field the value lacks (for fields only some completions carry).
    pub fn missing(event: &Event, field: &'static str) -> ValueError {
        ValueError {
            index: event.index,
            kind: event.kind,
            f: event.f.clone(),
            source: serde::de::Error::missing_field(field),
        }
    }
}

/// Decodes `event.value` as a `T`.
///
/// # Errors
/// When the value is not a `T` (a missing, unknown or mistyped field).
pub fn decode<T: DeserializeOwned>(event: &Event) -> Result<T, ValueError> {
    T::deserialize(&event.value).map_err(|source| ValueError {
        index: event.index,
        kind: event.kind,
        f: event.f.clone(),
        source,
    })
}

/// `value` as JSON, to record (plain structs of strings, numbers and bools
/// always serialize).
pub fn to_value<T: Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

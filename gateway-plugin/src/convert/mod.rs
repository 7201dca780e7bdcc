//! Conversions between the pool and raft-store types and the proto messages,
//! one module per direction, so the services stay thin adapters and a wire
//! name is spelled in one place.
//!
//! - [`to_proto`]: pool / raft-store types -> proto messages (assignment
//!   snapshots, grants, operator views, cluster status, refusals).
//! - [`from_proto`]: proto requests -> pool commands and raft-store
//!   arguments.

pub mod from_proto;
pub mod to_proto;

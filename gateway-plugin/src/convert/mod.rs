//! Conversions between the pool and raft-store types and the proto messages,
//! one module per direction, so the services stay thin adapters and a wire
//! name is spelled in one place.
//!
//! - [`to_proto`]: pool / raft-store types -> proto messages (assignment
//!   snapshots, grants, operator views, cluster status, refusals).
//! - [`from_proto`]: proto requests -> pool commands and raft-store
//!   arguments.
//! - [`page`]: keyset pages of the pool's operator reads (status, sandbox
//!   list) with `raft_store::page_token`'s tokens.

pub mod from_proto;
pub mod page;
pub mod to_proto;

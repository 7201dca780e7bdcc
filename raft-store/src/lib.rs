//! A durable openraft group over sled with a gRPC transport, generic over its
//! state machine.
//!
//! `raft-store` knows nothing of supervisor pools: it replicates opaque
//! commands and applies them to any [`StateMachine`]. The gateway composes the
//! object store ([`objects`]) and the pool state machine into one machine, so
//! one log orders both.
//!
//! # Layout
//! - [`types`]: the openraft type configuration ([`TypeConfig`]).
//! - [`codec`]: the versioned binary encoding of log entries, votes and raft
//!   RPC bodies (a wire format: see `docs/storage.md`).
//! - [`db`]: the on-disk data directory: sled database, identity record,
//!   durable flush (sled flush + fdatasync).
//! - [`log_store`]: openraft's `RaftLogStorage` over sled (group commit).
//! - [`state_machine`]: the [`StateMachine`] trait and openraft's
//!   `RaftStateMachine` over it, with checksummed snapshot files.
//! - [`network`]: outbound raft client (`network::client`) and inbound
//!   `RaftTransport` service (`network::server`).
//! - [`node`]: [`RaftNode`], the embedding API: start, write (forwarded to the
//!   leader), linearizable read (read-index), membership admin and status.
//! - [`objects`]: the generic object store state machine.
//! - [`seed`]: offline restore from a backup and forced recovery of a
//!   one-voter cluster.
//! - [`error`]: typed errors of each boundary.
//!
//! # Example
//! ```no_run
//! # async fn example() -> Result<(), raft_store::Error> {
//! use raft_store::{objects::Objects, NodeConfig, RaftNode};
//! let config = NodeConfig::new(1, "127.0.0.1:7001", "/tmp/node-1", "dev");
//! let node: RaftNode<Objects> = RaftNode::start(config).await?;
//! // Serve node.transport_service() on the listen address, then:
//! node.initialize(vec![(1, "127.0.0.1:7001".to_string())]).await?;
//! # Ok(()) }
//! ```

// openraft's storage traits return its `StorageError` (224 bytes); our helpers
// return the same type so `?` composes, rather than boxing at every call.
#![allow(clippy::result_large_err)]

pub mod codec;
pub mod db;
pub mod error;
pub mod log_store;
pub mod network;
pub mod node;
pub mod objects;
pub mod seed;
pub mod state_machine;
pub mod types;

pub use error::{AdminError, Error, ReadError, WriteError};
pub use node::{Applied, ClusterStatus, NodeConfig, NodeStatus, RaftNode};
pub use state_machine::StateMachine;
pub use types::{NodeId, TypeConfig};

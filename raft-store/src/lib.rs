//! A durable openraft group over sled with a gRPC transport, generic over its
//! state machine.
//!
//! `raft-store` knows nothing of supervisor pools: it replicates opaque
//! commands and applies them to any [`StateMachine`]. The gateway composes the
//! object store ([`objects`]) and the pool state machine into one machine, so
//! one log orders both.
//!
//! # Layout
//! Listed from the bottom up: each module imports only modules above it in
//! this list (never one that imports it back).
//! - [`runtime`]: the async runtime openraft runs on (tokio, with an
//!   election-timeout generator a simulation can seed).
//! - [`types`]: the openraft type configuration ([`TypeConfig`]), the batch
//!   command and reply, and [`Applied`], the outcome of a write.
//! - [`error`]: typed errors of each boundary, and the [`InvalidCommand`] /
//!   [`SnapshotError`] a state machine reports.
//! - [`fault`]: the fault switches of the checkers' proofs (off unless
//!   built with a `fault-*` feature and turned on at start-up).
//! - [`codec`]: the versioned binary encoding of log entries, votes and raft
//!   RPC bodies (a wire format: see `docs/storage.md`), and the largest
//!   message a replica sends.
//! - [`observe`]: the [`Observer`] an embedder passes in the node config
//!   to measure log syncs, batches, snapshots and leader changes.
//! - [`config`]: [`NodeConfig`] and its translation into openraft's config.
//! - [`db`]: the on-disk data directory: sled database (segment size),
//!   identity record, watermark, refusal of damaged or foreign data.
//! - [`watermark`]: the `raft.hwm` file: what the database is known to hold.
//! - [`durability`]: the flusher thread: sled flush, then fdatasync of any
//!   blob file and of the database file, with group commit.
//! - [`log_store`]: openraft's `RaftLogStorage` over sled (group commit).
//! - [`state_machine`]: the [`StateMachine`] trait and openraft's
//!   `RaftStateMachine` over it, with checksummed snapshot files.
//! - [`store`]: the storage a node runs on, as two traits ([`NodeLog`],
//!   [`NodeMachine`]) that the sled log and the snapshot-file state
//!   machine implement, and the simulation's in-memory stores too.
//! - [`page_token`]: the one page-token codec of every keyset-paginated
//!   read (object lists, pool status, sandbox lists).
//! - [`objects`]: the generic object store state machine (its list tokens
//!   are [`page_token`]'s).
//! - [`seed`]: offline restore from a backup and forced recovery of a
//!   one-voter cluster.
//! - [`local_status`]: the read-only view of a stopped node's data
//!   directory (`openshell-pool local-status`).
//! - [`batcher`]: the write batcher; [`batcher::Proposer`] groups local
//!   proposals into one log entry each and pauses them for a transfer.
//! - [`membership`]: the membership view (leader, voters, learners,
//!   replication progress, a half-done change) and membership
//!   administration (identity-checked, bounded by the write timeout).
//! - [`network::client`]: every outbound call to a peer: openraft's
//!   network, forwarding a write to the leader, the remote read-index, the
//!   calls of a leadership transfer, `identify`, the per-target append
//!   acknowledgements, and `never_sent` (was a failed call never sent?,
//!   from its typed error source).
//! - [`leadership`]: leadership transfer and the election hold.
//! - [`network::server`]: the inbound `RaftTransport` service; it holds
//!   only the raft handle, the peer authenticator, the proposer and the
//!   election hold, and refuses calls meant for another node.
//!   [`network::incoming_snapshot`] bounds received InstallSnapshot chunks
//!   (size, snapshot id, a snapshot that decodes) before raft sees them.
//! - [`node`]: [`RaftNode`], the embedding API that wires the above: start,
//!   write (forwarded to the leader; its child module `node/write.rs`
//!   abandons a forward when leadership moves and resends only idempotent
//!   commands, [`node::Resend`]), linearizable read (read-index),
//!   membership admin, leadership transfer and status; `node/leading.rs`:
//!   reads and proposals of a leader-side actor bound to one raft term,
//!   never served by or forwarded to another node ([`Leading`]).
//! - `bench` (feature `bench`, benchmarks only): the file limit (also
//!   `benches/commit_latency.rs`'s) and the in-process three-node group
//!   that `openshell-bench compare` measures against.
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

pub mod batcher;
#[cfg(feature = "bench")]
pub mod bench;
pub mod campaign;
pub mod codec;
pub mod config;
pub mod db;
pub mod digest;
pub mod durability;
pub mod error;
pub mod fault;
pub mod leadership;
pub mod local_status;
pub mod log_store;
pub mod membership;
pub mod modes;
pub mod network;
pub mod node;
pub mod object_events;
pub mod objects;
pub mod observe;
pub mod page_token;
mod purger;
pub mod runtime;
pub mod seed;
pub mod state_machine;
pub mod store;
pub mod types;
pub mod watermark;

pub use config::{LogSync, NodeConfig};
pub use error::{AdminError, Error, InvalidCommand, ReadError, SnapshotError, WriteError};
pub use membership::MembershipChange;
pub use node::{ClusterStatus, Leading, NodeStatus, RaftNode};
pub use observe::Observer;
pub use state_machine::StateMachine;
pub use store::{NodeLog, NodeMachine};
pub use types::{Applied, NodeId, TypeConfig};

//! The raft network over gRPC: outbound calls in [`client`] (openraft's
//! network, write forwarding, remote read-index, leadership-transfer calls)
//! over the per-address channels of [`channel_cache`] (what a failed call
//! tells: [`sent`]),
//! follower-side batching of forwarded writes in [`forward_batch`] (over
//! [`client`]'s channels),
//! the inbound `RaftTransport` service in [`server`], which checks every
//! InstallSnapshot chunk against the bounds of [`incoming_snapshot`]. Neither imports the
//! other's types beyond the shared metadata key, and neither imports
//! [`crate::node`].

pub mod channel_cache;
pub mod client;
pub mod forward_batch;
pub mod incoming_snapshot;
pub mod sent;
pub mod server;

pub use crate::codec::MAX_MESSAGE_BYTES;

//! The raft network over gRPC: openraft's network in [`peer`] (appends
//! that outlive openraft's wait for them: [`outstanding`]), the other
//! outbound calls in [`client`] (write forwarding, remote read-index,
//! leadership-transfer calls), both over the per-address channels of
//! [`channel_cache`] (what a failed call tells: [`sent`]),
//! follower-side batching of forwarded writes in [`forward_batch`] (over
//! [`client`]'s channels),
//! the inbound `RaftTransport` service in [`server`], which checks every
//! InstallSnapshot chunk against the bounds of [`incoming_snapshot`] and
//! tells [`crate::campaign`] each AppendEntries and Vote answer. Neither imports the
//! other's types beyond the shared metadata key, and neither imports
//! [`crate::node`].

pub mod channel_cache;
pub mod client;
pub mod forward_batch;
pub mod incoming_snapshot;
pub mod outstanding;
pub mod peer;
pub mod sent;
pub mod server;

pub use crate::codec::MAX_MESSAGE_BYTES;

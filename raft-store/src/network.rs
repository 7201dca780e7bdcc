//! The raft network over gRPC: outbound calls in [`client`] (openraft's
//! network, write forwarding, remote read-index, leadership-transfer calls),
//! the inbound `RaftTransport` service in [`server`]. Neither imports the
//! other's types beyond the shared metadata key, and neither imports
//! [`crate::node`].

pub mod client;
pub mod server;

pub use crate::codec::MAX_MESSAGE_BYTES;

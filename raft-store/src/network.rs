//! The raft network over gRPC: outbound calls in [`client`], the inbound
//! `RaftTransport` service in [`server`].

pub mod client;
pub mod server;

/// Largest gRPC message a replica sends or accepts (a snapshot chunk or an
/// append-entries batch stays far below it).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

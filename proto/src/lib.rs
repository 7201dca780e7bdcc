//! Protocol buffers of the OpenShell supervisor-pool store and their generated
//! tonic/prost code.
//!
//! # Layout
//! - [`raft`]: `openshell.raft.v1.RaftTransport`, gateway-to-gateway raft RPCs,
//!   write forwarding and read-index.
//! - [`cluster`]: `openshell.cluster.v1.ClusterAdmin`, membership and status.
//! - [`objects`]: `openshell.objects.v1.ObjectStore`, the generic object store.

/// Raft transport between gateway replicas.
pub mod raft {
    tonic::include_proto!("openshell.raft.v1");
}

/// Cluster administration.
pub mod cluster {
    tonic::include_proto!("openshell.cluster.v1");
}

/// The generic object store.
pub mod objects {
    tonic::include_proto!("openshell.objects.v1");
}

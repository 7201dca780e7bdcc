//! Protocol buffers of the OpenShell supervisor-pool store and their generated
//! tonic/prost code.
//!
//! # Layout
//! - [`raft`]: `openshell.raft.v1.RaftTransport`, gateway-to-gateway raft RPCs,
//!   write forwarding and read-index.
//! - [`cluster`]: `openshell.cluster.v1.ClusterAdmin`, membership and status.
//! - [`objects`]: `openshell.objects.v1.ObjectStore`, the generic object store,
//!   and its raft log records.
//! - [`supervisor_host`]: `openshell.supervisor_host.v1.SupervisorHost`, the
//!   supervisor stream (exec included: gateways never dial supervisors).
//! - [`pool_types`]: `openshell.pool_types.v1`, the pool enums both the
//!   supervisor stream and the operator surface carry (`SandboxPhase`,
//!   `MemberState`); [`names`] spells their lowercase names.
//! - [`pool_admin`]: `openshell.pool_admin.v1.PoolAdmin`, the operator surface.
//! - [`sandbox_runtime`]: `openshell.sandbox_runtime.v1.SandboxRuntime` and
//!   the signed `Grant`; [`grant`] signs and verifies grants.
//! - [`gateway`]: `openshell.gateway.v1`, the gateway's raft log and snapshot
//!   records, and `PeerRelay` (gateway to gateway: an exec relayed to the
//!   gateway holding the owner's supervisor stream).
//! - [`client`]: [`client::connect`], the one builder of every outbound gRPC
//!   channel, by [`client::Role`] and [`client::ClientConfig`].
//! - [`attach`]: the typed refusal carried in a refused supervisor stream.
//! - [`metadata`]: gRPC metadata keys (the leader hint, the forwarded mark).
//! - [`exec`]: the bounds of `ExecSandbox` every hop enforces (timeout cap,
//!   output cap).
//! - [`secret`]: constant-time comparison of tokens, `Debug` redaction, and
//!   reading a token from a file.
//! - [`watched_file`]: a small config file re-read when it changes (trusted
//!   grant keys, member credentials), keeping the old contents on a bad one.
//! - [`text`]: free-form text from the network: the "printable" rule of
//!   a supervisor's address and uid, and escaping for terminals.
//! - [`backup`]: the backup file format (`openshell-pool backup save` writes
//!   it, `openshell-gateway restore` reads it).
//!
//! - [`ids`]: the identifier rule (re-exported from `pool::ids`).
//!
//! The modules mirror the protobuf packages (`openshell::objects::v1`) so that
//! generated cross-package references resolve; the short names re-export them.

/// Generated code, one module per protobuf package. tonic generates one long
/// `call` function per service; the size limits apply to code we write.
#[allow(clippy::too_many_lines)]
pub mod openshell {
    /// `openshell.raft.*`
    pub mod raft {
        /// `openshell.raft.v1`
        pub mod v1 {
            tonic::include_proto!("openshell.raft.v1");
        }
    }
    /// `openshell.cluster.*`
    pub mod cluster {
        /// `openshell.cluster.v1`
        pub mod v1 {
            tonic::include_proto!("openshell.cluster.v1");
        }
    }
    /// `openshell.objects.*`
    pub mod objects {
        /// `openshell.objects.v1`
        pub mod v1 {
            tonic::include_proto!("openshell.objects.v1");
        }
    }
    /// `openshell.pool_types.*`
    pub mod pool_types {
        /// `openshell.pool_types.v1`
        pub mod v1 {
            tonic::include_proto!("openshell.pool_types.v1");
        }
    }
    /// `openshell.supervisor_host.*`
    pub mod supervisor_host {
        /// `openshell.supervisor_host.v1`
        pub mod v1 {
            tonic::include_proto!("openshell.supervisor_host.v1");
        }
    }
    /// `openshell.pool_admin.*`
    pub mod pool_admin {
        /// `openshell.pool_admin.v1`
        pub mod v1 {
            tonic::include_proto!("openshell.pool_admin.v1");
        }
    }
    /// `openshell.sandbox_runtime.*`
    pub mod sandbox_runtime {
        /// `openshell.sandbox_runtime.v1`
        pub mod v1 {
            tonic::include_proto!("openshell.sandbox_runtime.v1");
        }
    }
    /// `openshell.gateway.*`
    pub mod gateway {
        /// `openshell.gateway.v1`
        pub mod v1 {
            tonic::include_proto!("openshell.gateway.v1");
        }
    }
}

/// The encoded `FileDescriptorSet` of every `.proto` file above: what gRPC
/// server reflection serves, so `grpcurl` and other generic clients list and
/// call the services without the `.proto` files.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("openshell_descriptor");

pub use openshell::cluster::v1 as cluster;
pub use openshell::gateway::v1 as gateway;
pub use openshell::objects::v1 as objects;
pub use openshell::pool_admin::v1 as pool_admin;
pub use openshell::pool_types::v1 as pool_types;
pub use openshell::raft::v1 as raft;
pub use openshell::sandbox_runtime::v1 as sandbox_runtime;
pub use openshell::supervisor_host::v1 as supervisor_host;

pub mod attach;
pub mod backup;
pub mod client;
pub mod discovery;
pub mod exec;
pub mod grant;
pub mod logs;
pub mod metadata;
pub mod names;
pub mod secret;
pub mod text;
pub mod tls;
pub mod watched_file;

/// The identifier rule (sandbox, member and object ids), owned by
/// [`pool::ids`] so that `apply` and every API check the same rule.
pub use pool::ids;

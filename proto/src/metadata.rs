//! gRPC metadata keys the gateways and their clients agree on: the leader
//! hint a gateway attaches to a `FAILED_PRECONDITION` reply (a client
//! follows it once), and the mark on a forwarded call.

/// Metadata key of the leader's node id in a `FAILED_PRECONDITION` reply.
pub const LEADER_ID: &str = "x-openshell-leader-id";
/// Metadata key of the leader's address.
pub const LEADER_ADDR: &str = "x-openshell-leader-addr";
/// Set on a call a gateway forwarded, so the receiver does not forward again.
pub const FORWARDED: &str = "x-openshell-forwarded";
/// Set on an `UNAVAILABLE` reply of a membership change that a leader could
/// not commit in time for lack of a quorum: asking another gateway would
/// reach the same leader, so a client reports it at once.
pub const NO_QUORUM: &str = "x-openshell-no-quorum";
/// Set (`1`) on a PoolAdmin `CreateSandbox` / `DeleteSandbox` reply that
/// answers a retried `request_id` with the first attempt's outcome (the
/// object store says so in its responses' `replayed` field instead).
pub const REPLAYED: &str = "x-openshell-replayed";
/// Metadata key of the current resource version in an object-store
/// rejection (a failed precondition).
pub const RESOURCE_VERSION: &str = "x-openshell-resource-version";
/// Set on the `FAILED_PRECONDITION` reply to a write whose `request_id` was
/// already used for a different write: the log index that applied that
/// first write. Nothing was applied; a new write needs a fresh id.
pub const REQUEST_ID_REUSED: &str = "x-openshell-request-id-reused";
/// Set on an `ObjectStore.Watch` error whose revision is no longer held
/// (`OUT_OF_RANGE` at the start, `RESOURCE_EXHAUSTED` for a watcher that
/// fell behind): the oldest revision the gateway can still serve.
pub const COMPACTED_REVISION: &str = "x-openshell-compacted-revision";
/// Set by a gateway replaying, on the leader's or another gateway's peer
/// port, a call whose caller it identified by a client certificate: the
/// role (`platform_admin` or `viewer`) it vouches for. Honoured only by
/// services on the peer port of a TLS cluster (mutual TLS: the sender is
/// one of the cluster's gateways); ignored on the client port.
pub const VOUCHED_ROLE: &str = "x-openshell-vouched-role";
/// With [`VOUCHED_ROLE`]: who the caller is (`cert:<common name>`), for
/// audit records.
pub const VOUCHED_IDENTITY: &str = "x-openshell-vouched-identity";

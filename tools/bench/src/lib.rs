//! `openshell-bench`: the measurements of the gateway store, beside the
//! partition harness (`jepsen`) whose gateway processes, network namespaces,
//! run security and preflight they use.
//!
//! # Layout
//! - [`compare`]: the comparative benchmark (`openshell-bench compare`):
//!   PostgreSQL 15, a 3-member etcd, 3 gateways, the file limit and the
//!   in-process raft group under the same closed-loop CAS workload; and the
//!   failover bench ([`compare::failover`], `openshell-bench failover`):
//!   how long writes stop when the leader is killed, stopped or transferred.
//! - [`soak`]: the long soak (`openshell-bench soak`, `soak-plot`): sandbox
//!   and member churn; memory, snapshot and disk sampled, judged flat or
//!   not, plotted.
//! - [`scale`]: the scale a real pool needs (`openshell-bench scale`: 200
//!   streams, 10,000 sandboxes: gateway RSS, restart to ready, takeover
//!   time, push cost).

pub mod compare;
pub mod scale;
pub mod soak;

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

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// The TLS section of a benchmark's gateways: every scripted member and
/// client dials from this host's one address, so the per-address handshake
/// rate (`tls.handshake_rate_per_address`, 100/s by default) is raised to
/// its maximum; otherwise thousands of members would attach at that pace.
pub fn one_address_for_many_clients() -> local_cluster::gateway::TlsSection {
    local_cluster::gateway::TlsSection {
        handshake_rate_per_address: Some(100_000),
        handshake_burst_per_address: Some(100_000),
        ..local_cluster::gateway::TlsSection::default()
    }
}

/// The directory a `what` run writes into: `out`, which must be empty or
/// absent (created), made absolute.
///
/// # Errors
/// When `out` holds files, or cannot be created.
pub fn run_dir(out: &Path, what: &str) -> anyhow::Result<PathBuf> {
    if std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some()) {
        bail!(
            "{what} directory {} is not empty; choose another --out or remove it",
            out.display()
        );
    }
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    out.canonicalize()
        .with_context(|| format!("{what} directory {}", out.display()))
}

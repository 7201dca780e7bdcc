//! The planned-transfer phase of `openshell-bench failover`: `ClusterAdmin.TransferLeader`
//! on the gateways' leader under the load, to the next node in turn
//! (raft-store's `leadership` module says how the transfer works). A
//! transfer's window is the longest stretch without an acknowledged write
//! between the call and its answer (and up to the first write after it):
//! the write pause the transfer causes. The call itself also holds the other
//! voters' election timers and, on a leader elected less than an election
//! timeout ago, waits for that first; writes go on meanwhile.

use std::time::Duration;

use anyhow::Context;
use proto::cluster::cluster_admin_client::ClusterAdminClient;
use proto::cluster::TransferLeaderRequest;

use super::failover_load::Load;
use super::gateways::Gateways;

/// `n` transfers of the gateways' leadership under `load`, each to the node
/// after the leader (1 -> 2 -> 3 -> 1); returns each call's span since the
/// load's start and how long each call took.
///
/// # Errors
/// When no leader is agreed on, a transfer fails, or writes do not resume.
pub async fn gateway_transfers(
    gateways: &Gateways,
    load: &Load,
    n: usize,
    settle: Duration,
) -> anyhow::Result<Vec<(Duration, Duration)>> {
    let mut spans = Vec::with_capacity(n);
    for k in 0..n {
        tokio::time::sleep(settle).await;
        load.wait_progress(Duration::from_secs(30)).await?;
        let leader = gateways.wait_leader(Duration::from_secs(30)).await?;
        let to = leader % gateways.nodes.len() as u64 + 1;
        let mut admin = ClusterAdminClient::new(gateways.node(leader)?.channel().await?);
        let from = load.now();
        let reply = admin
            .transfer_leader(TransferLeaderRequest { to })
            .await
            .with_context(|| format!("transfer {k} from node {leader} to node {to}"))?
            .into_inner();
        let until = load.now();
        spans.push((from, until));
        tracing::info!(
            k,
            leader,
            to,
            now = reply.leader_id,
            call_ms = (until - from).as_millis() as u64,
            "transfer done"
        );
        if reply.leader_id != to {
            anyhow::bail!(
                "transfer {k}: node {} leads, not node {to}",
                reply.leader_id
            );
        }
    }
    Ok(spans)
}

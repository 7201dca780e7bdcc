//! Warns when this gateway's own entry in the raft membership names another
//! address than the one it advertises (e.g. restarted with another
//! `--listen` port on the same data directory): the other gateways send its
//! raft traffic to the membership's address, so it never hears the leader
//! and campaigns in vain. The warning names both addresses and the fix; it
//! repeats every minute while the mismatch lasts.

use std::time::Duration;

use raft_store::RaftNode;

use crate::state::GatewayState;

/// How often the membership is compared with the advertised address.
const CHECK_EVERY: Duration = Duration::from_secs(2);
/// How often a lasting mismatch is logged again.
const REPEAT_EVERY: Duration = Duration::from_secs(60);

/// The warning for node `node_id` advertising `advertise` while the
/// membership has it at `in_membership`; `None` when they agree.
pub fn mismatch(node_id: u64, advertise: &str, in_membership: &str) -> Option<String> {
    (advertise != in_membership).then(|| {
        format!(
            "this gateway (node {node_id}) advertises {advertise}, but the cluster membership has node {node_id} \
             at {in_membership}: the other gateways send its raft traffic to {in_membership}, so it hears no \
             leader and campaigns in vain. Fix: restart it with --listen/--advertise {in_membership}, or move it \
             to {advertise}: `openshell-pool raft remove {node_id}`, wipe its data directory, then \
             `openshell-pool raft add-learner {node_id} {advertise}` and `raft promote {node_id}` \
             (docs/operations.md, \"A gateway campaigns forever: its address changed\")"
        )
    })
}

/// Compares the membership with `advertise` every [`CHECK_EVERY`] until the
/// task is aborted, logging [`mismatch`] as a warning.
pub async fn watch(node: RaftNode<GatewayState>, advertise: String) {
    let mut last_warned: Option<(String, tokio::time::Instant)> = None;
    loop {
        let status = node.status();
        let recorded = status
            .nodes
            .iter()
            .find(|n| n.id == status.node_id)
            .map(|n| n.addr.clone());
        match recorded
            .and_then(|addr| mismatch(status.node_id, &advertise, &addr).map(|w| (addr, w)))
        {
            Some((addr, warning)) => {
                let due = last_warned
                    .as_ref()
                    .is_none_or(|(warned, at)| *warned != addr || at.elapsed() >= REPEAT_EVERY);
                if due {
                    tracing::warn!(advertise = %advertise, membership = %addr, "{warning}");
                    last_warned = Some((addr, tokio::time::Instant::now()));
                }
            }
            None => last_warned = None,
        }
        tokio::time::sleep(CHECK_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_both_addresses_and_the_fix() {
        assert_eq!(mismatch(2, "127.0.0.1:7002", "127.0.0.1:7002"), None);
        let w = mismatch(2, "127.0.0.1:7012", "127.0.0.1:7002").unwrap_or_default();
        assert!(
            w.contains("127.0.0.1:7012") && w.contains("127.0.0.1:7002"),
            "{w}"
        );
        assert!(w.contains("raft remove 2") && w.contains("--listen"), "{w}");
    }
}

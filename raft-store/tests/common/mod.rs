//! Shared by raft-store's integration tests: a one-voter store on a real data
//! directory.

use std::path::Path;
use std::time::Duration;

use raft_store::objects::Objects;
use raft_store::{NodeConfig, RaftNode};

/// Starts a one-voter store of the object state machine in `dir` and waits
/// (at most 10 s) until it leads. A single voter needs no peer: the address
/// is only recorded.
pub async fn one_voter(
    dir: &Path,
    cluster_id: &str,
) -> Result<RaftNode<Objects>, Box<dyn std::error::Error>> {
    let addr = "127.0.0.1:1";
    let node: RaftNode<Objects> =
        RaftNode::start(NodeConfig::new(1, addr, dir, cluster_id)).await?;
    node.initialize(vec![(1, addr.to_string())]).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !node.is_leader() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a single voter did not become leader within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(node)
}

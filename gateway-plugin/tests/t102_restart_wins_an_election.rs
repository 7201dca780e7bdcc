//! A restarted leader does not resume leadership from its stored vote: it
//! wins an election in a new term first.
//!
//! Found by the Jepsen `power-cut` nemesis (docs/jepsen.md, power-loss
//! results): openraft 0.9 restores a node whose stored vote is committed for
//! itself as leader at once, in its old term, with a commit index stored
//! without an fsync; after a power loss that index lagged writes the node
//! had acknowledged, and linearizable reads through it returned older data.
//!
//! - given: one gateway (it leads its own one-node cluster) and a write
//! - when: it is killed (`kill -9`) and started again on the same data
//! - then: it leads again in a higher term than before (an election, with a
//!   new first entry, not a restoration), and the write reads back

use testkit::gateway::{get, put, Cluster};
use testkit::TestResult;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_leader_wins_a_new_term_instead_of_resuming() -> TestResult<()> {
    eprintln!("--- step: one gateway, leader of its own cluster");
    let mut cluster = Cluster::start(1, &[]);
    cluster.wait_leader("first start").await;
    put(cluster.get(1), "before-restart", "v1").await?;
    let before = cluster.get(1).status().await?;
    eprintln!("leader {} in term {}", before.leader_id, before.term);

    eprintln!("--- step: kill -9 and restart on the same data directory");
    cluster.node(1).kill9();
    cluster.node(1).start();
    cluster.wait_leader("after the restart").await;
    let after = cluster.get(1).status().await?;
    eprintln!("leader {} in term {}", after.leader_id, after.term);

    eprintln!("--- step: a new term, and the write is there");
    assert!(
        after.term > before.term,
        "the restarted node resumed leadership in term {} without an election (before: term {})",
        after.term,
        before.term
    );
    assert_eq!(
        get(cluster.get(1), "before-restart", false).await?,
        Some("v1".to_string())
    );
    Ok(())
}

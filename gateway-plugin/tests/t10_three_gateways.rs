//! Three `openshell-gateway` processes on loopback over real gRPC.
//!
//! - given: three gateways bootstrapped together, snapshots every 50 entries
//!   with 10 kept, so the log is purged early
//! - when: writes go through every node, the leader is killed with `kill -9`
//!   and restarted, a learner joins after the purge, is promoted, and a
//!   node is removed
//! - then: every acknowledged write is readable everywhere, a follower read
//!   right after a write on another node sees it, and the learner caught up by
//!   snapshot

use proto::cluster::{AddLearnerRequest, Node, PromoteRequest, RemoveRequest, StatusRequest};
use testkit::gateway::*;
use testkit::TestResult;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_gateways_survive_leader_kill_and_membership_changes() -> TestResult {
    let mut cluster = Cluster::start(3, &["--snapshot-after-logs", "50", "--logs-to-keep", "10"]);
    let leader = cluster.wait_leader("bootstrap").await;
    let mut acked: Vec<(String, String)> = Vec::new();

    eprintln!("--- step: writes through every node");
    for round in 0..10 {
        for id in 1..=3u64 {
            let key = format!("k-{id}-{round}");
            let value = format!("v-{id}-{round}");
            eventually("write through node", || put(cluster.get(id), &key, &value)).await;
            acked.push((key, value));
        }
    }

    eprintln!("--- step: a follower read right after a write on another node returns it");
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    for i in 0..20 {
        let (writer, reader) = if i % 2 == 0 {
            (followers[0], followers[1])
        } else {
            (leader, followers[0])
        };
        let key = format!("ryw-{i}");
        put(cluster.get(writer), &key, "fresh").await?;
        assert_eq!(
            get(cluster.get(reader), &key, false).await?.as_deref(),
            Some("fresh"),
            "read on {reader} after write on {writer}"
        );
        acked.push((key, "fresh".into()));
    }

    eprintln!("--- step: kill -9 the leader; a new leader is elected and writes resume");
    cluster.node(leader).kill9();
    let new_leader = cluster.wait_leader("after leader kill").await;
    assert_ne!(new_leader, leader);
    for i in 0..30 {
        let key = format!("after-kill-{i}");
        let via = followers[i % followers.len()];
        eventually("write after leader kill", || {
            put(cluster.get(via), &key, "x")
        })
        .await;
        acked.push((key, "x".into()));
    }
    for (key, value) in &acked {
        assert_eq!(
            get(cluster.get(new_leader), key, false).await?.as_deref(),
            Some(value.as_str()),
            "acked {key} lost"
        );
    }

    eprintln!("--- step: the killed node restarts from its sled directory and catches up");
    cluster.node(leader).start();
    let commit = cluster.get(new_leader).status().await?.commit_index;
    cluster
        .wait_applied(leader, commit, "restarted node catches up")
        .await;
    let restarted = dump(cluster.get(leader), true).await?;
    for (key, value) in &acked {
        assert!(
            restarted.iter().any(|(k, v, _)| k == key && v == value),
            "restarted node misses {key}"
        );
    }

    eprintln!("--- step: the log was purged behind a snapshot");
    let status = cluster.get(new_leader).status().await?;
    assert!(
        status.purged_index > 0 && status.snapshot_index > 0,
        "no purge yet: {status:?}"
    );

    eprintln!("--- step: a new learner joins after the purge and catches up by snapshot, then is promoted");
    cluster.add_node(4, &["--snapshot-after-logs", "50", "--logs-to-keep", "10"]);
    let addr4 = cluster.get(4).addr.clone();
    eventually("node 4 serves", || cluster.get(4).status()).await;
    // Any node accepts the call; a follower forwards it to the leader.
    let reply = eventually("add learner", || {
        let via = cluster.get(followers[0]);
        let addr4 = addr4.clone();
        async move {
            Ok(via
                .admin()
                .await?
                .add_learner(AddLearnerRequest {
                    node: Some(Node { id: 4, addr: addr4 }),
                    blocking: true,
                })
                .await?
                .into_inner())
        }
    })
    .await;
    assert!(reply.learners.iter().any(|m| m.id == 4), "{reply:?}");
    let commit = cluster.get(new_leader).status().await?.commit_index;
    cluster.wait_applied(4, commit, "learner catches up").await;
    let s4 = cluster.get(4).status().await?;
    assert!(
        s4.snapshot_index > 0,
        "learner did not receive a snapshot: {s4:?}"
    );
    let learner_view = dump(cluster.get(4), true).await?;
    for (key, value) in &acked {
        assert!(
            learner_view.iter().any(|(k, v, _)| k == key && v == value),
            "learner misses {key}"
        );
    }
    let reply = cluster
        .get(new_leader)
        .admin()
        .await?
        .promote(PromoteRequest {
            id: 4,
            force: false,
        })
        .await?
        .into_inner();
    assert!(reply.voters.iter().any(|m| m.id == 4), "{reply:?}");

    eprintln!("--- step: a node is removed; writes keep working");
    let victim = followers
        .iter()
        .copied()
        .find(|id| *id != new_leader)
        .unwrap_or(leader);
    let victim = if victim == new_leader { leader } else { victim };
    let reply = cluster
        .get(4)
        .admin()
        .await?
        .remove(RemoveRequest { id: victim })
        .await?
        .into_inner();
    assert!(
        !reply.voters.iter().any(|m| m.id == victim)
            && !reply.learners.iter().any(|m| m.id == victim)
    );
    cluster.node(victim).kill9();
    let status = cluster
        .get(4)
        .admin()
        .await?
        .status(StatusRequest { local: false })
        .await?
        .into_inner();
    assert!(!status.nodes.iter().any(|n| n.id == victim), "{status:?}");
    put(cluster.get(4), "after-remove", "y").await?;
    assert_eq!(
        get(cluster.get(4), "after-remove", false).await?.as_deref(),
        Some("y")
    );
    Ok(())
}

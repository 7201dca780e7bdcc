//! A forwarded write follows leadership.
//!
//! - given: three gateways with a slow election (0.5–0.75 s), so that a write
//!   reaches a follower while it still believes in the old leader
//! - when: the leader is paused (`kill -STOP`) and a client puts through a
//!   follower at once
//! - then: the follower abandons the forward as soon as the new leader is
//!   elected ("abandoned when leadership moved") or its channel to the
//!   paused leader misses its HTTP/2 keepalive (500 ms + 500 ms, whichever
//!   comes first) and answers `UNKNOWN`, well before the 5 s write timeout;
//!   it does not resend the put behind the client's back. After the leader resumes, writes through every node
//!   succeed and the nodes agree.

use std::time::{Duration, Instant};

use testkit::gateway::*;
use testkit::TestResult;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_to_a_paused_leader_is_abandoned_with_an_unknown_outcome() -> TestResult {
    let cluster = Cluster::start(3, &["--election-min-ms", "500", "--election-max-ms", "750"]);
    let leader = cluster.wait_leader("bootstrap").await;
    let follower = cluster
        .nodes
        .iter()
        .find(|n| n.id != leader)
        .ok_or("no follower")?;
    put(follower, "warm", "up").await?;

    eprintln!(
        "--- step: pause the leader (node {leader}), put through node {}",
        follower.id
    );
    cluster.get(leader).signal("-STOP");
    let started = Instant::now();
    let outcome = put(follower, "k", "v1").await;
    let took = started.elapsed();
    eprintln!("the put returned after {took:?}: {outcome:?}");
    let new_leader = {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let status = follower.status().await?;
            if status.leader_id != 0 && status.leader_id != leader {
                break status.leader_id;
            }
            assert!(
                Instant::now() < deadline,
                "no new leader while node {leader} is paused"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    cluster.get(leader).signal("-CONT");

    let status = match &outcome {
        Err(e) => e
            .downcast_ref::<tonic::Status>()
            .cloned()
            .ok_or("not a gRPC status")?,
        Ok(v) => {
            panic!("the put through the follower applied (version {v}) while its leader was paused")
        }
    };
    assert_eq!(status.code(), tonic::Code::Unknown, "{status:?}");
    // Which of the two notices the paused leader first depends on the
    // election's random timeout; both leave the outcome unknown.
    assert!(
        status.message().contains("abandoned when leadership moved")
            || status.message().contains("KeepAliveTimedOut"),
        "{status:?}"
    );
    assert!(
        took < Duration::from_secs(4),
        "the forward waited {took:?} for the paused leader (write timeout 5 s)"
    );
    eprintln!("new leader: node {new_leader}");

    eprintln!("--- step: the old leader resumed; writes through every node succeed");
    cluster.wait_leader("after resume").await;
    for (i, node) in cluster.nodes.iter().enumerate() {
        put(node, &format!("after-{i}"), "v").await?;
    }
    let reference = dump(follower, false).await?;
    for node in &cluster.nodes {
        let deadline = Instant::now() + Duration::from_secs(10);
        while dump(node, true).await? != reference {
            assert!(
                Instant::now() < deadline,
                "node {} did not converge",
                node.id
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

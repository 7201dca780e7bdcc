//! One process never counts as two members: every raft RPC names the node
//! it is meant for, and a learner's address is asked who it is before it
//! enters the membership.
//!
//! Found by operating the cluster: `raft add-learner 4 <address of node 3>`
//! then `raft promote 4` made node 3 answer raft traffic meant for node 4;
//! `raft status` showed 4 as a caught-up voter, and killing node 3 froze
//! the commit index (two of four "voters" gone at once).
//!
//! - given: 3 gateways
//! - when: a learner 4 is added at node 3's address
//! - then: the call is refused (the address answers as node 3), nothing
//!   changes, and a raft RPC meant for node 4 sent to node 3 is refused with
//!   node 3's id in the `x-openshell-node-id` metadata; one that names no
//!   node (an older sender) is still served
//! - when: a real learner 4 is added, then node 3 is restarted listening on
//!   node 4's address (a wrong address in the membership)
//! - then: node 3 refuses the leader's traffic for node 4 and both sides log
//!   it plainly; node 4 is not promoted

use std::time::{Duration, Instant};

use proto::cluster::{AddLearnerRequest, ClusterStatus, Node, PromoteRequest, StatusRequest};
use proto::raft::raft_transport_client::RaftTransportClient;
use proto::raft::{HoldElectionRequest, RaftPayload};
use testkit::gateway::*;
use testkit::TestResult;

/// The leader's view of the cluster.
async fn leader_view(cluster: &Cluster, leader: u64) -> TestResult<ClusterStatus> {
    Ok(cluster
        .get(leader)
        .admin()
        .await?
        .status(StatusRequest { local: false })
        .await?
        .into_inner())
}

/// Waits until `log` of `node` contains `text`.
async fn log_shows(node: &Gateway, text: &str, within: Duration) {
    let started = Instant::now();
    while !node.log().contains(text) {
        assert!(
            started.elapsed() < within,
            "node {} never logged {text:?} within {within:?}; its log ends: {}",
            node.id,
            node.log()
                .lines()
                .rev()
                .take(20)
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_address_answering_as_another_node_is_refused() -> TestResult<()> {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader("bootstrap").await;
    let other = (1..=3).find(|id| *id != leader).unwrap_or(1);
    let other_addr = cluster.get(other).addr.clone();

    eprintln!("--- step: add-learner 4 at node {other}'s address");
    let refused = cluster
        .get(leader)
        .admin()
        .await?
        .add_learner(AddLearnerRequest {
            node: Some(Node {
                id: 4,
                addr: other_addr.clone(),
            }),
            blocking: true,
        })
        .await;
    let status = match refused {
        Ok(reply) => panic!("node {other}'s address was added as node 4: {reply:?}"),
        Err(status) => status,
    };
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status}");
    assert!(
        status
            .message()
            .contains(&format!("is node {other}, not node 4")),
        "the refusal names who answered: {status}"
    );
    let view = leader_view(&cluster, leader).await?;
    assert!(
        view.nodes.iter().all(|n| n.id != 4),
        "nothing changed: {view:?}"
    );

    eprintln!("--- step: a raft RPC meant for node 4 sent to node {other}");
    let channel = test_channel(&other_addr, 500).await?;
    let mut raft = RaftTransportClient::new(channel);
    let garbage = |target_node_id| RaftPayload {
        encoding: 1,
        data: vec![0xff; 7],
        cluster_id: "test".into(),
        target_node_id,
    };
    for result in [
        raft.append_entries(garbage(4)).await,
        raft.vote(garbage(4)).await,
        raft.install_snapshot(garbage(4)).await,
    ] {
        let status = result.map(|_| ()).unwrap_err();
        assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status}");
        assert_eq!(
            status
                .metadata()
                .get("x-openshell-node-id")
                .and_then(|v| v.to_str().ok()),
            Some(other.to_string().as_str()),
            "the refusal carries the receiver's own id: {status:?}"
        );
    }
    let hold = raft
        .hold_election(HoldElectionRequest {
            cluster_id: "test".into(),
            hold_ms: 1,
            target_node_id: 4,
        })
        .await
        .unwrap_err();
    assert_eq!(hold.code(), tonic::Code::FailedPrecondition, "{hold}");
    // Meant for this node, or from an older sender naming none: served
    // (the body is garbage, so it fails to decode, past the identity check).
    for target in [other, 0] {
        let status = raft.vote(garbage(target)).await.unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "target {target}: {status}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_answering_at_a_learners_address_refuses_its_traffic() -> TestResult<()> {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader("bootstrap").await;
    let other = (1..=3).rev().find(|id| *id != leader).unwrap_or(3);

    eprintln!("--- step: a real learner 4 joins");
    cluster.add_node(4, &[]);
    let addr4 = cluster.get(4).addr.clone();
    eventually("node 4 serves", || cluster.get(4).status()).await;
    cluster
        .get(leader)
        .admin()
        .await?
        .add_learner(AddLearnerRequest {
            node: Some(Node {
                id: 4,
                addr: addr4.clone(),
            }),
            blocking: true,
        })
        .await?;

    eprintln!("--- step: node 4 goes away; node {other} restarts on node 4's address");
    cluster.node(4).kill9();
    cluster.node(other).kill9();
    cluster.node(other).addr = addr4.clone();
    cluster.node(other).start();

    eprintln!("--- step: node {other} refuses the traffic for node 4, both sides say so");
    log_shows(
        cluster.get(other),
        &format!("refused a raft RPC meant for node 4: this is node {other}"),
        Duration::from_secs(20),
    )
    .await;
    log_shows(
        cluster.get(leader),
        &format!("the gateway at this address is node {other}, not node 4"),
        Duration::from_secs(20),
    )
    .await;

    eprintln!("--- step: node 4 is not promoted once its last real acknowledgement is stale");
    // Node 4 answered the leader until it was killed; a promotion within
    // about a second of that would still count it as live.
    let started = Instant::now();
    loop {
        let view = leader_view(&cluster, leader).await?;
        let four = view.nodes.iter().find(|n| n.id == 4);
        if four.is_some_and(|n| n.last_ack_ms.is_none_or(|ms| ms > 2_000)) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "node {other} at node 4's address keeps acknowledging for it: {view:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let refused = cluster
        .get(leader)
        .admin()
        .await?
        .promote(PromoteRequest {
            id: 4,
            force: false,
        })
        .await;
    let status = match refused {
        Ok(reply) => panic!("node 4 was promoted with node {other} at its address: {reply:?}"),
        Err(status) => status,
    };
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status}");
    let view = leader_view(&cluster, leader).await?;
    let four = view.nodes.iter().find(|n| n.id == 4);
    assert!(
        four.is_some_and(|n| !n.voter && n.last_ack_ms.is_none_or(|ms| ms > 1_000)),
        "node 4 stays a learner that has not answered lately: {view:?}"
    );
    Ok(())
}

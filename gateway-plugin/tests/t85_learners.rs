//! A learner that is not there is neither added nor promoted, and its
//! progress is never shown as caught up.
//!
//! Found by operating the cluster: `raft add-learner 9 <nothing listening>`
//! returned at once (its help says it waits until caught up), `raft
//! status` showed lag 0, `raft promote 9` succeeded, and losing one more node
//! stalled the cluster.
//!
//! - given: 3 gateways
//! - when: a learner is added at an address where nothing listens
//! - then: the call is refused and nothing changes
//! - when: it is added there without waiting (`blocking: false`)
//! - then: it is added, its progress is unknown (not lag 0), promoting it
//!   is refused, and removing it is quick
//! - when: a real learner 4 is added (waiting until caught up), then killed
//! - then: its progress is known while it is up; once dead, `promote` is
//!   refused (it has not acknowledged the leader recently), and a new leader,
//!   which never heard from it, reports its progress as unknown, not lag 0
//! - and: `promote --force` still promotes it, and removing it then works
//!   (three of four voters are up)

use std::time::{Duration, Instant};

use proto::cluster::{
    AddLearnerRequest, ClusterStatus, Node, PromoteRequest, RemoveRequest, StatusRequest,
    TransferLeaderRequest,
};
use testkit::gateway::*;
use testkit::ports::free_port;
use testkit::TestResult;

/// The view of the leader, reached through `via`.
async fn leader_view(cluster: &Cluster, via: u64) -> TestResult<ClusterStatus> {
    Ok(cluster
        .get(via)
        .admin()
        .await?
        .status(StatusRequest { local: false })
        .await?
        .into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_nobody_answers_for_is_not_added() -> TestResult<()> {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader("bootstrap").await;
    let nowhere = format!("127.0.0.1:{}", free_port());

    eprintln!("--- step: add-learner 9 at {nowhere}, where nothing listens");
    let started = Instant::now();
    let refused = cluster
        .get(leader)
        .admin()
        .await?
        .add_learner(AddLearnerRequest {
            node: Some(Node {
                id: 9,
                addr: nowhere.clone(),
            }),
            blocking: true,
        })
        .await;
    let status = match refused {
        Ok(reply) => panic!("a learner nobody answers for was added: {reply:?}"),
        Err(status) => status,
    };
    eprintln!(
        "refused after {} ms: {status}",
        started.elapsed().as_millis()
    );
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status}");
    assert!(
        status.message().contains(&nowhere) && status.message().contains("nothing changed"),
        "the refusal names the address: {status}"
    );
    let view = leader_view(&cluster, leader).await?;
    assert!(
        view.nodes.iter().all(|n| n.id != 9),
        "nothing changed: {view:?}"
    );

    eprintln!("--- step: added without waiting, its progress is unknown and it is not promoted");
    let mut admin = cluster.get(leader).admin().await?;
    admin
        .add_learner(AddLearnerRequest {
            node: Some(Node {
                id: 9,
                addr: nowhere,
            }),
            blocking: false,
        })
        .await?;
    let view = leader_view(&cluster, leader).await?;
    let nine = view.nodes.iter().find(|n| n.id == 9);
    assert!(
        nine.is_some_and(|n| !n.voter && !n.progress_known && n.last_ack_ms.is_none()),
        "a learner nobody answers for has unknown progress: {view:?}"
    );
    let refused = admin
        .promote(PromoteRequest {
            id: 9,
            force: false,
        })
        .await
        .map(|r| r.into_inner());
    assert_eq!(
        refused.map_err(|s| s.code()),
        Err(tonic::Code::FailedPrecondition),
        "a learner nobody answers for is not promoted"
    );
    let started = Instant::now();
    admin.remove(RemoveRequest { id: 9 }).await?;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "remove took {:?}",
        started.elapsed()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_learner_is_not_promoted_and_its_lag_is_unknown() -> TestResult<()> {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader("bootstrap").await;

    eprintln!("--- step: learner 4 joins and catches up");
    cluster.add_node(4, &[]);
    let addr4 = cluster.get(4).addr.clone();
    eventually("node 4 serves", || cluster.get(4).status()).await;
    for i in 0..20 {
        put(cluster.get(leader), &format!("before-{i}"), "x").await?;
    }
    let reply = cluster
        .get(leader)
        .admin()
        .await?
        .add_learner(AddLearnerRequest {
            node: Some(Node { id: 4, addr: addr4 }),
            blocking: true,
        })
        .await?
        .into_inner();
    assert!(
        reply.learner_matched >= reply.log_index && reply.log_index > 0,
        "a blocking add returns once the learner matched the membership entry: {reply:?}"
    );
    let view = leader_view(&cluster, leader).await?;
    let four = view.nodes.iter().find(|n| n.id == 4);
    assert!(
        four.is_some_and(|n| n.progress_known && n.last_ack_ms.is_some()),
        "a live learner's progress is known: {view:?}"
    );

    eprintln!("--- step: learner 4 dies; promote is refused");
    cluster.node(4).kill9();
    for i in 0..5 {
        put(cluster.get(leader), &format!("after-{i}"), "x").await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
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
        Ok(reply) => panic!("a dead learner was promoted: {reply:?}"),
        Err(status) => status,
    };
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status}");
    assert!(
        status.message().contains("--force"),
        "the refusal says how to override: {status}"
    );

    eprintln!("--- step: a new leader never heard from node 4: its progress is unknown");
    let to = (1..=3).find(|id| *id != leader).unwrap_or(1);
    cluster
        .get(leader)
        .admin()
        .await?
        .transfer_leader(TransferLeaderRequest { to })
        .await?;
    let new_leader = cluster.wait_leader("transfer").await;
    assert_eq!(new_leader, to);
    let view = leader_view(&cluster, new_leader).await?;
    let four = view
        .nodes
        .iter()
        .find(|n| n.id == 4)
        .unwrap_or_else(|| panic!("node 4 left the membership: {view:?}"));
    assert!(
        !four.progress_known && four.last_ack_ms.is_none(),
        "unknown progress is not reported as caught up: {four:?}"
    );
    let me = view.nodes.iter().find(|n| n.id == new_leader);
    assert!(
        me.is_some_and(|n| n.progress_known && n.lag == 0),
        "the leader's own progress is known: {view:?}"
    );

    eprintln!("--- step: promote --force, then remove it again");
    let mut admin = cluster.get(new_leader).admin().await?;
    let forced = admin
        .promote(PromoteRequest { id: 4, force: true })
        .await?
        .into_inner();
    assert!(forced.voters.iter().any(|n| n.id == 4), "{forced:?}");
    let started = Instant::now();
    let removed = admin.remove(RemoveRequest { id: 4 }).await?.into_inner();
    assert!(removed.voters.iter().all(|n| n.id != 4), "{removed:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "remove took {:?}",
        started.elapsed()
    );
    put(cluster.get(new_leader), "after-remove", "x").await?;
    Ok(())
}

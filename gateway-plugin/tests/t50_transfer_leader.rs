//! Leadership transfer on request.
//!
//! - given: three gateways and a stream of writes through every node
//! - when: an operator asks a follower to take leadership (the call goes to
//!   another follower, which forwards it), then asks for "any other voter"
//! - then: the named node leads, writes keep succeeding throughout, and none
//!   is lost

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proto::cluster::TransferLeaderRequest;
use testkit::gateway::*;
use testkit::TestResult;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_moves_to_the_named_voter_while_writes_continue() -> TestResult {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader("bootstrap").await;
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();

    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let acked = acked.clone();
        let stop = stop.clone();
        let nodes: Vec<(u64, String)> = cluster
            .nodes
            .iter()
            .map(|n| (n.id, n.addr.clone()))
            .collect();
        let root = cluster.root.path().to_path_buf();
        tokio::spawn(async move {
            let gateways: Vec<Gateway> = nodes
                .iter()
                .map(|(id, addr)| {
                    let mut g = Gateway::new(*id, &root, vec![]);
                    g.addr = addr.clone();
                    g
                })
                .collect();
            let mut i = 0usize;
            let mut failures = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("t-{i}");
                match put(&gateways[i % gateways.len()], &key, "v").await {
                    Ok(_) => acked.lock().unwrap_or_else(|p| p.into_inner()).push(key),
                    Err(_) => failures += 1,
                }
                i += 1;
            }
            failures
        })
    };

    eprintln!(
        "--- step: transfer to node {} through node {}",
        followers[0], followers[1]
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reply = cluster
        .get(followers[1])
        .admin()
        .await?
        .transfer_leader(TransferLeaderRequest { to: followers[0] })
        .await?
        .into_inner();
    assert_eq!(reply.leader_id, followers[0]);
    assert_eq!(cluster.wait_leader("after transfer").await, followers[0]);

    eprintln!("--- step: transfer to any other voter");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reply = cluster
        .get(leader)
        .admin()
        .await?
        .transfer_leader(TransferLeaderRequest { to: 0 })
        .await?
        .into_inner();
    assert_ne!(reply.leader_id, followers[0]);
    assert_eq!(
        cluster.wait_leader("after second transfer").await,
        reply.leader_id
    );

    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let failures = writer.await?;
    let acked = acked.lock().unwrap_or_else(|p| p.into_inner()).clone();
    eprintln!(
        "acknowledged {} writes, {failures} failed during transfers",
        acked.len()
    );
    assert!(acked.len() > 20, "too few writes: {}", acked.len());
    let all = dump(cluster.get(reply.leader_id), false).await?;
    for key in &acked {
        assert!(
            all.iter().any(|(k, _, _)| k == key),
            "acknowledged write {key} lost"
        );
    }
    Ok(())
}

//! The voter autopilot keeps the voters at node ids 1..=replicas, read from
//! a file, as a StatefulSet scale would change them.
//!
//! - given: 3 gateways at 127.0.1.{1,2,3}:PORT with the autopilot (replicas
//!   file says 3, peer address template `127.0.1.{node_id}:PORT`); a client
//!   writes objects throughout
//! - when: nodes 4 and 5 start (no initial voters)
//! - then: they stay outside the membership (3 desired)
//! - when: the file says 5
//! - then: 4 and 5 are added as learners and promoted: 5 voters
//! - when: node 5 is made the leader, the file says 3 and nodes 4 and 5 are
//!   sent SIGTERM at once (a StatefulSet scale-down)
//! - then: node 5 hands leadership to a desired voter, 4 and 5 wait until
//!   they no longer vote, then exit 0; the voters are {1,2,3}, no learners
//!   are left, and every acknowledged write is readable

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proto::cluster::{ClusterStatus, StatusRequest, TransferLeaderRequest};
use testkit::gateway::*;
use testkit::ports::free_port_on;
use testkit::TestResult;

/// The leader's view, through node `via`.
async fn leader_view(cluster: &Cluster, via: u64) -> TestResult<ClusterStatus> {
    Ok(cluster
        .get(via)
        .admin()
        .await?
        .status(StatusRequest { local: false })
        .await?
        .into_inner())
}

/// (voters, learners) of `status`.
fn members(status: &ClusterStatus) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let voters = status
        .nodes
        .iter()
        .filter(|n| n.voter)
        .map(|n| n.id)
        .collect();
    let learners = status
        .nodes
        .iter()
        .filter(|n| !n.voter)
        .map(|n| n.id)
        .collect();
    (voters, learners)
}

/// Waits (up to 90 s) until the leader seen through `via` reports exactly
/// `voters` and `learners`.
async fn wait_members(cluster: &Cluster, via: u64, voters: &[u64], learners: &[u64], why: &str) {
    let want = (
        voters.iter().copied().collect::<BTreeSet<_>>(),
        learners.iter().copied().collect::<BTreeSet<_>>(),
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = None;
    loop {
        match leader_view(cluster, via).await {
            Ok(status)
                if members(&status) == want && status.unfinished_change_to_voters.is_empty() =>
            {
                return
            }
            Ok(status) => last = Some(members(&status)),
            Err(_) => {}
        }
        if Instant::now() > deadline {
            cluster.dump_logs();
            panic!("{why}: members are {last:?}, want {want:?} (90 s)");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A client writing `w-<n>` objects through nodes 1..=3 until stopped;
/// returns the keys the cluster acknowledged.
fn writer(addrs: Vec<String>, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Vec<String>> {
    let acked = Arc::new(Mutex::new(Vec::new()));
    tokio::spawn(async move {
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            let key = format!("w-{n}");
            let addr = &addrs[(n as usize) % addrs.len()];
            if put_at(addr, &key, &key).await.is_ok() {
                acked.lock().unwrap_or_else(|e| e.into_inner()).push(key);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let keys = acked.lock().unwrap_or_else(|e| e.into_inner()).clone();
        keys
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autopilot_grows_and_shrinks_the_voters() -> TestResult<()> {
    let ips: Vec<String> = (1..=5).map(|id| format!("127.0.1.{id}")).collect();
    let port = free_port_on(&ips.iter().map(String::as_str).collect::<Vec<_>>());
    let dir = tempfile::tempdir()?;
    let replicas = dir.path().join("replicas");
    std::fs::write(&replicas, "3\n")?;
    let source = format!("file:{}", replicas.display());
    let template = format!("127.0.1.{{node_id}}:{port}");
    let extra = [
        "--sandbox-driver",
        "none",
        "--autopilot-replicas",
        &source,
        "--autopilot-peer-address",
        &template,
    ];
    let mut cluster = Cluster::start_on_loopback_ips(3, port, &extra);
    let leader = cluster.wait_leader("bootstrap").await;
    eprintln!("--- step: 3 voters, leader {leader}; a client writes throughout");
    let stop = Arc::new(AtomicBool::new(false));
    let addrs = (1..=3).map(|id| Gateway::loopback_addr(id, port)).collect();
    let writes = writer(addrs, stop.clone());

    eprintln!("--- step: nodes 4 and 5 start; the file still says 3");
    cluster.add_node_on_loopback_ip(4, port, &extra);
    cluster.add_node_on_loopback_ip(5, port, &extra);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (voters, learners) = members(&leader_view(&cluster, 1).await?);
    assert_eq!(voters, BTreeSet::from([1, 2, 3]), "3 desired: no change");
    assert!(
        learners.is_empty(),
        "3 desired: no learner added: {learners:?}"
    );

    eprintln!("--- step: the file says 5");
    let grow = Instant::now();
    std::fs::write(&replicas, "5\n")?;
    wait_members(&cluster, 1, &[1, 2, 3, 4, 5], &[], "grow to 5").await;
    eprintln!("5 voters after {} ms", grow.elapsed().as_millis());

    eprintln!("--- step: node 5 becomes the leader");
    let leader = cluster.wait_leader("before the transfer").await;
    if leader != 5 {
        cluster
            .get(leader)
            .admin()
            .await?
            .transfer_leader(TransferLeaderRequest { to: 5 })
            .await?;
    }
    let leader = cluster.wait_leader("after the transfer").await;
    assert_eq!(leader, 5, "node 5 leads");

    eprintln!("--- step: the file says 3; nodes 4 and 5 get SIGTERM at once");
    let shrink = Instant::now();
    std::fs::write(&replicas, "3\n")?;
    cluster.node(4).signal("-TERM");
    cluster.node(5).signal("-TERM");
    for id in [4, 5] {
        let exit = cluster.node(id).wait_exit(Duration::from_secs(45)).await;
        eprintln!(
            "node {id} exited {exit:?} after {} ms",
            shrink.elapsed().as_millis()
        );
        if exit.is_none_or(|s| !s.success()) {
            cluster.dump_logs();
            panic!("node {id} did not exit 0 within 45 s: {exit:?}");
        }
    }
    wait_members(&cluster, 1, &[1, 2, 3], &[], "shrink to 3").await;
    let leader = cluster.wait_leader("after the shrink").await;
    assert!((1..=3).contains(&leader), "a desired voter leads: {leader}");
    let five = cluster.get(5).log();
    assert!(
        five.contains("autopilot: handing leadership over"),
        "node 5 handed leadership over"
    );
    for id in [4, 5] {
        assert!(
            cluster.get(id).log().contains("no longer votes"),
            "node {id} stopped once it no longer voted, not at the bound"
        );
    }

    eprintln!("--- step: every acknowledged write is readable");
    stop.store(true, Ordering::Relaxed);
    let acked = writes.await?;
    assert!(acked.len() > 20, "the client kept writing: {}", acked.len());
    let node = cluster.get(1);
    let stored: BTreeSet<String> = dump(node, false)
        .await?
        .into_iter()
        .map(|(k, _, _)| k)
        .collect();
    let lost: Vec<&String> = acked.iter().filter(|k| !stored.contains(*k)).collect();
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    eprintln!("{} acknowledged writes, none lost", acked.len());
    Ok(())
}

//! A leader that lost its quorum stops reporting ready.
//!
//! Found by operating the cluster: with both followers killed, the leader
//! kept answering `/readyz` 200 (`ready: leader 1`) for good while nothing
//! could commit, so a Service kept routing writes to it.
//!
//! - given: 3 gateways with HTTP probes, all ready
//! - when: both followers are killed (`kill -9`)
//! - then: the leader's `/readyz` answers 503 within a few seconds (no
//!   majority acknowledged it within the election timeout), its
//!   `openshell_raft_is_leader` metric is 0, and its `/healthz` stays 200
//!   (the process is fine; restarting it would not help); once one follower
//!   is back, the leader (or its successor) is ready again

use std::time::{Duration, Instant};

use testkit::gateway::{Cluster, Gateway};
use testkit::ports::free_port;
use testkit::supervisor::http_get;
use testkit::TestResult;

fn http_addr(node: &Gateway) -> String {
    node.http_addr()
        .unwrap_or_else(|| panic!("node {} has no --http-listen", node.id))
}

/// Waits until `/readyz` of `node` answers `code`; returns how long it took.
async fn readyz_becomes(node: &Gateway, code: u16, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let (got, body) = http_get(&http_addr(node), "/readyz").await;
        if got == code {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "node {}: /readyz still {got} ({body}) after {within:?}, expected {code}",
            node.id
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_without_quorum_is_not_ready() -> TestResult<()> {
    let mut cluster = Cluster::start_each(3, &[], |_| {
        vec!["--http-listen".into(), format!("127.0.0.1:{}", free_port())]
    });
    let leader = cluster.wait_leader("bootstrap").await;
    readyz_becomes(cluster.get(leader), 200, Duration::from_secs(15)).await;

    eprintln!("--- step: kill -9 both followers of leader {leader}");
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    for id in &followers {
        cluster.node(*id).kill9();
    }
    let took = readyz_becomes(cluster.get(leader), 503, Duration::from_secs(5)).await;
    eprintln!(
        "leader without quorum not ready after {} ms",
        took.as_millis()
    );
    let (health, body) = http_get(&http_addr(cluster.get(leader)), "/healthz").await;
    assert_eq!(health, 200, "the process is fine: {body}");
    let (_, metrics) = http_get(&http_addr(cluster.get(leader)), "/metrics").await;
    assert!(
        metrics.lines().any(|l| l == "openshell_raft_is_leader 0"),
        "a leader without quorum must not be counted as leader: {}",
        metrics
            .lines()
            .filter(|l| l.contains("is_leader"))
            .collect::<Vec<_>>()
            .join(" | ")
    );

    eprintln!("--- step: one follower returns; the cluster is ready again");
    cluster.node(followers[0]).start();
    let leader = cluster.wait_leader("quorum back").await;
    readyz_becomes(cluster.get(leader), 200, Duration::from_secs(15)).await;
    Ok(())
}

//! A restarted gateway, and a restarted whole cluster, are ready again within
//! 5 s.
//!
//! Found by operating the cluster: every restarted gateway read its start-up
//! commit index one byte off (256 times the real one) and answered `/readyz`
//! 503 for good, so on Kubernetes every pod stayed NotReady after its first
//! restart.
//!
//! - given: 3 gateways with HTTP probes and a log of at least 10,000 entries
//!   (snapshots taken and the log purged behind them, at default settings)
//! - when: a follower is killed (`kill -9`) and started again; then all three
//! - then: each restarted gateway answers `/readyz` 200 within 5 s of its
//!   start, and the start-up commit index it logs is no larger than its log

use std::time::{Duration, Instant};

use testkit::gateway::{object, Cluster, Gateway};
use testkit::ports::free_port;
use testkit::supervisor::http_get;
use testkit::writes::put_through_elections;
use testkit::TestResult;

const LOG_ENTRIES: u64 = 10_000;
const READY_WITHIN: Duration = Duration::from_secs(5);

/// The HTTP address each node was given (`--http-listen`).
fn http_addr(node: &Gateway) -> String {
    node.http_addr()
        .unwrap_or_else(|| panic!("node {} has no --http-listen", node.id))
}

/// Waits for `/readyz` 200 and returns how long it took from `since`.
async fn ready_after(node: &Gateway, since: Instant, why: &str) -> Duration {
    let addr = http_addr(node);
    let deadline = since + Duration::from_secs(60);
    loop {
        let (code, body) = http_get(&addr, "/readyz").await;
        if code == 200 {
            return since.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "node {} not ready 60 s after {why}: {code} {body}",
            node.id
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The start-up commit index the node logged at its latest start.
fn logged_commit_at_start(node: &Gateway) -> u64 {
    let log = node.log();
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("start-up commit index"))
        .unwrap_or_else(|| panic!("node {} logged no start-up commit index", node.id));
    let value = line
        .split("commit_at_start=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok());
    value.unwrap_or_else(|| panic!("unreadable start-up commit index line: {line}"))
}

/// Writes until the leader's log holds `entries` entries. Two writers, each
/// one write at a time: the leader has two entries in flight, so writes are
/// hardly batched and the log really has about that many entries.
async fn grow_log(cluster: &Cluster, leader: u64, entries: u64) -> TestResult<u64> {
    let node = cluster.get(leader);
    loop {
        let status = node.status().await?;
        if status.last_log_index >= entries {
            return Ok(status.last_log_index);
        }
        let mut writers = Vec::new();
        for w in 0..2u64 {
            let mut client = node.objects().await?;
            let round = status.last_log_index;
            writers.push(tokio::spawn(async move {
                for n in 0..250u64 {
                    let object = object(&format!("k{w}-{}", n % 100), &n.to_string());
                    put_through_elections(&mut client, object, &format!("{round}-{w}-{n}")).await?;
                }
                Ok::<(), tonic::Status>(())
            }));
        }
        for writer in writers {
            writer.await??;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_gateway_and_cluster_are_ready_within_five_seconds() -> TestResult<()> {
    let mut cluster = Cluster::start_each(3, &[], |_| {
        vec!["--http-listen".into(), format!("127.0.0.1:{}", free_port())]
    });
    let leader = cluster.wait_leader("bootstrap").await;

    eprintln!("--- step: grow the log to {LOG_ENTRIES} entries");
    let last = cluster.logs_on_err(grow_log(&cluster, leader, LOG_ENTRIES).await)?;
    for id in 1..=3 {
        cluster
            .wait_applied(id, last, "everyone applied the log")
            .await;
    }

    // The writes ride through elections (put_through_elections): ask again.
    let leader = cluster.wait_leader("after the log grew").await;

    eprintln!("--- step: kill -9 a follower and start it again");
    let follower = (1..=3).find(|id| *id != leader).unwrap_or(1);
    cluster.node(follower).kill9();
    let started = Instant::now();
    cluster.node(follower).start();
    let took = ready_after(cluster.get(follower), started, "a follower restart").await;
    let at_start = logged_commit_at_start(cluster.get(follower));
    eprintln!(
        "restart-to-ready one follower: {} ms (start-up commit index {at_start}, log {last})",
        took.as_millis()
    );
    assert!(
        at_start <= last && at_start + 1_000 >= last,
        "start-up commit index {at_start} does not match a log of {last} entries"
    );
    assert!(
        took <= READY_WITHIN,
        "the restarted follower took {took:?} to be ready"
    );

    eprintln!("--- step: kill -9 every gateway and start all three again");
    for id in 1..=3 {
        cluster.node(id).kill9();
    }
    let started = Instant::now();
    for id in 1..=3 {
        cluster.node(id).start();
    }
    let mut slowest = Duration::ZERO;
    for id in 1..=3 {
        let took = ready_after(cluster.get(id), started, "a whole-cluster restart").await;
        let at_start = logged_commit_at_start(cluster.get(id));
        eprintln!(
            "restart-to-ready whole cluster: node {id} {} ms (start-up commit index {at_start})",
            took.as_millis()
        );
        assert!(
            at_start <= last + 10,
            "node {id}: start-up commit index {at_start} beyond its log of {last} entries"
        );
        slowest = slowest.max(took);
    }
    assert!(
        slowest <= READY_WITHIN,
        "the restarted cluster took {slowest:?} to be ready"
    );
    Ok(())
}

//! A planned leadership transfer under write load does not wait out the
//! followers' leader lease.
//!
//! - given: three gateways with a long election timeout (2.5-5 s), so that
//!   waiting out the followers' leader lease (1.5 x 5 s, what the transfer
//!   did before) outlasts the 5 s write timeout; eight clients, client `i`
//!   writing new objects through gateway `i mod 3`
//! - when: the leader hands leadership to a named follower, and that one
//!   hands it to the third node
//! - then: each reply names the target and every node agrees it leads; no
//!   write sent to the leader while it handed over failed (it held them and
//!   passed them on to its successor); every acknowledged write is on the
//!   last leader with the resource version it was acknowledged with, and no
//!   two acknowledged writes share a resource version

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proto::cluster::TransferLeaderRequest;
use proto::objects::object_store_client::ObjectStoreClient;
use proto::objects::{precondition, Precondition, PutRequest};
use testkit::gateway::*;
use testkit::TestResult;

/// Concurrent writers (the 8-client load).
const CLIENTS: usize = 8;

/// One write a client sent: through which node, when, and what came back.
struct Sent {
    node: u64,
    at: Instant,
    key: String,
    outcome: Result<u64, String>,
}

/// Starts `CLIENTS` writers; client `i` writes `c<i>-<n>` through node
/// `i mod 3 + 1` until `stop`.
fn start_writers(
    nodes: &[(u64, String)],
    stop: &Arc<AtomicBool>,
    sent: &Arc<Mutex<Vec<Sent>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..CLIENTS)
        .map(|i| {
            let (node, addr) = nodes[i % nodes.len()].clone();
            let stop = stop.clone();
            let sent = sent.clone();
            tokio::spawn(async move {
                let Ok(channel) = test_channel(&addr, 2000).await else {
                    return;
                };
                let mut client = ObjectStoreClient::new(channel);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("c{i}-{n}");
                    n += 1;
                    let at = Instant::now();
                    let reply = client
                        .put(PutRequest {
                            object: Some(object(&key, "v")),
                            precondition: Some(Precondition {
                                kind: Some(precondition::Kind::MustCreate(true)),
                            }),
                            request_id: String::new(),
                        })
                        .await;
                    let outcome = match reply {
                        Ok(r) => Ok(r
                            .into_inner()
                            .object
                            .map(|o| o.resource_version)
                            .unwrap_or(0)),
                        Err(status) => Err(format!("{:?}: {}", status.code(), status.message())),
                    };
                    sent.lock().unwrap_or_else(|p| p.into_inner()).push(Sent {
                        node,
                        at,
                        key,
                        outcome,
                    });
                }
            })
        })
        .collect()
}

/// Transfers leadership from `from` to `to` (asking `from`); returns when
/// the transfer started and ended.
async fn transfer(cluster: &Cluster, from: u64, to: u64) -> TestResult<(Instant, Instant)> {
    eprintln!("--- step: transfer from node {from} to node {to}");
    let started = Instant::now();
    let reply = cluster
        .get(from)
        .admin()
        .await?
        .transfer_leader(TransferLeaderRequest { to })
        .await?
        .into_inner();
    let ended = Instant::now();
    eprintln!(
        "transfer answered after {} ms: leader {} term {}",
        ended.duration_since(started).as_millis(),
        reply.leader_id,
        reply.term
    );
    assert_eq!(reply.leader_id, to, "the reply names the target");
    assert_eq!(cluster.wait_leader("after transfer").await, to);
    Ok((started, ended))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_under_load_keeps_every_write_and_does_not_wait_out_the_lease() -> TestResult {
    let cluster = Cluster::start(
        3,
        &["--election-min-ms", "2500", "--election-max-ms", "5000"],
    );
    let first = cluster.wait_leader("bootstrap").await;
    let others: Vec<u64> = (1..=3).filter(|id| *id != first).collect();
    let nodes: Vec<(u64, String)> = cluster
        .nodes
        .iter()
        .map(|n| (n.id, n.addr.clone()))
        .collect();

    let stop = Arc::new(AtomicBool::new(false));
    let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let writers = start_writers(&nodes, &stop, &sent);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let one = transfer(&cluster, first, others[0]).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let two = transfer(&cluster, others[0], others[1]).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;

    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await?;
    }
    let sent = std::mem::take(&mut *sent.lock().unwrap_or_else(|p| p.into_inner()));

    eprintln!("--- step: no write sent to the leader while it handed over failed");
    for (leader, (started, ended)) in [(first, one), (others[0], two)] {
        let during: Vec<&Sent> = sent
            .iter()
            .filter(|s| s.node == leader && s.at >= started && s.at <= ended)
            .collect();
        let failed: Vec<String> = during
            .iter()
            .filter_map(|s| s.outcome.as_ref().err().map(|e| format!("{}: {e}", s.key)))
            .collect();
        eprintln!(
            "node {leader}: {} writes sent during its transfer, {} failed",
            during.len(),
            failed.len()
        );
        assert!(
            failed.is_empty(),
            "writes sent to leader {leader} during its transfer failed: {failed:?}"
        );
    }

    eprintln!("--- step: every acknowledged write kept, one resource version each");
    let acked: Vec<(&str, u64)> = sent
        .iter()
        .filter_map(|s| s.outcome.as_ref().ok().map(|rv| (s.key.as_str(), *rv)))
        .collect();
    let failed = sent.len() - acked.len();
    eprintln!("{} writes acknowledged, {failed} failed", acked.len());
    assert!(acked.len() > 50, "too few writes: {}", acked.len());
    let mut by_version: BTreeMap<u64, &str> = BTreeMap::new();
    for (key, rv) in &acked {
        if let Some(other) = by_version.insert(*rv, key) {
            panic!("{key} and {other} were both acknowledged with resource version {rv}");
        }
    }
    let stored: BTreeMap<String, u64> = dump(cluster.get(others[1]), false)
        .await?
        .into_iter()
        .map(|(key, _, rv)| (key, rv))
        .collect();
    for (key, rv) in &acked {
        assert_eq!(
            stored.get(*key),
            Some(rv),
            "acknowledged write {key} (resource version {rv}) lost or changed"
        );
    }
    Ok(())
}

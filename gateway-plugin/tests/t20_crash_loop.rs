//! Repeated `kill -9` in the middle of a write stream.
//!
//! - given: three gateways, snapshots every 100 entries
//! - when: a client writes unique keys through whichever node answers while one
//!   node after another (leader included) is killed with `kill -9` and
//!   restarted from its sled directory, 21 cycles
//! - then: every acknowledged write is present on every node, and all nodes'
//!   state machines are identical

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proto::objects::object_store_client::ObjectStoreClient;
use proto::objects::{precondition, Precondition, PutRequest};
use testkit::gateway::*;
use testkit::TestResult;

const CYCLES: u64 = 21;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_repeated_kill9() -> TestResult {
    let mut cluster = Cluster::start(3, &["--snapshot-after-logs", "100", "--logs-to-keep", "20"]);
    cluster.wait_leader("bootstrap").await;
    let addrs: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));

    eprintln!("--- step: a writer streams unique keys through any node that answers");
    let writer = {
        let acked = acked.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut i = 0u64;
            let mut unknown = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let addr = &addrs[(i % addrs.len() as u64) as usize];
                let key = format!("w-{i:06}");
                let value = format!("v{i}");
                let attempt = async {
                    let channel =
                        tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
                            .connect_timeout(Duration::from_millis(200))
                            .timeout(Duration::from_secs(3))
                            .connect()
                            .await?;
                    ObjectStoreClient::new(channel)
                        .put(PutRequest {
                            object: Some(object(&key, &value)),
                            precondition: Some(Precondition {
                                kind: Some(precondition::Kind::MustCreate(true)),
                            }),
                            request_id: String::new(),
                        })
                        .await?;
                    TestResult::Ok(())
                };
                match attempt.await {
                    Ok(()) => acked
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((key, value)),
                    Err(_) => unknown += 1,
                }
                i += 1;
            }
            (i, unknown)
        })
    };

    eprintln!("--- step: kill -9 and restart nodes in turn, {CYCLES} cycles");
    for cycle in 0..CYCLES {
        let victim = cycle % 3 + 1;
        tokio::time::sleep(Duration::from_millis(150)).await;
        cluster.node(victim).kill9();
        tokio::time::sleep(Duration::from_millis(250)).await;
        cluster.node(victim).start();
        eventually("restarted node serves", || cluster.get(victim).status()).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let (attempted, failed) = writer.await?;
    let acked = acked.lock().unwrap_or_else(|p| p.into_inner()).clone();
    eprintln!(
        "writes attempted {attempted}, acknowledged {}, not acknowledged {failed}",
        acked.len()
    );
    assert!(
        acked.len() > 50,
        "too few acknowledged writes ({}) to mean anything",
        acked.len()
    );

    eprintln!("--- step: every node catches up; states are identical and hold every acked write");
    let leader = cluster.wait_leader("after the crash loop").await;
    // A write after the loop commits everything before it.
    eventually("final write", || put(cluster.get(leader), "final", "done")).await;
    let commit = cluster.get(leader).status().await?.commit_index;
    for id in 1..=3 {
        cluster
            .wait_applied(id, commit, "catch up after the crash loop")
            .await;
    }
    let states = [
        dump(cluster.get(1), true).await?,
        dump(cluster.get(2), true).await?,
        dump(cluster.get(3), true).await?,
    ];
    assert_eq!(states[0], states[1], "nodes 1 and 2 differ");
    assert_eq!(states[0], states[2], "nodes 1 and 3 differ");
    for (key, value) in &acked {
        assert!(
            states[0].iter().any(|(k, v, _)| k == key && v == value),
            "acknowledged write {key} is missing"
        );
    }
    Ok(())
}

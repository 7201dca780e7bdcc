//! Disaster recovery through `openshell-gateway recover --force-new-cluster`.
//!
//! - given: three gateways holding 50 acknowledged writes
//! - when: two are lost for good and the third is recovered as a one-voter
//!   cluster, then two fresh members are added through the CLI
//! - then: every committed entry is on every member

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::cli::*;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_new_cluster_recovers_every_committed_entry() -> TestResult {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader("bootstrap").await;
    let mut acked = Vec::new();
    for i in 0..50 {
        let key = format!("k{i}");
        put(cluster.get(leader), &key, "v").await?;
        acked.push(key);
    }
    eprintln!("--- step: two of three gateways are lost for good");
    let survivor = (1..=3).find(|id| *id != leader).unwrap_or(1);
    for id in (1..=3).filter(|id| *id != survivor) {
        cluster.node(id).kill9();
    }
    cluster.node(survivor).kill9();
    let data = cluster.get(survivor).data_dir.clone();
    let addr = cluster.get(survivor).addr.clone();
    let out = Command::new(gateway_bin())
        .args(["recover", "--force-new-cluster", "--data-dir"])
        .arg(&data)
        .args([
            "--node-id",
            &survivor.to_string(),
            "--advertise",
            &addr,
            "--cluster-id",
            "test",
        ])
        .output()?;
    assert!(
        out.status.success(),
        "recover failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Start it again without --initial-voters: it leads alone.
    let node = cluster.node(survivor);
    node.extra_args.clear();
    node.initial_voters = None;
    node.start();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(s) = cluster.get(survivor).status().await {
            if s.leader_id == survivor {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the recovered node did not lead");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("--- step: two fresh members are added back through the CLI");
    let e = addr.clone();
    for id in [4u64, 5] {
        let g = cluster.add_node(id, &[]);
        let g_addr = g.addr.clone();
        json(&e, &["raft", "add-learner", &id.to_string(), &g_addr]);
        json(&e, &["raft", "promote", &id.to_string()]);
    }
    let status = json(&e, &["raft", "status"]);
    assert_eq!(
        status["voters"].as_array().map(Vec::len),
        Some(3),
        "{status}"
    );
    for id in [survivor, 4, 5] {
        let commit = cluster.get(survivor).status().await?.commit_index;
        cluster
            .wait_applied(id, commit, "new member catches up")
            .await;
        let have = dump(cluster.get(id), true).await?;
        for key in &acked {
            assert!(
                have.iter().any(|(k, _, _)| k == key),
                "node {id} misses committed entry {key}"
            );
        }
    }
    Ok(())
}

//! Every gateway digests its state at the same log indexes and exports it
//! (issue 31 §2: the replica check as a metric).
//!
//! - given: three gateways with `/metrics`
//! - when: more than 1024 entries are applied (one write per entry)
//! - then: each gateway's `openshell_raft_state_digest_index` reaches 1024
//!   (a multiple of 1024, the same on all three once they applied it) and
//!   their `openshell_raft_state_digest_crc32` at that index are equal
//! - and: the crc equals what `StateDigest { at_index: 1024 }`, asked on
//!   each gateway before the writes, answered: the metric describes exactly
//!   the state right after index 1024

use std::time::{Duration, Instant};

use testkit::gateway::*;
use testkit::ports::free_port;
use testkit::supervisor::http_get;
use testkit::TestResult;

/// The value of the metric `name` on `node`'s `/metrics` (None: not yet).
async fn metric(node: &Gateway, name: &str) -> TestResult<Option<u64>> {
    let addr = node.http_addr().ok_or("no --http-listen")?;
    let (code, body) = http_get(&addr, "/metrics").await;
    assert_eq!(code, 200, "/metrics of node {}: {body}", node.id);
    let value = body
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '));
    Ok(match value {
        Some(v) => Some(v.trim().parse()?),
        None => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_export_equal_digests_at_equal_indexes() -> TestResult {
    let cluster = Cluster::start_each(3, &[], |_| {
        vec!["--http-listen".into(), format!("127.0.0.1:{}", free_port())]
    });
    let leader = cluster.wait_leader("bootstrap").await;
    for id in 1..=3 {
        assert_eq!(
            metric(cluster.get(id), "openshell_raft_state_digest_index").await?,
            Some(0),
            "no digest before index 1024 (index 0, openraft's first membership entry, is none)"
        );
        assert_eq!(
            metric(cluster.get(id), "openshell_raft_state_digest_crc32").await?,
            Some(0),
            "no digest taken before index 1024"
        );
    }

    eprintln!("--- step: ask each gateway for its digest at 1024, ahead of time");
    // The calls wait on the gateways up to 30 s (the writes below take
    // 5-15 s on a loaded 2-core machine), so their deadline must be longer
    // than that: with the usual 15 s one, CI's run failed with `Cancelled:
    // Timeout expired` while the gateways were still waiting as asked.
    let mut asked = Vec::new();
    for id in 1..=3 {
        let channel = cluster
            .get(id)
            .channel_with_deadline(Duration::from_secs(45))
            .await?;
        let mut admin = proto::cluster::cluster_admin_client::ClusterAdminClient::new(channel);
        asked.push(tokio::spawn(async move {
            admin
                .state_digest(proto::cluster::StateDigestRequest {
                    at_index: 1024,
                    wait_ms: 30_000,
                })
                .await
                .map(tonic::Response::into_inner)
        }));
    }

    eprintln!("--- step: one write per entry until the log passes 1024");
    let mut n = 0;
    while cluster.get(leader).status().await?.applied_index < 1030 {
        n += 1;
        put(
            cluster.get(leader),
            &format!("obj-{}", n % 100),
            &n.to_string(),
        )
        .await?;
    }

    eprintln!("--- step: every gateway reports its digest at 1024; all equal");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut crcs = Vec::new();
    for id in 1..=3 {
        loop {
            let index = metric(cluster.get(id), "openshell_raft_state_digest_index").await?;
            if index == Some(1024) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {id}: digest index {index:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        crcs.push(
            metric(cluster.get(id), "openshell_raft_state_digest_crc32")
                .await?
                .ok_or("no crc")?,
        );
    }
    assert!(crcs.iter().all(|c| *c == crcs[0]), "crcs {crcs:?}");
    for (id, asked) in (1..=3).zip(asked) {
        let d = asked.await??;
        assert_eq!(d.applied_index, 1024, "node {id}");
        assert_eq!(
            u64::from(d.crc32),
            crcs[0],
            "node {id}: StateDigest at 1024 vs the metric"
        );
    }
    Ok(())
}

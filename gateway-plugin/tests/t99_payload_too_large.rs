//! An append batch over the raft message limit is split, never retried as
//! is (issue 16 §2), through real gateway processes.
//!
//! - given: three gateways with `max_message_bytes = 262144` (the lowest
//!   allowed, 256 KiB) and 64 KiB snapshot chunks (config file)
//! - when: a follower is killed, 80 objects of 30 KB are written (about
//!   2.4 MB of log; the log store hands openraft up to 512 KiB of entries
//!   per AppendEntries, twice the limit), and the follower is started again
//! - then: it catches up (openraft retries with the hinted fewer entries
//!   instead of resending the same batch forever), every replica reaches the
//!   same applied index and state digest, and the follower serves the
//!   objects; before the fix tonic refused to encode the batch and the
//!   follower never caught up

use std::time::{Duration, Instant};

use proto::cluster::StateDigestRequest;
use testkit::gateway::*;
use testkit::TestResult;

/// Objects written while the follower is down.
const OBJECTS: usize = 80;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_batch_over_the_message_limit_is_split_and_converges() -> TestResult {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        "[openshell.gateway.raft]\nmax_message_bytes = 262144\nsnapshot_chunk_bytes = 65536\n",
    )?;
    let config = config.display().to_string();
    let mut cluster = Cluster::start(3, &["--config", &config]);
    let leader = cluster.wait_leader("bootstrap").await;
    let follower = (1..=3).find(|id| *id != leader).unwrap_or(1);

    eprintln!("--- step: kill follower {follower}, write {OBJECTS} objects of 30 KB");
    cluster.node(follower).kill9();
    let value = "v".repeat(30_000);
    for i in 0..OBJECTS {
        put(cluster.get(leader), &format!("big-{i:03}"), &value).await?;
    }
    let target = cluster.get(leader).status().await?.applied_index;

    eprintln!("--- step: restart the follower; it must catch up to index {target}");
    cluster.node(follower).start();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let applied = cluster
            .get(follower)
            .status()
            .await
            .map(|s| s.applied_index)
            .unwrap_or(0);
        if applied >= target {
            break;
        }
        if Instant::now() > deadline {
            cluster.dump_logs();
            panic!("follower {follower} applied {applied} of {target} within 60 s: replication is wedged");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    eprintln!("--- step: every replica ends identical (at one applied index)");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut digests = Vec::new();
        for node in &cluster.nodes {
            if let Ok(mut admin) = node.admin().await {
                if let Ok(d) = admin.state_digest(StateDigestRequest::default()).await {
                    digests.push(d.into_inner());
                }
            }
        }
        if digests.len() == 3
            && digests
                .iter()
                .all(|d| d.applied_index == digests[0].applied_index)
        {
            assert!(
                digests
                    .iter()
                    .all(|d| d.crc32 == digests[0].crc32 && d.bytes == digests[0].bytes),
                "replicas differ at index {}: {digests:?}",
                digests[0].applied_index
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replicas never met at one applied index: {digests:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        get(
            cluster.get(follower),
            &format!("big-{:03}", OBJECTS - 1),
            true
        )
        .await?,
        Some(value)
    );
    Ok(())
}

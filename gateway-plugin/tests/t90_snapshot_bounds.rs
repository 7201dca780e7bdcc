//! Snapshot install is bounded input (issue 13, "Bounded input"): a fake
//! leader cannot make a gateway buffer without bound, write outside its
//! data directory, or stop by sending a snapshot that does not decode.
//!
//! - given: one gateway with `max_snapshot_bytes = 1 MiB` (config file) and
//!   an object `before`
//! - when: a fake leader (a raft transport client with a
//!   vote 1000 terms ahead; an `--insecure` gateway checks only the
//!   cluster id of raft calls) sends InstallSnapshot chunks:
//!   one that starts a snapshot; one at offset 2^40; one ending past 1 MiB;
//!   one of a snapshot named `../../escape`; one complete snapshot of
//!   garbage
//! - then: the first is answered, the others are refused (RESOURCE_EXHAUSTED,
//!   RESOURCE_EXHAUSTED, INVALID_ARGUMENT, INVALID_ARGUMENT) and logged; no
//!   file appears outside the data directory; the gateway keeps running,
//!   leads again, and serves `before` and a new write
//!
//! The second case, a real leader's snapshot past a learner's bound, is
//! described on its test.

use std::time::Duration;

use openraft::raft::InstallSnapshotRequest;
use openraft::{CommittedLeaderId, LogId, SnapshotMeta, Vote};
use proto::raft::raft_transport_client::RaftTransportClient;
use proto::raft::RaftPayload;
use raft_store::codec;
use raft_store::TypeConfig;
use testkit::gateway::*;
use testkit::TestResult;

/// The fake leader's node id (not a member).
const FAKE: u64 = 2;

fn chunk(term: u64, id: &str, offset: u64, data: Vec<u8>, done: bool) -> RaftPayload {
    let request: InstallSnapshotRequest<TypeConfig> = InstallSnapshotRequest {
        vote: Vote::new_committed(term, FAKE),
        meta: SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(term, FAKE), 1_000_000)),
            last_membership: Default::default(),
            snapshot_id: id.into(),
        },
        offset,
        data,
        done,
    };
    RaftPayload {
        encoding: codec::ENCODING_V1,
        data: codec::encode(&request),
        cluster_id: "test".into(),
        target_node_id: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crafted_snapshot_chunks_are_refused_and_the_gateway_keeps_serving() -> TestResult {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        "[openshell.gateway.raft]\nmax_snapshot_bytes = 1048576\n",
    )?;
    let config = config.display().to_string();
    let cluster = Cluster::start(1, &["--config", &config]);
    cluster.wait_leader("bootstrap").await;
    let node = cluster.get(1);
    put(node, "before", "v").await?;
    let term = node.status().await?.term + 1000;

    let channel = test_channel(&node.addr, 2000).await?;
    // An --insecure gateway serves the raft transport on its one port and
    // checks only the cluster id (as t30_bad_input).
    let mut fake = RaftTransportClient::new(channel);

    eprintln!("--- step: a snapshot starts");
    fake.install_snapshot(chunk(term, "1000-1-0", 0, vec![0; 16], false))
        .await?;

    eprintln!("--- step: a chunk at offset 2^40");
    let refused = fake
        .install_snapshot(chunk(term, "1000-1-0", 1 << 40, vec![0; 16], false))
        .await
        .expect_err("a chunk at offset 2^40 was accepted");
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(
        refused.message().contains("max_snapshot_bytes"),
        "{refused:?}"
    );

    eprintln!("--- step: a chunk ending past max_snapshot_bytes");
    let refused = fake
        .install_snapshot(chunk(term, "1000-1-0", 16, vec![0; 1024 * 1024], false))
        .await
        .expect_err("a chunk past the bound was accepted");
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );

    eprintln!("--- step: a snapshot id that is a path");
    let refused = fake
        .install_snapshot(chunk(term, "../../escape", 0, vec![0; 16], false))
        .await
        .expect_err("a snapshot id ../../escape was accepted");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("snapshot_id"), "{refused:?}");

    eprintln!("--- step: a complete snapshot that does not decode");
    let refused = fake
        .install_snapshot(chunk(term, "1000-1-1", 0, vec![0xff; 37], true))
        .await
        .expect_err("an undecodable snapshot was accepted");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("does not decode"), "{refused:?}");

    eprintln!("--- step: the gateway keeps serving");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(cluster.get(1).is_running(), "the gateway exited");
    cluster
        .wait_leader("leading again after the fake leader")
        .await;
    eventually("a write after the fake leader", || put(node, "after", "v")).await;
    assert_eq!(get(node, "before", false).await?, Some("v".into()));
    assert_eq!(get(node, "after", false).await?, Some("v".into()));
    let escaped = cluster.root.path().join("escape.tmp");
    assert!(!escaped.exists(), "{} was written", escaped.display());
    let log = node.log();
    assert!(log.contains("refused a snapshot chunk"), "{log}");
    Ok(())
}

/// - given: a one-gateway cluster whose log is purged behind snapshots,
///   holding about 3 MiB of objects; a second gateway with
///   `max_snapshot_bytes = 1 MiB`
/// - when: the second is added as a learner (it can only catch up from a
///   snapshot)
/// - then: it refuses the leader's snapshot past its bound and logs it,
///   keeps running and answering; the leader keeps serving writes
/// - when: the operator raises the bound to 64 MiB and restarts it
/// - then: it catches up from the snapshot (the runbook's procedure)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_past_the_bound_is_refused_until_the_bound_is_raised() -> TestResult {
    let mut cluster = Cluster::start(1, &["--snapshot-after-logs", "10", "--logs-to-keep", "0"]);
    cluster.wait_leader("bootstrap").await;
    let value = "x".repeat(30 * 1024);
    for i in 0..100 {
        put(cluster.get(1), &format!("big-{i}"), &value).await?;
    }
    let index = cluster.get(1).status().await?.commit_index;
    let config = cluster.root.path().join("learner.toml");
    std::fs::write(
        &config,
        "[openshell.gateway.raft]\nmax_snapshot_bytes = 1048576\n",
    )?;
    let config_arg = config.display().to_string();
    let addr = cluster.add_node(2, &["--config", &config_arg]).addr.clone();

    eprintln!("--- step: the learner refuses the 3 MiB snapshot");
    eventually("add node 2 as a learner", || async {
        cluster
            .get(1)
            .admin()
            .await?
            .add_learner(proto::cluster::AddLearnerRequest {
                node: Some(proto::cluster::Node {
                    id: 2,
                    addr: addr.clone(),
                }),
                blocking: false,
            })
            .await?;
        Ok(())
    })
    .await;
    eventually("the learner logs the refusal", || async {
        let log = cluster.get(2).log();
        if log.contains("refused a snapshot chunk") && log.contains("past this node's bound") {
            Ok(())
        } else {
            Err("not yet".into())
        }
    })
    .await;
    assert!(cluster.get(2).is_running(), "the learner exited");
    let learner = cluster.get(2).status().await?;
    assert!(learner.applied_index < index, "{learner:?}");
    put(cluster.get(1), "while-refused", "v").await?;

    eprintln!("--- step: raise the bound, restart the learner: it catches up");
    std::fs::write(
        &config,
        "[openshell.gateway.raft]\nmax_snapshot_bytes = 67108864\n",
    )?;
    cluster.node(2).kill9();
    cluster.node(2).start();
    let index = cluster.get(1).status().await?.commit_index;
    cluster
        .wait_applied(2, index, "catch up from the snapshot")
        .await;
    Ok(())
}

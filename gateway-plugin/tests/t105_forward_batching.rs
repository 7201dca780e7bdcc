//! Writes a follower forwards are batched: fewer forward calls than writes,
//! each caller its own result, and never a wrong success when leadership
//! moves under a batch.
//!
//! `concurrent_writes_through_a_follower_share_forward_calls`:
//! - given: three gateways with `/metrics`
//! - when: 64 clients put 64 different objects through one follower at once
//! - then: every put succeeds with its own object (id, payload, a resource
//!   version no other put got), the follower's `openshell_raft_forwarded_writes_total`
//!   grew by at least 64 while `openshell_raft_forward_calls_total` grew by fewer
//!   than 64 (one call per write before the batching: the metric did not
//!   exist), and every object reads back as put
//!
//! `a_leader_change_under_batched_forwards_never_reports_a_wrong_success`:
//! - given: three gateways with a slow election (0.5–0.75 s)
//! - when: the leader is paused (`kill -STOP`) and 16 clients put through a
//!   follower at once, so their forwards are batched towards the paused leader
//! - then: each put returns before the 5 s write timeout; one that succeeded
//!   reads back with its payload at its version, one refused as UNAVAILABLE
//!   (no leader: certainly not applied) is absent, one UNKNOWN is present with
//!   its own payload or absent; at least one is UNKNOWN, abandoned when
//!   leadership moved or when the channel to the paused leader missed its
//!   keepalive (a batch was in flight to the paused leader)

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use proto::objects::object_store_client::ObjectStoreClient;
use proto::objects::{precondition, GetRequest, Precondition, PutRequest};
use testkit::gateway::*;
use testkit::ports::free_port;
use testkit::supervisor::http_get;
use testkit::TestResult;

/// The value of the metric `name` on `node`'s `/metrics`.
async fn metric(node: &Gateway, name: &str) -> TestResult<u64> {
    let addr = node.http_addr().ok_or("no --http-listen")?;
    let (code, body) = http_get(&addr, "/metrics").await;
    assert_eq!(code, 200, "/metrics of node {}: {body}", node.id);
    let value = body
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .ok_or_else(|| format!("node {} has no metric {name}", node.id))?;
    Ok(value.trim().parse()?)
}

/// An unconditional put of `id` with `value` over `channel`.
async fn put_on(
    channel: tonic::transport::Channel,
    id: String,
    value: String,
) -> Result<proto::objects::Object, tonic::Status> {
    let reply = ObjectStoreClient::new(channel)
        .put(PutRequest {
            object: Some(object(&id, &value)),
            precondition: Some(Precondition {
                kind: Some(precondition::Kind::Unconditional(true)),
            }),
            request_id: String::new(),
        })
        .await?;
    reply
        .into_inner()
        .object
        .ok_or_else(|| tonic::Status::internal("no object in the reply"))
}

/// Linearizable get of `id` through `node`: (payload, resource version).
async fn read(node: &Gateway, id: &str) -> TestResult<Option<(String, u64)>> {
    let reply = ObjectStoreClient::new(node.channel().await?)
        .get(GetRequest {
            r#type: "test".into(),
            id: id.into(),
            stale: false,
        })
        .await;
    match reply {
        Ok(r) => Ok(r.into_inner().object.map(|o| {
            (
                String::from_utf8_lossy(&o.payload).into_owned(),
                o.resource_version,
            )
        })),
        Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
        Err(s) => Err(s.into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_through_a_follower_share_forward_calls() -> TestResult {
    let cluster = Cluster::start_each(3, &[], |_| {
        vec!["--http-listen".into(), format!("127.0.0.1:{}", free_port())]
    });
    let leader = cluster.wait_leader("bootstrap").await;
    let follower = cluster
        .nodes
        .iter()
        .find(|n| n.id != leader)
        .ok_or("no follower")?;
    put(follower, "warm", "up").await?;
    let calls = metric(follower, "openshell_raft_forward_calls_total").await?;
    let writes = metric(follower, "openshell_raft_forwarded_writes_total").await?;

    eprintln!(
        "--- step: 64 concurrent puts through follower {}",
        follower.id
    );
    let channel = follower.channel().await?;
    let mut tasks = Vec::new();
    for i in 0..64 {
        let (id, value) = (format!("k{i}"), format!("v{i}"));
        tasks.push(tokio::spawn(put_on(channel.clone(), id, value)));
    }
    let mut versions = BTreeSet::new();
    for (i, task) in tasks.into_iter().enumerate() {
        let object = task.await??;
        assert_eq!(object.id, format!("k{i}"), "put {i} got another's object");
        assert_eq!(object.payload, format!("v{i}").into_bytes(), "put {i}");
        assert!(
            versions.insert(object.resource_version),
            "put {i} got resource version {} that another put got too",
            object.resource_version
        );
    }
    let calls = metric(follower, "openshell_raft_forward_calls_total").await? - calls;
    let writes = metric(follower, "openshell_raft_forwarded_writes_total").await? - writes;
    eprintln!(
        "follower {}: {writes} writes forwarded in {calls} calls",
        follower.id
    );
    assert!(
        writes >= 64,
        "{writes} writes forwarded, expected at least 64"
    );
    assert!(
        calls < 64,
        "64 concurrent writes took {calls} forward calls: not batched"
    );

    eprintln!("--- step: every object reads back as put");
    let leader_node = cluster.get(leader);
    for i in 0..64 {
        let got = read(leader_node, &format!("k{i}")).await?;
        assert_eq!(got.map(|(p, _)| p), Some(format!("v{i}")), "object k{i}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_change_under_batched_forwards_never_reports_a_wrong_success() -> TestResult {
    let cluster = Cluster::start(3, &["--election-min-ms", "500", "--election-max-ms", "750"]);
    let leader = cluster.wait_leader("bootstrap").await;
    let follower = cluster
        .nodes
        .iter()
        .find(|n| n.id != leader)
        .ok_or("no follower")?;
    put(follower, "warm", "up").await?;
    let channel = follower.channel().await?;

    eprintln!(
        "--- step: pause the leader (node {leader}), 16 puts through node {}",
        follower.id
    );
    cluster.get(leader).signal("-STOP");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (id, value) = (format!("p{i}"), format!("w{i}"));
        tasks.push(tokio::spawn(put_on(channel.clone(), id, value)));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push((task.await?, started.elapsed()));
    }
    cluster.get(leader).signal("-CONT");
    let new_leader = cluster.wait_leader("after resume").await;
    eprintln!("leader now node {new_leader}");

    eprintln!("--- step: every outcome agrees with what the cluster holds");
    let reader = cluster.get(new_leader);
    let mut abandoned = 0;
    for (i, (outcome, took)) in outcomes.iter().enumerate() {
        eprintln!("put p{i} after {took:?}: {outcome:?}");
        assert!(
            *took < Duration::from_secs(5),
            "put p{i} took {took:?}, over the 5 s write timeout"
        );
        let held = read(reader, &format!("p{i}")).await?;
        match outcome {
            Ok(object) => assert_eq!(
                held,
                Some((format!("w{i}"), object.resource_version)),
                "put p{i} reported success at version {}",
                object.resource_version
            ),
            Err(s) if s.code() == tonic::Code::Unavailable => {
                assert_eq!(held, None, "put p{i} was refused ({s:?}) but applied")
            }
            Err(s) if s.code() == tonic::Code::Unknown => {
                // Abandoned when the new leader showed, or when the channel
                // to the paused leader missed its keepalive: either way the
                // batch was in flight to the paused leader.
                abandoned += usize::from(
                    s.message().contains("abandoned when leadership moved")
                        || s.message().contains("KeepAliveTimedOut"),
                );
                if let Some((payload, _)) = &held {
                    assert_eq!(payload, &format!("w{i}"), "put p{i}");
                }
            }
            Err(s) => panic!("put p{i}: unexpected status {s:?}"),
        }
    }
    assert!(
        abandoned >= 1,
        "no put was abandoned (leadership moved or keepalive missed): no batch was in flight to the paused leader"
    );
    Ok(())
}

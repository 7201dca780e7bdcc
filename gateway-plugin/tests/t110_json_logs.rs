//! Scenario: a log pipeline reads a gateway's `--log-format json` output.
//!
//! - given: three gateways started with `--log-format json`, per-call lines
//!   on (`gateway_plugin::logs=debug`)
//! - when: a caller sends calls with its own `x-request-id`, and one with a
//!   request id too long to keep
//! - then: every line of every gateway parses as one JSON object with
//!   `timestamp`, `level`, `target`, `fields.message` and the gateway's
//!   `node_id`; once raft runs, lines carry `raft_term`; the lines of a
//!   call carry its method and the caller's request id, and a call whose id
//!   was refused gets one made by the gateway

use std::time::Duration;

use proto::cluster::cluster_admin_client::ClusterAdminClient;
use proto::cluster::StatusRequest;
use proto::objects::object_store_client::ObjectStoreClient;
use proto::objects::{precondition, Precondition, PutRequest};
use serde_json::Value;
use testkit::gateway::{object, Cluster, Gateway};
use testkit::TestResult;

/// `message` with the caller's `x-request-id` header `id`.
fn with_id<T>(message: T, id: &str) -> TestResult<tonic::Request<T>> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("x-request-id", id.parse()?);
    Ok(request)
}

/// The JSON lines of `node`'s log; panics on a line that is not one JSON
/// object with the fields every line has.
fn lines(node: &Gateway) -> Vec<Value> {
    node.log()
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let value: Value = serde_json::from_str(line).unwrap_or_else(|e| {
                panic!("node {} line {}: not JSON ({e}): {line}", node.id, i + 1)
            });
            assert_eq!(
                value["node_id"],
                Value::from(node.id),
                "line {}: {line}",
                i + 1
            );
            for key in ["timestamp", "level", "target"] {
                assert!(value[key].is_string(), "line {}: no {key}: {line}", i + 1);
            }
            assert!(
                value["fields"]["message"].is_string(),
                "line {}: no message: {line}",
                i + 1
            );
            value
        })
        .collect()
}

/// The lines of the call with request id `id`.
fn of_call<'a>(lines: &'a [Value], id: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["span"]["request_id"] == id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_is_json_and_a_calls_lines_carry_its_request_id() -> TestResult {
    // Read once by each gateway's start, in this test process only.
    std::env::set_var(
        "TESTKIT_GATEWAY_RUST_LOG",
        "info,openraft=warn,gateway_plugin::logs=debug",
    );
    let cluster = Cluster::start(3, &["--log-format", "json"]);
    let leader = cluster.wait_leader("bootstrap").await;
    let follower = (1..=3).find(|id| *id != leader).ok_or("a follower")?;
    let node = cluster.get(follower);

    eprintln!("--- step: calls with the caller's request ids, through a follower");
    ClusterAdminClient::new(node.channel().await?)
        .status(with_id(StatusRequest::default(), "t110-status")?)
        .await?;
    let put = PutRequest {
        object: Some(object("k", "v")),
        precondition: Some(Precondition {
            kind: Some(precondition::Kind::Unconditional(true)),
        }),
        ..Default::default()
    };
    ObjectStoreClient::new(node.channel().await?)
        .put(with_id(put, "t110-put")?)
        .await?;
    let too_long = "x".repeat(65);
    ClusterAdminClient::new(node.channel().await?)
        .status(with_id(StatusRequest::default(), &too_long)?)
        .await?;
    // The per-call lines are written as the calls return; give the writer
    // a moment to flush.
    tokio::time::sleep(Duration::from_millis(300)).await;

    eprintln!("--- step: every line of every gateway parses");
    for id in 1..=3 {
        let parsed = lines(cluster.get(id));
        assert!(!parsed.is_empty(), "node {id} logged nothing");
    }

    eprintln!("--- step: a call's lines carry its method, request id and the raft term");
    let parsed = lines(node);
    for (id, method) in [
        ("t110-status", "/openshell.cluster.v1.ClusterAdmin/Status"),
        ("t110-put", "/openshell.objects.v1.ObjectStore/Put"),
    ] {
        let call = of_call(&parsed, id);
        assert!(!call.is_empty(), "no line of call {id}");
        for line in call {
            assert_eq!(line["span"]["method"], Value::from(method), "{line}");
            assert!(line["raft_term"].as_u64().is_some_and(|t| t >= 1), "{line}");
        }
    }
    assert!(
        of_call(&parsed, &too_long).is_empty(),
        "a 65-byte request id was kept"
    );
    let status_calls = parsed
        .iter()
        .filter(|l| {
            l["span"]["method"] == "/openshell.cluster.v1.ClusterAdmin/Status"
                && l["fields"]["message"] == "call finished"
        })
        .count();
    assert!(
        status_calls >= 2,
        "both Status calls logged ({status_calls})"
    );
    Ok(())
}

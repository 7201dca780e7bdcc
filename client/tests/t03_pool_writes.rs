//! Pool writes carry a request id too: a retried create or delete answers
//! with the first outcome, and the client's pool calls work end to end.
//!
//! - given: one `openshell-gateway` (no sandbox driver: records only) and a
//!   scripted supervisor member with free slots
//! - when: a `CreateSandbox` without a sandbox id is sent twice with one
//!   request id; the client creates, reads, lists and deletes a named
//!   sandbox, and the delete is sent again with the client's request id
//! - then: the repeated create names the sandbox the first one admitted
//!   (the gateway generated a fresh id for the retry, yet one sandbox
//!   exists) and is marked replayed; the repeated delete is marked replayed
//! - when: a rebalance start without an operation id is sent twice with one
//!   request id, then another start (max_parallel 2) under that request
//!   id, then a request id of 65 bytes
//! - then: the repeat names the first operation, is marked replayed, and
//!   one rebalance exists; the drain is FAILED_PRECONDITION (request id
//!   reused); the long id is INVALID_ARGUMENT naming `request_id`; the
//!   client's own start carries a fresh request id

use std::time::Duration;

use openshell_client::{Client, CreateSandboxRequest};
use proto::pool_admin::start_supervisor_pool_operation_request::Kind;
use proto::pool_admin::{DeleteSandboxRequest, StartSupervisorPoolOperationRequest};
use testkit::gateway::{eventually, Cluster};
use testkit::member::ScriptedMember;
use testkit::supervisor::pool_admin;
use testkit::TestResult;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_pool_write_answers_with_its_first_outcome() -> TestResult {
    // A long heartbeat TTL: the member stays eligible on a loaded machine.
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        "[openshell.gateway.supervisor_pool]\nheartbeat_ttl_ms = 60000\n",
    )?;
    let config = config.display().to_string();
    let cluster = Cluster::start(1, &["--sandbox-driver", "none", "--config", &config]);
    cluster.wait_leader("a leader").await;
    let node = cluster.get(1);
    let _member = ScriptedMember::start(
        "m-1",
        1,
        8,
        vec![node.addr.clone()],
        Duration::from_millis(10),
    );
    let client = Client::builder()
        .endpoints([node.addr.clone()])
        .insecure()
        .deadline(Duration::from_secs(20))
        .build()?;
    eventually("the member is in the pool", || async {
        let status = client.pool_status().await?;
        if status.member_count == 1 && status.members.iter().all(|m| m.eligible) {
            Ok(())
        } else {
            Err("no eligible member yet".into())
        }
    })
    .await;

    eprintln!("--- step: a create without a sandbox id, sent twice with one request id");
    let mut raw = pool_admin(node).await?;
    let create = CreateSandboxRequest {
        material_ref: "demo".into(),
        request_id: "create-1".into(),
        ..CreateSandboxRequest::default()
    };
    let first = raw.create_sandbox(create.clone()).await?;
    assert!(!first.metadata().contains_key(proto::metadata::REPLAYED));
    let again = raw.create_sandbox(create).await?;
    assert!(again.metadata().contains_key(proto::metadata::REPLAYED));
    assert_eq!(again.get_ref().id, first.get_ref().id, "the first sandbox");
    assert_eq!(client.list_sandboxes().await?.len(), 1, "applied once");

    eprintln!("--- step: the client creates, reads, lists and deletes a named sandbox");
    let created = client
        .create_sandbox(CreateSandboxRequest {
            sandbox_id: "sb-named".into(),
            material_ref: "demo".into(),
            ..CreateSandboxRequest::default()
        })
        .await?;
    assert_eq!(created.value.id, "sb-named");
    assert!(!created.replayed && created.attempts == 1);
    assert!(client.get_sandbox("sb-named").await?.is_some());
    assert!(client.get_sandbox("sb-absent").await?.is_none());
    assert_eq!(client.list_sandboxes().await?.len(), 2);
    let deleted = client.delete_sandbox("sb-named").await?;
    assert!(!deleted.replayed);
    let retried = raw
        .delete_sandbox(DeleteSandboxRequest {
            sandbox_id: "sb-named".into(),
            request_id: deleted.request_id.clone(),
        })
        .await?;
    assert!(retried.metadata().contains_key(proto::metadata::REPLAYED));
    assert_eq!(retried.get_ref().generation, deleted.value.generation);

    eprintln!(
        "--- step: a rebalance start without an operation id, sent twice with one request id"
    );
    let start = StartSupervisorPoolOperationRequest {
        operation_id: String::new(),
        kind: Some(Kind::Rebalance(true)),
        max_parallel: 1,
        request_id: "rebalance-1".into(),
    };
    let first = raw.start_supervisor_pool_operation(start.clone()).await?;
    assert!(!first.metadata().contains_key(proto::metadata::REPLAYED));
    let again = raw.start_supervisor_pool_operation(start.clone()).await?;
    assert!(again.metadata().contains_key(proto::metadata::REPLAYED));
    assert_eq!(
        again.get_ref().id,
        first.get_ref().id,
        "the first operation"
    );
    let operations = client.pool_status().await?.operations;
    assert_eq!(
        operations.iter().filter(|o| o.kind == "rebalance").count(),
        1,
        "started once: {operations:?}"
    );
    let other = raw
        .start_supervisor_pool_operation(StartSupervisorPoolOperationRequest {
            max_parallel: 2,
            ..start.clone()
        })
        .await
        .expect_err("another start under the same request id");
    assert_eq!(other.code(), tonic::Code::FailedPrecondition, "{other:?}");
    assert!(
        other
            .metadata()
            .contains_key(proto::metadata::REQUEST_ID_REUSED),
        "refused as a reused request id: {other:?}"
    );
    let too_long = raw
        .start_supervisor_pool_operation(StartSupervisorPoolOperationRequest {
            request_id: "r".repeat(65),
            ..start
        })
        .await
        .expect_err("a request id over 64 bytes");
    assert_eq!(too_long.code(), tonic::Code::InvalidArgument);
    assert!(too_long.message().contains("request_id"), "{too_long:?}");

    eprintln!("--- step: the client's start carries a request id of its own");
    let drain = client
        .start_operation(openshell_client::admin::OperationKind::Rebalance(true), 1)
        .await?;
    assert!(!drain.replayed && !drain.request_id.is_empty());
    assert_eq!(drain.value.kind, "rebalance");
    assert_ne!(drain.value.id, first.get_ref().id, "a second operation");
    Ok(())
}

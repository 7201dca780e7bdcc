//! A request id names one write (issue 32, item 2): another write reusing
//! it is refused with a typed error and never acknowledged; the retry of
//! the first write still replays; both survive a snapshot and a restart of
//! every gateway.
//!
//! - given: three `openshell-gateway` processes (no sandbox driver: pool
//!   records only) and a scripted supervisor member with free slots
//! - when: `Put{a, R}` goes to the leader, then `Put{b, R}`, `Put{a with
//!   another payload, R}` and `Delete{a, R}` go to a follower (forwarded);
//!   `CreateSandbox{sb-1, R2}`, then `CreateSandbox{sb-2, R2}`,
//!   `DeleteSandbox{sb-1, R2}` and `CreateSandbox{.., R}`; the Rust client
//!   creates a sandbox under R2
//! - then: each reuse is `FAILED_PRECONDITION` carrying
//!   `x-openshell-request-id-reused` = the first write's log index (never
//!   OK, never `INTERNAL`), and nothing it asked for happened (no `b`, `a`
//!   keeps its payload and exists, no `sb-2`, `sb-1` not deleting); the
//!   retries of `Put{a, R}` and `CreateSandbox{sb-1, R2}` replay their
//!   first outcome; the client returns `Error::RequestIdReused` at once
//!   (one attempt, no retry)
//! - when: a snapshot is taken, then every gateway is killed (`kill -9`)
//!   and restarted
//! - then: the same reuse is still refused and the same retry still
//!   replays (the fingerprints are replicated state, in the snapshot and
//!   the log)

use std::time::{Duration, Instant};

use openshell_client::{Client, CreateSandboxRequest, Error};
use proto::cluster::TriggerSnapshotRequest;
use proto::objects::object_store_client::ObjectStoreClient;
use proto::objects::{
    precondition, DeleteRequest, GetRequest, Object, Precondition, PutRequest, PutResponse,
};
use proto::pool_admin::{DeleteSandboxRequest, GetSandboxRequest};
use proto::pool_types::SandboxPhase;
use testkit::gateway::{eventually, Cluster, Gateway};
use testkit::member::ScriptedMember;
use testkit::supervisor::pool_admin;
use testkit::TestResult;
use tonic::transport::Channel;
use tonic::{Code, Status};

fn put(id: &str, value: &str, request_id: &str) -> PutRequest {
    PutRequest {
        object: Some(Object {
            r#type: "test".into(),
            id: id.into(),
            payload: value.as_bytes().to_vec(),
            ..Object::default()
        }),
        precondition: Some(Precondition {
            kind: Some(precondition::Kind::Unconditional(true)),
        }),
        request_id: request_id.into(),
    }
}

fn create(sandbox: &str, request_id: &str) -> CreateSandboxRequest {
    CreateSandboxRequest {
        sandbox_id: sandbox.into(),
        material_ref: "demo".into(),
        request_id: request_id.into(),
        ..CreateSandboxRequest::default()
    }
}

/// Asserts `status` refuses a reused id whose first write applied at
/// `first`, saying so in words.
fn assert_reused(what: &str, status: Status, first: u64) {
    assert_eq!(
        status.code(),
        Code::FailedPrecondition,
        "{what}: {status:?}"
    );
    let index = status
        .metadata()
        .get(proto::metadata::REQUEST_ID_REUSED)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    assert_eq!(index, Some(first), "{what}: {status:?}");
    assert!(
        status.message().contains("already used for another write"),
        "{what}: {}",
        status.message()
    );
}

async fn objects(node: &Gateway) -> TestResult<ObjectStoreClient<Channel>> {
    Ok(ObjectStoreClient::new(node.channel().await?))
}

/// The payload of `test/<id>` (linearizable), None when absent.
async fn payload(node: &Gateway, id: &str) -> TestResult<Option<Vec<u8>>> {
    let got = objects(node)
        .await?
        .get(GetRequest {
            r#type: "test".into(),
            id: id.into(),
            stale: false,
        })
        .await;
    match got {
        Ok(reply) => Ok(reply.into_inner().object.map(|o| o.payload)),
        Err(status) if status.code() == Code::NotFound => Ok(None),
        Err(status) => Err(status.into()),
    }
}

/// The follower of `cluster` other than `leader` with the lowest id.
fn follower(cluster: &Cluster, leader: u64) -> &Gateway {
    cluster.get(if leader == 1 { 2 } else { 1 })
}

/// The object-store reuses and retries, checked against a cluster whose
/// leader is `leader`; `first` is the log index of `Put{a, R}`.
async fn check_object_reuse(cluster: &Cluster, leader: u64, first: u64) -> TestResult {
    let via = follower(cluster, leader);
    let mut raw = objects(via).await?;
    for (what, request) in [
        ("Put{b, R}", put("b", "two", "R")),
        ("Put{a with another payload, R}", put("a", "other", "R")),
    ] {
        let status = raw.put(request).await.expect_err(what);
        assert_reused(what, status, first);
    }
    let delete = DeleteRequest {
        r#type: "test".into(),
        id: "a".into(),
        precondition: None,
        request_id: "R".into(),
    };
    let status = raw.delete(delete).await.expect_err("Delete{a, R}");
    assert_reused("Delete{a, R}", status, first);
    let leader_node = cluster.get(leader);
    assert_eq!(
        payload(leader_node, "b").await?,
        None,
        "b was never written"
    );
    assert_eq!(
        payload(leader_node, "a").await?,
        Some(b"one".to_vec()),
        "a keeps its first payload and was not deleted"
    );
    let retry: PutResponse = raw.put(put("a", "one", "R")).await?.into_inner();
    assert!(retry.replayed, "the retry of Put{{a, R}} replays");
    assert_eq!(retry.log_index, first);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_request_id_is_refused_and_a_retry_replays() -> TestResult {
    // A long heartbeat TTL: the member stays eligible on a loaded machine.
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        "[openshell.gateway.supervisor_pool]\nheartbeat_ttl_ms = 60000\n",
    )?;
    let config = config.display().to_string();
    let mut cluster = Cluster::start(3, &["--sandbox-driver", "none", "--config", &config]);
    let leader = cluster.wait_leader("bootstrap").await;
    let gateways: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
    let _member = ScriptedMember::start("m-1", 1, 8, gateways.clone(), Duration::from_millis(10));
    let client = Client::builder()
        .endpoints(gateways.clone())
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

    eprintln!("--- step: Put{{a, R}} on the leader, then other writes under R on a follower");
    let first = eventually("Put{a, R}", || async {
        Ok(objects(cluster.get(leader))
            .await?
            .put(put("a", "one", "R"))
            .await?
            .into_inner())
    })
    .await;
    assert!(!first.replayed);
    let put_index = first.log_index;
    check_object_reuse(&cluster, leader, put_index).await?;

    eprintln!("--- step: CreateSandbox{{sb-1, R2}}, then other pool writes under R2 and R");
    let mut pool = pool_admin(follower(&cluster, leader)).await?;
    let created = pool.create_sandbox(create("sb-1", "R2")).await?;
    assert!(!created.metadata().contains_key(proto::metadata::REPLAYED));
    let reader = pool.clone();
    let read = |id: &str| {
        let mut pool = reader.clone();
        let request = GetSandboxRequest {
            sandbox_id: id.into(),
            stale: false,
        };
        async move { pool.get_sandbox(request).await }
    };
    read("sb-1").await?;
    let status = pool
        .create_sandbox(create("sb-2", "R2"))
        .await
        .expect_err("CreateSandbox{sb-2, R2}");
    let create_first = status
        .metadata()
        .get(proto::metadata::REQUEST_ID_REUSED)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| format!("CreateSandbox{{sb-2, R2}}: {status:?}"))?;
    assert!(create_first > put_index, "R2's first write came after R's");
    assert_reused("CreateSandbox{sb-2, R2}", status, create_first);
    let delete = DeleteSandboxRequest {
        sandbox_id: "sb-1".into(),
        request_id: "R2".into(),
    };
    let status = pool
        .delete_sandbox(delete)
        .await
        .expect_err("DeleteSandbox{sb-1, R2}");
    assert_reused("DeleteSandbox{sb-1, R2}", status, create_first);
    let status = pool
        .create_sandbox(create("sb-3", "R"))
        .await
        .expect_err("CreateSandbox{sb-3, R}");
    assert_reused("CreateSandbox{sb-3, R}", status, put_index);
    assert_eq!(
        read("sb-2").await.map(|_| ()).map_err(|s| s.code()),
        Err(Code::NotFound),
        "sb-2 was never created"
    );
    let phase = SandboxPhase::try_from(read("sb-1").await?.into_inner().phase)?;
    assert!(
        matches!(phase, SandboxPhase::Admitting | SandboxPhase::Assigned),
        "sb-1 is {phase:?}: the refused delete stopped it"
    );
    let retry = pool.create_sandbox(create("sb-1", "R2")).await?;
    assert!(retry.metadata().contains_key(proto::metadata::REPLAYED));
    assert_eq!(retry.get_ref().id, "sb-1");

    eprintln!("--- step: the Rust client surfaces the reuse as Error::RequestIdReused, at once");
    let started = Instant::now();
    let err = client
        .create_sandbox(create("sb-4", "R2"))
        .await
        .expect_err("the client's create under R2");
    assert!(
        matches!(err, Error::RequestIdReused { first_log_index, .. } if first_log_index == create_first),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "not retried: {:?}",
        started.elapsed()
    );

    eprintln!("--- step: a snapshot, then kill -9 and restart of every gateway");
    cluster
        .get(leader)
        .admin()
        .await?
        .trigger_snapshot(TriggerSnapshotRequest {})
        .await?;
    for id in 1..=3 {
        cluster.node(id).kill9();
    }
    for id in 1..=3 {
        cluster.node(id).start();
    }
    let leader = cluster.wait_leader("after the restart").await;
    eventually("the cluster serves reads again", || async {
        payload(cluster.get(leader), "a").await.map(|_| ())
    })
    .await;

    eprintln!("--- step: the same reuses are refused and the same retries replay");
    check_object_reuse(&cluster, leader, put_index).await?;
    let mut pool = pool_admin(follower(&cluster, leader)).await?;
    let status = pool
        .create_sandbox(create("sb-2", "R2"))
        .await
        .expect_err("CreateSandbox{sb-2, R2} after the restart");
    assert_reused(
        "CreateSandbox{sb-2, R2} after the restart",
        status,
        create_first,
    );
    let retry = pool.create_sandbox(create("sb-1", "R2")).await?;
    assert!(retry.metadata().contains_key(proto::metadata::REPLAYED));
    Ok(())
}

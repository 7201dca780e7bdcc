//! The request-id rules on the wire, and the client's failover and
//! no-retry rules, against one real gateway.
//!
//! - given: one `openshell-gateway` process
//! - when: raw puts and deletes carry malformed, fresh and repeated request
//!   ids; the client is given a dead endpoint first; a compare-and-swap
//!   names a stale version
//! - then: a malformed id is `INVALID_ARGUMENT` naming `request_id`; a
//!   repeated id is answered with the first outcome (`replayed`, the same
//!   version and log index) and changes nothing; the client fails over past
//!   the dead endpoint; a conflict is returned at once as `Error::Conflict`

use std::time::{Duration, Instant};

use openshell_client::{Client, Condition, Error, Object};
use proto::objects::object_store_client::ObjectStoreClient;
use proto::objects::{precondition, DeleteRequest, Object as PbObject, Precondition, PutRequest};
use testkit::gateway::{eventually, Cluster};
use testkit::ports::free_port;
use testkit::TestResult;
use tonic::Code;

fn put_request(id: &str, value: &str, request_id: &str) -> PutRequest {
    PutRequest {
        object: Some(PbObject {
            r#type: "test".into(),
            id: id.into(),
            payload: value.as_bytes().to_vec(),
            ..PbObject::default()
        }),
        precondition: Some(Precondition {
            kind: Some(precondition::Kind::Unconditional(true)),
        }),
        request_id: request_id.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_ids_are_checked_replayed_and_retried_only_when_unknown() -> TestResult {
    let cluster = Cluster::start(1, &[]);
    cluster.wait_leader("bootstrap").await;
    let gateway = cluster.get(1);
    let mut raw = eventually("connect", || async {
        Ok(ObjectStoreClient::new(gateway.channel().await?))
    })
    .await;

    eprintln!("--- step: a malformed request id is refused, naming the field");
    for bad in ["has space".to_string(), "x".repeat(65), "tab\t".into()] {
        let status = raw
            .put(put_request("a", "v", &bad))
            .await
            .expect_err("malformed id");
        assert_eq!(status.code(), Code::InvalidArgument, "{bad:?}: {status}");
        assert!(status.message().contains("request_id"), "{status}");
    }

    eprintln!("--- step: the same id twice applies once and replays the outcome");
    let first = eventually("first put", || {
        let mut raw = raw.clone();
        async move {
            Ok(raw
                .put(put_request("a", "one", "req-1"))
                .await?
                .into_inner())
        }
    })
    .await;
    assert!(!first.replayed);
    let again = raw
        .put(put_request("a", "one", "req-1"))
        .await?
        .into_inner();
    assert!(again.replayed);
    assert_eq!(again.log_index, first.log_index);
    assert_eq!(again.object, first.object);
    let version = first.object.as_ref().map(|o| o.resource_version);
    let client = Client::builder()
        .endpoints([format!("127.0.0.1:{}", free_port()), gateway.addr.clone()])
        .insecure()
        .deadline(Duration::from_secs(20))
        .build()?;
    let stored = client.get("test", "a").await?.ok_or("object gone")?;
    assert_eq!(Some(stored.resource_version), version, "applied once");

    eprintln!("--- step: a repeated delete id answers the first delete, not NOT_FOUND");
    let delete = || DeleteRequest {
        r#type: "test".into(),
        id: "a".into(),
        precondition: None,
        request_id: "del-1".into(),
    };
    let deleted = raw.delete(delete()).await?.into_inner();
    let replayed = raw.delete(delete()).await?.into_inner();
    assert!(replayed.replayed && !deleted.replayed);
    assert_eq!(replayed.revision, deleted.revision);

    eprintln!("--- step: the client fails over past a dead first endpoint");
    let object = Object {
        r#type: "test".into(),
        id: "b".into(),
        payload: b"v".to_vec(),
        ..Object::default()
    };
    // A fresh client: the first one now starts at the endpoint that
    // answered it last.
    let client = Client::builder()
        .endpoints([format!("127.0.0.1:{}", free_port()), gateway.addr.clone()])
        .insecure()
        .deadline(Duration::from_secs(20))
        .build()?;
    let created = client.put(object.clone(), Condition::MustCreate).await?;
    assert_eq!(created.attempts, 2, "the dead endpoint, then the gateway");
    assert_eq!(created.endpoint, gateway.addr);
    assert_eq!(created.request_id.len(), 32);

    eprintln!("--- step: a stale compare-and-swap is a conflict, returned at once");
    let version = created
        .value
        .object
        .map(|o| o.resource_version)
        .unwrap_or(0);
    let started = Instant::now();
    let err = client
        .put(object, Condition::MatchResourceVersion(version + 100))
        .await
        .expect_err("stale version");
    assert!(
        matches!(err, Error::Conflict { current_resource_version, .. } if current_resource_version == version),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(2), "not retried");
    Ok(())
}

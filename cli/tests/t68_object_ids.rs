//! Object-store keys are bounded input (issue 13, "Bounded input"): an
//! object's `type` and `id` follow the identifier rule of `proto::ids`,
//! checked at the API and again before a write is proposed.
//!
//! - given: one gateway (bearer tokens off), one object `test/ok`
//! - when: put / get / delete name a `type` or `id` of `../x`, `x/../../y`,
//!   `..`, `a b`, `""` or 300 characters through `ObjectStore`; and the same
//!   put is forwarded to the leader over the raft transport (skipping the
//!   API, as a follower would)
//! - then: every call is refused with `INVALID_ARGUMENT` naming the field;
//!   the store holds only `test/ok`; the gateway keeps serving

mod common;

use prost::Message;
use proto::gateway::{log_command, LogCommand};
use proto::objects::{
    object_command, precondition, DeleteRequest, GetRequest, ObjectCommand, Precondition,
    PutRequest,
};
use proto::raft::raft_transport_client::RaftTransportClient;
use proto::raft::ForwardRequest;
use testkit::gateway::{dump, object, put, Cluster};
use testkit::TestResult;

fn put_request(object_type: &str, id: &str) -> PutRequest {
    let mut o = object(id, "v");
    o.r#type = object_type.into();
    PutRequest {
        object: Some(o),
        precondition: Some(Precondition {
            kind: Some(precondition::Kind::Unconditional(true)),
        }),
        request_id: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_keys_outside_the_rule_are_refused() -> TestResult {
    let cluster = Cluster::start(1, &[]);
    cluster.wait_leader("bootstrap").await;
    let node = cluster.get(1);
    put(node, "ok", "v").await?;
    let mut objects = node.objects().await?;
    let long = "x".repeat(300);
    let bad = ["../x", "x/../../y", "..", "a b", "", long.as_str()];

    eprintln!("--- step: bad ids and types through ObjectStore");
    for key in bad {
        for (object_type, id, field) in [("test", key, "invalid id"), (key, "k", "invalid type")] {
            let what = format!("type {object_type:?} id {id:?}");
            let invalid = |r: Result<(), tonic::Status>, call: &str| {
                let status = r.err().unwrap_or_else(|| panic!("{call} {what} accepted"));
                assert_eq!(status.code(), tonic::Code::InvalidArgument, "{call} {what}");
                assert!(
                    status.message().contains(field),
                    "{call} {what}: {status:?} does not name {field}"
                );
            };
            let r = objects.put(put_request(object_type, id)).await;
            invalid(r.map(|_| ()), "put");
            let r = objects
                .get(GetRequest {
                    r#type: object_type.into(),
                    id: id.into(),
                    stale: false,
                })
                .await;
            invalid(r.map(|_| ()), "get");
            let r = objects
                .delete(DeleteRequest {
                    r#type: object_type.into(),
                    id: id.into(),
                    precondition: None,
                    request_id: String::new(),
                })
                .await;
            invalid(r.map(|_| ()), "delete");
        }
    }

    eprintln!("--- step: the same put forwarded to the leader, skipping the API");
    let channel = testkit::gateway::test_channel(&node.addr, 2000).await?;
    // An --insecure gateway serves the raft transport on its one port and
    // checks only the cluster id (as t30_bad_input).
    let mut raft = RaftTransportClient::new(channel);
    for key in ["../x", long.as_str()] {
        let command = LogCommand {
            command: Some(log_command::Command::Objects(ObjectCommand {
                op: Some(object_command::Op::Put(put_request("test", key))),
            })),
            request_id: String::new(),
            request_fingerprint: Vec::new(),
        };
        let refused = raft
            .forward(ForwardRequest {
                command: command.encode_to_vec(),
                cluster_id: "test".into(),
                target_node_id: 0,
            })
            .await
            .err()
            .unwrap_or_else(|| panic!("forwarded put of {key:?} accepted"));
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
        assert!(refused.message().contains("invalid id"), "{refused:?}");
    }

    eprintln!("--- step: only `ok` is stored; the gateway keeps serving");
    put(node, "after", "v").await?;
    let keys: Vec<String> = dump(node, false)
        .await?
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    assert_eq!(keys, ["after", "ok"], "{keys:?}");
    Ok(())
}

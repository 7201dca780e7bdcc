//! The limits table of docs/operations.md is the real one (issue 32 item 5):
//! read from the page, each limit a request can reach is checked at its
//! edge through a real gateway, as `cli/tests/t73_json_contract.rs` checks
//! docs/cli-json.md.
//!
//! - given: one gateway (no sandbox driver) with one scripted member
//! - then: for every row of the table's whose limit a request reaches, the
//!   documented value is accepted and one more is refused with
//!   `INVALID_ARGUMENT` (or, for the request size, `OUT_OF_RANGE`) naming
//!   the field; before this test, `material_ref` was documented 64 KiB,
//!   refused above 1,024 bytes and accepted by PoolAdmin up to 65,536, and
//!   operation ids were documented 1..=128 and accepted up to 1,024
//! - then: for every other row the documented value equals the constant
//!   and the test that covers the behaviour is named here; a row this test
//!   does not know fails it

use std::collections::BTreeMap;
use std::time::Duration;

use prost::Message;
use proto::objects::object_store_client::ObjectStoreClient;
use proto::objects::{precondition, Object, Precondition, PutRequest, WatchRequest};
use proto::pool_admin::pool_admin_client::PoolAdminClient;
use proto::pool_admin::{
    start_supervisor_pool_operation_request, CreateSandboxRequest, GetSupervisorPoolStatusRequest,
    ListSandboxesRequest, StartSupervisorPoolOperationRequest, WatchPoolRequest,
};
use proto::supervisor_host::{supervisor_message, HostHello, SupervisorMessage};
use testkit::gateway::*;
use testkit::member::{attach, ScriptedMember};
use testkit::supervisor::pool_admin;
use testkit::TestResult;
use tonic::Code;

/// The rows of the `## Limits` table: first cell -> (limit cell, row).
fn limits_table() -> BTreeMap<String, (String, String)> {
    let page = std::fs::read_to_string(testkit::bins::workspace_root().join("docs/operations.md"))
        .unwrap_or_else(|e| panic!("docs/operations.md: {e}"));
    let mut rows = BTreeMap::new();
    let mut inside = false;
    for line in page.lines() {
        if line.starts_with("## ") {
            inside = line == "## Limits";
            continue;
        }
        if !inside || !line.starts_with("| ") || line.starts_with("| what ") {
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        if cells.len() < 4 || cells[0].starts_with("---") {
            continue;
        }
        rows.insert(
            cells[0].to_string(),
            (cells[1].to_string(), line.to_string()),
        );
    }
    assert!(rows.len() > 10, "no limits table found: {rows:?}");
    rows
}

/// Every integer in `text`, in order.
fn numbers(text: &str) -> Vec<u64> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter(|t| !t.is_empty())
        .filter_map(|t| t.parse().ok())
        .collect()
}

/// The limit a cell states, in bytes (or units): the upper bound of an
/// `a..=b` range, else the first number times its unit.
fn limit(cell: &str) -> u64 {
    if let Some((_, upper)) = cell.split_once("..=") {
        return numbers(upper)[0];
    }
    let n = numbers(cell)[0];
    let unit = cell
        .split_once(&n.to_string())
        .map(|(_, rest)| rest.trim_start())
        .unwrap_or_default();
    match unit.split_whitespace().next().unwrap_or_default() {
        "KiB" => n * 1024,
        "MiB" => n * 1024 * 1024,
        "GiB" => n * 1024 * 1024 * 1024,
        _ => n,
    }
}

/// Asserts `at` (the limit) is not refused for its size and `over` (one
/// more) is refused with `code` naming `field`.
fn edge<T: std::fmt::Debug>(
    what: &str,
    at: Result<T, tonic::Status>,
    over: Result<T, tonic::Status>,
    code: Code,
    field: &str,
) {
    if let Err(s) = &at {
        panic!("{what}: the documented limit is refused: {s:?}");
    }
    match over {
        Ok(v) => panic!("{what}: one over the limit is accepted: {v:?}"),
        Err(s) => {
            assert_eq!(s.code(), code, "{what}: {s:?}");
            assert!(s.message().contains(field), "{what}: {s:?}");
        }
    }
}

fn put_request(object: Object, request_id: &str) -> PutRequest {
    PutRequest {
        object: Some(object),
        precondition: Some(Precondition {
            kind: Some(precondition::Kind::Unconditional(true)),
        }),
        request_id: request_id.into(),
    }
}

/// An object of the test type with `f` applied.
fn obj(id: &str, f: impl FnOnce(&mut Object)) -> Object {
    let mut o = object(id, "v");
    f(&mut o);
    o
}

async fn put(node: &Gateway, request: PutRequest) -> Result<(), tonic::Status> {
    let channel = test_channel(&node.addr, 2000)
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    ObjectStoreClient::new(channel)
        .max_encoding_message_size(8 * 1024 * 1024)
        .put(request)
        .await
        .map(|_| ())
}

async fn admin(node: &Gateway) -> PoolAdminClient<tonic::transport::Channel> {
    pool_admin(node)
        .await
        .unwrap_or_else(|e| panic!("pool admin: {e}"))
}

async fn create(
    node: &Gateway,
    id: &str,
    launch: &str,
    material: &str,
) -> Result<(), tonic::Status> {
    admin(node)
        .await
        .create_sandbox(CreateSandboxRequest {
            sandbox_id: id.into(),
            launch_id: launch.into(),
            material_ref: material.into(),
            ..Default::default()
        })
        .await
        .map(|_| ())
}

async fn hello(node: &Gateway, f: impl FnOnce(&mut HostHello)) -> Result<(), tonic::Status> {
    let mut h = HostHello {
        member_id: "edge".into(),
        member_uid: "uid-edge".into(),
        advertise_address: "10.0.0.9:1".into(),
        capacity: 1,
        process_id: 7,
        ..HostHello::default()
    };
    f(&mut h);
    let message = SupervisorMessage {
        message: Some(supervisor_message::Message::Hello(h)),
    };
    attach(&node.addr, Duration::from_secs(2), message, 8)
        .await
        .map(drop)
}

/// A put whose encoded request is exactly `len` bytes.
fn put_of_encoded_len(len: usize) -> PutRequest {
    for pad in 0..16 {
        let mut payload = len.saturating_sub(64);
        loop {
            let request = put_request(
                obj(&format!("big{}", "x".repeat(pad)), |o| {
                    o.payload = vec![b'x'; payload]
                }),
                "",
            );
            match request.encoded_len().cmp(&len) {
                std::cmp::Ordering::Equal => return request,
                std::cmp::Ordering::Less => payload += 1,
                std::cmp::Ordering::Greater => break,
            }
        }
    }
    panic!("no put encodes to {len} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_limit_is_the_real_one() -> TestResult {
    let rows = limits_table();
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
        100,
        vec![node.addr.clone()],
        Duration::from_millis(10),
    );
    eventually("the member is in the pool", || async {
        let status = pool_admin(node)
            .await?
            .get_supervisor_pool_status(GetSupervisorPoolStatusRequest::default())
            .await?
            .into_inner();
        if status.member_count == 1 && status.members.iter().all(|m| m.eligible) {
            Ok(())
        } else {
            Err("no member yet".into())
        }
    })
    .await;

    let mut checked = Vec::new();
    for (what, (cell, row)) in &rows {
        // A cell without a number (`page_token`) states no size.
        let n = if numbers(cell).is_empty() {
            0
        } else {
            limit(cell)
        };
        let n_us = usize::try_from(n)?;
        eprintln!("--- step: {what}: {cell}");
        match what.as_str() {
            "object `payload`" => edge(
                what,
                put(
                    node,
                    put_request(obj("p", |o| o.payload = vec![b'x'; n_us]), ""),
                )
                .await,
                put(
                    node,
                    put_request(obj("p", |o| o.payload = vec![b'x'; n_us + 1]), ""),
                )
                .await,
                Code::InvalidArgument,
                "payload",
            ),
            "object `id`, `type`" => {
                edge(
                    what,
                    put(node, put_request(object(&"i".repeat(n_us), "v"), "")).await,
                    put(node, put_request(object(&"i".repeat(n_us + 1), "v"), "")).await,
                    Code::InvalidArgument,
                    "id",
                );
                edge(
                    what,
                    put(
                        node,
                        put_request(obj("t", |o| o.r#type = "t".repeat(n_us)), ""),
                    )
                    .await,
                    put(
                        node,
                        put_request(obj("t", |o| o.r#type = "t".repeat(n_us + 1)), ""),
                    )
                    .await,
                    Code::InvalidArgument,
                    "type",
                );
            }
            "object `name`, `scope`, `version`, `status`" => {
                for field in ["name", "scope", "version", "status"] {
                    let with = |len: usize| {
                        obj("f", |o| {
                            let v = "f".repeat(len);
                            match field {
                                "name" => o.name = v,
                                "scope" => o.scope = v,
                                "version" => o.version = v,
                                _ => o.status = v,
                            }
                        })
                    };
                    edge(
                        what,
                        put(node, put_request(with(n_us), "")).await,
                        put(node, put_request(with(n_us + 1), "")).await,
                        Code::InvalidArgument,
                        field,
                    );
                }
            }
            "any gRPC request" => {
                // At the limit the request is decoded (and refused for its
                // payload); one byte more is refused before decoding.
                let at = put(node, put_of_encoded_len(n_us)).await;
                let at = match at {
                    Err(s)
                        if s.code() == Code::InvalidArgument && s.message().contains("payload") =>
                    {
                        Ok(())
                    }
                    other => Err(tonic::Status::internal(format!("{other:?}"))),
                };
                let over = put(node, put_of_encoded_len(n_us + 1)).await;
                let over = over.map_err(|s| match s.code() {
                    Code::ResourceExhausted => tonic::Status::out_of_range(s.message().to_string()),
                    _ => s,
                });
                edge(what, at, over, Code::OutOfRange, "");
            }
            "one command (a write)" => {
                assert_eq!(n_us, raft_store::batcher::MAX_COMMAND_BYTES, "{row}");
                // No request reaches it: the largest put and launch the
                // field limits allow stay under it (1 KiB for the framing).
                let field = |name: &str| limit(&rows[name].0) as usize;
                let put_max = field("object `payload`")
                    + 2 * field("object `id`, `type`")
                    + 4 * field("object `name`, `scope`, `version`, `status`");
                let launch_max = field("`material_ref` (CreateSandbox)")
                    + field("`launch_id` (CreateSandbox)")
                    + field("`sandbox_id`, `drain_member`");
                let request_id = field("`request_id` (Put, Delete, CreateSandbox, DeleteSandbox, StartSupervisorPoolOperation)");
                for largest in [put_max, launch_max] {
                    assert!(largest + request_id + 1024 < n_us, "{largest}: {row}");
                }
            }
            "`request_id` (Put, Delete, CreateSandbox, DeleteSandbox, StartSupervisorPoolOperation)" => edge(
                what,
                put(node, put_request(object("r", "v"), &"r".repeat(n_us))).await,
                put(node, put_request(object("r", "v"), &"s".repeat(n_us + 1))).await,
                Code::InvalidArgument,
                "request_id",
            ),
            "`material_ref` (CreateSandbox)" => edge(
                what,
                create(node, "mat-at", "", &"m".repeat(n_us)).await,
                create(node, "mat-over", "", &"m".repeat(n_us + 1)).await,
                Code::InvalidArgument,
                "material_ref",
            ),
            "`launch_id` (CreateSandbox)" => edge(
                what,
                create(node, "launch-at", &"l".repeat(n_us), "demo").await,
                create(node, "launch-over", &"k".repeat(n_us + 1), "demo").await,
                Code::InvalidArgument,
                "launch_id",
            ),
            "`sandbox_id`, `drain_member`" => {
                edge(
                    what,
                    create(node, &"s".repeat(n_us), "", "demo").await,
                    create(node, &"s".repeat(n_us + 1), "", "demo").await,
                    Code::InvalidArgument,
                    "sandbox_id",
                );
                let drain = |member: String| StartSupervisorPoolOperationRequest {
                    request_id: String::new(),
                    kind: Some(start_supervisor_pool_operation_request::Kind::DrainMember(
                        member,
                    )),
                    ..Default::default()
                };
                // A member that does not exist: refused as unknown, not for
                // its length.
                let at = admin(node)
                    .await
                    .start_supervisor_pool_operation(drain("d".repeat(n_us)))
                    .await;
                let at = match at {
                    Err(s) if s.code() == Code::NotFound => Ok(()),
                    other => other.map(drop),
                };
                let over = admin(node)
                    .await
                    .start_supervisor_pool_operation(drain("d".repeat(n_us + 1)))
                    .await
                    .map(drop);
                edge(what, at, over, Code::InvalidArgument, "drain_member");
            }
            "`operation_id` (StartSupervisorPoolOperation)" => {
                let rebalance = |id: String| StartSupervisorPoolOperationRequest {
                    request_id: String::new(),
                    operation_id: id,
                    kind: Some(start_supervisor_pool_operation_request::Kind::Rebalance(
                        true,
                    )),
                    ..Default::default()
                };
                edge(
                    what,
                    admin(node)
                        .await
                        .start_supervisor_pool_operation(rebalance("o".repeat(n_us)))
                        .await
                        .map(drop),
                    admin(node)
                        .await
                        .start_supervisor_pool_operation(rebalance("p".repeat(n_us + 1)))
                        .await
                        .map(drop),
                    Code::InvalidArgument,
                    "operation_id",
                );
            }
            "`HostHello.member_id`" => edge(
                what,
                hello(node, |h| h.member_id = "h".repeat(n_us)).await,
                hello(node, |h| h.member_id = "h".repeat(n_us + 1)).await,
                Code::InvalidArgument,
                "HostHello.member_id",
            ),
            "`HostHello.member_uid`, `advertise_address`" => {
                edge(
                    what,
                    hello(node, |h| {
                        h.member_id = "uid-edge".into();
                        h.member_uid = "u".repeat(n_us);
                    })
                    .await,
                    hello(node, |h| h.member_uid = "u".repeat(n_us + 1)).await,
                    Code::InvalidArgument,
                    "member_uid",
                );
                edge(
                    what,
                    hello(node, |h| {
                        h.member_id = "addr-edge".into();
                        h.advertise_address = "a".repeat(n_us);
                    })
                    .await,
                    hello(node, |h| h.advertise_address = "a".repeat(n_us + 1)).await,
                    Code::InvalidArgument,
                    "advertise_address",
                );
            }
            "`page_size` (ListSandboxes, GetSupervisorPoolStatus)" => {
                let list = |page_size: u32| ListSandboxesRequest {
                    page_size,
                    ..Default::default()
                };
                let n32 = u32::try_from(n)?;
                edge(
                    what,
                    admin(node).await.list_sandboxes(list(n32)).await.map(drop),
                    admin(node)
                        .await
                        .list_sandboxes(list(n32 + 1))
                        .await
                        .map(drop),
                    Code::InvalidArgument,
                    "page_size",
                );
            }
            // Limits no single request reaches here: the value must be the
            // constant, the behaviour is another test's.
            "`SandboxReport.status`" => {
                // t101_report_status_limit: over it, dropped and logged.
                assert_eq!(
                    n_us,
                    gateway_plugin::convert::from_proto::MAX_REPORT_STATUS_BYTES,
                    "{row}"
                );
            }
            "TLS connection's first byte" => {
                // cli t82_handshake_causes, proto::tls unit tests.
                assert_eq!(
                    Duration::from_secs(n),
                    proto::tls::FIRST_BYTE_TIMEOUT,
                    "{row}"
                );
            }
            "TLS handshakes running" => {
                let expect = vec![
                    proto::tls::MAX_HANDSHAKES as u64,
                    proto::tls::MAX_HANDSHAKES_PER_ADDRESS as u64,
                ];
                assert_eq!(numbers(cell), expect, "{row}");
            }
            "TLS handshakes started" => {
                // The rate itself: cli t84_handshake_rate.
                let expect = vec![
                    u64::from(proto::tls::HANDSHAKE_RATE_PER_ADDRESS.get()),
                    u64::from(proto::tls::HANDSHAKE_BURST_PER_ADDRESS.get()),
                ];
                assert_eq!(numbers(cell), expect, "{row}");
            }
            "TLS connections pending (accept to established)" => {
                let expect = vec![
                    proto::tls::MAX_PENDING as u64,
                    proto::tls::MAX_PENDING_PER_ADDRESS as u64,
                ];
                assert_eq!(numbers(cell), expect, "{row}");
            }
            "TLS handshake" => {
                assert_eq!(
                    Duration::from_secs(n),
                    proto::tls::HANDSHAKE_TIMEOUT,
                    "{row}"
                );
            }
            "watch `progress_interval_ms` (Watch, WatchPool)" => {
                assert_eq!(numbers(cell), vec![0, 5000, 100, 60000], "{row}");
                let watch = |ms| {
                    let addr = node.addr.clone();
                    async move {
                        let channel = test_channel(&addr, 2000)
                            .await
                            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
                        ObjectStoreClient::new(channel)
                            .watch(WatchRequest {
                                progress_interval_ms: ms,
                                ..WatchRequest::default()
                            })
                            .await
                            .map(drop)
                    }
                };
                edge(what, watch(60_000).await, watch(60_001).await, Code::InvalidArgument, "progress_interval_ms");
                edge(what, watch(100).await, watch(99).await, Code::InvalidArgument, "progress_interval_ms");
                let pool_watch = |ms| async move {
                    admin(node)
                        .await
                        .watch_pool(WatchPoolRequest {
                            progress_interval_ms: ms,
                            ..WatchPoolRequest::default()
                        })
                        .await
                        .map(drop)
                };
                edge(what, pool_watch(60_000).await, pool_watch(60_001).await, Code::InvalidArgument, "progress_interval_ms");
            }
            // The watchers' behaviour: gateway-plugin t121 (history, cut,
            // compacted, responses) and cli t85 (the pool watch).
            "object watchers" => {
                assert_eq!(numbers(cell), vec![gateway_plugin::object_watch::MAX_WATCHERS as u64], "{row}");
            }
            "pool watchers" => {
                assert_eq!(numbers(cell), vec![gateway_plugin::pool_watch::MAX_POOL_WATCHERS as u64], "{row}");
            }
            "watch history" => {
                let n = numbers(cell);
                assert_eq!(n[0], raft_store::object_events::MAX_EVENTS as u64, "{row}");
                assert_eq!(n[1] * 1024 * 1024, raft_store::object_events::MAX_BYTES as u64, "{row}");
            }
            "one watch response" => {
                let n = numbers(cell);
                assert_eq!(n[0], gateway_plugin::object_watch::RESPONSE_EVENTS as u64, "{row}");
                assert_eq!(n[1] * 1024 * 1024, gateway_plugin::object_watch::RESPONSE_BYTES as u64, "{row}");
            }
            "one pool watch change (the first, whole pool)" => {
                assert_eq!(numbers(cell), vec![gateway_plugin::pool_watch::CHUNK_RECORDS as u64], "{row}");
            }
            // Their own tests: the runtime fields are recorded by the
            // leader's launcher only (pool::apply::runtimes unit tests);
            // page tokens t100_pagination; the raft transport t99 and t90
            // (configurable); backups cli t72 and t80.
            "runtime `name`, `address`, `ca_pem`; failure reasons"
            | "`page_token`"
            | "raft transport message"
            | "received snapshot"
            | "backup"
            | "backup header" => {}
            other => panic!(
                "docs/operations.md's limits table has a row this test does not check: {other:?} \
                 ({row}); add its check here"
            ),
        }
        checked.push(what.clone());
    }
    println!("checked {} rows: {checked:?}", checked.len());
    Ok(())
}

//! `ObjectStore.Watch` through a real gateway: what a watch covers, its
//! progress responses, and its bounds (a revision no longer held, a
//! watcher that does not read).
//!
//! - given: one `openshell-gateway` process
//! - when: a watch names an id without a type, or a progress interval out
//!   of range; then: `INVALID_ARGUMENT` naming the field
//! - when: a watch on type `w`, ids starting with `a`, from now, sees puts
//!   of `a1`, `b1`, `a2`, a delete of `a1` and a put of another type;
//!   then: its first response comes at once with the revision it starts
//!   after, and it delivers exactly put `a1`, put `a2`, delete `a1` with
//!   their revisions (the delete carrying the version `a1` had)
//! - when: nothing is written; then: progress responses (no events, the
//!   current revision) arrive at the asked interval
//! - when: a watch asks for a revision three writes ahead; then: it
//!   delivers the writes from that revision on, none before
//! - when: a watcher opens a stream and reads nothing while 800 writes of
//!   30,000 bytes go by (more than the gateway's 16 MiB of history); then:
//!   reading it afterwards yields contiguous events and then
//!   `RESOURCE_EXHAUSTED` with `x-openshell-compacted-revision` (the
//!   gateway never buffered the writes for it); a new watch from revision
//!   1 is `OUT_OF_RANGE` naming the oldest revision held, and one from that
//!   revision is served

use std::time::Duration;

use futures::StreamExt;
use proto::objects::object_store_client::ObjectStoreClient;
use proto::objects::{
    precondition, DeleteRequest, Object, Precondition, PutRequest, WatchEventKind, WatchRequest,
    WatchResponse,
};
use testkit::gateway::*;
use testkit::TestResult;
use tonic::transport::Channel;
use tonic::{Code, Streaming};

fn always() -> Option<Precondition> {
    Some(Precondition {
        kind: Some(precondition::Kind::Unconditional(true)),
    })
}

async fn put_w(
    client: &mut ObjectStoreClient<Channel>,
    t: &str,
    id: &str,
    bytes: usize,
) -> TestResult<u64> {
    let reply = client
        .put(PutRequest {
            object: Some(Object {
                r#type: t.into(),
                id: id.into(),
                payload: vec![b'x'; bytes],
                ..Object::default()
            }),
            precondition: always(),
            request_id: String::new(),
        })
        .await?
        .into_inner();
    Ok(reply.object.map_or(0, |o| o.resource_version))
}

async fn watch(
    client: &mut ObjectStoreClient<Channel>,
    request: WatchRequest,
) -> Result<Streaming<WatchResponse>, tonic::Status> {
    Ok(client.watch(request).await?.into_inner())
}

/// The value of the metric line `name` (with its labels) on `node`.
async fn metric(node: &Gateway, name: &str) -> TestResult<u64> {
    let addr = node.http_addr().ok_or("no --http-listen")?;
    let (code, body) = testkit::supervisor::http_get(&addr, "/metrics").await;
    assert_eq!(code, 200, "/metrics: {body}");
    let value = body
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .ok_or_else(|| format!("no {name} in /metrics"))?;
    Ok(value.trim().parse()?)
}

async fn next(stream: &mut Streaming<WatchResponse>) -> TestResult<WatchResponse> {
    Ok(
        tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .map_err(|_| "no watch response within 10 s")??
            .ok_or("the watch stream ended")?,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_delivers_what_it_covers_reports_progress_and_is_bounded() -> TestResult {
    let cluster = Cluster::start(
        1,
        &[
            "--http-listen",
            &format!("127.0.0.1:{}", testkit::ports::free_port()),
        ],
    );
    cluster.wait_leader("bootstrap").await;
    let node = cluster.get(1);
    let mut client = node
        .objects()
        .await?
        .max_decoding_message_size(4 * 1024 * 1024);
    eventually("a first write", || async {
        put_w(&mut node.objects().await?, "setup", "s", 1).await
    })
    .await;

    eprintln!("--- step: bad requests are refused naming the field");
    for (request, field) in [
        (
            WatchRequest {
                id: "a1".into(),
                ..WatchRequest::default()
            },
            "type",
        ),
        (
            WatchRequest {
                r#type: "w".into(),
                progress_interval_ms: 99,
                ..WatchRequest::default()
            },
            "progress_interval_ms",
        ),
        (
            WatchRequest {
                r#type: "w".into(),
                id: "a1".into(),
                id_prefix: "a".into(),
                ..WatchRequest::default()
            },
            "id_prefix",
        ),
    ] {
        match watch(&mut client, request).await {
            Err(s) => {
                assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
                assert!(s.message().contains(field), "{field}: {s:?}");
            }
            Ok(_) => panic!("a watch with a bad {field} was accepted"),
        }
    }

    eprintln!("--- step: a watch on w/a* from now sees exactly its writes");
    let mut stream = watch(
        &mut client,
        WatchRequest {
            r#type: "w".into(),
            id_prefix: "a".into(),
            progress_interval_ms: 200,
            ..WatchRequest::default()
        },
    )
    .await?;
    let first = next(&mut stream).await?;
    assert!(first.events.is_empty());
    let start = first.revision;
    let a1 = put_w(&mut client, "w", "a1", 3).await?;
    put_w(&mut client, "w", "b1", 3).await?;
    let a2 = put_w(&mut client, "w", "a2", 3).await?;
    let deleted = client
        .delete(DeleteRequest {
            r#type: "w".into(),
            id: "a1".into(),
            precondition: always(),
            request_id: String::new(),
        })
        .await?
        .into_inner();
    let other = put_w(&mut client, "v", "a3", 3).await?;
    assert_eq!(
        a1,
        start + 1,
        "the first response names the revision it starts after"
    );
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let response = next(&mut stream).await?;
        for e in response.events {
            let object = e.object.ok_or("an event without object")?;
            seen.push((
                WatchEventKind::try_from(e.kind)?,
                e.revision,
                object.id,
                object.resource_version,
            ));
        }
    }
    assert_eq!(
        seen,
        vec![
            (WatchEventKind::Put, a1, "a1".to_string(), a1),
            (WatchEventKind::Put, a2, "a2".to_string(), a2),
            (
                WatchEventKind::Delete,
                deleted.revision,
                "a1".to_string(),
                a1
            ),
        ]
    );

    eprintln!("--- step: a quiet watch hears progress at its interval");
    let mut progress = 0;
    let started = std::time::Instant::now();
    while progress < 3 {
        let response = next(&mut stream).await?;
        assert!(response.events.is_empty(), "no write covered: {response:?}");
        assert!(response.revision >= other);
        progress += 1;
    }
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "progress came faster than asked"
    );
    drop(stream);

    eprintln!("--- step: a watch from a revision not reached yet starts there");
    let now = put_w(&mut client, "w", "f0", 3).await?;
    let mut future = watch(
        &mut client,
        WatchRequest {
            r#type: "w".into(),
            from_revision: now + 3,
            ..WatchRequest::default()
        },
    )
    .await?;
    let mut put = Vec::new();
    for i in 1..=5 {
        put.push(put_w(&mut client, "w", &format!("f{i}"), 3).await?);
    }
    let mut got = Vec::new();
    while got.len() < 3 {
        got.extend(next(&mut future).await?.events.iter().map(|e| e.revision));
    }
    assert_eq!(got, put[2..].to_vec(), "nothing before the asked revision");
    drop(future);

    eprintln!("--- step: a watcher that reads nothing while 800 writes of 30,000 bytes go by");
    let mut slow = watch(
        &mut client,
        WatchRequest {
            r#type: "big".into(),
            ..WatchRequest::default()
        },
    )
    .await?;
    let slow_start = next(&mut slow).await?.revision;
    // The first watch was dropped: its task ends once the gateway sees
    // the stream reset.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while metric(node, "openshell_watchers{kind=\"objects\"}").await? != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "openshell_watchers does not count the one open watcher"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Another connection: the slow stream's unread data holds its own.
    let writers = ObjectStoreClient::new(test_channel(&node.addr, 2000).await?);
    let writes = futures::stream::iter(0..800)
        .map(|i| {
            let mut c = writers.clone();
            async move { put_w(&mut c, "big", &format!("b{}", i % 50), 30_000).await }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    let last = writes
        .into_iter()
        .collect::<TestResult<Vec<u64>>>()?
        .into_iter()
        .max()
        .unwrap_or(0);
    let mut expect = slow_start + 1;
    let cut = loop {
        match tokio::time::timeout(Duration::from_secs(10), slow.message()).await {
            Err(_) => panic!("the slow watcher was neither cut nor current at {expect}"),
            Ok(Ok(None)) => panic!("the slow watch ended without an error at {expect}"),
            Ok(Ok(Some(response))) => {
                for e in response.events {
                    assert_eq!(e.revision, expect, "events are contiguous");
                    expect += 1;
                }
                assert!(
                    expect <= last,
                    "the slow watcher got every write: it was never cut"
                );
            }
            Ok(Err(status)) => break status,
        }
    };
    assert_eq!(cut.code(), Code::ResourceExhausted, "{cut:?}");
    assert_eq!(
        metric(
            node,
            "openshell_watch_refusals_total{kind=\"objects\",reason=\"fell_behind\"}"
        )
        .await?,
        1,
        "the cut is counted"
    );
    let oldest: u64 = cut
        .metadata()
        .get("x-openshell-compacted-revision")
        .ok_or("no compacted revision on the cut")?
        .to_str()?
        .parse()?;
    assert!(
        oldest > expect,
        "the cut names a revision past what the watcher got ({oldest} vs {expect})"
    );
    eprintln!(
        "--- step: cut at revision {expect} with the oldest held {oldest} (last write {last})"
    );

    match watch(
        &mut client,
        WatchRequest {
            from_revision: 1,
            ..WatchRequest::default()
        },
    )
    .await
    {
        Err(s) => {
            assert_eq!(s.code(), Code::OutOfRange, "{s:?}");
            assert_eq!(
                metric(
                    node,
                    "openshell_watch_refusals_total{kind=\"objects\",reason=\"compacted\"}"
                )
                .await?,
                1,
                "the refusal is counted"
            );
            let held: u64 = s
                .metadata()
                .get("x-openshell-compacted-revision")
                .ok_or("no compacted revision")?
                .to_str()?
                .parse()?;
            assert!(held >= oldest && held > 1, "{s:?}");
            let mut resumed = watch(
                &mut client,
                WatchRequest {
                    from_revision: held,
                    ..WatchRequest::default()
                },
            )
            .await?;
            let response = next(&mut resumed).await?;
            assert_eq!(response.events.first().map(|e| e.revision), Some(held));
        }
        Ok(_) => panic!("a watch from revision 1 was served after 24 MB of writes"),
    }
    Ok(())
}

//! A watch survives the loss of the gateway serving it: no event lost,
//! none repeated.
//!
//! - given: three `openshell-gateway` processes on loopback; a watcher
//!   (`Client::watch`, type `w`, from now, progress every 300 ms) whose
//!   first endpoint is a follower; a writer on every endpoint
//! - when: the writer makes 240 writes one after another (puts of eight
//!   ids, every fifth a delete of one); after the 60th, the gateway the
//!   watcher is on is killed with `kill -9`; after the 120th it is
//!   restarted; after the 180th, the gateway the watcher is on then is
//!   stopped with SIGTERM (a graceful stop ends its watchers with
//!   `UNAVAILABLE`)
//! - then: the watcher, read until it is current past the last write,
//!   delivered exactly the acknowledged writes, in revision order, each
//!   once, with its kind, id and revision; it opened at least three
//!   streams (it resumed after each loss)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use openshell_client::{Client, Condition, Object, WatchEventKind, WatchSpec};
use testkit::gateway::{eventually, Cluster};
use testkit::TestResult;

const WRITES: usize = 240;

/// One write as acknowledged, or one event as delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Change {
    revision: u64,
    kind: WatchEventKind,
    id: String,
}

fn client(endpoints: Vec<String>) -> TestResult<Client> {
    Ok(Client::builder()
        .endpoints(endpoints)
        .insecure()
        .deadline(Duration::from_secs(30))
        .backoff(Duration::from_millis(20), Duration::from_millis(300))
        .build()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumes_across_a_kill_and_a_stop_without_losing_or_repeating() -> TestResult {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader("bootstrap").await;
    let follower = cluster
        .nodes
        .iter()
        .map(|n| n.id)
        .find(|id| *id != leader)
        .ok_or("no follower")?;
    let mut endpoints = vec![cluster.get(follower).addr.clone()];
    endpoints.extend(
        cluster
            .nodes
            .iter()
            .filter(|n| n.id != follower)
            .map(|n| n.addr.clone()),
    );
    let writer = client(cluster.nodes.iter().map(|n| n.addr.clone()).collect())?;
    eventually("a first write", || async {
        Ok(writer.put(object("w0", "setup"), Condition::Always).await?)
    })
    .await;

    eprintln!("--- step: a watcher on type w from now, first endpoint gateway {follower}");
    let watcher_client = client(endpoints)?;
    let mut watcher = watcher_client
        .watch(WatchSpec {
            object_type: "w".into(),
            progress_interval: Duration::from_millis(300),
            ..WatchSpec::default()
        })
        .await?;
    let start = watcher.next_revision();
    let serving = Arc::new(Mutex::new(watcher.endpoint().map(str::to_string)));
    let (until_tx, mut until_rx) = tokio::sync::watch::channel(u64::MAX);
    let reader = tokio::spawn({
        let serving = Arc::clone(&serving);
        async move {
            let mut seen = Vec::new();
            loop {
                let response = watcher.next().await?;
                *serving.lock().unwrap_or_else(|p| p.into_inner()) =
                    watcher.endpoint().map(str::to_string);
                for event in response.events {
                    let kind = WatchEventKind::try_from(event.kind)?;
                    let id = event.object.map(|o| o.id).unwrap_or_default();
                    seen.push(Change {
                        revision: event.revision,
                        kind,
                        id,
                    });
                }
                let until = *until_rx.borrow_and_update();
                if response.revision >= until {
                    return Ok::<_, Box<dyn std::error::Error + Send + Sync>>((
                        seen,
                        watcher.streams_opened(),
                    ));
                }
            }
        }
    });

    let mut acknowledged = Vec::new();
    let mut killed = None;
    let mut present = std::collections::BTreeSet::new();
    for i in 0..WRITES {
        let id = format!("w{}", i % 8);
        if i % 5 == 4 && present.contains(&id) {
            let deleted = writer.delete("w", &id, Condition::Always).await?;
            present.remove(&id);
            acknowledged.push(Change {
                revision: deleted.value.revision,
                kind: WatchEventKind::Delete,
                id,
            });
        } else {
            let put = writer
                .put(object(&id, &format!("v{i}")), Condition::Always)
                .await?;
            present.insert(id.clone());
            acknowledged.push(Change {
                revision: put.value.object.map_or(0, |o| o.resource_version),
                kind: WatchEventKind::Put,
                id,
            });
        }
        match i {
            59 => {
                let on = serving_node(&cluster, &serving)?;
                eprintln!("--- step: write {i}: kill -9 gateway {on}, which serves the watch");
                cluster.node(on).kill9();
                killed = Some(on);
            }
            119 => {
                let on = killed.take().ok_or("nothing killed")?;
                eprintln!("--- step: write {i}: restart gateway {on}");
                cluster.node(on).start();
            }
            179 => {
                let on = serving_node(&cluster, &serving)?;
                eprintln!("--- step: write {i}: SIGTERM gateway {on}, which serves the watch now");
                cluster.node(on).signal("-TERM");
            }
            _ => {}
        }
    }
    let last = acknowledged.last().map_or(0, |c| c.revision);
    until_tx.send(last)?;
    eprintln!(
        "--- step: {WRITES} writes acknowledged up to revision {last}; reading the watch up to it"
    );
    let (seen, streams) = tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .map_err(|_| "the watcher did not reach the last revision within 60 s")??
        .map_err(|e| format!("the watcher failed: {e}"))?;

    let expected: Vec<Change> = acknowledged
        .iter()
        .filter(|c| c.revision >= start)
        .cloned()
        .collect();
    assert_eq!(
        expected.len(),
        WRITES,
        "every write is after the watch began"
    );
    assert!(
        seen.windows(2).all(|w| w[0].revision < w[1].revision),
        "revisions strictly increase (none repeated): {seen:?}"
    );
    assert_eq!(
        seen, expected,
        "the watch delivered exactly the acknowledged writes"
    );
    assert!(
        streams >= 3,
        "the watcher resumed after each loss: {streams} stream(s)"
    );
    eprintln!(
        "--- report: {} events delivered in order, none lost or repeated, over {streams} streams",
        seen.len()
    );
    Ok(())
}

/// The node serving the watch now.
fn serving_node(cluster: &Cluster, serving: &Mutex<Option<String>>) -> TestResult<u64> {
    let addr = serving
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .ok_or("the watcher has no stream")?;
    cluster
        .nodes
        .iter()
        .find(|n| n.addr == addr)
        .map(|n| n.id)
        .ok_or_else(|| format!("{addr} is no node of the cluster").into())
}

fn object(id: &str, value: &str) -> Object {
    Object {
        r#type: "w".into(),
        id: id.into(),
        payload: value.as_bytes().to_vec(),
        ..Object::default()
    }
}

/// - given: three gateways and 40 writes; gateway 1 then takes a snapshot
///   and is restarted (its journal now starts after the snapshot)
/// - when: a watch from revision 1 is opened with gateway 1 first
/// - then: gateway 1 answers that it no longer holds revision 1, and the
///   watcher opens on another gateway that does: every write from
///   revision 1 on is delivered
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_one_gateway_no_longer_holds_is_served_by_another() -> TestResult {
    let mut cluster = Cluster::start(3, &[]);
    cluster.wait_leader("bootstrap").await;
    let writer = client(cluster.nodes.iter().map(|n| n.addr.clone()).collect())?;
    eventually("a first write", || async {
        Ok(writer.put(object("w0", "v0"), Condition::Always).await?)
    })
    .await;
    for i in 1..40 {
        writer
            .put(
                object(&format!("w{}", i % 4), &format!("v{i}")),
                Condition::Always,
            )
            .await?;
    }
    eprintln!("--- step: gateway 1 snapshots and restarts");
    let leader = cluster.wait_leader("before the snapshot").await;
    let commit = cluster.get(leader).status().await?.commit_index;
    cluster
        .wait_applied(1, commit, "gateway 1 has every write")
        .await;
    cluster
        .get(1)
        .admin()
        .await?
        .trigger_snapshot(proto::cluster::TriggerSnapshotRequest {})
        .await?;
    eventually("gateway 1's snapshot", || async {
        let status = cluster.get(1).status().await?;
        if status.snapshot_index >= commit {
            Ok(())
        } else {
            Err(format!("snapshot at {}", status.snapshot_index).into())
        }
    })
    .await;
    cluster.node(1).kill9();
    cluster.node(1).start();
    cluster.wait_applied(1, commit, "gateway 1 restarted").await;
    let mut direct = cluster.get(1).objects().await?;
    match direct
        .watch(proto::objects::WatchRequest {
            r#type: "w".into(),
            from_revision: 1,
            ..Default::default()
        })
        .await
    {
        Err(s) => assert_eq!(s.code(), tonic::Code::OutOfRange, "{s:?}"),
        Ok(_) => panic!("gateway 1 still serves revision 1 after its restart from a snapshot"),
    }

    eprintln!("--- step: a watch from revision 1, gateway 1 first");
    let mut endpoints = vec![cluster.get(1).addr.clone()];
    endpoints.extend(cluster.nodes.iter().skip(1).map(|n| n.addr.clone()));
    let mut watcher = client(endpoints)?
        .watch(WatchSpec {
            object_type: "w".into(),
            from_revision: 1,
            ..WatchSpec::default()
        })
        .await?;
    let mut revisions = Vec::new();
    while revisions.len() < 40 {
        let response = tokio::time::timeout(Duration::from_secs(10), watcher.next())
            .await
            .map_err(|_| "no watch response within 10 s")??;
        revisions.extend(response.events.iter().map(|e| e.revision));
    }
    assert_eq!(revisions, (1..=40).collect::<Vec<u64>>());
    assert_ne!(watcher.endpoint(), Some(cluster.get(1).addr.as_str()));
    Ok(())
}

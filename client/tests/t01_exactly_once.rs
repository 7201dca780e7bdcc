//! A write in flight when the leader dies is applied exactly once.
//!
//! - given: three `openshell-gateway` processes on loopback and an object
//!   `test/cas`; a client whose first endpoint is the leader
//! - when: the client sends a compare-and-swap put (`match_resource_version`
//!   = the version it read) to the leader, and the leader is killed with
//!   `kill -9` a moment later (swept over fractions of a put's measured
//!   latency, round after round, until a round's kill caught a write whose
//!   first attempt applied but whose answer was lost); the client retries on
//!   the surviving gateways with the same request id
//! - then: every put returns success; the object holds the round's value at
//!   the returned version, which is exactly one revision above the version
//!   read (a second application would have been a second revision, and a
//!   second compare-and-swap on the old version a conflict); a retry whose
//!   first attempt applied is answered `replayed`; a second write with a
//!   fresh id applies

use std::time::{Duration, Instant};

use openshell_client::{Client, Condition, Error, Object};
use testkit::gateway::{eventually, Cluster};
use testkit::TestResult;

/// The most rounds (each kills and restarts a leader).
const MAX_ROUNDS: usize = 24;
/// At least this many rounds, so the report shows more than one timing.
const MIN_ROUNDS: usize = 4;
/// Kill delays, as fractions (percent) of the measured put latency.
const FRACTIONS: [u32; 8] = [40, 70, 55, 85, 25, 100, 65, 120];

fn object(value: &str) -> Object {
    Object {
        r#type: "test".into(),
        id: "cas".into(),
        payload: value.as_bytes().to_vec(),
        ..Object::default()
    }
}

/// What a round's kill caught.
#[derive(Debug, Default)]
struct Tally {
    /// The answer came back before the kill (one attempt).
    answered_before_kill: usize,
    /// In flight at the kill; its first attempt applied, the retry was
    /// answered with that outcome.
    applied_then_replayed: usize,
    /// In flight at the kill; its first attempt never committed (lost with
    /// the leader), the retry applied it.
    lost_then_applied: usize,
}

/// A client whose endpoints start at `first` (then the others, in id order).
fn client_starting_at(cluster: &Cluster, first: u64) -> Client {
    let mut endpoints = vec![cluster.get(first).addr.clone()];
    endpoints.extend(
        cluster
            .nodes
            .iter()
            .filter(|n| n.id != first)
            .map(|n| n.addr.clone()),
    );
    Client::builder()
        .endpoints(endpoints)
        .insecure()
        .deadline(Duration::from_secs(30))
        .backoff(Duration::from_millis(20), Duration::from_millis(500))
        .build()
        .unwrap_or_else(|e| panic!("client: {e}"))
}

/// The median latency of a compare-and-swap put sent straight to the leader
/// over a warm channel.
async fn measure_put_latency(client: &Client) -> TestResult<Duration> {
    let mut samples = Vec::new();
    for i in 0..15 {
        let current = client.get("test", "cas").await?.ok_or("no object")?;
        let started = Instant::now();
        client
            .put(
                object(&format!("warm-{i}")),
                Condition::MatchResourceVersion(current.resource_version),
            )
            .await?;
        samples.push(started.elapsed());
    }
    samples.sort();
    Ok(samples[samples.len() / 2])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cas_put_in_flight_at_a_leader_kill_applies_exactly_once() -> TestResult {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader("bootstrap").await;
    let setup = client_starting_at(&cluster, leader);
    eventually("create the object", || async {
        Ok(setup.put(object("initial"), Condition::Always).await?)
    })
    .await;
    let latency = measure_put_latency(&setup).await?;
    eprintln!("--- step: a put to the leader takes {latency:?} (median of 15)");

    let mut tally = Tally::default();
    let mut rounds = 0;
    while rounds < MIN_ROUNDS || (rounds < MAX_ROUNDS && tally.applied_then_replayed == 0) {
        let leader = cluster.wait_leader("before the round").await;
        let client = client_starting_at(&cluster, leader);
        // Warms the channel to the leader: the put's first attempt goes
        // out at once.
        let before = client.get("test", "cas").await?.ok_or("no object")?;
        let value = format!("round-{rounds}");
        let delay = latency * FRACTIONS[rounds % FRACTIONS.len()] / 100;
        eprintln!("--- step: round {rounds}: CAS put at version {} to leader {leader}, kill -9 after {delay:?}", before.resource_version);
        let put = tokio::spawn({
            let client = client.clone();
            let value = value.clone();
            let version = before.resource_version;
            async move {
                client
                    .put(object(&value), Condition::MatchResourceVersion(version))
                    .await
            }
        });
        // A blocking sleep: sub-millisecond, and the put runs on the other
        // worker thread.
        std::thread::sleep(delay);
        cluster.node(leader).kill9();
        let written = put
            .await?
            .unwrap_or_else(|e| panic!("round {rounds}: the put failed: {e}"));
        let stored = written.value.object.clone().ok_or("no object in reply")?;

        eprintln!(
            "--- step: round {rounds}: {} attempt(s), replayed {}, version {}",
            written.attempts, written.replayed, stored.resource_version
        );
        match (written.attempts, written.replayed) {
            (1, false) => tally.answered_before_kill += 1,
            (_, true) => tally.applied_then_replayed += 1,
            (_, false) => tally.lost_then_applied += 1,
        }

        // Exactly one application: one revision above what was read, and
        // the object is what this round wrote.
        assert_eq!(
            stored.resource_version,
            before.resource_version + 1,
            "round {rounds}: the put applied more than once or not at all"
        );
        let now = client.get("test", "cas").await?.ok_or("object gone")?;
        assert_eq!(now.resource_version, stored.resource_version);
        assert_eq!(now.payload, value.as_bytes());
        // Another CAS on the version read is a conflict: only one could win.
        match client
            .put(
                object("stale"),
                Condition::MatchResourceVersion(before.resource_version),
            )
            .await
        {
            Err(Error::Conflict {
                current_resource_version,
                ..
            }) => assert_eq!(current_resource_version, stored.resource_version),
            other => panic!("round {rounds}: a stale CAS must conflict: {other:?}"),
        }
        // A second, distinct write (a fresh request id) applies.
        let second = client
            .put(
                object(&format!("{value}-second")),
                Condition::MatchResourceVersion(stored.resource_version),
            )
            .await?;
        assert!(!second.replayed);
        assert_ne!(second.request_id, written.request_id);
        assert_eq!(
            second.value.object.map(|o| o.resource_version),
            Some(stored.resource_version + 1)
        );

        eprintln!("--- step: round {rounds}: restart gateway {leader} and let it catch up");
        cluster.node(leader).start();
        let new_leader = cluster.wait_leader("after the restart").await;
        let commit = cluster.get(new_leader).status().await?.commit_index;
        cluster
            .wait_applied(leader, commit, "the restarted gateway catches up")
            .await;
        rounds += 1;
    }

    eprintln!(
        "--- report: {rounds} rounds: {} answered before the kill, {} in flight and applied by \
         the first attempt (retry replayed), {} in flight and lost with the leader (retry applied)",
        tally.answered_before_kill, tally.applied_then_replayed, tally.lost_then_applied
    );
    assert!(
        tally.applied_then_replayed > 0,
        "no round caught a write applied before the kill whose answer was lost: {tally:?}"
    );
    Ok(())
}

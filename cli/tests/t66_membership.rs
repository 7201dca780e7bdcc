//! Membership commands without a quorum fail within the write timeout with
//! the "no leader / no quorum" exit code (6), and the change they started
//! completes, as the runbook says.
//!
//! Found by operating the cluster: `raft remove` without quorum hung 60 s
//! (`Timeout expired`, rc 1) and left a half-finished (joint) membership
//! change that blocked the next one.
//!
//! - given: 3 gateways, both followers killed
//! - when: `raft remove F1` runs against the leader
//! - then: it exits 6 within the write timeout (5 s) plus a margin, saying
//!   no quorum, and does not try the other endpoints for another round;
//!   `raft add-learner` of a live gateway does the same
//! - when: follower F2 comes back
//! - then: the removal completes by itself (voters: leader and F2) and the
//!   next membership command works
//! - and: when the leader restarts before the change could complete (so
//!   nobody drives its second step), re-running the same command finishes it

mod common;

use std::time::{Duration, Instant};

use common::cli::*;
use common::*;
use serde_json::Value;

/// The voter ids `raft status -o json` shows, through `endpoints`.
fn voters(endpoints: &str) -> Vec<u64> {
    let status = json(endpoints, &["raft", "status"]);
    let mut ids: Vec<u64> = status["voters"]
        .as_array()
        .map(|v| v.iter().filter_map(|n| n["id"].as_u64()).collect())
        .unwrap_or_default();
    ids.sort_unstable();
    ids
}

/// The voters a half-done membership change leads to, as `raft status -o
/// json` shows them through `endpoints` (empty when none).
fn unfinished(endpoints: &str) -> Vec<u64> {
    let status = json(endpoints, &["raft", "status"]);
    let mut ids: Vec<u64> = status["unfinished_change_to_voters"]
        .as_array()
        .map(|v| v.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    ids.sort_unstable();
    ids
}

/// `raft remove ID` with both followers down: rc 6 within the bound.
fn remove_fails_without_quorum(endpoints: &str, id: u64) {
    let started = Instant::now();
    let (code, out, err) = pool(endpoints, &["raft", "remove", &id.to_string()]);
    let took = started.elapsed();
    eprintln!("raft remove {id} without quorum: rc {code} after {took:?}: {err}");
    assert_eq!(
        code, 6,
        "no quorum is exit code 6: stdout {out} stderr {err}"
    );
    assert!(
        err.contains("no quorum") && err.lines().count() == 1,
        "one line saying no quorum: {err}"
    );
    assert!(
        took < Duration::from_secs(15),
        "failed after {took:?}, not within the write timeout (5 s) plus a margin"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_without_quorum_fails_fast_and_completes_once_quorum_returns() -> TestResult {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader("bootstrap").await;
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let (f1, f2) = (followers[0], followers[1]);
    let all = [leader, f1, f2]
        .iter()
        .map(|id| cluster.get(*id).addr.clone())
        .collect::<Vec<_>>()
        .join(",");

    eprintln!("--- step: kill both followers; raft remove {f1} fails fast with rc 6");
    cluster.node(f1).kill9();
    cluster.node(f2).kill9();
    remove_fails_without_quorum(&all, f1);
    let mut want = vec![leader, f2];
    want.sort_unstable();
    assert_eq!(
        unfinished(&all),
        want,
        "raft status shows the change in flight"
    );
    cluster.add_node(4, &[]);
    let addr4 = cluster.get(4).addr.clone();
    eventually("node 4 serves", || cluster.get(4).status()).await;
    let started = Instant::now();
    let (code, _, err) = pool(&all, &["raft", "add-learner", "4", &addr4]);
    assert_eq!(code, 6, "add-learner without quorum: {err}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "add-learner without quorum took {:?}",
        started.elapsed()
    );

    eprintln!("--- step: follower {f2} returns; the removal completes by itself");
    cluster.node(f2).start();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, out, _) = pool(&all, &["-o", "json", "raft", "status"]);
        let done = code == 0
            && serde_json::from_str::<Value>(&out).is_ok_and(|s| {
                let mut ids: Vec<u64> = s["voters"]
                    .as_array()
                    .map(|v| v.iter().filter_map(|n| n["id"].as_u64()).collect())
                    .unwrap_or_default();
                ids.sort_unstable();
                ids == want
            });
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the removal of {f1} did not complete once {f2} was back: {out}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    eprintln!("--- step: the next membership command works");
    json(&all, &["raft", "add-learner", "4", &addr4]);
    json(&all, &["raft", "promote", "4"]);
    let mut want = vec![leader, f2, 4];
    want.sort_unstable();
    assert_eq!(voters(&all), want);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_left_half_done_is_finished_by_rerunning_it() -> TestResult {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader("bootstrap").await;
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let (f1, f2) = (followers[0], followers[1]);
    let all = [leader, f1, f2]
        .iter()
        .map(|id| cluster.get(*id).addr.clone())
        .collect::<Vec<_>>()
        .join(",");

    eprintln!("--- step: without quorum, raft remove {f1} fails; then the leader restarts");
    cluster.node(f1).kill9();
    cluster.node(f2).kill9();
    remove_fails_without_quorum(&all, f1);
    cluster.node(leader).kill9();
    cluster.node(leader).start();
    cluster.node(f2).start();
    let leader = cluster.wait_leader("leader and f2 back").await;
    let mut want = vec![leader, f2];
    want.sort_unstable();
    want.dedup();
    assert_eq!(
        unfinished(&all),
        want,
        "raft status shows the change left half done"
    );

    eprintln!("--- step: re-running raft remove {f1} finishes the change");
    let (code, out, err) = pool(&all, &["-o", "json", "raft", "remove", &f1.to_string()]);
    assert_eq!(code, 0, "re-running the change: {out} {err}");
    assert_eq!(voters(&all), want);
    assert!(unfinished(&all).is_empty(), "the change is finished");
    put(cluster.get(leader), "after", "x").await?;
    Ok(())
}

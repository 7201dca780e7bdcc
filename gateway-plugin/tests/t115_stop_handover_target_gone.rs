//! A stopping leader whose hand-over target stops answering gives the
//! hand-over up instead of waiting out its bound (issue 32 item 5: SIGINT
//! to `openshell-pool dev` SIGKILLed gateway 1 and a supervisor run after
//! run).
//!
//! `dev` stops its three gateways at once. The leader started handing
//! leadership over to a follower that was itself stopping; the transfer
//! waited for the target (to hold elections, to match the log, to
//! campaign; and for a stopping supervisor's drain or leave in flight,
//! which could not commit), which never answered again, until
//! `HANDOVER_BOUND` (4 s), and told its supervisors to move only then:
//! past `dev`'s 3 s grace, so `dev` SIGKILLed it and the supervisor waiting
//! on it. Here the followers are frozen (SIGSTOP) instead of stopped, so
//! the target is gone at a known moment and the scenario is the same every
//! run.
//!
//! - given: three gateways, a write applied
//! - when: both followers are frozen and the leader gets SIGTERM
//! - then: the leader logs `leadership hand-over abandoned`, never waits
//!   out the bound (`did not finish within its bound`), tells its
//!   supervisors to move within 2.5 s of its signal, and exits by itself
//!   with rc 0

use std::time::{Duration, Instant};

use testkit::gateway::*;
use testkit::TestResult;

/// Seconds into the day of the first log line holding `text` (the line
/// starts with an RFC 3339 UTC time, `2026-12-03T18:53:14.940516Z`).
fn logged_at(log: &str, text: &str) -> Option<f64> {
    let line = log.lines().find(|l| l.contains(text))?;
    let time = line.split('T').nth(1)?.split('Z').next()?;
    let mut parts = time.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(h * 3600.0 + m * 60.0 + s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_gives_up_a_hand_over_to_a_follower_that_stopped_answering() -> TestResult {
    let mut cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader("bootstrap").await;
    put(cluster.get(leader), "before", "1").await?;
    let followers: Vec<u64> = cluster
        .nodes
        .iter()
        .map(|n| n.id)
        .filter(|id| *id != leader)
        .collect();

    eprintln!("--- step: freeze both followers, SIGTERM the leader");
    for id in &followers {
        cluster.get(*id).signal("-STOP");
    }
    let started = Instant::now();
    cluster.get(leader).signal("-TERM");
    let status = cluster
        .node(leader)
        .wait_exit(Duration::from_secs(15))
        .await;
    let took = started.elapsed();
    for id in &followers {
        cluster.get(*id).signal("-CONT");
    }
    let log = cluster.get(leader).log();
    println!("the leader exited {took:?} after SIGTERM ({status:?})");
    let Some(status) = status else {
        panic!("the leader still ran 15 s after SIGTERM");
    };
    assert_eq!(status.code(), Some(0), "exit status {status}");
    // What its supervisors wait for (with the followers frozen, their
    // connections then hold the rest of the stop to its bound, as
    // documented; stopped followers close theirs).
    let signalled = logged_at(&log, "shutting down").ok_or("no 'shutting down' line")?;
    let moved =
        logged_at(&log, "told the attached supervisors to move").ok_or("supervisors never told")?;
    let waited = moved - signalled;
    println!("supervisors told to move {waited:.3} s after the signal");
    assert!(
        waited < 2.5,
        "the leader told its supervisors to move {waited:.3} s after its signal"
    );
    assert!(
        log.contains("handing leadership over"),
        "the leader did not try a hand-over: {log}"
    );
    assert!(
        log.contains("leadership hand-over abandoned"),
        "the hand-over was not abandoned"
    );
    assert!(
        !log.contains("did not finish within its bound"),
        "the leader waited out the hand-over bound"
    );
    Ok(())
}

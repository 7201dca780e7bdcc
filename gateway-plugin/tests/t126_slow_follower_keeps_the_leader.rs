//! A gateway that cannot keep up with its leader does not depose it
//! (pre-vote, `raft_store::campaign::prevote`).
//!
//! Before pre-vote, a node that heard no leader within its election
//! timeout campaigned at a higher term even while the other two followed a
//! live leader; the leader's next append to it then answered "higher vote"
//! and the leader stepped down. On the dev cluster a gateway whose CPU
//! quota was cut to 2 % of a core caused 26 elections in 30 s. Here the
//! slow node is made so by freezing it (SIGSTOP) for longer than its
//! election timeout and thawing it briefly, over and over: every thaw
//! finds its timer run out.
//!
//! - given: three gateways, a write applied, the leader's term noted
//! - when: one follower is frozen for 700 ms and thawed for 80 ms, 12 times
//! - then: the same leader leads the same term throughout and after; the
//!   thawed follower's timer ran out and its pre-votes were refused (its
//!   log says so); a write through the slow follower is applied once it
//!   runs again

use std::time::Duration;

use testkit::gateway::*;
use testkit::TestResult;

const CYCLES: usize = 12;

/// The leader's "seen a higher vote" lines: which candidate's term ended
/// its term (openraft names the vote, `T<term>-N<node>`).
fn higher_votes(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("seen a higher vote"))
        .take(3)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_too_slow_to_hear_its_leader_does_not_depose_it() -> TestResult {
    let cluster = Cluster::start(3, &[]);
    let leader = cluster.wait_leader("bootstrap").await;
    put(cluster.get(leader), "before", "1").await?;
    let term = cluster.get(leader).status().await?.term;
    let slow = cluster
        .nodes
        .iter()
        .map(|n| n.id)
        .find(|id| *id != leader)
        .ok_or("no follower")?;
    let steady = cluster
        .nodes
        .iter()
        .map(|n| n.id)
        .find(|id| *id != leader && *id != slow)
        .ok_or("no second follower")?;

    eprintln!("--- step: freeze node {slow} 700 ms, thaw it 80 ms, {CYCLES} times");
    for _ in 0..CYCLES {
        cluster.get(slow).signal("-STOP");
        tokio::time::sleep(Duration::from_millis(700)).await;
        cluster.get(slow).signal("-CONT");
        tokio::time::sleep(Duration::from_millis(80)).await;
        let status = cluster.get(steady).status().await?;
        assert_eq!(
            (status.leader_id, status.term),
            (leader, term),
            "node {steady} no longer follows node {leader} in term {term}; the leader saw: {:?}",
            higher_votes(&cluster.get(leader).log())
        );
    }

    eprintln!("--- step: node {slow} runs again; a write through it applies");
    tokio::time::sleep(Duration::from_secs(1)).await;
    put(cluster.get(slow), "after", "2").await?;
    for id in [leader, steady, slow] {
        let status = cluster.get(id).status().await?;
        assert_eq!(
            (status.leader_id, status.term),
            (leader, term),
            "node {id} after the cycles"
        );
    }
    let log = cluster.get(slow).log();
    let refused = log
        .lines()
        .filter(|l| l.contains("no majority granted the pre-vote"))
        .count();
    println!("node {slow}'s timer ran out {refused} times; every pre-vote refused");
    assert!(
        refused > 0,
        "node {slow}'s election timer never ran out: the freezes did not test anything"
    );
    assert!(
        !log.contains("majority granted the pre-vote: campaigning"),
        "node {slow} campaigned"
    );
    Ok(())
}

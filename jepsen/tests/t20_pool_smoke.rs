//! t20: the pool workload keeps I1–I8 under gateway partitions and kills,
//! supervisor pauses (shorter than the heartbeat TTL), supervisor kills
//! (expiry, takeover, new incarnation) and drains (CI smoke, about 75 s).
//!
//! - given: 3 gateways in their own network namespaces (tick 250 ms,
//!   heartbeat TTL 4 s) and 4 scripted supervisors (capacity 3) attached
//!   to random gateways
//! - when: 4 clients launch / delete / get / read status for 50 s while the
//!   nemesis cuts and kills gateways and the pool faults pause, kill and
//!   drain supervisors
//! - then: every checker (pool-i1 … pool-i8, replicas-identical-digest,
//!   replicas-identical) says valid, sandboxes were taken over after a
//!   supervisor kill, and nothing named osj-* is left

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_invariants_hold_under_gateway_and_supervisor_faults() {
    if common::skip_without_root("jepsen::t20_pool_smoke") {
        return;
    }
    eprintln!("--- step: find the gateway binary");
    let bin = common::gateway_bin();
    eprintln!("--- step: run 50 s of pool ops with partition,kill and pause,kill,drain");
    let mut options = common::pool_options(
        "t20-pool-smoke",
        bin,
        "partition,kill",
        &["pause", "kill", "drain"],
        50,
        20,
    );
    // Scripted members: the history holds every grant, ack and report
    // (t25_pool_processes runs the same with real supervisor processes).
    options.pool.members = jepsen::workload::MemberKind::Scripted;
    // Gateway faults less often than the pool faults.
    options.schedule.quiet = (
        std::time::Duration::from_secs(6),
        std::time::Duration::from_secs(10),
    );
    let (outcome, history) = common::run_expecting_valid(options).await;
    let names: Vec<&str> = outcome.results.iter().map(|r| r.checker.as_str()).collect();
    for n in [
        "pool-i1-owner-term",
        "pool-i4-takeover-dead-owner",
        "pool-i8-delete-wins",
        "replicas-identical-digest",
    ] {
        assert!(names.contains(&n), "no {n} result: {names:?}");
    }
    for f in [
        "\"f\":\"launch\"",
        "\"f\":\"grant\"",
        "\"f\":\"ack\"",
        "\"f\":\"status\"",
        "\"f\":\"kill-supervisor\"",
        "\"f\":\"pause-supervisor\"",
    ] {
        assert!(history.contains(f), "history has no {f} event");
    }
    // Some sandbox changed owner (a takeover after a kill, or a drain move).
    let moved = history.lines().any(|l| {
        l.contains("\"f\":\"grant\"") && l.contains("\"type\":\"ok\"") && !l.contains("\"term\":1,")
    });
    assert!(moved, "no grant of a term above 1: no takeover happened");
}

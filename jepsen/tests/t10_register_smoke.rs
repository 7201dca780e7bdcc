//! t10: the register workload stays linearizable under partitions, kill -9
//! and pauses (CI smoke, about a minute).
//!
//! - given: 3 gateways in their own network namespaces
//! - when: 5 clients read/write/cas 4 registers for 60 s while the nemesis
//!   cuts (leader minority/majority, isolate, bridge, ring), kills and pauses
//! - then: every checker says valid, and nothing named osj-* is left;
//!   `watch-events` among them, over the three watchers' records
//!   (`watch-<n>.jsonl`): every acknowledged write they cover delivered
//!   once, in order

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_is_linearizable_under_partition_kill_pause() {
    if common::skip_without_root("jepsen::t10_register_smoke") {
        return;
    }
    eprintln!("--- step: find the gateway binary");
    let bin = common::gateway_bin();
    eprintln!("--- step: run 60 s of register ops with partition,kill,pause");
    let options = common::options("t10-smoke", bin, "partition,kill,pause", 60, 10);
    let (outcome, history) = common::run_expecting_valid(options).await;
    let watch = outcome
        .results
        .iter()
        .find(|r| r.checker == "watch-events")
        .expect("the register workload runs the watch-events checker");
    let checked: u64 = watch.details["watchers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w["acknowledged_checked"].as_u64())
        .sum();
    assert!(
        checked > 0,
        "watch-events checked no write: {}",
        watch.summary
    );
    for n in 1..=3 {
        let log = outcome.dir.join(format!("watch-{n}.jsonl"));
        assert!(log.is_file(), "{} missing", log.display());
    }
    for f in [
        "\"f\":\"cut\"",
        "\"f\":\"kill\"",
        "\"f\":\"pause\"",
        "\"type\":\"ok\"",
    ] {
        assert!(history.contains(f), "history has no {f} event");
    }
}

//! t30: no acknowledged write is lost when nodes lose power (not only
//! `kill -9`): every data directory is an `openshell-lazyfs` mount that
//! drops whatever the gateway never fsynced (CI: 4 cuts each of one node
//! and of a majority, under two minutes).
//!
//! - given: 3 gateways, each on its own lazyfs mount
//! - when: 5 clients read/write/cas registers while the `power-cut` nemesis
//!   kills one node (then, in the second case, a majority at once), drops
//!   its unsynced data and restarts it on what its disk kept, 4 times
//! - then: every checker is valid (linearizable, no acknowledged write
//!   lost, replicas identical), 4 cuts happened, and every node started
//!   again or refused and was rejoined

mod common;

use std::time::Duration;

use jepsen::power::{CutNodes, PowerOptions};

async fn power_cuts(name: &str, nodes: CutNodes, seed: u64) {
    eprintln!("--- step: find the gateway and lazyfs binaries");
    let bin = common::gateway_bin();
    let lazyfs = testkit::bins::workspace_bin("openshell-lazyfs");
    let mut options = common::options(name, bin, "power-cut", 90, seed);
    options.schedule.quiet = (Duration::from_millis(1000), Duration::from_millis(2000));
    options.schedule.hold = (Duration::from_millis(300), Duration::from_millis(800));
    options.power = PowerOptions {
        lazyfs_bin: Some(lazyfs),
        cuts: Some(4),
        nodes,
    };
    eprintln!("--- step: 4 power cuts of {} node(s)", nodes.name());
    let (outcome, history) = common::run_expecting_valid(options).await;
    let results: serde_json::Value =
        serde_json::from_str(&common::results_text(&outcome.dir)).unwrap_or_default();
    let power = &results["run"]["power"];
    eprintln!("power: {power}; stats: {}", results["stats"]);
    assert_eq!(power["cuts"], 4, "{power}");
    let per_cut = nodes.count(3) as u64;
    assert_eq!(power["node_cuts"], 4 * per_cut, "{power}");
    assert_eq!(
        power["refused"], power["rejoined"],
        "every node that refused its disk was rejoined: {power}"
    );
    for f in [
        "\"f\":\"power-cut\"",
        "\"f\":\"restart\"",
        "\"type\":\"ok\"",
    ] {
        assert!(history.contains(f), "history has no {f} event");
    }
    let acked = ["write", "cas"]
        .iter()
        .map(|f| results["stats"][f]["ok"].as_u64().unwrap_or(0))
        .sum::<u64>();
    assert!(acked > 0, "no write was acknowledged: {}", results["stats"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_power_cuts_of_one_node() {
    if common::skip_without_root("jepsen::t30_power_loss") {
        return;
    }
    power_cuts("t30-power-one", CutNodes::One, 30).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_power_cuts_of_a_majority() {
    if common::skip_without_root("jepsen::t30_power_loss") {
        return;
    }
    power_cuts("t30-power-majority", CutNodes::Majority, 31).await;
}

//! t42: the report times write recovery per fault, and clients fail over
//! to another gateway instead of waiting out a dead one (issue 17,
//! "Availability under faults").
//!
//! - given: 3 gateways in their own network namespaces, 5 register clients
//!   with failover on (the default: 1.5 s per attempt, a gateway that timed
//!   out or refused is avoided for 2 s)
//! - when: 40 s of read/write/cas while the nemesis cuts the leader into a
//!   minority and kills nodes (`kill -9`, restarted on heal)
//! - then: every checker says valid; `results.json` has `recovery` with one
//!   record per fault (type, affected nodes, majority side, seconds from
//!   its start and from its heal to the first majority-side write), max
//!   and p50 per fault type and over the run, and the target; `index.html`
//!   shows the table; and some op sent to a killed gateway was completed
//!   through another one (failover). No timing is asserted.

mod common;

use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_times_write_recovery_per_fault_and_clients_fail_over() {
    if common::skip_without_root("jepsen::t42_write_recovery") {
        return;
    }
    eprintln!("--- step: find the gateway binary");
    let bin = common::gateway_bin();
    eprintln!("--- step: run 40 s of register ops with leader-minority,kill");
    let options = common::options("t42-recovery", bin, "leader-minority,kill", 40, 42);
    let (outcome, history) = common::run_expecting_valid(options).await;

    eprintln!("--- step: results.json has the recovery measure per fault");
    let text = common::results_text(&outcome.dir);
    let results: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("results.json: {e}: {text}"));
    let recovery = &results["recovery"];
    eprintln!("recovery: {recovery}");
    assert_eq!(recovery["target_s"], serde_json::json!(2.0), "{recovery}");
    let faults = recovery["faults"]
        .as_array()
        .unwrap_or_else(|| panic!("no recovery.faults in results.json: {recovery}"));
    let starts = history
        .lines()
        .filter(|l| l.contains("\"f\":\"cut\"") || l.contains("\"f\":\"kill\""))
        .count();
    assert!(starts >= 2, "the nemesis started fewer than two faults");
    assert_eq!(faults.len(), starts, "one record per fault: {recovery}");
    for f in faults {
        for key in [
            "fault",
            "index",
            "what",
            "affected",
            "start_s",
            "heal_s",
            "majority_side",
            "from_start_s",
            "from_heal_s",
        ] {
            assert!(f.get(key).is_some(), "fault record without {key}: {f}");
        }
        let affected = f["affected"].as_array().map_or(0, Vec::len);
        let side = f["majority_side"].as_array().map_or(0, Vec::len);
        assert_eq!(affected, 1, "one node cut off or killed: {f}");
        assert_eq!(side, 2, "the other two are the majority side: {f}");
        assert!(f["heal_s"].is_number(), "every fault was healed: {f}");
    }
    for kind in ["leader-minority", "kill"] {
        let by = &recovery["by_fault"][kind];
        for from in ["from_start", "from_heal"] {
            for key in ["count", "unrecovered", "max_s", "p50_s", "over_target"] {
                assert!(
                    by[from].get(key).is_some(),
                    "by_fault.{kind}.{from} has no {key}: {recovery}"
                );
            }
        }
    }
    for from in ["from_start", "from_heal"] {
        assert!(
            recovery[from]["count"].as_u64().unwrap_or(0) > 0,
            "no fault was followed by a majority-side write ({from}): {recovery}"
        );
    }

    eprintln!("--- step: index.html shows the table");
    let page = std::fs::read_to_string(outcome.dir.join("index.html")).unwrap_or_default();
    assert!(
        page.contains("Write recovery per fault"),
        "no recovery table in index.html"
    );
    assert!(page.contains("leader-minority") && page.contains("start max"));

    eprintln!("--- step: some op sent to one gateway was completed through another");
    assert!(
        failed_over(&history) > 0,
        "no client op failed over to another gateway"
    );
}

/// Client ops whose completion names another node than their invoke.
fn failed_over(history: &str) -> usize {
    let mut invoked = std::collections::HashMap::new();
    let mut moved = 0;
    for line in history.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let Some(process) = e["process"].as_u64() else {
            continue;
        };
        let node = e["node"].as_str().unwrap_or_default().to_string();
        if e["type"] == "invoke" {
            invoked.insert(process, node);
        } else if invoked.remove(&process).is_some_and(|n| n != node) {
            moved += 1;
        }
    }
    moved
}

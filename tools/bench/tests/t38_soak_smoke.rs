//! t38: the soak, test-sized (issue 16): with a short retention the
//! gateways' applied state stays flat under sandbox and member churn, and
//! the soak writes its samples, verdict and plot (about 2 min).
//!
//! - given: 3 gateways in their own network namespaces (TLS, tick 250 ms,
//!   `--retention-ticks 40`: 10 s) and 8 scripted members that each live
//!   15-30 s, then drain and leave, leave, or crash, and come back under a
//!   new member id
//! - when: 1,800 sandboxes are created over 60 s and deleted again, at
//!   most 100 live at once, sampled every 3 s
//! - then: every sandbox was created and deleted, members departed and
//!   joined under new ids, `samples.csv`, `samples.json`, `verdict.md` and
//!   `soak.svg` exist, and every gateway's applied state (the snapshot
//!   encoding) is flat after the first retention period (without retention
//!   it grows with every deleted sandbox and departed member), and nothing
//!   named osj-* is left

use std::time::Duration;

use bench::soak::verdict::Metric;
use bench::soak::SoakOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applied_state_stays_flat_under_churn_with_retention() {
    if testkit::skip_without_root("bench::t38_soak_smoke") {
        return;
    }
    eprintln!("--- step: find the gateway binary");
    let bin = testkit::bins::gateway_bin();
    let out = testkit::bins::profile_dir()
        .join("jepsen-runs")
        .join("t38-soak");
    let _ = std::fs::remove_dir_all(&out);
    let options = SoakOptions {
        nodes: 3,
        seed: 38,
        duration: Duration::from_secs(60),
        sandboxes: 1800,
        max_live: 100,
        concurrency: 8,
        members: 8,
        capacity: 40,
        member_life: (Duration::from_secs(15), Duration::from_secs(30)),
        retention_ticks: Some(40),
        tick_ms: 250,
        heartbeat_ttl_ms: 4000,
        sample_every: Duration::from_secs(3),
        tolerance_pct: 10.0,
        cool_down: Duration::from_secs(5),
        gateway_bin: bin,
        out,
        client_timeout: Duration::from_secs(10),
    };
    eprintln!("--- step: soak 1,800 sandboxes over 60 s with 8 churning members");
    let outcome = bench::soak::run(options)
        .await
        .unwrap_or_else(|e| panic!("the soak could not be carried out: {e:#}"));
    let dir = &outcome.dir;
    let verdict_md = std::fs::read_to_string(dir.join("verdict.md")).unwrap_or_default();
    eprintln!("{verdict_md}");
    assert!(
        jepsen::net::stale_leftovers().is_empty(),
        "the soak left osj-* namespaces or links behind"
    );
    eprintln!("--- step: check the counts and the files");
    assert!(outcome.complete, "the churn did not finish:\n{verdict_md}");
    let soak = bench::soak::sample::read(dir).expect("samples.json");
    let last = soak.samples.last().expect("samples").counts.clone();
    assert_eq!(last.created, 1800, "{last:?}");
    assert_eq!(last.deleted, 1800, "{last:?}");
    assert!(
        last.joined > 8 && last.departed > 0,
        "no member churn: {last:?}"
    );
    for file in ["samples.csv", "samples.json", "verdict.md", "soak.svg"] {
        assert!(dir.join(file).is_file(), "no {file} in {}", dir.display());
    }
    eprintln!("--- step: the applied state is flat after the first retention period");
    let state: Vec<_> = outcome
        .verdict
        .rows
        .iter()
        .filter(|r| r.metric == Metric::State)
        .collect();
    assert_eq!(
        state.len(),
        3,
        "no state rows for every gateway:\n{verdict_md}"
    );
    for r in state {
        assert!(
            r.flat,
            "{}'s applied state grew {:+.1} % from the middle to the last third:\n{verdict_md}",
            r.node, r.change_pct
        );
    }
}

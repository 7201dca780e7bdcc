//! t40: `openshell-bench failover`, test-sized: the leader of three gateways is
//! killed twice, stopped once and transferred twice under the 8-client load,
//! and writes resume after every fault (the windows are printed, never
//! judged: no timing assertion).
//!
//! - given: three gateways (debug build), 8 clients over 200 keys
//! - when: 2 x `kill -9` of the leader (restarted each time), 1 x SIGSTOP
//!   for 500 ms, 2 x transfer-leader; etcd left out
//! - then: the JSON at `--out` has one window per fault for each phase,
//!   every window is finite and writes were acknowledged in every phase

use bench::compare::failover::{run, FailoverArgs, FailoverReport};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_resume_after_every_fault_and_the_json_has_every_window() {
    eprintln!("--- step: find the gateway binary");
    let bin = testkit::bins::gateway_bin();
    let dir = testkit::bins::profile_dir()
        .join("jepsen-runs")
        .join("t40-failover");
    let _ = std::fs::remove_dir_all(&dir);
    let out = dir.join("failover.json");
    let args = FailoverArgs {
        gateway_bin: bin,
        etcd_bin: "/usr/bin/etcd".into(),
        skip_etcd: true,
        out: out.clone(),
        work_dir: Some(dir.join("work")),
        kills: 2,
        pauses: 1,
        pause_ms: 500,
        transfers: 2,
        clients: 8,
        keys: 200,
        settle_ms: 500,
    };
    eprintln!("--- step: 2 kills, 1 stop, 2 transfers under load");
    let report = run(&args)
        .await
        .unwrap_or_else(|e| panic!("failover could not be carried out: {e:#}"));
    eprintln!("{}", report.table());

    eprintln!("--- step: the JSON has every window");
    let json = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    let back: FailoverReport = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}"));
    for (phase, w, n) in [
        ("kill", &back.gateways_kill, 2),
        ("pause", &back.gateways_pause, 1),
        ("transfer", &back.gateways_transfer, 2),
    ] {
        assert_eq!(w.faults, n, "{phase}: one window per fault");
        assert_eq!(w.windows_ms.len(), n, "{phase}: one window per fault");
        assert!(
            w.windows_ms.iter().all(|ms| ms.is_finite() && *ms >= 0.0),
            "{phase}: windows {:?}",
            w.windows_ms
        );
        assert!(w.acked > 0, "{phase}: no write acknowledged");
    }
    assert!(back.etcd_kill.is_none() && back.etcd_pause.is_none());
}

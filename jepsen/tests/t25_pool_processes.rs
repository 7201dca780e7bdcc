//! t25: the pool workload with real members: `openshell-supervisor`
//! processes starting `openshell-sandbox-runtime` processes keep I1–I8, and
//! every workload survives the faults of the supervisors watching it (CI
//! smoke, about 75 s).
//!
//! - given: 3 gateways in their own network namespaces (tick 250 ms,
//!   heartbeat TTL 4 s) and 4 supervisor processes (capacity 3) in the
//!   members namespace
//! - when: 4 clients launch / delete / get / read status for 50 s while the
//!   nemesis cuts and kills gateways and the pool faults SIGSTOP, `kill -9`
//!   and drain supervisors
//! - then: every checker (pool-i1 … pool-i8, replicas-identical-digest,
//!   workload-continuity, replicas-identical) says valid; some sandbox was
//!   taken over (a term above 1) and still reports its first workload's
//!   pid; nothing named osj-* is left
//! - and: the runtimes were launched by the gateways' process driver into
//!   the members namespace (`runtime started ... netns="osj-<run>-m"` in
//!   the gateway logs), their logs were kept in `runtime-logs/`, and none
//!   of them outlives the run

mod common;

use std::collections::{BTreeMap, BTreeSet};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workloads_survive_supervisor_faults_with_real_processes() {
    if common::skip_without_root("jepsen::t25_pool_processes") {
        return;
    }
    eprintln!("--- step: find the gateway and supervisor binaries");
    let bin = common::gateway_bin();
    eprintln!("--- step: run 50 s of pool ops with partition,kill and pause,kill,drain");
    let mut options = common::pool_options(
        "t25-pool-processes",
        bin,
        "partition,kill",
        &["pause", "kill", "drain"],
        50,
        25,
    );
    options.schedule.quiet = (
        std::time::Duration::from_secs(6),
        std::time::Duration::from_secs(10),
    );
    let (outcome, history) = common::run_expecting_valid(options).await;
    let names: Vec<&str> = outcome.results.iter().map(|r| r.checker.as_str()).collect();
    assert!(
        names.contains(&"workload-continuity"),
        "no workload-continuity result: {names:?}"
    );

    eprintln!("--- step: the gateways launched the runtimes, and the run ended them");
    let dir = &outcome.dir;
    let gateway_logs: String = (1..=3)
        .map(|i| std::fs::read_to_string(dir.join(format!("n{i}.log"))).unwrap_or_default())
        .collect();
    let started = gateway_logs
        .lines()
        .filter(|l| l.contains("runtime started") && l.contains("-m\""))
        .count();
    assert!(
        started > 0,
        "no gateway log says it started a runtime in the members namespace"
    );
    let kept = std::fs::read_dir(dir.join("runtime-logs"))
        .map(|d| d.count())
        .unwrap_or(0);
    // At least: a gateway killed between the spawn and its log line leaves
    // a runtime no line names.
    assert!(
        kept >= 2 * started,
        "{kept} kept files for {started} runtimes started: one log and one spec each"
    );
    for entry in std::fs::read_dir(dir.join("runtimes"))
        .expect("the driver directory")
        .flatten()
    {
        let pid = std::fs::read_to_string(entry.path().join("pid")).unwrap_or_default();
        if let Ok(pid) = pid.trim().parse::<i32>() {
            // SAFETY: signal 0 only checks for existence.
            let alive = unsafe { libc::kill(pid, 0) } == 0;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let runtime = String::from_utf8_lossy(&cmdline).contains("openshell-sandbox-runtime");
            assert!(
                !(alive && runtime),
                "runtime {pid} of {} outlived the run",
                entry.path().display()
            );
        }
    }

    eprintln!("--- step: a sandbox changed owner and kept its workload");
    for f in ["\"f\":\"kill-supervisor\"", "\"f\":\"pause-supervisor\""] {
        assert!(history.contains(f), "history has no {f} event");
    }
    // sandbox -> (term, pid) pairs seen in linearizable views.
    let mut seen: BTreeMap<String, BTreeSet<(u64, u64)>> = BTreeMap::new();
    for line in history.lines() {
        let Ok(e) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if e["type"] != "ok" {
            continue;
        }
        let views: Vec<&serde_json::Value> = match e["f"].as_str() {
            Some("status") => e["value"]["sandboxes"]
                .as_array()
                .map(|a| a.iter().collect())
                .unwrap_or_default(),
            Some("get") => vec![&e["value"]],
            _ => Vec::new(),
        };
        for v in views {
            let pid = v["observed"]
                .as_str()
                .and_then(|o| serde_json::from_str::<serde_json::Value>(o).ok())
                .and_then(|o| o["pid"].as_u64());
            if let (Some(sandbox), Some(term), Some(pid)) =
                (v["sandbox"].as_str(), v["term"].as_u64(), pid)
            {
                seen.entry(sandbox.to_string())
                    .or_default()
                    .insert((term, pid));
            }
        }
    }
    let survived = seen.values().any(|s| {
        let pids: BTreeSet<u64> = s.iter().map(|(_, p)| *p).collect();
        s.iter().any(|(t, _)| *t >= 2) && pids.len() == 1
    });
    assert!(
        survived,
        "no sandbox was seen reporting its workload after a takeover: {seen:?}"
    );
}

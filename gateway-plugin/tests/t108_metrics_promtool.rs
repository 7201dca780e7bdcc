//! Every `/metrics` a cluster serves is valid Prometheus exposition, as
//! Prometheus' own checker judges it (`promtool check metrics`, from
//! Debian's `prometheus` package, which `scripts/test-deps.sh` installs).
//!
//! - given: 3 gateways with HTTP endpoints and one supervisor, a sandbox
//!   created and an object written (so the per-call, raft and pool
//!   families all have series)
//! - when: each gateway's and the supervisor's `/metrics` is read
//! - then: `promtool check metrics` reports nothing (no error, no lint
//!   warning: units, `_total` counters, help text), and the families the
//!   issue names are there with units: `grpc_server_handling_seconds` per
//!   service, method and code, the log fsync histogram, replication lag per
//!   peer on the leader, pool drains and stale reports, the supervisor's
//!   stream state (attached); and every family a query of the Grafana
//!   dashboard names is exported by a gateway or the supervisor
//!
//! Without promtool the test fails when `CI=true` or as root (CI runs as
//! root, after `scripts/test-deps.sh`; as the chart tests do), and is
//! skipped otherwise, counted in `$OPENSHELL_SKIP_LOG`. It installs nothing
//! itself. `scripts/check-metrics.sh` goes
//! further: Debian's Prometheus scrapes a dev cluster and answers every
//! query of the Grafana dashboard.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use testkit::gateway::*;
use testkit::ports::free_port;
use testkit::supervisor::{create_sandbox, http_get, start_supervisors, KillUnder, FAST_TIMING};
use testkit::TestResult;

/// `promtool`, if installed (Debian puts it in /usr/bin).
fn promtool() -> Option<String> {
    let found = Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some("promtool".into());
    }
    // CI runs as root, after scripts/test-deps.sh: missing there is a
    // failure, never a pass.
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    assert!(
        !ci && !testkit::root::is_root(),
        "promtool is missing (CI={}, root={}): run scripts/test-deps.sh as root (it installs Debian's prometheus)",
        ci,
        testkit::root::is_root()
    );
    eprintln!("SKIPPED: promtool is missing (apt-get install prometheus, or scripts/test-deps.sh)");
    if let Some(path) = std::env::var_os("OPENSHELL_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "t108_metrics_promtool (no promtool)");
        }
    }
    None
}

/// `promtool check metrics` of `text`: its output, empty when clean.
fn check(promtool: &str, text: &str) -> TestResult<(bool, String)> {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or("promtool stdin")?
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.success() && said.trim().is_empty(), said))
}

/// The `/metrics` text at `addr`.
async fn metrics(addr: &str) -> String {
    let (code, body) = http_get(addr, "/metrics").await;
    assert_eq!(code, 200, "/metrics of {addr}: {body}");
    body
}

/// Every metric family the Grafana dashboard's queries name (histogram
/// series suffixes removed).
fn dashboard_families() -> TestResult<std::collections::BTreeSet<String>> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../helm/openshell-gateway/dashboards/openshell.json"
    );
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let mut exprs = Vec::new();
    let mut stack = vec![&dashboard["panels"]];
    while let Some(panels) = stack.pop() {
        for panel in panels.as_array().into_iter().flatten() {
            stack.push(&panel["panels"]);
            for target in panel["targets"].as_array().into_iter().flatten() {
                exprs.push(target["expr"].as_str().unwrap_or_default().to_string());
            }
        }
    }
    assert!(
        exprs.len() > 30,
        "the dashboard has {} queries",
        exprs.len()
    );
    let mut families = std::collections::BTreeSet::new();
    for expr in &exprs {
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("openshell_") || word.starts_with("grpc_server_") {
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| word.strip_suffix(s))
                    .unwrap_or(word);
                families.insert(family.to_string());
            }
        }
    }
    Ok(families)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metrics_endpoint_passes_promtool() -> TestResult {
    let Some(promtool) = promtool() else {
        return Ok(());
    };
    let cluster = Cluster::start_each(3, FAST_TIMING, |_| {
        vec!["--http-listen".into(), format!("127.0.0.1:{}", free_port())]
    });
    let _cleanup = KillUnder(cluster.root.path().to_path_buf());
    let leader = cluster.wait_leader("bootstrap").await;
    let gateways: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();

    eprintln!("--- step: a supervisor attaches, a sandbox and an object are written");
    let supervisors = start_supervisors(&cluster, &gateways, &["s1"]).await;
    create_sandbox(&cluster, "metrics-1").await;
    put(cluster.get(leader), "metrics-object", "v").await?;
    // One scrape interval of the gateways' own refresh is not needed (the
    // text is computed per request); the supervisor's stream state is.
    tokio::time::sleep(Duration::from_millis(500)).await;

    eprintln!("--- step: promtool check metrics on every endpoint");
    let mut texts = Vec::new();
    for node in &cluster.nodes {
        let addr = node
            .http_addr()
            .unwrap_or_else(|| panic!("node {} has no --http-listen", node.id));
        texts.push((format!("gateway {}", node.id), metrics(&addr).await));
    }
    texts.push(("supervisor s1".into(), metrics(&supervisors[0].http).await));
    for (who, text) in &texts {
        let (clean, said) = check(&promtool, text)?;
        assert!(
            clean,
            "promtool check metrics on {who}:\n{said}\n--- text:\n{text}"
        );
    }

    eprintln!("--- step: the families the issue names are there");
    let leader_text = &texts[(leader - 1) as usize].1;
    assert!(
        leader_text.contains("openshell_raft_replication_lag_entries{peer="),
        "leader {leader} shows replication lag per peer:\n{leader_text}"
    );
    let gateways_text: String = texts[..3].iter().map(|(_, t)| t.as_str()).collect();
    for family in [
        "# TYPE grpc_server_handling_seconds histogram",
        "# TYPE grpc_server_handled_total counter",
        "# TYPE openshell_raft_log_fsync_duration_seconds histogram",
        "# TYPE openshell_raft_batch_commands histogram",
        "# TYPE openshell_raft_leader_changes_total counter",
        "# TYPE openshell_raft_snapshot_build_duration_seconds histogram",
        "# TYPE openshell_pool_drain_duration_seconds histogram",
        "# TYPE openshell_pool_takeovers_total counter",
        "# TYPE openshell_pool_grants_issued_total counter",
        "openshell_pool_stale_reports_refused_total{reason=\"term\"}",
        "grpc_method=\"CreateSandbox\"",
        "openshell_pool_sandboxes{phase=\"assigned\"}",
    ] {
        assert!(
            gateways_text.contains(family),
            "no gateway's /metrics has {family}:\n{gateways_text}"
        );
    }
    eprintln!("--- step: every family the dashboard queries is exported");
    let exported: String = texts.iter().map(|(_, t)| t.as_str()).collect();
    for family in dashboard_families()? {
        assert!(
            exported.contains(&format!("# TYPE {family} ")),
            "the dashboard queries {family}, which no endpoint exports"
        );
    }
    let supervisor_text = &texts[3].1;
    assert!(
        supervisor_text
            .lines()
            .any(|l| l == "openshell_supervisor_stream_state{state=\"attached\"} 1"),
        "s1 is attached:\n{supervisor_text}"
    );
    Ok(())
}

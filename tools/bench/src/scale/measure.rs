//! What the scale run reads from a gateway process: its resident memory
//! (`VmRSS`) and CPU time from `/proc`, counters from `/metrics`, and
//! `/readyz`, over plain HTTP on the port every gateway of the run serves
//! its endpoints on ([`HTTP_PORT`], inside its own namespace).

use std::time::{Duration, Instant};

use jepsen::cluster::{Cluster, Node};

/// Port of `/healthz`, `/readyz` and `/metrics` (`--http-listen
/// 0.0.0.0:7080` in each gateway's namespace).
pub const HTTP_PORT: u16 = 7080;

/// Sandbox records the push passes read (`/metrics`).
pub const EXAMINED: &str = "openshell_pool_push_sandboxes_examined_total";
/// Push passes (`/metrics`).
pub const PASSES: &str = "openshell_pool_push_passes_total";

/// `ip:port` of `node`'s HTTP endpoints.
pub fn http_addr(node: &Node) -> String {
    let ip = node
        .addr
        .rsplit_once(':')
        .map_or(node.addr.as_str(), |(ip, _)| ip);
    format!("{ip}:{HTTP_PORT}")
}

/// `GET path` on `node`'s HTTP endpoints: (status code, body); code 0 when
/// it cannot be reached.
pub async fn get(node: &Node, path: &str) -> (u16, String) {
    testkit::supervisor::http_get(&http_addr(node), path).await
}

/// One counter or gauge of `node`'s `/metrics` (None: unreachable or
/// absent).
pub async fn metric(node: &Node, name: &str) -> Option<f64> {
    let (code, body) = get(node, "/metrics").await;
    if code != 200 {
        return None;
    }
    body.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (key, value) = l.split_once(' ')?;
        (key == name).then(|| value.trim().parse::<f64>().ok())?
    })
}

/// Coordinator steps (`/metrics`; the leader's).
pub const STEPS: &str = "openshell_pool_coordinator_steps_total";
/// Sandbox records the coordinator's steps read (`/metrics`).
pub const STEP_EXAMINED: &str = "openshell_pool_coordinator_sandboxes_examined_total";
/// Commands carried by the log entries a gateway's batcher proposed: the
/// histogram's sum and count (`/metrics`).
pub const BATCH_COMMANDS: (&str, &str) = (
    "openshell_raft_batch_commands_sum",
    "openshell_raft_batch_commands_count",
);
/// Size of the latest snapshot (`/metrics`).
pub const SNAPSHOT_SIZE: &str = "openshell_raft_snapshot_size_bytes";
/// Snapshot builds: the histogram's sum (seconds) and count (`/metrics`).
pub const SNAPSHOT_BUILD: (&str, &str) = (
    "openshell_raft_snapshot_build_duration_seconds_sum",
    "openshell_raft_snapshot_build_duration_seconds_count",
);

/// Two counters summed over every running gateway.
pub async fn counters(cluster: &Cluster, (a, b): (&str, &str)) -> (u64, u64) {
    let (mut x, mut y) = (0u64, 0u64);
    for node in cluster.nodes.iter().filter(|n| n.is_running()) {
        x += metric(node, a).await.unwrap_or(0.0) as u64;
        y += metric(node, b).await.unwrap_or(0.0) as u64;
    }
    (x, y)
}

/// The push counters summed over every running gateway: (passes, sandbox
/// records examined).
pub async fn push_counters(cluster: &Cluster) -> (u64, u64) {
    counters(cluster, (PASSES, EXAMINED)).await
}

/// Supervisor streams attached to a gateway (`/metrics`).
pub const ATTACHED: &str = "openshell_pool_attached_supervisors";

/// Each gateway's attached supervisor streams, in node order (`None`:
/// unreadable). A gateway's quiet cost is mostly per attached supervisor,
/// and supervisors move when a gateway sends them away or stops answering
/// their pings, so the quiet figures are read beside these.
pub async fn attached_by_node(cluster: &Cluster) -> Vec<Option<u64>> {
    count_by_node(cluster, ATTACHED).await
}

/// Supervisors a gateway sent to other gateways because its heartbeats
/// were not written or not applied (`/metrics`).
pub const SENT_AWAY: &str = "openshell_pool_supervisors_sent_away_total";
/// Takeovers a gateway applied (`/metrics`): every gateway applies the
/// same log, so one never restarted counts every takeover of the run.
pub const TAKEOVERS: &str = "openshell_pool_takeovers_total";
/// A gateway's current raft term (`/metrics`).
pub const RAFT_TERM: &str = "openshell_raft_term";

/// Member beats in a gateway's written heartbeat commands (`/metrics`).
pub const BEATS_WRITTEN: &str = "openshell_pool_heartbeat_beats_written_total";

/// A gateway's heartbeat commands by outcome (`/metrics`, label `outcome`).
pub const HEARTBEAT_COMMANDS: &str = "openshell_pool_heartbeat_commands_total";

/// Each gateway's series of the counter `family` by the value of its one
/// label, in node order (empty: unreadable, or no series).
pub async fn by_label_by_node(
    cluster: &Cluster,
    family: &str,
) -> Vec<std::collections::BTreeMap<String, u64>> {
    let mut out = Vec::with_capacity(cluster.nodes.len());
    for node in &cluster.nodes {
        let (code, body) = get(node, "/metrics").await;
        let mut series = std::collections::BTreeMap::new();
        if code == 200 {
            for line in body.lines() {
                let Some(rest) = line.strip_prefix(family).and_then(|r| r.strip_prefix('{')) else {
                    continue;
                };
                let Some((labels, value)) = rest.split_once("} ") else {
                    continue;
                };
                let Some((_, label)) = labels.split_once('=') else {
                    continue;
                };
                if let Ok(v) = value.trim().parse::<f64>() {
                    series.insert(label.trim_matches('"').to_string(), v.max(0.0) as u64);
                }
            }
        }
        out.push(series);
    }
    out
}

/// One counter or gauge of a count on each gateway, in node order
/// (`None`: unreadable).
pub async fn count_by_node(cluster: &Cluster, name: &str) -> Vec<Option<u64>> {
    let mut out = Vec::with_capacity(cluster.nodes.len());
    for node in &cluster.nodes {
        // A count: never negative, never fractional.
        out.push(metric(node, name).await.map(|v| v.max(0.0) as u64));
    }
    out
}

/// The coordinator counters summed over every running gateway: (steps,
/// sandbox records examined).
pub async fn coordinator_counters(cluster: &Cluster) -> (u64, u64) {
    counters(cluster, (STEPS, STEP_EXAMINED)).await
}

/// One node's histogram (sum, count) as floats (0 when unreadable).
pub async fn histogram(node: &Node, (sum, count): (&str, &str)) -> (f64, f64) {
    (
        metric(node, sum).await.unwrap_or(0.0),
        metric(node, count).await.unwrap_or(0.0),
    )
}

/// CPU seconds (user + system) `pid` used so far (0 when unreadable).
pub fn cpu_seconds(pid: i32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the line, in clock ticks.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as f64 } else { 100.0 };
    match (ticks(11), ticks(12)) {
        (Some(u), Some(s)) => (u + s) / hz,
        _ => 0.0,
    }
}

/// Every running gateway's CPU seconds so far, by node (0 for one that is
/// not running).
pub fn cpu_by_node(cluster: &Cluster) -> Vec<f64> {
    cluster
        .nodes
        .iter()
        .map(|n| n.pid().map_or(0.0, cpu_seconds))
        .collect()
}

/// Waits until `node` answers `/readyz` 200; the time waited (None: not
/// within `within`). Polled every 20 ms.
pub async fn wait_ready(node: &Node, started: Instant, within: Duration) -> Option<Duration> {
    while started.elapsed() < within {
        if get(node, "/readyz").await.0 == 200 {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// The machine's load averages (`/proc/loadavg`'s first three fields).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

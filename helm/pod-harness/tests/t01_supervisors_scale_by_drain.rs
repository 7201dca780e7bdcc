//! The chart, installed and scaled the way an operator does it, through the
//! pod harness (every pod a set of real processes in its own namespaces):
//! 3 gateways and 2 supervisors come up ready, sandboxes run in runtime pods
//! the leader created through the Kubernetes API, and scaling the
//! supervisor Deployment 2 → 1 moves the removed member's sandboxes by
//! drain: its pod drains itself on SIGTERM and leaves, no runtime pod
//! restarts (same pids), no member expires.
//!
//! Needs root (namespaces, mounts) and the test venv (helm-python-sdk):
//! `bash scripts/test-deps.sh`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pod_harness::release::{self, Release};
use serde_json::{json, Value};

/// id → (owner, phase, runtime name) of every sandbox.
fn sandboxes(status: &Value) -> BTreeMap<String, (String, String, String)> {
    status["sandboxes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| {
            Some((
                s["id"].as_str()?.to_string(),
                (
                    s["owner"].as_str().unwrap_or_default().to_string(),
                    s["phase"].as_str().unwrap_or_default().to_string(),
                    s["runtime_name"].as_str().unwrap_or_default().to_string(),
                ),
            ))
        })
        .collect()
}

/// id → state of every member.
fn members(status: &Value) -> BTreeMap<String, String> {
    status["members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| {
            Some((
                m["id"].as_str()?.to_string(),
                m["state"].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// Polls `check` every 500 ms until it returns true or `timeout` passes.
async fn until(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut last = String::new();
    loop {
        match check() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if start.elapsed() > timeout {
            anyhow::bail!("{what}: not within {timeout:?} (last error: {last})");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn supervisors_scale_down_by_drain_without_restarting_a_workload() {
    if testkit::skip_without_root("pod-harness t01") {
        return;
    }
    let workspace = testkit::bins::workspace_root();
    let bin_dir = testkit::bins::gateway_bin()
        .parent()
        .expect("bin dir")
        .to_path_buf();
    let values = json!({"gateway": {"replicas": 3}, "supervisor": {"replicas": 2}});
    let manifests = release::render(&workspace, &values).expect("render the chart");
    let root = tempfile::tempdir().expect("tempdir");
    let logs = root.path().join("pods");
    let rel = Release::start("ph01", root.path().to_path_buf(), bin_dir, manifests)
        .await
        .expect("start the release");
    let result = scenario(&rel).await;
    if let Err(e) = &result {
        let _ = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "for f in {}/*/*.log; do echo \"== $f\"; tail -n 25 \"$f\"; done",
                logs.display()
            ))
            .status();
        eprintln!("scenario failed: {e:#}");
    }
    rel.stop().await;
    result.expect("scenario");
}

async fn scenario(rel: &Release) -> anyhow::Result<()> {
    until(
        "3 gateways and 2 supervisors ready",
        Duration::from_secs(180),
        || Ok(rel.ready_gateways() == 3 && rel.ready_supervisors() == 2),
    )
    .await?;
    let raft = rel.raft_status()?;
    anyhow::ensure!(
        raft["voters"].as_array().map(Vec::len) == Some(3),
        "voters: {raft}"
    );

    for i in 1..=4 {
        rel.cli(&["sandbox", "create", "--id", &format!("s{i}")])?;
    }
    // Every sandbox assigned, with a runtime pod the leader created.
    until(
        "4 sandboxes running in runtime pods",
        Duration::from_secs(120),
        || {
            let s = sandboxes(&rel.pool_status()?);
            Ok(s.len() == 4
                && s.values().all(|(owner, phase, runtime)| {
                    !owner.is_empty()
                        && phase == "assigned"
                        && !runtime.is_empty()
                        && rel.runtime_pid(runtime).is_some()
                }))
        },
    )
    .await?;
    let before = sandboxes(&rel.pool_status()?);
    let pids: BTreeMap<String, Option<u32>> = before
        .values()
        .map(|(_, _, r)| (r.clone(), rel.runtime_pid(r)))
        .collect();
    let owners: std::collections::BTreeSet<String> =
        before.values().map(|(o, _, _)| o.clone()).collect();
    eprintln!("before scale-down: {before:?}");

    // kubectl scale deployment --replicas 1: the harness deletes one pod.
    rel.harness
        .with(|c| c.scale_deployment(&release::supervisor_deployment(), 1))?;
    until("one supervisor pod left", Duration::from_secs(60), || {
        Ok(rel
            .pods(|o| matches!(o, pod_harness::cluster::Owner::Deployment(..)))
            .len()
            == 1)
    })
    .await?;
    let survivor =
        rel.pods(|o| matches!(o, pod_harness::cluster::Owner::Deployment(..)))[0].clone();
    let gone: Vec<String> = owners.iter().filter(|o| **o != survivor).cloned().collect();

    until(
        "every sandbox owned by the surviving member, by drain",
        Duration::from_secs(90),
        || {
            let s = sandboxes(&rel.pool_status()?);
            Ok(s.len() == 4
                && s.values()
                    .all(|(owner, phase, _)| *owner == survivor && phase == "assigned"))
        },
    )
    .await?;
    let status = rel.pool_status()?;
    let after = sandboxes(&status);
    let m = members(&status);
    for (id, (_, _, runtime)) in &after {
        anyhow::ensure!(
            before[id].2 == *runtime,
            "sandbox {id}: runtime changed from {} to {runtime}",
            before[id].2
        );
        anyhow::ensure!(
            rel.runtime_pid(runtime) == pids[runtime],
            "runtime {runtime}: pid changed ({:?} -> {:?})",
            pids[runtime],
            rel.runtime_pid(runtime)
        );
    }
    for g in &gone {
        let state = m.get(g).cloned().unwrap_or_default();
        anyhow::ensure!(
            state != "expired",
            "member {g} expired instead of leaving: {m:?}"
        );
    }
    eprintln!("after scale-down: {after:?}; members {m:?}");
    Ok(())
}

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
use std::sync::Arc;
use std::time::Duration;

mod common;

use pod_harness::cluster::Owner;
use pod_harness::release::{self, members, sandboxes, until, Release};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn supervisors_scale_down_by_drain_without_restarting_a_workload() {
    common::run(
        "pod-harness t01",
        "ph01",
        json!({"gateway": {"replicas": 3}, "supervisor": {"replicas": 2}}),
        scenario,
    )
    .await;
}

async fn scenario(rel: Arc<Release>) -> anyhow::Result<()> {
    let rel: &Release = &rel;
    until(
        "3 gateways and 2 supervisors ready",
        Duration::from_secs(180),
        || Ok(rel.ready_gateways() == 3 && rel.ready_supervisors() == 2),
    )
    .await?;
    let voters = release::voters(&rel.raft_status()?);
    anyhow::ensure!(voters == [1, 2, 3], "voters: {voters:?}");

    for i in 1..=4 {
        rel.cli(&["sandbox", "create", "--id", &format!("s{i}")])?;
    }
    until(
        "4 sandboxes running in runtime pods",
        Duration::from_secs(120),
        || {
            let s = sandboxes(&rel.pool_status()?);
            Ok(s.len() == 4
                && s.values().all(|v| {
                    !v.owner.is_empty()
                        && v.phase == "assigned"
                        && rel.runtime_pid(&v.runtime).is_some()
                }))
        },
    )
    .await?;
    let before = sandboxes(&rel.pool_status()?);
    let pids: BTreeMap<String, Option<u32>> = before
        .values()
        .map(|v| (v.runtime.clone(), rel.runtime_pid(&v.runtime)))
        .collect();
    let owners: std::collections::BTreeSet<String> =
        before.values().map(|v| v.owner.clone()).collect();
    anyhow::ensure!(
        owners.len() == 2,
        "both supervisors should own sandboxes: {before:?}"
    );
    eprintln!("before scale-down: {before:?}");

    // kubectl scale deployment --replicas 1: the controller deletes one pod.
    rel.harness
        .with(|c| c.scale_deployment(&release::supervisor_deployment(), 1))?;
    until("one supervisor pod left", Duration::from_secs(60), || {
        Ok(rel.pods(|o| matches!(o, Owner::Deployment(..))).len() == 1)
    })
    .await?;
    let survivor = rel.pods(|o| matches!(o, Owner::Deployment(..)))[0].clone();

    until(
        "every sandbox owned by the surviving member",
        Duration::from_secs(90),
        || {
            let s = sandboxes(&rel.pool_status()?);
            Ok(s.len() == 4
                && s.values()
                    .all(|v| v.owner == survivor && v.phase == "assigned"))
        },
    )
    .await?;
    let status = rel.pool_status()?;
    let after = sandboxes(&status);
    let m = members(&status);
    for (id, v) in &after {
        anyhow::ensure!(
            before[id].runtime == v.runtime,
            "sandbox {id}: runtime changed from {} to {}",
            before[id].runtime,
            v.runtime
        );
        anyhow::ensure!(
            rel.runtime_pid(&v.runtime) == pids[&v.runtime],
            "runtime {}: pid changed ({:?} -> {:?})",
            v.runtime,
            pids[&v.runtime],
            rel.runtime_pid(&v.runtime)
        );
    }
    for gone in owners.iter().filter(|o| **o != survivor) {
        let state = m.get(gone).map(|(s, _)| s.clone()).unwrap_or_default();
        anyhow::ensure!(
            state == "leaving",
            "member {gone} should have left by drain, is {state:?}: {m:?}"
        );
    }
    let killed = rel.harness.with(|c| c.grace_kills.clone());
    anyhow::ensure!(
        killed.is_empty(),
        "pods outlived their grace period (SIGKILL): {killed:?}"
    );
    eprintln!("after scale-down: {after:?}; members {m:?}");
    Ok(())
}

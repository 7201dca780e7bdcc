//! Supervisor Deployment changes through the pod harness (a documented
//! command, not in CI: `cargo test -p pod-harness -- --ignored`):
//! - replicas 1 → 2 adds a member and touches no other: the first member
//!   keeps its incarnation, every sandbox its owner and term;
//! - a rolling update (`kubectl rollout restart`: a new template
//!   annotation) with `maxSurge: 1, maxUnavailable: 0` keeps every sandbox
//!   supervised at every sample: its owner is a live member (active, or
//!   draining while it still supervises), it never fails, and a move (phase
//!   `recovering` until the new owner acknowledges) lasts less than
//!   `MAX_MOVE`; every old pod leaves by drain; no runtime pod restarts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest a sandbox may stay `recovering` (moved to a live owner that
/// has not acknowledged yet) during the rollout.
const MAX_MOVE: Duration = Duration::from_secs(10);

mod common;

use pod_harness::cluster::Owner;
use pod_harness::release::{self, members, sandboxes, until, Release};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "documented command (helm/README.md): cargo test -p pod-harness -- --ignored"]
async fn supervisors_grow_without_moving_and_roll_without_unsupervised_sandboxes() {
    common::run(
        "pod-harness t03",
        "ph03",
        json!({"gateway": {"replicas": 3}, "supervisor": {"replicas": 1}}),
        scenario,
    )
    .await;
}

fn supervisor_pods(rel: &Release) -> Vec<String> {
    rel.pods(|o| matches!(o, Owner::Deployment(..)))
}

async fn scenario(rel: Arc<Release>) -> anyhow::Result<()> {
    let rel: &Release = &rel;
    let deployment = release::supervisor_deployment();
    until(
        "3 gateways and 1 supervisor ready",
        Duration::from_secs(180),
        || Ok(rel.ready_gateways() == 3 && rel.ready_supervisors() == 1),
    )
    .await?;
    for i in 1..=3 {
        rel.cli(&["sandbox", "create", "--id", &format!("s{i}")])?;
    }
    until("3 sandboxes assigned", Duration::from_secs(120), || {
        let s = sandboxes(&rel.pool_status()?);
        Ok(s.len() == 3
            && s.values()
                .all(|v| v.phase == "assigned" && rel.runtime_pid(&v.runtime).is_some()))
    })
    .await?;
    let first = rel.pool_status()?;
    let (before, members_before) = (sandboxes(&first), members(&first));
    let pids: BTreeMap<String, Option<u32>> = before
        .values()
        .map(|v| (v.runtime.clone(), rel.runtime_pid(&v.runtime)))
        .collect();

    // 1 → 2: a new member; nothing else moves.
    rel.harness.with(|c| c.scale_deployment(&deployment, 2))?;
    until("2 supervisors ready", Duration::from_secs(90), || {
        Ok(rel.ready_supervisors() == 2)
    })
    .await?;
    let grown = rel.pool_status()?;
    anyhow::ensure!(
        sandboxes(&grown) == before,
        "sandboxes moved when a member was added: {:?} -> {:?}",
        before,
        sandboxes(&grown)
    );
    for (id, m) in &members_before {
        anyhow::ensure!(
            members(&grown).get(id) == Some(m),
            "member {id} changed: {m:?} -> {:?}",
            members(&grown).get(id)
        );
    }
    eprintln!("grown to 2 members; nothing moved");

    // Rolling update: new template, maxSurge 1, maxUnavailable 0.
    let old_pods = supervisor_pods(rel);
    rel.harness.with(|c| {
        let d = c
            .manifests
            .deployments
            .get_mut(&deployment)
            .expect("deployment");
        let t = d
            .spec
            .as_mut()
            .expect("spec")
            .template
            .metadata
            .get_or_insert_with(Default::default);
        t.annotations
            .get_or_insert_with(Default::default)
            .insert("kubectl.kubernetes.io/restartedAt".into(), "now".into());
    });
    let start = Instant::now();
    let mut samples = 0;
    let mut moving_since: BTreeMap<String, Instant> = BTreeMap::new();
    let mut moves = 0;
    loop {
        let status = rel.pool_status()?;
        let m = members(&status);
        for (id, v) in sandboxes(&status) {
            let state = m
                .get(&v.owner)
                .map(|(s, _)| s.as_str())
                .unwrap_or("missing");
            anyhow::ensure!(
                matches!(state, "active" | "draining") && v.phase != "failed",
                "sandbox {id} unsupervised during the rollout: owner {} is {state}, phase {}",
                v.owner,
                v.phase
            );
            if v.phase == "recovering" {
                let since = *moving_since.entry(id.clone()).or_insert_with(|| {
                    moves += 1;
                    Instant::now()
                });
                anyhow::ensure!(
                    since.elapsed() < MAX_MOVE,
                    "sandbox {id} has been moving to {} for {:?}",
                    v.owner,
                    since.elapsed()
                );
            } else {
                moving_since.remove(&id);
            }
        }
        samples += 1;
        let pods = supervisor_pods(rel);
        if pods.len() == 2
            && pods.iter().all(|p| !old_pods.contains(p))
            && rel.ready_supervisors() == 2
        {
            break;
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(240),
            "rollout did not finish: pods {pods:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!("rollout done after {samples} samples ({moves} moves seen in flight), every sandbox supervised");
    until(
        "every sandbox on a new pod",
        Duration::from_secs(60),
        || {
            let s = sandboxes(&rel.pool_status()?);
            let pods = supervisor_pods(rel);
            Ok(s.values()
                .all(|v| pods.contains(&v.owner) && v.phase == "assigned"))
        },
    )
    .await?;
    let status = rel.pool_status()?;
    for old in &old_pods {
        let state = members(&status)
            .get(old)
            .map(|(s, _)| s.clone())
            .unwrap_or_default();
        anyhow::ensure!(
            state == "leaving",
            "old member {old} should have left by drain, is {state:?}"
        );
    }
    for v in sandboxes(&status).values() {
        anyhow::ensure!(
            rel.runtime_pid(&v.runtime) == pids[&v.runtime],
            "runtime {} restarted",
            v.runtime
        );
    }
    Ok(())
}

//! Gateway StatefulSet scaling through the pod harness (a documented
//! command, not in CI: `cargo test -p pod-harness -- --ignored`): replicas
//! 3 → 5 makes the two new pods voters (the leader's autopilot adds each as
//! a learner, then promotes it once caught up); 5 → 3 removes the two
//! voters before their pods stop. Sandboxes are created through the client
//! Service all along; every acknowledged create is there at the end.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use pod_harness::cluster::Owner;
use pod_harness::release::{self, sandboxes, until, voters, Release};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "documented command (helm/README.md): cargo test -p pod-harness -- --ignored"]
async fn gateways_scale_3_5_3_keeps_every_acknowledged_write() {
    common::run(
        "pod-harness t02",
        "ph02",
        json!({"gateway": {"replicas": 3}, "supervisor": {"replicas": 1}}),
        scenario,
    )
    .await;
}

async fn scenario(rel: Arc<Release>) -> anyhow::Result<()> {
    let gateways = release::gateway_set();
    until(
        "3 gateways and the supervisor ready",
        Duration::from_secs(180),
        || Ok(rel.ready_gateways() == 3 && rel.ready_supervisors() == 1),
    )
    .await?;
    anyhow::ensure!(voters(&rel.raft_status()?) == [1, 2, 3]);

    // A writer creating a sandbox every second through the client Service.
    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (rel, acknowledged, stop) = (rel.clone(), acknowledged.clone(), stop.clone());
        tokio::task::spawn_blocking(move || {
            let mut failures = Vec::new();
            for i in 0.. {
                // Below the one supervisor's capacity (16): a create beyond it is refused
                // (`no eligible member`), which is not what this test is about.
                if stop.load(Ordering::SeqCst) || i >= 14 {
                    break;
                }
                let id = format!("w{i}");
                match rel.cli(&["sandbox", "create", "--id", &id]) {
                    Ok(_) => acknowledged.lock().map(|mut a| a.push(id)).unwrap_or(()),
                    Err(e) => failures.push(format!("{id}: {e:#}")),
                }
                std::thread::sleep(Duration::from_millis(300));
            }
            failures
        })
    };

    rel.harness.with(|c| c.scale_statefulset(&gateways, 5))?;
    until("5 voters", Duration::from_secs(180), || {
        Ok(voters(&rel.raft_status()?) == [1, 2, 3, 4, 5])
    })
    .await?;
    until("5 gateways ready", Duration::from_secs(120), || {
        Ok(rel.ready_gateways() == 5)
    })
    .await?;
    eprintln!("grown to 5 voters");

    rel.harness.with(|c| c.scale_statefulset(&gateways, 3))?;
    until("3 voters", Duration::from_secs(120), || {
        Ok(voters(&rel.raft_status()?) == [1, 2, 3])
    })
    .await?;
    until("gateway pods 3 and 4 gone", Duration::from_secs(90), || {
        Ok(rel.pods(|o| matches!(o, Owner::StatefulSet(..))).len() == 3)
    })
    .await?;
    eprintln!("shrunk to 3 voters");
    let killed = rel.harness.with(|c| c.grace_kills.clone());
    anyhow::ensure!(
        killed.is_empty(),
        "pods outlived their grace period (SIGKILL): {killed:?}"
    );

    stop.store(true, Ordering::SeqCst);
    let failures = writer.await?;
    let acked = acknowledged.lock().map(|a| a.clone()).unwrap_or_default();
    let present = sandboxes(&rel.pool_status()?);
    let lost: Vec<&String> = acked
        .iter()
        .filter(|id| !present.contains_key(*id))
        .collect();
    eprintln!(
        "{} creates acknowledged, {} failed ({failures:?}), lost: {lost:?}",
        acked.len(),
        failures.len()
    );
    anyhow::ensure!(!acked.is_empty(), "no write was acknowledged");
    anyhow::ensure!(lost.is_empty(), "acknowledged creates lost: {lost:?}");
    // The demoted nodes are removed as learners on the autopilot's next passes.
    until("no learner left", Duration::from_secs(30), || {
        let raft = rel.raft_status()?;
        Ok(raft["learners"].as_array().is_none_or(Vec::is_empty))
    })
    .await?;
    Ok(())
}

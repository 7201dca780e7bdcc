//! Scenario: many sandboxes created at once, so the leader's write batcher
//! puts several launches (and acknowledgements) into one log entry.
//!
//! - given: three gateways, three supervisors, one attached to each gateway
//!   (two on followers), each already shown its (empty) assignment view
//! - when: 24 sandboxes are created concurrently through all three gateways
//! - then: every one is assigned, started and acknowledged by its owner:
//!   each owner's stream is shown every sandbox it was given, even when the
//!   launch applied in the same entry as another command touching another
//!   sandbox (t31 once saw a sandbox stay `Admitting` forever because the
//!   change journal kept only the last touch of a log index)

use std::time::Duration;

use proto::pool_admin::pool_admin_client::PoolAdminClient;
use proto::pool_admin::CreateSandboxRequest;
use proto::pool_types::{MemberState, SandboxPhase};
use testkit::gateway::*;
use testkit::supervisor::*;
use testkit::TestResult;

/// Sandboxes created at once (three supervisors of capacity 10 hold them).
const SANDBOXES: usize = 24;

/// Creates sandbox `id` through the gateway at `addr` (retried until it
/// answers).
async fn create_at(addr: String, id: String) {
    eventually("create sandbox", || {
        let (addr, id) = (addr.clone(), id.clone());
        async move {
            let channel = test_channel(&addr, 300).await?;
            PoolAdminClient::new(channel)
                .create_sandbox(CreateSandboxRequest {
                    sandbox_id: id,
                    launch_id: String::new(),
                    material_ref: "demo".into(),
                    request_id: String::new(),
                })
                .await?;
            TestResult::Ok(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sandbox_of_a_batched_entry_reaches_its_owner() -> TestResult {
    let (cluster, gateways, _cleanup) = three_gateways(&timing(FAST_TIMING)).await;
    eprintln!("--- step: three supervisors, one on each gateway");
    let mut supervisors: Vec<Supervisor> = ["s1", "s2", "s3"]
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut listed = gateways.clone();
            listed.rotate_left(i);
            let mut s = Supervisor::new(m, listed, cluster.root.path());
            s.listed_order = true;
            s
        })
        .collect();
    for s in &mut supervisors {
        s.start();
    }
    let _logs = LogsOnFailure(&supervisors);
    wait_pool(
        &cluster,
        "three active members",
        Duration::from_secs(30),
        |s| {
            s.members
                .iter()
                .filter(|m| m.state() == MemberState::Active)
                .count()
                == 3
        },
    )
    .await;
    eprintln!("--- step: {SANDBOXES} sandboxes created at once");
    let mut creates = tokio::task::JoinSet::new();
    for i in 0..SANDBOXES {
        creates.spawn(create_at(
            gateways[i % gateways.len()].clone(),
            format!("b{i}"),
        ));
    }
    while let Some(done) = creates.join_next().await {
        done?;
    }
    wait_pool(
        &cluster,
        "every sandbox running and acknowledged",
        Duration::from_secs(60),
        |s| {
            (0..SANDBOXES).all(|i| {
                sandbox(s, &format!("b{i}")).is_some_and(|sb| {
                    sb.phase() == SandboxPhase::Assigned && sb.pid != 0 && sb.acknowledged
                })
            })
        },
    )
    .await;
    Ok(())
}

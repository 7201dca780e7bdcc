//! Scenario 2: supervisors 1 -> 2 -> 1 by drain.
//!
//! - given: three gateways, one supervisor with two demo sandboxes
//! - when: a second supervisor joins, the first is drained (both sessions
//!   move), and then stopped
//! - then: the workloads keep their PIDs, and a sandbox created after the
//!   downscale runs on the remaining supervisor. The drain time is printed.

use std::time::{Duration, Instant};

use proto::pool_admin::{
    start_supervisor_pool_operation_request, StartSupervisorPoolOperationRequest,
};
use proto::pool_types::{MemberState, SandboxPhase};
use testkit::gateway::*;
use testkit::supervisor::*;
use testkit::TestResult;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_move_by_drain_with_pids_intact() -> TestResult {
    let (cluster, gateways, _cleanup) = three_gateways(&timing(FAST_TIMING)).await;
    let mut s1 = Supervisor::new("s1", gateways.clone(), cluster.root.path());
    s1.start();
    wait_pool(&cluster, "s1 active", Duration::from_secs(20), |s| {
        s.members
            .iter()
            .any(|m| m.id == "s1" && m.state() == MemberState::Active)
    })
    .await;
    create_sandbox(&cluster, "a").await;
    create_sandbox(&cluster, "b").await;
    let before = wait_pool(
        &cluster,
        "both on s1 and reported",
        Duration::from_secs(30),
        |s| {
            s.sandboxes.len() == 2
                && s.sandboxes.iter().all(|sb| {
                    sb.owner == "s1" && sb.phase() == SandboxPhase::Assigned && sb.pid != 0
                })
        },
    )
    .await;

    eprintln!("--- step: scale 1 -> 2");
    let mut s2 = Supervisor::new("s2", gateways.clone(), cluster.root.path());
    s2.start();
    wait_pool(&cluster, "s2 active", Duration::from_secs(20), |s| {
        s.members
            .iter()
            .any(|m| m.id == "s2" && m.state() == MemberState::Active)
    })
    .await;

    eprintln!("--- step: drain s1 (2 -> 1)");
    let started = Instant::now();
    let node = cluster
        .nodes
        .iter()
        .find(|n| n.is_running())
        .ok_or("no gateway")?;
    pool_admin(node)
        .await?
        .start_supervisor_pool_operation(StartSupervisorPoolOperationRequest {
            request_id: String::new(),
            operation_id: "drain-s1".into(),
            kind: Some(start_supervisor_pool_operation_request::Kind::DrainMember(
                "s1".into(),
            )),
            max_parallel: 2,
        })
        .await?;
    let after = wait_pool(&cluster, "drain succeeded", Duration::from_secs(30), |s| {
        s.operations
            .iter()
            .any(|o| o.id == "drain-s1" && o.phase == "succeeded")
    })
    .await;
    println!("drain of 2 sessions: {} ms", started.elapsed().as_millis());
    let (code, body) = s1.readyz().await;
    assert_eq!(code, 503, "a draining supervisor must not be ready: {body}");
    for sb in &after.sandboxes {
        assert_eq!(sb.owner, "s2");
        let b = sandbox(&before, &sb.id).ok_or("missing")?;
        assert!(alive(b.pid), "{}: workload {} died", sb.id, b.pid);
        let (_, by) = match read_counter(&cluster, &sb.id).await {
            Ok(r) => r,
            Err(e) => panic!(
                "exec in {} failed: {e}; pool: {:#?}",
                sb.id,
                pool_status(&cluster).await.ok()
            ),
        };
        assert_eq!(by, "s2");
    }
    let now = pool_status(&cluster).await?;
    for sb in &now.sandboxes {
        let b = sandbox(&before, &sb.id).ok_or("missing")?;
        if sb.pid != 0 {
            assert_eq!(
                (sb.pid, sb.started_at_unix_ms),
                (b.pid, b.started_at_unix_ms),
                "{} changed workload",
                sb.id
            );
        }
    }

    eprintln!("--- step: stop s1; a new sandbox runs on s2");
    s1.kill9();
    create_sandbox(&cluster, "c").await;
    wait_pool(&cluster, "c assigned on s2", Duration::from_secs(30), |s| {
        sandbox(s, "c")
            .map(|sb| sb.owner == "s2" && sb.phase() == SandboxPhase::Assigned && sb.pid != 0)
            .unwrap_or(false)
    })
    .await;
    let (counter, by) = eventually("exec in c", || read_counter(&cluster, "c")).await;
    assert_eq!(by, "s2");
    let (later, _) = eventually("exec in c again", || read_counter(&cluster, "c")).await;
    assert!(later >= counter);
    Ok(())
}

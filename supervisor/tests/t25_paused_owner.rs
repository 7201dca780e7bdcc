//! Scenario 6: a paused owner (`kill -STOP`) is taken over.
//!
//! - given: three gateways, two supervisors, a demo sandbox on one of them
//! - when: its owner is paused past the TTL, taken over, then resumed
//! - then: the runtime refuses the old owner's grant and session (the new
//!   epoch fenced it), the gateway does not give it the sandbox back, its late
//!   reports do not count, and exec still runs through the new owner; the
//!   resumed supervisor re-joins as a new incarnation and is ready again

use std::time::Duration;

use proto::grant::GrantSigner;
use proto::pool_types::{MemberState, SandboxPhase};
use proto::sandbox_runtime::{ActivateRequest, Grant, RuntimeStatusRequest};
use testkit::supervisor::*;
use testkit::TestResult;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumed_owner_is_fenced_everywhere() -> TestResult {
    let (cluster, gateways, _cleanup) = three_gateways(FAST_TIMING).await;
    let mut supervisors: Vec<Supervisor> = ["s1", "s2"]
        .iter()
        .map(|m| Supervisor::new(m, gateways.clone(), cluster.root.path()))
        .collect();
    for s in &mut supervisors {
        s.start();
    }
    wait_pool(
        &cluster,
        "two active members",
        Duration::from_secs(20),
        |s| {
            s.members
                .iter()
                .filter(|m| m.state() == MemberState::Active)
                .count()
                == 2
        },
    )
    .await;
    create_sandbox(&cluster, "p").await;
    let before = wait_pool(&cluster, "p running", Duration::from_secs(30), |s| {
        sandbox(s, "p")
            .map(|sb| sb.phase() == SandboxPhase::Assigned && sb.pid != 0)
            .unwrap_or(false)
    })
    .await;
    let old = sandbox(&before, "p").cloned().ok_or("missing")?;
    let owner = supervisors
        .iter()
        .find(|s| s.member == old.owner)
        .ok_or("owner missing")?;
    let other = if old.owner == "s1" { "s2" } else { "s1" };

    eprintln!(
        "--- step: pause {} (kill -STOP) until it is taken over",
        old.owner
    );
    owner.signal("-STOP");
    let taken = wait_pool(&cluster, "taken over", Duration::from_secs(20), |s| {
        sandbox(s, "p")
            .map(|sb| sb.owner == other && sb.phase() == SandboxPhase::Assigned && sb.acknowledged)
            .unwrap_or(false)
    })
    .await;
    let new = sandbox(&taken, "p").cloned().ok_or("missing")?;
    assert!(new.credential_epoch > old.credential_epoch && new.term > old.term);

    eprintln!("--- step: resume it (kill -CONT)");
    owner.signal("-CONT");
    tokio::time::sleep(Duration::from_secs(3)).await;

    eprintln!("--- step: the runtime fenced the old owner; it refuses the old epoch's grant");
    let mut runtime = testkit::supervisor::runtime_client(&cluster, "p").await?;
    let status = runtime.status(RuntimeStatusRequest {}).await?.into_inner();
    assert_eq!(status.active_member, other, "{status:?}");
    assert_eq!(status.credential_epoch, new.credential_epoch);
    // The gateways of cluster "test" sign with its development key; re-sign
    // the old owner's grant exactly as it was.
    let signer = GrantSigner::insecure_development_key("test");
    let stale = signer.sign(&Grant {
        sandbox_id: "p".into(),
        generation: old.generation,
        member_id: old.owner.clone(),
        incarnation: old.owner_incarnation,
        term: old.term,
        credential_epoch: old.credential_epoch,
        log_index: 0,
        release: false,
    });
    let refused = runtime
        .activate(ActivateRequest { grant: Some(stale) })
        .await
        .err()
        .ok_or("old grant accepted")?;
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused}");
    let log = owner.log();
    assert!(
        log.contains("fenced") || log.contains("relinquishing"),
        "the old owner did not notice: {log}"
    );

    eprintln!("--- step: the gateway keeps the new owner; late reports do not count");
    let after = pool_status(&cluster).await?;
    let now = sandbox(&after, "p").ok_or("missing")?;
    assert_eq!(
        (now.owner.as_str(), now.term, now.credential_epoch),
        (other, new.term, new.credential_epoch)
    );
    assert_eq!(
        (now.pid, now.started_at_unix_ms),
        (old.pid, old.started_at_unix_ms)
    );
    let (_, by) = read_counter(&cluster, "p").await?;
    assert_eq!(by, other);

    eprintln!("--- step: the resumed supervisor re-joins as a new incarnation");
    let rejoined = wait_pool(&cluster, "re-joined", Duration::from_secs(20), |s| {
        s.members.iter().any(|m| {
            m.id == old.owner
                && m.state() == MemberState::Active
                && m.incarnation > old.owner_incarnation
        })
    })
    .await;
    assert!(sandbox(&rejoined, "p").is_some_and(|sb| sb.owner == other));
    let mut ready = (0, String::new());
    for _ in 0..50 {
        ready = owner.readyz().await;
        if ready.0 == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(ready.0, 200, "resumed supervisor not ready: {}", ready.1);
    Ok(())
}

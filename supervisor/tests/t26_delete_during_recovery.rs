//! Scenario 7: delete during recovery wins (I8).
//!
//! - given: gateways with a 3 s recovery deadline, one supervisor with a demo
//!   sandbox
//! - when: the supervisor dies, the sandbox is deleted while it waits for a
//!   new owner, and then a new supervisor joins
//! - then: the sandbox stays deleted, the new supervisor is never given it,
//!   and the workload stops; nothing revives it

use std::time::{Duration, Instant};

use proto::pool_admin::DeleteSandboxRequest;
use proto::pool_types::SandboxPhase;
use testkit::supervisor::*;
use testkit::TestResult;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_sandbox_is_never_revived() -> TestResult {
    let (cluster, gateways, _cleanup) =
        three_gateways(&[FAST_TIMING, &["--recovery-deadline-ms", "3000"]].concat()).await;
    let mut s1 = Supervisor::new("s1", gateways.clone(), cluster.root.path());
    s1.start();
    wait_member(&cluster, "s1", "active").await;
    let pid = running_sandbox(&cluster, "d").await.pid;

    eprintln!("--- step: the owner dies; delete while the sandbox waits for a new owner");
    s1.kill9();
    wait_member(&cluster, "s1", "expired").await;
    let node = cluster
        .nodes
        .iter()
        .find(|n| n.is_running())
        .ok_or("no gateway")?;
    let deleted = pool_admin(node)
        .await?
        .delete_sandbox(DeleteSandboxRequest {
            sandbox_id: "d".into(),
            request_id: String::new(),
        })
        .await?
        .into_inner();
    assert_eq!(deleted.phase(), SandboxPhase::Deleted);

    eprintln!("--- step: a new supervisor joins; nothing revives the sandbox");
    let mut s2 = Supervisor::new("s2", gateways, cluster.root.path());
    s2.start();
    wait_member(&cluster, "s2", "active").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "the deleted sandbox's workload {pid} still runs"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = pool_status(&cluster).await?;
    let d = sandbox(&after, "d").ok_or("missing")?;
    assert_eq!(d.phase(), SandboxPhase::Deleted, "{d:?}");
    assert_ne!(
        d.owner, "s2",
        "the deleted sandbox was given to the new member"
    );
    assert!(
        !s2.log().contains("runtime accepted the grant"),
        "s2 activated something: {}",
        s2.log()
    );
    Ok(())
}

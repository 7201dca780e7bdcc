//! Scenario 5: the recovery deadline.
//!
//! - given: gateways with a 2 s recovery deadline, one supervisor with a demo
//!   sandbox
//! - when: the supervisor is killed and no other member exists
//! - then: after the deadline the runtime stops the workload and pool status
//!   shows the sandbox failed with SupervisorRecoveryFailed

use std::time::{Duration, Instant};

use proto::pool_types::SandboxPhase;
use testkit::supervisor::*;
use testkit::TestResult;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_stops_and_failure_shows_after_the_deadline() -> TestResult {
    let (cluster, gateways, _cleanup) =
        three_gateways(&[FAST_TIMING, &["--recovery-deadline-ms", "2000"]].concat()).await;
    let mut s1 = Supervisor::new("s1", gateways, cluster.root.path());
    s1.start();
    wait_member(&cluster, "s1", "active").await;
    let pid = running_sandbox(&cluster, "lonely").await.pid;

    eprintln!("--- step: kill -9 the only supervisor");
    let killed = Instant::now();
    s1.kill9();
    let failed = wait_pool(
        &cluster,
        "failed with SupervisorRecoveryFailed",
        Duration::from_secs(20),
        |s| {
            sandbox(s, "lonely")
                .map(|sb| sb.phase() == SandboxPhase::Failed)
                .unwrap_or(false)
        },
    )
    .await;
    let sb = sandbox(&failed, "lonely").ok_or("missing")?;
    assert!(sb.failure.contains("SupervisorRecoveryFailed"), "{sb:?}");
    assert!(
        killed.elapsed() >= Duration::from_secs(2),
        "failed before the deadline"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "the workload {pid} still runs past the deadline"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("kill -> failure shown: {} ms", killed.elapsed().as_millis());
    Ok(())
}

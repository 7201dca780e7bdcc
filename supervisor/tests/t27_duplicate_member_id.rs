//! Scenario 8: two supervisor processes started with the same member id (a
//! misconfiguration, or an old Pod still running beside its replacement).
//!
//! - given: three gateways and supervisor A of member s1, joined
//! - when: supervisor B starts with member id s1 (a newer incarnation)
//! - then: B holds the member and keeps it (its incarnation stays the
//!   member's for several seconds: A does not take it back by re-joining
//!   as a newer incarnation); A is told it is stale and reports not ready
//!   naming the stale incarnation; B is ready

use std::time::Duration;

use proto::pool_types::MemberState;
use testkit::supervisor::*;
use testkit::TestResult;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newer_process_keeps_the_member_without_flapping() -> TestResult {
    let (cluster, gateways, _cleanup) = three_gateways(&timing(FAST_TIMING)).await;
    let mut a = Supervisor::new("s1", gateways.clone(), cluster.root.path());
    a.start();
    wait_member(&cluster, "s1", "active").await;
    let first = pool_status(&cluster).await?;
    let a_incarnation = member(&first, "s1").ok_or("s1 missing")?.incarnation;

    eprintln!("--- step: B starts with the same member id");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut b = Supervisor::new("s1", gateways, cluster.root.path());
    b.log_path = cluster.root.path().join("s1-b.log");
    b.start();
    let joined = wait_pool(&cluster, "B joined", Duration::from_secs(20), |s| {
        s.members
            .iter()
            .any(|m| m.id == "s1" && m.incarnation > a_incarnation)
    })
    .await;
    let b_incarnation = member(&joined, "s1").ok_or("s1 missing")?.incarnation;

    eprintln!("--- step: B keeps the member for 5 s");
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let s = pool_status(&cluster).await?;
        let m = member(&s, "s1").ok_or("s1 missing")?;
        assert_eq!(
            (m.incarnation, MemberState::name_of(m.state)),
            (b_incarnation, "active"),
            "the member changed hands: {m:?}\nA's log:\n{}",
            a.log()
        );
    }

    eprintln!("--- step: A is not ready and says why; B is ready");
    let (code, body) = a.readyz().await;
    assert_eq!(code, 503, "A: {body}");
    assert!(
        body.contains("stale incarnation") || body.contains("superseded"),
        "A: {body}"
    );
    let (code, body) = b.readyz().await;
    assert_eq!(code, 200, "B: {body}");
    Ok(())
}

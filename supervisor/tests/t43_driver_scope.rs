//! Issue 27: a leader whose driver cannot see the runtimes fails no healthy
//! sandbox.
//!
//! - given: three gateways, two of them (1, 2) on the process driver's
//!   directory `runtimes/` and one (3) misconfigured onto `elsewhere/`;
//!   gateway 1 leads and its launcher starts and records the runtime of a
//!   demo sandbox `x`, which a supervisor runs
//! - when: gateway 3 becomes the leader and its launcher runs passes with
//!   a list that cannot show `x`'s runtime
//! - then: `x` stays assigned and its runtime process keeps running;
//!   gateway 3 counts one runtime out of its driver's scope
//!   (`openshell_pool_launcher_runtimes_out_of_scope`) and warns once,
//!   naming its scope; once gateway 1 leads again, the runtime survives its
//!   passes (nothing deleted it in between). Before driver scopes, gateway
//!   3's first pass failed `x` as `RuntimeLost: ... is gone` and gateway
//!   1's next pass deleted the runtime, killing a healthy workload.

use std::time::Duration;

use proto::pool_types::SandboxPhase;
use testkit::gateway::{Cluster, Gateway};
use testkit::supervisor::*;
use testkit::TestResult;

const OUT_OF_SCOPE: &str = "openshell_pool_launcher_runtimes_out_of_scope";

/// `x`'s phase and failure as the pool shows them.
async fn phase_of_x(cluster: &Cluster) -> TestResult<(SandboxPhase, String)> {
    let status = pool_status(cluster).await?;
    let x = sandbox(&status, "x").ok_or("x missing")?;
    Ok((x.phase(), x.failure.clone()))
}

/// After four passes of the leader's launcher (one every 500 ms), `x` is
/// still assigned and its runtime process `pid` alive.
async fn assert_x_kept(cluster: &Cluster, pid: u32, leader: &str) -> TestResult {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (phase, failure) = phase_of_x(cluster).await?;
    assert_eq!(phase, SandboxPhase::Assigned, "x under {leader}: {failure}");
    assert!(alive(pid), "x's runtime {pid} stopped under {leader}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_driver_looks_elsewhere_fails_no_healthy_sandbox() -> TestResult {
    // Default timing: a supervisor's TTL (2.25 s) outlasts two leadership
    // transfers on a loaded machine, so x only leaves `assigned` if a
    // launcher fails it.
    let root = tempfile::tempdir()?;
    let nodes: Vec<Gateway> = (1..=3)
        .map(|id| {
            let mut g = Gateway::new(id, root.path(), http_args(id));
            if id == 3 {
                g.runtimes_dir = root.path().join("elsewhere");
            }
            g
        })
        .collect();
    let cluster = Cluster::bootstrap(root, nodes);
    let _cleanup = KillUnder(cluster.root.path().to_path_buf());
    cluster.lead_with(1).await?;
    let gateways: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
    let mut s1 = Supervisor::new("s1", gateways, cluster.root.path());
    s1.start();
    let _logs = LogsOnFailure(std::slice::from_ref(&s1));
    wait_member(&cluster, "s1", "active").await;

    eprintln!("--- step: gateway 1 launches x; s1 runs it");
    let x = running_sandbox(&cluster, "x").await;
    let entry = testkit::runtimes::entry_of(&cluster.runtimes_dir(), "x")?;
    assert_eq!(x.runtime_name, entry.name);
    let pid = entry.pid().ok_or("no runtime pid")?;
    assert!(
        testkit::runtimes::entries_of(&cluster.root.path().join("elsewhere"), "x").is_empty(),
        "gateway 3's directory holds no runtime of x"
    );

    eprintln!("--- step: gateway 3, whose driver looks elsewhere, leads");
    cluster.lead_with(3).await?;
    let g3 = cluster.get(3);
    // Until gateway 3's launcher passed over x, or x left `assigned`.
    let judged = testkit::gateway::eventually("gateway 3's launcher passed over x", || async {
        let (phase, _) = phase_of_x(&cluster).await?;
        match metric(g3, OUT_OF_SCOPE).await {
            _ if phase != SandboxPhase::Assigned => Ok(()),
            1 => Ok(()),
            n => Err(format!("{OUT_OF_SCOPE} = {n}").into()),
        }
    });
    judged.await;
    assert_x_kept(&cluster, pid, "gateway 3").await?;
    assert_eq!(metric(g3, OUT_OF_SCOPE).await, 1);
    let log = std::fs::read_to_string(&g3.log_path)?;
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("another driver scope"))
        .collect();
    assert_eq!(warnings.len(), 1, "gateway 3 warns once: {warnings:?}");
    assert!(warnings[0].contains("process:"), "{}", warnings[0]);
    assert!(
        !log.contains("failing the sandbox"),
        "gateway 3 failed a sandbox"
    );

    eprintln!("--- step: gateway 1 leads again; the runtime survives its passes");
    cluster.lead_with(1).await?;
    assert_x_kept(&cluster, pid, "gateway 1").await?;
    assert!(entry.dir.exists(), "x's runtime entry was deleted");
    assert_eq!(metric(cluster.get(1), OUT_OF_SCOPE).await, 0);
    assert_eq!(
        metric(g3, OUT_OF_SCOPE).await,
        0,
        "gateway 3 no longer leads"
    );
    Ok(())
}

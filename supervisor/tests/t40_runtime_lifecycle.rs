//! Issue 14: runtimes are launched by the raft leader through the sandbox
//! driver (here the process driver: each runtime its own process, in its
//! own network namespace as root), reached at the endpoint the pool
//! records, and removed when their sandbox ends.
//!
//! Scenario A, the ends of a sandbox:
//! - given: three gateways, one supervisor, sandboxes `del` and `orphan`
//!   running; each runtime in its own namespace (as root), at the address
//!   the pool status shows, reachable from no other namespace's loopback
//! - when: `del` is deleted
//! - then: it ends `deleted` and its runtime (process, namespace, entry) is
//!   removed by the launcher
//! - when: the supervisor is killed and no other member exists
//! - then: `orphan` ends `failed` with `SupervisorRecoveryFailed` after the
//!   recovery deadline and its runtime is removed too
//!
//! Scenario B, a leader change during launches:
//! - given: three gateways and one supervisor
//! - when: five sandboxes are created and the leader gateway is killed with
//!   `kill -9` at once (some launches are mid-way)
//! - then: every sandbox runs, and exactly one runtime was ever started for
//!   each (the gateways' logs): the new leader adopted what the old one
//!   started

use std::time::Duration;

use proto::pool_admin::DeleteSandboxRequest;
use proto::pool_types::{MemberState, SandboxPhase};
use testkit::runtimes::{entries_of, entry_of, RuntimeEntry};
use testkit::supervisor::*;
use testkit::TestResult;

/// Waits until the launcher removed `entry`: its directory, its process
/// and its network namespace are gone.
async fn removed(entry: &RuntimeEntry) {
    let pid = entry.pid();
    let netns = entry.netns();
    testkit::gateway::eventually("the runtime removed", || async {
        if entry.dir.exists() {
            return Err(format!("{} still exists", entry.dir.display()).into());
        }
        if let Some(pid) = pid.filter(|p| alive(*p)) {
            return Err(format!("runtime {pid} still alive").into());
        }
        if let Some(ns) = &netns {
            if std::path::Path::new("/run/netns").join(ns).exists() {
                return Err(format!("namespace {ns} still exists").into());
            }
        }
        Ok(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_and_failed_sandboxes_lose_their_runtimes() -> TestResult {
    let (cluster, gateways, _cleanup) =
        three_gateways(&[FAST_TIMING, &["--recovery-deadline-ms", "2000"]].concat()).await;
    let mut s1 = Supervisor::new("s1", gateways, cluster.root.path());
    s1.start();
    wait_member(&cluster, "s1", "active").await;
    let del = running_sandbox(&cluster, "del").await;
    let orphan = running_sandbox(&cluster, "orphan").await;

    eprintln!("--- step: each runtime serves at the recorded address, in its own namespace");
    let dir = cluster.runtimes_dir();
    let del_rt = entry_of(&dir, "del")?;
    let orphan_rt = entry_of(&dir, "orphan")?;
    for (sb, rt) in [(&del, &del_rt), (&orphan, &orphan_rt)] {
        assert_eq!(sb.runtime_name, rt.name);
        assert_eq!(Some(sb.runtime_address.clone()), rt.address());
        if testkit::root::is_root() {
            let ns = rt.netns().ok_or("no namespace as root")?;
            assert!(
                sb.runtime_address.starts_with("10.213."),
                "{}",
                sb.runtime_address
            );
            assert!(
                std::path::Path::new("/run/netns").join(&ns).exists(),
                "{ns}"
            );
        }
    }
    assert_ne!(del.runtime_address, orphan.runtime_address);

    eprintln!("--- step: delete `del`: it ends deleted; its runtime is removed");
    let node = cluster
        .nodes
        .iter()
        .find(|n| n.is_running())
        .ok_or("no gateway")?;
    pool_admin(node)
        .await?
        .delete_sandbox(node.request(DeleteSandboxRequest {
            sandbox_id: "del".into(),
            request_id: String::new(),
        }))
        .await?;
    wait_pool(&cluster, "del deleted", Duration::from_secs(20), |s| {
        sandbox(s, "del").is_some_and(|x| x.phase() == SandboxPhase::Deleted)
    })
    .await;
    removed(&del_rt).await;
    assert!(
        alive(orphan_rt.pid().ok_or("no pid")?),
        "the other runtime went too"
    );

    eprintln!("--- step: kill -9 the only supervisor: `orphan` fails after the deadline");
    s1.kill9();
    let failed = wait_pool(&cluster, "orphan failed", Duration::from_secs(30), |s| {
        sandbox(s, "orphan").is_some_and(|x| x.phase() == SandboxPhase::Failed)
    })
    .await;
    let sb = sandbox(&failed, "orphan").ok_or("orphan")?;
    assert!(
        sb.failure.starts_with("SupervisorRecoveryFailed"),
        "{}",
        sb.failure
    );
    removed(&orphan_rt).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_adopts_launches_in_flight() -> TestResult {
    let (mut cluster, gateways, _cleanup) = three_gateways(&timing(FAST_TIMING)).await;
    let mut s1 = Supervisor::new("s1", gateways, cluster.root.path());
    s1.start();
    wait_member(&cluster, "s1", "active").await;
    let leader = cluster.wait_leader("before").await;

    eprintln!("--- step: create five sandboxes and kill -9 the leader {leader} at once");
    let ids: Vec<String> = (0..5).map(|i| format!("mid-{i}")).collect();
    for id in &ids {
        create_sandbox(&cluster, id).await;
    }
    cluster.node(leader).kill9();
    let after = cluster.wait_leader("after the kill").await;
    assert_ne!(after, leader);

    eprintln!("--- step: every sandbox runs, with one runtime ever started for each");
    let status = wait_pool(&cluster, "all five running", Duration::from_secs(60), |s| {
        ids.iter().all(|id| {
            sandbox(s, id).is_some_and(|x| {
                x.phase() == SandboxPhase::Assigned && x.acknowledged && x.pid != 0
            })
        }) && s
            .members
            .iter()
            .any(|m| m.id == "s1" && m.state() == MemberState::Active)
    })
    .await;
    let logs: String = cluster
        .nodes
        .iter()
        .map(|n| std::fs::read_to_string(&n.log_path).unwrap_or_default())
        .collect();
    for id in &ids {
        let sb = sandbox(&status, id).ok_or("missing")?;
        let started = logs
            .lines()
            .filter(|l| l.contains("runtime started") && l.contains(&sb.runtime_name))
            .count();
        assert_eq!(started, 1, "{id}: runtimes started for {}", sb.runtime_name);
        assert_eq!(entries_of(&cluster.runtimes_dir(), id).len(), 1, "{id}");
        let (_, by) = read_counter(&cluster, id).await?;
        assert_eq!(by, "s1");
    }
    Ok(())
}

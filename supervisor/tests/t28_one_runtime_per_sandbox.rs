//! Scenario 9 (issue 14): a lost runtime ends its sandbox; nothing starts a
//! second one.
//!
//! - given: three gateways (the leader launches runtimes through the
//!   process driver) and one supervisor running sandbox `x`
//! - when: the runtime process is killed with `kill -9` (a Pod deleted, a
//!   node gone)
//! - then: the sandbox ends `failed` with `RuntimeLost: ...` naming the
//!   runtime; exactly one runtime was ever started for it (the gateways'
//!   logs), and the dead runtime's entry is removed by the launcher

use std::time::Duration;

use proto::pool_types::SandboxPhase;
use testkit::supervisor::*;
use testkit::TestResult;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_runtime_fails_its_sandbox_and_is_not_started_again() -> TestResult {
    let (cluster, gateways, _cleanup) = three_gateways(&timing(FAST_TIMING)).await;
    let mut s1 = Supervisor::new("s1", gateways, cluster.root.path());
    s1.start();
    wait_member(&cluster, "s1", "active").await;
    let x = running_sandbox(&cluster, "x").await;
    let entry = testkit::runtimes::entry_of(&cluster.runtimes_dir(), "x")?;
    assert_eq!(x.runtime_name, entry.name);
    let pid = entry.pid().ok_or("no runtime pid")?;

    eprintln!("--- step: kill -9 the runtime {pid}");
    // SAFETY: a plain signal to a pid this test read.
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
    }
    let failed = wait_pool(&cluster, "x failed", Duration::from_secs(30), |s| {
        sandbox(s, "x").is_some_and(|sb| sb.phase() == SandboxPhase::Failed)
    })
    .await;
    let x = sandbox(&failed, "x").ok_or("x missing")?;
    assert!(
        x.failure.starts_with("RuntimeLost: ") && x.failure.contains(&entry.name),
        "{}",
        x.failure
    );

    eprintln!("--- step: one runtime was ever started for x; its entry is removed");
    let gone = testkit::gateway::eventually("the entry of x removed", || async {
        if entry.dir.exists() {
            Err("still there".into())
        } else {
            Ok(())
        }
    });
    gone.await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started: usize = cluster
        .nodes
        .iter()
        .map(|n| {
            std::fs::read_to_string(&n.log_path)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("runtime started") && l.contains(&entry.name))
                .count()
        })
        .sum();
    assert_eq!(started, 1, "runtimes started for x");
    assert!(testkit::runtimes::entries_of(&cluster.runtimes_dir(), "x").is_empty());
    Ok(())
}

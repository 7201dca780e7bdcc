//! Scenario 1: a supervisor is killed with `kill -9`.
//!
//! - given: three gateways, two supervisors, three demo sandboxes (each a
//!   runtime process holding a workload with an in-memory counter)
//! - when: the supervisor owning sandboxes is killed with `kill -9`
//! - then: every sandbox it owned is taken over by the other member; the
//!   workload's PID and start time are unchanged and its counter continued;
//!   exec works through the new owner. The time from kill to re-supervision
//!   is printed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use proto::pool_types::SandboxPhase;
use testkit::supervisor::*;
use testkit::TestResult;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_supervisor_sessions_move_with_workloads_intact() -> TestResult {
    let (cluster, gateways, _cleanup) = three_gateways(&timing(FAST_TIMING)).await;
    let mut supervisors = start_supervisors(&cluster, &gateways, &["s1", "s2"]).await;

    eprintln!("--- step: three demo sandboxes start and report their workloads");
    for i in 0..3 {
        create_sandbox(&cluster, &format!("sb-{i}")).await;
    }
    let before = wait_pool(
        &cluster,
        "sandboxes assigned and reported",
        Duration::from_secs(30),
        |s| {
            s.sandboxes.len() == 3
                && s.sandboxes
                    .iter()
                    .all(|sb| sb.phase() == SandboxPhase::Assigned && sb.pid != 0)
        },
    )
    .await;
    let mut owned: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for sb in &before.sandboxes {
        owned
            .entry(sb.owner.clone())
            .or_default()
            .push(sb.id.clone());
    }
    let victim = if owned.contains_key("s1") { "s1" } else { "s2" };
    let survivor = if victim == "s1" { "s2" } else { "s1" };
    let moved = owned.get(victim).cloned().unwrap_or_default();
    let mut counters = BTreeMap::new();
    for id in &moved {
        let (counter, by) = read_counter(&cluster, id).await?;
        assert_eq!(by, victim);
        counters.insert(id.clone(), counter);
    }

    eprintln!("--- step: kill -9 {victim}, owner of {moved:?}");
    let killed_at = Instant::now();
    supervisors
        .iter_mut()
        .find(|s| s.member == victim)
        .map(Supervisor::kill9);
    let after = wait_pool(
        &cluster,
        "sessions re-supervised",
        Duration::from_secs(30),
        |s| {
            moved.iter().all(|id| {
                sandbox(s, id)
                    .map(|sb| {
                        sb.owner == survivor
                            && sb.phase() == SandboxPhase::Assigned
                            && sb.acknowledged
                    })
                    .unwrap_or(false)
            })
        },
    )
    .await;
    let elapsed = killed_at.elapsed();
    println!(
        "kill -> re-supervised: {} ms for {} sandboxes",
        elapsed.as_millis(),
        moved.len()
    );

    eprintln!("--- step: same PID and start time, counter continued, exec through the new owner");
    for id in &moved {
        let (b, a) = (sandbox(&before, id), sandbox(&after, id));
        let (b, a) = (b.ok_or("missing")?, a.ok_or("missing")?);
        assert!(
            a.term > b.term && a.credential_epoch > b.credential_epoch,
            "{id}: term/credential_epoch did not advance: {b:?} -> {a:?}"
        );
        assert_eq!(a.generation, b.generation, "{id} was relaunched");
        let a = wait_pool(
            &cluster,
            "new owner reported the workload",
            Duration::from_secs(10),
            |s| {
                sandbox(s, id)
                    .map(|sb| {
                        sb.pid != 0
                            && sb.owner == survivor
                            && sb.last_report_index > b.last_report_index
                    })
                    .unwrap_or(false)
            },
        )
        .await;
        let a = sandbox(&a, id).ok_or("missing")?;
        assert_eq!(
            (a.pid, a.started_at_unix_ms),
            (b.pid, b.started_at_unix_ms),
            "{id}: workload changed"
        );
        assert!(alive(b.pid), "{id}: workload pid {} is gone", b.pid);
        let (_, by) = read_counter_above(&cluster, id, counters[id]).await?;
        assert_eq!(by, survivor);
    }
    Ok(())
}

//! Scenario 41: a stopped supervisor drains itself and leaves the pool
//! (Kubernetes scale-down, then a rolling update).
//!
//! - given: three gateways, supervisors `sa` and `sb`, four demo sandboxes
//!   spread over both
//! - when: `sa` gets SIGTERM
//! - then: its `/readyz` turns 503 `draining (stopping)` at once; its
//!   sandboxes move to `sb` by a drain operation (no `RuntimeLost`, the same
//!   runtime address and workload pid, the counter keeps counting); `sa`
//!   exits 0 within its drain timeout and its member is `leaving`, never
//!   `expired`
//! - when: `sc` starts (the rolling update's surge) and `sb` gets SIGTERM
//! - then: at every 100 ms sample, every sandbox's owner is a live member
//!   (active, or draining while it still supervises), none fails, and `sb`
//!   leaves with nothing left behind.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use proto::pool_admin::{Sandbox, SupervisorPoolStatus};
use proto::pool_types::{MemberState, SandboxPhase};
use testkit::gateway::*;
use testkit::supervisor::*;
use testkit::TestResult;

/// The supervisors' drain timeout here: well above what the drains take
/// (seconds), well below what expiry-driven recovery would need to pass.
const DRAIN_TIMEOUT_MS: &str = "20000";

fn supervisor(cluster: &Cluster, gateways: &[String], member: &str) -> Supervisor {
    let mut s = Supervisor::new(member, gateways.to_vec(), cluster.root.path());
    s.env.push((
        "OPENSHELL_SUPERVISOR_DRAIN_TIMEOUT_MS".into(),
        DRAIN_TIMEOUT_MS.into(),
    ));
    s
}

fn state_of(status: &SupervisorPoolStatus, id: &str) -> &'static str {
    member(status, id).map_or("absent", |m| MemberState::name_of(m.state))
}

/// (pid, started_at, runtime address) of every sandbox.
fn workloads(status: &SupervisorPoolStatus) -> BTreeMap<String, (u32, u64, String)> {
    status
        .sandboxes
        .iter()
        .map(|s| {
            (
                s.id.clone(),
                (s.pid, s.started_at_unix_ms, s.runtime_address.clone()),
            )
        })
        .collect()
}

fn settled_on(s: &Sandbox, owner: &str) -> bool {
    s.owner == owner && s.phase() == SandboxPhase::Assigned && s.acknowledged && s.pid != 0
}

/// SIGTERMs `s` and checks its stop: /readyz 503 `draining (stopping)`
/// first, then exit 0 within the drain timeout. Returns how long it took.
async fn stop_by_sigterm(s: &mut Supervisor) -> Duration {
    let (code, body) = s.readyz().await;
    assert_eq!(code, 200, "{} not ready before the stop: {body}", s.member);
    let started = Instant::now();
    s.signal("-TERM");
    let mut turned = None;
    while started.elapsed() < Duration::from_secs(2) {
        let (code, body) = s.readyz().await;
        if code == 503 {
            turned = Some(body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let body = turned.unwrap_or_else(|| {
        panic!(
            "{}: /readyz did not turn 503 within 2 s of SIGTERM; log:\n{}",
            s.member,
            s.log()
        )
    });
    assert_eq!(body.trim(), "not ready: draining (stopping)");
    let exit = s.wait_exit(Duration::from_secs(25)).await;
    let exit = exit.unwrap_or_else(|| panic!("{} still runs 25 s after SIGTERM", s.member));
    assert!(exit.success(), "{} exited {exit:?}", s.member);
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_supervisors_drain_and_leave() -> TestResult {
    let (cluster, gateways, _cleanup) = three_gateways(&timing(FAST_TIMING)).await;
    let mut supervisors = vec![
        supervisor(&cluster, &gateways, "sa"),
        supervisor(&cluster, &gateways, "sb"),
    ];
    for s in &mut supervisors {
        s.start();
    }
    wait_member(&cluster, "sa", "active").await;
    wait_member(&cluster, "sb", "active").await;

    eprintln!("--- step: sandboxes on both supervisors");
    let mut n = 0;
    let before = loop {
        n += 1;
        running_sandbox(&cluster, &format!("w{n}")).await;
        let status = pool_status(&cluster).await?;
        let on = |m: &str| status.sandboxes.iter().filter(|s| s.owner == m).count();
        if n >= 4 && on("sa") > 0 && on("sb") > 0 {
            break status;
        }
        assert!(n < 10, "placement never used both members: {status:#?}");
    };
    let on_sa: Vec<String> = before
        .sandboxes
        .iter()
        .filter(|s| s.owner == "sa")
        .map(|s| s.id.clone())
        .collect();
    let mut counters = BTreeMap::new();
    for s in &before.sandboxes {
        let (counter, _) = eventually("exec before", || read_counter(&cluster, &s.id)).await;
        counters.insert(s.id.clone(), counter);
    }

    eprintln!("--- step: SIGTERM sa ({} sandboxes on it)", on_sa.len());
    let took = stop_by_sigterm(&mut supervisors[0]).await;
    println!("sa drained and left in {} ms", took.as_millis());
    let after = pool_status(&cluster).await?;
    assert_eq!(state_of(&after, "sa"), "leaving", "{after:#?}");
    // The stop drain made one move per sandbox (moves that the new owner
    // had not acknowledged yet when sa left count in `attempts`, not in
    // `moves_done`); it is closed once sa left.
    assert!(
        after.operations.iter().any(|o| o.kind == "drain"
            && o.member == "sa"
            && o.id.starts_with("stop-")
            && o.attempts as usize >= on_sa.len()),
        "no stop drain of sa moved its sandboxes: {:#?}",
        after.operations
    );
    let after = wait_pool(&cluster, "all on sb", Duration::from_secs(10), |s| {
        s.sandboxes.iter().all(|sb| settled_on(sb, "sb"))
    })
    .await;
    assert_eq!(workloads(&after), workloads(&before), "workloads changed");
    for s in &after.sandboxes {
        assert!(s.failure.is_empty(), "{}: {}", s.id, s.failure);
        let (counter, by) = read_counter_above(&cluster, &s.id, counters[&s.id]).await?;
        assert_eq!(by, "sb");
        counters.insert(s.id.clone(), counter);
    }

    eprintln!("--- step: rolling update: sc starts, then SIGTERM sb");
    let mut sc = supervisor(&cluster, &gateways, "sc");
    sc.start();
    wait_member(&cluster, "sc", "active").await;
    let samples = std::sync::Arc::new(AtomicU64::new(0));
    let sampler = {
        let cluster_nodes: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
        tokio::spawn(sample_supervised(cluster_nodes, samples.clone()))
    };
    // Samples cover the whole stop: from before the signal to after it.
    let wait_samples = |above: u64| {
        let samples = samples.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            while samples.load(Ordering::SeqCst) <= above && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    wait_samples(0).await;
    stop_by_sigterm(&mut supervisors[1]).await;
    let after = wait_pool(&cluster, "all on sc", Duration::from_secs(10), |s| {
        s.sandboxes.iter().all(|sb| settled_on(sb, "sc"))
    })
    .await;
    wait_samples(samples.load(Ordering::SeqCst) + 1).await;
    sampler.abort();
    if let Err(e) = sampler.await {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    let samples = samples.load(Ordering::SeqCst);
    println!("{samples} pool samples during the rolling update, every sandbox supervised");
    assert!(samples >= 3, "only {samples} samples");
    assert_eq!(state_of(&after, "sb"), "leaving", "{after:#?}");
    assert_eq!(state_of(&after, "sa"), "leaving", "{after:#?}");
    assert_eq!(workloads(&after), workloads(&before), "workloads changed");
    for s in &after.sandboxes {
        read_counter_above(&cluster, &s.id, counters[&s.id]).await?;
    }
    Ok(())
}

/// Samples the pool every 100 ms (any gateway that answers) and panics at
/// the first sandbox whose owner is not a live member (active or
/// draining) or that failed.
async fn sample_supervised(gateways: Vec<String>, samples: std::sync::Arc<AtomicU64>) {
    use proto::pool_admin::pool_admin_client::PoolAdminClient;
    use proto::pool_admin::GetSupervisorPoolStatusRequest;
    let mut clients = Vec::new();
    for addr in &gateways {
        if let Ok(channel) = test_channel(addr, 500).await {
            clients.push(PoolAdminClient::new(channel));
        }
    }
    loop {
        let mut status = None;
        for client in &mut clients {
            let reply = client
                .get_supervisor_pool_status(GetSupervisorPoolStatusRequest {
                    stale: true,
                    ..Default::default()
                })
                .await;
            if let Ok(reply) = reply {
                status = Some(reply.into_inner());
                break;
            }
        }
        if let Some(status) = status {
            let n = samples.fetch_add(1, Ordering::SeqCst) + 1;
            for s in &status.sandboxes {
                let owner = state_of(&status, &s.owner);
                assert!(
                    matches!(owner, "active" | "draining") && s.failure.is_empty(),
                    "sample {n}: {} owned by {} ({owner}), failure {:?}: {status:#?}",
                    s.id,
                    s.owner,
                    s.failure
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

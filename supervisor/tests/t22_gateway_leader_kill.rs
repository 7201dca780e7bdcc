//! Scenario 3: the gateway leader is killed with `kill -9`.
//!
//! - given: three gateways, two supervisors attached to the leader (listed
//!   order), a demo sandbox whose workload counter is sampled directly every
//!   20 ms
//! - when: the leader gateway is killed
//! - then: the workload is not disturbed (the counter never stalls beyond its
//!   own 100 ms step), the supervisors re-attach to other gateways and are
//!   ready again, and writes resume. The longest stall is printed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::pool_types::{MemberState, SandboxPhase};
use proto::sandbox_runtime::RuntimeStatusRequest;
use testkit::gateway::*;
use testkit::supervisor::*;
use testkit::TestResult;

/// The demo workload's counter at `addr` (blocking; 1 s bounds).
fn read_workload(addr: &str) -> Option<u64> {
    use std::io::Read;
    let addr: std::net::SocketAddr = addr.parse().ok()?;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_gateway_kill_does_not_disturb_workloads() -> TestResult {
    let mut cluster = Cluster::start(
        3,
        &timing(&["--tick-interval-ms", "100", "--heartbeat-ttl-ms", "1500"]),
    );
    let leader = cluster.wait_leader("bootstrap").await;
    let _cleanup = KillUnder(cluster.root.path().to_path_buf());
    let mut gateways = vec![cluster.get(leader).addr.clone()];
    gateways.extend(
        cluster
            .nodes
            .iter()
            .filter(|n| n.id != leader)
            .map(|n| n.addr.clone()),
    );
    let mut supervisors: Vec<Supervisor> = ["s1", "s2"]
        .iter()
        .map(|m| Supervisor::new(m, gateways.clone(), cluster.root.path()))
        .collect();
    for s in &mut supervisors {
        s.listed_order = true;
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
    create_sandbox(&cluster, "w").await;
    wait_pool(&cluster, "w assigned", Duration::from_secs(30), |s| {
        sandbox(s, "w")
            .map(|sb| sb.phase() == SandboxPhase::Assigned && sb.pid != 0)
            .unwrap_or(false)
    })
    .await;
    let status = testkit::supervisor::runtime_client(&cluster, "w")
        .await?
        .status(RuntimeStatusRequest {})
        .await?
        .into_inner();
    let workload_addr = status.workload.map(|w| w.workload_addr).unwrap_or_default();
    assert!(
        !workload_addr.is_empty(),
        "the demo workload has no address"
    );

    eprintln!("--- step: sample the workload counter every 20 ms");
    // The workload listens on 127.0.0.1 of its runtime's network namespace
    // (when the driver made one): the sampler thread enters it.
    let netns = testkit::runtimes::entry_of(&cluster.runtimes_dir(), "w")?.netns();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            if let Some(ns) = &netns {
                testkit::runtimes::enter_netns(ns).unwrap_or_else(|e| panic!("{e}"));
            }
            let mut last: Option<(u64, Instant)> = None;
            let mut longest = Duration::ZERO;
            let mut failures = 0u32;
            while !stop.load(Ordering::Relaxed) {
                match read_workload(&workload_addr) {
                    Some(c) => match last {
                        Some((prev, at)) if c == prev => longest = longest.max(at.elapsed()),
                        _ => last = Some((c, Instant::now())),
                    },
                    None => failures += 1,
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (longest, failures)
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    eprintln!("--- step: kill -9 the leader gateway (node {leader})");
    cluster.node(leader).kill9();
    let new_leader = cluster.wait_leader("after leader kill").await;
    assert_ne!(new_leader, leader);

    eprintln!("--- step: supervisors re-attach elsewhere and are ready; writes resume");
    for s in &supervisors {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (code, body) = s.readyz().await;
            if code == 200 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} not ready again: {body}",
                s.member
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            s.log().matches("attached").count() >= 2,
            "{} did not re-attach",
            s.member
        );
    }
    create_sandbox(&cluster, "after").await;
    wait_pool(
        &cluster,
        "new sandbox assigned",
        Duration::from_secs(30),
        |s| {
            sandbox(s, "after")
                .map(|sb| sb.phase() == SandboxPhase::Assigned)
                .unwrap_or(false)
                && sandbox(s, "w")
                    .map(|sb| sb.phase() == SandboxPhase::Assigned)
                    .unwrap_or(false)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let (longest, failures) = sampler.join().map_err(|_| "the sampler panicked")?;
    println!(
        "longest counter stall during the leader kill: {} ms (the counter steps every 100 ms)",
        longest.as_millis()
    );
    assert_eq!(failures, 0, "the workload stopped answering");
    assert!(
        longest < Duration::from_millis(400),
        "the workload counter stalled for {longest:?}"
    );
    Ok(())
}

//! Scenario: a gateway is told to stop (SIGTERM) while supervisors stream to
//! it, as Kubernetes stops a gateway Pod in a rolling upgrade.
//!
//! - given: three gateways (each with /readyz), two supervisors attached to
//!   the same gateway (listed order), four running sandboxes; a watcher
//!   samples the pool every 100 ms from start to end
//! - when: that gateway gets SIGTERM while it is a follower; it is started
//!   again; the supervisors are then attached to the leader, which gets
//!   SIGTERM in turn
//! - then: each time the stopping gateway never answers /readyz 200 again,
//!   exits by itself within 10 s with rc 0, the supervisors are attached to
//!   another gateway and ready, no member leaves `active` or changes
//!   incarnation, and no sandbox changes term, epoch or phase; the stopped
//!   leader handed leadership over before it exited
//!
//! Two more: a leader whose stop is held up (both followers paused, a write
//! in flight) exits at once on a second signal; a gateway whose supervisor
//! is paused (its connection never closes) still exits within the bound.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::cluster::TransferLeaderRequest;
use proto::pool_admin::pool_admin_client::PoolAdminClient;
use proto::pool_admin::{GetSupervisorPoolStatusRequest, SupervisorPoolStatus};
use proto::pool_types::{MemberState, SandboxPhase};
use testkit::gateway::*;
use testkit::ports::free_port;
use testkit::supervisor::*;
use testkit::TestResult;

/// The bound the runbook promises for a gateway's stop.
const STOP_BOUND: Duration = Duration::from_secs(10);
const SANDBOXES: usize = 4;

/// member -> incarnation, sandbox -> (term, credential epoch).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Baseline {
    members: BTreeMap<String, u64>,
    sandboxes: BTreeMap<String, (u64, u64)>,
}

fn baseline(status: &SupervisorPoolStatus) -> Baseline {
    Baseline {
        members: status
            .members
            .iter()
            .map(|m| (m.id.clone(), m.incarnation))
            .collect(),
        sandboxes: status
            .sandboxes
            .iter()
            .map(|s| (s.id.clone(), (s.term, s.credential_epoch)))
            .collect(),
    }
}

/// What in `status` departs from `base`: a member not active or of another
/// incarnation, a sandbox not assigned or of another term or epoch.
fn departures(base: &Baseline, status: &SupervisorPoolStatus) -> Vec<String> {
    let mut out = Vec::new();
    for (id, incarnation) in &base.members {
        match member(status, id) {
            Some(m) if m.state() == MemberState::Active && m.incarnation == *incarnation => {}
            Some(m) => out.push(format!(
                "member {id}: {:?} incarnation {} (was active, {incarnation})",
                m.state(),
                m.incarnation
            )),
            None => out.push(format!("member {id} missing")),
        }
    }
    for (id, (term, epoch)) in &base.sandboxes {
        match sandbox(status, id) {
            Some(s)
                if s.phase() == SandboxPhase::Assigned
                    && s.term == *term
                    && s.credential_epoch == *epoch => {}
            Some(s) => out.push(format!(
                "sandbox {id}: {:?} term {} epoch {} (was assigned, {term}, {epoch})",
                s.phase(),
                s.term,
                s.credential_epoch
            )),
            None => out.push(format!("sandbox {id} missing")),
        }
    }
    out
}

/// Samples the pool every 100 ms through whichever gateway answers until
/// `stop`; returns (samples taken, departures seen).
fn spawn_watcher(
    addrs: Vec<String>,
    base: Baseline,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(u64, Vec<String>)> {
    tokio::spawn(async move {
        let mut samples = 0u64;
        let mut seen = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            for addr in &addrs {
                let Ok(channel) = test_channel(addr, 200).await else {
                    continue;
                };
                let Ok(reply) = PoolAdminClient::new(channel)
                    .get_supervisor_pool_status(GetSupervisorPoolStatusRequest {
                        stale: false,
                        ..Default::default()
                    })
                    .await
                else {
                    continue;
                };
                samples += 1;
                for d in departures(&base, &reply.into_inner()) {
                    if !seen.contains(&d) {
                        eprintln!("watcher: {d}");
                        seen.push(d);
                    }
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (samples, seen)
    })
}

/// The gateway node a supervisor's log says it attached to last.
fn attached_node(s: &Supervisor) -> Option<u64> {
    let log = s.log();
    let line = log.lines().rev().find(|l| l.contains("gateway_node="))?;
    let rest = line.split("gateway_node=").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// A probe of /readyz sent this long after the signal must not answer 200:
/// "at once", with room for the signal's delivery on a loaded machine.
const NOT_READY_WITHIN: Duration = Duration::from_millis(500);

/// Probes `http`/readyz every 20 ms from `started` until `stop`; returns
/// (ms after `started` the probe was sent, code, body), on changes.
fn spawn_prober(
    http: String,
    started: Instant,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(u128, u16, String)>> {
    tokio::spawn(async move {
        let mut probes: Vec<(u128, u16, String)> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let sent = started.elapsed().as_millis();
            let (code, body) = http_get(&http, "/readyz").await;
            if code != 0 && probes.last().map(|(_, c, _)| *c) != Some(code) {
                probes.push((sent, code, body.trim().to_string()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        probes
    })
}

/// SIGTERMs gateway `id` and waits for it to exit by itself, probing its
/// /readyz meanwhile: from [`NOT_READY_WITHIN`] after the signal, and after
/// its first 503, it never answers 200. Returns how long the stop took.
async fn sigterm_and_wait(cluster: &mut Cluster, id: u64) -> Duration {
    let http = cluster
        .get(id)
        .http_addr()
        .unwrap_or_else(|| panic!("node {id} has no --http-listen"));
    let started = Instant::now();
    cluster.get(id).signal("-TERM");
    let stop = Arc::new(AtomicBool::new(false));
    let prober = spawn_prober(http, started, stop.clone());
    let status = cluster
        .node(id)
        .wait_exit(STOP_BOUND + Duration::from_secs(20))
        .await;
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let probes = prober.await.unwrap_or_default();
    let Some(status) = status else {
        cluster.dump_logs();
        panic!("node {id} still runs {took:?} after SIGTERM (bound {STOP_BOUND:?}); /readyz answered {probes:?}");
    };
    println!("node {id} exited {took:?} after SIGTERM with {status}; /readyz answered {probes:?}");
    let first_503 = probes
        .iter()
        .position(|(_, code, _)| *code == 503)
        .unwrap_or(probes.len());
    let late_ready: Vec<_> = probes
        .iter()
        .enumerate()
        .filter(|(i, (sent, code, _))| {
            *code == 200 && (*sent >= NOT_READY_WITHIN.as_millis() || *i > first_503)
        })
        .collect();
    assert!(
        late_ready.is_empty(),
        "node {id} answered /readyz 200 while stopping: {late_ready:?} (all answers: {probes:?})"
    );
    assert!(
        took <= STOP_BOUND,
        "node {id} took {took:?} to stop (bound {STOP_BOUND:?}); /readyz answered {probes:?}"
    );
    assert!(
        status.success(),
        "node {id} exited with {status} after one SIGTERM"
    );
    took
}

/// Waits until every supervisor is ready on a gateway other than `left`.
async fn wait_moved(cluster: &Cluster, supervisors: &[Supervisor], left: u64) {
    wait_attached(
        cluster,
        supervisors,
        &format!("elsewhere than {left}"),
        |n| n != left,
    )
    .await;
}

/// Waits until every supervisor is ready on a gateway for which `ok` holds.
async fn wait_attached(
    cluster: &Cluster,
    supervisors: &[Supervisor],
    why: &str,
    ok: impl Fn(u64) -> bool,
) {
    for s in supervisors {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (code, body) = s.readyz().await;
            let node = attached_node(s);
            if code == 200 && node.is_some_and(&ok) {
                println!("{} is ready on gateway {node:?}", s.member);
                break;
            }
            if Instant::now() > deadline {
                cluster.dump_logs();
                panic!(
                    "{} not ready {why}: readyz {code} {body}, attached to {node:?}",
                    s.member
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_moves_supervisors_and_exits_in_time() -> TestResult {
    let timing_flags = timing(&["--tick-interval-ms", "100", "--heartbeat-ttl-ms", "1500"]);
    let mut cluster = Cluster::start_each(3, &timing_flags, |_| {
        vec!["--http-listen".into(), format!("127.0.0.1:{}", free_port())]
    });
    let _cleanup = KillUnder(cluster.root.path().to_path_buf());
    let leader = cluster.wait_leader("bootstrap").await;
    let ids: Vec<u64> = cluster.nodes.iter().map(|n| n.id).collect();
    let follower = ids.iter().copied().find(|id| *id != leader).unwrap_or(0);
    let other = ids
        .iter()
        .copied()
        .find(|id| *id != leader && *id != follower)
        .unwrap_or(0);
    // Listed order: the follower first, then the leader: after the
    // follower's stop the supervisors move to the leader.
    let gateways: Vec<String> = [follower, leader, other]
        .iter()
        .map(|id| cluster.get(*id).addr.clone())
        .collect();
    let addrs = gateways.clone();
    let mut supervisors: Vec<Supervisor> = ["s1", "s2"]
        .iter()
        .map(|m| Supervisor::new(m, gateways.clone(), cluster.root.path()))
        .collect();
    for s in &mut supervisors {
        s.listed_order = true;
        s.start();
    }
    wait_member(&cluster, "s1", "active").await;
    wait_member(&cluster, "s2", "active").await;
    for i in 0..SANDBOXES {
        running_sandbox(&cluster, &format!("w{i}")).await;
    }
    let status = wait_pool(
        &cluster,
        "every sandbox running",
        Duration::from_secs(60),
        |s| {
            s.sandboxes.len() == SANDBOXES
                && s.sandboxes.iter().all(|sb| {
                    sb.phase() == SandboxPhase::Assigned && sb.pid != 0 && sb.acknowledged
                })
        },
    )
    .await;
    let base = baseline(&status);
    println!("baseline: {base:?}");
    wait_attached(&cluster, &supervisors, "on the follower", |n| n == follower).await;
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = spawn_watcher(addrs, base.clone(), stop.clone());

    eprintln!("--- step: SIGTERM follower gateway {follower}, both supervisors attached to it");
    sigterm_and_wait(&mut cluster, follower).await;
    wait_moved(&cluster, &supervisors, follower).await;

    eprintln!("--- step: start gateway {follower} again");
    cluster.node(follower).start();
    cluster.wait_leader("after the restart").await;
    // Two heartbeat TTLs: an expiry would show now.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let attached_to = attached_node(&supervisors[0]).unwrap_or(0);
    for s in &supervisors {
        assert_eq!(
            attached_node(s),
            Some(attached_to),
            "{} elsewhere",
            s.member
        );
    }
    let current = cluster.wait_leader("before the leader's stop").await;
    if current != attached_to {
        eprintln!("--- step: leadership moved to {current}; hand it back to {attached_to}");
        cluster
            .get(current)
            .admin()
            .await?
            .transfer_leader(TransferLeaderRequest { to: attached_to })
            .await?;
        assert_eq!(cluster.wait_leader("transfer back").await, attached_to);
    }

    eprintln!("--- step: SIGTERM leader gateway {attached_to}, both supervisors attached to it");
    sigterm_and_wait(&mut cluster, attached_to).await;
    let new_leader = cluster.wait_leader("after the leader's stop").await;
    assert_ne!(new_leader, attached_to);
    wait_moved(&cluster, &supervisors, attached_to).await;
    let log = cluster.get(attached_to).log();
    assert!(
        log.contains("handed leadership over"),
        "the stopping leader did not hand over leadership; its log:\n{log}"
    );

    eprintln!("--- step: two TTLs later, nothing moved");
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let (samples, seen) = watcher.await?;
    let last = pool_status(&cluster).await?;
    println!("watcher took {samples} samples");
    assert!(
        samples > 20,
        "the watcher saw the pool only {samples} times"
    );
    assert!(
        seen.is_empty(),
        "the pool moved during the stops: {seen:#?}"
    );
    assert_eq!(departures(&base, &last), Vec::<String>::new());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_exits_at_once() -> TestResult {
    let mut cluster = Cluster::start(3, &[]);
    let _cleanup = KillUnder(cluster.root.path().to_path_buf());
    let leader = cluster.wait_leader("bootstrap").await;
    put(cluster.get(leader), "before", "1").await?;
    let followers: Vec<u64> = cluster
        .nodes
        .iter()
        .map(|n| n.id)
        .filter(|id| *id != leader)
        .collect();

    eprintln!("--- step: pause both followers; a write to the leader hangs");
    for id in &followers {
        cluster.get(*id).signal("-STOP");
    }
    let addr = cluster.get(leader).addr.clone();
    let write = tokio::spawn(async move { put_at(&addr, "during", "1").await.is_ok() });
    tokio::time::sleep(Duration::from_millis(300)).await;

    eprintln!("--- step: SIGTERM the leader; its stop waits for the write");
    cluster.get(leader).signal("-TERM");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let still = cluster.node(leader).wait_exit(Duration::ZERO).await;
    assert!(
        still.is_none(),
        "the leader exited before the second signal ({still:?}): nothing held its stop"
    );

    eprintln!("--- step: SIGINT: exits at once");
    let started = Instant::now();
    cluster.get(leader).signal("-INT");
    let status = cluster
        .node(leader)
        .wait_exit(Duration::from_secs(10))
        .await;
    let took = started.elapsed();
    for id in &followers {
        cluster.get(*id).signal("-CONT");
    }
    let _ = write.await;
    println!(
        "first SIGTERM: {still:?} after 1 s; second signal: exited {took:?} later with {status:?}"
    );
    let Some(status) = status else {
        panic!("the leader still runs 10 s after the second signal");
    };
    assert!(
        took < Duration::from_secs(2),
        "the second signal took {took:?}"
    );
    assert_eq!(status.code(), Some(130), "exit status {status}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_supervisor_does_not_hold_the_stop() -> TestResult {
    let mut cluster = Cluster::start_each(3, &[], |_| {
        vec!["--http-listen".into(), format!("127.0.0.1:{}", free_port())]
    });
    let _cleanup = KillUnder(cluster.root.path().to_path_buf());
    cluster.wait_leader("bootstrap").await;
    let gateways: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
    let mut supervisor = Supervisor::new("s1", gateways, cluster.root.path());
    supervisor.listed_order = true;
    supervisor.start();
    let first = cluster.nodes[0].id;
    wait_attached(
        &cluster,
        std::slice::from_ref(&supervisor),
        "on the first gateway",
        |n| n == first,
    )
    .await;

    eprintln!("--- step: pause the supervisor; SIGTERM gateway {first}, which it streams to");
    supervisor.signal("-STOP");
    let took = sigterm_and_wait(&mut cluster, first).await;
    supervisor.signal("-CONT");
    println!("gateway {first} stopped in {took:?} with its supervisor paused");
    Ok(())
}

//! Scenario: the leader gateway is paused (`kill -STOP`, a GC pause or a VM
//! stall) for 3 s, then for 10 s, with every supervisor on a follower.
//!
//! - given: three gateways at the default pool timing (250 ms tick, 2 s
//!   heartbeat TTL), four supervisors pinned two by two to the two
//!   followers (the leader has none), six running demo sandboxes
//! - when: the leader is paused for 3 s and resumed; leadership is handed
//!   back to the node without supervisors; it is paused for 10 s and resumed
//! - then: after each pause a new leader takes over and no member expired or
//!   changed incarnation, and no sandbox changed owner, term or credential
//!   epoch (no takeover storm). The followers' heartbeats left the paused
//!   leader for the new one as soon as it was elected.
//!
//! And, as deployed (every supervisor lists every gateway):
//!
//! - given: the same cluster, three supervisors listing all three gateways
//!   in order, two of them starting with the leader (attached to it)
//! - when: the leader is paused 3 s, then the new leader 10 s
//! - then: the supervisors of the paused gateway notice it within the
//!   keep-alive timeout and attach elsewhere before the grace runs out: no
//!   member expired, no sandbox moved

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use proto::cluster::TransferLeaderRequest;
use proto::pool_admin::{GetSupervisorPoolStatusRequest, SupervisorPoolStatus};
use proto::pool_types::{MemberState, SandboxPhase};
use testkit::gateway::*;
use testkit::supervisor::*;
use testkit::TestResult;

/// The two scenarios each start many processes: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The default pool timing, spelled out: the numbers.
const DEFAULT_TIMING: &[&str] = &["--tick-interval-ms", "250", "--heartbeat-ttl-ms", "2000"];

/// Member -> (state, incarnation); sandbox -> (owner, term, epoch, phase).
type View = (
    BTreeMap<String, (i32, u64)>,
    BTreeMap<String, (String, u64, u64, i32)>,
);

fn view(status: &SupervisorPoolStatus) -> View {
    let members = status
        .members
        .iter()
        .map(|m| (m.id.clone(), (m.state, m.incarnation)))
        .collect();
    let sandboxes = status
        .sandboxes
        .iter()
        .map(|s| {
            (
                s.id.clone(),
                (s.owner.clone(), s.term, s.credential_epoch, s.phase),
            )
        })
        .collect();
    (members, sandboxes)
}

/// Pauses `leader` for `pause`, resumes it, waits for the cluster to settle
/// for three TTLs, and asserts that the pool is exactly as `before`.
async fn pause_leader(cluster: &Cluster, leader: u64, pause: Duration, before: &View) {
    eprintln!("--- step: kill -STOP the leader (node {leader}) for {pause:?}");
    let paused_at = Instant::now();
    cluster.get(leader).signal("-STOP");
    // Watch the pool through the followers meanwhile (their own applied
    // state): the worst heartbeat age, in ticks.
    let mut worst = 0u64;
    while paused_at.elapsed() < pause {
        for node in cluster.nodes.iter().filter(|n| n.id != leader) {
            let read = async {
                let request = GetSupervisorPoolStatusRequest {
                    stale: true,
                    ..Default::default()
                };
                let reply = pool_admin(node)
                    .await?
                    .get_supervisor_pool_status(request)
                    .await?;
                TestResult::Ok(reply.into_inner())
            };
            if let Ok(Ok(s)) = tokio::time::timeout(Duration::from_millis(300), read).await {
                let oldest = s.members.iter().map(|m| m.ticks_since_heartbeat).max();
                worst = worst.max(oldest.unwrap_or(0));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.get(leader).signal("-CONT");
    eprintln!("--- step: resumed after {:?}", paused_at.elapsed());
    let new_leader = cluster.wait_leader("after the pause").await;
    eprintln!("leader now node {new_leader}; oldest heartbeat seen on a follower during the pause: {worst} ticks (TTL 8)");

    eprintln!("--- step: three TTLs later, nothing expired and nothing moved");
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = wait_pool(
        cluster,
        "the pool readable",
        Duration::from_secs(20),
        |_| true,
    )
    .await;
    let now = view(&after);
    if &now != before {
        cluster.dump_logs();
    }
    assert_eq!(
        &now.0, &before.0,
        "members changed state or incarnation after a {pause:?} leader pause"
    );
    assert_eq!(
        &now.1, &before.1,
        "sandboxes changed owner, term or epoch after a {pause:?} leader pause"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_pause_expires_no_member_on_a_follower() -> TestResult {
    let _serial = SERIAL.lock().await;
    let (cluster, _gateways, _cleanup) = three_gateways(&timing(DEFAULT_TIMING)).await;
    let leader = cluster.wait_leader("bootstrap").await;
    let followers: Vec<String> = cluster
        .nodes
        .iter()
        .filter(|n| n.id != leader)
        .map(|n| n.addr.clone())
        .collect();
    eprintln!("--- step: four supervisors, pinned to the followers {followers:?}");
    let mut supervisors: Vec<Supervisor> = ["s1", "s2", "s3", "s4"]
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let pinned = vec![followers[i % followers.len()].clone()];
            Supervisor::new(m, pinned, cluster.root.path())
        })
        .collect();
    for s in &mut supervisors {
        s.start();
    }
    let _logs = LogsOnFailure(&supervisors);
    wait_pool(
        &cluster,
        "four active members",
        Duration::from_secs(30),
        |s| {
            s.members
                .iter()
                .filter(|m| m.state() == MemberState::Active)
                .count()
                == 4
        },
    )
    .await;
    for i in 0..6 {
        create_sandbox(&cluster, &format!("p{i}")).await;
    }
    let settled = wait_pool(
        &cluster,
        "six sandboxes running and acknowledged",
        Duration::from_secs(60),
        |s| {
            (0..6).all(|i| {
                sandbox(s, &format!("p{i}")).is_some_and(|sb| {
                    sb.phase() == SandboxPhase::Assigned && sb.pid != 0 && sb.acknowledged
                })
            })
        },
    )
    .await;
    let before = view(&settled);

    pause_leader(&cluster, leader, Duration::from_secs(3), &before).await;

    eprintln!("--- step: hand leadership back to node {leader} (no supervisors)");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let moved = match cluster.get(leader).admin().await {
            Ok(mut admin) => admin
                .transfer_leader(TransferLeaderRequest { to: leader })
                .await
                .map(|r| r.into_inner().leader_id == leader)
                .unwrap_or(false),
            Err(_) => false,
        };
        if moved && cluster.wait_leader("after the transfer").await == leader {
            break;
        }
        assert!(Instant::now() < deadline, "leadership did not move back");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let again = wait_pool(
        &cluster,
        "the pool readable",
        Duration::from_secs(20),
        |_| true,
    )
    .await;
    assert_eq!(view(&again), before, "the transfer itself moved something");

    pause_leader(&cluster, leader, Duration::from_secs(10), &before).await;
    for s in &supervisors {
        assert_eq!(s.readyz().await.0, 200, "{} not ready", s.member);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervisors_of_a_paused_leader_move_before_they_expire() -> TestResult {
    let _serial = SERIAL.lock().await;
    let (cluster, _gateways, _cleanup) = three_gateways(&timing(DEFAULT_TIMING)).await;
    let leader = cluster.wait_leader("bootstrap").await;
    let mut order: Vec<String> = vec![cluster.get(leader).addr.clone()];
    order.extend(
        cluster
            .nodes
            .iter()
            .filter(|n| n.id != leader)
            .map(|n| n.addr.clone()),
    );
    eprintln!("--- step: three supervisors listing every gateway, two on the leader");
    let mut supervisors: Vec<Supervisor> = ["s1", "s2", "s3"]
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut listed = order.clone();
            if i == 2 {
                listed.rotate_left(1);
            }
            let mut s = Supervisor::new(m, listed, cluster.root.path());
            s.listed_order = true;
            s
        })
        .collect();
    for s in &mut supervisors {
        s.start();
    }
    let _logs = LogsOnFailure(&supervisors);
    wait_pool(
        &cluster,
        "three active members",
        Duration::from_secs(30),
        |s| {
            s.members
                .iter()
                .filter(|m| m.state() == MemberState::Active)
                .count()
                == 3
        },
    )
    .await;
    for i in 0..4 {
        create_sandbox(&cluster, &format!("q{i}")).await;
    }
    let settled = wait_pool(
        &cluster,
        "four sandboxes running and acknowledged",
        Duration::from_secs(60),
        |s| {
            (0..4).all(|i| {
                sandbox(s, &format!("q{i}")).is_some_and(|sb| {
                    sb.phase() == SandboxPhase::Assigned && sb.pid != 0 && sb.acknowledged
                })
            })
        },
    )
    .await;
    let before = view(&settled);

    pause_leader(&cluster, leader, Duration::from_secs(3), &before).await;
    for s in &supervisors[..2] {
        assert!(
            s.log().matches("attached").count() >= 2,
            "{} did not leave the paused gateway",
            s.member
        );
    }
    let leader = cluster.wait_leader("before the second pause").await;
    pause_leader(&cluster, leader, Duration::from_secs(10), &before).await;
    Ok(())
}

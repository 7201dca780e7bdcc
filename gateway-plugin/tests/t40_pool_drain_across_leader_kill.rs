//! The pool coordinator runs on the raft leader only, and a drain survives
//! the leader's death.
//!
//! - given: three gateways (tick 100 ms), three supervisors speaking the real
//!   stream protocol, attached to different gateways, and eight sandboxes
//! - when: a drain of the busiest member starts (one move at a time, each
//!   acknowledged 400 ms after assignment) and the leader gateway is killed
//!   with `kill -9` after the first move completed
//! - then: the successor's coordinator completes the drain without
//!   relaunching any sandbox (generation and launch id unchanged) or
//!   extending the operation's deadline; only one gateway ran a coordinator
//!   in each term; all replicas end with identical state

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use proto::cluster::StateDigestRequest;
use proto::pool_admin::pool_admin_client::PoolAdminClient;
use proto::pool_admin::{
    start_supervisor_pool_operation_request, CreateSandboxRequest, GetSupervisorPoolStatusRequest,
    StartSupervisorPoolOperationRequest, SupervisorPoolStatus,
};
use proto::pool_types::{MemberState, SandboxPhase};
use testkit::gateway::*;
use testkit::member::ScriptedMember;
use testkit::TestResult;
use tonic::transport::Channel;

async fn pool_admin(node: &Gateway) -> TestResult<PoolAdminClient<Channel>> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", node.addr))?
        .connect_timeout(Duration::from_millis(300))
        .timeout(Duration::from_secs(10))
        .connect()
        .await?;
    Ok(PoolAdminClient::new(channel))
}

async fn pool_status(node: &Gateway) -> TestResult<SupervisorPoolStatus> {
    Ok(pool_admin(node)
        .await?
        .get_supervisor_pool_status(GetSupervisorPoolStatusRequest {
            stale: false,
            ..Default::default()
        })
        .await?
        .into_inner())
}

/// Waits until `cond` holds on the pool status read through any live node.
async fn wait_pool(
    cluster: &Cluster,
    why: &str,
    cond: impl Fn(&SupervisorPoolStatus) -> bool,
) -> SupervisorPoolStatus {
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut last = None;
    loop {
        for node in cluster.nodes.iter().filter(|n| n.is_running()) {
            if let Ok(status) = pool_status(node).await {
                if cond(&status) {
                    return status;
                }
                last = Some(status);
                break;
            }
        }
        if Instant::now() > deadline {
            cluster.dump_logs();
            panic!("pool did not reach: {why}; last status: {last:#?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// "pool coordinator active" lines of a node's log, as terms.
fn coordinator_terms(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains("pool coordinator active"))
        .filter_map(|l| l.split("term=").nth(1))
        .filter_map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .filter_map(|digits| digits.parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_completes_across_leader_kill_without_relaunch() -> TestResult {
    let mut cluster = Cluster::start(
        3,
        &["--tick-interval-ms", "100", "--heartbeat-ttl-ms", "1500"],
    );
    let leader = cluster.wait_leader("bootstrap").await;
    let addrs: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();

    eprintln!("--- step: three supervisors attach to different gateways");
    let supervisors: Vec<ScriptedMember> = (0..3)
        .map(|i| {
            let mut gateways = addrs.clone();
            gateways.rotate_left(i);
            ScriptedMember::start(
                &format!("m{}", i + 1),
                1,
                10,
                gateways,
                Duration::from_millis(400),
            )
        })
        .collect();
    wait_pool(&cluster, "three active members", |s| {
        s.members
            .iter()
            .filter(|m| m.state() == MemberState::Active)
            .count()
            == 3
    })
    .await;

    eprintln!("--- step: eight sandboxes are admitted and acknowledged");
    for i in 0..8 {
        let id = format!("sb-{i}");
        eventually("create sandbox", || {
            let node = cluster.get(leader);
            let id = id.clone();
            async move {
                Ok(pool_admin(node)
                    .await?
                    .create_sandbox(CreateSandboxRequest {
                        sandbox_id: id,
                        launch_id: String::new(),
                        material_ref: "demo".into(),
                        request_id: String::new(),
                    })
                    .await?
                    .into_inner())
            }
        })
        .await;
    }
    let before = wait_pool(&cluster, "all sandboxes assigned", |s| {
        s.sandboxes.len() == 8
            && s.sandboxes
                .iter()
                .all(|sb| sb.phase() == SandboxPhase::Assigned)
    })
    .await;
    let mut per_member: BTreeMap<String, usize> = BTreeMap::new();
    for sb in &before.sandboxes {
        *per_member.entry(sb.owner.clone()).or_default() += 1;
    }
    let (victim, owned) = per_member
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(m, n)| (m.clone(), *n))
        .unwrap_or_default();
    assert!(
        owned >= 2,
        "the busiest member owns only {owned}: {per_member:?}"
    );
    let generations: BTreeMap<String, (u64, String)> = before
        .sandboxes
        .iter()
        .map(|s| (s.id.clone(), (s.generation, s.launch_id.clone())))
        .collect();

    eprintln!("--- step: drain {victim} ({owned} sandboxes), one move at a time");
    let op = pool_admin(cluster.get(leader))
        .await?
        .start_supervisor_pool_operation(StartSupervisorPoolOperationRequest {
            request_id: String::new(),
            operation_id: "drain-1".into(),
            kind: Some(start_supervisor_pool_operation_request::Kind::DrainMember(
                victim.clone(),
            )),
            max_parallel: 1,
        })
        .await?
        .into_inner();
    assert_eq!(op.phase, "running");
    let running = wait_pool(&cluster, "first move done", |s| {
        s.operations
            .iter()
            .any(|o| o.id == "drain-1" && o.moves_done >= 1)
    })
    .await;
    let op_before = running
        .operations
        .iter()
        .find(|o| o.id == "drain-1")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        op_before.phase, "running",
        "the drain finished before the kill: {op_before:?}"
    );

    eprintln!("--- step: kill -9 the leader (node {leader}) mid-drain");
    cluster.node(leader).kill9();
    let successor = cluster.wait_leader("after leader kill").await;
    assert_ne!(successor, leader);

    eprintln!("--- step: the successor completes the drain");
    let after = wait_pool(&cluster, "drain succeeded", |s| {
        s.operations
            .iter()
            .any(|o| o.id == "drain-1" && o.phase == "succeeded")
            && s.sandboxes
                .iter()
                .all(|sb| sb.phase() == SandboxPhase::Assigned)
    })
    .await;
    let op_after = after
        .operations
        .iter()
        .find(|o| o.id == "drain-1")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        op_after.deadline_tick, op_before.deadline_tick,
        "the successor extended the deadline"
    );
    assert_eq!(op_after.moves_done, owned as u32, "{op_after:?}");
    for sb in &after.sandboxes {
        assert_ne!(sb.owner, victim, "{} still on the drained member", sb.id);
        assert_eq!(
            generations.get(&sb.id),
            Some(&(sb.generation, sb.launch_id.clone())),
            "{} was relaunched",
            sb.id
        );
    }
    assert_eq!(
        after
            .members
            .iter()
            .find(|m| m.id == victim)
            .map(|m| MemberState::name_of(m.state)),
        Some("draining")
    );
    assert!(supervisors
        .iter()
        .find(|s| s.member == victim)
        .map(|s| s.sandboxes().is_empty())
        .unwrap_or(false));

    eprintln!("--- step: one coordinator per term, and only on leaders");
    let mut terms: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for node in &cluster.nodes {
        for term in coordinator_terms(&node.log()) {
            terms.entry(term).or_default().push(node.id);
        }
    }
    assert!(
        terms.values().all(|nodes| nodes.len() == 1),
        "two coordinators in one term: {terms:?}"
    );
    assert!(
        terms.values().any(|n| n == &vec![leader]) && terms.values().any(|n| n == &vec![successor]),
        "{terms:?}"
    );
    let bystander = (1..=3)
        .find(|id| *id != leader && *id != successor)
        .unwrap_or(0);
    assert!(
        !terms.values().any(|n| n.contains(&bystander)),
        "node {bystander} never led but ran a coordinator: {terms:?}"
    );

    eprintln!("--- step: the killed gateway restarts; every replica ends identical");
    cluster.node(leader).start();
    for s in &supervisors {
        s.stop();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut digests = Vec::new();
        for node in &cluster.nodes {
            if let Ok(mut admin) = node.admin().await {
                if let Ok(d) = admin.state_digest(StateDigestRequest::default()).await {
                    digests.push(d.into_inner());
                }
            }
        }
        if digests.len() == 3
            && digests
                .iter()
                .all(|d| d.applied_index == digests[0].applied_index)
        {
            assert!(
                digests
                    .iter()
                    .all(|d| d.crc32 == digests[0].crc32 && d.bytes == digests[0].bytes),
                "replicas differ at index {}: {digests:?}",
                digests[0].applied_index
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replicas never met at one applied index: {digests:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

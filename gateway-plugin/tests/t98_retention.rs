//! Retention (issue 16, "Nothing grows without bound"): a gateway started
//! with a small `--retention-ticks` removes deleted sandboxes, their launch
//! records and departed supervisors once the retention passed.
//!
//! - given: one gateway with `--retention-ticks 20` (2 s at 100 ms ticks)
//!   and two real supervisors s1, s2
//! - when: two sandboxes are created and deleted, and s2 stops (it leaves
//!   the pool with `HostLeave`)
//! - then: the pool status and the sandbox list no longer hold the
//!   sandboxes or s2, the state a backup reads (the snapshot encoding) holds
//!   no sandbox, no launch record and no s2, s1 is still active, and the
//!   next sandbox of a collected id starts above the collected generation

use std::time::Duration;

use prost::Message;
use proto::cluster::cluster_admin_client::ClusterAdminClient;
use proto::cluster::BackupRequest;
use proto::gateway::LogSnapshot;
use proto::pool_admin::{DeleteSandboxRequest, ListSandboxesRequest};
use proto::pool_types::MemberState;
use testkit::gateway::Cluster;
use testkit::supervisor::{
    create_sandbox, member, pool_admin, wait_pool, KillUnder, Supervisor, FAST_TIMING,
};
use testkit::TestResult;

const RETENTION_TICKS: &str = "20";

/// The pool table of the state a backup of `cluster`'s node 1 reads.
async fn pool_state(cluster: &Cluster) -> TestResult<pool::PoolState> {
    let node = cluster.get(1);
    let reply = ClusterAdminClient::new(node.channel().await?)
        .backup(BackupRequest {})
        .await?
        .into_inner();
    let snapshot = LogSnapshot::decode(reply.state.as_slice())?;
    Ok(pool::PoolState::decode_snapshot(&snapshot.pool)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_sandboxes_and_departed_supervisors_are_collected_after_retention() -> TestResult {
    let mut flags = FAST_TIMING.to_vec();
    flags.extend(["--retention-ticks", RETENTION_TICKS]);
    let cluster = Cluster::start(1, &flags);
    cluster.wait_leader("bootstrap").await;
    let root = cluster.root.path().to_path_buf();
    let _cleanup = KillUnder(root.clone());
    let gateway = cluster.get(1).addr.clone();
    let mut supervisors: Vec<Supervisor> = ["s1", "s2"]
        .iter()
        .map(|m| Supervisor::new(m, vec![gateway.clone()], &root))
        .collect();
    supervisors.iter_mut().for_each(Supervisor::start);
    wait_pool(&cluster, "s1, s2 active", Duration::from_secs(30), |s| {
        s.members
            .iter()
            .filter(|m| m.state() == MemberState::Active)
            .count()
            == 2
    })
    .await;
    let configured = pool_state(&cluster).await?.config().retention_ticks;
    assert_eq!(configured, 20, "the leader configured --retention-ticks");

    eprintln!("--- step: create and delete two sandboxes");
    let mut admin = pool_admin(cluster.get(1)).await?;
    for id in ["gc-1", "gc-2"] {
        create_sandbox(&cluster, id).await;
        admin
            .delete_sandbox(DeleteSandboxRequest {
                sandbox_id: id.into(),
                request_id: String::new(),
            })
            .await?;
    }

    eprintln!("--- step: s2 stops and leaves the pool");
    supervisors[1].signal("-TERM");
    let s2_gone = supervisors[1].wait_exit(Duration::from_secs(30)).await;
    assert!(
        s2_gone.is_some(),
        "s2 did not stop: {}",
        supervisors[1].log()
    );

    eprintln!("--- step: the records go once the retention passed");
    let status = wait_pool(
        &cluster,
        "no sandbox and no s2 left",
        Duration::from_secs(60),
        |s| s.sandboxes.is_empty() && member(s, "s2").is_none(),
    )
    .await;
    let s1 = member(&status, "s1").ok_or("s1 was collected")?;
    assert_eq!(s1.state(), MemberState::Active, "a live member stays");
    let listed = admin
        .list_sandboxes(ListSandboxesRequest {
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(listed.sandboxes.is_empty(), "{:?}", listed.sandboxes);
    let state = pool_state(&cluster).await?;
    assert!(state.sandboxes().is_empty(), "{:?}", state.sandboxes());
    assert!(state.launches().is_empty(), "{:?}", state.launches());
    assert!(state.member("s2").is_none());
    assert!(state.generation_floor() >= 1);

    eprintln!("--- step: a collected id launches again, above the floor");
    let again = create_sandbox(&cluster, "gc-1").await;
    assert!(
        again.generation > 1,
        "generation {} reused",
        again.generation
    );
    Ok(())
}

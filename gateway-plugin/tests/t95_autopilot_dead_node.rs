//! The voter autopilot adds only a desired node that answers as itself.
//!
//! - given: 3 gateways at 127.0.1.{1,2,3}:PORT with the autopilot (replicas
//!   file says 3)
//! - when: the file says 4 while nothing runs at node 4's address, then a
//!   gateway that is another node (id 9) answers there
//! - then: node 4 is never added nor promoted (nothing answers as node 4);
//!   the leader says what it waits for
//! - when: node 4 itself starts there
//! - then: it is added and promoted: 4 voters

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use proto::cluster::{ClusterStatus, StatusRequest};
use testkit::gateway::*;
use testkit::ports::free_port_on;
use testkit::TestResult;

async fn leader_view(cluster: &Cluster, via: u64) -> TestResult<ClusterStatus> {
    Ok(cluster
        .get(via)
        .admin()
        .await?
        .status(StatusRequest { local: false })
        .await?
        .into_inner())
}

fn ids(status: &ClusterStatus) -> BTreeSet<(u64, bool)> {
    status.nodes.iter().map(|n| (n.id, n.voter)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_desired_node_that_does_not_answer_is_never_added() -> TestResult<()> {
    let port = free_port_on(&["127.0.1.1", "127.0.1.2", "127.0.1.3", "127.0.1.4"]);
    let dir = tempfile::tempdir()?;
    let replicas = dir.path().join("replicas");
    std::fs::write(&replicas, "3")?;
    let source = format!("file:{}", replicas.display());
    let template = format!("127.0.1.{{node_id}}:{port}");
    let extra = [
        "--sandbox-driver",
        "none",
        "--autopilot-replicas",
        &source,
        "--autopilot-peer-address",
        &template,
    ];
    let mut cluster = Cluster::start_on_loopback_ips(3, port, &extra);
    cluster.wait_leader("bootstrap").await;
    let three: BTreeSet<(u64, bool)> = [(1, true), (2, true), (3, true)].into();

    eprintln!("--- step: the file says 4; nothing runs at node 4's address");
    std::fs::write(&replicas, "4")?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        ids(&leader_view(&cluster, 1).await?),
        three,
        "node 4 is not added"
    );
    let leader = cluster.wait_leader("waiting").await;
    assert!(
        cluster
            .get(leader)
            .log()
            .contains("waiting for node 4 at 127.0.1.4"),
        "the leader says what it waits for"
    );
    put(cluster.get(1), "k", "v").await?;

    eprintln!("--- step: node 9 answers at node 4's address");
    let mut impostor = Gateway::new(
        9,
        cluster.root.path(),
        extra.iter().map(|s| s.to_string()).collect(),
    );
    impostor.addr = Gateway::loopback_addr(4, port);
    impostor.start();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        ids(&leader_view(&cluster, 1).await?),
        three,
        "another node answering there is not added"
    );
    let leader = cluster.wait_leader("impostor").await;
    assert!(
        cluster
            .get(leader)
            .log()
            .contains("answers as node 9, not 4"),
        "the leader names the node that answers"
    );
    impostor.kill9();

    eprintln!("--- step: node 4 itself starts there");
    cluster.add_node_on_loopback_ip(4, port, &extra);
    let deadline = Instant::now() + Duration::from_secs(60);
    let four: BTreeSet<(u64, bool)> = [(1, true), (2, true), (3, true), (4, true)].into();
    loop {
        if let Ok(view) = leader_view(&cluster, 1).await {
            if ids(&view) == four {
                break;
            }
        }
        if Instant::now() > deadline {
            cluster.dump_logs();
            panic!("node 4 was not added and promoted within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(get(cluster.get(4), "k", false).await?.as_deref(), Some("v"));
    Ok(())
}

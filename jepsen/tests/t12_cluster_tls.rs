//! t12: the harness's clusters speak TLS, and the membership nemesis's
//! remove / re-add works with peer addresses (about 30 s).
//!
//! - given: 3 gateways in their own network namespaces, started by the
//!   harness with the run's CA, a certificate each naming its namespace
//!   address, a signing key, an admin token, a client and a peer port
//! - when: the harness checks the transport of the leader
//! - then: the harness's client (TLS + token) is served; plaintext is
//!   refused on both ports, no token on the client port, no client
//!   certificate on the peer port; the raft membership holds peer addresses
//! - when: a follower is removed, wiped and added back as a learner at its
//!   peer address, then promoted (what the membership nemesis does)
//! - then: it catches up over mutual TLS and is a voter again
//! - when: the same cluster is built `--insecure`
//! - then: plaintext is served and the harness checks nothing

mod common;

use std::time::Duration;

use jepsen::cluster::{Cluster, GatewayOptions};
use jepsen::security::Security;
use proto::cluster::{AddLearnerRequest, Node, PromoteRequest, RemoveRequest, StatusRequest};

fn gateway_options(security: Security) -> GatewayOptions {
    GatewayOptions {
        bin: common::gateway_bin(),
        heartbeat_ms: 50,
        election_ms: (300, 600),
        faketime: false,
        client_timeout: Duration::from_secs(6),
        config: Default::default(),
        security,
        members: vec!["s1".into()],
    }
}

/// A cluster of 3 under a fresh run id, with its leader.
async fn start_cluster(tag: &str, security: Security) -> (Cluster, usize, jepsen::net::RunLock) {
    let run = format!("{tag}{:04x}", std::process::id() & 0xffff);
    let lock = jepsen::net::RunLock::acquire(&run).unwrap_or_else(|e| panic!("{e:#}"));
    let dir = common::profile_dir()
        .join("jepsen-runs")
        .join(format!("t12-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let cluster = Cluster::create(&run, 3, &dir, gateway_options(security))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    cluster.start_all().unwrap_or_else(|e| panic!("{e:#}"));
    let leader = cluster
        .wait_leader(Duration::from_secs(60), "initial election")
        .await
        .unwrap_or_else(|e| panic!("{e:#}; logs in {}", dir.display()));
    (cluster, leader, lock)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_clusters_speak_tls_and_rejoin_at_peer_addresses() {
    if common::skip_without_root("jepsen::t12_cluster_tls") {
        return;
    }
    jepsen::run::preflight().unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!("--- step: a secure cluster of 3");
    let (cluster, leader, lock) = start_cluster("s", Security::Tls).await;

    eprintln!("--- step: the harness checks the leader's transport");
    let transport = jepsen::security_probe::probe(&cluster, leader)
        .await
        .unwrap_or_else(|| panic!("a secure run probes its transport"));
    eprintln!("transport: {transport}");
    for (check, verdict) in transport
        .as_object()
        .unwrap_or_else(|| panic!("{transport}"))
        .iter()
        .filter(|(k, _)| *k != "node")
    {
        assert_eq!(verdict["ok"], serde_json::json!(true), "{check}: {verdict}");
    }
    let status = cluster
        .node(leader)
        .unwrap_or_else(|e| panic!("{e:#}"))
        .admin()
        .status(StatusRequest { local: false })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .into_inner();
    for n in &cluster.nodes {
        let member = status.nodes.iter().find(|m| m.id == n.id as u64);
        assert_eq!(
            member.map(|m| m.addr.as_str()),
            Some(n.peer_addr.as_str()),
            "raft membership holds peer addresses: {status:?}"
        );
        assert_ne!(n.peer_addr, n.addr);
    }

    eprintln!("--- step: remove a follower, wipe it, add it back at its peer address");
    let k = (1..=3).find(|i| *i != leader).unwrap_or(1);
    let via = cluster.node(leader).unwrap_or_else(|e| panic!("{e:#}"));
    via.admin()
        .remove(RemoveRequest { id: k as u64 })
        .await
        .unwrap_or_else(|e| panic!("remove n{k}: {e}"));
    let gone = cluster.node(k).unwrap_or_else(|e| panic!("{e:#}"));
    gone.kill9();
    gone.wipe().unwrap_or_else(|e| panic!("{e:#}"));
    cluster.start(k).unwrap_or_else(|e| panic!("{e:#}"));
    let mut added = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let leader = cluster.current_leader().await;
        let via = cluster
            .node(leader.max(1))
            .unwrap_or_else(|e| panic!("{e:#}"));
        if !added {
            let r = via
                .admin()
                .add_learner(AddLearnerRequest {
                    node: Some(Node {
                        id: k as u64,
                        addr: gone.peer_addr.clone(),
                    }),
                    blocking: true,
                })
                .await;
            added = r.is_ok();
        }
        if added {
            let r = via
                .admin()
                .promote(PromoteRequest {
                    id: k as u64,
                    force: false,
                })
                .await;
            if r.is_ok() {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "n{k} not re-added within 60 s; logs in {}",
            cluster.dir.display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    cluster
        .wait_converged(Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let voter = gone
        .status()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .nodes
        .into_iter()
        .find(|m| m.id == k as u64)
        .unwrap_or_else(|| panic!("n{k} is not in the membership"));
    assert!(voter.voter, "n{k} is a voter again: {voter:?}");
    drop(cluster);
    drop(lock);

    eprintln!("--- step: the same cluster --insecure, for comparison");
    let (plain, leader, lock) = start_cluster("i", Security::Insecure).await;
    assert!(jepsen::security_probe::probe(&plain, leader)
        .await
        .is_none());
    let n = plain.node(leader).unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(n.addr, n.peer_addr, "--insecure: one port");
    n.status()
        .await
        .unwrap_or_else(|e| panic!("plaintext served: {e}"));
    drop(plain);
    drop(lock);
    assert!(jepsen::net::stale_leftovers().is_empty());
}

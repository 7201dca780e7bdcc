//! Scenario: operators identify with client certificates instead of tokens
//! (`auth.client_ca_file`, `admin_certificate_names`,
//! `viewer_certificate_names`).
//!
//! - given: three secure gateways whose client port also accepts
//!   certificates of an operators' CA (not the cluster CA): `alice` is an
//!   admin, `dana` a viewer; `mallory` holds a certificate of that CA
//!   mapped to nothing; `alice` again, signed by the cluster CA
//! - then (no token anywhere): alice reads (`raft status`) and changes
//!   (`pool rebalance`); through a follower alone she moves the leadership
//!   (`raft transfer-leader`: the follower replays the call on the leader,
//!   vouching for her on the mutual-TLS peer port); dana reads but a change
//!   is refused naming `platform_admin`; mallory is refused naming her
//!   common name; the cluster-CA-signed "alice" fails the TLS handshake;
//!   without certificate and token the call is refused naming both
//! - then: a role claimed in `x-openshell-vouched-role` on the client port
//!   counts for nothing; alice's certificate does not open the peer port
//! - then: an anonymous `ObjectStore.Watch` or `PoolAdmin.WatchPool` is
//!   `UNAUTHENTICATED`; dana's certificate follows `sandbox list --watch`
//! - then: tokens still work next to certificates

mod common;

use common::cli::*;
use common::*;
use proto::tls::generate::{Ca, Usage};

/// `openshell-pool` presenting the certificate `stem` of `dir` (no token).
fn as_cert(ca_file: &str, dir: &std::path::Path, stem: &str) -> Vec<String> {
    vec![
        "--ca-file".into(),
        ca_file.into(),
        "--client-cert-file".into(),
        dir.join(format!("{stem}.crt")).display().to_string(),
        "--client-key-file".into(),
        dir.join(format!("{stem}.key")).display().to_string(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_identify_by_client_certificate_next_to_tokens() -> TestResult {
    let (root, material, mut nodes) = Cluster::secure_nodes(3, &[]);
    let operators = root.path().join("operators");
    std::fs::create_dir_all(&operators)?;
    let operators_ca = Ca::create(&operators, "operators CA")?;
    for stem in ["alice", "dana", "mallory"] {
        operators_ca.issue(&operators, stem, &[], Usage::Client)?;
    }
    let impostor = root.path().join("impostor");
    std::fs::create_dir_all(&impostor)?;
    material.ca.issue(&impostor, "alice", &[], Usage::Client)?;
    let config = root.path().join("certificates.toml");
    std::fs::write(
        &config,
        format!(
            "[openshell.gateway.auth]\nclient_ca_file = \"{}\"\nadmin_certificate_names = [\"alice\"]\nviewer_certificate_names = [\"dana\"]\n",
            operators_ca.cert.display()
        ),
    )?;
    for node in &mut nodes {
        node.set_flag("--config", config.display().to_string());
    }
    let cluster = Cluster::bootstrap_secure(root, material, nodes);
    let leader = cluster.wait_leader("secure cluster up").await;
    let material = cluster.material.as_ref().ok_or("material")?;
    let ca = material.ca.cert.display().to_string();
    let all = cluster
        .nodes
        .iter()
        .map(|g| g.addr.clone())
        .collect::<Vec<_>>()
        .join(",");
    let alice = as_cert(&ca, &operators, "alice");
    let dana = as_cert(&ca, &operators, "dana");

    eprintln!("--- step: alice (admin certificate, no token) reads and changes");
    let (code, out, err) = pool_as(&alice, &all, &["raft", "status"]);
    assert_eq!(code, 0, "alice raft status: {err}");
    assert!(out.contains("leader"), "{out}");
    let (code, _, err) = pool_as(&alice, &all, &["pool", "rebalance"]);
    assert_eq!(code, 0, "alice pool rebalance: {err}");

    eprintln!("--- step: alice moves the leadership through a follower alone");
    let follower = cluster
        .nodes
        .iter()
        .find(|n| n.id != leader)
        .ok_or("no follower")?;
    let (code, out, err) = pool_as(&alice, &follower.addr, &["raft", "transfer-leader"]);
    assert_eq!(
        code, 0,
        "transfer-leader through follower {}: {err}",
        follower.id
    );
    eprintln!("--- step: {}", out.trim());
    let moved = cluster.wait_leader("after the transfer").await;
    assert_ne!(moved, leader, "the leadership moved");

    eprintln!("--- step: dana (viewer) reads, cannot change");
    let (code, _, err) = pool_as(&dana, &all, &["raft", "status"]);
    assert_eq!(code, 0, "dana raft status: {err}");
    let (code, _, err) = pool_as(&dana, &all, &["pool", "rebalance"]);
    assert_ne!(code, 0);
    assert!(err.contains("platform_admin"), "dana's change: {err}");

    eprintln!("--- step: mallory (unmapped), the impostor, and nobody are refused");
    let (code, _, err) = pool_as(
        &as_cert(&ca, &operators, "mallory"),
        &all,
        &["raft", "status"],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("CN=mallory") && err.contains("not mapped"),
        "mallory: {err}"
    );
    let (code, _, err) = pool_as(&as_cert(&ca, &impostor, "alice"), &all, &["raft", "status"]);
    assert_eq!(
        code, 3,
        "a certificate of the cluster CA is no operator: {err}"
    );
    assert!(
        err.contains("TLS") && err.contains("refused the client certificate"),
        "the impostor fails the handshake: {err}"
    );
    eprintln!("--- step: the impostor is told: {}", err.trim());
    let (code, _, err) = pool_as(
        &["--ca-file".to_string(), ca.clone()],
        &all,
        &["raft", "status"],
    );
    assert_ne!(code, 0);
    assert!(err.contains("client certificate"), "no identity: {err}");

    eprintln!("--- step: a vouched role on the client port counts for nothing");
    let tls = proto::tls::ClientTls::load(&material.ca.cert, None)?;
    let config =
        proto::client::ClientConfig::for_role(proto::client::Role::Cli).with_tls(Some(tls));
    let channel =
        proto::client::connect(proto::client::Role::Cli, &cluster.get(moved).addr, &config).await?;
    let mut request = tonic::Request::new(proto::cluster::TriggerSnapshotRequest {});
    request
        .metadata_mut()
        .insert(proto::metadata::VOUCHED_ROLE, "platform_admin".parse()?);
    let spoofed = proto::cluster::cluster_admin_client::ClusterAdminClient::new(channel.clone())
        .trigger_snapshot(request)
        .await;
    assert_eq!(
        spoofed.err().map(|s| s.code()),
        Some(tonic::Code::Unauthenticated),
        "a vouched role from a client is ignored"
    );

    eprintln!("--- step: the watches want an identity like every read");
    let anonymous = proto::objects::object_store_client::ObjectStoreClient::new(channel.clone())
        .watch(proto::objects::WatchRequest::default())
        .await;
    assert_eq!(
        anonymous.err().map(|s| s.code()),
        Some(tonic::Code::Unauthenticated),
        "an anonymous object watch"
    );
    let anonymous = proto::pool_admin::pool_admin_client::PoolAdminClient::new(channel)
        .watch_pool(proto::pool_admin::WatchPoolRequest::default())
        .await;
    assert_eq!(
        anonymous.err().map(|s| s.code()),
        Some(tonic::Code::Unauthenticated),
        "an anonymous pool watch"
    );
    let (code, out, err) = {
        let mut child = std::process::Command::new(pool_bin())
            .args(&dana)
            .args([
                "--endpoints",
                &all,
                "sandbox",
                "list",
                "--watch",
                "-o",
                "json",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        child.kill()?;
        let output = child.wait_with_output()?;
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    assert!(
        out.lines().next().is_some_and(|l| l.starts_with('[')),
        "dana (viewer certificate) follows the sandboxes: rc {code:?}, {out} {err}"
    );

    eprintln!("--- step: alice's certificate does not open the peer port");
    let peer = cluster.get(moved).peer_addr.clone().ok_or("no peer port")?;
    let alice_tls = proto::tls::ClientTls::load(
        &material.ca.cert,
        Some((&operators.join("alice.crt"), &operators.join("alice.key"))),
    )?;
    let config =
        proto::client::ClientConfig::for_role(proto::client::Role::Cli).with_tls(Some(alice_tls));
    let refused = match proto::client::connect(proto::client::Role::Cli, &peer, &config).await {
        Err(_) => true,
        Ok(channel) => proto::cluster::cluster_admin_client::ClusterAdminClient::new(channel)
            .status(proto::cluster::StatusRequest { local: true })
            .await
            .is_err(),
    };
    assert!(refused, "an operator certificate opened the peer port");

    eprintln!("--- step: tokens still work");
    let (code, _, err) = pool_as(&material_security(material), &all, &["raft", "status"]);
    assert_eq!(code, 0, "token: {err}");
    Ok(())
}

//! Scenario: gateways on a network. Every gRPC port speaks TLS 1.3; the
//! peer port admits only callers presenting a certificate the cluster CA
//! signed; a gateway refuses to start without TLS, a signing key and a
//! token unless told `--insecure`; a certificate swapped the way Kubernetes
//! updates a mounted Secret is served to new connections while the cluster
//! keeps working.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proto::client::{self, ClientConfig, Role};
use proto::objects::object_store_client::ObjectStoreClient;
use proto::objects::{precondition, Precondition, PutRequest};
use proto::raft::raft_transport_client::RaftTransportClient;
use proto::raft::RaftPayload;
use proto::tls::generate::{Ca, Usage};
use proto::tls::ClientTls;
use testkit::bins::gateway_bin;
use testkit::gateway::{object, Cluster, Gateway};
use testkit::secure::{cert_der, Material};
use testkit::TestResult;

/// A raft vote whose body does not decode: a caller that reaches the
/// service gets INVALID_ARGUMENT, one stopped earlier gets a transport
/// error.
fn garbage_vote() -> RaftPayload {
    RaftPayload {
        encoding: 1,
        data: vec![0xff; 7],
        cluster_id: "test".into(),
        target_node_id: 0,
    }
}

/// A vote sent to `addr` over a channel configured with `tls`.
async fn vote(addr: &str, tls: Option<ClientTls>) -> Result<(), tonic::Status> {
    let config = ClientConfig::for_role(Role::Peer)
        .with_request_timeout(Duration::from_secs(5))
        .with_tls(tls);
    let channel = client::connect(Role::Peer, addr, &config)
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    RaftTransportClient::new(channel)
        .vote(garbage_vote())
        .await
        .map(|_| ())
}

/// An append sent to `addr` over a channel configured with `tls`.
async fn append(addr: &str, tls: Option<ClientTls>) -> Result<(), tonic::Status> {
    let config = ClientConfig::for_role(Role::Peer)
        .with_request_timeout(Duration::from_secs(5))
        .with_tls(tls);
    let channel = client::connect(Role::Peer, addr, &config)
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    RaftTransportClient::new(channel)
        .append_entries(garbage_vote())
        .await
        .map(|_| ())
}

/// A put through `node`'s client port (a follower forwards it to the
/// leader over the peer port).
async fn put(node: &Gateway, id: &str, value: &str) -> TestResult<()> {
    let request = node.request(PutRequest {
        object: Some(object(id, value)),
        precondition: Some(Precondition {
            kind: Some(precondition::Kind::Unconditional(true)),
        }),
        request_id: String::new(),
    });
    ObjectStoreClient::new(node.channel().await?)
        .put(request)
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_secure_cluster_speaks_tls_and_its_peer_port_needs_a_cluster_certificate() -> TestResult {
    let cluster = Cluster::start_secure(3, &[]);
    let leader = cluster.wait_leader("bootstrap over mutual TLS").await;
    let follower = (1..=3).find(|id| *id != leader).unwrap_or(1);
    let node = cluster.get(follower);
    let material = cluster.material.as_ref().ok_or("secure cluster")?;

    eprintln!("--- step: a write through a follower is forwarded over the peer port");
    put(node, "k", "v").await?;

    eprintln!("--- step: plaintext clients are refused by both gRPC ports");
    let peer = node.peer_addr.clone().ok_or("peer port")?;
    for addr in [&node.addr, &peer] {
        let plain = vote(addr, None).await;
        let status = plain.expect_err("a plaintext call must fail");
        assert_ne!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{addr}: a plaintext caller reached the service: {status}"
        );
    }

    eprintln!("--- step: the peer port refuses callers without a cluster certificate");
    let no_cert = ClientTls::load(&material.ca.cert, None)?;
    let status = vote(&peer, Some(no_cert.clone()))
        .await
        .expect_err("no certificate");
    assert_ne!(status.code(), tonic::Code::InvalidArgument, "{status}");
    let status = append(&peer, Some(no_cert))
        .await
        .expect_err("no certificate");
    assert_ne!(status.code(), tonic::Code::InvalidArgument, "{status}");
    let other = tempfile::tempdir()?;
    let other_ca = Ca::create(other.path(), "another CA")?;
    let foreign = other_ca.issue(
        other.path(),
        "foreign",
        &["127.0.0.1".to_string()],
        Usage::ServerAndClient,
    )?;
    let foreign = ClientTls::load(&material.ca.cert, Some((&foreign.cert, &foreign.key)))?;
    let status = vote(&peer, Some(foreign.clone()))
        .await
        .expect_err("foreign certificate");
    assert_ne!(status.code(), tonic::Code::InvalidArgument, "{status}");
    let status = append(&peer, Some(foreign))
        .await
        .expect_err("foreign certificate");
    assert_ne!(status.code(), tonic::Code::InvalidArgument, "{status}");

    eprintln!("--- step: a caller trusting another CA refuses the gateway");
    let stranger = ClientTls::load(&other_ca.cert, None)?;
    let status = vote(&node.addr, Some(stranger))
        .await
        .expect_err("unknown CA");
    assert_ne!(status.code(), tonic::Code::InvalidArgument, "{status}");

    eprintln!("--- step: a gateway certificate reaches the raft service; the client port has none");
    let issued = material.issue("another-gateway", Usage::ServerAndClient);
    let gateway_tls = ClientTls::load(&material.ca.cert, Some((&issued.cert, &issued.key)))?;
    let status = vote(&peer, Some(gateway_tls.clone()))
        .await
        .expect_err("garbage vote");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status}");
    let status = append(&peer, Some(gateway_tls.clone()))
        .await
        .expect_err("garbage append");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status}");
    let status = vote(&node.addr, Some(gateway_tls))
        .await
        .expect_err("no raft service on the client port");
    assert_eq!(status.code(), tonic::Code::Unimplemented, "{status}");
    Ok(())
}

/// Runs a gateway with `args` to its exit (at most 20 s); (code, stderr).
fn run_to_exit(args: &[&str], dir: &Path) -> (Option<i32>, String) {
    let mut child = Command::new(gateway_bin())
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait: {e}"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn a_gateway_without_tls_key_or_tokens_refuses_to_start_in_one_line() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let listen = format!("127.0.0.1:{}", testkit::ports::free_port());
    let (code, stderr) = run_to_exit(
        &["--node-id", "1", "--listen", &listen],
        &dir.path().join("data"),
    );
    println!("rc {code:?}: {stderr}");
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    for flag in [
        "--signing-key-file",
        "--tls-cert-file",
        "--tls-key-file",
        "--tls-ca-file",
        "--peer-listen",
        "--admin-token-file",
        "--insecure",
    ] {
        assert!(stderr.contains(flag), "{flag} not named: {stderr}");
    }
    assert!(
        !dir.path().join("data").exists(),
        "nothing is created by a refused start"
    );

    // Only the token is missing: only the token is named.
    let material = Material::generate(&dir.path().join("tls"));
    let issued = material.issue("gateway-1", Usage::ServerAndClient);
    let peer = format!("127.0.0.1:{}", testkit::ports::free_port());
    let flags = material.gateway_flags(&issued);
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let at = args.len() - 2;
    args.truncate(at); // drop --admin-token-file
    args.extend([
        "--node-id",
        "1",
        "--listen",
        &listen,
        "--peer-listen",
        &peer,
    ]);
    let (code, stderr) = run_to_exit(&args, &dir.path().join("data"));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--admin-token-file"), "{stderr}");
    assert!(!stderr.contains("--tls-cert-file"), "{stderr}");

    // An expired certificate is named.
    let old = material
        .ca
        .issue_valid(
            &material.dir,
            "expired",
            &["127.0.0.1".to_string()],
            Usage::ServerAndClient,
            Some(((2020, 1, 1), (2021, 1, 1))),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let flags = material.gateway_flags(&old);
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend([
        "--node-id",
        "1",
        "--listen",
        &listen,
        "--peer-listen",
        &peer,
    ]);
    let (code, stderr) = run_to_exit(&args, &dir.path().join("data"));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("expired.crt") && stderr.contains("expired at"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_certificate_swapped_like_a_kubernetes_secret_is_served_to_new_connections() -> TestResult
{
    let root = tempfile::tempdir()?;
    let material = Material::generate(&root.path().join("tls"));
    // Node 1's certificate is mounted the way the kubelet mounts a Secret.
    let mut mounted = material.mount(&root.path().join("mounted"), Usage::ServerAndClient);
    let nodes: Vec<Gateway> = (1..=3)
        .map(|id| match id {
            1 => Gateway::new_secure_with(id, root.path(), &material, &mounted.files, Vec::new()),
            _ => Gateway::new_secure(id, root.path(), &material, Vec::new()),
        })
        .collect();
    let cluster = Cluster::bootstrap(root, nodes);
    cluster.wait_leader("bootstrap").await;
    let node = cluster.get(1);
    let tls = material.client().tls;
    let peer = node.peer_addr.clone().ok_or("peer port")?;
    assert_eq!(
        tls.served_certificate(&node.addr).await?,
        cert_der(&mounted.current.cert)
    );

    eprintln!("--- step: swap ..data to a new certificate");
    material.rotate(&mut mounted, Usage::ServerAndClient);
    let want = cert_der(&mounted.current.cert);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let client = tls.served_certificate(&node.addr).await?;
        let peer_port = tls_with_cert(&material)?.served_certificate(&peer).await?;
        if client == want && peer_port == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate is not served 15 s after the swap"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    eprintln!("--- step: the cluster keeps working through node 1");
    put(node, "after-rotation", "v").await?;
    let leader = cluster.wait_leader("after the rotation").await;
    assert_ne!(leader, 0);
    Ok(())
}

/// A client presenting a gateway certificate (the peer port asks for one).
fn tls_with_cert(material: &Material) -> TestResult<ClientTls> {
    let issued = material.issue("probe", Usage::Client);
    Ok(ClientTls::load(
        &material.ca.cert,
        Some((&issued.cert, &issued.key)),
    )?)
}

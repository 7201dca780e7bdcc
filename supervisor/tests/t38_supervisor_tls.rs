//! Scenario: supervisors attach to secure gateways over TLS.
//!
//! - given: three secure gateways (TLS on both ports, mutual TLS between
//!   them, an admin token, a signing key); gateway 1's certificate mounted
//!   the way the kubelet mounts a Secret
//! - when: a supervisor trusting the cluster CA attaches (to gateway 1 first)
//!   and runs a sandbox
//! - then: it attaches and the sandbox runs; a supervisor trusting another CA
//!   refuses the gateways (it never becomes a member); a plaintext one
//!   cannot attach
//! - when: gateway 1's certificate is rotated by swapping `..data`
//! - then: the new certificate is served to new connections, and the
//!   supervisor's stream stays up: no re-attach, same incarnation, the
//!   sandbox keeps its owner and term

use std::time::{Duration, Instant};

use proto::tls::generate::{Ca, Usage};
use testkit::gateway::{Cluster, Gateway};
use testkit::secure::{cert_der, Material};
use testkit::supervisor::*;
use testkit::TestResult;

/// How many times the supervisor's log says it attached.
fn attaches(s: &Supervisor) -> usize {
    s.log().matches("attached gateway=").count()
}

#[tokio::test]
async fn supervisors_attach_over_tls_and_a_rotated_certificate_keeps_streams_up() -> TestResult {
    let root = tempfile::tempdir()?;
    let material = Material::generate(&root.path().join("tls"));
    let mut mounted = material.mount(&root.path().join("mounted"), Usage::ServerAndClient);
    let timing: Vec<String> = FAST_TIMING.iter().map(|s| s.to_string()).collect();
    let nodes: Vec<Gateway> = (1..=3)
        .map(|id| match id {
            1 => {
                Gateway::new_secure_with(id, root.path(), &material, &mounted.files, timing.clone())
            }
            _ => Gateway::new_secure(id, root.path(), &material, timing.clone()),
        })
        .collect();
    let mut cluster = Cluster::bootstrap(root, nodes);
    cluster.wait_leader("bootstrap").await;
    let _cleanup = KillUnder(cluster.root.path().to_path_buf());
    let gateways: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
    let ca = material.ca.cert.display().to_string();

    eprintln!("--- step: a supervisor trusting the cluster CA attaches and runs a sandbox");
    let mut s1 = Supervisor::new("s1", gateways.clone(), cluster.root.path());
    s1.listed_order = true;
    s1.env.push(("OPENSHELL_TLS_CA_FILE".into(), ca.clone()));
    s1.start();
    wait_member(&cluster, "s1", "active").await;
    let sb = running_sandbox(&cluster, "sb-tls").await;
    let (_, by) = read_counter(&cluster, "sb-tls").await?;
    assert_eq!(
        by, "s1",
        "exec reaches the sandbox through the TLS gateways"
    );
    let status = pool_status(&cluster).await?;
    let incarnation = member(&status, "s1").ok_or("s1")?.incarnation;
    assert_eq!(attaches(&s1), 1, "{}", s1.log());

    eprintln!("--- step: a supervisor trusting another CA refuses the gateways");
    let other = tempfile::tempdir()?;
    let other_ca = Ca::create(other.path(), "another CA")?;
    let mut s2 = Supervisor::new("s2", gateways.clone(), cluster.root.path());
    s2.env.push((
        "OPENSHELL_TLS_CA_FILE".into(),
        other_ca.cert.display().to_string(),
    ));
    s2.start();
    eprintln!("--- step: a plaintext supervisor cannot attach");
    let mut s3 = Supervisor::new("s3", gateways.clone(), cluster.root.path());
    s3.start();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && !(s2.log().contains("UnknownIssuer")) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        s2.log().contains("UnknownIssuer"),
        "s2 names the certificate problem: {}",
        s2.log()
    );
    let status = pool_status(&cluster).await?;
    assert!(member(&status, "s2").is_none(), "{status:?}");
    assert!(member(&status, "s3").is_none(), "{status:?}");
    assert_eq!(attaches(&s2), 0);
    assert_eq!(attaches(&s3), 0);

    eprintln!("--- step: rotate gateway 1's certificate by swapping ..data");
    let node = cluster.node(1);
    let tls = material.client().tls;
    let before = tls.served_certificate(&node.addr).await?;
    assert_eq!(before, cert_der(&mounted.current.cert));
    material.rotate(&mut mounted, Usage::ServerAndClient);
    let want = cert_der(&mounted.current.cert);
    let deadline = Instant::now() + Duration::from_secs(15);
    while tls.served_certificate(&node.addr).await? != want {
        assert!(Instant::now() < deadline, "new certificate not served");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Several status intervals and heartbeat TTLs on the old connection.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let status = pool_status(&cluster).await?;
    let m = member(&status, "s1").ok_or("s1")?;
    assert_eq!(m.incarnation, incarnation);
    assert_eq!(proto::pool_types::MemberState::name_of(m.state), "active");
    let now = sandbox(&status, "sb-tls").ok_or("sb-tls")?;
    assert_eq!((now.owner.as_str(), now.term), (sb.owner.as_str(), sb.term));
    assert_eq!(
        attaches(&s1),
        1,
        "the stream must stay up through the rotation: {}",
        s1.log()
    );
    assert!(!s1.log().contains("attached stream failed"), "{}", s1.log());
    let (_, by) = read_counter(&cluster, "sb-tls").await?;
    assert_eq!(by, "s1");
    Ok(())
}

//! Scenario 4: the rollout regression of OpenShell #4960.
//!
//! - given: gateways that require a supervisor credential, two serving
//!   supervisors with sessions
//! - when: a replacement supervisor starts with a bad credential, and another
//!   with only an unreachable gateway endpoint
//! - then: both stay unready (liveness stays up) while the serving members
//!   keep their sessions; auth failures are counted in metrics; once the
//!   credential is fixed the replacement becomes ready and takes work, and no
//!   workload was restarted

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use proto::pool_types::SandboxPhase;
use testkit::gateway::*;
use testkit::ports::free_port;
use testkit::supervisor::*;
use testkit::TestResult;

async fn wait_ready(s: &Supervisor, want: u16, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let (code, body) = s.readyz().await;
        if code == want {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{}: /readyz stayed {code} ({body}), wanted {want}",
            s.member
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credential_or_endpoint_stays_unready_without_disturbing_sessions() -> TestResult {
    let http: BTreeMap<u64, String> = (1..=3)
        .map(|id| (id, format!("127.0.0.1:{}", free_port())))
        .collect();
    let cluster = Cluster::start_each(
        3,
        &[
            "--tick-interval-ms",
            "100",
            "--heartbeat-ttl-ms",
            "1000",
            "--supervisor-token",
            "good",
        ],
        |id| vec!["--http-listen".into(), http[&id].clone()],
    );
    cluster.wait_leader("bootstrap").await;
    let gateways: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
    let _cleanup = KillUnder(cluster.root.path().to_path_buf());
    let mut serving: Vec<Supervisor> = ["s1", "s2"]
        .iter()
        .map(|m| Supervisor::new(m, gateways.clone(), cluster.root.path()))
        .collect();
    for s in &mut serving {
        s.credential = "good".into();
        s.start();
    }
    for s in &serving {
        wait_ready(s, 200, Duration::from_secs(20)).await;
    }
    for i in 0..3 {
        create_sandbox(&cluster, &format!("sb-{i}")).await;
    }
    let before = wait_pool(
        &cluster,
        "sandboxes running",
        Duration::from_secs(30),
        |s| {
            s.sandboxes.len() == 3
                && s.sandboxes
                    .iter()
                    .all(|sb| sb.phase() == SandboxPhase::Assigned && sb.pid != 0)
        },
    )
    .await;

    eprintln!("--- step: a replacement with a bad credential stays unready; liveness stays up");
    let mut s3 = Supervisor::new("s3", gateways.clone(), cluster.root.path());
    s3.credential = "wrong".into();
    s3.start();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (code, body) = s3.readyz().await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("Unauthenticated"), "{body}");
    assert_eq!(http_get(&s3.http, "/healthz").await.0, 200);

    eprintln!("--- step: a replacement with an unreachable gateway endpoint stays unready");
    let mut s4 = Supervisor::new(
        "s4",
        vec![format!("127.0.0.1:{}", free_port())],
        cluster.root.path(),
    );
    s4.credential = "good".into();
    s4.start();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(s4.readyz().await.0, 503);
    assert_eq!(http_get(&s4.http, "/healthz").await.0, 200);

    eprintln!("--- step: the serving members kept their sessions; failures are in metrics");
    let now = pool_status(&cluster).await?;
    for sb in &now.sandboxes {
        let b = sandbox(&before, &sb.id).ok_or("missing")?;
        assert_eq!(
            (sb.owner.as_str(), sb.term),
            (b.owner.as_str(), b.term),
            "{} was disturbed",
            sb.id
        );
        assert!(alive(b.pid));
    }
    assert!(
        !now.members.iter().any(|m| m.id == "s3" || m.id == "s4"),
        "an unauthenticated member joined"
    );
    let mut refused = 0.0;
    for addr in http.values() {
        let (_, text) = http_get(addr, "/metrics").await;
        for line in text.lines().filter(|l| {
            l.starts_with("openshell_auth_failures_total") && l.contains("supervisor_host")
        }) {
            refused += line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
        }
    }
    assert!(refused >= 1.0, "auth failures are not counted");

    eprintln!("--- step: fix the credential: the replacement becomes ready and takes work");
    s3.kill9();
    s3.credential = "good".into();
    s3.start();
    wait_ready(&s3, 200, Duration::from_secs(20)).await;
    let mut landed = false;
    for i in 0..12 {
        let id = format!("new-{i}");
        create_sandbox(&cluster, &id).await;
        let s = wait_pool(
            &cluster,
            "new sandbox assigned",
            Duration::from_secs(30),
            |s| {
                sandbox(s, &id)
                    .map(|sb| sb.phase() == SandboxPhase::Assigned && sb.pid != 0)
                    .unwrap_or(false)
            },
        )
        .await;
        if sandbox(&s, &id).map(|sb| sb.owner == "s3").unwrap_or(false) {
            landed = true;
            break;
        }
    }
    assert!(landed, "no new sandbox landed on the fixed replacement");
    let after = pool_status(&cluster).await?;
    for b in &before.sandboxes {
        let a = sandbox(&after, &b.id).ok_or("missing")?;
        assert_eq!(
            (a.pid, a.generation),
            (b.pid, b.generation),
            "{} was restarted",
            b.id
        );
    }
    Ok(())
}

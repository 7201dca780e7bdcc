//! Issue 13: a supervisor can only be the member it is.
//!
//! - given: a gateway with a member credentials file {m1: c1, m2: c2}
//!   (`--member-credentials-file`) and secure supervisors (credential file,
//!   trusted grant keys, no `--insecure`)
//! - when: m1 attaches with c1; a supervisor claims m2 with c1; m2 attaches
//!   with c2; m3 is added to the file while the gateway runs; the file is
//!   then broken
//! - then: m1 and m2 are members; the impostor is refused UNAUTHENTICATED
//!   naming the member id (never the credential), logs the refusal, never
//!   becomes a member and is counted in `openshell_auth_failures_total`; m3
//!   attaches without a gateway restart; a broken file is logged naming the
//!   file and line and the previous set stays in force

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use proto::grant::GrantSigner;
use testkit::gateway::*;
use testkit::ports::free_port;
use testkit::supervisor::*;
use testkit::TestResult;

const C1: &str = "c1-credential-0123456789";
const C2: &str = "c2-credential-0123456789";
const C3: &str = "c3-credential-0123456789";

fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path.to_path_buf()
}

async fn wait_ready(s: &Supervisor, want: u16, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let (code, body) = s.readyz().await;
        if code == want {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{}: /readyz stayed {code} ({body}), wanted {want}\n{}",
            s.member,
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A secure supervisor (no `--insecure`) for `member` presenting `credential`.
fn secure(member: &str, credential: &str, gateways: &[String], dir: &Path) -> Supervisor {
    let mut s = Supervisor::new(member, gateways.to_vec(), dir);
    s.insecure = false;
    s.credential_file = Some(write(
        &dir.join(format!("{member}.credential")),
        &format!("{credential}\n"),
    ));
    s.trusted_keys_file = Some(dir.join("trusted-grant-keys"));
    s.tls_ca_file = Some(dir.join("tls").join("ca.crt"));
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_cannot_join_as_another_member() -> TestResult {
    let files = tempfile::tempdir()?;
    let signer = GrantSigner::from_seed_hex(&"35".repeat(32))?;
    let credentials = write(
        &files.path().join("member-credentials"),
        &format!("# member_id credential\nm1 {C1}\n\nm2 {C2}\n"),
    );
    let http = format!("127.0.0.1:{}", free_port());
    // A secure gateway (TLS, peer port, admin token) signing with seed 35.
    let (root, material, nodes) = Cluster::secure_nodes(
        1,
        &[
            "--tick-interval-ms",
            "100",
            "--heartbeat-ttl-ms",
            "1000",
            "--member-credentials-file",
            &credentials.display().to_string(),
            "--http-listen",
            &http,
        ],
    );
    write(&material.signing_key, &"35".repeat(32));
    let cluster = Cluster::bootstrap_secure(root, material, nodes);
    cluster.wait_leader("bootstrap").await;
    let gateways: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
    let _cleanup = KillUnder(cluster.root.path().to_path_buf());
    let dir = cluster.root.path();
    write(
        &dir.join("trusted-grant-keys"),
        &format!("# the cluster's grant key\n{}\n", signer.public_key_hex()),
    );

    eprintln!("--- step: m1 with its own credential attaches");
    let mut m1 = secure("m1", C1, &gateways, dir);
    m1.start();
    wait_ready(&m1, 200, Duration::from_secs(30)).await;
    wait_member(&cluster, "m1", "active").await;

    eprintln!("--- step: a supervisor claiming m2 with m1's credential is refused");
    let mut impostor = secure("m2", C1, &gateways, dir);
    impostor.log_path = dir.join("impostor.log");
    impostor.start();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !impostor.log().contains("does not match member id") {
        assert!(
            Instant::now() < deadline,
            "no refusal logged:\n{}",
            impostor.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = impostor.log();
    assert!(log.contains("Unauthenticated"), "{log}");
    assert!(
        log.contains("\\\"m2\\\"") || log.contains("\"m2\""),
        "{log}"
    );
    assert!(!log.contains(C1), "the credential is never logged: {log}");
    let (code, body) = impostor.readyz().await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("does not match member id"), "{body}");
    let status = pool_status(&cluster).await?;
    assert!(
        member(&status, "m2").is_none(),
        "the impostor became a member: {status:#?}"
    );
    let gateway_log = cluster.nodes[0].log();
    assert!(
        gateway_log.contains("supervisor hello refused") && !gateway_log.contains(C1),
        "{gateway_log}"
    );
    let (_, metrics) = http_get(&http, "/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("openshell_auth_failures_total")
                && l.contains("supervisor_host")
                && l.contains("credential")
                && !l.ends_with(" 0")),
        "auth failures are not counted:\n{metrics}"
    );
    impostor.kill9();

    eprintln!("--- step: m2 with its own credential attaches");
    let mut m2 = secure("m2", C2, &gateways, dir);
    m2.start();
    wait_ready(&m2, 200, Duration::from_secs(30)).await;
    wait_member(&cluster, "m2", "active").await;

    eprintln!("--- step: m3 is added to the file: it attaches without a gateway restart");
    write(
        &credentials,
        &format!("# member_id credential\nm1 {C1}\nm2 {C2}\nm3 {C3}\n"),
    );
    let mut m3 = secure("m3", C3, &gateways, dir);
    m3.start();
    wait_ready(&m3, 200, Duration::from_secs(30)).await;
    wait_member(&cluster, "m3", "active").await;

    eprintln!("--- step: a broken file is logged (file and line); the set in force stays");
    write(
        &credentials,
        &format!("m1 {C1}\nm2 {C2}\nm3 {C3}\nm1 {C2}\n"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // Refusal is noticed at the next hello: restart m3 to cause one.
        m3.kill9();
        m3.start();
        wait_ready(&m3, 200, Duration::from_secs(30)).await;
        let log = cluster.nodes[0].log();
        if log.contains("member credentials file refused") {
            assert!(
                log.contains("line 4: member m1 is listed twice")
                    && log.contains(&credentials.display().to_string()),
                "{log}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "no refusal logged:\n{log}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let status = pool_status(&cluster).await?;
    for m in ["m1", "m2", "m3"] {
        assert!(member(&status, m).is_some(), "{m} missing: {status:#?}");
    }
    Ok(())
}

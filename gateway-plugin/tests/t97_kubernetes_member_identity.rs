//! Issue 15: a supervisor Pod is the member its Kubernetes identity says
//! (`--member-identity kubernetes`, TokenReview).
//!
//! - given: a mock Kubernetes API answering TokenReview
//!   (`testkit::kube_api`), a secure gateway with `--member-identity
//!   kubernetes --member-identity-service-account openshell:openshell-supervisor`
//!   given the mock through `KUBECONFIG`, and secure supervisors whose
//!   `--credential-file` is a projected token mounted the way the kubelet
//!   mounts it (`token -> ..data/token`)
//! - when: sup-0 presents its own Pod's token; a supervisor claims sup-1
//!   with sup-0's token; sup-1 presents its own; a forged token; a token of
//!   another ServiceAccount; the API refuses the gateway (403), then
//!   hangs; sup-0's token is rotated in place (the old one expires) and the
//!   gateway restarts
//! - then: sup-0 and sup-1 join; the impostor, the forged token and the
//!   other ServiceAccount are refused UNAUTHENTICATED (never the token in a
//!   log), never become members, and are counted in
//!   `openshell_auth_failures_total` by reason; an API refusing the gateway
//!   (403, no RBAC) or hanging refuses a new hello UNAVAILABLE (naming the
//!   missing rule; within the 5 s bound) while attached members stay;
//!   after the rotation sup-0 (the same process) joins again with the new
//!   token

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use testkit::gateway::*;
use testkit::kube_api::MockKubeApi;
use testkit::ports::free_port;
use testkit::supervisor::*;
use testkit::TestResult;

const NS: &str = "openshell";
const SA: &str = "openshell-supervisor";
const AUDIENCE: &str = "openshell-gateway";
const TOK_SUP0_V1: &str = "tok-sup-0-v1-0123456789abcdef";
const TOK_SUP0_V2: &str = "tok-sup-0-v2-0123456789abcdef";
const TOK_SUP1: &str = "tok-sup-1-0123456789abcdef";
const TOK_SUP3: &str = "tok-sup-3-0123456789abcdef";
const TOK_FORGED: &str = "tok-forged-0123456789abcdef";
const TOK_OTHER_SA: &str = "tok-other-sa-0123456789abcdef";

fn write(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path.to_path_buf()
}

/// A projected token mounted like the kubelet does: `dir/token ->
/// ..data/token`, `..data -> ..vN`; [`rotate`] swaps `..data` atomically.
fn mount_token(dir: &Path, version: u32, token: &str) -> PathBuf {
    let real = dir.join(format!("..v{version}"));
    std::fs::create_dir_all(&real).unwrap_or_else(|e| panic!("{e}"));
    write(&real.join("token"), token);
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(format!("..v{version}"), &tmp).unwrap_or_else(|e| panic!("{e}"));
    std::fs::rename(&tmp, dir.join("..data")).unwrap_or_else(|e| panic!("{e}"));
    let link = dir.join("token");
    if !link.exists() {
        std::os::unix::fs::symlink("..data/token", &link).unwrap_or_else(|e| panic!("{e}"));
    }
    link
}

/// A secure supervisor for `member` whose credential file is a mounted
/// token under `dir/<log>-token/`.
fn supervisor(member: &str, log: &str, token: &str, gateways: &[String], dir: &Path) -> Supervisor {
    let mut s = Supervisor::new(member, gateways.to_vec(), dir);
    s.log_path = dir.join(format!("{log}.log"));
    s.insecure = false;
    let mount = dir.join(format!("{log}-token"));
    std::fs::create_dir_all(&mount).unwrap_or_else(|e| panic!("{e}"));
    s.credential_file = Some(mount_token(&mount, 1, token));
    s.trusted_keys_file = Some(dir.join("trusted-grant-keys"));
    s.tls_ca_file = Some(dir.join("tls").join("ca.crt"));
    s
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

/// Starts a supervisor that must be refused: waits for `expect` in its
/// log, checks it is not ready, not a member and never logged a token.
async fn refused(cluster: &Cluster, mut s: Supervisor, expect: &str, token: &str) {
    s.start();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !s.log().contains(expect) {
        assert!(
            Instant::now() < deadline,
            "{}: no {expect:?} in its log:\n{}",
            s.member,
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, body) = s.readyz().await;
    assert_eq!(code, 503, "{body}");
    assert!(!s.log().contains(token), "a token was logged:\n{}", s.log());
    let status = pool_status(cluster).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        member(&status, &s.member).is_none(),
        "{} became a member: {status:#?}",
        s.member
    );
    s.kill9();
}

/// Waits (30 s at most) for `text` in `s`'s log.
async fn wait_log(s: &Supervisor, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !s.log().contains(text) {
        assert!(
            Instant::now() < deadline,
            "{}: no {text:?} in its log:\n{}",
            s.member,
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `openshell_auth_failures_total{service="supervisor_host"}` count
/// of `reason`.
async fn failures(http: &str, reason: &str) -> u64 {
    let (_, metrics) = http_get(http, "/metrics").await;
    metrics
        .lines()
        .filter(|l| l.starts_with("openshell_auth_failures_total"))
        .filter(|l| l.contains("supervisor_host") && l.contains(&format!("reason=\"{reason}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn attached(gateway: &Gateway, member: &str) -> usize {
    gateway
        .log()
        .lines()
        .filter(|l| l.contains("supervisor attached") && l.contains(&format!("member={member}")))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_joins_only_as_the_pod_its_token_names() -> TestResult {
    let api_dir = tempfile::tempdir()?;
    let api = MockKubeApi::start(api_dir.path()).await?;
    api.issue(TOK_SUP0_V1, NS, SA, "sup-0", &[AUDIENCE]);
    api.issue(TOK_SUP1, NS, SA, "sup-1", &[AUDIENCE]);
    api.issue(TOK_SUP3, NS, SA, "sup-3", &[AUDIENCE]);
    api.issue(TOK_OTHER_SA, NS, "default", "sup-2", &[AUDIENCE]);
    let kubeconfig = api.kubeconfig.display().to_string();
    let env = [("KUBECONFIG", kubeconfig.as_str())];
    let http = format!("127.0.0.1:{}", free_port());
    let account = format!("{NS}:{SA}");
    let (root, material, mut nodes) = Cluster::secure_nodes(
        1,
        &[
            "--tick-interval-ms",
            "100",
            "--heartbeat-ttl-ms",
            "1000",
            "--member-identity",
            "kubernetes",
            "--member-identity-service-account",
            &account,
            "--http-listen",
            &http,
        ],
    );
    let signer = proto::grant::GrantSigner::from_seed_hex(&"97".repeat(32))?;
    write(&material.signing_key, &"97".repeat(32));
    let voters = format!("1={}", nodes[0].member_addr());
    nodes[0]
        .extra_args
        .extend(["--initial-voters".into(), voters]);
    nodes[0].start_with_env(&env);
    let mut cluster = Cluster {
        root,
        nodes,
        material: Some(material),
    };
    cluster.wait_leader("bootstrap").await;
    let gateways: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
    let _cleanup = KillUnder(cluster.root.path().to_path_buf());
    let dir = cluster.root.path().to_path_buf();
    write(
        &dir.join("trusted-grant-keys"),
        &format!("{}\n", signer.public_key_hex()),
    );

    eprintln!("--- step: sup-0 presents its own Pod's token and joins");
    let mut sup0 = supervisor("sup-0", "sup-0", TOK_SUP0_V1, &gateways, &dir);
    sup0.start();
    wait_ready(&sup0, 200, Duration::from_secs(30)).await;
    wait_member(&cluster, "sup-0", "active").await;
    assert!(api.reviews() >= 1, "no TokenReview was asked");

    eprintln!("--- step: a supervisor claiming sup-1 with sup-0's token is refused");
    let impostor = supervisor("sup-1", "impostor", TOK_SUP0_V1, &gateways, &dir);
    refused(&cluster, impostor, "does not match member id", TOK_SUP0_V1).await;
    assert!(failures(&http, "identity_pod").await >= 1);

    eprintln!("--- step: sup-1 with its own token joins");
    let mut sup1 = supervisor("sup-1", "sup-1", TOK_SUP1, &gateways, &dir);
    sup1.start();
    wait_ready(&sup1, 200, Duration::from_secs(30)).await;
    wait_member(&cluster, "sup-1", "active").await;

    eprintln!("--- step: a forged (unauthenticated) token is refused");
    let forged = supervisor("sup-4", "forged", TOK_FORGED, &gateways, &dir);
    refused(
        &cluster,
        forged,
        "not a valid Kubernetes service account token",
        TOK_FORGED,
    )
    .await;
    assert!(failures(&http, "identity_unauthenticated").await >= 1);

    eprintln!("--- step: a token of another ServiceAccount is refused");
    let other = supervisor("sup-2", "other-sa", TOK_OTHER_SA, &gateways, &dir);
    refused(
        &cluster,
        other,
        "not to the member service account",
        TOK_OTHER_SA,
    )
    .await;
    assert!(failures(&http, "identity_service_account").await >= 1);
    let gateway_log = cluster.nodes[0].log();
    assert!(
        gateway_log.contains("supervisor hello refused"),
        "{gateway_log}"
    );
    for token in [TOK_SUP0_V1, TOK_SUP1, TOK_FORGED, TOK_OTHER_SA] {
        assert!(!gateway_log.contains(token), "the gateway logged a token");
    }

    eprintln!("--- step: the API refuses the gateway (no RBAC): a new hello is UNAVAILABLE naming the rule");
    api.forbid(true);
    let mut sup3 = supervisor("sup-3", "sup-3", TOK_SUP3, &gateways, &dir);
    sup3.start();
    wait_log(&sup3, "needs `create` on `tokenreviews`").await;
    assert!(sup3.log().contains("Unavailable"), "{}", sup3.log());
    assert!(failures(&http, "identity_unavailable").await >= 1);

    eprintln!("--- step: the API hangs: a new hello is refused UNAVAILABLE within the bound");
    api.pause(true);
    api.forbid(false);
    wait_log(&sup3, "did not answer within 5 s").await;
    assert_eq!(sup0.readyz().await.0, 200, "an attached member was dropped");
    assert_eq!(sup1.readyz().await.0, 200, "an attached member was dropped");

    eprintln!("--- step: the API answers again: sup-3 joins");
    api.pause(false);
    wait_ready(&sup3, 200, Duration::from_secs(30)).await;
    wait_member(&cluster, "sup-3", "active").await;

    eprintln!(
        "--- step: sup-0's token rotates in place, the old one expires, the gateway restarts"
    );
    let sup0_pid = sup0.pid();
    api.issue(TOK_SUP0_V2, NS, SA, "sup-0", &[AUDIENCE]);
    mount_token(&dir.join("sup-0-token"), 2, TOK_SUP0_V2);
    api.revoke(TOK_SUP0_V1);
    let before = attached(&cluster.nodes[0], "sup-0");
    let refused_before = failures(&http, "identity_unauthenticated").await;
    let node = cluster.node(1);
    node.signal("-TERM");
    assert!(
        node.wait_exit(Duration::from_secs(20)).await.is_some(),
        "the gateway did not stop"
    );
    node.start_with_env(&env);
    cluster.wait_leader("restart").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while attached(&cluster.nodes[0], "sup-0") <= before {
        assert!(
            Instant::now() < deadline,
            "sup-0 did not attach again with its rotated token:\n{}",
            sup0.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_ready(&sup0, 200, Duration::from_secs(30)).await;
    assert_eq!(sup0.pid(), sup0_pid, "sup-0 was restarted");
    // The restarted gateway's counters start at zero: the expired token was
    // never presented to it.
    assert_eq!(
        failures(&http, "identity_unauthenticated").await,
        0,
        "before: {refused_before}"
    );
    let status = pool_status(&cluster).await?;
    for m in ["sup-0", "sup-1", "sup-3"] {
        assert!(member(&status, m).is_some(), "{m} missing: {status:#?}");
    }
    Ok(())
}

//! Audit records (issue 13, "Bounded input"): every administrative action
//! is written as a structured log line naming the caller, never its token.
//!
//! - given: one gateway with an admin and a viewer token, two supervisors
//! - when: through the `openshell-pool` CLI, the admin creates and deletes a
//!   sandbox, drains one supervisor, cancels the drain and adds a learner
//!   (which fails: nothing listens there); the viewer tries to create one
//! - then: the gateway's log holds one `audit` line per call, naming the
//!   action, the outcome (`ok`, `refused` for the viewer, `error` for the
//!   learner), the role, the fingerprint of the token and the objects; the
//!   log never holds either token

use std::process::Command;
use std::time::{Duration, Instant};

use testkit::gateway::Cluster;
use testkit::supervisor::{KillUnder, Supervisor, FAST_TIMING};
use testkit::TestResult;

const ADMIN: &str = "audit-admin-s3cret-token";
const VIEWER: &str = "audit-viewer-s3cret-token";

/// Runs `openshell-pool --token TOKEN ARGS` against `endpoint`; returns
/// (exit code, stdout, stderr).
fn cli(endpoint: &str, token: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(testkit::bins::workspace_bin("openshell-pool"))
        // The test gateway is an --insecure (plaintext) one.
        .args(["--insecure", "--endpoints", endpoint, "--token", token])
        .args(args)
        .env_remove("OPENSHELL_TOKEN")
        .output()
        .unwrap_or_else(|e| panic!("run openshell-pool: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A token's fingerprint as docs/security.md defines it: the first 8 hex
/// digits of its SHA-256.
fn fingerprint(token: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(token.as_bytes())[..4])
}

/// The audit lines of a gateway log.
fn audit_lines(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(" audit: "))
        .map(str::to_string)
        .collect()
}

/// The one audit line of `action` whose text holds every one of `parts`.
fn find<'a>(lines: &'a [String], action: &str, parts: &[&str]) -> &'a str {
    let action = format!("action=\"{action}\"");
    lines
        .iter()
        .find(|l| l.contains(&action) && parts.iter().all(|p| l.contains(p)))
        .unwrap_or_else(|| panic!("no audit line {action} with {parts:?} in {lines:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn administrative_calls_are_audited_with_the_caller() -> TestResult {
    let mut flags = FAST_TIMING.to_vec();
    flags.extend(["--admin-token", ADMIN, "--viewer-token", VIEWER]);
    let cluster = Cluster::start(1, &flags);
    let root = cluster.root.path().to_path_buf();
    let _cleanup = KillUnder(root.clone());
    let e = cluster.get(1).addr.clone();
    let mut supervisors: Vec<Supervisor> = ["s1", "s2"]
        .iter()
        .map(|m| Supervisor::new(m, vec![e.clone()], &root))
        .collect();
    supervisors.iter_mut().for_each(Supervisor::start);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, out, _) = cli(&e, VIEWER, &["-o", "json", "pool", "status"]);
        let status: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        let active = status["members"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["state"] == "active").count());
        if active == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "s1, s2 never became active: {out}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    eprintln!("--- step: administrative calls through the CLI");
    let (code, _, err) = cli(&e, ADMIN, &["sandbox", "create", "--id", "sb-audit"]);
    assert_eq!(code, 0, "create: {err}");
    let (code, _, err) = cli(&e, ADMIN, &["sandbox", "delete", "sb-audit"]);
    assert_eq!(code, 0, "delete: {err}");
    let (code, out, err) = cli(&e, ADMIN, &["-o", "json", "pool", "drain", "s1"]);
    assert_eq!(code, 0, "drain: {err}");
    let operation: serde_json::Value = serde_json::from_str(&out)?;
    let operation = operation["id"]
        .as_str()
        .ok_or("no operation id")?
        .to_string();
    let (code, _, err) = cli(&e, ADMIN, &["pool", "cancel", &operation]);
    assert_eq!(code, 0, "cancel: {err}");
    let (code, _, _) = cli(&e, ADMIN, &["raft", "add-learner", "7", "127.0.0.1:1"]);
    assert_ne!(code, 0, "a learner nobody serves was added");
    let (code, _, _) = cli(&e, VIEWER, &["sandbox", "create", "--id", "sb-viewer"]);
    assert_ne!(code, 0, "a viewer created a sandbox");

    eprintln!("--- step: the gateway's audit lines");
    let log = cluster.get(1).log();
    let lines = audit_lines(&log);
    let admin = format!("token={}", fingerprint(ADMIN));
    let viewer = format!("token={}", fingerprint(VIEWER));
    let by_admin = [admin.as_str(), "role=\"platform_admin\"", "peer=127.0.0.1:"];
    let ok = [&by_admin[..], &["outcome=\"ok\""]].concat();
    find(
        &lines,
        "sandbox.create",
        &[&ok[..], &["sandbox_id=\"sb-audit\""]].concat(),
    );
    find(
        &lines,
        "sandbox.delete",
        &[&ok[..], &["sandbox_id=\"sb-audit\""]].concat(),
    );
    find(
        &lines,
        "pool.drain",
        &[&ok[..], &["member_id=\"s1\""]].concat(),
    );
    let operation_id = format!("operation_id=\"{operation}\"");
    find(
        &lines,
        "pool.cancel_operation",
        &[&ok[..], &[operation_id.as_str()]].concat(),
    );
    find(
        &lines,
        "raft.add_learner",
        &[&by_admin[..], &["outcome=\"error\"", "node_id=\"7\""]].concat(),
    );
    find(
        &lines,
        "sandbox.create",
        &[
            viewer.as_str(),
            "role=\"viewer\"",
            "outcome=\"refused\"",
            "code=PermissionDenied",
            "sandbox_id=\"sb-viewer\"",
        ],
    );
    assert!(!log.contains(ADMIN), "the admin token is in the log");
    assert!(!log.contains(VIEWER), "the viewer token is in the log");
    Ok(())
}

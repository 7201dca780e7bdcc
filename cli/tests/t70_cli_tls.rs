//! The CLI against secure gateways (TLS on every port, tokens): it speaks
//! TLS with `--ca-file`, refuses to guess a transport without `--ca-file` or
//! `--insecure`, and says in one line why a handshake failed.
//!
//! - given a secure 3-gateway cluster: `raft status` with `--ca-file` and
//!   `--token-file` works
//! - without `--ca-file` and without `--insecure`, a command exits 2 with
//!   one line naming both flags (secure by default)
//! - with another CA, it exits 3 with one line: the gateway, "TLS", the
//!   certificate is not signed by `--ca-file`
//! - `--insecure` (plaintext) against a TLS gateway, and `--ca-file` against
//!   a plaintext gateway, each fail in one line saying which flag to use

mod common;

use common::cli::*;
use common::*;
use proto::tls::generate::Ca;

/// Asserts `err` is one line holding every one of `needles`.
fn one_line(err: &str, needles: &[&str]) {
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
    for needle in needles {
        assert!(err.contains(needle), "{needle:?} missing from: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_speaks_tls_with_its_ca_and_refuses_in_one_line_otherwise() -> TestResult {
    let cluster = Cluster::start_secure(3, &[]);
    cluster.wait_leader("secure cluster up").await;
    let material = cluster.material.as_ref().ok_or("material")?;
    let endpoints = cluster
        .nodes
        .iter()
        .map(|g| g.addr.clone())
        .collect::<Vec<_>>()
        .join(",");
    let path = |p: &std::path::Path| p.display().to_string();
    let secure = material_security(material);

    eprintln!("--- step: raft status with --ca-file and --token-file works");
    let status = json_as(&secure, &endpoints, &["raft", "status"]);
    assert_eq!(
        status["voters"].as_array().map(Vec::len),
        Some(3),
        "{status}"
    );
    assert!(status["leader"].is_u64(), "{status}");

    eprintln!("--- step: neither --ca-file nor --insecure: refused in one line, exit 2");
    let token_only = vec!["--token-file".to_string(), path(&material.admin_token_file)];
    let (code, _, err) = pool_as(&token_only, &endpoints, &["raft", "status"]);
    assert_eq!(code, 2, "{err}");
    one_line(&err, &["--ca-file", "--insecure"]);

    eprintln!("--- step: another CA: one line naming the gateway and the TLS cause, exit 3");
    let other = tempfile::tempdir()?;
    let other_ca = Ca::create(other.path(), "some other CA")?;
    let wrong = vec![
        "--ca-file".to_string(),
        path(&other_ca.cert),
        "--token-file".into(),
        path(&material.admin_token_file),
    ];
    let first = cluster.nodes[0].addr.clone();
    let (code, _, err) = pool_as(&wrong, &first, &["raft", "status"]);
    assert_eq!(code, 3, "{err}");
    one_line(
        &err,
        &[&format!("gateway {first}: TLS:"), "not signed by --ca-file"],
    );

    eprintln!("--- step: --insecure against a TLS gateway: one line, pass --ca-file");
    let plain = vec![
        "--insecure".to_string(),
        "--token-file".into(),
        path(&material.admin_token_file),
    ];
    let (code, _, err) = pool_as(&plain, &first, &["raft", "status"]);
    assert_ne!(code, 0, "{err}");
    one_line(&err, &[&format!("gateway {first}"), "--ca-file"]);

    eprintln!("--- step: --ca-file against a plaintext gateway: one line, pass --insecure");
    let insecure = Cluster::start(1, &[]);
    insecure.wait_leader("plaintext gateway up").await;
    let plain_addr = insecure.nodes[0].addr.clone();
    let (code, _, err) = pool_as(&secure, &plain_addr, &["raft", "status"]);
    assert_eq!(code, 3, "{err}");
    one_line(
        &err,
        &[&format!("gateway {plain_addr}: TLS:"), "--insecure"],
    );
    Ok(())
}

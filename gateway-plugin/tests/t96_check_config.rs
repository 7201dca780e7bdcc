//! `openshell-gateway --check-config` and `--node-id-from-pod-name`,
//! through the real binary.
//!
//! - given: a secure configuration (TLS files, signing key, admin token
//!   file) and a pod name `rel-openshell-gateway-2`
//! - when: `--check-config` runs with a client port another process holds
//!   and a data directory that does not exist
//! - then: rc 0, one line `openshell-gateway: configuration ok (node 3, ...)`,
//!   no data directory created (and no port bound: the held one is fine)
//! - when: the TLS files are missing / the Pod template is bad / the key
//!   does not match the certificate / the pod name has no ordinal / both
//!   --node-id and --node-id-from-pod-name are given
//! - then: rc 1 and one line naming what is wrong; for the first two, the
//!   very line a real start prints
//! - given: the `--config` file every launcher writes
//!   (`local_cluster::gateway::GatewaySpec`, here testkit's secure gateway)
//! - then: `--check-config` accepts it as a complete secure configuration;
//!   without its admin token file it names that file

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

use proto::tls::generate::Usage;
use testkit::bins::gateway_bin;
use testkit::ports::free_port;
use testkit::secure::Material;
use testkit::TestResult;

/// Runs the gateway binary with `args` (bounded: a real start that does
/// not fail is killed after 20 s).
fn gateway(args: &[String]) -> Output {
    let child = Command::new("timeout")
        .arg("20")
        .arg(gateway_bin())
        .args(args)
        .env_remove("OPENSHELL_NODE_ID")
        .env_remove("OPENSHELL_POD_NAME")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    child.wait_with_output().unwrap_or_else(|e| panic!("{e}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

/// The flags of a secure gateway on free loopback ports, data under `data`.
fn secure_args(material: &Material, data: &Path, listen: &str) -> Vec<String> {
    let issued = material.issue("gateway", Usage::ServerAndClient);
    let mut args = material.gateway_flags(&issued);
    args.extend([
        "--node-id-from-pod-name".to_string(),
        "rel-openshell-gateway-2".into(),
        "--listen".into(),
        listen.to_string(),
        "--peer-listen".into(),
        format!("127.0.0.1:{}", free_port()),
        "--data-dir".into(),
        data.display().to_string(),
        "--sandbox-driver".into(),
        "none".into(),
        "--autopilot-replicas".into(),
        "statefulset:rel-openshell-gateway".into(),
        "--autopilot-peer-address".into(),
        "rel-openshell-gateway-{ordinal}.rel-openshell-gateway-peer.ns.svc.cluster.local:7001"
            .into(),
    ]);
    args
}

/// Removes `flag` and its value from `args`.
fn without(args: &[String], flag: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip = false;
    for a in args {
        if skip {
            skip = false;
        } else if a == flag {
            skip = true;
        } else {
            out.push(a.clone());
        }
    }
    out
}

fn with(args: &[String], more: &[&str]) -> Vec<String> {
    let mut out = args.to_vec();
    out.extend(more.iter().map(|s| s.to_string()));
    out
}

/// `--check-config` fails with one line, the line a real start prints.
fn fails_like_a_start(args: &[String], why: &str) -> String {
    let checked = gateway(&with(args, &["--check-config"]));
    let line = text(&checked.stderr);
    assert_eq!(checked.status.code(), Some(1), "{why}: {line}");
    assert_eq!(line.lines().count(), 1, "{why}: one line: {line}");
    assert!(line.starts_with("openshell-gateway: "), "{why}: {line}");
    let started = gateway(args);
    assert_eq!(
        started.status.code(),
        Some(1),
        "{why}: a real start fails too"
    );
    let start_line = text(&started.stderr);
    assert!(
        start_line.ends_with(&line),
        "{why}: the start's error {start_line:?} is {line:?}"
    );
    line
}

#[test]
fn check_config_validates_without_starting() -> TestResult<()> {
    let root = tempfile::tempdir()?;
    let material = Material::generate(&root.path().join("tls"));
    let data = root.path().join("data");
    // Held by this test: a start could not bind it; a check never tries.
    let held = TcpListener::bind("127.0.0.1:0")?;
    let listen = held.local_addr()?.to_string();
    let args = secure_args(&material, &data, &listen);

    eprintln!("--- step: a valid secure configuration");
    let ok = gateway(&with(&args, &["--check-config"]));
    let out = text(&ok.stdout);
    eprintln!("{out}");
    assert!(ok.status.success(), "rc 0: {out} {}", text(&ok.stderr));
    assert_eq!(out.lines().count(), 1, "one line: {out}");
    assert!(
        out.starts_with("openshell-gateway: configuration ok (node 3, "),
        "node 3 from pod ordinal 2: {out}"
    );
    assert!(out.contains("statefulset:rel-openshell-gateway"), "{out}");
    assert!(!data.exists(), "no data directory created");
    drop(held);

    eprintln!("--- step: the TLS files are missing");
    let listen = format!("127.0.0.1:{}", free_port());
    let args = secure_args(&material, &data, &listen);
    let mut no_tls = args.clone();
    for flag in ["--tls-cert-file", "--tls-key-file", "--tls-ca-file"] {
        no_tls = without(&no_tls, flag);
    }
    let line = fails_like_a_start(&no_tls, "no TLS");
    eprintln!("{line}");
    assert!(line.contains("--tls-cert-file"), "{line}");

    eprintln!("--- step: a bad Pod template");
    let template = root.path().join("pod.yaml");
    std::fs::write(&template, "spec: [not a pod\n")?;
    let bad_template = with(
        &without(&args, "--sandbox-driver"),
        &[
            "--sandbox-driver",
            "kubernetes",
            "--pod-template-file",
            &template.display().to_string(),
        ],
    );
    let line = fails_like_a_start(&bad_template, "bad template");
    eprintln!("{line}");
    assert!(line.contains("sandbox driver kubernetes"), "{line}");
    assert!(line.contains("pod.yaml"), "names the file: {line}");
    assert!(!data.exists(), "no data directory created");

    eprintln!("--- step: a key that does not match the certificate");
    let other = material.issue("other", Usage::ServerAndClient);
    let mismatched = with(
        &without(&args, "--tls-key-file"),
        &["--tls-key-file", &other.key.display().to_string()],
    );
    let checked = gateway(&with(&mismatched, &["--check-config"]));
    let line = text(&checked.stderr);
    eprintln!("{line}");
    assert_eq!(checked.status.code(), Some(1), "{line}");
    assert!(line.contains("openshell.gateway.tls"), "{line}");
    assert_eq!(line.lines().count(), 1, "{line}");

    eprintln!("--- step: pod names");
    let bad_pod = with(
        &without(&args, "--node-id-from-pod-name"),
        &["--node-id-from-pod-name", "gateway", "--check-config"],
    );
    let checked = gateway(&bad_pod);
    let line = text(&checked.stderr);
    eprintln!("{line}");
    assert_eq!(checked.status.code(), Some(1), "{line}");
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(line.contains("--node-id-from-pod-name"), "{line}");
    let both = with(&args, &["--node-id", "1", "--check-config"]);
    let checked = gateway(&both);
    let line = text(&checked.stderr);
    eprintln!("{line}");
    assert_eq!(checked.status.code(), Some(1), "{line}");
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.contains("--node-id-from-pod-name") && line.contains("--node-id "),
        "{line}"
    );
    let by_env = Command::new(gateway_bin())
        .args(with(
            &without(&args, "--node-id-from-pod-name"),
            &["--check-config"],
        ))
        .env("OPENSHELL_POD_NAME", "rel-openshell-gateway-0")
        .output()?;
    assert!(by_env.status.success(), "{}", text(&by_env.stderr));
    assert!(
        text(&by_env.stdout).contains("(node 1, "),
        "OPENSHELL_POD_NAME works too: {}",
        text(&by_env.stdout)
    );
    Ok(())
}

#[test]
fn the_config_file_a_launcher_writes_is_a_complete_secure_configuration() -> TestResult<()> {
    let root = tempfile::tempdir()?;
    let material = Material::generate(&root.path().join("tls"));
    let mut node = testkit::gateway::Gateway::new_secure(1, root.path(), &material, Vec::new());
    node.initial_voters = Some(vec![(1, node.member_addr().to_string())]);
    let mut args = node.args();
    assert_eq!(args[0], "--config", "{args:?}");
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--tls") || a == "--insecure"),
        "{args:?}"
    );
    args.push("--check-config".into());
    let out = gateway(&args);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout} {}", text(&out.stderr));
    assert!(stdout.contains("configuration ok (node 1"), "{stdout}");
    assert!(stdout.contains("tls on"), "{stdout}");
    // The file names the token file: a missing one is named, not skipped.
    std::fs::remove_file(&material.admin_token_file)?;
    let out = gateway(&args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("admin_token_files"), "{stderr}");
    assert!(
        stderr.contains(&material.admin_token_file.display().to_string()),
        "{stderr}"
    );
    Ok(())
}

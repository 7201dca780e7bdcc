//! `openshell-pool dev` runs secure, as a deployment does, and stays one
//! command.
//!
//! - given a fresh data directory, `dev` generates a CA, a certificate per
//!   gateway, a signing key and tokens under `<dir>/tls/` (secrets 0600),
//!   writes `<dir>/env` and prints `source .../env`
//! - its gateways serve TLS only: a plaintext call to a client or peer port
//!   fails; the CLI with the generated CA and token works (also through the
//!   env file, sourced by a shell); without the token it is unauthorized
//! - no process it started has `--insecure` on its command line; gateways
//!   get the member credentials file, supervisors their own credential and
//!   the trusted grant keys file
//! - the raft membership names the peer ports
//! - Ctrl-C, then `dev` again resumes with the same CA
//! - a data directory of an older, insecure `dev` is refused in one line
//!   that says to remove it

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::cli::*;
use common::*;

/// Waits until `dev`'s output holds `text`.
fn wait_output(dev: &Dev, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !dev.output().contains(text) {
        assert!(
            Instant::now() < deadline,
            "dev did not print {text:?}: {}",
            dev.output()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The command lines (NUL-separated arguments joined by spaces) of every
/// process whose command line mentions `dir`.
fn cmdlines_under(dir: &std::path::Path) -> Vec<String> {
    let needle = dir.display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|raw| {
            raw.split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|line| line.contains(&needle))
        .collect()
}

/// A plaintext raft status call to `addr`; true when it got an answer.
async fn plaintext_answers(addr: &str) -> bool {
    let Ok(channel) = test_channel(addr, 500).await else {
        return false;
    };
    proto::cluster::cluster_admin_client::ClusterAdminClient::new(channel)
        .status(proto::cluster::StatusRequest { local: true })
        .await
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_serves_tls_only_with_generated_material_and_resumes() -> TestResult {
    build_supervisor_bins();
    let root = tempfile::tempdir()?;
    let dir = root.path().join("dev");
    std::fs::create_dir_all(&dir)?;
    let base = free_base();
    let e = (0..3u16)
        .map(|i| format!("127.0.0.1:{}", base + i))
        .collect::<Vec<_>>()
        .join(",");
    let mut dev = Dev::start(&dir, base);
    wait_output(&dev, "Ctrl-C stops");

    eprintln!("--- step: TLS material, secrets 0600, env file, banner");
    let tls = dir.join("tls");
    for file in [
        "ca.crt",
        "gateway-1.crt",
        "gateway-3.key",
        "signing.key",
        "admin.token",
    ] {
        assert!(
            tls.join(file).exists(),
            "{file} missing under {}",
            tls.display()
        );
    }
    {
        use std::os::unix::fs::PermissionsExt;
        for secret in ["ca.key", "gateway-1.key", "signing.key", "admin.token"] {
            let mode = std::fs::metadata(tls.join(secret))?.permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{secret}");
        }
    }
    let env = std::fs::read_to_string(dir.join("env"))?;
    for var in [
        "OPENSHELL_CA_FILE",
        "OPENSHELL_TOKEN_FILE",
        "OPENSHELL_ENDPOINTS",
    ] {
        assert!(env.contains(&format!("export {var}=")), "{var}: {env}");
    }
    assert!(
        dev.output()
            .contains(&format!("source {}", dir.join("env").display())),
        "{}",
        dev.output()
    );

    eprintln!("--- step: plaintext calls to client and peer ports fail");
    for i in [0u16, 1, 2, 10, 11, 12] {
        let addr = format!("127.0.0.1:{}", base + i);
        assert!(!plaintext_answers(&addr).await, "{addr} answered plaintext");
    }
    let (code, _, err) = pool(&e, &["raft", "status"]);
    assert_ne!(code, 0, "--insecure reached a dev gateway: {err}");

    eprintln!("--- step: the generated CA and token work; without the token: unauthorized");
    let sec = dev.security();
    let status = json_as(&sec, &e, &["raft", "status"]);
    assert_eq!(
        status["voters"].as_array().map(Vec::len),
        Some(3),
        "{status}"
    );
    let peers: Vec<String> = (10..13u16)
        .map(|i| format!("127.0.0.1:{}", base + i))
        .collect();
    for node in status["nodes"].as_array().into_iter().flatten() {
        let addr = node["addr"].as_str().unwrap_or_default().to_string();
        assert!(
            peers.contains(&addr),
            "membership names {addr}, not a peer port: {status}"
        );
    }
    let ca_only = vec![sec[0].clone(), sec[1].clone()];
    let (code, _, err) = pool_as(&ca_only, &e, &["raft", "status"]);
    assert_eq!(code, 4, "a call without the token: {err}");
    let sourced = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source '{}' && '{}' -o json pool status",
            dir.join("env").display(),
            pool_bin().display()
        ))
        .env_remove("OPENSHELL_CA_FILE")
        .env_remove("OPENSHELL_TOKEN_FILE")
        .env_remove("OPENSHELL_ENDPOINTS")
        .output()?;
    assert!(
        sourced.status.success(),
        "after `source env`: {}",
        String::from_utf8_lossy(&sourced.stderr)
    );
    let pool_status: serde_json::Value = serde_json::from_slice(&sourced.stdout)?;
    assert_eq!(
        pool_status["members"].as_array().map(Vec::len),
        Some(2),
        "{pool_status}"
    );

    eprintln!("--- step: no process dev started runs with --insecure");
    let lines = cmdlines_under(&dir);
    let gateways = lines
        .iter()
        .filter(|l| l.contains("openshell-gateway"))
        .count();
    let supervisors = lines
        .iter()
        .filter(|l| l.contains("openshell-supervisor"))
        .count();
    assert!(gateways >= 3 && supervisors >= 2, "{lines:#?}");
    for line in &lines {
        assert!(!line.contains("--insecure"), "{line}");
    }
    for line in lines.iter().filter(|l| l.contains("openshell-gateway")) {
        let config = gateway_config_of(line);
        let tls = config.tls.clone().unwrap_or_default();
        let pool = config.supervisor_pool.clone().unwrap_or_default();
        let auth = config.auth.clone().unwrap_or_default();
        assert!(
            tls.cert_file.is_some()
                && config.peer_listen_addr.is_some()
                && pool.member_credentials_file.is_some()
                && auth.admin_token_files.is_some()
                && config.insecure.is_none(),
            "{line}: {config:?}"
        );
    }
    assert!(
        lines
            .iter()
            .filter(|l| l.contains("openshell-supervisor"))
            .all(|l| l.contains("--tls-ca-file")
                && l.contains("--credential-file")
                && l.contains("--trusted-grant-keys-file")),
        "{lines:#?}"
    );

    eprintln!("--- step: Ctrl-C, then dev again resumes with the same CA");
    let ca_before = std::fs::read(tls.join("ca.crt"))?;
    dev.interrupt();
    assert_eq!(processes_under(&dir), 0, "dev left processes behind");
    let mut again = Dev::start(&dir, base);
    wait_output(&again, "Resumed the data");
    wait_output(&again, "Ctrl-C stops");
    assert_eq!(
        std::fs::read(tls.join("ca.crt"))?,
        ca_before,
        "a new CA on resume"
    );
    let resumed = json_until_as(&sec, &e, &["pool", "status"], "pool after resume", |v| {
        v["members"].as_array().is_some_and(|m| m.len() == 2)
    });
    assert!(resumed["sandboxes"].is_array(), "{resumed}");
    again.interrupt();
    assert_eq!(processes_under(&dir), 0, "dev left processes behind");

    eprintln!("--- step: a data directory of an older, insecure dev is refused in one line");
    let old = root.path().join("old-dev");
    std::fs::create_dir_all(old.join("gateway-1"))?;
    let out = Command::new(pool_bin())
        .args(["dev", "--data-dir"])
        .arg(&old)
        .args(["--base-port", &base.to_string()])
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("remove") && err.contains("insecure"), "{err}");
    Ok(())
}

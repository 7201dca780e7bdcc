//! Bad input to the CLI and the gateway gets one-line errors with the
//! documented exit codes: unknown flags (2), bad endpoints (3), missing or
//! wrong token (4), unknown ids (5), and invalid config keys.

mod common;

use std::process::Command;

use common::cli::*;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_one_line_errors() -> TestResult {
    let cluster = Cluster::start(1, &["--admin-token", "s3cret"]);
    let e = cluster.get(1).addr.clone();
    json_until(
        &e,
        &["--token", "s3cret", "raft", "status"],
        "a leader",
        |v| v["leader"].is_u64(),
    );
    let one_line = |code: i32, err: &str, want: i32, words: &str| {
        assert_eq!(code, want, "exit code for {err:?}");
        assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err:?}");
        assert!(err.contains(words), "{err:?} lacks {words:?}");
    };
    let (code, _, err) = pool(&e, &["raft", "status", "--bogus"]);
    one_line(code, &err, 2, "unexpected argument");
    let (code, _, err) = pool("not-a-host:1", &["raft", "status"]);
    one_line(code, &err, 3, "no gateway reachable");
    let (code, _, err) = pool(&e, &["sandbox", "create"]);
    one_line(code, &err, 4, "unauthorized");
    let (code, _, err) = pool(&e, &["--token", "wrong", "raft", "status"]);
    one_line(code, &err, 4, "unauthorized");
    let (code, _, err) = pool(&e, &["--token", "s3cret", "sandbox", "get", "nope"]);
    one_line(code, &err, 5, "nope");
    let (code, _, err) = pool(&e, &["--token", "s3cret", "pool", "cancel", "no-such-op"]);
    one_line(code, &err, 5, "no-such-op");
    let (code, _, err) = pool(&e, &["--token", "s3cret", "raft", "promote", "42"]);
    one_line(code, &err, 5, "42");
    let (code, out, _) = pool(&e, &["--token", "s3cret", "raft", "status", "-o", "json"]);
    assert_eq!(code, 0);
    assert!(out.contains("\"leader\""));

    eprintln!("--- step: an invalid config key names the key");
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        "[openshell.gateway]\nnode_id = 1\n[openshell.gateway.raft]\nheartbeat_intervl_ms = 5\n",
    )?;
    let out = Command::new(gateway_bin())
        .arg("--config")
        .arg(&config)
        .env("RUST_BACKTRACE", "1")
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err}");
    assert!(err.contains("heartbeat_intervl_ms"), "{err}");
    std::fs::write(&config, "[openshell.gateway]\nnode_id = 1\nlisten_addr = \"127.0.0.1:1\"\ndata_dir = \"/tmp/x\"\n[openshell.gateway.raft]\nheartbeat_interval_ms = 5\n")?;
    let out = Command::new(gateway_bin())
        .arg("--config")
        .arg(&config)
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("openshell.gateway.raft.heartbeat_interval_ms = 5")
            && err.contains("10..=10000"),
        "{err}"
    );
    Ok(())
}

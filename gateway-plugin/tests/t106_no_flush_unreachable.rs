//! The raft log's no-flush switch (`raft_store::LogSync`, benchmarks only)
//! cannot be reached from a gateway's configuration.
//!
//! - given: the gateway binary and a valid insecure configuration file
//! - when: the file sets `log_sync` (under `[openshell.gateway]` or its
//!   `raft` section), or the command line passes `--log-sync`
//! - then: `--check-config` refuses it (rc != 0, naming the key or flag),
//!   and the configuration the gateway builds from the valid file keeps
//!   the log durable (`LogSync::Durable`)

use std::path::Path;
use std::process::{Command, Output};

use raft_store::LogSync;
use testkit::bins::gateway_bin;
use testkit::ports::free_port;
use testkit::TestResult;

/// Runs the gateway binary with `args` (bounded to 20 s).
fn gateway(args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("20")
        .arg(gateway_bin())
        .args(args)
        .env_remove("OPENSHELL_NODE_ID")
        .env_remove("OPENSHELL_POD_NAME")
        .output()
        .unwrap_or_else(|e| panic!("spawn: {e}"))
}

/// A valid insecure configuration, with `extra` appended to
/// `[openshell.gateway]` (then `raft_extra` under its `raft` section).
fn config(dir: &Path, extra: &str, raft_extra: &str) -> String {
    format!(
        "[openshell.gateway]\nnode_id = 1\nlisten_addr = \"127.0.0.1:{}\"\ndata_dir = \"{}\"\ninsecure = true\n{extra}\n[openshell.gateway.raft]\nheartbeat_interval_ms = 50\n{raft_extra}\n",
        free_port(),
        dir.join("data").display()
    )
}

fn check(file: &Path, extra_args: &[&str]) -> (bool, String) {
    let path = file.display().to_string();
    let mut args = vec!["--config", path.as_str(), "--check-config"];
    args.extend_from_slice(extra_args);
    let out = gateway(&args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn no_gateway_flag_or_key_sets_the_no_flush_switch() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let file = tmp.path().join("gateway.toml");

    eprintln!("--- step: the valid file is accepted and keeps the log durable");
    std::fs::write(&file, config(tmp.path(), "", ""))?;
    let (ok, text) = check(&file, &[]);
    assert!(ok, "valid configuration refused: {text}");
    let built = gateway_plugin::config::ValidateGateway::validate(
        gateway_plugin::config::read_file(&file)?,
    )?;
    assert_eq!(built.node.log_sync, LogSync::Durable);

    for (extra, raft_extra) in [
        ("log_sync = \"unsafe_no_sync_for_benchmarks\"", ""),
        ("", "log_sync = \"UnsafeNoSyncForBenchmarks\""),
        ("", "log_sync = false"),
    ] {
        eprintln!("--- step: refused: {extra}{raft_extra}");
        std::fs::write(&file, config(tmp.path(), extra, raft_extra))?;
        let (ok, text) = check(&file, &[]);
        assert!(!ok, "a file setting log_sync was accepted: {text}");
        assert!(text.contains("log_sync"), "{text}");
    }

    eprintln!("--- step: no --log-sync flag");
    std::fs::write(&file, config(tmp.path(), "", ""))?;
    let (ok, text) = check(&file, &["--log-sync", "unsafe-no-sync-for-benchmarks"]);
    assert!(!ok, "--log-sync was accepted: {text}");
    assert!(text.contains("--log-sync"), "{text}");
    Ok(())
}

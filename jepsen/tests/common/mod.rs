//! Shared by the jepsen integration tests: find or build the gateway binary,
//! run the harness with test-sized settings.
#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use jepsen::nemesis::{parse_faults, Schedule};
use jepsen::run::RunOptions;
use jepsen::workload::{CasMode, Failover, MemberKind, PoolOptions, RegisterOptions};

pub use testkit::bins::{gateway_bin, profile_dir, workspace_root as workspace};
pub use testkit::{is_root, skip_without_root};

/// The fault gateway for one checker proof: builds, once, a gateway with
/// every `fault-*` feature into `target/jepsen-fault` (the three proofs share
/// the build), and returns a launcher script that starts it with
/// `OPENSHELL_FAULT` naming only `feature`'s fault (`fault-stale-reads` ->
/// `stale-reads`), so each proof runs with its own fault alone.
pub fn build_fault_gateway(feature: &str) -> PathBuf {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::PermissionsExt;

    let fault = feature
        .strip_prefix("fault-")
        .unwrap_or_else(|| panic!("{feature}: not a fault-* feature"));
    let target = workspace().join("target").join("jepsen-fault");
    std::fs::create_dir_all(&target)
        .unwrap_or_else(|e| panic!("creating {}: {e}", target.display()));
    let lock_path = target.join("build.lock");
    let lock = std::fs::File::create(&lock_path)
        .unwrap_or_else(|e| panic!("creating {}: {e}", lock_path.display()));
    // SAFETY: flock on a descriptor we own; released when `lock` drops.
    let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock {}", lock_path.display());

    let status = testkit::bins::cargo()
        .current_dir(workspace())
        .args([
            "build",
            "-p",
            "gateway-plugin",
            "--bin",
            "openshell-gateway",
        ])
        .args(["--features", FAULT_FEATURES, "--target-dir"])
        .arg(&target)
        .status()
        .unwrap_or_else(|e| panic!("running cargo: {e}"));
    assert!(
        status.success(),
        "building the fault gateway failed: {status}"
    );
    let built = target.join("debug").join("openshell-gateway");
    let script = format!(
        "#!/bin/sh\n# {feature} alone (built by jepsen/tests/common)\nOPENSHELL_FAULT={fault} exec '{}' \"$@\"\n",
        built.display()
    );
    let out = target.join(format!("openshell-gateway-{feature}"));
    let partial = target.join(format!(".openshell-gateway-{feature}.partial"));
    std::fs::write(&partial, script)
        .unwrap_or_else(|e| panic!("writing {}: {e}", partial.display()));
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", partial.display()));
    std::fs::rename(&partial, &out)
        .unwrap_or_else(|e| panic!("renaming to {}: {e}", out.display()));
    drop(lock);
    out
}

/// Every fault feature (gateway-plugin's `all-faults`): the one fault build
/// (gateway-plugin/src/fault.rs). `scripts/test.sh` builds the same ahead
/// of the proofs, so the build here finds it up to date.
const FAULT_FEATURES: &str = "all-faults";

/// `openshell-supervisor` and `openshell-sandbox-runtime`, built up to date
/// by the workspace build.
pub fn supervisor_bins() -> (PathBuf, PathBuf) {
    (
        testkit::bins::supervisor_bin(),
        testkit::bins::runtime_bin(),
    )
}

/// Test-sized run options.
pub fn options(name: &str, bin: PathBuf, nemesis: &str, seconds: u64, seed: u64) -> RunOptions {
    let out = profile_dir().join("jepsen-runs").join(name);
    let _ = std::fs::remove_dir_all(&out);
    RunOptions {
        nodes: 3,
        seed,
        duration: Duration::from_secs(seconds),
        faults: parse_faults(nemesis).unwrap_or_else(|e| panic!("{e}")),
        schedule: Schedule {
            quiet: (Duration::from_secs(2), Duration::from_secs(4)),
            hold: (Duration::from_secs(4), Duration::from_secs(7)),
            combine: false,
        },
        register: RegisterOptions {
            concurrency: 5,
            keys: 4,
            ops_per_key: 250,
            delay_ms: (10, 40),
            cas_mode: CasMode::ReadThenPut,
            failover: Failover::default(),
        },
        workload: "register".into(),
        pool: PoolOptions::default(),
        gateway_bin: bin,
        out,
        client_timeout: Duration::from_secs(6),
        security: jepsen::security::Security::Tls,
        power: jepsen::power::PowerOptions::default(),
    }
}

/// Test-sized register options in the own-version cas mode, set to make
/// the leader batch writes of one key into one raft entry: 16 clients on 2
/// registers, 0-5 ms apart.
pub fn own_version_options(
    name: &str,
    bin: PathBuf,
    nemesis: &str,
    seconds: u64,
    seed: u64,
) -> RunOptions {
    let mut o = options(name, bin, nemesis, seconds, seed);
    o.register = RegisterOptions {
        concurrency: 16,
        keys: 2,
        ops_per_key: 150,
        delay_ms: (0, 5),
        cas_mode: CasMode::OwnVersion,
        failover: Failover::default(),
    };
    o
}

/// The results.json of a run, for failure messages.
pub fn results_text(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("results.json")).unwrap_or_default()
}

/// Test-sized pool workload options (process members: the supervisor
/// binaries are found or built).
pub fn pool_options(
    name: &str,
    bin: PathBuf,
    nemesis: &str,
    pool_faults: &[&str],
    seconds: u64,
    seed: u64,
) -> RunOptions {
    let mut o = options(name, bin, nemesis, seconds, seed);
    o.workload = "pool".into();
    o.pool = PoolOptions {
        faults: pool_faults.iter().map(|f| f.to_string()).collect(),
        ..PoolOptions::default()
    };
    if o.pool.members == MemberKind::Process {
        let (supervisor, runtime) = supervisor_bins();
        o.pool.supervisor_bin = Some(supervisor);
        o.pool.runtime_bin = Some(runtime);
    }
    o
}

/// Runs `options` and asserts the run left nothing behind and every checker
/// said valid (printing each verdict); returns the outcome and its history
/// text.
pub async fn run_expecting_valid(options: RunOptions) -> (jepsen::run::Outcome, String) {
    let secure = options.security == jepsen::security::Security::Tls;
    let started = std::time::Instant::now();
    let outcome = jepsen::run::run(options)
        .await
        .unwrap_or_else(|e| panic!("the run could not be carried out: {e:#}"));
    eprintln!("--- step: check (run took {:?})", started.elapsed());
    assert!(
        jepsen::net::stale_leftovers().is_empty(),
        "the run left osj-* namespaces or links behind"
    );
    for r in &outcome.results {
        eprintln!("{}: {:?} {}", r.checker, r.valid, r.summary);
    }
    if secure {
        assert_ran_over_tls(&outcome.dir);
    }
    assert!(
        outcome.valid,
        "violations or undecided checks; report at {}/index.html\n{}",
        outcome.dir.display(),
        results_text(&outcome.dir)
    );
    let history = std::fs::read_to_string(outcome.dir.join("history.jsonl")).unwrap_or_default();
    (outcome, history)
}

/// Asserts the run's `index.html` lists `result`'s offending events (the
/// first 200, as the page does), each as a row anchored `ev-<index>`.
pub fn assert_report_lists_offending(dir: &Path, result: &jepsen::checker::CheckResult) {
    let page = std::fs::read_to_string(dir.join("index.html"))
        .unwrap_or_else(|e| panic!("reading {}/index.html: {e}", dir.display()));
    let section = format!("id=\"offending-{}\"", result.checker);
    assert!(
        page.contains(&section),
        "index.html has no offending-events section for {}",
        result.checker
    );
    for index in result.offending.iter().take(200) {
        assert!(
            page.contains(&format!("<tr id=\"ev-{index}\">")),
            "index.html does not list offending event {index}"
        );
    }
}

/// Asserts a run's cluster spoke TLS: `results.json` says so, every
/// transport check the harness made passed (plaintext refused on both
/// ports, no token refused, no client certificate refused on the peer port,
/// TLS with the token served), and every gateway log says it listened with
/// TLS and never that it started `--insecure`.
pub fn assert_ran_over_tls(dir: &Path) {
    let text = results_text(dir);
    let results: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("results.json: {e}: {text}"));
    let run = &results["run"];
    assert_eq!(run["tls"], serde_json::json!(true), "results.json: {run}");
    assert_eq!(run["security"], "tls", "results.json: {run}");
    let transport = run["transport"]
        .as_object()
        .unwrap_or_else(|| panic!("no transport checks in results.json: {run}"));
    eprintln!("transport checks: {}", run["transport"]);
    for (check, verdict) in transport.iter().filter(|(k, _)| *k != "node") {
        assert_eq!(verdict["ok"], serde_json::json!(true), "{check}: {verdict}");
    }
    let mut logs = 0;
    for i in 1..=9 {
        let Ok(log) = std::fs::read_to_string(dir.join(format!("n{i}.log"))) else {
            continue;
        };
        logs += 1;
        assert!(
            !log.contains("started with --insecure"),
            "n{i} ran --insecure"
        );
        let listening: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("gateway listening"))
            .collect();
        assert!(!listening.is_empty(), "n{i} never listened");
        assert!(
            listening
                .iter()
                .all(|l| l.contains("tls=true") && l.contains("peer_listen=Some")),
            "n{i} listened without TLS or peer port: {listening:?}"
        );
    }
    assert!(logs >= 3, "no gateway logs in {}", dir.display());
}

//! Shared by the jepsen integration tests: find or build the gateway binary,
//! run the harness with test-sized settings.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use jepsen::nemesis::{parse_faults, Schedule};
use jepsen::run::RunOptions;
use jepsen::workload::{MemberKind, PoolOptions, RegisterOptions};

/// True when running as root (namespaces need it); the tests skip otherwise.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// `target/<profile>` of this test executable (`.../target/debug/deps/t10_x`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| panic!("no target dir above {}", exe.display()))
}

/// The workspace root (this crate's parent).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| panic!("no workspace above the jepsen crate"))
}

/// Runs `cargo build -p <package> --bin <bin>... [features]` into
/// `target_dir` and returns the binaries. A target dir of its own, so the
/// build never waits for the lock of the `cargo test` that runs us.
pub fn build_bins(
    target_dir: &Path,
    package: &str,
    bins: &[&str],
    features: &[&str],
) -> Vec<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace()).args(["build", "-p", package]);
    for bin in bins {
        cmd.args(["--bin", bin]);
    }
    cmd.arg("--target-dir").arg(target_dir);
    if !features.is_empty() {
        cmd.args(["--features", &features.join(",")]);
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("running cargo: {e}"));
    assert!(status.success(), "building {package} failed: {status}");
    bins.iter()
        .map(|bin| {
            let path = target_dir.join("debug").join(bin);
            assert!(path.is_file(), "{} missing after the build", path.display());
            path
        })
        .collect()
}

/// `cargo build -p gateway-plugin --bin openshell-gateway [features]` into
/// `target_dir`; returns the binary.
pub fn build_gateway(target_dir: &Path, features: &[&str]) -> PathBuf {
    build_bins(
        target_dir,
        "gateway-plugin",
        &["openshell-gateway"],
        features,
    )
    .remove(0)
}

/// `openshell-supervisor` and `openshell-sandbox-runtime` next to this test
/// executable, built (into a target dir of their own) if absent.
pub fn supervisor_bins() -> (PathBuf, PathBuf) {
    let names = ["openshell-supervisor", "openshell-sandbox-runtime"];
    let here: Vec<PathBuf> = names.iter().map(|n| profile_dir().join(n)).collect();
    let mut bins = if here.iter().all(|b| b.is_file()) {
        here
    } else {
        let target = profile_dir()
            .parent()
            .map(|t| t.join("jepsen-gateway"))
            .unwrap_or_else(|| panic!("no target dir"));
        build_bins(&target, "supervisor", &names, &[])
    };
    let runtime = bins.remove(1);
    (bins.remove(0), runtime)
}

/// `openshell-gateway` next to this test executable, built (into a target
/// dir of its own) if absent.
pub fn gateway_bin() -> PathBuf {
    let bin = profile_dir().join("openshell-gateway");
    if bin.is_file() {
        return bin;
    }
    let target = profile_dir()
        .parent()
        .map(|t| t.join("jepsen-gateway"))
        .unwrap_or_else(|| panic!("no target dir"));
    build_gateway(&target, &[])
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
        },
        workload: "register".into(),
        pool: PoolOptions::default(),
        gateway_bin: bin,
        out,
        client_timeout: Duration::from_secs(6),
    }
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
    assert!(
        outcome.valid,
        "violations or undecided checks; report at {}/index.html\n{}",
        outcome.dir.display(),
        results_text(&outcome.dir)
    );
    let history = std::fs::read_to_string(outcome.dir.join("history.jsonl")).unwrap_or_default();
    (outcome, history)
}

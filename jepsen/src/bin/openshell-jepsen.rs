//! `openshell-jepsen`: parses arguments and calls the library.
//!
//! ```text
//! openshell-jepsen run    [--nodes 3] [--seed N] [--time-limit 60] [--nemesis partition,kill,pause] ...
//! openshell-jepsen run    --cas-mode own-version [--concurrency 16 --keys 2 --delay-ms 0,5] ...
//! openshell-jepsen run    --nemesis power-cut --power-cuts 200 [--power-cut-nodes 1|majority] ...
//! openshell-jepsen run    --workload pool [--members process|scripted] [--supervisors 4] [--capacity 3] [--pool-faults pause,kill,drain] ...
//! openshell-jepsen matrix [--time-limit 300] [--only kill,pause] [--workload pool] ...
//! openshell-jepsen check  history.jsonl
//! openshell-jepsen table  <matrix dir>
//! openshell-jepsen clean
//! ```
//! Exit code: 0 valid, 1 a checker found a violation or could not decide,
//! 2 the run could not be carried out.
//!
//! The benchmarks, the soak and the scale run are `openshell-bench`
//! (tools/bench).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use jepsen::nemesis::{parse_faults, Schedule};
use jepsen::run::RunOptions;
use jepsen::security::Security;
use jepsen::workload::{CasMode, Failover, MemberKind, PoolOptions, RegisterOptions};

/// Longest pause between one client's operations that `--delay-ms` takes.
const MAX_DELAY_MS: u64 = 60_000;

#[derive(Parser)]
#[command(
    name = "openshell-jepsen",
    version,
    about = "Partition-testing harness for the openshell gateway store"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// One run: workload + nemeses, then checkers and a report.
    Run(Common),
    /// Every nemesis in turn (and all combined); prints a markdown table.
    Matrix {
        #[command(flatten)]
        common: Common,
        /// Only these matrix rows (nemesis names or all-combined).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
    },
    /// Re-checks a history.jsonl: linearizability (register workload) or
    /// the pool invariants I1-I8 (pool workload; with healthy-workloads-kept
    /// and workload-continuity when a runtime-logs/ directory is beside it).
    Check {
        /// The history file.
        history: PathBuf,
    },
    /// Renders the results table of a matrix directory again.
    Table {
        /// The matrix directory (`--out` of `matrix`).
        dir: PathBuf,
    },
    /// Removes every osj-* namespace, link and process left by earlier runs
    /// whose harness is gone (runs in progress are left alone).
    Clean,
}

#[derive(Args, Clone)]
struct Common {
    /// Workload: register (read/write/cas over the object store) or pool
    /// (sandboxes, supervisors, pool faults; checkers I1-I8).
    #[arg(long, default_value = "register")]
    workload: String,
    /// Pool workload: what the members are: process (openshell-supervisor
    /// processes starting openshell-sandbox-runtime processes) or scripted
    /// (harness tasks recording grants, acks and reports).
    #[arg(long, default_value = "process")]
    members: MemberKind,
    /// Pool workload, process members: the openshell-supervisor binary
    /// (default: next to the gateway binary).
    #[arg(long)]
    supervisor_bin: Option<PathBuf>,
    /// Pool workload, process members: the openshell-sandbox-runtime binary
    /// (default: next to the gateway binary).
    #[arg(long)]
    runtime_bin: Option<PathBuf>,
    /// Pool workload: supervisors (pool members).
    #[arg(long, default_value_t = 4)]
    supervisors: usize,
    /// Pool workload: slots per supervisor.
    #[arg(long, default_value_t = 3)]
    capacity: u32,
    /// Pool workload: pool faults (pause, kill, drain; or none).
    #[arg(long, default_value = "pause,kill,drain")]
    pool_faults: String,
    /// Pool workload: how long a supervisor pause lasts, ms (min,max); keep
    /// it below the 4 s heartbeat TTL.
    #[arg(long, value_delimiter = ',', default_values_t = [3000, 3600])]
    supervisor_pause_ms: Vec<u64>,
    /// Nodes (3 or 5).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Seed of the schedule and clients (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Seconds of workload per run.
    #[arg(long, default_value_t = 60)]
    time_limit: u64,
    /// Faults: all, none, partition, clock, or names (leader-minority,
    /// leader-majority, isolate, bridge, majorities-ring, drop, kill, pause,
    /// clock-bump, clock-strobe, membership, island; and power-cut, which
    /// is not in `all`: it mounts every data directory on openshell-lazyfs).
    #[arg(long, default_value = "partition,kill,pause")]
    nemesis: String,
    /// Sometimes start two faults at once.
    #[arg(long)]
    combine: bool,
    /// Quiet seconds between faults (min,max).
    #[arg(long, value_delimiter = ',', default_values_t = [3.0, 6.0])]
    quiet: Vec<f64>,
    /// Seconds a fault holds (min,max).
    #[arg(long, value_delimiter = ',', default_values_t = [5.0, 10.0])]
    hold: Vec<f64>,
    /// Concurrent clients.
    #[arg(long, default_value_t = 5)]
    concurrency: usize,
    /// Registers in use at once.
    #[arg(long, default_value_t = 5)]
    keys: usize,
    /// Operations per register before it is retired.
    #[arg(long, default_value_t = 300)]
    ops_per_key: u64,
    /// Register workload: pause between one client's operations, ms
    /// (min,max).
    #[arg(long, value_delimiter = ',', default_values_t = [10, 50])]
    delay_ms: Vec<u64>,
    /// Register workload: what a cas compares against: read-then-put (a
    /// linearizable read first, then a put matching its version) or
    /// own-version (one put matching the version the client's own last read
    /// or write of the key returned, as real clients do; run it with many
    /// clients on few keys, e.g. --concurrency 16 --keys 2 --delay-ms 0,5).
    #[arg(long, default_value_t = CasMode::ReadThenPut)]
    cas_mode: CasMode,
    /// power-cut: end the run after this many cuts (--time-limit still
    /// caps it).
    #[arg(long)]
    power_cuts: Option<u64>,
    /// power-cut: nodes cut at once, 1 or majority.
    #[arg(long, default_value = "1")]
    power_cut_nodes: jepsen::power::CutNodes,
    /// power-cut: the openshell-lazyfs binary (default: beside the
    /// gateway binary).
    #[arg(long)]
    lazyfs_bin: Option<PathBuf>,
    /// Client request timeout, ms.
    #[arg(long, default_value_t = 6000)]
    client_timeout_ms: u64,
    /// Register workload: deadline of one attempt through one gateway, ms;
    /// a client fails over to another gateway when an attempt certainly
    /// had no effect, and avoids a gateway that timed out. 0: no failover
    /// (one attempt per op within the client timeout).
    #[arg(long, default_value_t = 1500)]
    attempt_timeout_ms: u64,
    /// Register workload: how long a client avoids a gateway that timed
    /// out, refused the connection or had no leader, ms.
    #[arg(long, default_value_t = 2000)]
    avoid_ms: u64,
    /// The openshell-gateway binary (default: target/debug/openshell-gateway
    /// of the workspace).
    #[arg(long)]
    gateway_bin: Option<PathBuf>,
    /// Run directory (default: jepsen/runs/<timestamp>-<seed>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Start the gateways with --insecure (plaintext, one port, no tokens)
    /// instead of TLS with a per-run CA, for comparison runs.
    #[arg(long)]
    insecure: bool,
}

/// The workspace root: the nearest ancestor of the current directory whose
/// Cargo.toml has `[workspace]`.
fn workspace_root() -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let mut dir: Option<&Path> = Some(&cwd);
    while let Some(d) = dir {
        if std::fs::read_to_string(d.join("Cargo.toml")).is_ok_and(|t| t.contains("[workspace]")) {
            return d.to_path_buf();
        }
        dir = d.parent();
    }
    cwd
}

fn range(v: &[f64], what: &str) -> Result<(Duration, Duration), String> {
    let bad = || format!("--{what} takes min,max seconds (>= 0)");
    let (a, b) = match v {
        [a] => (*a, *a),
        [a, b] => (*a, *b),
        _ => return Err(bad()),
    };
    if !(a >= 0.0 && b >= a && b.is_finite()) {
        return Err(bad());
    }
    Ok((Duration::from_secs_f64(a), Duration::from_secs_f64(b)))
}

/// The register clients' failover: `--attempt-timeout-ms 0` turns it off.
fn failover(c: &Common) -> Failover {
    match c.attempt_timeout_ms {
        0 => Failover::off(),
        ms => Failover {
            attempt: Some(Duration::from_millis(ms)),
            avoid: Duration::from_millis(c.avoid_ms),
        },
    }
}

fn options(c: &Common) -> Result<RunOptions, String> {
    if c.nodes != 3 && c.nodes != 5 {
        return Err("--nodes must be 3 or 5".into());
    }
    let seed = c.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    });
    let root = workspace_root();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    if c.workload != "register" && c.workload != "pool" {
        return Err("--workload must be register or pool".into());
    }
    let mut pool = PoolOptions {
        concurrency: c.concurrency.max(1),
        members: c.members,
        supervisor_bin: c.supervisor_bin.clone(),
        runtime_bin: c.runtime_bin.clone(),
        supervisors: c.supervisors.max(1),
        capacity: c.capacity.max(1),
        ..PoolOptions::default()
    };
    pool.pause_ms = match c.supervisor_pause_ms.as_slice() {
        [a] => (*a, *a),
        [a, b] if b >= a => (*a, *b),
        _ => return Err("--supervisor-pause-ms takes min,max".into()),
    };
    pool.faults = Vec::new();
    for f in c
        .pool_faults
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
    {
        match f {
            "none" => {}
            "pause" | "kill" | "drain" => pool.faults.push(f.to_string()),
            other => {
                return Err(format!(
                    "unknown pool fault {other:?} (pause, kill, drain, none)"
                ))
            }
        }
    }
    Ok(RunOptions {
        workload: c.workload.clone(),
        pool,
        nodes: c.nodes,
        seed,
        duration: Duration::from_secs(c.time_limit),
        faults: parse_faults(&c.nemesis)?,
        schedule: Schedule {
            quiet: range(&c.quiet, "quiet")?,
            hold: range(&c.hold, "hold")?,
            combine: c.combine,
        },
        register: RegisterOptions {
            concurrency: c.concurrency.max(1),
            keys: c.keys.max(1),
            ops_per_key: c.ops_per_key.max(1),
            delay_ms: match c.delay_ms.as_slice() {
                [a] if *a <= MAX_DELAY_MS => (*a, *a),
                [a, b] if b >= a && *b <= MAX_DELAY_MS => (*a, *b),
                _ => {
                    return Err(format!(
                        "--delay-ms takes min,max with min <= max <= {MAX_DELAY_MS}"
                    ))
                }
            },
            cas_mode: c.cas_mode,
            failover: failover(c),
        },
        gateway_bin: c
            .gateway_bin
            .clone()
            .unwrap_or_else(|| root.join("target/debug/openshell-gateway")),
        out: c
            .out
            .clone()
            .unwrap_or_else(|| root.join(format!("jepsen/runs/{stamp}-{seed}"))),
        client_timeout: Duration::from_millis(c.client_timeout_ms),
        security: if c.insecure {
            Security::Insecure
        } else {
            Security::Tls
        },
        power: jepsen::power::PowerOptions {
            lazyfs_bin: c.lazyfs_bin.clone(),
            cuts: c.power_cuts,
            nodes: c.power_cut_nodes,
        },
    })
}

/// `check`: a register history against linearizability, one version per
/// write and the watchers' records beside it (`watch-events`), or a pool
/// history against I1–I8 (and workload continuity when
/// its runtimes' logs are beside it).
fn check_history(history: &std::path::Path) -> ExitCode {
    let events = match jepsen::history::read_jsonl(history) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("{e:#}");
            return ExitCode::from(2);
        }
    };
    let n = jepsen::recovery::cluster_size(&events);
    let recovery = jepsen::recovery::measure(&events, n);
    print!("{}", recovery.table());
    // The follower lag needs the samples the run wrote beside its history.
    let samples = history.with_file_name("replicas.jsonl");
    if samples.is_file() {
        match jepsen::lag::read_rounds(&samples) {
            Ok(rounds) => print!("{}", jepsen::lag::measure(&rounds, &recovery, n).table()),
            Err(e) => eprintln!("{e:#}"),
        }
    }
    if events.iter().any(|e| e.f == "launch" || e.f == "grant") {
        return check_pool(&events, history);
    }
    match jepsen::checker::linear::check(&events, Default::default()) {
        Ok(keys) => {
            let mut ok = true;
            for k in keys {
                println!(
                    "{} {:?} ({} ops, {} steps)",
                    k.key, k.verdict, k.ops, k.steps
                );
                ok &= k.verdict == jepsen::checker::linear::Verdict::Valid;
            }
            ok &= check_versions(&events);
            ok &= check_watches(&events, history);
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}

/// `check` of a register history's resource versions: false when one
/// named two writes (a history that recorded none passes with a note).
fn check_versions(events: &[jepsen::history::Event]) -> bool {
    use jepsen::checker::Checker;
    let state = jepsen::checker::FinalState::default();
    let r = jepsen::checker::versions::OneVersionPerWrite.check(events, &state);
    println!("{} {:?}: {}", r.checker, r.valid, r.summary);
    for s in r.details["shared"].as_array().into_iter().flatten().take(5) {
        println!("    {s}");
    }
    r.valid != jepsen::checker::Validity::Invalid
}

/// `check` of the watchers' records beside a register history
/// (`watch-<n>.jsonl`): false when one is unreadable or the checker is not
/// valid (a run without watchers passes with a note).
fn check_watches(events: &[jepsen::history::Event], history: &std::path::Path) -> bool {
    use jepsen::checker::watch_log;
    use jepsen::checker::Checker;
    let dir = history.parent().unwrap_or(std::path::Path::new("."));
    let files = watch_log::files_in(dir);
    if files.is_empty() {
        println!("watch-events: no watch-<n>.jsonl beside the history; not checked");
        return true;
    }
    let mut logs = Vec::new();
    for file in files {
        match watch_log::read(&file) {
            Ok(log) => logs.push(log),
            Err(e) => {
                eprintln!("{e}");
                return false;
            }
        }
    }
    let state = jepsen::checker::FinalState::default();
    let r = jepsen::checker::watch::WatchEvents { logs }.check(events, &state);
    println!("{} {:?}: {}", r.checker, r.valid, r.summary);
    for v in r.details["violations"]
        .as_array()
        .into_iter()
        .flatten()
        .take(5)
    {
        println!("    {v}");
    }
    r.valid == jepsen::checker::Validity::Valid
}

/// `check` of a pool history.
fn check_pool(events: &[jepsen::history::Event], history: &std::path::Path) -> ExitCode {
    // A pool history: I1-I8, with the last status read as the
    // final state (the run's final read is its last status).
    let final_status = events
        .iter()
        .rev()
        .find(|e| e.f == "status" && e.kind == jepsen::history::OpType::Ok)
        .map(|e| e.index);
    let mut ok = true;
    let state = jepsen::checker::FinalState::default();
    let mut checkers =
        jepsen::checker::pool::pool_checkers(jepsen::checker::pool::PoolFinal { final_status });
    // A run with process members kept its runtimes' logs (runtime-logs/)
    // beside the history (supervisor exits are known only to the run).
    let runtimes = history.with_file_name(jepsen::members::runtime_log::LOGS_DIR);
    if runtimes.is_dir() {
        let runtimes = jepsen::members::runtime_log::runtime_logs(&runtimes);
        checkers.push(Box::new(jepsen::checker::kept::HealthyWorkloadsKept {
            runtimes: runtimes.clone(),
            history_started_at: jepsen::history::read_started_at(
                &history.with_file_name(jepsen::history::STARTED_FILE),
            ),
        }));
        checkers.push(Box::new(jepsen::checker::workload::WorkloadContinuity {
            runtimes,
            exits: Vec::new(),
        }));
    }
    for c in checkers {
        if c.name() == "replicas-identical-digest" {
            continue;
        }
        let r = c.check(events, &state);
        println!("{:<28} {:?}: {}", r.checker, r.valid, r.summary);
        for v in r.details["violations"]
            .as_array()
            .into_iter()
            .flatten()
            .take(5)
        {
            println!("    {}", v["what"].as_str().unwrap_or_default());
        }
        ok &= r.valid == jepsen::checker::Validity::Valid;
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `clean`: removes stale `osj-*` namespaces, links and tables of runs that
/// are no longer in progress.
fn clean() -> ExitCode {
    let left = jepsen::net::clean_stale();
    let live = jepsen::net::live_runs();
    if !live.is_empty() {
        println!("left alone: runs in progress {live:?}");
    }
    if left.is_empty() {
        println!("no osj-* leftovers");
        ExitCode::SUCCESS
    } else {
        eprintln!("could not remove: {left:?}");
        ExitCode::from(2)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(runtime) = jepsen::run::start_tool() else {
        return ExitCode::from(2);
    };
    match cli.command {
        Cmd::Clean => clean(),
        Cmd::Check { history } => check_history(&history),
        Cmd::Run(common) => {
            let opts = match options(&common) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            match runtime.block_on(jepsen::run::run(opts)) {
                Ok(outcome) => {
                    for r in &outcome.results {
                        println!("{:<22} {:?}: {}", r.checker, r.valid, r.summary);
                    }
                    print!("{}", outcome.recovery.table());
                    print!("{}", outcome.lag.table());
                    println!("report: {}/index.html", outcome.dir.display());
                    if outcome.valid {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    }
                }
                Err(e) => {
                    eprintln!("run failed: {e:#}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Matrix { common, only } => {
            let mut opts = match options(&common) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            let root = opts.out.clone();
            opts.out = root.clone();
            let rows = runtime.block_on(jepsen::matrix::run_matrix(&opts, &root, &only));
            let table = jepsen::matrix::table(&rows, Some(&opts));
            println!("{table}");
            let _ = std::fs::create_dir_all(&root);
            let _ = std::fs::write(root.join("matrix.md"), &table);
            if rows.iter().all(jepsen::matrix::Row::is_valid) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Cmd::Table { dir } => {
            let rows = jepsen::matrix::read_rows(&dir);
            if rows.is_empty() {
                eprintln!(
                    "no matrix rows (<set>/results.json) under {}",
                    dir.display()
                );
                return ExitCode::from(2);
            }
            println!("{}", jepsen::matrix::table(&rows, None));
            if rows.iter().all(jepsen::matrix::Row::is_valid) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
    }
}

//! One test run, start to finish: refuse leftovers, build the network, start
//! the gateways, run the workload and the nemesis, heal, final reads,
//! convergence, checkers, report. Cleanup happens on every path: the
//! [`Cluster`] drop guard (errors and panics) and a Ctrl-C handler.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::json;

use crate::checker::convergence::ReplicasIdentical;
use crate::checker::liveness::{self, Liveness};
use crate::checker::{CheckResult, Checker, FinalState, Validity};
use crate::cluster::{Cluster, GatewayOptions};
use crate::history::Recorder;
use crate::nemesis::{Fault, Nemesis, Schedule};
use crate::net;
use crate::power::{Disks, PowerOptions, PowerStats};
use crate::report::{self, Results};
use crate::security::Security;
use crate::workload::{PoolOptions, RegisterOptions, Workload};

/// Everything a run needs.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// 3 or 5.
    pub nodes: usize,
    /// Seeds the schedule and the clients.
    pub seed: u64,
    /// How long the workload runs.
    pub duration: Duration,
    /// Enabled faults.
    pub faults: Vec<Fault>,
    /// Schedule timing.
    pub schedule: Schedule,
    /// Register workload settings.
    pub register: RegisterOptions,
    /// Which workload: `register` or `pool`.
    pub workload: String,
    /// Pool workload settings (with `workload = "pool"`).
    pub pool: PoolOptions,
    /// The `openshell-gateway` binary.
    pub gateway_bin: PathBuf,
    /// Run directory.
    pub out: PathBuf,
    /// Client request timeout.
    pub client_timeout: Duration,
    /// TLS everywhere (the default) or `--insecure` gateways, for
    /// comparison runs.
    pub security: Security,
    /// Power-loss settings (with the `power-cut` nemesis: every data
    /// directory on its own lazyfs mount).
    pub power: PowerOptions,
}

/// What a run found.
#[derive(Debug)]
pub struct Outcome {
    /// The run directory.
    pub dir: PathBuf,
    /// Every checker's result.
    pub results: Vec<CheckResult>,
    /// No violation and nothing undecided.
    pub valid: bool,
    /// Per fault: time until majority-side writes succeed again.
    pub recovery: crate::recovery::Recovery,
    /// Per healed fault: how long the followers stayed behind.
    pub lag: crate::lag::Lag,
}

/// The start of a harness binary (`openshell-jepsen`, `openshell-bench`):
/// logs to stderr (`RUST_LOG`, `info` by default) and a tokio runtime;
/// `None`, said on stderr, when tokio cannot start.
pub fn start_tool() -> Option<tokio::runtime::Runtime> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => Some(runtime),
        Err(e) => {
            eprintln!("cannot start tokio: {e}");
            None
        }
    }
}

/// Refuses to run as non-root or with leftovers of an earlier run (a run
/// whose harness is gone; live runs may share the machine).
///
/// # Errors
/// Naming the leftovers and the exact cleanup command.
pub fn preflight() -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("openshell-jepsen needs root (network namespaces, nftables, iptables)");
    }
    for tool in ["ip", "nft", "iptables"] {
        if net::sh(&["sh", "-c", &format!("command -v {tool}")]).is_err() {
            bail!("{tool} is missing: run jepsen/ci-deps.sh");
        }
    }
    let left = net::stale_leftovers();
    if !left.is_empty() {
        bail!(
            "leftovers of an earlier run exist: {left:?}\nremove them first with:\n  {}",
            net::CLEAN_COMMAND
        );
    }
    Ok(())
}

/// Runs one test.
///
/// # Errors
/// When the environment cannot be set up (preflight, network, binary) or the
/// cluster never elects a leader. Violations are not errors: see
/// [`Outcome::valid`].
pub async fn run(options: RunOptions) -> anyhow::Result<Outcome> {
    preflight()?;
    // A run directory holds one run: gateways restarted on another run's
    // data directories would find a cluster at other addresses.
    if std::fs::read_dir(&options.out).is_ok_and(|mut d| d.next().is_some()) {
        bail!(
            "run directory {} is not empty; choose another --out or remove it",
            options.out.display()
        );
    }
    std::fs::create_dir_all(&options.out)
        .with_context(|| format!("creating {}", options.out.display()))?;
    let dir = options.out.canonicalize().context("run directory")?;
    let run_id = format!(
        "{:06x}",
        (std::process::id() as u64 ^ options.seed.rotate_left(17)) & 0xff_ffff
    );
    let prefix = format!("{}{run_id}-", net::PREFIX);
    let lock = net::RunLock::acquire(&run_id)?;
    // Ctrl-C: remove what this run created, then exit.
    let ctrl_c = {
        let prefix = prefix.clone();
        let pid_file = lock.path().to_path_buf();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("openshell-jepsen: interrupted; cleaning up {prefix}*");
                let left = net::clean(&prefix);
                if !left.is_empty() {
                    eprintln!("could not remove {left:?}; run: {}", net::CLEAN_COMMAND);
                }
                let _ = std::fs::remove_file(&pid_file);
                std::process::exit(130);
            }
        })
    };
    let result = run_inner(&options, &dir, &run_id).await;
    ctrl_c.abort();
    drop(lock);
    result
}

/// What went wrong while healing or converging makes an otherwise valid
/// `replicas-identical` undecided, with the notes in its summary.
fn note_undecided_convergence(results: &mut [CheckResult], notes: &[String]) {
    if notes.is_empty() {
        return;
    }
    if let Some(r) = results
        .iter_mut()
        .find(|r| r.checker == "replicas-identical")
    {
        if r.valid == Validity::Valid {
            r.valid = Validity::Unknown;
        }
        r.summary = format!("{} ({})", r.summary, notes.join("; "));
    }
}

/// `results.json`'s `run`: the settings, then what the run found (`found`,
/// an object).
fn run_json(
    options: &RunOptions,
    workload: &Workload,
    faketime: bool,
    found: serde_json::Value,
) -> serde_json::Value {
    let mut run = json!({
        "seed": options.seed,
        "nodes": options.nodes,
        "duration_s": options.duration.as_secs_f64(),
        "nemeses": options.faults.iter().map(|f| f.name()).collect::<Vec<_>>(),
        "combine": options.schedule.combine,
        "workload": workload.name(),
        "pool": if options.workload == "pool" { json!(format!("{:?}", options.pool)) } else { json!(null) },
        "concurrency": options.register.concurrency,
        "keys": options.register.keys,
        "ops_per_key": options.register.ops_per_key,
        "delay_ms": options.register.delay_ms,
        "cas_mode": options.register.cas_mode.name(),
        "gateway_bin": options.gateway_bin.display().to_string(),
        "faketime": faketime,
        "security": options.security.name(),
        "tls": options.security == Security::Tls,
    });
    if let (Some(run), serde_json::Value::Object(found)) = (run.as_object_mut(), found) {
        run.extend(found);
    }
    run
}

/// The cluster's membership as the first node sees it, for `results.json`.
async fn final_membership(cluster: &Cluster) -> Option<serde_json::Value> {
    cluster.nodes[0].admin().status(proto::cluster::StatusRequest { local: false }).await.ok().map(|s| {
        let s = s.into_inner();
        json!({"leader": s.leader_id, "term": s.term, "commit_index": s.commit_index,
               "nodes": s.nodes.iter().map(|n| json!({"id": n.id, "voter": n.voter})).collect::<Vec<_>>()})
    })
}

/// With the `power-cut` nemesis, mounts every node's data directory on its
/// own lazyfs; returns whether it did.
fn mount_disks(
    options: &RunOptions,
    cluster: &mut Cluster,
    dir: &std::path::Path,
) -> anyhow::Result<bool> {
    if !options.faults.contains(&Fault::PowerCut) {
        return Ok(false);
    }
    let bin = options.power.bin(&options.gateway_bin);
    let data_dirs: Vec<(usize, &std::path::Path)> = cluster
        .nodes
        .iter()
        .map(|n| (n.id, n.data_dir.as_path()))
        .collect();
    let disks = Disks::mount(dir, &data_dirs, &bin)?;
    cluster.disks = Some(disks);
    Ok(true)
}

/// The run's nemesis, with the power-cut settings and their counters.
fn nemesis(
    options: &RunOptions,
    cluster: &Arc<Cluster>,
    history: &Recorder,
    power_stats: &Arc<PowerStats>,
) -> Nemesis {
    Nemesis::new(
        cluster.clone(),
        history.clone(),
        StdRng::seed_from_u64(options.seed),
        options.faults.clone(),
        options.schedule,
    )
    .with_power(options.power.clone(), power_stats.clone())
}

/// The final phase, after the heal: leader, final reads, convergence,
/// every replica's objects and digests. Returns the checkers to run (the
/// workload's, `replicas-identical`, `liveness` over `live`), what they
/// check against, and notes of what went wrong.
async fn final_phase(
    cluster: &Cluster,
    running: &mut crate::workload::Running,
    live: liveness::Observation,
) -> (Vec<Box<dyn Checker>>, FinalState, Vec<String>) {
    let mut notes = Vec::new();
    if let Err(e) = cluster
        .wait_leader(Duration::from_secs(60), "after healing")
        .await
    {
        notes.push(format!("after healing: {e:#}"));
    }
    let mut checkers: Vec<Box<dyn Checker>> = running.final_reads(Duration::from_secs(60)).await;
    checkers.push(Box::new(ReplicasIdentical));
    checkers.push(Box::new(Liveness(live)));
    let mut state = FinalState::default();
    match cluster.wait_converged(Duration::from_secs(60)).await {
        Ok(commit) => state.commit_index = commit,
        Err(e) => notes.push(format!("convergence: {e:#}")),
    }
    for n in &cluster.nodes {
        state.replicas.push(cluster.dump(n.id).await);
    }
    state.digests = sample_digests(cluster, Duration::from_secs(10)).await;
    (checkers, state, notes)
}

async fn run_inner(
    options: &RunOptions,
    dir: &std::path::Path,
    run_id: &str,
) -> anyhow::Result<Outcome> {
    let faketime = options.faults.iter().any(|f| f.needs_faketime());
    let workload = match options.workload.as_str() {
        "register" => Workload::Register(options.register.clone()),
        "pool" => Workload::Pool(options.pool.clone()),
        other => bail!("unknown workload {other:?} (register, pool)"),
    };
    let gateway = GatewayOptions {
        bin: options.gateway_bin.clone(),
        heartbeat_ms: 50,
        election_ms: (300, 600),
        faketime,
        client_timeout: options.client_timeout,
        config: workload.gateway_config(),
        security: options.security,
        members: workload.member_ids(),
    };
    let mut cluster = Cluster::create(run_id, options.nodes, dir, gateway).await?;
    let power_cut = mount_disks(options, &mut cluster, dir)?;
    workload.prepare(&mut cluster)?;
    let cluster = Arc::new(cluster);
    cluster.start_all()?;
    let leader = cluster
        .wait_leader(Duration::from_secs(60), "initial election")
        .await
        .context("the cluster did not elect a leader; see the node logs")?;
    tracing::info!(leader, dir = %dir.display(), "cluster up");
    // Secure runs: operate what TLS promises before the workload starts.
    let transport = crate::security_probe::probe(&cluster, leader).await;
    tracing::info!(?transport, "transport checked");

    let history = Recorder::new(Some(&dir.join("history.jsonl")))?;
    history.write_started_at(&dir.join(crate::history::STARTED_FILE))?;
    let sampler = crate::lag::Sampler::start(
        cluster.clone(),
        history.clone(),
        Some(&dir.join("replicas.jsonl")),
    );
    let started = Instant::now();
    let until = started + options.duration;
    let mut running = workload
        .start(cluster.clone(), history.clone(), options.seed)
        .await?;
    let power_stats = Arc::new(PowerStats::default());
    let mut nemesis = nemesis(options, &cluster, &history, &power_stats);
    nemesis.run(until).await;
    // `--power-cuts N` ends the run after N cuts; otherwise it runs its time.
    if !(power_cut && options.power.cuts.is_some()) {
        tokio::time::sleep_until(until.into()).await;
    }
    running.stop().await;
    nemesis.heal_all().await;
    let healed = history.nemesis("recover", "all faults healed before final reads");
    let live = liveness::observe(&cluster, &history, healed.index, liveness::GIVE_UP).await;
    tracing::info!(agreed_after_s = ?live.agreed_after_s, "liveness after the final heal");
    let (checkers, state, notes) = final_phase(&cluster, &mut running, live).await;
    let rounds = sampler.stop().await;
    let events = history.snapshot();
    let checked_at = Instant::now();
    let mut results: Vec<CheckResult> = checkers.iter().map(|c| c.check(&events, &state)).collect();
    note_undecided_convergence(&mut results, &notes);
    let valid = results.iter().all(|r| r.valid == Validity::Valid);
    let membership = final_membership(&cluster).await;
    let recovery = crate::recovery::measure(&events, options.nodes);
    let lag = crate::lag::measure(&rounds, &recovery, options.nodes);
    let report = Results {
        valid,
        run: run_json(
            options,
            &workload,
            faketime,
            json!({
                "transport": transport,
                "check_seconds": checked_at.elapsed().as_secs_f64(),
                "final_cluster": membership,
                "net_rules_at_end": cluster.net.rules(),
                "notes": notes,
                "power": if power_cut { power_stats.to_json(options.power.nodes) } else { json!(null) },
            }),
        ),
        checkers: results.clone(),
        stats: report::stats(&events),
        recovery: recovery.clone(),
        lag: lag.clone(),
    };
    report::write(dir, &report, &events)?;
    drop(nemesis);
    drop(running);
    // Last reference: killing the processes and removing the network.
    drop(cluster);
    Ok(Outcome {
        dir: dir.to_path_buf(),
        results,
        valid,
        recovery,
        lag,
    })
}

/// Samples every running replica's `StateDigest` until some applied index
/// was sampled on all of them or `within` passes ([`crate::digest_sample`]).
async fn sample_digests(cluster: &Cluster, within: Duration) -> Vec<crate::checker::DigestSample> {
    let running: Vec<&crate::cluster::Node> =
        cluster.nodes.iter().filter(|n| n.is_running()).collect();
    let names: Vec<String> = running.iter().map(|n| n.name.clone()).collect();
    crate::digest_sample::sample(&names, within, |at, wait| {
        let wait_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
        futures::future::join_all(running.iter().map(move |n| n.digest(at, wait_ms)))
    })
    .await
}

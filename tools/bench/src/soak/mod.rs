//! `openshell-bench soak`: a long run that shows the gateways' memory,
//! snapshot and disk stay flat once retention collects what the workload
//! left behind (issue 16's acceptance soak).
//!
//! Three real `openshell-gateway` processes run in their network namespaces
//! exactly as in a Jepsen run ([`jepsen::cluster`]: TLS with the run's CA,
//! admin token, a credential per member), with a short `--retention-ticks`
//! so the first retention period ends early, and no nemesis. Then:
//!
//! - [`members`]: 50 scripted members (real `SupervisorHost.Attach` streams
//!   with credentials) each live a few minutes under one member id, then
//!   drain and leave, leave, or crash, and come back under a new id;
//! - [`driver`]: sandboxes created and deleted through `PoolAdmin` (100,000
//!   by default, paced evenly over the period, at most `max_live` live);
//! - [`sample`]: every gateway's RSS, snapshot file, applied state, data
//!   directory on disk, plus the counters, every 10 s (`samples.json`,
//!   `samples.csv`);
//! - [`verdict`]: flat or not after the first retention period
//!   (`verdict.md`, `verdict.json`); [`plot`]: `soak.svg`.
//!
//! After the churn ends the soak keeps sampling for one more retention
//! period (plus `cool_down`, a minute by default), so the plot shows the
//! last deletes collected.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use jepsen::cluster::{Cluster, GatewayOptions};
use jepsen::net;
use jepsen::security::Security;
use local_cluster::gateway::{GatewaySection, SupervisorPoolSection};

mod args;
pub mod driver;
pub mod members;
pub mod plot;
pub mod sample;
pub mod verdict;

pub use args::SoakArgs;
use driver::{Driver, DriverPlan};
use members::{MemberPlan, Members};
use sample::Soak;

/// Everything a soak needs.
#[derive(Clone, Debug)]
pub struct SoakOptions {
    /// Gateways (3 or 5).
    pub nodes: usize,
    /// Seeds the members and clients.
    pub seed: u64,
    /// Creates are spread over this long.
    pub duration: Duration,
    /// Sandboxes created (and deleted) in all.
    pub sandboxes: u64,
    /// Most sandboxes live at once.
    pub max_live: usize,
    /// Concurrent sandbox clients.
    pub concurrency: usize,
    /// Members alive at once (slots).
    pub members: usize,
    /// Slots per member.
    pub capacity: u32,
    /// How long one member generation lives (min, max).
    pub member_life: (Duration, Duration),
    /// The gateways' `--retention-ticks` (`None`: not passed, the gateway's
    /// default; the verdict window then starts at the first delete).
    pub retention_ticks: Option<u64>,
    /// The gateways' `--tick-interval-ms`.
    pub tick_ms: u64,
    /// The gateways' `--heartbeat-ttl-ms`.
    pub heartbeat_ttl_ms: u64,
    /// Time between samples.
    pub sample_every: Duration,
    /// The verdict's tolerance, percent.
    pub tolerance_pct: f64,
    /// How long sampling goes on after the churn ended, beyond one
    /// retention period.
    pub cool_down: Duration,
    /// The `openshell-gateway` binary.
    pub gateway_bin: PathBuf,
    /// The soak directory (must be empty or absent).
    pub out: PathBuf,
    /// Per-request timeout of the harness's clients.
    pub client_timeout: Duration,
}

impl SoakOptions {
    /// The settings as recorded in `samples.json`.
    fn json(&self) -> serde_json::Value {
        json!({
            "nodes": self.nodes,
            "seed": self.seed,
            "duration_s": self.duration.as_secs_f64(),
            "sandboxes": self.sandboxes,
            "max_live": self.max_live,
            "concurrency": self.concurrency,
            "members": self.members,
            "capacity": self.capacity,
            "member_life_s": [self.member_life.0.as_secs_f64(), self.member_life.1.as_secs_f64()],
            "retention_ticks": self.retention_ticks,
            "tick_ms": self.tick_ms,
            "heartbeat_ttl_ms": self.heartbeat_ttl_ms,
            "sample_every_s": self.sample_every.as_secs_f64(),
            "tolerance_pct": self.tolerance_pct,
            "cool_down_s": self.cool_down.as_secs_f64(),
            "gateway_bin": self.gateway_bin.display().to_string(),
            "sandbox_driver": "none (PoolAdmin.CreateSandbox; scripted members ack the terms)",
            "security": "tls",
            "title": title(self),
        })
    }

    /// One retention period of wall time (`None`: no `--retention-ticks`).
    fn retention(&self) -> Option<Duration> {
        self.retention_ticks
            .map(|t| Duration::from_millis(t.saturating_mul(self.tick_ms)))
    }

    /// The longest the churn may run before the soak gives up on finishing
    /// it: the period and half again, plus five minutes.
    fn churn_limit(&self) -> Duration {
        self.duration.mul_f64(1.5) + Duration::from_secs(300)
    }

    /// Member ids per slot: enough generations for the longest soak.
    fn generations(&self) -> usize {
        let longest = self.churn_limit() + self.retention().unwrap_or_default() * 2;
        let shortest = self.member_life.0.max(Duration::from_secs(10));
        let n = (longest.as_secs_f64() / shortest.as_secs_f64()).ceil() as usize + 2;
        n.clamp(2, 64)
    }
}

/// What a soak found.
#[derive(Debug)]
pub struct SoakOutcome {
    /// The soak directory.
    pub dir: PathBuf,
    /// The verdict.
    pub verdict: verdict::Verdict,
    /// Every sandbox was created and deleted in time.
    pub complete: bool,
}

/// Runs one soak.
///
/// # Errors
/// When the environment cannot be set up (preflight, network, binary) or
/// the cluster never elects a leader. A metric that is not flat is not an
/// error: see [`SoakOutcome::verdict`].
pub async fn run(options: SoakOptions) -> anyhow::Result<SoakOutcome> {
    jepsen::run::preflight()?;
    let dir = crate::run_dir(&options.out, "soak")?;
    let run_id = format!(
        "{:06x}",
        (u64::from(std::process::id()) ^ options.seed.rotate_left(23) ^ 0x50a6) & 0xff_ffff
    );
    let prefix = format!("{}{run_id}-", net::PREFIX);
    let lock = net::RunLock::acquire(&run_id)?;
    let ctrl_c = {
        let pid_file = lock.path().to_path_buf();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("openshell-bench soak: interrupted; cleaning up {prefix}*");
                let left = net::clean(&prefix);
                if !left.is_empty() {
                    eprintln!("could not remove {left:?}; run: {}", net::CLEAN_COMMAND);
                }
                let _ = std::fs::remove_file(&pid_file);
                std::process::exit(130);
            }
        })
    };
    let result = soak(&options, &dir, &run_id).await;
    ctrl_c.abort();
    drop(lock);
    result
}

/// Starts the cluster: TLS, a credential per member id, the soak's
/// gateway flags.
async fn start_cluster(
    options: &SoakOptions,
    dir: &Path,
    run_id: &str,
    member_ids: Vec<String>,
) -> anyhow::Result<Arc<Cluster>> {
    let config = GatewaySection {
        supervisor_pool: Some(SupervisorPoolSection {
            tick_interval_ms: Some(options.tick_ms),
            heartbeat_ttl_ms: Some(options.heartbeat_ttl_ms),
            // The members send a status every tick (`status_interval`
            // below); the gateways expect it at that interval.
            status_interval_ms: Some(options.tick_ms),
            retention_ticks: options.retention_ticks,
            ..SupervisorPoolSection::default()
        }),
        // The soak's members and clients dial from this host's one address.
        tls: Some(crate::one_address_for_many_clients()),
        ..GatewaySection::default()
    };
    let gateway = GatewayOptions {
        bin: options.gateway_bin.clone(),
        // Calmer than a Jepsen run's 50 / 300-600 ms: the soak shares two
        // cores with its own clients and must not measure elections (the
        // peer RPC timeouts follow the heartbeat).
        heartbeat_ms: 250,
        election_ms: (2000, 4000),
        faketime: false,
        client_timeout: options.client_timeout,
        config,
        security: Security::Tls,
        members: member_ids,
    };
    let cluster = Arc::new(Cluster::create(run_id, options.nodes, dir, gateway).await?);
    cluster.start_all()?;
    let leader = cluster
        .wait_leader(Duration::from_secs(60), "initial election")
        .await
        .context("the cluster did not elect a leader; see the node logs")?;
    tracing::info!(leader, dir = %dir.display(), "soak cluster up");
    Ok(cluster)
}

/// The running workload of a soak.
struct Workload {
    members: Members,
    driver: Driver,
    started: Instant,
}

impl Workload {
    fn counts(&self) -> sample::Counts {
        sample::counts(
            &self.driver.counters,
            self.driver.live(),
            &self.members.counters,
        )
    }
}

/// Starts the members, waits for half of them, starts the driver.
async fn start_workload(options: &SoakOptions, cluster: &Arc<Cluster>) -> Workload {
    let plan = MemberPlan {
        slots: options.members,
        generations: options.generations(),
        capacity: options.capacity,
        life: options.member_life,
        status_interval: Duration::from_millis(options.tick_ms),
        gateways: cluster.nodes.iter().map(|n| n.addr.clone()).collect(),
        security: cluster
            .credentials
            .as_ref()
            .map(jepsen::security::Credentials::member_security),
    };
    let members = Members::start(plan, options.seed);
    let wait_until = Instant::now() + Duration::from_secs(60);
    while (members
        .counters
        .attached
        .load(std::sync::atomic::Ordering::Relaxed) as usize)
        < options.members / 2
        && Instant::now() < wait_until
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let driver = Driver::start(
        cluster.clone(),
        DriverPlan {
            total: options.sandboxes,
            max_live: options.max_live,
            concurrency: options.concurrency,
            period: options.duration,
        },
        options.seed,
    );
    Workload {
        members,
        driver,
        started: Instant::now(),
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// Samples until the churn ended and one more retention period passed (or
/// the churn limit); returns the record.
async fn sample_loop(
    options: &SoakOptions,
    cluster: &Cluster,
    workload: &mut Workload,
    dir: &Path,
) -> Soak {
    let mut soak = Soak {
        settings: options.json(),
        ..Soak::default()
    };
    let cool_down = options.retention().unwrap_or_default() + options.cool_down;
    let mut next = Instant::now();
    let mut cool_until: Option<Instant> = None;
    loop {
        tokio::time::sleep_until(next.into()).await;
        next += options.sample_every;
        let s = sample::sample(cluster, workload.started, workload.counts()).await;
        let c = &s.counts;
        let worst = |f: fn(&sample::NodeSample) -> u64| s.nodes.iter().map(f).max().unwrap_or(0);
        tracing::info!(
            t_s = s.t_s.round(),
            created = c.created,
            deleted = c.deleted,
            live = c.live,
            members = c.members,
            rss_mib = format!("{:.1}", mib(worst(|n| n.rss_bytes))),
            snapshot_mib = format!("{:.2}", mib(worst(|n| n.snapshot_bytes))),
            state_mib = format!("{:.2}", mib(worst(|n| n.state_bytes))),
            disk_mib = format!("{:.1}", mib(worst(|n| n.disk_bytes))),
            "soak sample"
        );
        let t_s = s.t_s;
        soak.samples.push(s);
        if cool_until.is_none() && workload.driver.is_done() {
            soak.driver_done_s = Some(t_s);
            cool_until = Some(Instant::now() + cool_down);
        }
        if let Err(e) = sample::write(dir, &soak) {
            tracing::warn!("{e:#}");
        }
        if cool_until.is_some_and(|u| Instant::now() >= u) {
            break;
        }
        if cool_until.is_none() && workload.started.elapsed() > options.churn_limit() {
            tracing::warn!("the churn did not finish within its limit; stopping it");
            break;
        }
    }
    soak
}

async fn soak(options: &SoakOptions, dir: &Path, run_id: &str) -> anyhow::Result<SoakOutcome> {
    let ids = members::member_ids(options.members, options.generations());
    let cluster = start_cluster(options, dir, run_id, ids).await?;
    let mut workload = start_workload(options, &cluster).await;
    let mut soak = sample_loop(options, &cluster, &mut workload, dir).await;
    let complete = soak.driver_done_s.is_some();
    workload.driver.stop().await;
    workload.members.stop().await;
    let first_delete = workload.driver.first_delete().map(|d| d.as_secs_f64());
    soak.retention_end_s =
        first_delete.map(|d| d + options.retention().map_or(0.0, |r| r.as_secs_f64()));
    let last = soak.samples.last().map_or(0.0, |s| s.t_s);
    let to_s = soak.driver_done_s.unwrap_or(last);
    let verdict = verdict::judge(
        &soak.samples,
        soak.retention_end_s.unwrap_or(to_s),
        to_s,
        options.tolerance_pct,
    );
    sample::write(dir, &soak)?;
    write_report(dir, options, &soak, &verdict, &workload)?;
    drop(workload);
    drop(cluster);
    Ok(SoakOutcome {
        dir: dir.to_path_buf(),
        verdict,
        complete,
    })
}

/// `verdict.md`, `verdict.json` and `soak.svg`.
fn write_report(
    dir: &Path,
    options: &SoakOptions,
    soak: &Soak,
    verdict: &verdict::Verdict,
    workload: &Workload,
) -> anyhow::Result<()> {
    let c = workload.counts();
    let errors = match workload.driver.counters.errors.lock() {
        Ok(g) => g.clone(),
        Err(p) => p.into_inner().clone(),
    };
    let m = &workload.members.counters;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    let summary = format!(
        "sandboxes: {} created, {} deleted, {} create failures, {} delete failures, {} retries\n\
         members: {} joined, {} re-attached, {} drained+left, {} left, {} crashed, {} HostLeft, {} acks\n\
         first errors: {errors:?}\n",
        c.created,
        c.deleted,
        c.create_failed,
        c.delete_failed,
        get(&workload.driver.counters.retries),
        get(&m.joined),
        get(&m.reattached),
        get(&m.drained),
        get(&m.left),
        get(&m.crashed),
        get(&m.left_confirmed),
        get(&m.acks),
    );
    let text = format!("{}\n{summary}", verdict.table());
    let path = dir.join("verdict.md");
    std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    let path = dir.join("verdict.json");
    let json = serde_json::to_string_pretty(verdict).context("encoding the verdict")?;
    std::fs::write(&path, json).with_context(|| format!("writing {}", path.display()))?;
    plot::draw(soak, &dir.join("soak.svg"), &title(options))
}

/// The plot's title.
pub fn title(options: &SoakOptions) -> String {
    let retention = match options.retention_ticks {
        Some(t) => format!(
            "retention {t} ticks ({:.0} s)",
            options.retention().unwrap_or_default().as_secs_f64()
        ),
        None => "no --retention-ticks".to_string(),
    };
    format!(
        "soak: {} sandboxes created and deleted over {:.0} min, {} members churning, {} gateways, {retention}",
        options.sandboxes,
        options.duration.as_secs_f64() / 60.0,
        options.members,
        options.nodes
    )
}

/// `openshell-bench soak-plot`: the verdict and the plot again from a soak
/// directory's `samples.json` (e.g. with another tolerance).
///
/// # Errors
/// When the samples cannot be read or the plot written.
pub fn replot(dir: &Path, tolerance_pct: f64) -> anyhow::Result<verdict::Verdict> {
    let soak = sample::read(dir)?;
    let last = soak.samples.last().map_or(0.0, |s| s.t_s);
    let to_s = soak.driver_done_s.unwrap_or(last);
    let verdict = verdict::judge(
        &soak.samples,
        soak.retention_end_s.unwrap_or(to_s),
        to_s,
        tolerance_pct,
    );
    let title = soak.settings["title"]
        .as_str()
        .map_or_else(|| "soak".to_string(), str::to_string);
    plot::draw(&soak, &dir.join("soak.svg"), &title)?;
    Ok(verdict)
}

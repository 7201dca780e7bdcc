//! `openshell-bench compare`: the comparative throughput/latency benchmark of
//! the replicated store against PostgreSQL 15, a 3-member etcd, the local
//! file limit and the in-process raft group, all on loopback, all plaintext,
//! every system at its default timeouts (docs/benchmarks.md, "Comparison
//! with PostgreSQL and etcd").
//!
//! # Layout
//! - this file: the [`BenchSystem`] trait every system implements, the typed
//!   [`WriteError`], the command's arguments ([`BenchArgs`]) and the run loop
//!   ([`run`]: every system x concurrency, `--runs` times).
//! - [`load`]: the closed-loop client driver and its latency summary.
//! - [`postgres`], [`etcd`], [`gateways`]: start the external systems
//!   (processes in a tempdir, own ports), preload the keys, and the
//!   per-client write of each.
//! - [`file_limit`], [`inproc`]: the two in-process references
//!   (`raft_store::bench`).
//! - [`failover`] (+ [`transfer`]): `openshell-bench failover`, the
//!   write-unavailability windows of a killed, stopped or transferred leader
//!   on the same systems and load.
//! - [`report`]: ratios, targets and verdicts, `run-<k>.json`,
//!   `summary.json`, `summary.md`; [`plot`]: the SVG.
//!
//! Every system sees the same workload: `keys` keys (default 10,000),
//! 256-byte values, and closed-loop clients at each concurrency; client `i`
//! of `n` owns the keys `k` with `k % n == i` and picks one of them uniformly
//! at random for each write, so clients never conflict with each other. A
//! write is a compare-and-set on the version this client last saw for the
//! key (from the preload or its own last write; after a failure it reads
//! the key again first); a CAS that fails is an error, never a success.

pub mod etcd;
pub mod etcd_wire;
pub mod failover;
pub mod failover_load;
pub mod file_limit;
pub mod gateways;
pub mod inproc;
pub mod load;
pub mod plot;
pub mod postgres;
pub mod report;
pub mod transfer;

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

pub use load::{run_level, LevelResult, LoadOptions};

/// Bytes of every value written (and of every file-limit record).
pub const VALUE_BYTES: usize = raft_store::bench::RECORD_BYTES;

/// A version slot nobody has read yet (after a failed write).
pub const UNKNOWN: u64 = u64::MAX;

/// Why one write did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The compare-and-set found another version (or the lease check
    /// failed): the system refused the write.
    #[error("CAS conflict: {0}")]
    Conflict(String),
    /// Any other failure (transport, timeout, server error).
    #[error("{0}")]
    Failed(String),
}

/// One system under test. The driver calls [`BenchSystem::connect`] once per
/// client before a level starts (client `i` of a level), then
/// [`BenchSystem::write`] in a closed loop with that client's connection.
pub trait BenchSystem: Send + Sync + 'static {
    /// A client's own connection (and its per-client state).
    type Client: Send + 'static;

    /// Short name in tables and JSON (`postgres`, `etcd`, `gateways`,
    /// `file`, `inproc`).
    fn name(&self) -> &'static str;

    /// The server processes whose CPU a level counts (none: the system
    /// runs inside the bench's process).
    fn server_pids(&self) -> Vec<i32> {
        Vec::new()
    }

    /// Opens client `client`'s connection.
    fn connect(&self, client: usize) -> impl Future<Output = anyhow::Result<Self::Client>> + Send;

    /// One fenced/compare-and-set write of `key` (in `0..keys`) with a
    /// 256-byte value.
    fn write(
        &self,
        client: &mut Self::Client,
        key: usize,
    ) -> impl Future<Output = Result<(), WriteError>> + Send;
}

/// The version each key was last seen at, shared by a system's clients;
/// each key has one owner per level, so plain atomics suffice.
pub struct Versions {
    slots: Vec<AtomicU64>,
}

impl Versions {
    /// `keys` slots, all [`UNKNOWN`].
    pub fn new(keys: usize) -> Versions {
        Versions {
            slots: (0..keys).map(|_| AtomicU64::new(UNKNOWN)).collect(),
        }
    }

    /// The version of `key` ([`UNKNOWN`] when out of range or never seen).
    pub fn get(&self, key: usize) -> u64 {
        self.slots
            .get(key)
            .map_or(UNKNOWN, |s| s.load(Ordering::Relaxed))
    }

    /// Records `version` for `key`.
    pub fn set(&self, key: usize, version: u64) {
        if let Some(s) = self.slots.get(key) {
            s.store(version, Ordering::Relaxed);
        }
    }
}

/// How many keys a preload writes at a time.
const PRELOAD_TASKS: usize = 64;

/// Creates keys `0..keys` once each, [`PRELOAD_TASKS`] at a time (task `t`
/// writes keys `t`, `t + 64`, ... with `clients[t % clients.len()]`), and
/// records in `versions(system)` the version each got. `create` writes one
/// key with a client it hands back.
///
/// # Errors
/// No client, or a write failed (its key named).
pub async fn preload<S, C, F, Fut>(
    system: &Arc<S>,
    clients: &[C],
    keys: usize,
    versions: fn(&S) -> &Versions,
    create: F,
) -> anyhow::Result<()>
where
    S: Send + Sync + 'static,
    C: Clone + Send + 'static,
    F: Fn(Arc<S>, C, usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(C, u64), WriteError>> + Send,
{
    anyhow::ensure!(!clients.is_empty(), "no client to preload the keys with");
    let mut tasks = Vec::new();
    for t in 0..PRELOAD_TASKS.min(keys) {
        let system = system.clone();
        let mut client = clients[t % clients.len()].clone();
        let create = create.clone();
        tasks.push(tokio::spawn(async move {
            for key in (t..keys).step_by(PRELOAD_TASKS) {
                let (back, version) = create(system.clone(), client, key)
                    .await
                    .with_context(|| format!("preloading key {key}"))?;
                client = back;
                versions(&system).set(key, version);
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await.context("preload task")??;
    }
    Ok(())
}

/// A 256-byte value naming the key (the rest is filler).
pub fn value(key: usize) -> Vec<u8> {
    let mut v = vec![0xABu8; VALUE_BYTES];
    v[..8].copy_from_slice(&(key as u64).to_le_bytes());
    v
}

/// The systems of the comparison, in the order a run measures them.
pub const SYSTEMS: [&str; 5] = ["file", "inproc", "postgres", "etcd", "gateways"];

/// Arguments of `openshell-bench compare`.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// How many times to run the whole comparison.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Directory for `run-<k>.json`, `summary.json`, `summary.md`.
    #[arg(long, default_value = "docs/benchmarks/compare")]
    pub out: PathBuf,
    /// The SVG plot (throughput and p99 per system and concurrency).
    #[arg(long, default_value = "docs/benchmarks/compare.svg")]
    pub plot: PathBuf,
    /// Keys in the key space.
    #[arg(long, default_value_t = 10_000)]
    pub keys: usize,
    /// Concurrency levels (closed-loop clients), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
    pub clients: Vec<usize>,
    /// Warm-up per level, seconds (operations not counted).
    #[arg(long, default_value_t = 2.0)]
    pub warmup_secs: f64,
    /// Measured window per level, seconds.
    #[arg(long, default_value_t = 8.0)]
    pub secs: f64,
    /// Systems to run, comma-separated subset of file, inproc, postgres,
    /// etcd, gateways.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "file,inproc,postgres,etcd,gateways"
    )]
    pub systems: Vec<String>,
    /// Skip (with a printed reason) a system whose binaries are missing
    /// instead of failing.
    #[arg(long)]
    pub skip_missing: bool,
    /// The `openshell-gateway` binary (default: next to this executable).
    #[arg(long)]
    pub gateway_bin: Option<PathBuf>,
    /// PostgreSQL's binary directory (`initdb`, `postgres`).
    #[arg(long, default_value = postgres::DEFAULT_BIN_DIR)]
    pub pg_bin_dir: PathBuf,
    /// The `etcd` binary.
    #[arg(long, default_value = etcd::DEFAULT_BIN)]
    pub etcd_bin: PathBuf,
    /// Where data directories and logs go (default: a fresh tempdir,
    /// removed at the end).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

impl BenchArgs {
    /// The gateway binary: `--gateway-bin`, else `openshell-gateway` beside
    /// the running executable.
    pub fn gateway_bin(&self) -> PathBuf {
        if let Some(b) = &self.gateway_bin {
            return b.clone();
        }
        std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(|d| d.join("openshell-gateway")))
            .unwrap_or_else(|| PathBuf::from("openshell-gateway"))
    }

    /// The driver settings of a level at `clients` concurrency.
    pub fn load(&self, clients: usize) -> LoadOptions {
        LoadOptions {
            clients,
            keys: self.keys,
            warmup: Duration::from_secs_f64(self.warmup_secs),
            window: Duration::from_secs_f64(self.secs),
            record_completions: false,
            seed: 0x5eed ^ clients as u64,
        }
    }

    /// Why `system` cannot run here (a missing binary), if it cannot.
    pub fn missing(&self, system: &str) -> Option<String> {
        let need: Vec<PathBuf> = match system {
            "postgres" => vec![
                self.pg_bin_dir.join("initdb"),
                self.pg_bin_dir.join("postgres"),
            ],
            "etcd" => vec![self.etcd_bin.clone()],
            "gateways" => vec![self.gateway_bin()],
            _ => Vec::new(),
        };
        need.iter().find(|p| !p.is_file()).map(|p| {
            format!(
                "{system}: {} not found (scripts/bench.sh installs and builds everything)",
                p.display()
            )
        })
    }
}

/// Runs every level of `system`, printing each as it completes.
///
/// # Errors
/// When a level cannot connect its clients.
pub async fn run_levels<S: BenchSystem>(
    system: Arc<S>,
    args: &BenchArgs,
) -> anyhow::Result<Vec<LevelResult>> {
    let mut levels = Vec::new();
    for &n in &args.clients {
        let level = run_level(system.clone(), &args.load(n))
            .await
            .with_context(|| format!("{} at {n} clients", system.name()))?;
        println!("  {}", level.line(system.name()));
        levels.push(level);
    }
    Ok(levels)
}

/// Starts `system`, runs its levels and stops it.
///
/// # Errors
/// When the system cannot start or a level cannot run.
async fn measure(
    system: &str,
    args: &BenchArgs,
    dir: &std::path::Path,
) -> anyhow::Result<Vec<LevelResult>> {
    let keys = args.keys;
    let max_clients = args.clients.iter().copied().max().unwrap_or(1);
    match system {
        "file" => file_limit::measure(args, dir).await,
        "inproc" => inproc::measure(args, dir).await,
        "postgres" => {
            let pg = postgres::Postgres::start(&args.pg_bin_dir, dir).await?;
            let sys = Arc::new(pg.system(keys, max_clients).await?);
            let levels = run_levels(sys, args).await;
            pg.stop().await;
            levels
        }
        "etcd" => {
            let cluster = etcd::EtcdCluster::start(&args.etcd_bin, dir).await?;
            let sys = Arc::new(cluster.system(keys).await?);
            let levels = run_levels(sys, args).await;
            cluster.stop();
            levels
        }
        "gateways" => {
            let cluster = gateways::Gateways::start(&args.gateway_bin(), dir).await?;
            let sys = Arc::new(cluster.system(keys).await?);
            let levels = run_levels(sys, args).await;
            cluster.stop();
            levels
        }
        other => anyhow::bail!("unknown system {other:?} (expected one of {SYSTEMS:?})"),
    }
}

/// `openshell-bench compare`: every run, the summary, the plot.
///
/// # Errors
/// When a system fails to start or run, or results cannot be written.
pub async fn run(args: &BenchArgs) -> anyhow::Result<report::Summary> {
    let keep;
    let base = match &args.work_dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            d.clone()
        }
        None => {
            keep = tempfile::Builder::new()
                .prefix("openshell-bench-")
                .tempdir()
                .context("work tempdir")?;
            keep.path().to_path_buf()
        }
    };
    let mut systems = Vec::new();
    for s in &args.systems {
        match args.missing(s) {
            Some(why) if args.skip_missing => println!("skipping {why}"),
            Some(why) => anyhow::bail!(why),
            None => systems.push(s.clone()),
        }
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let mut runs = Vec::new();
    for k in 1..=args.runs {
        let load = report::uptime();
        println!("run {k}/{}: load {load}", args.runs);
        let mut run = report::Run::new(k, args, load);
        for s in &systems {
            let dir = base.join(format!("run-{k}-{s}"));
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            println!(" {s}:");
            let levels = measure(s, args, &dir).await?;
            run.systems.insert(s.clone(), levels);
            // Data directories are large at 64 clients; the next system
            // gets the disk to itself.
            let _ = std::fs::remove_dir_all(&dir);
        }
        run.finish();
        report::write_run(&args.out, &run)?;
        println!("{}", report::run_table(&run));
        runs.push(run);
    }
    let summary = report::Summary::new(&runs);
    report::write_summary(&args.out, &summary, &runs)?;
    plot::draw(&args.plot, &runs)?;
    println!("{}", report::summary_markdown(&summary, &runs));
    Ok(summary)
}

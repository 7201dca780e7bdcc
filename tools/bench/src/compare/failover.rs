//! `openshell-bench failover`: how long writes stop when the leader
//! fails or hands over, under the bench's 8-client load (docs/benchmarks.md,
//! "Failover and leader transfer").
//!
//! One run, on loopback, with the `compare` command's starters and workload
//! (three `openshell-gateway` processes, a 3-member etcd; client `i` on node
//! `i mod 3`, compare-and-set writes over `--keys` keys):
//!
//! - `kill`: `kill -9` the leader (gateways: the node every gateway names;
//!   etcd: the member its `Maintenance/Status` names), wait until the others
//!   agree on a new one, restart it on its data directory, wait until all
//!   agree again; `--kills` times per system;
//! - `pause`: `SIGSTOP` the leader, hold `--pause-ms`, `SIGCONT`, wait until
//!   all agree; `--pauses` times per system;
//! - `transfer` (gateways only, see [`super::transfer`]): the
//!   `ClusterAdmin.TransferLeader` RPC, `--transfers` times.
//!
//! The window of one fault is the longest stretch without an acknowledged
//! write between the last write acknowledged before the fault and the first
//! one acknowledged after the fault is over (a kill: the node restarted and
//! every node agrees on one leader; a stop: resumed and all agree), on the
//! clients' ack timestamps ([`Completions`]). Replies already on their way
//! when the leader stops arrive after it; a window that ended at the first
//! of them measured those stragglers (0.3 ms), not the stall behind them. The JSON (`--out`) keeps every window and
//! their p50/p99/max; `summary` prints the markdown table.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use super::etcd::{EtcdCluster, EtcdMember};
use super::failover_load::{Completions, Load};
use super::gateways::Gateways;
use super::BenchSystem;

/// Arguments of `openshell-bench failover`.
#[derive(Clone, Debug, clap::Args)]
pub struct FailoverArgs {
    /// The release `openshell-gateway` binary.
    #[arg(long, default_value = "target/release/openshell-gateway")]
    pub gateway_bin: PathBuf,
    /// The `etcd` binary (Debian's etcd-server).
    #[arg(long, default_value = "/usr/bin/etcd")]
    pub etcd_bin: PathBuf,
    /// Leave etcd out (gateways only).
    #[arg(long)]
    pub skip_etcd: bool,
    /// Where the JSON goes.
    #[arg(long, default_value = "docs/benchmarks/compare/failover.json")]
    pub out: PathBuf,
    /// Where the processes keep their data and logs (a temporary directory
    /// when absent).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// `kill -9` of the leader, per system.
    #[arg(long, default_value_t = 20)]
    pub kills: usize,
    /// `SIGSTOP` of the leader, per system.
    #[arg(long, default_value_t = 20)]
    pub pauses: usize,
    /// How long a stopped leader stays stopped, ms.
    #[arg(long, default_value_t = 3000)]
    pub pause_ms: u64,
    /// Planned leader transfers (gateways).
    #[arg(long, default_value_t = 20)]
    pub transfers: usize,
    /// Concurrent closed-loop clients.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Keys in the key space.
    #[arg(long, default_value_t = 10_000)]
    pub keys: usize,
    /// Load between two faults (and before the first), ms.
    #[arg(long, default_value_t = 1000)]
    pub settle_ms: u64,
}

/// The windows of one kind of fault on one system.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Windows {
    /// Faults injected.
    pub faults: usize,
    /// Each fault's window without an acknowledged write, ms, in order.
    pub windows_ms: Vec<f64>,
    /// Median window, ms.
    pub p50_ms: f64,
    /// 99th percentile (nearest rank; with 20 faults, the largest), ms.
    pub p99_ms: f64,
    /// Largest window, ms.
    pub max_ms: f64,
    /// Writes acknowledged during the phase.
    pub acked: u64,
    /// Writes that failed during the phase (clients of a dead or stopped
    /// node, writes cut off by the fault).
    pub failed: u64,
}

impl Windows {
    /// The summary of `windows` (ms).
    pub fn of(windows_ms: Vec<f64>, acked: u64, failed: u64) -> Windows {
        let mut sorted = windows_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let rank = |q: f64| {
            if sorted.is_empty() {
                return 0.0;
            }
            let r = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
            sorted[r - 1]
        };
        Windows {
            faults: windows_ms.len(),
            p50_ms: rank(0.5),
            p99_ms: rank(0.99),
            max_ms: sorted.last().copied().unwrap_or(0.0),
            windows_ms,
            acked,
            failed,
        }
    }
}

/// Every window of one run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FailoverReport {
    /// The commit measured (`git rev-parse --short HEAD`), if known.
    pub commit: String,
    /// UTC date and time of the run.
    pub date: String,
    /// `uptime` before the run (the machine's load).
    pub load_before: String,
    /// `uptime` after the run.
    pub load_after: String,
    /// Concurrent clients.
    pub clients: usize,
    /// Keys.
    pub keys: usize,
    /// How long a stopped leader stayed stopped, ms.
    pub pause_ms: u64,
    /// Gateways: `kill -9` of the leader.
    pub gateways_kill: Windows,
    /// Gateways: `SIGSTOP` of the leader.
    pub gateways_pause: Windows,
    /// Gateways: planned leader transfer.
    pub gateways_transfer: Windows,
    /// etcd: `kill -9` of the leader (absent with `--skip-etcd`).
    pub etcd_kill: Option<Windows>,
    /// etcd: `SIGSTOP` of the leader.
    pub etcd_pause: Option<Windows>,
}

impl FailoverReport {
    /// The markdown table of docs/benchmarks.md.
    pub fn table(&self) -> String {
        let row = |system: &str, fault: &str, w: &Windows| {
            format!(
                "| {system} | {fault} | {} | {:.0} | {:.0} | {:.0} | {} | {} |\n",
                w.faults, w.p50_ms, w.p99_ms, w.max_ms, w.acked, w.failed
            )
        };
        let mut s = String::from(
            "| system | fault | n | p50 ms | p99 ms | max ms | writes acked | writes failed |\n\
             | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        s.push_str(&row("gateways", "kill -9 leader", &self.gateways_kill));
        if let Some(w) = &self.etcd_kill {
            s.push_str(&row("etcd", "kill -9 leader", w));
        }
        s.push_str(&row(
            "gateways",
            &format!("SIGSTOP leader {} ms", self.pause_ms),
            &self.gateways_pause,
        ));
        if let Some(w) = &self.etcd_pause {
            s.push_str(&row(
                "etcd",
                &format!("SIGSTOP leader {} ms", self.pause_ms),
                w,
            ));
        }
        s.push_str(&row("gateways", "transfer-leader", &self.gateways_transfer));
        s
    }
}

/// The windows of the faults `spans` (since the load's start) in `done`.
///
/// # Errors
/// When a fault has no acknowledged write after it.
pub fn windows_of(done: &Completions, spans: &[(Duration, Duration)]) -> anyhow::Result<Windows> {
    let mut ms = Vec::with_capacity(spans.len());
    for (k, (from, to)) in spans.iter().enumerate() {
        let w = done
            .window(*from, *to)
            .with_context(|| format!("fault {k}: no write acknowledged around it"))?;
        ms.push(w.as_secs_f64() * 1e3);
    }
    Ok(Windows::of(ms, done.at.len() as u64, done.failed))
}

/// `kill -9` (or, with `pause`, `SIGSTOP` for that long) of the gateways'
/// leader `n` times under `load`; returns each fault's span.
///
/// # Errors
/// When no leader is agreed on, a node cannot restart or writes do not
/// resume.
pub async fn gateway_faults(
    gateways: &Gateways,
    load: &Load,
    n: usize,
    pause: Option<Duration>,
    settle: Duration,
) -> anyhow::Result<Vec<(Duration, Duration)>> {
    let mut spans = Vec::with_capacity(n);
    for k in 0..n {
        tokio::time::sleep(settle).await;
        load.wait_progress(Duration::from_secs(30)).await?;
        let leader = gateways.wait_leader(Duration::from_secs(30)).await?;
        let node = gateways.node(leader)?;
        let at = load.now();
        match pause {
            None => node.kill9(),
            Some(hold) => {
                node.signal(libc::SIGSTOP)?;
                tokio::time::sleep(hold).await;
                node.signal(libc::SIGCONT)?;
            }
        }
        if pause.is_none() {
            load.wait_progress(Duration::from_secs(30)).await?;
            gateways.start_node(leader)?;
        }
        let now = gateways.wait_leader(Duration::from_secs(60)).await?;
        spans.push((at, load.now()));
        tracing::info!(k, leader, now, "gateway fault done");
    }
    Ok(spans)
}

/// The etcd member that leads, as the members' `Maintenance/Status` says
/// (1-based index into [`EtcdCluster::members`]).
///
/// # Errors
/// When no running member names a leader within `within`.
pub async fn etcd_leader(etcd: &EtcdCluster, within: Duration) -> anyhow::Result<usize> {
    let deadline = Instant::now() + within;
    loop {
        // (index, the leader it names, its own member id) of every member
        // that answers.
        let mut views = Vec::new();
        for (i, m) in etcd.members.iter().enumerate() {
            if m.pid().is_some() {
                if let Ok((leader, me)) = etcd_status(m).await {
                    views.push((i + 1, leader, me));
                }
            }
        }
        let running = etcd.members.iter().filter(|m| m.pid().is_some()).count();
        if let Some(&(_, leader, _)) = views.first() {
            let agreed = views.len() == running && views.iter().all(|v| v.1 == leader);
            if let Some(&(i, _, _)) = views
                .iter()
                .find(|v| agreed && leader != 0 && v.2 == leader)
            {
                return Ok(i);
            }
        }
        if Instant::now() > deadline {
            bail!("etcd: no agreed leader within {within:?}; views {views:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `kill -9` (or `SIGSTOP` for `pause`) of etcd's leader `n` times under
/// `load`; returns each fault's span.
///
/// # Errors
/// As [`gateway_faults`].
pub async fn etcd_faults(
    etcd: &EtcdCluster,
    load: &Load,
    n: usize,
    pause: Option<Duration>,
    settle: Duration,
) -> anyhow::Result<Vec<(Duration, Duration)>> {
    let mut spans = Vec::with_capacity(n);
    for k in 0..n {
        tokio::time::sleep(settle).await;
        load.wait_progress(Duration::from_secs(30)).await?;
        let leader = etcd_leader(etcd, Duration::from_secs(30)).await?;
        let member = etcd.member(leader)?;
        let at = load.now();
        match pause {
            None => member.kill9(),
            Some(hold) => {
                member.signal(libc::SIGSTOP)?;
                tokio::time::sleep(hold).await;
                member.signal(libc::SIGCONT)?;
            }
        }
        if pause.is_none() {
            load.wait_progress(Duration::from_secs(30)).await?;
            etcd.start_member(leader)?;
        }
        etcd.wait_ready(Duration::from_secs(60)).await?;
        let now = etcd_leader(etcd, Duration::from_secs(60)).await?;
        spans.push((at, load.now()));
        tracing::info!(k, leader, now, "etcd fault done");
    }
    Ok(spans)
}

/// One fault phase on a running system: the load, `faults` run under it,
/// then a last settle so the last fault's window can close.
async fn phase<S, F, Fut>(system: Arc<S>, args: &FailoverArgs, faults: F) -> anyhow::Result<Windows>
where
    S: BenchSystem,
    F: FnOnce(Arc<Load>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Vec<(Duration, Duration)>>>,
{
    let load = Arc::new(Load::start(system, args.clients, args.keys).await?);
    let spans = faults(load.clone()).await;
    tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
    let load = Arc::into_inner(load).context("a fault loop still holds the load")?;
    let done = load.finish().await?;
    windows_of(&done, &spans?)
}

/// `uptime`'s output (the machine's load), or why not.
fn uptime() -> String {
    std::process::Command::new("uptime")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("uptime: {e}"))
}

/// The short commit of the working directory, if it is a git checkout.
fn commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Runs every phase (see the module doc), writes the JSON to `args.out`
/// and returns the report.
///
/// # Errors
/// When a system cannot start, a fault cannot be injected or undone, or
/// writes do not resume after a fault.
pub async fn run(args: &FailoverArgs) -> anyhow::Result<FailoverReport> {
    let dir = match &args.work_dir {
        Some(d) => d.clone(),
        None => tempfile_dir()?,
    };
    let settle = Duration::from_millis(args.settle_ms);
    let hold = Duration::from_millis(args.pause_ms);
    let mut report = FailoverReport {
        commit: commit(),
        date: date(),
        load_before: uptime(),
        clients: args.clients,
        keys: args.keys,
        pause_ms: args.pause_ms,
        ..FailoverReport::default()
    };

    let gateways = Arc::new(Gateways::start(&args.gateway_bin, &dir.join("gateways")).await?);
    let system = Arc::new(gateways.system(args.keys).await?);
    let (g, n) = (gateways.clone(), args.kills);
    report.gateways_kill = phase(system.clone(), args, |load| async move {
        gateway_faults(&g, &load, n, None, settle).await
    })
    .await
    .context("gateways: kill -9 of the leader")?;
    println!("gateways kill -9: {:?}", report.gateways_kill.windows_ms);
    let (g, n) = (gateways.clone(), args.pauses);
    report.gateways_pause = phase(system.clone(), args, |load| async move {
        gateway_faults(&g, &load, n, Some(hold), settle).await
    })
    .await
    .context("gateways: SIGSTOP of the leader")?;
    println!("gateways SIGSTOP: {:?}", report.gateways_pause.windows_ms);
    let (g, n) = (gateways.clone(), args.transfers);
    report.gateways_transfer = phase(system, args, |load| async move {
        super::transfer::gateway_transfers(&g, &load, n, settle).await
    })
    .await
    .context("gateways: transfer-leader")?;
    println!(
        "gateways transfer: {:?}",
        report.gateways_transfer.windows_ms
    );
    gateways.stop();
    drop(gateways);

    if !args.skip_etcd {
        let etcd = Arc::new(EtcdCluster::start(&args.etcd_bin, &dir.join("etcd")).await?);
        let system = Arc::new(etcd.system(args.keys).await?);
        let (e, n) = (etcd.clone(), args.kills);
        let kill = phase(system.clone(), args, |load| async move {
            etcd_faults(&e, &load, n, None, settle).await
        })
        .await
        .context("etcd: kill -9 of the leader")?;
        println!("etcd kill -9: {:?}", kill.windows_ms);
        let (e, n) = (etcd.clone(), args.pauses);
        let pause = phase(system, args, |load| async move {
            etcd_faults(&e, &load, n, Some(hold), settle).await
        })
        .await
        .context("etcd: SIGSTOP of the leader")?;
        println!("etcd SIGSTOP: {:?}", pause.windows_ms);
        report.etcd_kill = Some(kill);
        report.etcd_pause = Some(pause);
        etcd.stop();
    }
    report.load_after = uptime();
    if let Some(parent) = args.out.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let json = serde_json::to_string_pretty(&report)?;
    std::fs::write(&args.out, json + "\n")
        .with_context(|| format!("writing {}", args.out.display()))?;
    println!("{}", report.table());
    Ok(report)
}

/// A fresh directory under the system's temporary directory.
fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("osj-failover-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The UTC date and time (`date -u`), or empty.
fn date() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// `etcdserverpb.StatusRequest` (no fields).
#[derive(Clone, PartialEq, prost::Message)]
struct EtcdStatusRequest {}

/// The fields of `etcdserverpb.StatusResponse` used here (numbers as in
/// etcd 3.4's `rpc.proto`).
#[derive(Clone, PartialEq, prost::Message)]
struct EtcdStatusResponse {
    #[prost(message, optional, tag = "1")]
    header: Option<super::etcd_wire::ResponseHeader>,
    /// The member id of the leader (0: none known).
    #[prost(uint64, tag = "4")]
    leader: u64,
}

/// `(leader, member_id)` from one member's `Maintenance/Status`.
async fn etcd_status(m: &EtcdMember) -> anyhow::Result<(u64, u64)> {
    let mut grpc = tonic::client::Grpc::new(m.channel().await?);
    grpc.ready().await.context("etcd channel not ready")?;
    let codec = tonic_prost::ProstCodec::<EtcdStatusRequest, EtcdStatusResponse>::default();
    let status = grpc
        .unary(
            tonic::Request::new(EtcdStatusRequest {}),
            tonic::codegen::http::uri::PathAndQuery::from_static(
                "/etcdserverpb.Maintenance/Status",
            ),
            codec,
        )
        .await?
        .into_inner();
    let me = status.header.map_or(0, |h| h.member_id);
    Ok((status.leader, me))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Completions, Windows};

    fn ms(v: &[u64]) -> Completions {
        Completions {
            at: v.iter().map(|m| Duration::from_millis(*m)).collect(),
            failed: 0,
        }
    }

    #[test]
    fn a_kill_window_runs_from_the_last_ack_before_to_the_first_after() {
        let done = ms(&[10, 20, 30, 900, 910]);
        let at = Duration::from_millis(35);
        assert_eq!(done.window(at, at), Some(Duration::from_millis(870)));
    }

    #[test]
    fn a_transfer_window_is_the_longest_gap_inside_the_call() {
        // The call runs 100..500 ms; writes go on until 300, pause, resume
        // at 340 and the call answers at 500.
        let done = ms(&[90, 150, 300, 340, 400, 510]);
        let w = done.window(Duration::from_millis(100), Duration::from_millis(500));
        assert_eq!(w, Some(Duration::from_millis(150)));
    }

    #[test]
    fn no_ack_after_the_fault_is_no_window() {
        let done = ms(&[10, 20]);
        let at = Duration::from_millis(30);
        assert_eq!(done.window(at, at), None);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let w = Windows::of((1..=20).map(f64::from).collect(), 0, 0);
        assert_eq!(
            (w.p50_ms, w.p99_ms, w.max_ms, w.faults),
            (10.0, 20.0, 20.0, 20)
        );
    }
}

//! The pool workload: sandboxes launched, read and deleted through random
//! gateways, pool members attached to random gateways, and pool faults
//! (supervisor pause / kill, drains), checked against the invariants I1–I8
//! ([`crate::checker::pool`]).
//!
//! Members are real `openshell-supervisor` processes starting real
//! `openshell-sandbox-runtime` processes (`--members process`, the default;
//! [`crate::members::process`]), additionally checked for workload continuity
//! ([`crate::checker::workload`]: one workload per sandbox, never
//! restarted by a takeover, drain or supervisor kill); or scripted
//! supervisors (`--members scripted`, [`crate::members::scripted`]), tokio tasks
//! that record every grant, ack and report in the history, which the
//! checkers then also hold to I1–I3 at the protocol level.
//!
//! # Layout
//!
//! - `calls`: one call per client `f` and the client loop;
//! - `faults`: the pool-fault loop;
//! - `member`: a pool member of either kind.
//!
//! The values below are typed in [`crate::ops::pool`].
//!
//! # `f` names (HISTORY.md)
//!
//! Every pool event's `key` is the sandbox id (`sb<n>`), or the member id
//! (`s<n>`) for `join`; `node` is the gateway (`n<i>`) the call went to.
//! A *sandbox view* is `{"sandbox", "generation", "phase", "owner",
//! "incarnation", "term", "credential_epoch", "acknowledged", "observed"}` (the
//! gateway's `Sandbox` message; `observed` is the fenced observed status).
//!
//! Clients (`process` = client number):
//!
//! * `launch`: `PoolAdmin.CreateSandbox`. Invoke `{"sandbox", "launch_id"}`
//!   (both unique, never reused); `ok` the sandbox view; `fail` with
//!   `"refused": true` when the launch was refused for capacity
//!   (`RESOURCE_EXHAUSTED`: it must leave nothing behind, I5), or another
//!   certain failure (`ALREADY_EXISTS`, `INVALID_ARGUMENT`); `info` otherwise.
//! * `delete`: `PoolAdmin.DeleteSandbox`. Invoke `{"sandbox"}`; `ok` the view
//!   (phase `deleted`); `fail` on `NOT_FOUND` / `FAILED_PRECONDITION`.
//! * `get`: `PoolAdmin.GetSandbox`, linearizable. Invoke `{"sandbox"}`; `ok`
//!   the view, or `{"sandbox", "absent": true}`.
//! * `status`: `PoolAdmin.GetSupervisorPoolStatus`, linearizable. Invoke
//!   `null`; `ok` `{"now_tick", "applied_index", "members": [{"id",
//!   "incarnation", "state", "capacity", "used", "ticks_since_heartbeat"}],
//!   "sandboxes": [views], "operations": [{"id", "kind", "member",
//!   "phase"}]}`. The run's last `status` (process `final`) is the final
//!   state the checker uses.
//!
//! Operator (its own process number): `drain` (`StartSupervisorPool
//! Operation` drain of a member, invoke `{"op", "member"}`, `ok` the
//! operation) and `cancel` (`CancelSupervisorPoolOperation` of that drain a
//! few seconds later, same value).
//!
//! Scripted supervisors only (see [`crate::members::scripted`]; process members
//! leave no events of their own): `join` (invoke `{"member",
//! "known_incarnation", "process_id", "capacity"}`, `ok` adds the
//! `incarnation` the pool assigned and `gateway_node_id`), `grant` (an
//! assignment streamed to it, recorded as an invoke/ok pair at receipt:
//! `{"sandbox", "generation", "term", "credential_epoch", "acknowledged", "phase",
//! "member", "incarnation", "log_index", "grant_bytes"}`), `ack` (`TermAck`:
//! `{"sandbox", "generation", "term", "credential_epoch", "member", "incarnation"}`,
//! `ok` with `log_index` once a snapshot shows the term acknowledged),
//! `report` (`SandboxReport`, status `r:<member>:<incarnation>:<term>:<seq>`,
//! always `info`).
//!
//! Pool faults (`process` `"nemesis"`, `type` `info`, value text starting
//! with the member id): `pause-supervisor` / `resume-supervisor` (SIGSTOP /
//! SIGCONT of a process; for a scripted one no statuses, acks, reports or
//! stream reads: shorter than the heartbeat TTL, so a correct gateway never
//! takes it over), `kill-supervisor` / `restart-supervisor` (`kill -9` of
//! the process, its runtimes left running; or the task and its stream
//! dropped: it expires after the TTL and its sandboxes are taken over; it
//! comes back as a new incarnation). A scripted supervisor whose record
//! reads `expired` is restarted too (`restart-supervisor ... (expired)`);
//! a process re-joins by itself. A process that exits by itself is
//! recorded (`supervisor-exited`), restarted, and reported by the
//! `workload-continuity` checker. The gateway nemeses of [`crate::nemesis`]
//! run alongside.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::checker::kept::HealthyWorkloadsKept;
use crate::checker::pool::{pool_checkers, PoolFinal};
use crate::checker::workload::WorkloadContinuity;
use crate::checker::Checker;
use crate::cluster::Cluster;
use crate::history::{Processes, Recorder};
use crate::members::process::{MemberHost, ProcessSupervisor};
use crate::members::runtime_log::{keep_logs, runtime_logs};
use crate::members::scripted::ScriptedSupervisor;
use calls::Call;
use local_cluster::gateway::{GatewaySection, SupervisorPoolSection};
use member::PoolMember;

mod calls;
mod faults;
mod member;

/// What the pool members are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberKind {
    /// `openshell-supervisor` processes starting `openshell-sandbox-runtime`
    /// processes.
    Process,
    /// Scripted supervisors in the harness (tokio tasks on the real stream
    /// protocol) that record grants, acks and reports.
    Scripted,
}

impl std::str::FromStr for MemberKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "process" => Ok(MemberKind::Process),
            "scripted" => Ok(MemberKind::Scripted),
            other => Err(format!("unknown member kind {other:?} (process, scripted)")),
        }
    }
}

/// Pool workload settings.
#[derive(Clone, Debug)]
pub struct PoolOptions {
    /// Concurrent clients (launch / delete / get / status).
    pub concurrency: usize,
    /// What the members are.
    pub members: MemberKind,
    /// `openshell-supervisor` and `openshell-sandbox-runtime` binaries
    /// (default: next to the gateway binary).
    pub supervisor_bin: Option<PathBuf>,
    /// See `supervisor_bin`.
    pub runtime_bin: Option<PathBuf>,
    /// Pool members (supervisors).
    pub supervisors: usize,
    /// Slots per supervisor.
    pub capacity: u32,
    /// Pause between one client's operations, ms (uniform).
    pub delay_ms: (u64, u64),
    /// Quiet time between pool faults, ms (uniform).
    pub fault_every_ms: (u64, u64),
    /// How long a paused supervisor stays paused, ms (uniform). Keep it
    /// below the heartbeat TTL (a correct gateway must not take it over).
    pub pause_ms: (u64, u64),
    /// How long a killed supervisor stays down, ms (uniform).
    pub down_ms: (u64, u64),
    /// How long a drain runs before it is cancelled, ms (uniform).
    pub drain_ms: (u64, u64),
    /// Enabled pool faults: `pause`, `kill`, `drain`.
    pub faults: Vec<String>,
    /// Gateway `--tick-interval-ms`.
    pub tick_ms: u64,
    /// Gateway `--heartbeat-ttl-ms`.
    pub heartbeat_ttl_ms: u64,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            concurrency: 4,
            members: MemberKind::Process,
            supervisor_bin: None,
            runtime_bin: None,
            supervisors: 4,
            capacity: 3,
            delay_ms: (30, 120),
            fault_every_ms: (2000, 4000),
            pause_ms: (3000, 3600),
            down_ms: (5000, 8000),
            drain_ms: (2000, 4000),
            faults: vec!["pause".into(), "kill".into(), "drain".into()],
            tick_ms: 250,
            heartbeat_ttl_ms: 4000,
        }
    }
}

impl PoolOptions {
    /// The gateway settings this workload needs: its pool timing. The
    /// status interval is the tick, as it was when the faults' durations
    /// were chosen (pauses just below the TTL, and t60's fault build
    /// calling a member dead at half of it): the default is now a quarter
    /// of the TTL (1 s at the 4 s TTL here), under which a paused member
    /// stays in heartbeat batches 2.5 s instead of 0.6 s.
    pub fn gateway_config(&self) -> GatewaySection {
        GatewaySection {
            supervisor_pool: Some(SupervisorPoolSection {
                tick_interval_ms: Some(self.tick_ms),
                heartbeat_ttl_ms: Some(self.heartbeat_ttl_ms),
                status_interval_ms: Some(self.tick_ms),
                ..SupervisorPoolSection::default()
            }),
            ..GatewaySection::default()
        }
    }
}

/// Before the gateways start: with process members, creates the members
/// namespace and gives every gateway the process driver that launches
/// runtimes into it ([`MemberHost::sandbox_driver`]). Scripted members need
/// no runtime (they acknowledge terms themselves): their gateways keep the
/// default `--sandbox-driver none`.
///
/// # Errors
/// A missing binary; the namespace cannot be made.
pub fn prepare(options: &PoolOptions, cluster: &mut Cluster) -> anyhow::Result<()> {
    if options.members != MemberKind::Process {
        return Ok(());
    }
    let (ns, ip) = cluster.net.add_members_namespace()?;
    let host = member_host(options, cluster, ns, ip);
    host.check()?;
    cluster.options.config.sandbox_driver = Some(host.sandbox_driver());
    Ok(())
}

/// Where process members run: the members namespace `ns` at `ip`.
fn member_host(options: &PoolOptions, cluster: &Cluster, ns: String, ip: String) -> MemberHost {
    let beside = |name: &str| cluster.options.bin.with_file_name(name);
    MemberHost {
        ns,
        ip,
        gateways: cluster.nodes.iter().map(|n| n.addr.clone()).collect(),
        supervisor_bin: options
            .supervisor_bin
            .clone()
            .unwrap_or_else(|| beside("openshell-supervisor")),
        runtime_bin: options
            .runtime_bin
            .clone()
            .unwrap_or_else(|| beside("openshell-sandbox-runtime")),
        dir: cluster.dir.clone(),
        security: cluster
            .credentials
            .as_ref()
            .map(crate::security::Credentials::member_security),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn short(status: &tonic::Status) -> String {
    let mut m = format!("{:?}: {}", status.code(), status.message());
    m.truncate(240);
    m
}

struct Shared {
    cluster: Arc<Cluster>,
    history: Recorder,
    processes: Processes,
    options: PoolOptions,
    supervisors: Vec<PoolMember>,
    /// Process members only: where they run.
    host: Option<Arc<MemberHost>>,
    /// Process members that exited by themselves: (member, what).
    exits: Mutex<Vec<String>>,
    next_sandbox: AtomicU64,
    /// Sandboxes launched `ok` and not deleted `ok` (targets of delete/get).
    live: Mutex<BTreeSet<String>>,
    /// Every sandbox id ever invoked.
    used: Mutex<BTreeSet<String>>,
    /// Members (and incarnations) the last status read showed expired.
    expired: Mutex<BTreeMap<String, u64>>,
    stop: AtomicBool,
}

/// A running pool workload.
pub struct PoolRunning {
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Process members: keeps the runtimes' logs every 100 ms until the
    /// final reads.
    log_keeper: Option<tokio::task::JoinHandle<()>>,
}

/// The member ids of the run's supervisors: `s1` .. `s<supervisors>`.
pub fn member_ids(options: &PoolOptions) -> Vec<String> {
    (1..=options.supervisors.max(1))
        .map(|i| format!("s{i}"))
        .collect()
}

/// Starts supervisors, clients and the pool-fault loop.
///
/// # Errors
/// Process members: a missing binary, the members namespace, a spawn.
pub fn start(
    options: &PoolOptions,
    cluster: Arc<Cluster>,
    history: Recorder,
    seed: u64,
) -> anyhow::Result<PoolRunning> {
    let processes = Processes(Arc::new(AtomicU64::new(0)));
    let gateways: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
    let names = member_ids(options);
    let capacity = options.capacity.max(1);
    let security = cluster
        .credentials
        .as_ref()
        .map(crate::security::Credentials::member_security);
    let (supervisors, host) = match options.members {
        MemberKind::Scripted => {
            let members: Vec<PoolMember> = names
                .iter()
                .map(|m| {
                    PoolMember::Scripted(ScriptedSupervisor::new(
                        m,
                        capacity,
                        gateways.clone(),
                        history.clone(),
                        processes.clone(),
                        security.clone(),
                    ))
                })
                .collect();
            (members, None)
        }
        MemberKind::Process => {
            // The namespace exists since [`prepare`].
            let (ns, ip) = cluster.net.members_namespace();
            let host = Arc::new(member_host(options, &cluster, ns, ip));
            host.check()?;
            let members: Vec<PoolMember> = names
                .iter()
                .map(|m| PoolMember::Process(ProcessSupervisor::new(m, capacity, host.clone())))
                .collect();
            (members, Some(host))
        }
    };
    for (i, s) in supervisors.iter().enumerate() {
        s.restart(seed.wrapping_add(i as u64))?;
    }
    let shared = Arc::new(Shared {
        cluster,
        history,
        processes,
        options: options.clone(),
        supervisors,
        host,
        exits: Mutex::new(Vec::new()),
        next_sandbox: AtomicU64::new(1),
        live: Mutex::new(BTreeSet::new()),
        used: Mutex::new(BTreeSet::new()),
        expired: Mutex::new(BTreeMap::new()),
        stop: AtomicBool::new(false),
    });
    let mut tasks: Vec<tokio::task::JoinHandle<()>> = (0..options.concurrency.max(1))
        .map(|w| tokio::spawn(shared.clone().client(w, seed)))
        .collect();
    tasks.push(tokio::spawn(shared.clone().faults(seed)));
    let log_keeper = shared.host.clone().map(|host| {
        tokio::spawn(async move {
            loop {
                let h = host.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    keep_logs(&h.runtime_dir(), &h.runtime_logs_dir());
                })
                .await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    });
    Ok(PoolRunning {
        shared,
        tasks,
        log_keeper,
    })
}

impl PoolRunning {
    /// Stops clients and pool faults (supervisors keep running, resumed).
    pub async fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.tasks.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
        }
        for s in &self.shared.supervisors {
            s.resume();
        }
    }

    /// The final linearizable status read (recorded as `status`), then the
    /// supervisors are stopped; returns the pool checkers.
    pub async fn final_reads(&mut self, within: Duration) -> Vec<Box<dyn Checker>> {
        let s = &self.shared;
        // Let acks and takeovers of the last faults settle.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let deadline = Instant::now() + within;
        let n = s.cluster.nodes.len();
        let mut process = s.processes.fresh();
        let mut final_index = None;
        let mut attempt = 0usize;
        while Instant::now() < deadline {
            let node = 1 + attempt % n;
            attempt += 1;
            let done = s.op(process, &Call::Status, node).await;
            process = done.next;
            if done.ok.is_some() {
                final_index = Some(done.index);
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        for sup in &s.supervisors {
            sup.kill();
        }
        let mut checkers = pool_checkers(PoolFinal {
            final_status: final_index,
        });
        if let Some(keeper) = self.log_keeper.take() {
            keeper.abort();
        }
        if let Some(host) = &s.host {
            keep_logs(&host.runtime_dir(), &host.runtime_logs_dir());
            let runtimes = runtime_logs(&host.runtime_logs_dir());
            checkers.push(Box::new(HealthyWorkloadsKept {
                runtimes: runtimes.clone(),
                history_started_at: Some(s.history.started_at()),
            }));
            checkers.push(Box::new(WorkloadContinuity {
                runtimes,
                exits: lock(&s.exits).clone(),
            }));
        }
        checkers
    }
}

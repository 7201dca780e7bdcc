//! The pool workload: sandboxes launched, read and deleted through random
//! gateways, pool members attached to random gateways, and pool faults
//! (supervisor pause / kill, drains), checked against the invariants I1–I8
//! ([`crate::checker::pool`]).
//!
//! Members are real `openshell-supervisor` processes starting real
//! `openshell-sandbox-runtime` processes (`--members process`, the default;
//! [`super::members`]), additionally checked for workload continuity
//! ([`crate::checker::workload`]: one workload per sandbox, never
//! restarted by a takeover, drain or supervisor kill); or scripted
//! supervisors (`--members scripted`, [`super::supervisor`]), tokio tasks
//! that record every grant, ack and report in the history, which the
//! checkers then also hold to I1–I3 at the protocol level.
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
//! Scripted supervisors only (see [`super::supervisor`]; process members
//! leave no events of their own): `join` (invoke `{"member",
//! "incarnation", "capacity"}`, `ok` adds `gateway_node_id`), `grant` (an
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

use proto::pool_admin::{
    start_supervisor_pool_operation_request, CancelSupervisorPoolOperationRequest,
    CreateSandboxRequest, DeleteSandboxRequest, GetSandboxRequest, GetSupervisorPoolStatusRequest,
    Sandbox, StartSupervisorPoolOperationRequest, SupervisorPoolStatus,
};
use proto::pool_types::{MemberState, SandboxPhase};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::members::{runtime_logs, MemberHost, ProcessSupervisor};
use super::supervisor::{Processes, Supervisor};
use crate::checker::pool::{pool_checkers, PoolFinal};
use crate::checker::workload::WorkloadContinuity;
use crate::checker::Checker;
use crate::cluster::Cluster;
use crate::history::{EventSpec, OpType, Process, Recorder};

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
    /// The gateway arguments this workload needs.
    pub fn gateway_args(&self) -> Vec<String> {
        vec![
            "--tick-interval-ms".into(),
            self.tick_ms.to_string(),
            "--heartbeat-ttl-ms".into(),
            self.heartbeat_ttl_ms.to_string(),
        ]
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

/// The JSON view of a sandbox.
pub fn sandbox_value(s: &Sandbox) -> Value {
    json!({
        "sandbox": s.id, "generation": s.generation, "phase": SandboxPhase::name_of(s.phase),
        "owner": s.owner, "incarnation": s.owner_incarnation, "term": s.term,
        "credential_epoch": s.credential_epoch,
        "acknowledged": s.acknowledged, "observed": s.observed_status,
    })
}

/// The JSON view of a pool status.
pub fn status_value(s: &SupervisorPoolStatus) -> Value {
    json!({
        "now_tick": s.now_tick,
        "applied_index": s.applied_index,
        "members": s.members.iter().map(|m| json!({
            "id": m.id, "incarnation": m.incarnation, "state": MemberState::name_of(m.state), "capacity": m.capacity,
            "used": m.used, "ticks_since_heartbeat": m.ticks_since_heartbeat,
        })).collect::<Vec<_>>(),
        "sandboxes": s.sandboxes.iter().map(sandbox_value).collect::<Vec<_>>(),
        "operations": s.operations.iter().map(|o| json!({
            "id": o.id, "kind": o.kind, "member": o.member, "phase": o.phase,
        })).collect::<Vec<_>>(),
    })
}

/// One pool member of the workload.
pub enum PoolMember {
    /// An `openshell-supervisor` process.
    Process(ProcessSupervisor),
    /// A scripted supervisor.
    Scripted(Supervisor),
}

impl PoolMember {
    fn member(&self) -> &str {
        match self {
            PoolMember::Process(p) => p.member(),
            PoolMember::Scripted(s) => s.member(),
        }
    }

    fn is_alive(&self) -> bool {
        match self {
            PoolMember::Process(p) => p.is_alive(),
            PoolMember::Scripted(s) => s.is_alive(),
        }
    }

    /// For nemesis messages: `incarnation N` or `pid N`.
    fn describe(&self) -> String {
        match self {
            PoolMember::Process(p) => format!(
                "pid {}",
                p.pid().map(|p| p.to_string()).unwrap_or("-".into())
            ),
            PoolMember::Scripted(s) => format!("incarnation {}", s.incarnation()),
        }
    }

    fn pause(&self) {
        match self {
            PoolMember::Process(p) => p.pause(),
            PoolMember::Scripted(s) => s.pause(),
        }
    }

    fn resume(&self) {
        match self {
            PoolMember::Process(p) => p.resume(),
            PoolMember::Scripted(s) => s.resume(),
        }
    }

    fn kill(&self) {
        match self {
            PoolMember::Process(p) => p.kill(),
            PoolMember::Scripted(s) => s.kill(),
        }
    }

    /// Starts a new incarnation.
    fn restart(&self, seed: u64) -> anyhow::Result<()> {
        match self {
            PoolMember::Process(p) => p.restart(),
            PoolMember::Scripted(s) => {
                s.restart(seed);
                Ok(())
            }
        }
    }
}

/// How one op completed.
struct Done {
    /// The process number to use next (a fresh one after `info`).
    next: u64,
    /// The `ok` value.
    ok: Option<Value>,
    /// The `fail` error.
    fail: Option<String>,
    /// Index of the completion event.
    index: u64,
}

enum Outcome {
    Ok(Value),
    Fail(Value, String),
    Info(String),
}

/// How a call that changes state ended: `ok` with its view; a certain
/// failure (`fail`, nothing applied) for the `certain` codes; otherwise
/// unknown (`info`: it may have been applied).
fn write_outcome(
    result: Result<Value, tonic::Status>,
    value: &Value,
    certain: &[tonic::Code],
) -> Outcome {
    match result {
        Ok(v) => Outcome::Ok(v),
        Err(s) if certain.contains(&s.code()) => Outcome::Fail(value.clone(), short(&s)),
        Err(s) => Outcome::Info(short(&s)),
    }
}

/// The JSON view of a pool operation (`drain` / `cancel` results).
fn operation_value(o: &proto::pool_admin::SupervisorPoolOperation) -> Value {
    json!({"op": o.id, "member": o.member, "phase": o.phase})
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

impl Shared {
    #[allow(clippy::too_many_arguments)]
    fn spec(
        &self,
        kind: OpType,
        process: u64,
        f: &str,
        key: Option<String>,
        value: Value,
        node: usize,
        error: Option<String>,
    ) -> EventSpec {
        EventSpec {
            kind,
            process: Process::Client(process),
            f: f.to_string(),
            key,
            value,
            node: Some(format!("n{node}")),
            error,
        }
    }

    /// Runs one op: invoke, call, complete.
    async fn op(
        &self,
        process: u64,
        f: &str,
        key: Option<String>,
        value: Value,
        node: usize,
    ) -> Done {
        self.history.record(self.spec(
            OpType::Invoke,
            process,
            f,
            key.clone(),
            value.clone(),
            node,
            None,
        ));
        let outcome = self.call(f, key.as_deref(), &value, node).await;
        match outcome {
            Outcome::Ok(v) => {
                let e = self.history.record(self.spec(
                    OpType::Ok,
                    process,
                    f,
                    key,
                    v.clone(),
                    node,
                    None,
                ));
                Done {
                    next: process,
                    ok: Some(v),
                    fail: None,
                    index: e.index,
                }
            }
            Outcome::Fail(v, err) => {
                let e = self.history.record(self.spec(
                    OpType::Fail,
                    process,
                    f,
                    key,
                    v,
                    node,
                    Some(err.clone()),
                ));
                Done {
                    next: process,
                    ok: None,
                    fail: Some(err),
                    index: e.index,
                }
            }
            Outcome::Info(err) => {
                let e = self.history.record(self.spec(
                    OpType::Info,
                    process,
                    f,
                    key,
                    value,
                    node,
                    Some(err),
                ));
                Done {
                    next: self.processes.fresh(),
                    ok: None,
                    fail: None,
                    index: e.index,
                }
            }
        }
    }

    async fn call(&self, f: &str, key: Option<&str>, value: &Value, node: usize) -> Outcome {
        let Ok(n) = self.cluster.node(node) else {
            return Outcome::Fail(value.clone(), format!("no node {node}"));
        };
        let mut pool = n.pool();
        let key = key.unwrap_or_default().to_string();
        match f {
            "launch" => {
                let launch_id = value["launch_id"].as_str().unwrap_or_default().to_string();
                match pool
                    .create_sandbox(CreateSandboxRequest {
                        sandbox_id: key.clone(),
                        launch_id,
                        material_ref: format!("material-{key}"),
                    })
                    .await
                {
                    Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                        let mut v = value.clone();
                        v["refused"] = json!(true);
                        Outcome::Fail(v, short(&s))
                    }
                    r => write_outcome(
                        r.map(|r| sandbox_value(&r.into_inner())),
                        value,
                        &[tonic::Code::AlreadyExists, tonic::Code::InvalidArgument],
                    ),
                }
            }
            "delete" => write_outcome(
                pool.delete_sandbox(DeleteSandboxRequest {
                    sandbox_id: key.clone(),
                })
                .await
                .map(|r| sandbox_value(&r.into_inner())),
                value,
                &[tonic::Code::NotFound, tonic::Code::FailedPrecondition],
            ),
            "get" => match pool
                .get_sandbox(GetSandboxRequest {
                    sandbox_id: key.clone(),
                    stale: false,
                })
                .await
            {
                Ok(r) => Outcome::Ok(sandbox_value(&r.into_inner())),
                Err(s) if s.code() == tonic::Code::NotFound => {
                    Outcome::Ok(json!({"sandbox": key, "absent": true}))
                }
                // A read changes nothing: every error is a certain failure.
                Err(s) => Outcome::Fail(value.clone(), short(&s)),
            },
            "status" => match pool
                .get_supervisor_pool_status(GetSupervisorPoolStatusRequest { stale: false })
                .await
            {
                Ok(r) => {
                    let r = r.into_inner();
                    let mut expired = lock(&self.expired);
                    expired.clear();
                    for m in r
                        .members
                        .iter()
                        .filter(|m| m.state() == MemberState::Expired)
                    {
                        expired.insert(m.id.clone(), m.incarnation);
                    }
                    Outcome::Ok(status_value(&r))
                }
                Err(s) => Outcome::Fail(value.clone(), short(&s)),
            },
            "drain" => {
                let op = value["op"].as_str().unwrap_or_default().to_string();
                let member = value["member"].as_str().unwrap_or_default().to_string();
                write_outcome(
                    pool.start_supervisor_pool_operation(StartSupervisorPoolOperationRequest {
                        operation_id: op,
                        kind: Some(start_supervisor_pool_operation_request::Kind::DrainMember(
                            member,
                        )),
                        max_parallel: 2,
                    })
                    .await
                    .map(|r| operation_value(&r.into_inner())),
                    value,
                    &[
                        tonic::Code::FailedPrecondition,
                        tonic::Code::InvalidArgument,
                        tonic::Code::NotFound,
                        tonic::Code::AlreadyExists,
                    ],
                )
            }
            "cancel" => {
                let op = value["op"].as_str().unwrap_or_default().to_string();
                write_outcome(
                    pool.cancel_supervisor_pool_operation(CancelSupervisorPoolOperationRequest {
                        operation_id: op,
                    })
                    .await
                    .map(|r| operation_value(&r.into_inner())),
                    value,
                    &[tonic::Code::FailedPrecondition, tonic::Code::NotFound],
                )
            }
            other => Outcome::Fail(value.clone(), format!("unknown op {other}")),
        }
    }

    async fn client(self: Arc<Self>, worker: usize, seed: u64) {
        let mut rng =
            StdRng::seed_from_u64(seed ^ (worker as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut process = self.processes.fresh();
        let n = self.cluster.nodes.len();
        while !self.stop.load(Ordering::Relaxed) {
            let node = rng.gen_range(1..=n);
            let roll: f64 = rng.gen();
            let live: Vec<String> = lock(&self.live).iter().cloned().collect();
            let pick_live = |rng: &mut StdRng| -> Option<String> {
                (!live.is_empty()).then(|| live[rng.gen_range(0..live.len())].clone())
            };
            let (f, key, value) = if roll < 0.22 || live.is_empty() {
                let k = self.next_sandbox.fetch_add(1, Ordering::Relaxed);
                let sandbox = format!("sb{k}");
                lock(&self.used).insert(sandbox.clone());
                (
                    "launch",
                    Some(sandbox.clone()),
                    json!({"sandbox": sandbox, "launch_id": format!("launch-{k}")}),
                )
            } else if roll < 0.42 {
                let s = pick_live(&mut rng).unwrap_or_default();
                ("delete", Some(s.clone()), json!({"sandbox": s}))
            } else if roll < 0.75 {
                // Mostly live sandboxes, sometimes any id ever used.
                let s = if rng.gen_bool(0.8) {
                    pick_live(&mut rng).unwrap_or_default()
                } else {
                    let used: Vec<String> = lock(&self.used).iter().cloned().collect();
                    used[rng.gen_range(0..used.len())].clone()
                };
                ("get", Some(s.clone()), json!({"sandbox": s}))
            } else {
                ("status", None, Value::Null)
            };
            let done = self.op(process, f, key.clone(), value, node).await;
            process = done.next;
            if let (Some(_), Some(k)) = (done.ok, key) {
                match f {
                    "launch" => {
                        lock(&self.live).insert(k);
                    }
                    "delete" => {
                        lock(&self.live).remove(&k);
                    }
                    _ => {}
                }
            }
            let (lo, hi) = self.options.delay_ms;
            let pause = if hi > lo { rng.gen_range(lo..hi) } else { lo };
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    fn between(rng: &mut StdRng, (lo, hi): (u64, u64)) -> Duration {
        Duration::from_millis(if hi > lo { rng.gen_range(lo..hi) } else { lo })
    }

    /// Sleeps up to `d`, returning early (false) when the run stops.
    async fn hold(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        while Instant::now() < until {
            if self.stop.load(Ordering::Relaxed) {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50).min(until - Instant::now())).await;
        }
        true
    }

    /// Restarts supervisors the last status read showed expired at their
    /// current incarnation (what a process supervisor would do).
    fn restart_expired(&self, rng: &mut StdRng) {
        let expired = lock(&self.expired).clone();
        for s in self.supervisors.iter().filter_map(|m| match m {
            PoolMember::Scripted(s) => Some(s),
            PoolMember::Process(_) => None,
        }) {
            if s.is_alive() && !s.is_paused() && expired.get(s.member()) == Some(&s.incarnation()) {
                self.history.nemesis(
                    "restart-supervisor",
                    format!(
                        "{} (incarnation {} read expired)",
                        s.member(),
                        s.incarnation()
                    ),
                );
                s.restart(rng.gen());
                lock(&self.expired).remove(s.member());
            }
        }
    }

    /// Process members that exited on their own (a defect: they are
    /// meant to run until killed) are recorded and restarted.
    fn restart_exited(&self, rng: &mut StdRng) {
        for m in &self.supervisors {
            let PoolMember::Process(p) = m else {
                continue;
            };
            if p.is_alive() || p.pid().is_none() {
                continue;
            }
            let what = format!(
                "{} ({}) exited by itself; see {}.log",
                p.member(),
                m.describe(),
                p.member()
            );
            self.history.nemesis("supervisor-exited", what.clone());
            lock(&self.exits).push(what);
            if let Err(e) = m.restart(rng.gen()) {
                tracing::warn!(member = p.member(), error = %e, "restart failed");
            }
        }
    }

    /// The pool-fault loop: pauses, kills and drains supervisors.
    async fn faults(self: Arc<Self>, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5EED_F00D);
        let mut operator = self.processes.fresh();
        let mut op_n = 0u64;
        let kinds: Vec<String> = self.options.faults.clone();
        while !self.stop.load(Ordering::Relaxed) {
            if !self
                .hold(Self::between(&mut rng, self.options.fault_every_ms))
                .await
            {
                break;
            }
            self.restart_expired(&mut rng);
            self.restart_exited(&mut rng);
            if kinds.is_empty() || self.supervisors.is_empty() {
                continue;
            }
            let kind = kinds[rng.gen_range(0..kinds.len())].clone();
            let s = &self.supervisors[rng.gen_range(0..self.supervisors.len())];
            if !s.is_alive() {
                continue;
            }
            match kind.as_str() {
                "pause" => {
                    let d = Self::between(&mut rng, self.options.pause_ms);
                    self.history.nemesis(
                        "pause-supervisor",
                        format!("{} {} for {} ms", s.member(), s.describe(), d.as_millis()),
                    );
                    s.pause();
                    self.hold(d).await;
                    s.resume();
                    self.history.nemesis(
                        "resume-supervisor",
                        format!("{} {}", s.member(), s.describe()),
                    );
                }
                "kill" => {
                    let d = Self::between(&mut rng, self.options.down_ms);
                    self.history.nemesis(
                        "kill-supervisor",
                        format!(
                            "{} {} down for {} ms",
                            s.member(),
                            s.describe(),
                            d.as_millis()
                        ),
                    );
                    s.kill();
                    self.hold(d).await;
                    if let Err(e) = s.restart(rng.gen()) {
                        tracing::warn!(member = s.member(), error = %e, "restart failed");
                    }
                    self.history.nemesis(
                        "restart-supervisor",
                        format!("{} {}", s.member(), s.describe()),
                    );
                }
                "drain" => {
                    op_n += 1;
                    let node = rng.gen_range(1..=self.cluster.nodes.len());
                    let value = json!({"op": format!("drain-{op_n}"), "member": s.member()});
                    let done = self
                        .op(
                            operator,
                            "drain",
                            Some(s.member().to_string()),
                            value.clone(),
                            node,
                        )
                        .await;
                    let d = Self::between(&mut rng, self.options.drain_ms);
                    self.hold(d).await;
                    // Cancel until it is certainly cancelled (or certainly
                    // not there), so the member returns to service.
                    let mut p = done.next;
                    for attempt in 0..10 {
                        let node = 1 + (node + attempt) % self.cluster.nodes.len();
                        let done = self
                            .op(
                                p,
                                "cancel",
                                Some(s.member().to_string()),
                                value.clone(),
                                node,
                            )
                            .await;
                        p = done.next;
                        let certain_fail = done.fail.as_deref().is_some_and(|m| {
                            m.starts_with("FailedPrecondition") || m.starts_with("NotFound")
                        });
                        if done.ok.is_some() || certain_fail {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    operator = p;
                }
                _ => {}
            }
        }
    }
}

/// A running pool workload.
pub struct PoolRunning {
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
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
    let names: Vec<String> = (1..=options.supervisors.max(1))
        .map(|i| format!("s{i}"))
        .collect();
    let capacity = options.capacity.max(1);
    let (supervisors, host) = match options.members {
        MemberKind::Scripted => {
            let members: Vec<PoolMember> = names
                .iter()
                .map(|m| {
                    PoolMember::Scripted(Supervisor::new(
                        m,
                        capacity,
                        gateways.clone(),
                        history.clone(),
                        processes.clone(),
                    ))
                })
                .collect();
            (members, None)
        }
        MemberKind::Process => {
            let beside = |name: &str| cluster.options.bin.with_file_name(name);
            let (ns, ip) = cluster.net.add_members_namespace()?;
            let host = Arc::new(MemberHost {
                ns,
                ip,
                gateways: gateways.clone(),
                supervisor_bin: options
                    .supervisor_bin
                    .clone()
                    .unwrap_or_else(|| beside("openshell-supervisor")),
                runtime_bin: options
                    .runtime_bin
                    .clone()
                    .unwrap_or_else(|| beside("openshell-sandbox-runtime")),
                dir: cluster.dir.clone(),
            });
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
    Ok(PoolRunning { shared, tasks })
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
            let done = s.op(process, "status", None, Value::Null, node).await;
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
        if let Some(host) = &s.host {
            checkers.push(Box::new(WorkloadContinuity {
                runtimes: runtime_logs(&host.runtime_dir()),
                exits: lock(&s.exits).clone(),
            }));
        }
        checkers
    }
}

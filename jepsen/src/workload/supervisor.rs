//! Scripted pool supervisors, run as tokio tasks in the harness, speaking the
//! real `SupervisorHost.Attach` stream protocol to the gateways in their
//! namespaces (the idea of `gateway-plugin/tests/common/fake.rs`).
//!
//! A supervisor attaches to a random gateway (`join`), sends `HostStatus`
//! every 250 ms (its liveness), records every assignment it is streamed
//! (`grant`), acknowledges every unacknowledged term at once (`ack`, standing
//! in for the grant handshake with the sandbox runtime) and reports once per
//! acknowledged term (`report`). When the stream breaks it re-attaches to
//! another gateway with the same incarnation; when the gateway says the
//! incarnation is retired (expired) it starts a new one, as a restarted
//! process would.
//!
//! Faults: [`Supervisor::pause`] stops everything (statuses, acks, reports,
//! reading the stream), like SIGSTOP; on resume it first reports every term
//! it believed it held (a stale report if it was taken over meanwhile).
//! [`Supervisor::kill`] drops the task and its stream; [`Supervisor::restart`]
//! starts a new incarnation.
//!
//! Process numbers (HISTORY.md): `join` and `grant` use the supervisor's own
//! process number (a new one after a `join` whose outcome is unknown). Every
//! `ack` and `report` is sent on the stream and answered only indirectly, so
//! each takes a process number of its own: an `ack` completes `ok` when a
//! later snapshot shows that term acknowledged (and its number is reused),
//! `info` when the assignment moved away or the stream ended first; a
//! `report` always completes `info` (the stream has no reply), and its
//! number is retired.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proto::pool_types::SandboxPhase;
use proto::supervisor_host::supervisor_host_client::SupervisorHostClient;
use proto::supervisor_host::{
    gateway_message, supervisor_message, HostHello, HostStatus, SandboxInstanceAssignment,
    SandboxReport, SupervisorMessage, TermAck,
};
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use crate::history::{EventSpec, OpType, Process, Recorder};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Process numbers shared by every client of the pool workload.
#[derive(Clone)]
pub struct Processes(pub Arc<AtomicU64>);

impl Processes {
    /// A fresh process number.
    pub fn fresh(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// An ack sent and not yet answered.
struct PendingAck {
    process: u64,
    value: Value,
    node: String,
}

/// State shared by a supervisor's task and its handle.
struct Inner {
    member: String,
    capacity: u32,
    incarnation: AtomicU64,
    /// The supervisor's own process number (join, grant).
    process: AtomicU64,
    /// Ack process numbers free for reuse (after `ok`).
    free: Mutex<Vec<u64>>,
    /// (sandbox, generation, term) -> pending ack.
    pending: Mutex<BTreeMap<(String, u64, u64), PendingAck>>,
    /// Report sequence number.
    seq: AtomicU64,
    paused: watch::Sender<bool>,
    history: Recorder,
    processes: Processes,
    gateways: Vec<String>,
    alive: AtomicBool,
}

/// One scripted supervisor.
pub struct Supervisor {
    inner: Arc<Inner>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Supervisor {
    /// Creates it (not started).
    pub fn new(
        member: &str,
        capacity: u32,
        gateways: Vec<String>,
        history: Recorder,
        processes: Processes,
    ) -> Supervisor {
        let process = processes.fresh();
        Supervisor {
            inner: Arc::new(Inner {
                member: member.to_string(),
                capacity,
                incarnation: AtomicU64::new(0),
                process: AtomicU64::new(process),
                free: Mutex::new(Vec::new()),
                pending: Mutex::new(BTreeMap::new()),
                seq: AtomicU64::new(0),
                paused: watch::channel(false).0,
                history,
                processes,
                gateways,
                alive: AtomicBool::new(false),
            }),
            task: Mutex::new(None),
        }
    }

    /// Member id.
    pub fn member(&self) -> &str {
        &self.inner.member
    }

    /// Current incarnation (0 before the first start).
    pub fn incarnation(&self) -> u64 {
        self.inner.incarnation.load(Ordering::Relaxed)
    }

    /// Running (started and not killed).
    pub fn is_alive(&self) -> bool {
        self.inner.alive.load(Ordering::Relaxed)
    }

    /// Paused.
    pub fn is_paused(&self) -> bool {
        *self.inner.paused.borrow()
    }

    /// Starts a new incarnation (kills the running one first).
    pub fn restart(&self, seed: u64) {
        self.kill();
        self.inner.incarnation.fetch_add(1, Ordering::Relaxed);
        self.inner.paused.send_replace(false);
        self.inner.alive.store(true, Ordering::Relaxed);
        let inner = self.inner.clone();
        *lock(&self.task) = Some(tokio::spawn(inner.run(seed)));
    }

    /// Stops the task and its stream; unanswered acks become `info`.
    pub fn kill(&self) {
        if let Some(t) = lock(&self.task).take() {
            t.abort();
        }
        self.inner.alive.store(false, Ordering::Relaxed);
        self.inner.paused.send_replace(false);
        self.inner
            .close_pending("supervisor killed before the ack was seen");
    }

    /// Stops statuses, acks, reports and stream reads (SIGSTOP-like).
    pub fn pause(&self) {
        self.inner.paused.send_replace(true);
    }

    /// Undoes [`Supervisor::pause`].
    pub fn resume(&self) {
        self.inner.paused.send_replace(false);
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How one attach ended.
enum End {
    /// The gateway refused the incarnation: start a new one.
    Retired,
    /// Anything else: re-attach elsewhere.
    Broken,
}

fn assignment_value(a: &SandboxInstanceAssignment, member: &str, incarnation: u64) -> Value {
    json!({
        "sandbox": a.sandbox_id, "generation": a.generation, "term": a.term,
        "credential_epoch": a.credential_epoch, "acknowledged": a.acknowledged, "phase": SandboxPhase::name_of(a.phase),
        "member": member, "incarnation": incarnation, "grant_bytes": a.grant.len(),
    })
}

impl Inner {
    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        kind: OpType,
        process: u64,
        f: &str,
        key: &str,
        value: Value,
        node: &str,
        error: Option<String>,
    ) {
        self.history.record(EventSpec {
            kind,
            process: Process::Client(process),
            f: f.to_string(),
            key: Some(key.to_string()),
            value,
            node: Some(node.to_string()),
            error,
        });
    }

    fn ack_process(&self) -> u64 {
        lock(&self.free)
            .pop()
            .unwrap_or_else(|| self.processes.fresh())
    }

    fn close_pending(&self, why: &str) {
        let pending = std::mem::take(&mut *lock(&self.pending));
        for ((sandbox, _, _), p) in pending {
            self.record(
                OpType::Info,
                p.process,
                "ack",
                &sandbox,
                p.value,
                &p.node,
                Some(why.to_string()),
            );
        }
    }

    async fn wait_unpaused(&self) {
        let mut rx = self.paused.subscribe();
        let _ = rx.wait_for(|p| !*p).await;
    }

    async fn run(self: Arc<Self>, seed: u64) {
        let mut next = (seed as usize) % self.gateways.len().max(1);
        loop {
            self.wait_unpaused().await;
            let gateway = self.gateways[next % self.gateways.len()].clone();
            next += 1;
            let node = format!("n{}", (next - 1) % self.gateways.len() + 1);
            match self.attach_once(&gateway, &node).await {
                End::Retired => {
                    let inc = self.incarnation.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::info!(member = %self.member, inc, "incarnation retired; new incarnation");
                }
                End::Broken => {}
            }
            self.close_pending("stream ended before the ack was seen");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn send_report(
        &self,
        tx: &mpsc::Sender<SupervisorMessage>,
        a: &SandboxInstanceAssignment,
        incarnation: u64,
        node: &str,
    ) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        // The status names who reported it under which term: the checker
        // (I3) compares it with the owner and term every read shows.
        let status = format!("r:{}:{incarnation}:{}:{seq}", self.member, a.term);
        let process = self.processes.fresh();
        let value = json!({
            "sandbox": a.sandbox_id, "generation": a.generation, "term": a.term,
            "member": self.member, "incarnation": incarnation, "status": status,
        });
        self.record(
            OpType::Invoke,
            process,
            "report",
            &a.sandbox_id,
            value.clone(),
            node,
            None,
        );
        let sent = tx
            .try_send(SupervisorMessage {
                message: Some(supervisor_message::Message::Report(SandboxReport {
                    sandbox_id: a.sandbox_id.clone(),
                    generation: a.generation,
                    term: a.term,
                    status,
                })),
            })
            .is_ok();
        self.record(
            OpType::Info,
            process,
            "report",
            &a.sandbox_id,
            value,
            node,
            Some(if sent {
                "sent on the stream; no reply".into()
            } else {
                "stream closed; maybe not sent".into()
            }),
        );
    }

    async fn attach_once(self: &Arc<Self>, gateway: &str, node: &str) -> End {
        let incarnation = self.incarnation.load(Ordering::Relaxed);
        let process = self.process.load(Ordering::Relaxed);
        let member = self.member.clone();
        let join_value =
            json!({"member": member, "incarnation": incarnation, "capacity": self.capacity});
        self.record(
            OpType::Invoke,
            process,
            "join",
            &member,
            join_value.clone(),
            node,
            None,
        );
        let (tx, rx) = mpsc::channel::<SupervisorMessage>(256);
        let hello = SupervisorMessage {
            message: Some(supervisor_message::Message::Hello(HostHello {
                member_id: member.clone(),
                member_uid: format!("uid-{member}"),
                advertise_address: format!("10.0.0.1:{}", 20000 + incarnation % 10000),
                capacity: self.capacity,
                incarnation,
                credential: String::new(),
            })),
        };
        let _ = tx.try_send(hello);
        let attach = async {
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{gateway}"))
                .map_err(|e| tonic::Status::internal(e.to_string()))?
                .connect_timeout(Duration::from_millis(1000))
                .connect()
                .await
                .map_err(|e| tonic::Status::unavailable(format!("connection refused: {e}")))?;
            let mut client = SupervisorHostClient::new(channel);
            let mut inbound = client.attach(ReceiverStream::new(rx)).await?.into_inner();
            match inbound.message().await? {
                Some(m) => match m.message {
                    Some(gateway_message::Message::Accepted(a)) => Ok((inbound, a.gateway_node_id)),
                    _ => Err(tonic::Status::internal(
                        "first message is not HelloAccepted",
                    )),
                },
                None => Err(tonic::Status::unavailable(
                    "stream ended before HelloAccepted",
                )),
            }
        };
        let (mut inbound, gateway_id) =
            match tokio::time::timeout(Duration::from_secs(8), attach).await {
                Ok(Ok(r)) => r,
                Ok(Err(status)) => {
                    let text = format!("{:?}: {}", status.code(), status.message());
                    let certain = matches!(
                        status.code(),
                        tonic::Code::FailedPrecondition
                            | tonic::Code::InvalidArgument
                            | tonic::Code::Unauthenticated
                    ) || text.contains("connection refused");
                    // Retired or superseded: either way this scripted member
                    // continues as a new incarnation.
                    let retired = proto::attach::refusal_of(&status).is_some();
                    if certain {
                        self.record(
                            OpType::Fail,
                            process,
                            "join",
                            &member,
                            join_value,
                            node,
                            Some(text),
                        );
                    } else {
                        self.record(
                            OpType::Info,
                            process,
                            "join",
                            &member,
                            join_value,
                            node,
                            Some(text),
                        );
                        self.process
                            .store(self.processes.fresh(), Ordering::Relaxed);
                    }
                    return if retired { End::Retired } else { End::Broken };
                }
                Err(_) => {
                    self.record(
                        OpType::Info,
                        process,
                        "join",
                        &member,
                        join_value,
                        node,
                        Some("timeout".into()),
                    );
                    self.process
                        .store(self.processes.fresh(), Ordering::Relaxed);
                    return End::Broken;
                }
            };
        self.record(
            OpType::Ok,
            process,
            "join",
            &member,
            json!({"member": member, "incarnation": incarnation, "capacity": self.capacity, "gateway_node_id": gateway_id}),
            node,
            None,
        );
        // Liveness: HostStatus every 250 ms unless paused.
        let pinger = {
            let tx = tx.clone();
            let me = self.clone();
            tokio::spawn(async move {
                loop {
                    me.wait_unpaused().await;
                    let status = SupervisorMessage {
                        message: Some(supervisor_message::Message::Status(HostStatus::default())),
                    };
                    if tx.send(status).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        // What this supervisor believes it holds: sandbox -> assignment.
        let mut held: BTreeMap<String, SandboxInstanceAssignment> = BTreeMap::new();
        let mut reported: BTreeMap<(String, u64, u64), ()> = BTreeMap::new();
        let mut paused_rx = self.paused.subscribe();
        let end = loop {
            let message = tokio::select! {
                m = inbound.message() => m,
                changed = paused_rx.changed() => {
                    if changed.is_err() { break End::Broken; }
                    if *paused_rx.borrow() {
                        // Paused: read nothing, send nothing until resumed.
                        self.wait_unpaused().await;
                        // Resumed: report every term it believed it held
                        // (stale if it was taken over meanwhile; apply must
                        // refuse those, I3).
                        for a in held.values().filter(|a| a.acknowledged) {
                            self.send_report(&tx, a, incarnation, node);
                        }
                    }
                    continue;
                }
            };
            let snapshot = match message {
                Ok(Some(m)) => match m.message {
                    Some(gateway_message::Message::Snapshot(s)) => s,
                    _ => continue,
                },
                Ok(None) | Err(_) => break End::Broken,
            };
            let mut now: BTreeMap<String, SandboxInstanceAssignment> = BTreeMap::new();
            for a in snapshot.assignments {
                now.insert(a.sandbox_id.clone(), a);
            }
            // Record every assignment that changed.
            for a in now.values() {
                let same = held.get(&a.sandbox_id).is_some_and(|h| {
                    h.generation == a.generation
                        && h.term == a.term
                        && h.acknowledged == a.acknowledged
                        && h.phase == a.phase
                });
                if same {
                    continue;
                }
                let mut value = assignment_value(a, &member, incarnation);
                value["log_index"] = json!(snapshot.log_index);
                self.record(
                    OpType::Invoke,
                    process,
                    "grant",
                    &a.sandbox_id,
                    value.clone(),
                    node,
                    None,
                );
                self.record(
                    OpType::Ok,
                    process,
                    "grant",
                    &a.sandbox_id,
                    value,
                    node,
                    None,
                );
            }
            // Resolve pending acks.
            let resolved: Vec<((String, u64, u64), bool)> = lock(&self.pending)
                .keys()
                .filter_map(|k| match now.get(&k.0) {
                    Some(a) if a.generation == k.1 && a.term == k.2 => {
                        a.acknowledged.then(|| (k.clone(), true))
                    }
                    _ => Some((k.clone(), false)),
                })
                .collect();
            for (k, ok) in resolved {
                let Some(p) = lock(&self.pending).remove(&k) else {
                    continue;
                };
                if ok {
                    let mut value = p.value;
                    value["log_index"] = json!(snapshot.log_index);
                    self.record(OpType::Ok, p.process, "ack", &k.0, value, &p.node, None);
                    lock(&self.free).push(p.process);
                } else {
                    self.record(
                        OpType::Info,
                        p.process,
                        "ack",
                        &k.0,
                        p.value,
                        &p.node,
                        Some("assignment moved away before the ack was seen".into()),
                    );
                }
            }
            // Ack every unacknowledged term not already pending; report once
            // per acknowledged term.
            for a in now.values() {
                let key = (a.sandbox_id.clone(), a.generation, a.term);
                if !a.acknowledged {
                    if lock(&self.pending).contains_key(&key) {
                        continue;
                    }
                    let process = self.ack_process();
                    let value = json!({
                        "sandbox": a.sandbox_id, "generation": a.generation, "term": a.term,
                        "credential_epoch": a.credential_epoch, "member": member, "incarnation": incarnation,
                    });
                    self.record(
                        OpType::Invoke,
                        process,
                        "ack",
                        &a.sandbox_id,
                        value.clone(),
                        node,
                        None,
                    );
                    lock(&self.pending).insert(
                        key,
                        PendingAck {
                            process,
                            value,
                            node: node.to_string(),
                        },
                    );
                    let _ = tx.try_send(SupervisorMessage {
                        message: Some(supervisor_message::Message::Ack(TermAck {
                            sandbox_id: a.sandbox_id.clone(),
                            generation: a.generation,
                            term: a.term,
                        })),
                    });
                } else if reported.insert(key, ()).is_none() {
                    self.send_report(&tx, a, incarnation, node);
                }
            }
            held = now;
        };
        pinger.abort();
        end
    }
}

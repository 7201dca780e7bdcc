//! Scripted pool supervisors, run as tokio tasks in the harness, speaking the
//! real `SupervisorHost.Attach` stream protocol to the gateways in their
//! namespaces. The protocol (hello, attach until `HelloAccepted`, the
//! `HostStatus` pinger, `TermAck`) is `testkit::member`'s, shared with the
//! gateway-plugin tests' scripted member; this module adds the history, the
//! pauses and the reports.
//!
//! A supervisor attaches to a random gateway (`join`), sends `HostStatus`
//! every 250 ms (its liveness), records every assignment it is streamed
//! (`grant`), acknowledges every unacknowledged term at once (`ack`, standing
//! in for the grant handshake with the sandbox runtime) and reports once per
//! acknowledged term (`report`). Its hello names a process id and the
//! incarnation the pool last granted it (0 asks for a new one); the pool
//! assigns incarnations in log order (docs/design/0002) and `HelloAccepted`
//! says which. When the stream breaks it re-attaches to another gateway as
//! the same process; when the gateway says the incarnation is retired
//! (expired) or superseded it starts a new one (new process id, known 0),
//! as a restarted process would.
//!
//! In a secure run the stream speaks TLS (trusting the run's CA) and the
//! hello carries the member's own credential.
//!
//! Faults: [`ScriptedSupervisor::pause`] stops everything (statuses, acks,
//! reports, reading the stream), like SIGSTOP; on resume it first reports
//! every term it believed it held (a stale report if it was taken over
//! meanwhile). [`ScriptedSupervisor::kill`] drops the task and its stream;
//! [`ScriptedSupervisor::restart`] starts a new incarnation.
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
use proto::supervisor_host::{
    gateway_message, supervisor_message, AssignmentSnapshot, SandboxInstanceAssignment,
    SandboxReport, SupervisorMessage,
};
use serde_json::Value;
use testkit::member::{
    attach_secure, hello_with_credential, spawn_pinger, term_ack, Attached, Pings,
};
use tokio::sync::{mpsc, watch};

use crate::history::{EventSpec, OpType, Process, Processes, Recorder};
use crate::ops::pool::{Ack, Grant, Join, Report};
use crate::ops::to_value;
use crate::security::MemberSecurity;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Process ids, unique across the harness's scripted supervisors (never 0).
static NEXT_PROCESS_ID: AtomicU64 = AtomicU64::new(1);

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
    /// The incarnation the pool granted (0 before the first grant and after
    /// a restart or refusal).
    incarnation: AtomicU64,
    /// The process id its hellos carry (identity only; new per start).
    process_id: AtomicU64,
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
    /// TLS and credential of a secure run (`None`: plaintext, no
    /// credential).
    security: Option<MemberSecurity>,
}

/// One scripted supervisor.
pub struct ScriptedSupervisor {
    inner: Arc<Inner>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl ScriptedSupervisor {
    /// Creates it (not started); with `security` it attaches over TLS and
    /// presents the credential.
    pub fn new(
        member: &str,
        capacity: u32,
        gateways: Vec<String>,
        history: Recorder,
        processes: Processes,
        security: Option<MemberSecurity>,
    ) -> ScriptedSupervisor {
        let process = processes.fresh();
        ScriptedSupervisor {
            inner: Arc::new(Inner {
                member: member.to_string(),
                capacity,
                incarnation: AtomicU64::new(0),
                process_id: AtomicU64::new(0),
                process: AtomicU64::new(process),
                free: Mutex::new(Vec::new()),
                pending: Mutex::new(BTreeMap::new()),
                seq: AtomicU64::new(0),
                paused: watch::channel(false).0,
                history,
                processes,
                gateways,
                alive: AtomicBool::new(false),
                security,
            }),
            task: Mutex::new(None),
        }
    }

    /// Member id.
    pub fn member(&self) -> &str {
        &self.inner.member
    }

    /// The incarnation the pool granted (0 before a grant).
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
        self.inner.renew();
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

    /// Undoes [`ScriptedSupervisor::pause`].
    pub fn resume(&self) {
        self.inner.paused.send_replace(false);
    }
}

impl Drop for ScriptedSupervisor {
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

fn grant_value(
    a: &SandboxInstanceAssignment,
    member: &str,
    incarnation: u64,
    log_index: u64,
) -> Grant {
    Grant {
        sandbox: a.sandbox_id.clone(),
        generation: a.generation,
        term: a.term,
        credential_epoch: a.credential_epoch,
        acknowledged: a.acknowledged,
        phase: SandboxPhase::name_of(a.phase).to_string(),
        member: member.to_string(),
        incarnation,
        log_index,
        grant_bytes: a.grant.len(),
    }
}

/// (sandbox, generation, term): one term of one sandbox generation.
type TermKey = (String, u64, u64);

/// One attach's stream and what it believes.
struct Session {
    /// Sends to the gateway.
    tx: mpsc::Sender<SupervisorMessage>,
    /// The incarnation attached.
    incarnation: u64,
    /// The supervisor's own process number (grant events).
    process: u64,
    /// Gateway name (`n<i>`) for the history.
    node: String,
    /// What this supervisor believes it holds: sandbox -> assignment.
    held: BTreeMap<String, SandboxInstanceAssignment>,
    /// Terms already reported once.
    reported: BTreeMap<TermKey, ()>,
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
                    let old = self.renew();
                    tracing::info!(member = %self.member, old, "incarnation refused; new incarnation");
                }
                End::Broken => {}
            }
            self.close_pending("stream ended before the ack was seen");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn send_report(&self, session: &Session, a: &SandboxInstanceAssignment) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let incarnation = session.incarnation;
        let node = session.node.as_str();
        // The status names who reported it under which term: the checker
        // (I3) compares it with the owner and term every read shows.
        let status = format!("r:{}:{incarnation}:{}:{seq}", self.member, a.term);
        let process = self.processes.fresh();
        let value = to_value(&Report {
            sandbox: a.sandbox_id.clone(),
            generation: a.generation,
            term: a.term,
            member: self.member.clone(),
            incarnation,
            status: status.clone(),
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
        let sent = session
            .tx
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

    /// Continues as a new process: a new process id, known incarnation 0.
    /// Returns the incarnation it held.
    fn renew(&self) -> u64 {
        self.process_id.store(
            NEXT_PROCESS_ID.fetch_add(1, Ordering::Relaxed),
            Ordering::Relaxed,
        );
        self.incarnation.swap(0, Ordering::Relaxed)
    }

    /// Opens the stream to `gateway` as process `process_id` knowing
    /// incarnation `known`: TLS and the member's credential in a secure run.
    async fn attach(
        &self,
        gateway: &str,
        process_id: u64,
        known: u64,
    ) -> Result<Attached, tonic::Status> {
        let advertise = format!("10.0.0.1:{}", 20000 + process_id % 10000);
        let credential = self
            .security
            .as_ref()
            .map_or("", |s| s.credential_of(&self.member));
        let hello = hello_with_credential(
            &self.member,
            process_id,
            known,
            self.capacity,
            advertise,
            credential,
        );
        let tls = self.security.as_ref().map(|s| s.tls.clone());
        attach_secure(
            gateway,
            Duration::from_millis(1000),
            tls,
            None,
            Pings::Off,
            hello,
            256,
        )
        .await
    }

    /// `join`: attaches as the current process (naming the incarnation it
    /// was granted, 0 for none) and records the outcome; the open stream
    /// (under the incarnation the pool assigned), or how the attempt ended.
    async fn join(&self, gateway: &str, node: &str) -> Result<(Attached, Session), End> {
        let known = self.incarnation.load(Ordering::Relaxed);
        let process_id = self.process_id.load(Ordering::Relaxed);
        let process = self.process.load(Ordering::Relaxed);
        let member = self.member.clone();
        let mut join = Join {
            member: member.clone(),
            known_incarnation: known,
            process_id,
            capacity: self.capacity,
            incarnation: None,
            gateway_node_id: None,
        };
        self.record(
            OpType::Invoke,
            process,
            "join",
            &member,
            to_value(&join),
            node,
            None,
        );
        let attach = self.attach(gateway, process_id, known);
        match tokio::time::timeout(Duration::from_secs(8), attach).await {
            Ok(Ok(attached)) => {
                // Grants name the assigned incarnation; acks and reports go
                // out under it.
                let incarnation = attached.incarnation;
                self.incarnation.store(incarnation, Ordering::Relaxed);
                join.incarnation = Some(incarnation);
                join.gateway_node_id = Some(attached.gateway_node_id);
                self.record(
                    OpType::Ok,
                    process,
                    "join",
                    &member,
                    to_value(&join),
                    node,
                    None,
                );
                let session = Session {
                    tx: attached.tx.clone(),
                    incarnation,
                    process,
                    node: node.to_string(),
                    held: BTreeMap::new(),
                    reported: BTreeMap::new(),
                };
                Ok((attached, session))
            }
            Ok(Err(status)) => {
                let text = format!("{:?}: {}", status.code(), status.message());
                let certain = matches!(
                    status.code(),
                    tonic::Code::FailedPrecondition
                        | tonic::Code::InvalidArgument
                        | tonic::Code::Unauthenticated
                ) || text.contains("connection refused");
                // Retired or superseded: either way this scripted member
                // continues as a new process (new process id, known 0).
                let retired = proto::attach::refusal_of(&status).is_some();
                let kind = if certain { OpType::Fail } else { OpType::Info };
                self.record(
                    kind,
                    process,
                    "join",
                    &member,
                    to_value(&join),
                    node,
                    Some(text),
                );
                if !certain {
                    self.process
                        .store(self.processes.fresh(), Ordering::Relaxed);
                }
                Err(if retired { End::Retired } else { End::Broken })
            }
            Err(_) => {
                self.record(
                    OpType::Info,
                    process,
                    "join",
                    &member,
                    to_value(&join),
                    node,
                    Some("timeout".into()),
                );
                self.process
                    .store(self.processes.fresh(), Ordering::Relaxed);
                Err(End::Broken)
            }
        }
    }

    async fn attach_once(self: &Arc<Self>, gateway: &str, node: &str) -> End {
        let (attached, mut session) = match self.join(gateway, node).await {
            Ok(joined) => joined,
            Err(end) => return end,
        };
        let mut inbound = attached.inbound;
        // Liveness: HostStatus every 250 ms unless paused.
        let pinger = spawn_pinger(
            session.tx.clone(),
            Duration::from_millis(250),
            self.paused.subscribe(),
        );
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
                        for a in session.held.values().filter(|a| a.acknowledged) {
                            self.send_report(&session, a);
                        }
                    }
                    continue;
                }
            };
            match message {
                Ok(Some(m)) => {
                    if let Some(gateway_message::Message::Snapshot(s)) = m.message {
                        self.on_snapshot(&mut session, s);
                    }
                }
                Ok(None) | Err(_) => break End::Broken,
            }
        };
        pinger.abort();
        end
    }

    /// One assignment snapshot: records the grants that changed, resolves
    /// pending acks, acks every unacknowledged term not already pending and
    /// reports once per acknowledged term.
    fn on_snapshot(&self, session: &mut Session, snapshot: AssignmentSnapshot) {
        let mut now: BTreeMap<String, SandboxInstanceAssignment> = BTreeMap::new();
        for a in snapshot.assignments {
            now.insert(a.sandbox_id.clone(), a);
        }
        self.record_grants(session, &now, snapshot.log_index);
        self.resolve_acks(&now, snapshot.log_index);
        for a in now.values() {
            let key = (a.sandbox_id.clone(), a.generation, a.term);
            if !a.acknowledged {
                if !lock(&self.pending).contains_key(&key) {
                    self.send_ack(session, a, key);
                }
            } else if session.reported.insert(key, ()).is_none() {
                self.send_report(session, a);
            }
        }
        session.held = now;
    }

    /// Records every assignment that changed since the last snapshot.
    fn record_grants(
        &self,
        session: &Session,
        now: &BTreeMap<String, SandboxInstanceAssignment>,
        log_index: u64,
    ) {
        for a in now.values() {
            let same = session.held.get(&a.sandbox_id).is_some_and(|h| {
                h.generation == a.generation
                    && h.term == a.term
                    && h.acknowledged == a.acknowledged
                    && h.phase == a.phase
            });
            if same {
                continue;
            }
            let value = to_value(&grant_value(
                a,
                &self.member,
                session.incarnation,
                log_index,
            ));
            for kind in [OpType::Invoke, OpType::Ok] {
                self.record(
                    kind,
                    session.process,
                    "grant",
                    &a.sandbox_id,
                    value.clone(),
                    &session.node,
                    None,
                );
            }
        }
    }

    /// Pending acks: `ok` when the snapshot shows the term acknowledged,
    /// `info` when the assignment moved away.
    fn resolve_acks(&self, now: &BTreeMap<String, SandboxInstanceAssignment>, log_index: u64) {
        let resolved: Vec<(TermKey, bool)> = lock(&self.pending)
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
                value["log_index"] = Value::from(log_index);
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
    }

    /// Sends the `TermAck` of `a`'s term and records it pending.
    fn send_ack(&self, session: &Session, a: &SandboxInstanceAssignment, key: TermKey) {
        let process = self.ack_process();
        let value = to_value(&Ack {
            sandbox: a.sandbox_id.clone(),
            generation: a.generation,
            term: a.term,
            credential_epoch: a.credential_epoch,
            member: self.member.clone(),
            incarnation: session.incarnation,
            log_index: None,
        });
        self.record(
            OpType::Invoke,
            process,
            "ack",
            &a.sandbox_id,
            value.clone(),
            &session.node,
            None,
        );
        lock(&self.pending).insert(
            key,
            PendingAck {
                process,
                value,
                node: session.node.clone(),
            },
        );
        let _ = session.tx.try_send(term_ack(a));
    }
}

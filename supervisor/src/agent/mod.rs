//! `openshell-supervisor`: a pool member.
//!
//! It attaches to one gateway of a list (failing over to the next with
//! bounded, jittered backoff), hosts one session per assigned sandbox, and
//! serves readiness. A gateway that is stopping says so (`GatewayLeaving`,
//! or a hello refused with `GATEWAY_LEAVING`): the supervisor then attaches
//! to the next gateway of its list at once, without backoff and with the
//! incarnation it has, so its heartbeats go on and its member never expires.
//!
//! For each assignment in an `AssignmentSnapshot` it dials the sandbox's
//! runtime at the endpoint the assignment carries (the gateway leader's
//! launcher started it and recorded it; a supervisor never starts one,
//! docs/design/0003), presents the signed grant, and
//! once the runtime accepts it acknowledges the term to the gateway; then it
//! heartbeats the runtime and reports the workload's status. An assignment
//! that disappears is *relinquished* (the workload keeps running for its next
//! owner); a `released` entry is *released* (the workload is stopped and
//! deleted). A session the runtime fences (a newer epoch took over) ends.
//!
//! Readiness (`/readyz`) holds only while a gateway has accepted the
//! authenticated stream and the member is not draining; liveness
//! (`/healthz`) never depends on a gateway.
//!
//! Stopping ([`stop`]): on the first SIGTERM/SIGINT, with `--drain-on-stop`
//! (the default), the supervisor turns unready, asks the pool to drain it
//! (`HostStatus.stopping`), keeps supervising until it owns nothing or
//! `--drain-timeout-ms` passes, leaves the pool (`HostLeave`) and exits; a
//! second signal exits at once.
//!
//! Gateways never dial supervisors: an exec arrives as an `ExecCall` on the
//! stream this process opened and authenticated, and is answered on it
//! ([`exec`]). The only port the supervisor listens on is its HTTP health
//! port (`--http-listen`); `--listen` is accepted for old configurations and
//! ignored.

pub mod config;
mod exec;
mod health;
pub mod metrics;
mod session;
mod stop;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use proto::client::{self, Role};
use proto::supervisor_host::supervisor_host_client::SupervisorHostClient;
use proto::supervisor_host::{
    gateway_message, supervisor_message, AssignmentSnapshot, AttachRefusal, HelloAccepted,
    HostHello, HostStatus, SupervisorMessage, TermAck,
};
use rand::Rng;
use tokio::sync::{mpsc, Semaphore};
use tokio_stream::wrappers::ReceiverStream;

pub use config::{AgentConfig, ConfigError, RawAgentConfig};
use session::Session;

/// Shared state of one supervisor process.
pub struct Agent {
    config: AgentConfig,
    /// Random, never 0, sent in every hello: tells the pool a retried hello
    /// of this process from another process of the member id (identity
    /// only, never order). Renewed with the incarnation.
    process_id: AtomicU64,
    /// The incarnation the pool granted (`HelloAccepted`), 0 before the
    /// first grant and after a retirement (see
    /// [`Agent::renew_incarnation`]). The log orders incarnations: no clock
    /// of this host decides whether this process is newer
    /// (docs/design/0002).
    incarnation: AtomicU64,
    /// `--pool-advertise-ip`, announced in HostHello: informational only
    /// (shown in the pool status); no gateway dials it.
    advertise_address: String,
    /// A gateway accepted the stream.
    attached: AtomicBool,
    /// The member is draining (from the latest snapshot).
    draining: AtomicBool,
    /// The process is stopping and asked the pool to drain it
    /// (`HostStatus.stopping`).
    stopping: AtomicBool,
    /// `HostLeave` was sent: a retired incarnation then means "left", not
    /// "re-join as a new one".
    leave_sent: AtomicBool,
    /// The pool confirmed the leave (`HostLeft`, or the incarnation was
    /// retired after `HostLeave`).
    left: tokio::sync::watch::Sender<bool>,
    /// Why the supervisor is not ready (for /readyz).
    not_ready_reason: Mutex<String>,
    /// sandbox id -> session. A std lock: never held across an await.
    sessions: Mutex<BTreeMap<String, Session>>,
    /// (sandbox, term) activations in flight.
    activating: Mutex<BTreeSet<(String, u64)>>,
    /// (sandbox, generation) already released.
    released: Mutex<BTreeSet<(String, u64)>>,
    /// Sender of the current stream, for acks and reports.
    outbound: Mutex<Option<mpsc::Sender<SupervisorMessage>>>,
    /// The latest snapshot, re-reconciled periodically.
    last_snapshot: Mutex<Option<AssignmentSnapshot>>,
    /// (sandbox, generation, term) -> when its `TermAck` was last sent on
    /// the current stream ([`Agent::ack`]); cleared on every attach.
    acks_sent: Mutex<BTreeMap<(String, u64, u64), Instant>>,
    /// Slots of the execs running at once ([`exec::MAX_CONCURRENT_EXECS`]).
    exec_slots: Arc<Semaphore>,
    /// Served at `/metrics`.
    metrics: metrics::AgentMetrics,
}

impl Agent {
    /// The state of a process that has not attached yet.
    fn new(config: AgentConfig, process_id: u64) -> Self {
        Agent {
            process_id: AtomicU64::new(process_id),
            incarnation: AtomicU64::new(0),
            advertise_address: config.advertise_ip.to_string(),
            attached: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            leave_sent: AtomicBool::new(false),
            left: tokio::sync::watch::Sender::new(false),
            not_ready_reason: Mutex::new("not attached to a gateway yet".into()),
            sessions: Mutex::new(BTreeMap::new()),
            activating: Mutex::new(BTreeSet::new()),
            released: Mutex::new(BTreeSet::new()),
            outbound: Mutex::new(None),
            last_snapshot: Mutex::new(None),
            acks_sent: Mutex::new(BTreeMap::new()),
            exec_slots: exec::slots(),
            metrics: metrics::AgentMetrics::new(),
            config,
        }
    }

    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether /readyz succeeds (with the incarnation the pool granted),
    /// and why not.
    pub fn readiness(&self) -> Result<u64, String> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err("draining (stopping)".into());
        }
        if !self.attached.load(Ordering::SeqCst) {
            return Err(Self::lock(&self.not_ready_reason).clone());
        }
        if self.draining.load(Ordering::SeqCst) {
            return Err("draining: this member takes no new work".into());
        }
        Ok(self.incarnation.load(Ordering::SeqCst))
    }

    /// The `/metrics` text.
    pub fn metrics_text(&self) -> String {
        let state = if !self.attached.load(Ordering::SeqCst) {
            "detached"
        } else if self.draining.load(Ordering::SeqCst) || self.stopping.load(Ordering::SeqCst) {
            "draining"
        } else {
            "attached"
        };
        let runtimes = Self::lock(&self.sessions).len();
        self.metrics
            .render(state, runtimes, self.incarnation.load(Ordering::SeqCst))
    }

    fn set_not_ready(&self, reason: String) {
        self.attached.store(false, Ordering::SeqCst);
        *Self::lock(&self.not_ready_reason) = reason;
    }

    /// Sends a message on the current stream, if any.
    fn send(&self, message: supervisor_message::Message) {
        if let Some(tx) = Self::lock(&self.outbound).as_ref() {
            let _ = tx.try_send(SupervisorMessage {
                message: Some(message),
            });
        }
    }

    /// Sends the `TermAck` of `term` of `sandbox` (`generation`). A resend
    /// (the ack of a term a snapshot still shows unacknowledged) goes out
    /// at most once per [`ACK_RESEND_AFTER`] per stream: snapshots arrive
    /// after every applied batch, and resending every pending ack on each
    /// made a burst of assignments cost acks times snapshots writes.
    fn ack(&self, sandbox: &str, generation: u64, term: u64, resend: bool) {
        let now = Instant::now();
        {
            let mut sent = Self::lock(&self.acks_sent);
            let key = (sandbox.to_string(), generation, term);
            if resend
                && sent
                    .get(&key)
                    .is_some_and(|at| now.duration_since(*at) < ACK_RESEND_AFTER)
            {
                return;
            }
            sent.insert(key, now);
        }
        self.send(supervisor_message::Message::Ack(TermAck {
            sandbox_id: sandbox.to_string(),
            generation,
            term,
        }));
    }

    /// Forgets the acks sent whose assignment is acknowledged or gone.
    fn forget_acks(&self, snapshot: &AssignmentSnapshot) {
        Self::lock(&self.acks_sent).retain(|(sandbox, generation, term), _| {
            snapshot.assignments.iter().any(|a| {
                &a.sandbox_id == sandbox
                    && a.generation == *generation
                    && a.term == *term
                    && !a.acknowledged
            })
        });
    }

    /// The `HostStatus` this process sends now.
    fn host_status(&self) -> HostStatus {
        HostStatus {
            draining: self.draining.load(Ordering::SeqCst),
            active_sandboxes: self.session_ids(),
            stopping: self.stopping.load(Ordering::SeqCst),
        }
    }

    /// Sandbox ids with a live session.
    pub fn session_ids(&self) -> Vec<String> {
        Self::lock(&self.sessions).keys().cloned().collect()
    }

    /// Takes what a gateway's `HelloAccepted` says: the incarnation the pool
    /// assigned this process (log-ordered). A gateway whose grant key is not
    /// trusted is refused first (nothing is taken from it).
    fn accept(&self, accepted: &HelloAccepted) -> anyhow::Result<()> {
        if accepted.incarnation == 0 {
            anyhow::bail!(
                "the gateway assigned no incarnation (a gateway older than this supervisor)"
            );
        }
        self.check_grant_key(&accepted.cluster_public_key)?;
        self.incarnation
            .store(accepted.incarnation, Ordering::SeqCst);
        Ok(())
    }

    /// Refuses a gateway that signs grants with a key outside the trusted
    /// set (never learned from the wire); an `--insecure` supervisor
    /// without trusted keys accepts any.
    fn check_grant_key(&self, key: &str) -> anyhow::Result<()> {
        let Some(trusted) = &self.config.trusted_keys else {
            return Ok(());
        };
        if trusted.current().trusts(key) {
            return Ok(());
        }
        let fingerprint = match proto::grant::fingerprint(key) {
            f if f.is_empty() => "(none)".to_string(),
            f => f,
        };
        anyhow::bail!(
            "untrusted grant key: the gateway signs grants with key {fingerprint}, which is not a trusted \
             grant key ({}); refusing to attach to it",
            trusted.describe()
        )
    }

    /// After the gateways said the pool retired this incarnation (it
    /// expired while we were paused or cut off, or it left): continue as a
    /// new incarnation, as a restarted process would: a new process id and
    /// known incarnation 0, so the next join asks the pool for the next
    /// number. Sessions of the old incarnation end when their runtimes
    /// fence them (their sandboxes were taken over). A *superseded*
    /// incarnation (another process of this member id joined later) is not
    /// renewed: two processes sharing a member id would otherwise take the
    /// member from each other in turn.
    fn renew_incarnation(&self) {
        let old = self.incarnation.swap(0, Ordering::SeqCst);
        self.process_id.store(new_process_id(), Ordering::SeqCst);
        tracing::warn!(
            old,
            "the pool retired this incarnation; re-joining as a new one"
        );
    }
}

/// A random process id, never 0 (0 marks a legacy hello).
fn new_process_id() -> u64 {
    rand::thread_rng().gen_range(1..=u64::MAX)
}

/// Whether a gateway's refusal says the pool retired this incarnation
/// (expired or left), as opposed to every other refusal, a superseded
/// incarnation included. The gateway says so with a typed
/// [`AttachRefusal`] in the status metadata ([`proto::attach`]) when it
/// refuses a join and when it closes an attached stream;
/// `t25_paused_owner` exercises both.
fn is_retired(status: &tonic::Status) -> bool {
    proto::attach::refusal_of(status) == Some(AttachRefusal::IncarnationRetired)
}

/// Whether a gateway's refusal says the gateway itself is stopping (not a
/// verdict on this supervisor): attach elsewhere at once.
fn is_gateway_leaving(status: &tonic::Status) -> bool {
    proto::attach::refusal_of(status) == Some(AttachRefusal::GatewayLeaving)
}

/// How a stream to a gateway ended, which decides when the next attach
/// happens.
/// How long a supervisor waits before it resends the `TermAck` of a term a
/// snapshot still shows unacknowledged (the first ack goes out at once).
pub const ACK_RESEND_AFTER: Duration = Duration::from_secs(1);

/// How long an accepted stream must have served for its failure to count
/// as a fresh one (re-attach at once) rather than one more in a row.
const BROKEN_AFTER_SERVING: Duration = Duration::from_secs(10);

#[derive(Debug)]
enum Ended {
    /// The gateway closed the stream: the next gateway after the backoff.
    Closed,
    /// The gateway is stopping (with its reason): the next gateway at once.
    GatewayLeaving(String),
    /// An accepted stream failed (the gateway died, stalled past the
    /// keep-alive, or closed it with an error): the next gateway at once,
    /// since every heartbeat interval spent backing off eats into the
    /// member's TTL. Only once per gateway in a row: a gateway that accepts
    /// and fails at once gets the backoff.
    Broken(anyhow::Error),
}

/// Runs the supervisor until `shutdown` completes, leaving its sessions to
/// their runtimes (no drain): [`run_until_stopped`] with one signal.
///
/// # Errors
/// When the health port cannot be bound.
pub async fn run(
    config: AgentConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let config = AgentConfig {
        drain_on_stop: false,
        ..config
    };
    run_until_stopped(config, futures_stream_once(shutdown)).await
}

/// A stream yielding once, when `f` completes, and never again.
fn futures_stream_once(
    f: impl Future<Output = ()> + Send + 'static,
) -> impl futures::Stream<Item = ()> + Send + Unpin + 'static {
    use futures::StreamExt;
    Box::pin(futures::stream::once(f).chain(futures::stream::pending()))
}

/// Runs the supervisor until it is stopped: each item of `signals` is one
/// stop signal (SIGTERM, SIGINT). The first one drains and leaves
/// (`config.drain_on_stop`, [`stop`]) or returns at once; a second one
/// during the drain returns at once.
///
/// # Errors
/// When the health port cannot be bound.
pub async fn run_until_stopped(
    config: AgentConfig,
    mut signals: impl futures::Stream<Item = ()> + Send + Unpin + 'static,
) -> anyhow::Result<()> {
    let process_id = new_process_id();
    if config.runtime_dir.is_some() || config.runtime_bin.is_some() {
        tracing::warn!(
            "--runtime-dir and --runtime-bin are ignored: the gateway leader launches runtimes \
             (its --sandbox-driver) and assignments carry their endpoints"
        );
    }
    let agent = Arc::new(Agent::new(config, process_id));
    if agent.config.insecure {
        tracing::warn!(
            "--insecure: this supervisor may run without a credential and learns the grant key from whichever \
             gateway answers its hello (a spoofed gateway owns every runtime started after it); experiments only"
        );
    }
    tracing::info!(
        member = %agent.config.member_id,
        process_id,
        advertise = %agent.advertise_address,
        gateways = ?agent.config.gateways,
        "supervisor starting (no inbound gRPC port: exec arrives on the stream to the gateway)"
    );
    let mut tasks = Vec::new();
    if let Some(addr) = agent.config.http_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding the health port {addr}"))?;
        tracing::info!(%addr, "health endpoints listening (/healthz /readyz /metrics)");
        tasks.push(tokio::spawn(health::serve(listener, agent.clone())));
    }
    if let Some(tls) = &agent.config.gateway_client.tls {
        tasks.push(proto::tls::Reloader::spawn(
            tls.clone(),
            proto::tls::RELOAD_EVERY,
        ));
    }
    tasks.push(tokio::spawn(attach_loop(agent.clone())));
    futures::StreamExt::next(&mut signals).await;
    if agent.config.drain_on_stop {
        tokio::select! {
            () = stop::drain_and_leave(&agent) => {}
            Some(()) = futures::StreamExt::next(&mut signals) => {
                tracing::warn!("second stop signal: exiting at once, without waiting for the drain or leaving");
            }
        }
    } else {
        tracing::info!("supervisor stopping; sessions are left to their runtimes");
    }
    for t in tasks {
        t.abort();
    }
    Ok(())
}

/// Attaches to gateways forever: one at a time, next on failure, with
/// exponential backoff (bounded, ±50% jitter). A gateway that is leaving
/// sends us to the next one at once; only when every gateway of the list
/// said so in a row does the backoff apply again.
async fn attach_loop(agent: Arc<Agent>) {
    let gateways = agent.config.gateways.clone();
    let mut next = if agent.config.listed_order {
        0
    } else {
        rand::thread_rng().gen_range(0..gateways.len())
    };
    let mut failures: u32 = 0;
    let mut leaving_in_a_row: usize = 0;
    let mut broken_in_a_row: usize = 0;
    loop {
        if *agent.left.borrow() {
            // Left the pool: never re-join (the process is exiting).
            return;
        }
        let gateway = gateways[next % gateways.len()].clone();
        next += 1;
        let started = std::time::Instant::now();
        let ended = attach_once(&agent, &gateway).await;
        if *agent.left.borrow() {
            // Left the pool: the stream's end is the leave; the process is
            // exiting.
            return;
        }
        match ended {
            Ok(Ended::Closed) => {
                agent.metrics.reconnect("closed");
                failures = 0;
                leaving_in_a_row = 0;
                broken_in_a_row = 0;
                agent.set_not_ready(format!("stream to gateway {gateway} ended; re-attaching"));
            }
            Ok(Ended::GatewayLeaving(reason)) => {
                agent.metrics.reconnect("gateway_leaving");
                failures = 0;
                broken_in_a_row = 0;
                leaving_in_a_row += 1;
                let to = &gateways[next % gateways.len()];
                tracing::info!(%gateway, %reason, next = %to, "gateway leaving: attaching to the next one at once");
                agent.set_not_ready(format!(
                    "gateway {gateway} is leaving ({reason}); attaching to {to}"
                ));
                *Agent::lock(&agent.outbound) = None;
                if leaving_in_a_row < gateways.len() {
                    continue;
                }
            }
            Ok(Ended::Broken(e)) => {
                agent.metrics.reconnect("broken");
                failures = 0;
                leaving_in_a_row = 0;
                // A stream that served a while is no sign of a gateway
                // that fails at once: the count starts again.
                if started.elapsed() >= BROKEN_AFTER_SERVING {
                    broken_in_a_row = 0;
                }
                broken_in_a_row += 1;
                let to = &gateways[next % gateways.len()];
                tracing::warn!(%gateway, error = format!("{e:#}"), next = %to, "attached stream failed: attaching to the next gateway at once");
                agent.set_not_ready(format!(
                    "stream to gateway {gateway} failed ({e}); attaching to {to}"
                ));
                *Agent::lock(&agent.outbound) = None;
                if broken_in_a_row < gateways.len() {
                    continue;
                }
            }
            Err(e) => {
                agent.metrics.reconnect("attach_failed");
                failures = failures.saturating_add(1);
                leaving_in_a_row = 0;
                broken_in_a_row = 0;
                tracing::warn!(%gateway, error = format!("{e:#}"), "attach failed");
                agent.set_not_ready(format!("not attached: gateway {gateway}: {e:#}"));
            }
        }
        *Agent::lock(&agent.outbound) = None;
        let base = agent
            .config
            .min_backoff
            .saturating_mul(1u32 << failures.min(5))
            .min(agent.config.max_backoff);
        let jitter = rand::thread_rng().gen_range(0.5..1.5);
        tokio::time::sleep(base.mul_f64(jitter)).await;
    }
}

/// One stream to `gateway`: hello, `HelloAccepted`, then snapshots until
/// the stream ends. Returns how it ended.
async fn attach_once(agent: &Arc<Agent>, gateway: &str) -> anyhow::Result<Ended> {
    let channel = client::connect(
        Role::SupervisorToGateway,
        gateway,
        &agent.config.gateway_client,
    )
    .await
    .context("connecting")?;
    let mut client = SupervisorHostClient::new(channel);
    let (tx, rx) = mpsc::channel::<SupervisorMessage>(256);
    let hello = HostHello {
        member_id: agent.config.member_id.clone(),
        member_uid: agent.config.member_uid.clone(),
        advertise_address: agent.advertise_address.clone(),
        capacity: agent.config.capacity,
        credential: agent.config.current_credential().expose().to_string(),
        process_id: agent.process_id.load(Ordering::SeqCst),
        known_incarnation: agent.incarnation.load(Ordering::SeqCst),
        // The legacy, clock-chosen incarnation: never sent.
        incarnation: 0,
    };
    tx.send(SupervisorMessage {
        message: Some(supervisor_message::Message::Hello(hello)),
    })
    .await?;
    let mut inbound = match client.attach(ReceiverStream::new(rx)).await {
        Ok(response) => response.into_inner(),
        Err(status) => return stream_error(agent, status),
    };
    let accepted = match inbound.message().await {
        Ok(Some(m)) => match m.message {
            Some(gateway_message::Message::Accepted(a)) => a,
            _ => anyhow::bail!("the gateway did not accept the hello"),
        },
        Ok(None) => anyhow::bail!("the gateway closed the stream"),
        Err(status) => return stream_error(agent, status),
    };
    agent.accept(&accepted)?;
    *Agent::lock(&agent.outbound) = Some(tx.clone());
    // A new stream: every ack still owed goes out on it at once.
    Agent::lock(&agent.acks_sent).clear();
    agent.attached.store(true, Ordering::SeqCst);
    tracing::info!(%gateway, gateway_node = accepted.gateway_node_id, incarnation = accepted.incarnation, "attached");
    let interval = Duration::from_millis(accepted.status_interval_ms.clamp(10, 10_000));
    let status_task = spawn_status(agent.clone(), tx.clone(), interval);
    let result = follow(agent, &mut inbound, &tx).await;
    status_task.abort();
    Ok(result.unwrap_or_else(Ended::Broken))
}

/// Sends `HostStatus` on `tx` every `interval` until the stream closes.
fn spawn_status(
    agent: Arc<Agent>,
    tx: mpsc::Sender<SupervisorMessage>,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        loop {
            ticker.tick().await;
            let message = SupervisorMessage {
                message: Some(supervisor_message::Message::Status(agent.host_status())),
            };
            if tx.send(message).await.is_err() {
                return;
            }
        }
    })
}

/// Follows an accepted stream: reconciles every snapshot (and the last one
/// every second) and starts every exec call (answered on `tx`, the same
/// stream), until the stream ends, fails or the gateway leaves.
async fn follow(
    agent: &Arc<Agent>,
    inbound: &mut tonic::Streaming<proto::supervisor_host::GatewayMessage>,
    tx: &mpsc::Sender<SupervisorMessage>,
) -> anyhow::Result<Ended> {
    let mut reconcile = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            message = inbound.message() => {
                let message = match message {
                    Ok(Some(message)) => message,
                    Ok(None) => return Ok(Ended::Closed),
                    Err(status) => return stream_error(agent, status),
                };
                match message.message {
                    Some(gateway_message::Message::Leaving(leaving)) => {
                        return Ok(Ended::GatewayLeaving(leaving.reason))
                    }
                    Some(gateway_message::Message::Snapshot(snapshot)) => {
                        agent.draining.store(snapshot.draining, Ordering::SeqCst);
                        *Agent::lock(&agent.last_snapshot) = Some(snapshot.clone());
                        session::reconcile(agent, &snapshot);
                    }
                    Some(gateway_message::Message::Exec(call)) => {
                        exec::spawn(agent, tx.clone(), call);
                    }
                    Some(gateway_message::Message::Left(_)) => {
                        agent.left.send_replace(true);
                    }
                    // A second HelloAccepted, or a message of a newer
                    // gateway this supervisor does not know: ignored.
                    Some(gateway_message::Message::Accepted(_)) | None => {}
                }
            }
            _ = reconcile.tick() => {
                let last = Agent::lock(&agent.last_snapshot).clone();
                if let Some(snapshot) = last {
                    session::reconcile(agent, &snapshot);
                }
            }
        }
    }
}

/// What a gateway's error status means for the attach loop: a leaving
/// gateway sends us elsewhere at once; a retired incarnation is renewed
/// (then the error, like every other, goes through the backoff).
fn stream_error(agent: &Agent, status: tonic::Status) -> anyhow::Result<Ended> {
    if is_gateway_leaving(&status) {
        return Ok(Ended::GatewayLeaving(status.message().to_string()));
    }
    if is_retired(&status) {
        if agent.leave_sent.load(Ordering::SeqCst) {
            // Asked to leave: the retirement is the leave (its HostLeft may
            // not have arrived before the stream closed).
            agent.left.send_replace(true);
            return Err(describe(status));
        }
        agent.renew_incarnation();
    }
    Err(describe(status))
}

/// A gRPC status as an error that reads well in /readyz.
fn describe(status: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{:?}: {}", status.code(), status.message())
}

#[cfg(test)]
mod tests {
    use super::{is_gateway_leaving, is_retired};
    use proto::attach::refusal_status;
    use proto::supervisor_host::AttachRefusal;
    use tonic::{Code, Status};

    #[test]
    fn only_a_retired_incarnation_is_renewed() {
        assert!(is_retired(&refusal_status(
            Code::FailedPrecondition,
            "join rejected: incarnation retired (expired or left)",
            AttachRefusal::IncarnationRetired,
        )));
        for other in [
            // Another process of this member id is newer: do not fight it.
            refusal_status(
                Code::FailedPrecondition,
                "join rejected: stale incarnation: command has 5, current is 9",
                AttachRefusal::IncarnationSuperseded,
            ),
            // The words alone are not the typed refusal.
            Status::failed_precondition("join rejected: incarnation retired (expired or left)"),
            Status::failed_precondition("join rejected: zero capacity"),
            Status::unavailable("no leader"),
        ] {
            assert!(!is_retired(&other), "{other}");
        }
    }

    #[test]
    fn a_leaving_gateway_is_no_verdict_on_the_incarnation() {
        let leaving = refusal_status(
            Code::Unavailable,
            "gateway 2 is shutting down; attach to another gateway",
            AttachRefusal::GatewayLeaving,
        );
        assert!(is_gateway_leaving(&leaving));
        assert!(!is_retired(&leaving));
        let retired = refusal_status(
            Code::FailedPrecondition,
            "join rejected: incarnation retired (expired or left)",
            AttachRefusal::IncarnationRetired,
        );
        assert!(!is_gateway_leaving(&retired));
        assert!(!is_gateway_leaving(&Status::unavailable("shutting down")));
    }
}

/// An insecure agent of member `m1` that dials nothing (unit tests).
#[cfg(test)]
pub(crate) fn test_agent() -> Agent {
    let config = RawAgentConfig {
        gateways: vec!["127.0.0.1:1".into()],
        member_id: Some("m1".into()),
        member_uid: Some("u1".into()),
        advertise_ip: Some("127.0.0.1".into()),
        insecure: true,
        ..Default::default()
    }
    .validate()
    .unwrap_or_else(|e| panic!("{e}"));
    Agent::new(config, 1)
}

#[cfg(test)]
mod ack_tests {
    use super::*;
    use proto::supervisor_host::SandboxInstanceAssignment;

    fn agent() -> (Agent, mpsc::Receiver<SupervisorMessage>) {
        let agent = test_agent();
        let (tx, rx) = mpsc::channel(16);
        *Agent::lock(&agent.outbound) = Some(tx);
        (agent, rx)
    }

    fn acks(rx: &mut mpsc::Receiver<SupervisorMessage>) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        while let Ok(m) = rx.try_recv() {
            if let Some(supervisor_message::Message::Ack(a)) = m.message {
                out.push((a.sandbox_id, a.term));
            }
        }
        out
    }

    /// - the first ack of a term goes out at once; a resend within
    ///   `ACK_RESEND_AFTER` does not (snapshots arrive after every applied
    ///   batch; each resent ack was a raft write: t107)
    /// - another term's ack goes out at once
    /// - once a snapshot shows the term acknowledged (or gone) it is
    ///   forgotten, and a new stream resends every owed ack at once
    #[test]
    fn an_owed_ack_is_resent_at_most_once_per_interval_per_stream() {
        let (agent, mut rx) = agent();
        agent.ack("sb-1", 1, 1, false);
        agent.ack("sb-1", 1, 1, true);
        agent.ack("sb-1", 1, 1, true);
        agent.ack("sb-1", 1, 2, true);
        assert_eq!(acks(&mut rx), [("sb-1".into(), 1), ("sb-1".into(), 2)]);
        let owed = |term, acknowledged| SandboxInstanceAssignment {
            sandbox_id: "sb-1".into(),
            generation: 1,
            term,
            acknowledged,
            ..Default::default()
        };
        agent.forget_acks(&AssignmentSnapshot {
            assignments: vec![owed(1, true), owed(2, false)],
            ..Default::default()
        });
        agent.ack("sb-1", 1, 1, true);
        agent.ack("sb-1", 1, 2, true);
        assert_eq!(acks(&mut rx), [("sb-1".into(), 1)]);
        Agent::lock(&agent.acks_sent).clear();
        agent.ack("sb-1", 1, 2, true);
        assert_eq!(acks(&mut rx), [("sb-1".into(), 2)]);
    }
}

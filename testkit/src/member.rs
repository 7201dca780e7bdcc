//! The scripted supervisor member: the `SupervisorHost.Attach` stream
//! protocol spoken by a tokio task instead of an `openshell-supervisor`
//! process.
//!
//! Two layers:
//! - the protocol ([`hello`], [`host_status`], [`term_ack`], [`attach`],
//!   [`spawn_pinger`]): open a stream with a `HostHello`, wait for
//!   `HelloAccepted`, send `HostStatus` at an interval (held while paused),
//!   acknowledge terms. Jepsen's scripted member
//!   (`jepsen::members::scripted`) is built on these and adds its history,
//!   pauses and reports;
//! - [`ScriptedMember`], the member the gateway-plugin tests run: it
//!   attaches to one gateway (failing over to the next when the stream
//!   breaks), sends `HostStatus` every 100 ms, and acknowledges every
//!   assignment term after `ack_delay` (standing in for the grant handshake
//!   with the sandbox runtime).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proto::client::{connect, connect_via, ClientConfig, ClientError, Dialer, Role};
use proto::supervisor_host::supervisor_host_client::SupervisorHostClient;
use proto::supervisor_host::{
    gateway_message, supervisor_message, AssignmentSnapshot, GatewayMessage, HelloAccepted,
    HostHello, HostStatus, SandboxInstanceAssignment, SupervisorMessage, TermAck,
};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

/// The `HostHello` that opens a member's stream (`member_uid` is
/// `uid-<member>`; no credential): process `process_id` (never 0), which
/// last held `known_incarnation` (0 asks the pool for a new one; the pool
/// assigns incarnations in log order, docs/design/0002).
pub fn hello(
    member: &str,
    process_id: u64,
    known_incarnation: u64,
    capacity: u32,
    advertise_address: String,
) -> SupervisorMessage {
    SupervisorMessage {
        message: Some(supervisor_message::Message::Hello(HostHello {
            member_id: member.into(),
            member_uid: format!("uid-{member}"),
            advertise_address,
            capacity,
            credential: String::new(),
            process_id,
            known_incarnation,
            ..HostHello::default()
        })),
    }
}

/// An empty `HostStatus` (the member's liveness).
pub fn host_status() -> SupervisorMessage {
    SupervisorMessage {
        message: Some(supervisor_message::Message::Status(HostStatus::default())),
    }
}

/// The `TermAck` of an assignment's term.
pub fn term_ack(a: &SandboxInstanceAssignment) -> SupervisorMessage {
    SupervisorMessage {
        message: Some(supervisor_message::Message::Ack(TermAck {
            sandbox_id: a.sandbox_id.clone(),
            generation: a.generation,
            term: a.term,
        })),
    }
}

/// The terms a scripted member has acknowledged: `(sandbox, generation,
/// term)`.
pub type Acked = std::collections::BTreeSet<(String, u64, u64)>;

/// Acknowledges, on `tx`, every unacknowledged assignment of `snapshot` not
/// acknowledged yet (without waiting: a full channel is retried on the next
/// snapshot), and forgets the terms `snapshot` no longer holds. Returns how
/// many acknowledgements it sent.
pub fn acknowledge_new_terms(
    acked: &mut Acked,
    snapshot: &AssignmentSnapshot,
    tx: &mpsc::Sender<SupervisorMessage>,
) -> usize {
    acked.retain(|k| {
        snapshot
            .assignments
            .iter()
            .any(|a| (&a.sandbox_id, a.generation, a.term) == (&k.0, k.1, k.2))
    });
    let mut sent = 0;
    for a in snapshot.assignments.iter().filter(|a| !a.acknowledged) {
        let key = (a.sandbox_id.clone(), a.generation, a.term);
        if !acked.contains(&key) && tx.try_send(term_ack(a)).is_ok() {
            acked.insert(key);
            sent += 1;
        }
    }
    sent
}

/// An open member stream, after `HelloAccepted`.
pub struct Attached {
    /// What the member sends (the hello was sent first).
    pub tx: mpsc::Sender<SupervisorMessage>,
    /// What the gateway streams back (after `HelloAccepted`).
    pub inbound: tonic::Streaming<GatewayMessage>,
    /// The accepting gateway's node id.
    pub gateway_node_id: u64,
    /// The incarnation the pool assigned (`HelloAccepted`): grants name
    /// it, and the next hello of this process sends it back.
    pub incarnation: u64,
    /// How often the gateway asked for `HostStatus`
    /// (`HelloAccepted.status_interval_ms`, bounded as the supervisor
    /// bounds it).
    pub status_interval: Duration,
}

impl Attached {
    fn accepted(
        tx: mpsc::Sender<SupervisorMessage>,
        inbound: tonic::Streaming<GatewayMessage>,
        accepted: &HelloAccepted,
    ) -> Self {
        Self {
            tx,
            inbound,
            gateway_node_id: accepted.gateway_node_id,
            incarnation: accepted.incarnation,
            status_interval: Duration::from_millis(accepted.status_interval_ms.clamp(10, 10_000)),
        }
    }
}

/// Opens a stream to `gateway` (`ip:port`), sends `hello` and waits for
/// `HelloAccepted`.
///
/// # Errors
/// The gateway's status when it refuses; `unavailable` ("connection
/// refused: ...") when it cannot be reached or the stream ends before
/// `HelloAccepted`; `internal` when the first message is something else.
pub async fn attach(
    gateway: &str,
    connect_timeout: Duration,
    hello: SupervisorMessage,
    buffer: usize,
) -> Result<Attached, tonic::Status> {
    // A supervisor's stream, without keepalive pings: the scripted member
    // notices a vanished gateway by its stream ending.
    let config = ClientConfig {
        keepalive_interval: None,
        ..ClientConfig::for_role(Role::SupervisorToGateway).with_connect_timeout(connect_timeout)
    };
    attach_via(gateway, &config, None, hello, buffer).await
}

/// [`attach`] with the client settings `config`, dialing through `dialer`
/// (the simulation's network) or, with `None`, over TCP.
///
/// # Errors
/// As [`attach`].
pub async fn attach_via(
    gateway: &str,
    config: &ClientConfig,
    dialer: Option<&Dialer>,
    hello: SupervisorMessage,
    buffer: usize,
) -> Result<Attached, tonic::Status> {
    let (tx, rx) = mpsc::channel::<SupervisorMessage>(buffer);
    let _ = tx.try_send(hello);
    let role = Role::SupervisorToGateway;
    let channel = match dialer {
        Some(dialer) => connect_via(role, gateway, config, dialer).await,
        None => connect(role, gateway, config).await,
    }
    .map_err(|e| match e {
        ClientError::InvalidAddress { .. } => tonic::Status::internal(e.to_string()),
        ClientError::Unreachable { source, .. } => {
            tonic::Status::unavailable(format!("connection refused: {source}"))
        }
    })?;
    let mut client = SupervisorHostClient::new(channel);
    let mut inbound = client.attach(ReceiverStream::new(rx)).await?.into_inner();
    match inbound.message().await? {
        Some(m) => match m.message {
            Some(gateway_message::Message::Accepted(a)) => Ok(Attached::accepted(tx, inbound, &a)),
            _ => Err(tonic::Status::internal(
                "first message is not HelloAccepted",
            )),
        },
        None => Err(tonic::Status::unavailable(
            "stream ended before HelloAccepted",
        )),
    }
}

/// Sends [`host_status`] on `tx` every `interval` while `paused` reads
/// false, until the stream closes; abort the handle to stop it sooner.
pub fn spawn_pinger(
    tx: mpsc::Sender<SupervisorMessage>,
    interval: Duration,
    mut paused: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let _ = paused.wait_for(|p| !*p).await;
            if tx.send(host_status()).await.is_err() {
                return;
            }
            tokio::time::sleep(interval).await;
        }
    })
}

/// What the scripted member saw.
#[derive(Default)]
pub struct Seen {
    /// sandbox id -> latest assignment.
    pub assignments: BTreeMap<String, SandboxInstanceAssignment>,
    /// Gateways it attached to, in order.
    pub attached_to: Vec<String>,
    /// The incarnation the pool granted; sent back as the known
    /// incarnation when it re-attaches.
    pub incarnation: u64,
}

/// How long a scripted member waits before it resends an ack a snapshot
/// still shows owed (the supervisor's `ACK_RESEND_AFTER`).
pub const ACK_RESEND_AFTER: Duration = Duration::from_secs(1);

/// A running scripted member; dropping it stops it.
pub struct ScriptedMember {
    /// Member id.
    pub member: String,
    /// What it saw, updated as it runs.
    pub seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

/// Who the member is and how it behaves.
#[derive(Clone, Debug)]
struct Script {
    member: String,
    /// The process id its hellos carry.
    process_id: u64,
    capacity: u32,
    ack_delay: Duration,
}

impl ScriptedMember {
    /// Starts it as process `process_id` (never 0; the pool assigns the
    /// incarnation): attaches to `gateways` in turn from the first.
    pub fn start(
        member: &str,
        process_id: u64,
        capacity: u32,
        gateways: Vec<String>,
        ack_delay: Duration,
    ) -> Self {
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let script = Script {
            member: member.to_string(),
            process_id,
            capacity,
            ack_delay,
        };
        let task = tokio::spawn(run(script, gateways, seen.clone(), stop.clone()));
        ScriptedMember {
            member: member.to_string(),
            seen,
            stop,
            task,
        }
    }

    /// Sandboxes currently assigned to it.
    pub fn sandboxes(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .assignments
            .keys()
            .cloned()
            .collect()
    }

    /// Waits until it has attached to some gateway (panics after
    /// [`crate::gateway::eventually`]'s deadline).
    pub async fn wait_attached(&self) {
        crate::gateway::eventually("the member attached", || async {
            let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            match seen.attached_to.is_empty() {
                true => Err(format!("{} not attached yet", self.member).into()),
                false => Ok(()),
            }
        })
        .await;
    }

    /// Stops the task and its stream.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.abort();
    }
}

impl Drop for ScriptedMember {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn run(script: Script, gateways: Vec<String>, seen: Arc<Mutex<Seen>>, stop: Arc<AtomicBool>) {
    let mut next = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let gateway = gateways[next % gateways.len()].clone();
        next += 1;
        let _ = attach_once(&script, &gateway, &seen).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn attach_once(
    script: &Script,
    gateway: &str,
    seen: &Arc<Mutex<Seen>>,
) -> Result<(), tonic::Status> {
    let advertise = format!("127.0.0.1:1{:04}", script.process_id % 10_000);
    let known = seen.lock().unwrap_or_else(|p| p.into_inner()).incarnation;
    let hello = hello(
        &script.member,
        script.process_id,
        known,
        script.capacity,
        advertise,
    );
    let Attached {
        tx,
        mut inbound,
        incarnation,
        ..
    } = attach(gateway, Duration::from_millis(300), hello, 64).await?;
    {
        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.attached_to.push(gateway.to_string());
        seen.incarnation = incarnation;
    }
    // Never paused: the sender lives as long as the pinger needs it.
    let (_never_paused, paused) = watch::channel(false);
    // Aborted when this future ends or is dropped ([`ScriptedMember::stop`]
    // aborts the task): a stopped member's heartbeats stop with it.
    let _pinger = StopOnDrop(spawn_pinger(tx.clone(), Duration::from_millis(100), paused));
    // (sandbox, generation, term) -> when its ack was last sent on this
    // stream: as the supervisor does, an ack a snapshot still shows owed is
    // resent at most once per `ACK_RESEND_AFTER`.
    let mut acks_sent = AcksSent::new();
    let result = async {
        while let Some(message) = inbound.message().await? {
            let Some(gateway_message::Message::Snapshot(snapshot)) = message.message else {
                continue;
            };
            {
                let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                seen.assignments = snapshot
                    .assignments
                    .iter()
                    .map(|a| (a.sandbox_id.clone(), a.clone()))
                    .collect();
            }
            for a in acks_due(&mut acks_sent, snapshot, Instant::now()) {
                let tx = tx.clone();
                let ack_delay = script.ack_delay;
                tokio::spawn(async move {
                    tokio::time::sleep(ack_delay).await;
                    let _ = tx.send(term_ack(&a)).await;
                });
            }
        }
        Ok::<(), tonic::Status>(())
    }
    .await;
    result
}

/// When each term's ack was last sent: `(sandbox, generation, term)` ->
/// the time.
pub type AcksSent = BTreeMap<(String, u64, u64), Instant>;

/// The assignments of `snapshot` whose ack is owed and not sent within
/// [`ACK_RESEND_AFTER`] before `now` (as the supervisor does, an ack a
/// snapshot still shows owed is resent at most that often); records them
/// in `acks_sent` as sent at `now`.
pub fn acks_due(
    acks_sent: &mut AcksSent,
    snapshot: AssignmentSnapshot,
    now: Instant,
) -> Vec<SandboxInstanceAssignment> {
    let owed = |a: &SandboxInstanceAssignment| (a.sandbox_id.clone(), a.generation, a.term);
    let due: Vec<SandboxInstanceAssignment> = snapshot
        .assignments
        .into_iter()
        .filter(|a| !a.acknowledged)
        .filter(|a| {
            acks_sent
                .get(&owed(a))
                .is_none_or(|at| now.duration_since(*at) >= ACK_RESEND_AFTER)
        })
        .collect();
    for a in &due {
        acks_sent.insert(owed(a), now);
    }
    due
}

/// Aborts a task when dropped.
struct StopOnDrop(tokio::task::JoinHandle<()>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// [`hello`] presenting `credential` (the supervisor credential a secure
/// gateway requires).
pub fn hello_with_credential(
    member: &str,
    process_id: u64,
    known_incarnation: u64,
    capacity: u32,
    advertise_address: String,
    credential: &str,
) -> SupervisorMessage {
    let mut message = hello(
        member,
        process_id,
        known_incarnation,
        capacity,
        advertise_address,
    );
    if let Some(supervisor_message::Message::Hello(h)) = &mut message.message {
        h.credential = credential.to_string();
    }
    message
}

/// Whether a scripted member's connection sends HTTP/2 keep-alive pings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pings {
    /// None: the member notices a vanished gateway by its stream ending.
    Off,
    /// As `openshell-supervisor` sends them (`Role::SupervisorToGateway`:
    /// a ping after 500 ms without a frame read). A gateway answers each
    /// one, so a benchmark of a gateway's cost per supervisor needs them.
    AsSupervisor,
}

/// [`attach`] to a gateway serving TLS: the channel trusts `tls`'s CA
/// (`None`: plaintext, exactly as [`attach`]), connects from `local` (`None`:
/// the system's choice of local address), and pings as `pings` says.
///
/// # Errors
/// As [`attach`]; a gateway whose certificate the CA did not sign, or a
/// plaintext channel to a TLS port, ends as `unavailable`.
pub async fn attach_secure(
    gateway: &str,
    connect_timeout: Duration,
    tls: Option<proto::tls::ClientTls>,
    local: Option<std::net::IpAddr>,
    pings: Pings,
    hello: SupervisorMessage,
    buffer: usize,
) -> Result<Attached, tonic::Status> {
    let (tx, rx) = mpsc::channel::<SupervisorMessage>(buffer);
    let _ = tx.try_send(hello);
    let supervisor = ClientConfig::for_role(Role::SupervisorToGateway)
        .with_connect_timeout(connect_timeout)
        .with_tls(tls)
        .with_local_address(local);
    let config = match pings {
        Pings::Off => ClientConfig {
            keepalive_interval: None,
            ..supervisor
        },
        Pings::AsSupervisor => supervisor,
    };
    let channel = connect(Role::SupervisorToGateway, gateway, &config)
        .await
        .map_err(|e| match e {
            ClientError::InvalidAddress { .. } => tonic::Status::internal(e.to_string()),
            ClientError::Unreachable { source, .. } => {
                tonic::Status::unavailable(format!("connection refused: {source}"))
            }
        })?;
    let mut client = SupervisorHostClient::new(channel);
    let mut inbound = client.attach(ReceiverStream::new(rx)).await?.into_inner();
    let Some(first) = inbound.message().await? else {
        return Err(tonic::Status::unavailable(
            "stream ended before HelloAccepted",
        ));
    };
    let Some(gateway_message::Message::Accepted(a)) = first.message else {
        return Err(tonic::Status::internal(
            "first message is not HelloAccepted",
        ));
    };
    Ok(Attached::accepted(tx, inbound, &a))
}

/// Writes `DIR/gateway.toml` with a 60 s heartbeat TTL (a scripted member
/// stays eligible on a loaded machine) and returns its path, for
/// `--config`.
///
/// # Errors
/// The file cannot be written.
pub fn long_ttl_config(dir: &std::path::Path) -> std::io::Result<String> {
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        "[openshell.gateway.supervisor_pool]\nheartbeat_ttl_ms = 60000\n",
    )?;
    Ok(config.display().to_string())
}

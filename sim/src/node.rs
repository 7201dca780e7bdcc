//! One simulated gateway process: a real `raft_store::RaftNode` over the
//! in-memory stores, its raft transport served by tonic over the simulated
//! network, and a control channel the workload calls it through (standing
//! in for the gateway's client API, which the full simulation will serve
//! over the simulated network too).

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway_plugin::config_pool::PoolSettings;
use gateway_plugin::health::{self, Verdict};
use gateway_plugin::hub::Hub;
use gateway_plugin::launcher::Launcher;
use gateway_plugin::metrics::Metrics;
use gateway_plugin::state::{GatewayState, Reply};
use gateway_plugin::supervisor_host_service::SupervisorHostService;
use proto::grant::GrantSigner;
use proto::supervisor_host::supervisor_host_server::SupervisorHostServer;
use raft_store::objects::{
    object_command, object_result, precondition, Object, ObjectCommand, ObjectResult, Precondition,
    PutRequest,
};
use raft_store::{ClusterStatus, NodeConfig, RaftNode};
use tokio::sync::{mpsc, oneshot};

use crate::autopilot::StatefulSet;
use crate::disk::Disk;
use crate::driver::SimDriver;
use crate::invariants::{PoolCheck, Violations};
use crate::mem_log::{MemLog, SyncDelay};
use crate::mem_machine::MemMachine;
use crate::net;
use crate::trace::Trace;

/// How often the simulated gateways ask their members for a status
/// (`PoolSettings::status_interval`, told in `HelloAccepted`). 250 ms, the
/// gateway's default until 2026-12-06 (now a quarter of the heartbeat TTL,
/// 500 ms): kept, so that every recorded seed replays the schedule it was
/// found in.
const STATUS_INTERVAL: Duration = Duration::from_millis(250);

/// The raft port every simulated node listens on.
pub const PORT: u16 = 7001;
/// The object type the workload writes.
pub const TYPE: &str = "sim";

/// A node of the simulation: the real node, with the gateway's replicated
/// state (started over the in-memory stores: the node's type does not say
/// which stores it runs on).
pub type SimNode = RaftNode<GatewayState>;

/// The host name of node `id`.
pub fn host(id: u64) -> String {
    format!("n{id}")
}

/// The advertised address of node `id`.
pub fn addr(id: u64) -> String {
    format!("{}:{PORT}", host(id))
}

/// Membership changes and leadership transfer, as an operator (or the
/// autopilot) asks the leader for them.
#[derive(Clone, Debug)]
pub enum Admin {
    /// Add this node as a learner, returning once it caught up.
    AddLearner(u64),
    /// Promote this learner to voter.
    Promote(u64),
    /// Turn this voter into a learner.
    Demote(u64),
    /// Remove this node from the membership.
    Remove(u64),
    /// Move leadership to this voter.
    Transfer(u64),
}

/// What the workload asks a node.
#[derive(Debug)]
pub enum Call {
    /// Bootstrap the cluster with these voters.
    Init(Vec<(u64, String)>),
    /// Write an object (forwarded to the leader if need be), as the
    /// object store's `Put` does: with a request id, so that a retry of
    /// the same write after an unknown outcome is answered with the first
    /// attempt's outcome instead of applying twice.
    Put {
        /// Object id.
        id: String,
        /// Its payload.
        payload: Vec<u8>,
        /// Only if the object is at this resource version (`None`:
        /// unconditionally).
        version: Option<u64>,
        /// Names this write across its retries.
        request_id: String,
    },
    /// A linearizable read (read-index) of one object.
    Get {
        /// Object id.
        id: String,
    },
    /// The node's status.
    Status,
    /// A membership change or a leadership transfer (leader only).
    Admin(Admin),
    /// The applied index and the crc32 and length of the state's snapshot
    /// encoding.
    Digest,
    /// Admit a sandbox (`launch_id` is the idempotency key), as the pool
    /// admin service's `Launch` does.
    Launch {
        /// The sandbox id.
        sandbox: String,
        /// Names this launch across its retries.
        launch_id: String,
    },
    /// The pool as a linearizable read sees it.
    Pool,
    /// Readiness as the gateway's `/readyz` decides it
    /// (`gateway_plugin::health`): caught up with the commit index the
    /// node found at start-up and with the leader's.
    Ready,
}

/// A node's answer.
#[derive(Debug)]
pub enum Answer {
    /// Bootstrapped (or already was).
    Done,
    /// A put was applied at this resource version.
    Put(u64),
    /// A put's precondition failed: nothing was written.
    Rejected(String),
    /// A read: the object's payload and resource version, if it exists.
    Get(Option<(Vec<u8>, u64)>),
    /// The node's status.
    Status(Box<ClusterStatus>),
    /// See [`Call::Digest`].
    Digest(u64, u32, u64),
    /// A launch was admitted (or already had been).
    Launched,
    /// The pool's sandboxes.
    Pool(Vec<SandboxView>),
    /// See [`Call::Ready`]: whether ready, and why (not).
    Ready(Verdict),
    /// The call failed (the error, in words).
    Failed(String),
}

/// One sandbox as [`Call::Pool`] shows it.
#[derive(Clone, Debug)]
pub struct SandboxView {
    /// Its id.
    pub id: String,
    /// Its phase.
    pub phase: pool::Phase,
    /// Its owner's member id.
    pub owner: String,
    /// Whether the owner is an active member in the incarnation that owns
    /// the sandbox.
    pub owner_active: bool,
    /// Its generation.
    pub generation: u64,
    /// The name of its recorded runtime (the launcher's record), if any.
    pub runtime: Option<String>,
}

type Request = (Call, oneshot::Sender<Answer>);

/// Where the workload reaches the current process of one node: replaced at
/// every start, dead while the node is down. Cloning shares it.
#[derive(Clone, Default)]
pub struct Slot(Arc<Mutex<Option<mpsc::UnboundedSender<Request>>>>);

impl Slot {
    fn set(&self, sender: mpsc::UnboundedSender<Request>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(sender);
    }

    /// Calls the node's current process.
    ///
    /// # Errors
    /// [`Unanswered::Down`] when the call never reached a process (the node
    /// is down: it certainly did nothing), [`Unanswered::NoAnswer`] when the
    /// process died during the call or did not answer within `timeout` (it
    /// may have done it).
    pub async fn call(&self, call: Call, timeout: Duration) -> Result<Answer, Unanswered> {
        let sender = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(Unanswered::Down)?;
        let (reply, answer) = oneshot::channel();
        sender.send((call, reply)).map_err(|_| Unanswered::Down)?;
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(answer)) => Ok(answer),
            _ => Err(Unanswered::NoAnswer),
        }
    }
}

/// Why a call has no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unanswered {
    /// The node is down: the call reached no process.
    Down,
    /// The process died during the call, or did not answer in time.
    NoAnswer,
}

/// What one node runs on: kept by the harness across the node's restarts.
#[derive(Clone)]
pub struct NodeParts {
    /// The node's id.
    pub id: u64,
    /// Its disk.
    pub disk: Disk,
    /// Its fsync latencies.
    pub delay: SyncDelay,
    /// Where the workload reaches it.
    pub slot: Slot,
    /// The run's trace.
    pub trace: Trace,
    /// Where the pool checks report.
    pub violations: Violations,
    /// The runtime API this gateway's launcher drives when it leads; None:
    /// no launcher (a gateway with `--sandbox-driver none`).
    pub driver: Option<SimDriver>,
    /// The StatefulSet this gateway's voter autopilot reads; None: no
    /// autopilot.
    pub statefulset: Option<StatefulSet>,
}

/// The software of one simulated host: starts the node over its disk,
/// serves its raft transport, then answers the workload's calls forever.
///
/// # Errors
/// The node cannot start (the run fails with the error).
pub async fn run(parts: NodeParts) -> turmoil::Result {
    let NodeParts {
        id,
        disk,
        delay,
        slot,
        trace,
        violations,
        driver,
        statefulset,
    } = parts;
    let name = host(id);
    trace.record(format!("{name} start"), &[]);
    let mut config = NodeConfig::new(id, &addr(id), "/nonexistent/sim", "sim");
    // No periodic digest task (it hashes on a blocking thread, outside
    // the simulated schedule); the sim asks for digests itself.
    config.digest_every = 0;
    let log = MemLog::open(disk.clone(), id, delay)?.traced(trace.clone(), &name);
    let machine = MemMachine::open(disk)?
        .traced(trace.clone(), &name)
        .checked(
            PoolCheck::new(&name, violations, trace.clone())
                .with_killed(driver.as_ref().map(SimDriver::killed)),
        );
    let node: SimNode =
        RaftNode::start_on(config, log, machine, Some(net::dialer(trace.clone()))).await?;
    // As `gateway_plugin::embed` takes it: what readiness waits for.
    let commit_at_start = node.status().commit_index;
    // The gateway's supervision hub and its background tasks, as
    // `gateway_plugin::embed` starts them, on the default pool timing but
    // the members' status interval (250 ms: every recorded seed ran at it).
    let hub = Hub::new(
        node.clone(),
        PoolSettings {
            status_interval: STATUS_INTERVAL,
            ..PoolSettings::default()
        },
        GrantSigner::insecure_development_key("sim"),
        Metrics::new(),
    );
    tokio::spawn(hub.clone().run_heartbeats());
    tokio::spawn(hub.clone().run_snapshot_pusher());
    tokio::spawn(hub.clone().run_coordinator());
    if let Some(driver) = driver {
        let launcher = Launcher::new(hub.clone(), Arc::new(driver), None);
        tokio::spawn(launcher.run());
    }
    if let Some(statefulset) = statefulset {
        tokio::spawn(statefulset.autopilot(node.clone(), PORT).run());
    }
    let listener = net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, PORT)).await?;
    let server = tonic::transport::Server::builder()
        .add_service(node.transport_service())
        .add_service(SupervisorHostServer::new(SupervisorHostService::new(
            hub.clone(),
        )))
        .serve_with_incoming(net::incoming(listener, trace));
    tokio::spawn(server);
    let (sender, mut requests) = mpsc::unbounded_channel::<Request>();
    slot.set(sender);
    while let Some((call, reply)) = requests.recv().await {
        let hub = hub.clone();
        tokio::spawn(async move {
            let _ = reply.send(serve(&hub, commit_at_start, call).await);
        });
    }
    Ok(())
}

async fn serve(hub: &Hub, commit_at_start: u64, call: Call) -> Answer {
    let node = hub.node();
    match call {
        Call::Init(voters) => match node.initialize(voters).await {
            Ok(_) => Answer::Done,
            Err(e) => Answer::Failed(e.to_string()),
        },
        Call::Put {
            id,
            payload,
            version,
            request_id,
        } => put(node, id, payload, version, request_id).await,
        Call::Get { id } => get(node, &id).await,
        Call::Status => Answer::Status(Box::new(node.status())),
        Call::Admin(admin) => {
            let done = match admin {
                Admin::AddLearner(id) => node.add_learner(id, &addr(id), true).await.map(drop),
                Admin::Promote(id) => node.promote(id, false).await.map(drop),
                Admin::Demote(id) => node.demote(id).await.map(drop),
                Admin::Remove(id) => node.remove(id).await.map(drop),
                Admin::Transfer(id) => node.transfer_leader(Some(id)).await.map(drop),
            };
            match done {
                Ok(()) => Answer::Done,
                Err(e) => Answer::Failed(e.to_string()),
            }
        }
        Call::Digest => {
            let d = node.state_digest();
            Answer::Digest(d.applied_index, d.crc32, d.bytes)
        }
        Call::Launch { sandbox, launch_id } => launch(hub, sandbox, launch_id).await,
        Call::Pool => pool_view(node).await,
        Call::Ready => {
            // A verdict from this observation alone (no hysteresis): ready
            // exactly when nothing holds the gateway back now.
            let seen = health::observe(node, commit_at_start).await;
            Answer::Ready(health::next(
                &mut health::Memory::default(),
                &seen,
                std::time::Instant::now(),
            ))
        }
    }
}

/// The pool admin service's `Launch`: the command with its idempotency
/// key, proposed through the hub (forwarded to the leader if need be).
async fn launch(hub: &Hub, sandbox: String, launch_id: String) -> Answer {
    let command = pool::Command::Launch(pool::Launch {
        launch_id,
        sandbox,
        material_ref: String::new(),
    });
    match hub.propose(&command).await {
        Ok(pool::Outcome::Applied(pool::Effect::Admitted { .. })) => Answer::Launched,
        // Recorded as refused: this launch id is spent.
        Ok(pool::Outcome::Applied(pool::Effect::LaunchRefused(reason))) => {
            Answer::Rejected(reason.to_string())
        }
        Ok(pool::Outcome::Applied(other)) => Answer::Failed(format!("launch applied as {other:?}")),
        Ok(pool::Outcome::Rejected(reason)) => Answer::Rejected(reason.to_string()),
        Err(status) => Answer::Failed(status.to_string()),
    }
}

async fn pool_view(node: &SimNode) -> Answer {
    let read = node
        .read(|state, _| {
            let pool = &state.pool;
            pool.sandboxes()
                .values()
                .map(|s| SandboxView {
                    id: s.id.clone(),
                    phase: s.phase,
                    owner: s.owner.member.clone(),
                    owner_active: pool.member(&s.owner.member).is_some_and(|m| {
                        m.incarnation == s.owner.incarnation && pool.is_eligible(m)
                    }),
                    generation: s.generation,
                    runtime: s.runtime.as_ref().map(|r| r.name.clone()),
                })
                .collect()
        })
        .await;
    match read {
        Ok(sandboxes) => Answer::Pool(sandboxes),
        Err(e) => Answer::Failed(e.to_string()),
    }
}

async fn get(node: &SimNode, id: &str) -> Answer {
    let read = node
        .read(|state, _| {
            state
                .objects
                .get(TYPE, id)
                .map(|o| (o.payload.clone(), o.resource_version))
        })
        .await;
    match read {
        Ok(found) => Answer::Get(found),
        Err(e) => Answer::Failed(e.to_string()),
    }
}

/// The object store service's write path for a put with a request id:
/// `write_idempotent` within the write timeout, the reply decoded by
/// `GatewayState::reply` (a replay is the first attempt's outcome).
async fn put(
    node: &SimNode,
    id: String,
    payload: Vec<u8>,
    version: Option<u64>,
    request_id: String,
) -> Answer {
    let kind = match version {
        Some(v) => precondition::Kind::MatchResourceVersion(v),
        None => precondition::Kind::Unconditional(true),
    };
    let objects = ObjectCommand {
        op: Some(object_command::Op::Put(PutRequest {
            object: Some(Object {
                id,
                r#type: TYPE.to_string(),
                payload,
                ..Object::default()
            }),
            precondition: Some(Precondition { kind: Some(kind) }),
            request_id,
        })),
    };
    let command = GatewayState::object_command(objects);
    let timeout = node.config().write_timeout;
    let applied = match node.write_idempotent(command, timeout).await {
        Ok(applied) => applied,
        Err(e) => return Answer::Failed(e.to_string()),
    };
    match GatewayState::reply(&applied.response).map(|r| r.reply) {
        Ok(Reply::Objects(ObjectResult {
            result: Some(object_result::Result::Put(stored)),
        })) => Answer::Put(stored.resource_version),
        Ok(Reply::Objects(ObjectResult {
            result: Some(object_result::Result::Rejected(rejection)),
        })) => Answer::Rejected(format!("{rejection:?}")),
        other => Answer::Failed(format!("unexpected put result {other:?}")),
    }
}

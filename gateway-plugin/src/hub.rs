//! The supervision hub of one gateway: the supervisor streams attached to
//! it, the heartbeat batch it proposes every tick interval, the assignment
//! snapshots it pushes, and (on the raft leader only) the pool coordinator.
//!
//! Liveness without clocks: a supervisor sends `HostStatus` every
//! `status_interval`; once per tick interval the hub proposes ONE `Heartbeat`
//! command naming every member whose status arrived recently. Freshness is
//! then judged in ticks inside apply; no wall clock crosses machines.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pool::{Command, Coordinator, CoordinatorConfig};
use prost::Message;
use proto::attach::refusal_status;
use proto::supervisor_host::{
    gateway_message, AssignmentSnapshot, AttachRefusal, GatewayMessage, SandboxInstanceAssignment,
};
use raft_store::RaftNode;
use tokio::sync::mpsc;
use tonic::{Code, Status};

use proto::grant::GrantSigner;
use proto::sandbox_runtime::Grant;

use crate::metrics::Metrics;
use crate::state::GatewayState;

/// Pool timing, from `[openshell.gateway.supervisor_pool]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSettings {
    /// The leader appends a `Tick` this often (its monotonic clock).
    pub tick_interval: Duration,
    /// A member expires after this many ticks without a heartbeat.
    pub heartbeat_ttl_ticks: u64,
    /// A recovering sandbox fails after this many ticks without an owner.
    pub recovery_deadline_ticks: u64,
    /// A maintenance operation fails after this many ticks.
    pub operation_deadline_ticks: u64,
    /// Supervisors send `HostStatus` this often.
    pub status_interval: Duration,
    /// Bearer credential supervisors present in `HostHello` (None: any).
    pub supervisor_token: Option<String>,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            tick_interval: Duration::from_millis(250),
            heartbeat_ttl_ticks: 8,
            recovery_deadline_ticks: 240,
            operation_deadline_ticks: 2400,
            status_interval: Duration::from_millis(250),
            supervisor_token: None,
        }
    }
}

impl PoolSettings {
    /// The pool config these settings ask for.
    pub fn pool_config(&self) -> pool::Configure {
        pool::Configure {
            heartbeat_ttl_ticks: self.heartbeat_ttl_ticks,
            recovery_deadline_ticks: self.recovery_deadline_ticks,
            operation_deadline_ticks: self.operation_deadline_ticks,
        }
    }
}

/// One attached supervisor stream.
struct Attached {
    stream_id: u64,
    incarnation: u64,
    last_status: Instant,
    tx: mpsc::Sender<Result<GatewayMessage, Status>>,
    /// Last snapshot sent (without grants and log index), to send only changes.
    last_sent: Option<MemberView>,
    /// Log index of the last snapshot sent: an older one is never sent after
    /// it (two passes can run at once: one per applied batch, one per attach).
    sent_log_index: u64,
}

/// `member`'s stream if it is still the one of `incarnation`. A snapshot or
/// a refusal computed for one incarnation must never reach the stream of
/// another: the stream map is read again after the state, and a newer
/// incarnation of the member may have attached in between (its grants would
/// name it for sandboxes the state gives to the old incarnation).
fn stream_of<'a>(
    streams: &'a mut BTreeMap<String, Attached>,
    member: &str,
    incarnation: u64,
) -> Option<&'a mut Attached> {
    streams
        .get_mut(member)
        .filter(|a| a.incarnation == incarnation)
}

/// What a member's snapshot says, before grants are signed.
#[derive(Clone, Debug, PartialEq)]
struct MemberView {
    assignments: Vec<SandboxInstanceAssignment>,
    released: Vec<SandboxInstanceAssignment>,
    draining: bool,
}

/// The hub. Shared by the supervisor host service and the background tasks.
pub struct Hub {
    node: RaftNode<GatewayState>,
    settings: PoolSettings,
    signer: GrantSigner,
    metrics: Metrics,
    /// member id -> its current stream. A std lock: held for map operations
    /// only, never across an await.
    streams: Mutex<BTreeMap<String, Attached>>,
    next_stream_id: AtomicU64,
}

impl Hub {
    /// A hub for `node`, signing grants with `signer`.
    pub fn new(
        node: RaftNode<GatewayState>,
        settings: PoolSettings,
        signer: GrantSigner,
        metrics: Metrics,
    ) -> Arc<Self> {
        Arc::new(Hub {
            node,
            settings,
            signer,
            metrics,
            streams: Mutex::new(BTreeMap::new()),
            next_stream_id: AtomicU64::new(1),
        })
    }

    /// The node.
    pub fn node(&self) -> &RaftNode<GatewayState> {
        &self.node
    }

    /// The settings.
    pub fn settings(&self) -> &PoolSettings {
        &self.settings
    }

    /// The grant signer (its public key goes to supervisors).
    pub fn signer(&self) -> &GrantSigner {
        &self.signer
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Attached>> {
        self.streams.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a stream of `member`; a stream already attached for the
    /// member (an older one) is closed with ABORTED. Returns the stream id.
    pub fn attach(
        &self,
        member: &str,
        incarnation: u64,
        tx: mpsc::Sender<Result<GatewayMessage, Status>>,
    ) -> u64 {
        let stream_id = self.next_stream_id.fetch_add(1, Ordering::Relaxed);
        let old = self.lock().insert(
            member.to_string(),
            Attached {
                stream_id,
                incarnation,
                last_status: Instant::now(),
                tx,
                last_sent: None,
                sent_log_index: 0,
            },
        );
        if let Some(old) = old {
            tracing::info!(
                member,
                old_stream = old.stream_id,
                stream_id,
                "newer stream supersedes the older one"
            );
            let _ = old.tx.try_send(Err(Status::aborted(
                "superseded by a newer stream of this member",
            )));
        }
        self.push_snapshots();
        stream_id
    }

    /// Unregisters a stream (if it is still the member's current one).
    pub fn detach(&self, member: &str, stream_id: u64) {
        let mut streams = self.lock();
        if streams.get(member).map(|a| a.stream_id) == Some(stream_id) {
            streams.remove(member);
        }
    }

    /// Whether `stream_id` is still `member`'s current stream.
    pub fn is_current(&self, member: &str, stream_id: u64) -> bool {
        self.lock().get(member).map(|a| a.stream_id) == Some(stream_id)
    }

    /// A `HostStatus` arrived on the stream.
    pub fn touch(&self, member: &str, stream_id: u64) {
        if let Some(a) = self
            .lock()
            .get_mut(member)
            .filter(|a| a.stream_id == stream_id)
        {
            a.last_status = Instant::now();
        }
    }

    /// Number of attached streams.
    pub fn attached(&self) -> usize {
        self.lock().len()
    }

    /// Sends each attached member its assignment snapshot if it changed,
    /// each assignment carrying a grant signed for that member incarnation.
    pub fn push_snapshots(&self) {
        let members: Vec<(String, u64)> = self
            .lock()
            .iter()
            .map(|(m, a)| (m.clone(), a.incarnation))
            .collect();
        // One pass over the sandboxes for every attached member: this runs
        // after each applied batch, so it must not scan once per member.
        let (views, retired, log_index) = self.node.read_local(|state, index| {
            // Streams whose incarnation no longer counts: retired (expired
            // or left) or superseded by a newer one. Closed below so the
            // supervisor finds out instead of talking on a dead stream.
            let retired: Vec<(String, u64, Status)> = members
                .iter()
                .filter_map(|(member, incarnation)| {
                    let m = state.pool.member(member)?;
                    let (refusal, message) = if m.incarnation > *incarnation {
                        (
                            AttachRefusal::IncarnationSuperseded,
                            "superseded by a newer incarnation of this member",
                        )
                    } else if m.incarnation == *incarnation
                        && matches!(
                            m.state,
                            pool::MemberState::Expired | pool::MemberState::Leaving
                        )
                    {
                        (
                            AttachRefusal::IncarnationRetired,
                            "incarnation retired (expired or left): re-join as a new incarnation",
                        )
                    } else {
                        return None;
                    };
                    let status = refusal_status(Code::FailedPrecondition, message, refusal);
                    Some((member.clone(), *incarnation, status))
                })
                .collect();
            let mut by_owner: BTreeMap<(&str, u64), MemberView> = members
                .iter()
                .map(|(member, incarnation)| {
                    let draining = state
                        .pool
                        .member(member)
                        .map(|m| m.state == pool::MemberState::Draining)
                        .unwrap_or(false);
                    let view = MemberView {
                        assignments: Vec::new(),
                        released: Vec::new(),
                        draining,
                    };
                    ((member.as_str(), *incarnation), view)
                })
                .collect();
            for s in state.pool.sandboxes().values() {
                let Some(view) = by_owner.get_mut(&(s.owner.member.as_str(), s.owner.incarnation))
                else {
                    continue;
                };
                if s.phase.is_charged() {
                    view.assignments.push(assignment_view(s));
                } else if matches!(s.phase, pool::Phase::Deleted | pool::Phase::Failed) {
                    view.released.push(assignment_view(s));
                }
            }
            let views: Vec<(String, u64, MemberView)> = by_owner
                .into_iter()
                .map(|((member, incarnation), view)| (member.to_string(), incarnation, view))
                .collect();
            (views, retired, index)
        });
        self.metrics
            .pool_attached_supervisors
            .set(views.len() as i64);
        let mut streams = self.lock();
        for (member, incarnation, status) in retired {
            if stream_of(&mut streams, &member, incarnation).is_none() {
                continue;
            }
            if let Some(a) = streams.remove(&member) {
                tracing::info!(
                    %member,
                    incarnation,
                    stream_id = a.stream_id,
                    reason = status.message(),
                    "closing the stream of an incarnation that no longer counts"
                );
                let _ = a.tx.try_send(Err(status));
            }
        }
        for (member, incarnation, view) in views {
            let Some(a) = stream_of(&mut streams, &member, incarnation) else {
                continue;
            };
            if a.last_sent.as_ref() == Some(&view) || log_index < a.sent_log_index {
                continue;
            }
            let sign = |list: &[SandboxInstanceAssignment],
                        release: bool|
             -> Vec<SandboxInstanceAssignment> {
                list.iter()
                    .map(|x| {
                        let mut x = x.clone();
                        x.grant = self
                            .signer
                            .sign(&Grant {
                                sandbox_id: x.sandbox_id.clone(),
                                generation: x.generation,
                                member_id: member.clone(),
                                incarnation,
                                term: x.term,
                                credential_epoch: x.credential_epoch,
                                log_index,
                                release,
                            })
                            .encode_to_vec();
                        x
                    })
                    .collect()
            };
            let message = GatewayMessage {
                message: Some(gateway_message::Message::Snapshot(AssignmentSnapshot {
                    log_index,
                    assignments: sign(&view.assignments, false),
                    draining: view.draining,
                    released: sign(&view.released, true),
                })),
            };
            if a.tx.try_send(Ok(message)).is_ok() {
                a.last_sent = Some(view);
                a.sent_log_index = log_index;
            }
        }
    }

    /// Proposes a pool command; returns its outcome.
    ///
    /// # Errors
    /// The write error mapped to a status.
    pub async fn propose(&self, command: &Command) -> Result<pool::Outcome, Status> {
        let applied = self
            .node
            .write(GatewayState::pool_command(command))
            .await
            .map_err(crate::status::write)?;
        GatewayState::pool_outcome(&applied.response).map_err(Status::internal)
    }

    /// Every tick interval: one heartbeat batch for the members whose
    /// status arrived within two status intervals.
    pub async fn run_heartbeats(self: Arc<Self>) {
        let mut ticker = tokio::time::interval(self.settings.tick_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let fresh_within = self.settings.status_interval * 2 + self.settings.status_interval / 2;
        loop {
            ticker.tick().await;
            let beats: Vec<pool::Beat> = self
                .lock()
                .iter()
                .filter(|(_, a)| a.last_status.elapsed() <= fresh_within)
                .map(|(member, a)| pool::Beat {
                    member: member.clone(),
                    incarnation: a.incarnation,
                })
                .collect();
            if beats.is_empty() {
                continue;
            }
            let span = tracing::debug_span!("heartbeat_batch", beats = beats.len());
            let _enter = span.enter();
            if let Err(status) = self
                .propose(&Command::Heartbeat(pool::Heartbeat { beats }))
                .await
            {
                tracing::debug!(%status, "heartbeat batch not applied");
            }
        }
    }

    /// Pushes snapshots whenever this node applies new entries.
    pub async fn run_snapshot_pusher(self: Arc<Self>) {
        let mut metrics = self.node.raft().metrics();
        let mut last_applied = None;
        loop {
            if metrics.changed().await.is_err() {
                return;
            }
            let applied = metrics.borrow().last_applied;
            if applied != last_applied {
                last_applied = applied;
                self.push_snapshots();
            }
        }
    }

    /// Runs the pool coordinator while this node is the raft leader.
    pub async fn run_coordinator(self: Arc<Self>) {
        let mut metrics = self.node.raft().metrics();
        loop {
            let (leader, term) = {
                let m = metrics.borrow();
                (m.current_leader, m.current_term)
            };
            if leader != Some(self.node.id()) {
                if metrics.changed().await.is_err() {
                    return;
                }
                continue;
            }
            tracing::info!(term, node = self.node.id(), "pool coordinator active");
            self.lead(term).await;
            tracing::info!(term, node = self.node.id(), "pool coordinator stopped");
        }
    }

    /// One leadership term of the coordinator (etcd RawNode-style driving:
    /// tick on the monotonic clock, step on the applied state, propose).
    async fn lead(&self, term: u64) {
        let mut coordinator = Coordinator::new(CoordinatorConfig::new(term));
        let mut ticker = tokio::time::interval(self.settings.tick_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let step_every = (self.settings.tick_interval / 4).max(Duration::from_millis(10));
        let mut stepper = tokio::time::interval(step_every);
        stepper.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let wanted = self.settings.pool_config();
        let mut metrics = self.node.raft().metrics();
        loop {
            tokio::select! {
                _ = ticker.tick() => coordinator.tick(),
                _ = stepper.tick() => {}
                changed = metrics.changed() => if changed.is_err() { return },
            }
            let still_leading = {
                let m = metrics.borrow();
                m.current_leader == Some(self.node.id()) && m.current_term == term
            };
            if !still_leading {
                return;
            }
            let (mut commands, configured) = self.node.read_local(|state, _| {
                let config = state.pool.config();
                let configured = config.heartbeat_ttl_ticks == wanted.heartbeat_ttl_ticks
                    && config.recovery_deadline_ticks == wanted.recovery_deadline_ticks
                    && config.operation_deadline_ticks == wanted.operation_deadline_ticks;
                (coordinator.step(&state.pool), configured)
            });
            if !configured && state_has_leader_term(&self.node, term) {
                commands.push(Command::Configure(wanted.clone()));
            }
            for command in commands {
                let span = tracing::debug_span!("coordinator_propose", command = command.name());
                let _enter = span.enter();
                match self.propose(&command).await {
                    Ok(pool::Outcome::Rejected(reason)) => {
                        tracing::debug!(%reason, "coordinator proposal rejected")
                    }
                    Ok(pool::Outcome::Applied(_)) => {}
                    Err(status) => {
                        tracing::debug!(%status, "coordinator proposal failed");
                        break;
                    }
                }
            }
        }
    }
}

/// Whether the pool state already recorded `term`'s LeaderChanged (so the
/// configuration is proposed after the grace command, not before).
fn state_has_leader_term(node: &RaftNode<GatewayState>, term: u64) -> bool {
    node.read_local(|state, _| state.pool.leader_term() >= term)
}

/// A sandbox as its owner sees it in a snapshot (grants are signed when
/// sent; a released sandbox carries no launch material).
fn assignment_view(s: &pool::Sandbox) -> SandboxInstanceAssignment {
    SandboxInstanceAssignment {
        sandbox_id: s.id.clone(),
        generation: s.generation,
        term: s.owner.term,
        credential_epoch: s.owner.epoch,
        acknowledged: s.owner.acknowledged,
        phase: phase_name(s.phase).to_string(),
        material_ref: if s.phase.is_charged() {
            s.material_ref.clone()
        } else {
            String::new()
        },
        grant: Vec::new(),
    }
}

/// The wire name of a sandbox phase.
pub fn phase_name(phase: pool::Phase) -> &'static str {
    match phase {
        pool::Phase::Admitting => "admitting",
        pool::Phase::Assigned => "assigned",
        pool::Phase::Recovering => "recovering",
        pool::Phase::Stopping => "stopping",
        pool::Phase::Deleted => "deleted",
        pool::Phase::Failed => "failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attached(incarnation: u64) -> Attached {
        let (tx, _rx) = mpsc::channel(1);
        Attached {
            stream_id: 1,
            incarnation,
            last_status: Instant::now(),
            tx,
            last_sent: None,
            sent_log_index: 0,
        }
    }

    /// A snapshot computed for s1 incarnation 4 while incarnation 5
    /// attached (the jepsen pool smoke saw incarnation 5 receive term-1
    /// grants of sandboxes the state gave to incarnation 4): not delivered.
    #[test]
    fn a_view_reaches_only_the_stream_of_its_incarnation() {
        let mut streams = BTreeMap::from([("s1".to_string(), attached(5))]);
        assert!(stream_of(&mut streams, "s1", 4).is_none());
        assert!(stream_of(&mut streams, "s2", 5).is_none());
        assert_eq!(
            stream_of(&mut streams, "s1", 5).map(|a| a.incarnation),
            Some(5)
        );
    }
}

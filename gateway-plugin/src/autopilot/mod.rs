//! The voter autopilot (Consul's autopilot in spirit): on the leader only,
//! every [`PASS`], it reconciles the raft voters with the desired count
//! read from a [`source::Replicas`] (a StatefulSet's `spec.replicas`, or a
//! file), one membership change at a time:
//!
//! - a desired node (id `1..=N`) missing from the membership is asked which
//!   node answers at its templated peer address (`Identify`); one that
//!   answers as itself, in this cluster, is added as a learner;
//! - a desired learner that caught up is promoted (the same test as
//!   `raft promote` without `--force`);
//! - a learner with id > N is removed; a voter with id > N is first demoted
//!   to learner (so it sees that it no longer votes), never leaving fewer
//!   than N voters nor a remaining voter set without a caught-up majority;
//!   a leader beyond N first hands leadership to a caught-up desired voter.
//!
//! The decision is the pure [`plan::plan`]; this module reads the view,
//! carries the step out, logs it at INFO with its reason and writes an
//! audit record (`autopilot.*`).
//!
//! A pass acts for the leader of one raft term: the replica count it read
//! is an observation of the world outside the log, so it acts only while
//! this node still leads the term it started in (checked after the read and
//! again before the change), and every change is proposed by this node's
//! own raft (openraft's membership change never leaves its leader, and an
//! entry of a deposed leader's term can commit only where it was
//! replicated before the next leader took over, i.e. before that leader
//! acted on anything). [`wait_removed`] holds the stop of a
//! gateway being scaled away until it no longer votes.

pub mod plan;
pub mod source;

use std::time::{Duration, Instant};

use raft_store::RaftNode;

use crate::audit::Record;
use crate::config_statefulset::AutopilotConfig;
use crate::state::GatewayState;
use plan::{Member, Step, View};
use source::Replicas;

/// How often the leader reconciles.
pub const PASS: Duration = Duration::from_secs(1);
/// The longest a gateway being scaled away waits, on SIGTERM, to be removed
/// as a voter before its usual stop.
pub const LEAVE_BOUND: Duration = Duration::from_secs(20);
/// A member at most this many entries behind counts as caught up.
const MAX_LAG: u64 = 100;
/// A joint configuration seen this many passes in a row is finished by the
/// autopilot (its proposer is gone: e.g. the leader changed mid-change).
const FINISH_AFTER_PASSES: u32 = 5;

/// The autopilot of one gateway (acts only while it leads).
pub struct Autopilot {
    /// This gateway's raft node.
    node: RaftNode<GatewayState>,
    /// The peer address template.
    config: AutopilotConfig,
    /// The desired voter count's source.
    replicas: Replicas,
    /// The last warning written, so each distinct one is written once.
    warned: Option<String>,
    /// Consecutive passes that saw an unfinished change.
    unfinished_passes: u32,
}

impl Autopilot {
    /// The autopilot of `node` (nothing runs until [`Autopilot::run`]).
    pub fn new(node: RaftNode<GatewayState>, config: AutopilotConfig) -> Self {
        let replicas = Replicas::new(config.replicas.clone());
        Self::with_replicas(node, config, replicas)
    }

    /// The autopilot of `node` reading the desired count through
    /// `replicas` (an embedding host's own Kubernetes client, or the
    /// simulation's API: [`Replicas::with_client`]) instead of building
    /// its own from `config.replicas`.
    pub fn with_replicas(
        node: RaftNode<GatewayState>,
        config: AutopilotConfig,
        replicas: Replicas,
    ) -> Self {
        Autopilot {
            node,
            replicas,
            config,
            warned: None,
            unfinished_passes: 0,
        }
    }

    /// Reconciles every [`PASS`] while this node leads; never returns.
    pub async fn run(mut self) {
        tracing::info!(
            replicas = %self.replicas.source(),
            peer_address = %self.config.peer_address,
            "autopilot on: while leading, keeps the voters at node ids 1..=replicas"
        );
        let mut every = tokio::time::interval(PASS);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let term = self.node.raft().metrics().borrow().current_term;
            if self.node.check_leading(term).is_ok() {
                self.pass(term).await;
            } else {
                self.unfinished_passes = 0;
            }
        }
    }

    /// Writes `message` at WARN unless it was the last one written.
    fn warn_once(&mut self, message: String) {
        if self.warned.as_deref() != Some(message.as_str()) {
            tracing::warn!("autopilot: {message}");
            self.warned = Some(message);
        }
    }

    /// One reconciliation for the leader of raft `term`: at most one
    /// membership change.
    async fn pass(&mut self, term: u64) {
        let desired = match self.replicas.read().await {
            Ok(0) => {
                self.warn_once(format!(
                    "{} says 0 replicas: doing nothing (a cluster keeps at least one voter)",
                    self.replicas.source()
                ));
                return;
            }
            Ok(n) => n,
            Err(e) => {
                self.warn_once(format!("{e}; doing nothing until it can be read"));
                return;
            }
        };
        // The read may have taken seconds (a Kubernetes API call): act only
        // for the term it was taken in.
        if self.node.check_leading(term).is_err() {
            return;
        }
        let view = self.view(desired);
        let step = plan::plan(&view);
        if step != Step::Unfinished {
            self.unfinished_passes = 0;
        }
        match step {
            Step::Idle => self.warned = None,
            Step::Blocked(why) => self.warn_once(why),
            Step::Unfinished => self.finish_unfinished().await,
            Step::Promote(id) => self.promote(id, desired).await,
            Step::Remove { id, voter } => self.remove(id, voter, desired).await,
            Step::TransferLeader { to } => self.transfer(to, desired).await,
            Step::AddLearner(candidates) => self.add_learner(&candidates, desired).await,
        }
    }

    /// The leader's view: members, and which are caught up (acknowledged
    /// within the promotion's window, at most [`MAX_LAG`] behind).
    fn view(&self, desired: u64) -> View {
        let status = self.node.status();
        let recent = (self.node.config().election_timeout_max * 4).max(Duration::from_secs(1));
        let recent_ms = u64::try_from(recent.as_millis()).unwrap_or(u64::MAX);
        let mut view = View {
            me: status.node_id,
            desired,
            unfinished: status.unfinished_change.is_some(),
            ..View::default()
        };
        for n in status.nodes {
            let healthy = n.id == status.node_id
                || (n.last_ack_ms.is_some_and(|ms| ms <= recent_ms)
                    && n.lag.is_some_and(|lag| lag <= MAX_LAG));
            let member = Member {
                addr: n.addr,
                healthy,
            };
            if n.voter {
                view.voters.insert(n.id, member);
            } else {
                view.learners.insert(n.id, member);
            }
        }
        view
    }

    async fn finish_unfinished(&mut self) {
        self.unfinished_passes += 1;
        if self.unfinished_passes < FINISH_AFTER_PASSES {
            return;
        }
        self.unfinished_passes = 0;
        tracing::info!(
            reason = "a joint configuration stayed unfinished",
            "autopilot: finishing the membership change"
        );
        let audit = Record::internal("autopilot.finish_change", &[]);
        self.outcome(audit, self.node.finish_membership_change().await);
    }

    async fn promote(&mut self, id: u64, desired: u64) {
        tracing::info!(
            node = id,
            replicas = desired,
            reason = "a desired voter (id <= replicas) that caught up",
            "autopilot: promoting learner to voter"
        );
        let audit = Record::internal("autopilot.promote", &[("node_id", &id.to_string())]);
        self.outcome(audit, self.node.promote(id, false).await);
    }

    /// A voter is first demoted to learner (it sees that, and a gateway
    /// being scaled away waits for it: [`wait_removed`]), then removed.
    async fn remove(&mut self, id: u64, voter: bool, desired: u64) {
        if voter {
            tracing::info!(
                node = id,
                replicas = desired,
                reason = "node id beyond replicas",
                "autopilot: demoting voter to learner (removed next)"
            );
            let audit = Record::internal("autopilot.demote", &[("node_id", &id.to_string())]);
            self.outcome(audit, self.node.demote(id).await);
        } else {
            tracing::info!(
                node = id,
                replicas = desired,
                reason = "node id beyond replicas",
                "autopilot: removing learner"
            );
            let audit = Record::internal("autopilot.remove", &[("node_id", &id.to_string())]);
            self.outcome(audit, self.node.remove(id).await);
        }
    }

    async fn transfer(&mut self, to: u64, desired: u64) {
        tracing::info!(
            to,
            replicas = desired,
            reason = "this leader's node id is beyond replicas: the next leader removes it",
            "autopilot: handing leadership over"
        );
        let audit = Record::internal("autopilot.transfer_leader", &[("to", &to.to_string())]);
        self.outcome(audit, self.node.transfer_leader(Some(to)).await);
    }

    /// Adds the first of `candidates` that answers at its templated address
    /// as itself (asked all at once, each within the `Identify` timeout).
    async fn add_learner(&mut self, candidates: &[u64], desired: u64) {
        let asked = futures::future::join_all(candidates.iter().map(|&id| {
            let addr = self.config.peer_address_of(id);
            let node = self.node.clone();
            async move { (id, node.identify(&addr).await, addr) }
        }))
        .await;
        let mut waiting = Vec::new();
        for (id, answer, addr) in asked {
            match answer {
                Ok(answered) if answered == id => {
                    tracing::info!(
                        node = id,
                        addr,
                        replicas = desired,
                        reason = "a desired node (id <= replicas) answering as itself",
                        "autopilot: adding learner"
                    );
                    let audit = Record::internal(
                        "autopilot.add_learner",
                        &[("node_id", &id.to_string()), ("addr", &addr)],
                    );
                    self.outcome(audit, self.node.add_learner(id, &addr, false).await);
                    return;
                }
                Ok(answered) => {
                    waiting.push(format!("{addr} answers as node {answered}, not {id}"))
                }
                Err(e) => {
                    tracing::debug!(node = id, addr, error = %e, "autopilot: desired node does not answer yet");
                    waiting.push(format!("node {id} at {addr}"));
                }
            }
        }
        self.warn_once(format!(
            "{desired} voters desired; waiting for {} to answer as itself (Identify) before adding it",
            waiting.join(", ")
        ));
    }

    /// Writes `audit` with `result`'s outcome; a failure is warned (once).
    fn outcome<T>(&mut self, audit: Record, result: Result<T, raft_store::AdminError>) {
        match result {
            Ok(_) => {
                audit.ok();
                self.warned = None;
            }
            Err(e) => {
                drop(audit);
                self.warn_once(format!("membership change failed (retried next pass): {e}"));
            }
        }
    }
}

/// On a stop (SIGTERM), a gateway whose node id is beyond the desired count
/// (being scaled away) waits, at most `bound`, until it no longer votes, so
/// its exit costs no quorum (a 2-voter cluster cannot remove a voter that
/// is already gone). Returns at once when its id is desired or the count
/// cannot be read. A learner stops at once: the leader removes it after.
pub async fn wait_removed(
    node: &RaftNode<GatewayState>,
    config: &AutopilotConfig,
    bound: Duration,
) {
    let deadline = Instant::now() + bound;
    let me = node.id();
    let mut replicas = Replicas::new(config.replicas.clone());
    let desired = match tokio::time::timeout(bound, replicas.read()).await {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "stopping: cannot tell whether this node is being scaled away");
            return;
        }
        Err(_) => return,
    };
    if me <= desired {
        return;
    }
    let mut next_log = Instant::now();
    loop {
        let voting = node.status().nodes.iter().any(|n| n.id == me && n.voter);
        if !voting {
            tracing::info!(
                replicas = desired,
                "stopping: this node (beyond replicas) no longer votes"
            );
            return;
        }
        if Instant::now() >= deadline {
            tracing::warn!(
                replicas = desired,
                bound_ms = bound.as_millis() as u64,
                "stopping while still a voter: the leader's autopilot did not remove it in time"
            );
            return;
        }
        if Instant::now() >= next_log {
            tracing::info!(
                node = me,
                replicas = desired,
                "stopping: node id beyond replicas; waiting for the leader's autopilot to remove this voter first"
            );
            next_log = Instant::now() + Duration::from_secs(5);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

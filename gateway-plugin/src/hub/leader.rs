//! The leader-only coordinator loop: while this node is the raft leader, it
//! drives `pool::Coordinator` (etcd RawNode-style: tick on the monotonic
//! clock, step on the applied state, propose what it returns) and proposes
//! the configured pool timing once the leader-change grace is in the log.
//! Every proposal carries preconditions and the raft term it was planned in
//! (`pool::fence`), and goes through this node's own raft only
//! ([`Hub::propose_all_as_leader`]: one step's commands queued together,
//! so they share log entries), so a deposed leader that still believes it
//! leads cannot corrupt anything: its proposals are never forwarded to its
//! successor, and apply refuses those already in flight once the
//! successor's term is applied.

use std::sync::Arc;
use std::time::Duration;

use pool::{Command, Coordinator, CoordinatorConfig};
use raft_store::RaftNode;
use tracing::Instrument;

use super::Hub;
use crate::state::GatewayState;

impl Hub {
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
            // Raft shut down: its last metrics still name this node leader,
            // so looping would start and stop the coordinator at full speed
            // until the process exits.
            if metrics.has_changed().is_err() {
                return;
            }
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
        // The applied index the last step read (None: no step yet).
        let mut stepped_at: Option<u64> = None;
        loop {
            let mut tick_due = false;
            tokio::select! {
                _ = ticker.tick() => { coordinator.tick(); tick_due = true; }
                _ = stepper.tick() => {}
                changed = metrics.changed() => if changed.is_err() { return },
            }
            let (still_leading, applied) = {
                let m = metrics.borrow();
                (
                    m.current_leader == Some(self.node.id()) && m.current_term == term,
                    m.last_applied.map_or(0, |l| l.index),
                )
            };
            if !still_leading {
                return;
            }
            // On the same applied state and no tick due a step returns
            // nothing new (its commands are in flight), so it is skipped:
            // raft metrics change with every replication round. A step
            // reads every member but only the sandboxes that may call for
            // a command (`pool::table`; counted in
            // openshell_pool_coordinator_sandboxes_examined_total).
            if !tick_due && stepped_at == Some(applied) {
                continue;
            }
            let examined_before = coordinator.sandboxes_examined();
            let (mut commands, configured) = self.node.read_local(|state, index| {
                stepped_at = Some(index);
                let config = state.pool.config();
                let configured = config.heartbeat_ttl_ticks == wanted.heartbeat_ttl_ticks
                    && config.recovery_deadline_ticks == wanted.recovery_deadline_ticks
                    && config.operation_deadline_ticks == wanted.operation_deadline_ticks
                    && config.retention_ticks == wanted.retention_ticks;
                (coordinator.step(&state.pool), configured)
            });
            self.metrics.pool.coordinator_steps.inc();
            self.metrics.pool.coordinator_sandboxes_examined.inc_by(
                coordinator
                    .sandboxes_examined()
                    .saturating_sub(examined_before),
            );
            if !configured && state_has_raft_term(&self.node, term) {
                commands.push(Command::Configure(wanted.clone()));
            }
            self.propose_all(term, commands).await;
        }
    }

    /// Proposes the coordinator's commands of raft `term`, in order, in as
    /// few log entries as the batcher makes of them (the takeovers of a
    /// member owning hundreds of sandboxes are not one commit round trip
    /// each); a rejection is expected and logged at debug level.
    async fn propose_all(&self, term: u64, commands: Vec<Command>) {
        if commands.is_empty() {
            return;
        }
        let names: Vec<&'static str> = commands.iter().map(Command::name).collect();
        let span = tracing::debug_span!("coordinator_propose", commands = names.len());
        let outcomes = self
            .propose_all_as_leader(term, commands)
            .instrument(span.clone())
            .await;
        span.in_scope(|| match outcomes {
            Err(error) => tracing::debug!(%error, "coordinator proposals not made"),
            Ok(outcomes) => {
                for (command, outcome) in names.into_iter().zip(outcomes) {
                    match outcome {
                        Ok(pool::Outcome::Applied(_)) => {}
                        Ok(pool::Outcome::Rejected(reason)) => {
                            tracing::debug!(command, %reason, "coordinator proposal rejected");
                        }
                        Err(error) => {
                            tracing::debug!(command, %error, "coordinator proposal failed");
                        }
                    }
                }
            }
        });
    }
}

/// Whether the pool state is in raft `term` (its LeaderChanged applied, no
/// newer one): the configuration is proposed after the grace command, and
/// never by a deposed leader.
fn state_has_raft_term(node: &RaftNode<GatewayState>, term: u64) -> bool {
    node.read_local(|state, _| state.pool.raft_term() == term)
}

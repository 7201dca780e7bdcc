//! The supervisor pool's metrics: the applied state (members by state,
//! sandboxes by phase, logical time) and [`crate::pool_tally`] (takeovers,
//! moves, drains and their duration, stale reports refused), read at each
//! scrape; and what the hub counts as it works (attached streams, push
//! passes, grants issued).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pool::{MemberState, Phase};
use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge, IntGaugeVec};

use super::raft::gauge;
use super::{advance, Reg};
use crate::convert::to_proto;
use crate::pool_tally::{PoolTally, DRAIN_RESULTS, STALE_REASONS};
use crate::state::GatewayState;
use pool::fence::FENCED_COMMANDS;

/// What became of one heartbeat command of this gateway
/// (`openshell_pool_heartbeat_commands_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeartbeatOutcome {
    /// Committed and applied.
    Written,
    /// Not committed within its deadline (half the heartbeat TTL) while
    /// this gateway led: it waited in this gateway's own batcher or log.
    TimedOutLeading,
    /// Forwarded to the leader, no answer within its deadline.
    TimedOutFollowing,
    /// No leader took it within its deadline.
    NoLeader,
    /// Still proposing when a newer tick's batch needed its place.
    Dropped,
    /// Refused, or raft stopped.
    Failed,
}

impl HeartbeatOutcome {
    /// Every outcome, for the zero series.
    pub const ALL: [HeartbeatOutcome; 6] = [
        HeartbeatOutcome::Written,
        HeartbeatOutcome::TimedOutLeading,
        HeartbeatOutcome::TimedOutFollowing,
        HeartbeatOutcome::NoLeader,
        HeartbeatOutcome::Dropped,
        HeartbeatOutcome::Failed,
    ];

    /// The `outcome` label.
    pub fn label(self) -> &'static str {
        match self {
            HeartbeatOutcome::Written => "written",
            HeartbeatOutcome::TimedOutLeading => "timed_out_leading",
            HeartbeatOutcome::TimedOutFollowing => "timed_out_following",
            HeartbeatOutcome::NoLeader => "no_leader",
            HeartbeatOutcome::Dropped => "dropped",
            HeartbeatOutcome::Failed => "failed",
        }
    }
}

/// Every member state, for the zero series.
const MEMBER_STATES: [MemberState; 4] = [
    MemberState::Active,
    MemberState::Draining,
    MemberState::Leaving,
    MemberState::Expired,
];

/// Every sandbox phase, for the zero series.
const PHASES: [Phase; 6] = [
    Phase::Admitting,
    Phase::Assigned,
    Phase::Recovering,
    Phase::Stopping,
    Phase::Deleted,
    Phase::Failed,
];

/// Buckets of a drain's duration, seconds.
const DRAIN_BUCKETS: [f64; 14] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// The totals of [`PoolTally`] last exported.
#[derive(Default)]
struct Seen {
    takeovers: u64,
    moves: u64,
    drains_started: u64,
    drains_finished: [u64; 3],
    stale: [u64; 3],
    fenced: [u64; FENCED_COMMANDS.len()],
    /// The last finished drain observed ([`crate::pool_tally::FinishedDrain::seq`]).
    drain_seq: u64,
}

/// The pool's collectors. Cheap to clone.
#[derive(Clone)]
pub struct PoolMetrics {
    /// Supervisor streams attached to this gateway.
    pub attached_supervisors: IntGauge,
    /// Pool members by state.
    pub members: IntGaugeVec,
    /// Sandboxes by phase.
    pub sandboxes: IntGaugeVec,
    /// Logical time.
    pub now_ticks: IntGauge,
    /// The tick interval of this gateway.
    pub tick_interval: prometheus::Gauge,
    /// Assignment snapshot push passes.
    pub push_passes: IntCounter,
    /// Applied batches after which no pass ran: nothing applied since the
    /// last pass could change a plan (heartbeats, reports, quiet ticks).
    pub push_passes_skipped: IntCounter,
    /// Sandbox records the push passes read from the state (a full scan
    /// counts every sandbox): the work of pushing, proportional to what
    /// changed once every stream was shown its view.
    pub push_sandboxes_examined: IntCounter,
    /// Coordinator steps (plans) this gateway made as the leader.
    pub coordinator_steps: IntCounter,
    /// Sandbox records the coordinator's plans read: the live sandboxes of
    /// dead owners and the recovering ones, never the whole pool (issue 30).
    pub coordinator_sandboxes_examined: IntCounter,
    /// Grants this gateway signed and sent to a supervisor.
    pub grants_issued: IntCounter,
    /// Supervisor streams this gateway sent to another gateway because it
    /// could not write their heartbeats.
    pub supervisors_sent_away: IntCounter,
    /// Silences of this gateway's heartbeat batches past half the TTL that
    /// it held instead of sending its supervisors away (it still followed
    /// the log and the pool's time had not moved half a TTL).
    pub heartbeat_silences_held: IntCounter,
    /// This gateway's heartbeat commands, by outcome (see
    /// [`HeartbeatOutcome`]).
    pub heartbeat_commands: IntCounterVec,
    /// Member beats in this gateway's written heartbeat commands.
    pub heartbeat_beats_written: IntCounter,
    /// Takeovers applied.
    pub takeovers: IntCounter,
    /// Moves applied (drain or rebalance).
    pub moves: IntCounter,
    /// Drains started (or queued).
    pub drains_started: IntCounter,
    /// Drains finished, by result.
    pub drains_finished: IntCounterVec,
    /// From start to end of each drain.
    pub drain_duration: Histogram,
    /// Reports refused as stale, by what was stale.
    pub stale_reports_refused: IntCounterVec,
    /// Leader-planned commands refused at apply because another leader's
    /// raft term was applied (a deposed leader's decisions), by command.
    pub fenced_commands_refused: IntCounterVec,
    /// Runtimes of live sandboxes that this gateway's last launcher pass
    /// did not judge, because they were recorded from a list of another
    /// driver scope (`launcher::plan::Plan::out_of_scope`); 0 once it no
    /// longer leads.
    pub launcher_runtimes_out_of_scope: IntGauge,
    /// What the tally counters were last advanced to.
    seen: Arc<Mutex<Seen>>,
}

/// The float gauge of the pool's tick interval, registered in `reg` (the
/// registry helpers make integer gauges).
fn tick_interval_gauge(reg: &Reg<'_>) -> prometheus::Gauge {
    let gauge = prometheus::Gauge::new(
        "openshell_pool_tick_interval_seconds",
        "The pool's tick interval on this gateway (ticks to seconds)",
    )
    .unwrap_or_else(|e| panic!("metric: {e}"));
    if let Err(e) = reg.0.register(Box::new(gauge.clone())) {
        panic!("metric: {e}");
    }
    gauge
}

impl PoolMetrics {
    /// Registers the collectors in `reg`, with a zero series for every
    /// known label value.
    pub(crate) fn new(reg: &Reg<'_>) -> Self {
        let tick_interval = tick_interval_gauge(reg);
        let m = PoolMetrics {
            attached_supervisors: reg.gauge(
                "openshell_pool_attached_supervisors",
                "Supervisor streams attached to this gateway",
            ),
            members: reg.gauge_vec("openshell_pool_members", "Pool members by state", &["state"]),
            sandboxes: reg.gauge_vec("openshell_pool_sandboxes", "Sandboxes by phase", &["phase"]),
            now_ticks: reg.gauge(
                "openshell_pool_now_ticks",
                "Logical time of the pool: the current tick",
            ),
            tick_interval,
            push_passes: reg.counter(
                "openshell_pool_push_passes_total",
                "Assignment snapshot push passes (one per applied batch that may change a view, one per attach)",
            ),
            push_passes_skipped: reg.counter(
                "openshell_pool_push_passes_skipped_total",
                "Applied batches after which no push pass ran: nothing applied since the last pass could change a plan",
            ),
            push_sandboxes_examined: reg.counter(
                "openshell_pool_push_sandboxes_examined_total",
                "Sandbox records read from the state to plan assignment snapshot pushes",
            ),
            coordinator_steps: reg.counter(
                "openshell_pool_coordinator_steps_total",
                "Coordinator steps (plans from the applied state) made as the leader",
            ),
            coordinator_sandboxes_examined: reg.counter(
                "openshell_pool_coordinator_sandboxes_examined_total",
                "Sandbox records the leader's coordinator read from the state to plan its commands",
            ),
            grants_issued: reg.counter(
                "openshell_pool_grants_issued_total",
                "Grants this gateway signed and sent to a supervisor with an assignment",
            ),
            supervisors_sent_away: reg.counter(
                "openshell_pool_supervisors_sent_away_total",
                "Supervisor streams this gateway sent to another gateway because it wrote none of their heartbeats within half the heartbeat TTL (cut off from the leader, or removed from the group)",
            ),
            heartbeat_silences_held: reg.counter(
                "openshell_pool_heartbeat_silences_held_total",
                "Times no heartbeat batch of this gateway was written within half the heartbeat TTL but it kept its supervisors: it still applied new entries and the pool's time had moved less than half a TTL since its last batch (a slow leader, not a lost one), or this gateway itself had not run for more than a quarter of the TTL (paused or starved) and its silence was counted again from its waking, once per silence",
            ),
            heartbeat_commands: reg.counter_vec(
                "openshell_pool_heartbeat_commands_total",
                "This gateway's heartbeat commands by outcome: written; timed_out_leading (not committed within half the heartbeat TTL while this gateway led: it waited in its own batcher or log); timed_out_following (forwarded, no answer within half the TTL); no_leader; dropped (still proposing when a newer tick's batch needed its place); failed (refused or raft stopped)",
                &["outcome"],
            ),
            heartbeat_beats_written: reg.counter(
                "openshell_pool_heartbeat_beats_written_total",
                "Member beats in this gateway's written heartbeat commands: each attached supervisor whose status is fresh is named every other tick (about twice a second at the defaults), again at the next tick when its batch was not written",
            ),
            takeovers: reg.counter(
                "openshell_pool_takeovers_total",
                "Takeovers applied here (the owner's member expired, leaving or draining)",
            ),
            moves: reg.counter(
                "openshell_pool_moves_total",
                "Moves of a healthy sandbox applied here for a drain or rebalance",
            ),
            drains_started: reg.counter(
                "openshell_pool_drains_started_total",
                "Drains of a member started or queued, applied here",
            ),
            drains_finished: reg.counter_vec(
                "openshell_pool_drains_finished_total",
                "Drains finished, applied here, by result",
                &["result"],
            ),
            drain_duration: reg.histogram(
                "openshell_pool_drain_duration_seconds",
                "From a drain's start to its end, counted in ticks and converted with the tick interval",
                &DRAIN_BUCKETS,
            ),
            stale_reports_refused: reg.counter_vec(
                "openshell_pool_stale_reports_refused_total",
                "Sandbox reports refused as stale, by what was stale (term, incarnation, generation)",
                &["reason"],
            ),
            fenced_commands_refused: reg.counter_vec(
                "openshell_pool_fenced_commands_refused_total",
                "Commands a leader planned, refused at apply because they were planned in another raft term than the applied one (a deposed leader's decisions), by command",
                &["command"],
            ),
            launcher_runtimes_out_of_scope: reg.gauge(
                "openshell_pool_launcher_runtimes_out_of_scope",
                "Runtimes of live sandboxes this gateway's last launcher pass as the leader did not judge lost or alive (0 while it does not lead): they were recorded from a list of another driver scope (another process directory or Kubernetes namespace) than this gateway's driver sees. Not 0: the gateways of the group do not share one driver view",
            ),
            seen: Arc::default(),
        };
        m.zero_series();
        m
    }

    /// Every labelled series at 0 from the first scrape.
    fn zero_series(&self) {
        for state in MEMBER_STATES {
            self.members.with_label_values(&[member_label(state)]);
        }
        for phase in PHASES {
            self.sandboxes.with_label_values(&[phase_label(phase)]);
        }
        for result in DRAIN_RESULTS {
            self.drains_finished.with_label_values(&[result]);
        }
        for reason in STALE_REASONS {
            self.stale_reports_refused.with_label_values(&[reason]);
        }
        for command in FENCED_COMMANDS {
            self.fenced_commands_refused.with_label_values(&[command]);
        }
        for outcome in HeartbeatOutcome::ALL {
            self.heartbeat_commands
                .with_label_values(&[outcome.label()]);
        }
    }

    /// Counts one heartbeat command's outcome.
    pub fn heartbeat_command(&self, outcome: HeartbeatOutcome) {
        self.heartbeat_commands
            .with_label_values(&[outcome.label()])
            .inc();
    }

    /// Reads the applied pool state and its tally (at each scrape).
    pub fn refresh(&self, state: &GatewayState, tick_interval: Duration) {
        let pool = &state.pool;
        self.now_ticks.set(gauge(pool.now_tick()));
        self.tick_interval.set(tick_interval.as_secs_f64());
        let mut members = [0u64; MEMBER_STATES.len()];
        for m in pool.members().values() {
            if let Some(i) = MEMBER_STATES.iter().position(|s| *s == m.state) {
                members[i] += 1;
            }
        }
        for (state, n) in MEMBER_STATES.iter().zip(members) {
            self.members
                .with_label_values(&[member_label(*state)])
                .set(gauge(n));
        }
        let mut sandboxes = [0u64; PHASES.len()];
        for s in pool.sandboxes().values() {
            if let Some(i) = PHASES.iter().position(|p| *p == s.phase) {
                sandboxes[i] += 1;
            }
        }
        for (phase, n) in PHASES.iter().zip(sandboxes) {
            self.sandboxes
                .with_label_values(&[phase_label(*phase)])
                .set(gauge(n));
        }
        self.export_tally(&state.pool_tally, tick_interval);
    }

    /// Advances the counters to the tally's totals and observes each drain
    /// finished since the last scrape.
    fn export_tally(&self, tally: &PoolTally, tick_interval: Duration) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let seen = &mut *seen;
        advance(&self.takeovers, &mut seen.takeovers, tally.takeovers);
        advance(&self.moves, &mut seen.moves, tally.moves);
        advance(
            &self.drains_started,
            &mut seen.drains_started,
            tally.drains_started,
        );
        for (i, result) in DRAIN_RESULTS.iter().enumerate() {
            let c = self.drains_finished.with_label_values(&[result]);
            advance(&c, &mut seen.drains_finished[i], tally.drains_finished[i]);
        }
        for (i, reason) in STALE_REASONS.iter().enumerate() {
            let c = self.stale_reports_refused.with_label_values(&[reason]);
            advance(&c, &mut seen.stale[i], tally.stale_reports_refused[i]);
        }
        for (i, command) in FENCED_COMMANDS.iter().enumerate() {
            let c = self.fenced_commands_refused.with_label_values(&[command]);
            advance(&c, &mut seen.fenced[i], tally.fenced_refused[i]);
        }
        let last = tally.finished.back().map_or(0, |d| d.seq);
        if last < seen.drain_seq {
            // The tally started again (a restore): everything it kept is new.
            seen.drain_seq = 0;
        }
        for drain in tally.finished.iter().filter(|d| d.seq > seen.drain_seq) {
            self.drain_duration
                .observe(drain.ticks as f64 * tick_interval.as_secs_f64());
        }
        seen.drain_seq = last.max(seen.drain_seq);
    }
}

/// The `state` label of a member state.
fn member_label(state: MemberState) -> &'static str {
    to_proto::member_state(state).name()
}

/// The `phase` label of a sandbox phase.
fn phase_label(phase: Phase) -> &'static str {
    to_proto::sandbox_phase(phase).name()
}

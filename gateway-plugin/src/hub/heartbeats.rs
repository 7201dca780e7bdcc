//! The per-tick heartbeat batch: every tick interval, one `Heartbeat`
//! command naming each attached member incarnation whose `HostStatus`
//! arrived recently (this gateway's monotonic clock decides "recently"; the
//! member's freshness is then counted in ticks inside apply).
//!
//! Every other tick ([`BEAT_EVERY_TICKS`]): a member named in a written
//! batch sampled at the previous tick is left out of this one
//! ([`BeatWindow`]). Its beats then come at the rate of its statuses (two a
//! second at the defaults) instead of four, and every replica applies half
//! as many. Its last beat may be one tick older than when it was named at
//! every tick, so the pool counts the TTL one tick longer
//! (`PoolSettings::pool_config`): a member that falls silent, and one whose
//! gateway dies and which must re-attach elsewhere, are given at least the
//! time they were before. A member whose batch was not written is named
//! again at the next tick.
//!
//! A batch never waits behind an earlier one: each tick's batch is its own
//! task, at most [`HEARTBEATS_IN_FLIGHT`] run at once (the oldest is dropped
//! for the newest), and each has a deadline of half the heartbeat TTL
//! ([`heartbeat_deadline`]). A batch is idempotent in effect (apply sets the
//! member's last heartbeat tick to the current tick), so it is proposed with
//! `RaftNode::write_idempotent`: a forward to a leader that was deposed
//! while the batch was in flight (paused, cut off) is abandoned as soon as
//! this node sees the new leader or term, and the batch is sent to the new
//! leader at once. The new leader's `LeaderChanged` grace then has the
//! whole TTL minus about one tick of margin (see `docs/operations.md`, "A
//! paused or stalled gateway").
//!
//! A gateway whose batches stop being written (cut off from the leader,
//! or removed from the group while still running), or whose own state
//! stops following them (its forwarded batches commit, but it no longer
//! receives the log, so it never shows its supervisors what the pool
//! assigns them), sends its supervisors to other gateways:
//! [`BeatsHealth`]. A newer leader's grace applied here counts as a
//! written batch ([`BeatsHealth::grace_seen`]). A silence while this
//! gateway still applies new entries and the pool's time (its ticks) has
//! not moved half a TTL is a slow leader, not a lost one: it is held
//! ([`Health::Held`]) instead of moving every supervisor onto gateways
//! that write through the same leader.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pool::Command;
use prost::Message;
use tracing::Instrument;

use super::Hub;
use crate::config_pool::BEAT_EVERY_TICKS;
use crate::metrics::pool::HeartbeatOutcome;
use crate::state::GatewayState;

/// Most encoded bytes of beats in one `Heartbeat` command: well under the
/// store's command limit (`raft_store::batcher::MAX_COMMAND_BYTES`), so a
/// gateway with thousands of attached members proposes several commands a
/// tick instead of one the store refuses (which would expire them all).
pub const HEARTBEAT_CHUNK_BYTES: usize = 32 * 1024;

/// Heartbeat batches of earlier ticks still being proposed at a tick; when
/// a new batch would exceed it, the oldest is dropped (the newest batch
/// names every member the older ones did, and a beat counts at the tick it
/// applies, so the newest wins).
pub const HEARTBEATS_IN_FLIGHT: usize = 4;

/// How long one tick's heartbeat batch may take to commit: half the
/// heartbeat TTL, and at least one tick. A batch sampled at a tick must
/// apply well within the TTL or not at all: a late one would keep a member
/// that stopped since looking alive, and one stuck in a forward to a
/// stalled leader must not hold back the next ticks.
pub fn heartbeat_deadline(tick_interval: Duration, heartbeat_ttl_ticks: u64) -> Duration {
    (heartbeat_ttl(tick_interval, heartbeat_ttl_ticks) / 2).max(tick_interval)
}

/// The heartbeat TTL on this gateway's clock: `heartbeat_ttl_ticks` tick
/// intervals.
pub fn heartbeat_ttl(tick_interval: Duration, heartbeat_ttl_ticks: u64) -> Duration {
    tick_interval.saturating_mul(u32::try_from(heartbeat_ttl_ticks).unwrap_or(u32::MAX))
}

/// What the heartbeat task knows of its own batches: when one was last
/// written (or there was none to write), or a newer leader's grace was
/// last seen applied, and the pool's time then; when this gateway last
/// applied a new entry; and the oldest written batch this gateway has not
/// applied yet.
#[derive(Debug)]
pub(crate) struct BeatsHealth {
    written_at: Instant,
    /// The pool's tick, as applied here, when `written_at` was set.
    written_tick: u64,
    /// The highest log index applied here so far, and when it was seen.
    applied: (u64, Instant),
    /// (log index, when it was written) of the oldest batch written through
    /// this gateway that its own state machine had not applied by then.
    unapplied: Option<(u64, Instant)>,
    /// The raft term of the last `LeaderChanged` this gateway had applied
    /// when it last looked ([`BeatsHealth::grace_seen`]).
    grace_term: u64,
    /// Whether a silence past the deadline is being held (logged once).
    holding: bool,
    /// Whether a stall of this gateway restarted the silence since the last
    /// written batch ([`BeatsHealth::resumed`]: once per silence).
    resumed: bool,
}

/// Where this gateway's state machine stands when the heartbeat task
/// looks: the last log index it applied and the pool's logical time (its
/// tick) in that state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Progress {
    pub applied: u64,
    pub tick: u64,
}

/// How long a gateway's batches may go unwritten: `wall` on its own clock
/// (half the heartbeat TTL, [`heartbeat_deadline`]) and `ticks` of the
/// pool's time (half the TTL in ticks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Deadline {
    pub wall: Duration,
    pub ticks: u64,
}

/// What [`BeatsHealth::check`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Health {
    /// Batches are written (or not yet late).
    Heard,
    /// No batch written for the deadline, but this gateway still follows
    /// the log and the pool's time has not moved half a TTL since its last
    /// batch: the leader is slow, not gone, and its members are no closer
    /// to expiry than their ticks say. Keep them and keep writing. `first`:
    /// this silence was not held at the previous look.
    Held { first: bool },
    /// Send the supervisors away, for this reason.
    Unheard(Unheard),
}

/// Why a gateway sends its supervisors away (see [`BeatsHealth::check`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unheard {
    /// No batch written for the deadline.
    NotWritten,
    /// A batch written that long ago is still not applied here.
    NotApplied,
}

impl BeatsHealth {
    pub(crate) fn new() -> Self {
        let now = Instant::now();
        BeatsHealth {
            written_at: now,
            written_tick: 0,
            applied: (0, now),
            unapplied: None,
            grace_term: 0,
            holding: false,
            resumed: false,
        }
    }

    /// This gateway itself did not run for a while (paused, or starved of
    /// CPU: its heartbeat task looked more than half the deadline late) and
    /// now stands at `at`. The silence counts from `now`, once per silence:
    /// the batch it proposes now is its first chance since, so its
    /// supervisors stay unless that one is not written in time either.
    /// Returns whether it restarted the silence.
    ///
    /// Why: while it was frozen, the leader's ticks went on and nothing of
    /// its own was read, proposed or applied, so on waking its silence is
    /// past the deadline, it has applied nothing new for as long, and the
    /// pool's time has moved on: each is [`BeatsHealth::check`]'s sign of a
    /// gateway cut off from its leader, and it would send every supervisor
    /// away on its first look, onto gateways that share its leader (and, on
    /// one machine, its stall). At 100,000 sandboxes × 2,000 members a
    /// stall of about 1.2 s did exactly that with 356 supervisors, and
    /// members expired in the re-attachment (docs/benchmarks.md, "a stalled
    /// gateway is not a cut-off one"). Once per silence, so a gateway
    /// starved for good, whose batches are never written, still sends its
    /// supervisors away one deadline later.
    fn resumed(&mut self, at: Progress, now: Instant) -> bool {
        if self.resumed {
            return false;
        }
        self.resumed = true;
        self.written_at = self.written_at.max(now);
        self.written_tick = self.written_tick.max(at.tick);
        self.applied = (self.applied.0.max(at.applied), now);
        if let Some((_, since)) = &mut self.unapplied {
            *since = (*since).max(now);
        }
        self.holding = false;
        true
    }

    /// This gateway has applied the pool's `LeaderChanged` up to raft term
    /// `pool_term`, and its raft is at `current_term`. A newer one that is
    /// the current term's is a heartbeat of every member, written by the
    /// new leader (apply sets every non-expired member's last heartbeat
    /// tick, I4's grace): the members attached here are as covered as by a
    /// batch of its own written now, so "not written" counts from it. The
    /// grace of an older term (applied while catching up on the log) counts
    /// for nothing: it was granted when that term began, not now.
    ///
    /// Why: after an election (or a stall of the whole machine followed by
    /// one) every gateway's last batch is older than half the TTL at once;
    /// without this each would send all its supervisors away, though the
    /// new leader's grace gives them a full TTL where they are, and the
    /// moving ones risk expiring for real (docs/benchmarks.md, "the 100,000
    /// run did not settle"). A gateway cut off from the group, or removed
    /// from it, applies no newer `LeaderChanged` and still sends its
    /// supervisors away half a TTL after its last batch.
    fn grace_seen(&mut self, pool_term: u64, current_term: u64, at: Progress, now: Instant) {
        if pool_term > self.grace_term && pool_term == current_term {
            self.grace_term = pool_term;
            self.written_at = self.written_at.max(now);
            self.written_tick = self.written_tick.max(at.tick);
        }
    }

    /// A batch was written at `index` (None: there was nothing to write)
    /// while this gateway stood at `at`.
    fn written(&mut self, index: Option<u64>, at: Progress, now: Instant) {
        self.written_at = now;
        self.written_tick = at.tick;
        self.holding = false;
        self.resumed = false;
        if let Some(index) = index.filter(|i| *i > at.applied) {
            // Keep the oldest: the lag is measured from it.
            self.unapplied.get_or_insert((index, now));
        }
    }

    /// At a tick with beats to write, this gateway standing at `at`:
    /// whether its supervisors must go elsewhere. Each condition is
    /// reported once, then measured again from `now`.
    ///
    /// - not written for `deadline.wall` (half the TTL, what one batch may
    ///   take): the members expire however alive they are, unless the
    ///   silence is the leader's slowness rather than this gateway's loss
    ///   of it. It is held ([`Health::Held`]) while this gateway still
    ///   applies new entries (it follows the log) and the pool's time as
    ///   applied here has moved less than `deadline.ticks` since its last
    ///   batch (the leader writes its ticks no faster than the beats, so no
    ///   member is closer to expiry than at a written batch half a TTL
    ///   ago). Sending supervisors away within the hold would only add
    ///   their re-attachments to a leader already behind, and every
    ///   gateway would do it at once (docs/benchmarks.md, "a storm at the
    ///   default worker count"). A gateway cut off or removed applies
    ///   nothing new, and one whose forwards fail while the pool's time
    ///   moves on sees its ticks: both still send their supervisors away
    ///   half a TTL after their last batch. The hold has no bound in wall
    ///   time, as expiry is counted in ticks: a first version ended it
    ///   after a whole TTL, and in three of five runs at 100,000 × 2,000
    ///   every gateway's hold after a restart ended about then in a
    ///   send-away of every supervisor, while the pool's time moved about
    ///   a tick a second, and members expired in the re-attachment that
    ///   followed (docs/benchmarks.md, "a slow leader is not a lost
    ///   one"). What it leaves: a gateway whose view of the log lags the
    ///   leader's by half a TTL or more while it still applies, and whose
    ///   forwards fail meanwhile, keeps supervisors that expire on the
    ///   leader; a lag with forwards that commit is `NotApplied` below;
    /// - written but not applied here for `deadline.wall`: the gateway no
    ///   longer follows the log (a healthy follower applies a committed
    ///   entry one replication round after the leader, far less than half
    ///   a TTL), so its supervisors are never shown their takeovers or
    ///   moves.
    fn check(&mut self, at: Progress, deadline: Deadline, now: Instant) -> Health {
        if at.applied > self.applied.0 {
            self.applied = (at.applied, now);
        }
        if self.unapplied.is_some_and(|(index, _)| at.applied >= index) {
            self.unapplied = None;
        }
        let silent = now.duration_since(self.written_at);
        if silent <= deadline.wall {
            self.holding = false;
        } else {
            let follows = now.duration_since(self.applied.1) <= deadline.wall;
            let time_moved = at.tick.saturating_sub(self.written_tick) >= deadline.ticks;
            if follows && !time_moved {
                let first = !self.holding;
                self.holding = true;
                return Health::Held { first };
            }
            self.written_at = now;
            self.written_tick = at.tick;
            self.unapplied = None;
            self.holding = false;
            return Health::Unheard(Unheard::NotWritten);
        }
        if self
            .unapplied
            .is_some_and(|(_, since)| now.duration_since(since) > deadline.wall)
        {
            self.unapplied = None;
            return Health::Unheard(Unheard::NotApplied);
        }
        Health::Heard
    }
}

/// Splits `beats` into runs of at most [`HEARTBEAT_CHUNK_BYTES`] encoded
/// bytes each (at least one beat per run).
pub fn chunks(beats: Vec<pool::Beat>) -> Vec<Vec<pool::Beat>> {
    let mut out: Vec<Vec<pool::Beat>> = Vec::new();
    let mut bytes = 0usize;
    for beat in beats {
        // The beat's own length plus its field tag and length prefix.
        let size = beat.encoded_len() + 4;
        match out.last_mut() {
            Some(run) if bytes + size <= HEARTBEAT_CHUNK_BYTES => run.push(beat),
            _ => {
                out.push(vec![beat]);
                bytes = 0;
            }
        }
        bytes += size;
    }
    out
}

/// Which attached members a tick's batch names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BeatWindow {
    /// A member whose last status arrived longer ago is not named: two and
    /// a half status intervals (two statuses may be lost).
    pub fresh_within: Duration,
    /// A member named in a written batch sampled less long ago is not
    /// named again: [`BEAT_EVERY_TICKS`] − 1 and a half tick intervals, so a
    /// member written at one tick is left out of the next and named at the
    /// one after (a tick that comes late, the gateway having stalled, names
    /// it again).
    pub refresh: Duration,
}

impl BeatWindow {
    pub(crate) fn new(tick_interval: Duration, status_interval: Duration) -> Self {
        BeatWindow {
            fresh_within: status_interval * 2 + status_interval / 2,
            refresh: tick_interval * (BEAT_EVERY_TICKS - 1) + tick_interval / 2,
        }
    }

    /// Whether a member whose last status arrived at `last_status`, last
    /// named in a written batch sampled at `beat_written`, is named in the
    /// batch sampled at `now`.
    pub(crate) fn due(
        &self,
        last_status: Instant,
        beat_written: Option<Instant>,
        now: Instant,
    ) -> bool {
        now.saturating_duration_since(last_status) <= self.fresh_within
            && beat_written.is_none_or(|w| now.saturating_duration_since(w) >= self.refresh)
    }
}

impl Hub {
    /// The members the batch sampled at `now` names ([`BeatWindow::due`]).
    fn due_beats(&self, window: BeatWindow, now: Instant) -> Vec<pool::Beat> {
        self.streams
            .lock()
            .iter()
            .filter(|(_, a)| window.due(a.last_status, a.beat_written, now))
            .map(|(member, a)| pool::Beat {
                member: member.clone(),
                incarnation: a.incarnation,
            })
            .collect()
    }

    /// `beats`, of a batch sampled at `sampled`, were written: each member
    /// still attached with that incarnation is not named again until
    /// [`BeatWindow::refresh`] after `sampled`.
    fn beats_named(&self, beats: &[pool::Beat], sampled: Instant) {
        let mut streams = self.streams.lock();
        for beat in beats {
            if let Some(a) = streams
                .get_mut(&beat.member)
                .filter(|a| a.incarnation == beat.incarnation)
            {
                a.beat_written = Some(a.beat_written.map_or(sampled, |w| w.max(sampled)));
            }
        }
    }

    /// Every tick interval: one heartbeat batch for the members
    /// [`BeatWindow`] names, proposed in its own task (see the module doc:
    /// never behind an earlier batch).
    pub async fn run_heartbeats(self: Arc<Self>) {
        let mut ticker = tokio::time::interval(self.settings.tick_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let window = BeatWindow::new(self.settings.tick_interval, self.settings.status_interval);
        let deadline = Deadline {
            wall: heartbeat_deadline(
                self.settings.tick_interval,
                self.settings.heartbeat_ttl_ticks,
            ),
            ticks: (self.settings.heartbeat_ttl_ticks / 2).max(1),
        };
        // Batches of earlier ticks still proposing, oldest first. Aborting
        // one drops its forward or its wait for the batcher: harmless for
        // an idempotent command.
        let mut in_flight: VecDeque<tokio::task::JoinHandle<()>> = VecDeque::new();
        // When this task last looked: a look more than half the deadline
        // late means this gateway itself did not run (BeatsHealth::resumed).
        let mut looked = Instant::now();
        loop {
            ticker.tick().await;
            let late = looked.elapsed().saturating_sub(self.settings.tick_interval);
            looked = Instant::now();
            if late > deadline.wall / 2 {
                self.resumed_after(late);
            }
            in_flight.retain(|batch| !batch.is_finished());
            let sampled = Instant::now();
            let beats = self.due_beats(window, sampled);
            if beats.is_empty() {
                self.beats_written(None);
                continue;
            }
            let pool_term = self.node.read_local(|state, _| state.pool.raft_term());
            let current_term = self.node.raft().metrics().borrow().current_term;
            let at = self.progress();
            let (health, ticks_since_batch) = {
                let now = Instant::now();
                let mut health = self.beats.lock().unwrap_or_else(|p| p.into_inner());
                health.grace_seen(pool_term, current_term, at, now);
                let ticks_since_batch = at.tick.saturating_sub(health.written_tick);
                (health.check(at, deadline, now), ticks_since_batch)
            };
            match health {
                Health::Heard | Health::Held { first: false } => {}
                Health::Held { first: true } => {
                    self.metrics.pool.heartbeat_silences_held.inc();
                    tracing::info!(
                        deadline_ms = deadline.wall.as_millis() as u64,
                        applied = at.applied,
                        tick = at.tick,
                        "no heartbeat batch written within half the heartbeat TTL, but this gateway follows the log and the pool's time has not moved half a TTL: supervisors kept"
                    );
                }
                Health::Unheard(why) => {
                    self.send_away_unheard(why, deadline.wall, at, ticks_since_batch);
                    continue;
                }
            }
            while in_flight.len() >= HEARTBEATS_IN_FLIGHT {
                if let Some(oldest) = in_flight.pop_front() {
                    tracing::debug!("a heartbeat batch of an earlier tick dropped for a newer one");
                    oldest.abort();
                    self.metrics
                        .pool
                        .heartbeat_command(HeartbeatOutcome::Dropped);
                }
            }
            let span = tracing::debug_span!("heartbeat_batch", beats = beats.len());
            let hub = self.clone();
            in_flight.push_back(tokio::spawn(
                async move { hub.propose_beats(beats, sampled, deadline.wall).await }
                    .instrument(span),
            ));
        }
    }

    /// This gateway's heartbeat task looked `late` after its tick: the
    /// gateway did not run meanwhile ([`BeatsHealth::resumed`]).
    fn resumed_after(&self, late: Duration) {
        let at = self.progress();
        let restarted = self
            .beats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .resumed(at, Instant::now());
        if restarted {
            self.metrics.pool.heartbeat_silences_held.inc();
            tracing::info!(
                late_ms = late.as_millis() as u64,
                applied = at.applied,
                tick = at.tick,
                "this gateway did not run for a while (paused or starved of CPU): its heartbeat silence counts from now, and its supervisors stay unless its next batch is not written in time either"
            );
        }
    }

    /// Proposes the beats of the batch sampled at `sampled` (in chunks under
    /// the command bound), each chunk as an idempotent write within
    /// `deadline`.
    async fn propose_beats(&self, beats: Vec<pool::Beat>, sampled: Instant, deadline: Duration) {
        let mut written = Some(0u64);
        for beats in chunks(beats) {
            let command = Command::Heartbeat(pool::Heartbeat { beats });
            let encoded = GatewayState::pool_command(&command);
            match self.node.write_idempotent(encoded, deadline).await {
                Ok(applied) => {
                    if let Command::Heartbeat(heartbeat) = &command {
                        self.beats_named(&heartbeat.beats, sampled);
                        let named = u64::try_from(heartbeat.beats.len()).unwrap_or(u64::MAX);
                        self.metrics.pool.heartbeat_beats_written.inc_by(named);
                    }
                    self.metrics
                        .pool
                        .heartbeat_command(HeartbeatOutcome::Written);
                    written = written.map(|i| i.max(applied.log_index));
                }
                Err(e) => {
                    let leading =
                        self.node.raft().metrics().borrow().current_leader == Some(self.node.id());
                    let outcome = not_written(&e, leading);
                    self.metrics.pool.heartbeat_command(outcome);
                    tracing::debug!(error = %e, outcome = outcome.label(), "heartbeat batch not applied");
                    written = None;
                }
            }
        }
        if let Some(index) = written {
            self.beats_written(Some(index));
        }
    }

    /// A heartbeat batch was written at `index` (None: none to write).
    fn beats_written(&self, index: Option<u64>) {
        let at = self.progress();
        self.beats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .written(index, at, Instant::now());
    }

    /// Where this gateway's state machine stands: its last applied log
    /// index and the pool's tick.
    fn progress(&self) -> Progress {
        Progress {
            applied: self.applied_index(),
            tick: self.node.read_local(|state, _| state.pool.now_tick()),
        }
    }

    /// The last log index this gateway's state machine applied.
    fn applied_index(&self) -> u64 {
        self.node
            .raft()
            .metrics()
            .borrow()
            .last_applied
            .map_or(0, |l| l.index)
    }

    /// This gateway's supervisors cannot be served here (see
    /// [`BeatsHealth::check`]): no heartbeat batch written for `deadline`
    /// (cut off from the leader, or removed from the group while still
    /// running: its supervisors would expire however alive they are), or
    /// one written that long ago still not applied here (its forwarded
    /// batches commit, but it no longer follows the log: its supervisors
    /// stay active but are never shown their takeovers, which stay
    /// recovering until their deadline fails them). Either way they would
    /// stay attached here (their keepalives are answered). It sends them
    /// away (`GatewayLeaving`, as a stopping gateway does, so nothing of the
    /// pool changes), each to attach where its heartbeats can be written
    /// within the other half of its TTL; it keeps accepting streams (a join
    /// is a write too: it succeeds once this gateway can write again).
    /// During an election longer than `deadline` every gateway does this
    /// once: supervisors re-attach with the incarnation they have. Found by
    /// the simulation: seed 12 (not written) and seed 1417 (not applied).
    ///
    /// `at` is where this gateway stood, `ticks_since_batch` how far the
    /// pool's time had moved since its last batch (logged: it tells the
    /// pool's time moving on from a gateway that no longer follows).
    fn send_away_unheard(
        &self,
        why: Unheard,
        deadline: Duration,
        at: Progress,
        ticks_since_batch: u64,
    ) {
        let what = match why {
            Unheard::NotWritten => "could not write heartbeats",
            Unheard::NotApplied => {
                "has not applied its own heartbeats (it no longer follows the log)"
            }
        };
        let ttl = heartbeat_ttl(
            self.settings.tick_interval,
            self.settings.heartbeat_ttl_ticks,
        );
        let moved = self.send_settled_supervisors_away(
            &format!(
                "gateway {} {what} for {} ms; attach to another gateway",
                self.node.id(),
                deadline.as_millis()
            ),
            ttl,
        );
        self.metrics
            .pool
            .supervisors_sent_away
            .inc_by(u64::try_from(moved).unwrap_or(u64::MAX));
        match why {
            Unheard::NotWritten => tracing::warn!(
                moved,
                deadline_ms = deadline.as_millis() as u64,
                applied = at.applied,
                tick = at.tick,
                ticks_since_batch,
                "no heartbeat batch written within half the heartbeat TTL: supervisors sent to other gateways"
            ),
            Unheard::NotApplied => tracing::warn!(
                moved,
                deadline_ms = deadline.as_millis() as u64,
                applied = self.applied_index(),
                "a heartbeat batch written half the heartbeat TTL ago is not applied on this gateway: supervisors sent to other gateways"
            ),
        }
    }
}

/// What a heartbeat command that failed with `e` counts as; `leading`:
/// this gateway led when it failed (an unknown outcome then means it waited
/// in its own batcher or log, not in a forward).
fn not_written(e: &raft_store::WriteError, leading: bool) -> HeartbeatOutcome {
    use raft_store::WriteError;
    match e {
        WriteError::Unknown(_) if leading => HeartbeatOutcome::TimedOutLeading,
        WriteError::Unknown(_) => HeartbeatOutcome::TimedOutFollowing,
        WriteError::NoLeader { .. } => HeartbeatOutcome::NoLeader,
        WriteError::Rejected(_) | WriteError::Fatal(_) | WriteError::ReplyMismatch { .. } => {
            HeartbeatOutcome::Failed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(i: usize) -> pool::Beat {
        pool::Beat {
            member: format!("member-{i:0>200}"),
            incarnation: i as u64 + 1,
        }
    }

    /// Thousands of members with long ids: every command stays under the
    /// chunk bound, and every beat is sent exactly once, in order.
    #[test]
    fn a_heartbeat_batch_gets_half_the_ttl_and_at_least_a_tick() {
        let tick = Duration::from_millis(250);
        assert_eq!(heartbeat_deadline(tick, 8), Duration::from_secs(1));
        assert_eq!(heartbeat_deadline(tick, 1), tick);
        assert_eq!(heartbeat_deadline(tick, 0), tick);
        assert_eq!(
            heartbeat_deadline(Duration::from_millis(100), 10),
            Duration::from_millis(500)
        );
    }

    /// The ticks (ms from the start) at which a member whose statuses
    /// came every 500 ms from 0 to `last_status_ms` (at `offset_ms` past
    /// each tick) is named, ticks every 250 ms, each batch written at once:
    /// by `window`, or by the rule before it (every tick while fresh within
    /// 1.25 s) when `window` is None.
    fn named_at(window: Option<BeatWindow>, offset_ms: u64, last_status_ms: u64) -> Vec<u64> {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut written = None;
        let mut named = Vec::new();
        for tick_ms in (250..8000).step_by(250) {
            let statuses = (0..).map(|i| i * 500 + offset_ms);
            let Some(last_status) = statuses
                .take_while(|s| *s <= tick_ms.min(last_status_ms))
                .last()
            else {
                continue;
            };
            let due = match window {
                Some(w) => w.due(at(last_status), written, at(tick_ms)),
                None => tick_ms - last_status <= 1250,
            };
            if due {
                written = Some(at(tick_ms));
                named.push(tick_ms);
            }
        }
        named
    }

    /// At the defaults a member is named every other tick (its beats come
    /// at the rate of its statuses, half as many), and with the pool's TTL
    /// one tick longer (`BEAT_EVERY_TICKS - 1`) it expires no sooner than
    /// under the every-tick rule, and at most one tick later: whether it
    /// falls silent, or its gateway dies at any tick (its last beat then is
    /// the last one named before the death).
    #[test]
    fn a_member_is_named_every_other_tick_and_expires_no_sooner() {
        let tick = Duration::from_millis(250);
        let window = BeatWindow::new(tick, Duration::from_millis(500));
        assert_eq!(window.fresh_within, Duration::from_millis(1250));
        assert_eq!(window.refresh, Duration::from_millis(375));
        let (ttl_ms, longer_ms) = (2000, 250 * u64::from(BEAT_EVERY_TICKS - 1));
        for offset_ms in (0..250).step_by(25) {
            for last_status_ms in [3000, 3100, 3250, 3400, 4000, 7000] {
                let every_tick = named_at(None, offset_ms, last_status_ms);
                let every_other = named_at(Some(window), offset_ms, last_status_ms);
                let case = format!("statuses at +{offset_ms} ms until {last_status_ms} ms");
                let gaps: Vec<u64> = every_other.windows(2).map(|w| w[1] - w[0]).collect();
                assert!(
                    gaps.iter().all(|g| *g == 500),
                    "{case}: named at {every_other:?}"
                );
                assert!(
                    every_other.len() * 2 <= every_tick.len() + 2,
                    "{case}: {} beats against {} every tick",
                    every_other.len(),
                    every_tick.len()
                );
                // The member falls silent after its last status; or its
                // gateway dies at `death_ms`, and nothing after is written.
                for death_ms in (250..8000).step_by(250) {
                    let last_before =
                        |named: &[u64]| named.iter().copied().rfind(|t| *t < death_ms);
                    let (Some(old_last), Some(new_last)) =
                        (last_before(&every_tick), last_before(&every_other))
                    else {
                        continue;
                    };
                    let (old_expiry, new_expiry) =
                        (old_last + ttl_ms, new_last + ttl_ms + longer_ms);
                    assert!(
                        new_expiry >= old_expiry && new_expiry <= old_expiry + 250,
                        "{case}, death at {death_ms} ms: expires at {new_expiry} ms, every tick at {old_expiry} ms"
                    );
                }
            }
        }
    }

    /// A member whose batch was not written (so never marked) is named at
    /// the next tick; one written is not, and is again once the refresh
    /// has passed; a tick that comes late (the gateway stalled) names it.
    #[test]
    fn a_member_whose_batch_was_not_written_is_named_at_the_next_tick() {
        let tick = Duration::from_millis(250);
        let window = BeatWindow::new(tick, Duration::from_millis(500));
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert!(window.due(at(0), None, at(250)), "never written");
        assert!(
            !window.due(at(0), Some(at(250)), at(500)),
            "written at the previous tick"
        );
        assert!(
            window.due(at(0), Some(at(250)), at(750)),
            "written two ticks ago"
        );
        assert!(
            window.due(at(0), Some(at(250)), at(650)),
            "a tick 150 ms late"
        );
        assert!(
            !window.due(at(0), None, at(1501)),
            "status older than the window"
        );
    }

    const DEADLINE: Deadline = Deadline {
        wall: Duration::from_secs(1),
        ticks: 4,
    };

    /// A gateway that has applied up to `applied`, the pool's tick 100.
    fn p(applied: u64) -> Progress {
        Progress { applied, tick: 100 }
    }

    /// A gateway's health whose last batch was written at `t0`, having
    /// applied `applied` since `t0` (nothing new after it).
    fn health_at(t0: Instant, applied: u64) -> BeatsHealth {
        let mut h = BeatsHealth::new();
        h.written_at = t0;
        h.written_tick = 100;
        h.applied = (applied, t0);
        h
    }

    const NOT_WRITTEN: Health = Health::Unheard(Unheard::NotWritten);
    const NOT_APPLIED: Health = Health::Unheard(Unheard::NotApplied);

    /// - given: a gateway that writes a batch at index 10 having applied 9
    /// - then: nothing while the lag is under the deadline or once index 10
    ///   is applied; `NotApplied` once it has lasted longer, reported once;
    ///   `NotWritten` when no batch was written for the deadline while it
    ///   applied nothing new
    #[test]
    fn a_gateway_is_unheard_when_its_batches_are_not_written_or_not_applied_in_time() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);

        let mut h = health_at(t0, 9);
        h.written(Some(10), p(9), at(0));
        assert_eq!(h.check(p(9), DEADLINE, at(900)), Health::Heard);
        h.written(Some(11), p(9), at(900));
        assert_eq!(
            h.check(p(9), DEADLINE, at(1001)),
            NOT_APPLIED,
            "measured from the oldest"
        );
        assert_eq!(
            h.check(p(9), DEADLINE, at(1100)),
            Health::Heard,
            "reported once"
        );

        let mut h = health_at(t0, 9);
        h.written(Some(10), p(9), at(0));
        assert_eq!(
            h.check(p(10), DEADLINE, at(900)),
            Health::Heard,
            "applied: no lag"
        );
        assert!(h.unapplied.is_none());
        h.written(Some(12), p(12), at(1500));
        assert_eq!(
            h.check(p(12), DEADLINE, at(1600)),
            Health::Heard,
            "a leader applies before it answers"
        );
        assert_eq!(h.check(p(12), DEADLINE, at(2601)), NOT_WRITTEN);
        assert_eq!(
            h.check(p(12), DEADLINE, at(2700)),
            Health::Heard,
            "reported once"
        );
        h.written(None, p(12), at(3000));
        assert_eq!(
            h.check(p(12), DEADLINE, at(3900)),
            Health::Heard,
            "nothing to write counts as written"
        );
    }

    /// - given: no batch written since `t0`, the gateway still applying new
    ///   entries (index 9 at `t0`, 10 at 900 ms)
    /// - when: the pool's tick has moved less than half the TTL since the
    ///   last batch (a slow leader)
    /// - then: the silence is held, logged once, however long it lasts;
    ///   a batch written in between ends the hold
    /// - and: once the pool's time has moved half a TTL, or nothing new was
    ///   applied for the deadline, the supervisors are sent away
    #[test]
    fn a_slow_leaders_silence_is_held_while_the_gateway_follows_and_time_stands() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let ticked = |applied: u64, tick: u64| Progress { applied, tick };

        let mut h = health_at(t0, 9);
        assert_eq!(h.check(ticked(10, 103), DEADLINE, at(900)), Health::Heard);
        assert_eq!(
            h.check(ticked(10, 103), DEADLINE, at(1001)),
            Health::Held { first: true }
        );
        assert_eq!(
            h.check(ticked(11, 103), DEADLINE, at(1250)),
            Health::Held { first: false }
        );
        assert_eq!(
            h.check(ticked(12, 103), DEADLINE, at(5000)),
            Health::Held { first: false },
            "no bound in wall time while the gateway follows and time stands"
        );
        assert_eq!(
            h.check(ticked(12, 103), DEADLINE, at(6001)),
            NOT_WRITTEN,
            "nothing new applied for the deadline: it no longer follows"
        );

        // A batch written during the hold ends it; a later silence is a
        // new one.
        let mut h = health_at(t0, 9);
        assert_eq!(
            h.check(ticked(10, 101), DEADLINE, at(1001)),
            Health::Held { first: true }
        );
        h.written(Some(11), ticked(11, 101), at(1100));
        assert_eq!(h.check(ticked(11, 101), DEADLINE, at(1200)), Health::Heard);
        assert_eq!(
            h.check(ticked(12, 102), DEADLINE, at(2101)),
            Health::Held { first: true }
        );

        // The pool's time moved half a TTL (4 ticks) without this
        // gateway's batches: its members near expiry, sent away.
        let mut h = health_at(t0, 9);
        assert_eq!(h.check(ticked(10, 104), DEADLINE, at(1001)), NOT_WRITTEN);

        // It moved during the hold.
        let mut h = health_at(t0, 9);
        assert_eq!(
            h.check(ticked(10, 102), DEADLINE, at(1001)),
            Health::Held { first: true }
        );
        assert_eq!(h.check(ticked(11, 104), DEADLINE, at(1250)), NOT_WRITTEN);

        // Cut off or removed: nothing new applied for the deadline, the
        // pool's time standing still here.
        let mut h = health_at(t0, 9);
        assert_eq!(h.check(ticked(9, 100), DEADLINE, at(1001)), NOT_WRITTEN);
        // The last new entry applied more than the deadline ago.
        let mut h = health_at(t0, 9);
        assert_eq!(h.check(ticked(10, 100), DEADLINE, at(100)), Health::Heard);
        assert_eq!(h.check(ticked(10, 100), DEADLINE, at(1101)), NOT_WRITTEN);
    }

    /// - given: a gateway whose last batch was written at `t0` (index 9
    ///   applied, the pool's tick 100), then frozen (paused, or starved of
    ///   CPU) for 1.5 s while the leader's ticks went on (tick 106 by the
    ///   time it applies again)
    /// - when: its heartbeat task looks again
    /// - then: as a cut-off gateway, its first look sends every supervisor
    ///   away; with the stall noted, the silence counts from the look, and
    ///   only a batch not written within the deadline from then sends them
    ///   away
    /// - and: a second stall before any batch is written does not restart
    ///   the silence (a gateway starved for good still sends them away); a
    ///   written batch allows the next stall its restart
    #[test]
    fn a_stalled_gateways_silence_counts_from_its_waking_once() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let ticked = |applied: u64, tick: u64| Progress { applied, tick };

        let mut h = health_at(t0, 9);
        assert_eq!(
            h.check(ticked(9, 106), DEADLINE, at(1500)),
            NOT_WRITTEN,
            "the stall unnoted: a cut-off gateway"
        );

        let mut h = health_at(t0, 9);
        assert!(h.resumed(ticked(9, 106), at(1500)));
        assert_eq!(h.check(ticked(9, 106), DEADLINE, at(1500)), Health::Heard);
        assert_eq!(h.check(ticked(10, 108), DEADLINE, at(2400)), Health::Heard);
        assert_eq!(
            h.check(ticked(11, 110), DEADLINE, at(2501)),
            NOT_WRITTEN,
            "not written within the deadline from its waking, the pool's time half a TTL on"
        );

        let mut h = health_at(t0, 9);
        assert!(h.resumed(ticked(9, 106), at(1500)));
        assert!(!h.resumed(ticked(9, 112), at(3000)), "once per silence");
        assert_eq!(h.check(ticked(9, 112), DEADLINE, at(3000)), NOT_WRITTEN);

        let mut h = health_at(t0, 9);
        assert!(h.resumed(ticked(9, 106), at(1500)));
        h.written(Some(10), ticked(10, 106), at(1600));
        assert!(
            h.resumed(ticked(10, 112), at(3200)),
            "a batch was written since"
        );
        assert_eq!(h.check(ticked(10, 112), DEADLINE, at(3200)), Health::Heard);
    }

    #[test]
    fn a_newer_leaders_grace_counts_as_a_written_batch_once() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);

        // An election: no batch written since t0; the new leader's grace
        // (term 5) applied here at 800 ms.
        let mut h = health_at(t0, 9);
        h.grace_seen(4, 4, p(9), at(0));
        h.grace_seen(4, 5, p(9), at(500));
        assert_eq!(
            h.written_at, t0,
            "term 5 elected, its grace not applied yet"
        );
        h.grace_seen(5, 5, p(9), at(800));
        assert_eq!(
            h.check(p(9), DEADLINE, at(1001)),
            Health::Heard,
            "covered by the grace, not sent away"
        );
        h.grace_seen(5, 5, p(9), at(1500));
        assert_eq!(
            h.check(p(9), DEADLINE, at(1801)),
            NOT_WRITTEN,
            "the same grace seen again counts once: half a TTL after it"
        );

        // (pool term applied, raft term) at 900 ms. Cut off: no newer
        // grace is ever applied here. Catching up on the log: the grace of
        // term 5 applied while the raft is at term 8 was granted long ago.
        for (pool_term, current_term) in [(4, 7), (5, 8)] {
            let mut h = health_at(t0, 9);
            h.grace_seen(4, 4, p(9), at(0));
            h.grace_seen(pool_term, current_term, p(9), at(900));
            assert_eq!(h.check(p(9), DEADLINE, at(1001)), NOT_WRITTEN);
        }

        // A grace older than the last written batch moves nothing back.
        let mut h = health_at(t0, 9);
        h.written(None, p(9), at(700));
        h.grace_seen(6, 6, p(9), at(100));
        assert_eq!(h.check(p(9), DEADLINE, at(1600)), Health::Heard);
        assert_eq!(h.check(p(9), DEADLINE, at(1701)), NOT_WRITTEN);
    }

    #[test]
    fn a_large_pool_heartbeats_in_commands_under_the_bound() {
        let beats: Vec<_> = (0..3000).map(beat).collect();
        let runs = chunks(beats.clone());
        assert!(runs.len() > 1);
        for run in &runs {
            let encoded =
                Command::Heartbeat(pool::Heartbeat { beats: run.clone() }).encode_to_vec();
            assert!(
                encoded.len() <= HEARTBEAT_CHUNK_BYTES + 64,
                "{} bytes",
                encoded.len()
            );
        }
        assert_eq!(runs.concat(), beats);
        assert_eq!(chunks(vec![beat(1)]).len(), 1);
        assert!(chunks(Vec::new()).is_empty());
    }
}

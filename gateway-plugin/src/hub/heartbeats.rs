//! The per-tick heartbeat batch: every tick interval, one `Heartbeat`
//! command naming each attached member incarnation whose `HostStatus`
//! arrived recently (this gateway's monotonic clock decides "recently"; the
//! member's freshness is then counted in ticks inside apply).
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
//! written batch ([`BeatsHealth::grace_seen`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pool::Command;
use prost::Message;
use tracing::Instrument;

use super::Hub;
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
/// last seen applied; and the oldest written batch this gateway has not
/// applied yet.
#[derive(Debug)]
pub(crate) struct BeatsHealth {
    written_at: Instant,
    /// (log index, when it was written) of the oldest batch written through
    /// this gateway that its own state machine had not applied by then.
    unapplied: Option<(u64, Instant)>,
    /// The raft term of the last `LeaderChanged` this gateway had applied
    /// when it last looked ([`BeatsHealth::grace_seen`]).
    grace_term: u64,
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
        BeatsHealth {
            written_at: Instant::now(),
            unapplied: None,
            grace_term: 0,
        }
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
    fn grace_seen(&mut self, pool_term: u64, current_term: u64, now: Instant) {
        if pool_term > self.grace_term && pool_term == current_term {
            self.grace_term = pool_term;
            self.written_at = self.written_at.max(now);
        }
    }

    /// A batch was written at `index` (None: there was nothing to write)
    /// while this gateway had applied up to `applied`.
    fn written(&mut self, index: Option<u64>, applied: u64, now: Instant) {
        self.written_at = now;
        if let Some(index) = index.filter(|i| *i > applied) {
            // Keep the oldest: the lag is measured from it.
            self.unapplied.get_or_insert((index, now));
        }
    }

    /// At a tick with beats to write, this gateway having applied up to
    /// `applied`: whether its supervisors must go elsewhere. Each condition
    /// is reported once, then measured again from `now`.
    ///
    /// - not written for `deadline` (half the TTL, what one batch may take):
    ///   the members expire however alive they are;
    /// - written but not applied here for `deadline`: the gateway no longer
    ///   follows the log (a healthy follower applies a committed entry one
    ///   replication round after the leader, far less than half a TTL), so
    ///   its supervisors are never shown their takeovers or moves.
    fn check(&mut self, applied: u64, deadline: Duration, now: Instant) -> Option<Unheard> {
        if self.unapplied.is_some_and(|(index, _)| applied >= index) {
            self.unapplied = None;
        }
        if now.duration_since(self.written_at) > deadline {
            self.written_at = now;
            self.unapplied = None;
            return Some(Unheard::NotWritten);
        }
        if self
            .unapplied
            .is_some_and(|(_, since)| now.duration_since(since) > deadline)
        {
            self.unapplied = None;
            return Some(Unheard::NotApplied);
        }
        None
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

impl Hub {
    /// The members whose status arrived within `fresh_within`.
    fn fresh_beats(&self, fresh_within: Duration) -> Vec<pool::Beat> {
        self.streams
            .lock()
            .iter()
            .filter(|(_, a)| a.last_status.elapsed() <= fresh_within)
            .map(|(member, a)| pool::Beat {
                member: member.clone(),
                incarnation: a.incarnation,
            })
            .collect()
    }

    /// Every tick interval: one heartbeat batch for the members whose
    /// status arrived within two and a half status intervals, proposed in
    /// its own task (see the module doc: never behind an earlier batch).
    pub async fn run_heartbeats(self: Arc<Self>) {
        let mut ticker = tokio::time::interval(self.settings.tick_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let fresh_within = self.settings.status_interval * 2 + self.settings.status_interval / 2;
        let deadline = heartbeat_deadline(
            self.settings.tick_interval,
            self.settings.heartbeat_ttl_ticks,
        );
        // Batches of earlier ticks still proposing, oldest first. Aborting
        // one drops its forward or its wait for the batcher: harmless for
        // an idempotent command.
        let mut in_flight: VecDeque<tokio::task::JoinHandle<()>> = VecDeque::new();
        loop {
            ticker.tick().await;
            in_flight.retain(|batch| !batch.is_finished());
            let beats = self.fresh_beats(fresh_within);
            if beats.is_empty() {
                self.beats_written(None);
                continue;
            }
            let pool_term = self.node.read_local(|state, _| state.pool.raft_term());
            let current_term = self.node.raft().metrics().borrow().current_term;
            let unheard = {
                let now = Instant::now();
                let mut health = self.beats.lock().unwrap_or_else(|p| p.into_inner());
                health.grace_seen(pool_term, current_term, now);
                health.check(self.applied_index(), deadline, now)
            };
            if let Some(why) = unheard {
                self.send_away_unheard(why, deadline);
                continue;
            }
            while in_flight.len() >= HEARTBEATS_IN_FLIGHT {
                if let Some(oldest) = in_flight.pop_front() {
                    tracing::debug!("a heartbeat batch of an earlier tick dropped for a newer one");
                    oldest.abort();
                }
            }
            let span = tracing::debug_span!("heartbeat_batch", beats = beats.len());
            let hub = self.clone();
            in_flight.push_back(tokio::spawn(
                async move { hub.propose_beats(beats, deadline).await }.instrument(span),
            ));
        }
    }

    /// Proposes one tick's beats (in chunks under the command bound), each
    /// chunk as an idempotent write within `deadline`.
    async fn propose_beats(&self, beats: Vec<pool::Beat>, deadline: Duration) {
        let mut written = Some(0u64);
        for beats in chunks(beats) {
            let command =
                GatewayState::pool_command(&Command::Heartbeat(pool::Heartbeat { beats }));
            match self.node.write_idempotent(command, deadline).await {
                Ok(applied) => written = written.map(|i| i.max(applied.log_index)),
                Err(e) => {
                    tracing::debug!(error = %e, "heartbeat batch not applied");
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
        let applied = self.applied_index();
        self.beats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .written(index, applied, Instant::now());
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
    fn send_away_unheard(&self, why: Unheard, deadline: Duration) {
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

    /// - given: a gateway that writes a batch at index 10 having applied 9
    /// - then: nothing while the lag is under the deadline or once index 10
    ///   is applied; `NotApplied` once it has lasted longer, reported once;
    ///   `NotWritten` when no batch was written for the deadline
    #[test]
    fn a_gateway_is_unheard_when_its_batches_are_not_written_or_not_applied_in_time() {
        let deadline = Duration::from_secs(1);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);

        let mut h = BeatsHealth::new();
        h.written_at = t0;
        h.written(Some(10), 9, at(0));
        assert_eq!(h.check(9, deadline, at(900)), None);
        h.written(Some(11), 9, at(900));
        assert_eq!(
            h.check(9, deadline, at(1001)),
            Some(Unheard::NotApplied),
            "measured from the oldest"
        );
        assert_eq!(h.check(9, deadline, at(1100)), None, "reported once");

        let mut h = BeatsHealth::new();
        h.written_at = t0;
        h.written(Some(10), 9, at(0));
        assert_eq!(h.check(10, deadline, at(900)), None, "applied: no lag");
        assert!(h.unapplied.is_none());
        h.written(Some(12), 12, at(1500));
        assert_eq!(
            h.check(12, deadline, at(2400)),
            None,
            "a leader applies before it answers"
        );
        assert_eq!(h.check(12, deadline, at(2501)), Some(Unheard::NotWritten));
        assert_eq!(h.check(12, deadline, at(2600)), None, "reported once");
        h.written(None, 12, at(3000));
        assert_eq!(
            h.check(12, deadline, at(3900)),
            None,
            "nothing to write counts as written"
        );
    }

    #[test]
    fn a_newer_leaders_grace_counts_as_a_written_batch_once() {
        let deadline = Duration::from_secs(1);
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);

        // An election: no batch written since t0; the new leader's grace
        // (term 5) applied here at 800 ms.
        let mut h = BeatsHealth::new();
        h.written_at = t0;
        h.grace_seen(4, 4, at(0));
        h.grace_seen(4, 5, at(500));
        assert_eq!(
            h.written_at, t0,
            "term 5 elected, its grace not applied yet"
        );
        h.grace_seen(5, 5, at(800));
        assert_eq!(
            h.check(9, deadline, at(1001)),
            None,
            "covered by the grace, not sent away"
        );
        h.grace_seen(5, 5, at(1500));
        assert_eq!(
            h.check(9, deadline, at(1801)),
            Some(Unheard::NotWritten),
            "the same grace seen again counts once: half a TTL after it"
        );

        // (pool term applied, raft term) at 900 ms. Cut off: no newer
        // grace is ever applied here. Catching up on the log: the grace of
        // term 5 applied while the raft is at term 8 was granted long ago.
        for (pool_term, current_term) in [(4, 7), (5, 8)] {
            let mut h = BeatsHealth::new();
            h.written_at = t0;
            h.grace_seen(4, 4, at(0));
            h.grace_seen(pool_term, current_term, at(900));
            assert_eq!(h.check(9, deadline, at(1001)), Some(Unheard::NotWritten));
        }

        // A grace older than the last written batch moves nothing back.
        let mut h = BeatsHealth::new();
        h.written(None, 9, at(700));
        h.grace_seen(6, 6, at(100));
        assert_eq!(h.check(9, deadline, at(1600)), None);
        assert_eq!(h.check(9, deadline, at(1701)), Some(Unheard::NotWritten));
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

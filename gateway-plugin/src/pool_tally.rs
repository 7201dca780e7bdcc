//! [`PoolTally`]: what the pool commands applied at this replica did
//! (takeovers, moves, drains and how long they took in ticks, stale reports
//! refused), counted from each command's [`pool::Outcome`] next to the
//! apply, for the gateway's metrics.
//!
//! The pool crate stays pure: it records nothing. The tally lives beside
//! the replicated state in [`crate::state::GatewayState`], is never
//! replicated or snapshotted, and never changes an apply's result: replicas
//! that apply the same log still reach byte-identical state. It starts from
//! zero when the process starts or installs a snapshot (the exported
//! counters then count on from where they were; see
//! `crate::metrics::pool`). Every replica applies every command, so every
//! gateway counts every takeover: aggregate with `max`, not `sum`.

use std::collections::{BTreeMap, VecDeque};

use pool::{Command, Effect, Outcome, PoolState, Reason};

/// Finished drains whose duration is kept for the scraper to read.
pub const DRAINS_KEPT: usize = 64;

/// How a drain ended (the `result` label).
pub const DRAIN_RESULTS: [&str; 3] = ["succeeded", "failed", "cancelled"];

/// Why a report was refused as stale (the `reason` label).
pub const STALE_REASONS: [&str; 3] = ["term", "incarnation", "generation"];

/// A finished drain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinishedDrain {
    /// Counts finished drains from 1: the scraper observes each once.
    pub seq: u64,
    /// Ticks from the applied `StartDrain` to the end.
    pub ticks: u64,
    /// Index into [`DRAIN_RESULTS`].
    pub result: usize,
}

/// The counts (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolTally {
    /// `Takeover` commands applied (an owner changed).
    pub takeovers: u64,
    /// `Move` commands applied (a drain or rebalance moved a sandbox).
    pub moves: u64,
    /// `StartDrain` commands applied (started or queued).
    pub drains_started: u64,
    /// Finished drains by [`DRAIN_RESULTS`].
    pub drains_finished: [u64; 3],
    /// Reports refused as stale, by [`STALE_REASONS`].
    pub stale_reports_refused: [u64; 3],
    /// Leader-planned commands refused as fenced (planned in another raft
    /// term than the applied one: `pool::fence`), by
    /// [`pool::fence::FENCED_COMMANDS`].
    pub fenced_refused: [u64; pool::fence::FENCED_COMMANDS.len()],
    /// The last [`DRAINS_KEPT`] finished drains, oldest first.
    pub finished: VecDeque<FinishedDrain>,
    /// Drains started here and not finished: operation id -> start tick.
    running: BTreeMap<String, u64>,
}

impl PoolTally {
    /// Counts what `command` did (`state` is the state after it).
    pub fn record(&mut self, state: &PoolState, command: &Command, outcome: &Outcome) {
        match (command, outcome) {
            (Command::Takeover(_), Outcome::Applied(Effect::OwnerChanged(_))) => {
                self.takeovers += 1;
            }
            (Command::Move(_), Outcome::Applied(Effect::OwnerChanged(_))) => self.moves += 1,
            (
                Command::StartDrain(c),
                Outcome::Applied(Effect::OperationStarted | Effect::OperationQueued),
            ) => {
                self.drains_started += 1;
                self.running
                    .insert(c.operation_id.clone(), state.now_tick());
            }
            (_, Outcome::Rejected(Reason::FencedRaftTerm { .. })) => {
                let name = command.name();
                if let Some(i) = pool::fence::FENCED_COMMANDS.iter().position(|c| *c == name) {
                    self.fenced_refused[i] += 1;
                }
            }
            (Command::Report(_), Outcome::Rejected(reason)) => {
                if let Some(i) = stale_reason(reason) {
                    self.stale_reports_refused[i] += 1;
                }
            }
            _ => {}
        }
        if !self.running.is_empty() {
            self.finish_drains(state);
        }
    }

    /// Moves every tracked drain that ended (or was collected) to
    /// `finished`.
    fn finish_drains(&mut self, state: &PoolState) {
        let now = state.now_tick();
        let ended: Vec<(String, u64, usize)> = self
            .running
            .iter()
            .filter_map(|(id, started)| {
                let (end, result) = match state.operations().get(id) {
                    // Collected: it ended a retention ago; counted as failed
                    // only if it was never seen to end (a restore).
                    None => (now, 1),
                    Some(op) => (op.finished_tick?, drain_result(op.phase)?),
                };
                Some((id.clone(), end.saturating_sub(*started), result))
            })
            .collect();
        for (id, ticks, result) in ended {
            self.running.remove(&id);
            self.drains_finished[result] += 1;
            let seq = self.drains_finished.iter().sum();
            if self.finished.len() == DRAINS_KEPT {
                self.finished.pop_front();
            }
            self.finished
                .push_back(FinishedDrain { seq, ticks, result });
        }
    }
}

/// The [`DRAIN_RESULTS`] index of a finished phase.
fn drain_result(phase: pool::OperationPhase) -> Option<usize> {
    match phase {
        pool::OperationPhase::Succeeded => Some(0),
        pool::OperationPhase::Failed => Some(1),
        pool::OperationPhase::Cancelled => Some(2),
        pool::OperationPhase::Queued | pool::OperationPhase::Running => None,
    }
}

/// The [`STALE_REASONS`] index of a rejection, if it says the report was
/// stale.
fn stale_reason(reason: &Reason) -> Option<usize> {
    match reason {
        Reason::StaleTerm { .. } => Some(0),
        Reason::StaleIncarnation { .. } => Some(1),
        Reason::StaleGeneration { .. } => Some(2),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_report_is_counted_by_reason_and_nothing_else() {
        let mut tally = PoolTally::default();
        let state = PoolState::new();
        let report = Command::Report(pool::Report::default());
        let stale = Outcome::Rejected(Reason::StaleTerm {
            expected: 1,
            current: 2,
        });
        tally.record(&state, &report, &stale);
        tally.record(
            &state,
            &report,
            &Outcome::Rejected(Reason::UnknownSandbox("s".into())),
        );
        assert_eq!(tally.stale_reports_refused, [1, 0, 0]);
        assert_eq!(tally.takeovers, 0);
    }
}

//! `apply`: the deterministic transition function.
//!
//! Every `apply_<variant>` first checks all preconditions without mutating,
//! then mutates. A failed precondition returns `Rejected(reason)` and leaves
//! the state byte-identical (tests compare snapshots).
//!
//! This module holds the dispatch (one exhaustive match) and the checks every
//! applier shares; the appliers live in one file per family:
//! [`members`] (membership and logical time), [`sandboxes`] (launch,
//! ownership, reports, stop/delete), [`runtimes`] (the runtime endpoint and
//! launch failures the leader's launcher records), [`operations`]
//! (drain, rebalance) and [`gc`] (the garbage collection every `Tick`
//! runs).

use crate::command::*;
use crate::outcome::*;
use crate::state::*;

mod gc;
mod members;
mod operations;
mod runtimes;
mod sandboxes;

type R<T> = Result<T, Reason>;

fn check_id(id: &str) -> R<()> {
    if id.is_empty() {
        Err(Reason::EmptyId)
    } else {
        Ok(())
    }
}

fn check_max_parallel(n: u32) -> R<()> {
    if (1..=MAX_PARALLEL_LIMIT).contains(&n) {
        Ok(())
    } else {
        Err(Reason::InvalidMaxParallel(n))
    }
}

fn done(r: R<Effect>) -> Outcome {
    match r {
        Ok(e) => Outcome::Applied(e),
        Err(reason) => Outcome::Rejected(reason),
    }
}

impl PoolState {
    /// Applies one committed command at raft log `index`.
    ///
    /// Deterministic: the same state and command give the same outcome and
    /// the same next state on every replica.
    pub fn apply(&mut self, index: u64, cmd: &Command) -> Outcome {
        // A leader's decision counts only in its own raft term (crate::fence).
        if let Some(Err(reason)) = cmd.planned_raft_term().map(|t| self.check_fence(t)) {
            return Outcome::Rejected(reason);
        }
        done(match cmd {
            Command::Tick(c) => self.apply_tick(c),
            Command::Configure(c) => self.apply_configure(c),
            Command::LeaderChanged(c) => self.apply_leader_changed(c),
            Command::Join(c) => self.apply_join(c),
            Command::Heartbeat(c) => self.apply_heartbeat(c),
            Command::Leave(c) => self.apply_leave(c),
            Command::Expire(c) => self.apply_expire(c),
            Command::Launch(c) => self.apply_launch(c),
            Command::Takeover(c) => self.apply_takeover(c),
            Command::Acknowledge(c) => self.apply_acknowledge(c),
            Command::Report(c) => self.apply_report(index, c),
            Command::Stop(c) => self.apply_stop(c),
            Command::Delete(c) => self.apply_delete(c),
            Command::FailRecovery(c) => self.apply_fail_recovery(c),
            Command::StartDrain(c) => self.apply_start_drain(index, c),
            Command::StartRebalance(c) => self.apply_start_rebalance(index, c),
            Command::Move(c) => self.apply_move(c),
            Command::CompleteOperation(c) => self.apply_complete_operation(c),
            Command::FailOperation(c) => self.apply_fail_operation(c),
            Command::CancelOperation(c) => self.apply_cancel_operation(c),
            Command::RecordRuntime(c) => self.apply_record_runtime(index, c),
            Command::FailLaunch(c) => self.apply_fail_launch(c),
        })
    }
}

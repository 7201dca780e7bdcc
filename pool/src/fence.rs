//! Fencing leader-side decisions by raft term (ARCHITECTURE.md, "Leadership
//! is the lease"; docs/architecture.md, "Fenced commands").
//!
//! The coordinator, the launcher and the configuration a leader proposes
//! plan commands from what their leader read (the applied state) or observed
//! outside the log (the sandbox driver's list of runtimes). Such a command
//! may be in flight for seconds: a leader starved of CPU, paused or cut off
//! keeps believing it leads while a successor already acts. Every such
//! command carries the raft term it was planned in, and apply refuses it
//! unless that term is the one of the last applied `LeaderChanged` (which
//! every leader proposes before anything else, see [`crate::coordinator`]):
//! once a newer leader's term is in the log, nothing the old leader planned
//! lands, whichever gateway forwarded it. The raft term is a fencing token,
//! like a lease epoch.
//!
//! Commands proposed by clients, supervisors and every gateway (launches,
//! reports, heartbeats, stops, deletes, operations) are intentions, not
//! leader decisions: they are not fenced, and apply re-checks their
//! preconditions against the state at their log position.

use crate::command::Command;
use crate::outcome::Reason;
use crate::state::PoolState;

/// The names of the commands a leader plans ([`Command::name`] of every
/// variant whose [`Command::planned_raft_term`] is `Some`): the closed set
/// of labels for counting refusals.
pub const FENCED_COMMANDS: [&str; 11] = [
    "Tick",
    "Configure",
    "Expire",
    "Takeover",
    "Delete",
    "FailRecovery",
    "Move",
    "CompleteOperation",
    "FailOperation",
    "RecordRuntime",
    "FailLaunch",
];

impl Command {
    /// The raft term this command was planned in, for the commands a
    /// leader-side actor plans from what it read or observed (the
    /// coordinator, the launcher, the configuration the leader proposes);
    /// `None` for the commands whose proposer is a client, a supervisor or
    /// any gateway (their conditions are re-checked inside apply alone).
    ///
    /// Apply refuses a planned command ([`crate::Reason::FencedRaftTerm`])
    /// unless its term is the one of the last applied `LeaderChanged`: a
    /// deposed leader's decisions never land once its successor's term is
    /// in the log, however long they were in flight. `Some(0)` is a command
    /// written before fencing existed (or a client's `Delete`): it applies
    /// unfenced, as it did when it was written. docs/architecture.md
    /// ("Fenced commands") lists every command and why.
    pub fn planned_raft_term(&self) -> Option<u64> {
        match self {
            Command::Tick(c) => Some(c.raft_term),
            Command::Configure(c) => Some(c.raft_term),
            Command::Expire(c) => Some(c.raft_term),
            Command::Takeover(c) => Some(c.raft_term),
            Command::Delete(c) => Some(c.raft_term),
            Command::FailRecovery(c) => Some(c.raft_term),
            Command::Move(c) => Some(c.raft_term),
            Command::CompleteOperation(c) => Some(c.raft_term),
            Command::FailOperation(c) => Some(c.raft_term),
            Command::RecordRuntime(c) => Some(c.raft_term),
            Command::FailLaunch(c) => Some(c.raft_term),
            // Checked against its own term inside apply.
            Command::LeaderChanged(_)
            // A supervisor's or a gateway's own intentions and reports.
            | Command::Join(_)
            | Command::Heartbeat(_)
            | Command::Leave(_)
            | Command::Acknowledge(_)
            | Command::Report(_)
            // A client's intentions.
            | Command::Launch(_)
            | Command::Stop(_)
            | Command::StartDrain(_)
            | Command::StartRebalance(_)
            | Command::CancelOperation(_) => None,
        }
    }

    /// This command stamped with `raft_term`, the term of the leader that
    /// planned it (a command [`Command::planned_raft_term`] says is not
    /// planned by a leader is returned unchanged).
    #[must_use]
    pub fn planned_in(mut self, raft_term: u64) -> Command {
        let field = match &mut self {
            Command::Tick(c) => &mut c.raft_term,
            Command::Configure(c) => &mut c.raft_term,
            Command::Expire(c) => &mut c.raft_term,
            Command::Takeover(c) => &mut c.raft_term,
            Command::Delete(c) => &mut c.raft_term,
            Command::FailRecovery(c) => &mut c.raft_term,
            Command::Move(c) => &mut c.raft_term,
            Command::CompleteOperation(c) => &mut c.raft_term,
            Command::FailOperation(c) => &mut c.raft_term,
            Command::RecordRuntime(c) => &mut c.raft_term,
            Command::FailLaunch(c) => &mut c.raft_term,
            _ => return self,
        };
        *field = raft_term;
        self
    }
}

impl PoolState {
    /// Whether a command planned in raft term `planned` may apply here: 0
    /// (unfenced) always, otherwise only in the term of the last applied
    /// `LeaderChanged`.
    ///
    /// # Errors
    /// [`Reason::FencedRaftTerm`] naming both terms.
    pub fn check_fence(&self, planned: u64) -> Result<(), Reason> {
        if planned == 0 || planned == self.raft_term {
            Ok(())
        } else {
            Err(Reason::FencedRaftTerm {
                planned,
                current: self.raft_term,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::*;

    /// One command of every kind.
    fn every_command() -> Vec<Command> {
        vec![
            Command::Tick(Tick::default()),
            Command::Configure(Configure::default()),
            Command::LeaderChanged(LeaderChanged::default()),
            Command::Join(Join::default()),
            Command::Heartbeat(Heartbeat::default()),
            Command::Leave(Leave::default()),
            Command::Expire(Expire::default()),
            Command::Launch(Launch::default()),
            Command::Takeover(Takeover::default()),
            Command::Acknowledge(Acknowledge::default()),
            Command::Report(Report::default()),
            Command::Stop(Stop::default()),
            Command::Delete(Delete::default()),
            Command::FailRecovery(FailRecovery::default()),
            Command::StartDrain(StartDrain::default()),
            Command::StartRebalance(StartRebalance::default()),
            Command::Move(Move::default()),
            Command::CompleteOperation(CompleteOperation::default()),
            Command::FailOperation(FailOperation::default()),
            Command::CancelOperation(CancelOperation::default()),
            Command::RecordRuntime(RecordRuntime::default()),
            Command::FailLaunch(FailLaunch::default()),
        ]
    }

    /// `FENCED_COMMANDS` names exactly the commands that carry a planned
    /// term, and `planned_in` stamps exactly those (through the wire).
    #[test]
    fn the_fenced_set_is_the_set_of_commands_with_a_planned_term() {
        let mut fenced = Vec::new();
        for c in every_command() {
            let stamped = Command::decode(&c.clone().planned_in(7).encode_to_vec()).unwrap();
            match c.planned_raft_term() {
                Some(0) => {
                    assert_eq!(stamped.planned_raft_term(), Some(7), "{}", c.name());
                    fenced.push(c.name());
                }
                Some(t) => panic!("{} defaults to term {t}", c.name()),
                None => assert_eq!(stamped, c, "{} must not be stamped", c.name()),
            }
        }
        assert_eq!(fenced, FENCED_COMMANDS);
    }
}

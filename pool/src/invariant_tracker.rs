//! [`InvariantTracker`]: the invariants across steps (a command and the
//! state it left), next to [`crate::invariants`], which checks one state.

use std::collections::BTreeMap;

use crate::command::Command;
use crate::invariants::{fail, InvariantViolation};
use crate::state::*;

#[derive(Clone, Debug)]
struct SandboxSeen {
    generation: u64,
    phase: Phase,
    member: String,
    incarnation: u64,
    term: u64,
    credential_epoch: u64,
    runtime: Option<Runtime>,
}

/// Checks invariants across steps: terms and epochs strictly increase on
/// every owner change (I1, I2), takeovers only of dead/draining owners as
/// seen at the previous log position (I4), deleted/failed never revived and
/// stopping never recovered (I8), time and incarnations never go back, and a
/// recorded runtime belongs to its generation and is never replaced.
#[derive(Clone, Debug, Default)]
pub struct InvariantTracker {
    sandboxes: BTreeMap<String, SandboxSeen>,
    members: BTreeMap<String, (u64, MemberState)>,
    now_tick: u64,
    generation_floor: u64,
}

impl InvariantTracker {
    /// A tracker that has seen nothing (start it on an empty state, or call
    /// [`InvariantTracker::from_state`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// A tracker primed with a state.
    pub fn from_state(state: &PoolState) -> Self {
        let mut t = Self::new();
        t.remember(state);
        t
    }

    fn remember(&mut self, state: &PoolState) {
        self.now_tick = state.now_tick;
        self.generation_floor = state.generation_floor;
        self.members = state
            .members
            .values()
            .map(|m| (m.id.clone(), (m.incarnation, m.state)))
            .collect();
        self.sandboxes = state
            .sandboxes
            .values()
            .map(|s| {
                (
                    s.id.clone(),
                    SandboxSeen {
                        generation: s.generation,
                        phase: s.phase,
                        member: s.owner.member.clone(),
                        incarnation: s.owner.incarnation,
                        term: s.owner.term,
                        credential_epoch: s.owner.credential_epoch,
                        runtime: s.runtime.clone(),
                    },
                )
            })
            .collect();
    }

    /// Observes the state after `cmd` was applied to the previously observed
    /// state.
    ///
    /// # Errors
    /// The first cross-step violation.
    pub fn observe(&mut self, cmd: &Command, state: &PoolState) -> Result<(), InvariantViolation> {
        let r = self.check(cmd, state);
        self.remember(state);
        r
    }

    /// Time, incarnations and the generation floor never go back; a new
    /// sandbox record never reuses a collected generation.
    fn check_counters(&self, state: &PoolState) -> Result<(), InvariantViolation> {
        if state.now_tick < self.now_tick {
            return fail("state", "time went back".to_string());
        }
        for m in state.members.values() {
            if let Some((inc, _)) = self.members.get(&m.id) {
                if m.incarnation < *inc {
                    return fail("state", format!("{}: incarnation went back", m.id));
                }
            }
        }
        if state.generation_floor < self.generation_floor {
            return fail("I1", "generation floor went back".to_string());
        }
        for s in state.sandboxes.values() {
            if !self.sandboxes.contains_key(&s.id) && s.generation <= self.generation_floor {
                return fail(
                    "I1",
                    format!("{}: generation {} reused", s.id, s.generation),
                );
            }
        }
        Ok(())
    }

    fn check(&self, cmd: &Command, state: &PoolState) -> Result<(), InvariantViolation> {
        self.check_counters(state)?;
        for (id, prev) in &self.sandboxes {
            let Some(s) = state.sandboxes.get(id) else {
                // Only garbage collection (in a Tick) removes a record, and
                // only a terminal one.
                let collected = matches!(cmd, Command::Tick(_))
                    && matches!(prev.phase, Phase::Deleted | Phase::Failed);
                if collected {
                    continue;
                }
                return fail("I8", format!("{id}: sandbox record vanished"));
            };
            if s.generation < prev.generation {
                return fail("I1", format!("{id}: generation went back"));
            }
            if s.generation > prev.generation {
                if !matches!(prev.phase, Phase::Deleted | Phase::Failed) {
                    return fail("I1", format!("{id}: new generation over a live one"));
                }
                if s.runtime.is_some() && !matches!(cmd, Command::RecordRuntime(_)) {
                    return fail(
                        "runtime",
                        format!("{id}: a new generation inherited a runtime"),
                    );
                }
                continue;
            }
            match (&prev.runtime, &s.runtime) {
                (Some(before), after) if after.as_ref() != Some(before) => {
                    return fail("runtime", format!("{id}: recorded runtime replaced"));
                }
                (None, Some(_)) if !matches!(cmd, Command::RecordRuntime(_)) => {
                    return fail(
                        "runtime",
                        format!("{id}: runtime recorded by {}", cmd.name()),
                    );
                }
                _ => {}
            }
            let owner_changed =
                s.owner.member != prev.member || s.owner.incarnation != prev.incarnation;
            let terminal_ok =
                s.phase == prev.phase || (prev.phase == Phase::Failed && s.phase == Phase::Deleted);
            if matches!(prev.phase, Phase::Deleted | Phase::Failed)
                && (!terminal_ok || owner_changed)
            {
                return fail("I8", format!("{id}: {:?} generation revived", prev.phase));
            }
            // A stopping generation ends deleted, or failed when its runtime
            // is lost (`FailLaunch`); it is never recovered or moved.
            let stopping_ends = match s.phase {
                Phase::Stopping | Phase::Deleted => true,
                Phase::Failed => matches!(cmd, Command::FailLaunch(_)),
                _ => false,
            };
            if prev.phase == Phase::Stopping && (!stopping_ends || owner_changed) {
                return fail("I8", format!("{id}: stopping sandbox recovered or moved"));
            }
            if s.owner.term < prev.term || s.owner.credential_epoch < prev.credential_epoch {
                return fail("I1", format!("{id}: term or credential epoch went back"));
            }
            if owner_changed
                && (s.owner.term <= prev.term || s.owner.credential_epoch <= prev.credential_epoch)
            {
                return fail(
                    "I2",
                    format!("{id}: owner changed without term and credential epoch bump"),
                );
            }
            if owner_changed {
                match cmd {
                    Command::Takeover(_) => {
                        let dead = match self.members.get(&prev.member) {
                            None => false,
                            Some((inc, st)) => {
                                *inc > prev.incarnation
                                    || matches!(
                                        st,
                                        MemberState::Expired
                                            | MemberState::Leaving
                                            | MemberState::Draining
                                    )
                            }
                        };
                        if !dead {
                            return fail(
                                "I4",
                                format!("{id}: taken over from a live owner {}", prev.member),
                            );
                        }
                    }
                    Command::Move(_) => {}
                    other => {
                        return fail("I1", format!("{id}: owner changed by {}", other.name()));
                    }
                }
            }
        }
        Ok(())
    }
}

//! Invariant checks: [`PoolState::check_invariants`] on one state and
//! [`InvariantTracker`] across steps. Used by tests and available to the
//! gateway for debug assertions.

use std::collections::{BTreeMap, BTreeSet};

use crate::command::Command;
use crate::state::*;

/// A broken invariant.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{invariant} violated: {detail}")]
pub struct InvariantViolation {
    /// Which invariant (`I1`..`I8`, `state` for structural checks, or
    /// `runtime` for the runtime record).
    pub invariant: &'static str,
    /// What was found.
    pub detail: String,
}

fn fail<T>(invariant: &'static str, detail: String) -> Result<T, InvariantViolation> {
    Err(InvariantViolation { invariant, detail })
}

impl PoolState {
    /// Checks I1–I6 and I8 as far as a single state shows them.
    ///
    /// # Errors
    /// The first violation found.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.check_bounds()?;
        self.check_finish_ticks()?;
        let charged = self.check_sandboxes()?;
        self.check_charges(&charged)?;
        self.check_launches()?;
        self.check_operations()
    }

    /// Ranges apply relies on (a restored snapshot could hold anything):
    /// config values within 1..=`MAX_CONFIG_TICKS`, counters at most
    /// `MAX_COUNTER`, so no `now + value` or `+ 1` in apply can overflow.
    fn check_bounds(&self) -> Result<(), InvariantViolation> {
        let c = self.config;
        for (name, v) in [
            ("heartbeat_ttl_ticks", c.heartbeat_ttl_ticks),
            ("recovery_deadline_ticks", c.recovery_deadline_ticks),
            ("operation_deadline_ticks", c.operation_deadline_ticks),
            ("retention_ticks", c.retention_ticks),
        ] {
            if !(1..=MAX_CONFIG_TICKS).contains(&v) {
                return fail("state", format!("config {name} = {v} out of range"));
            }
        }
        let mut counters = vec![
            ("now_tick", self.now_tick),
            ("generation_floor", self.generation_floor),
        ];
        for m in self.members.values() {
            counters.push(("member incarnation", m.incarnation));
        }
        for s in self.sandboxes.values() {
            counters.push(("generation", s.generation));
            counters.push(("term", s.owner.term));
            counters.push(("credential_epoch", s.owner.credential_epoch));
        }
        match counters.into_iter().find(|(_, v)| *v > MAX_COUNTER) {
            Some((name, v)) => fail("state", format!("{name} {v} above {MAX_COUNTER}")),
            None => Ok(()),
        }
    }

    /// Garbage collection's bookkeeping: a terminal sandbox, a finished
    /// operation and a departed member carry the tick they finished; a live
    /// one does not (sandbox, operation).
    fn check_finish_ticks(&self) -> Result<(), InvariantViolation> {
        for s in self.sandboxes.values() {
            let terminal = matches!(s.phase, Phase::Deleted | Phase::Failed);
            if terminal != s.ended_tick.is_some() {
                return fail(
                    "state",
                    format!("{}: {:?} with ended_tick {:?}", s.id, s.phase, s.ended_tick),
                );
            }
        }
        for o in self.operations.values() {
            let finished = o.phase > OperationPhase::Running;
            if finished != o.finished_tick.is_some() {
                return fail(
                    "state",
                    format!(
                        "{}: {:?} with finished_tick {:?}",
                        o.id, o.phase, o.finished_tick
                    ),
                );
            }
        }
        for m in self.members.values() {
            let departed = matches!(m.state, MemberState::Leaving | MemberState::Expired);
            if departed && m.down_since_tick.is_none() {
                return fail(
                    "state",
                    format!("{}: departed without a departure tick", m.id),
                );
            }
        }
        Ok(())
    }

    /// I1, I3, I4, I5 per sandbox record; returns how many charged sandboxes
    /// each member owns.
    fn check_sandboxes(&self) -> Result<BTreeMap<&str, u32>, InvariantViolation> {
        let mut charged: BTreeMap<&str, u32> = BTreeMap::new();
        let refused: BTreeSet<&str> = self
            .launches
            .iter()
            .filter(|(_, l)| matches!(l, LaunchOutcome::Refused { .. }))
            .map(|(k, _)| k.as_str())
            .collect();
        for s in self.sandboxes.values() {
            let o = &s.owner;
            if s.generation == 0 || o.term == 0 || o.credential_epoch == 0 {
                return fail(
                    "I1",
                    format!("{}: zero generation/term/credential_epoch", s.id),
                );
            }
            let Some(m) = self.members.get(&o.member) else {
                return fail(
                    "I4",
                    format!("{}: owner member {} has no record", s.id, o.member),
                );
            };
            if o.incarnation > m.incarnation {
                return fail("I1", format!("{}: owner incarnation from the future", s.id));
            }
            match s.phase {
                Phase::Assigned if !o.acknowledged => {
                    return fail("I3", format!("{}: assigned but unacknowledged", s.id));
                }
                Phase::Admitting | Phase::Recovering if o.acknowledged => {
                    return fail("I3", format!("{}: {:?} but acknowledged", s.id, s.phase));
                }
                _ => {}
            }
            if (s.phase == Phase::Recovering) != s.recovery.is_some() {
                return fail("state", format!("{}: recovery record mismatch", s.id));
            }
            if let Some(r) = &s.last_report {
                if r.term > o.term {
                    return fail("I3", format!("{}: report from a future term", s.id));
                }
                if r.term == o.term
                    && (!o.acknowledged || r.member != o.member || r.incarnation != o.incarnation)
                {
                    return fail(
                        "I3",
                        format!("{}: current-term report not from acknowledged owner", s.id),
                    );
                }
            }
            if s.phase.is_charged() {
                *charged.entry(o.member.as_str()).or_insert(0) += 1;
            } else if !s.material_ref.is_empty() {
                return fail(
                    "I5",
                    format!("{}: {:?} still holds launch material", s.id, s.phase),
                );
            }
            if refused.contains(s.launch_id.as_str()) {
                return fail(
                    "I5",
                    format!("{}: belongs to refused launch {}", s.id, s.launch_id),
                );
            }
        }
        Ok(charged)
    }

    /// I5: each member's charge equals the sandboxes it owns, within capacity.
    fn check_charges(&self, charged: &BTreeMap<&str, u32>) -> Result<(), InvariantViolation> {
        for m in self.members.values() {
            let n = charged.get(m.id.as_str()).copied().unwrap_or(0);
            if m.charged != n {
                return fail(
                    "I5",
                    format!("{}: charged {} but owns {n}", m.id, m.charged),
                );
            }
            if m.capacity == 0 || m.charged > m.capacity {
                return fail(
                    "I5",
                    format!("{}: charged {} of capacity {}", m.id, m.charged, m.capacity),
                );
            }
        }
        Ok(())
    }

    /// I5: every admitted launch still has its sandbox record.
    fn check_launches(&self) -> Result<(), InvariantViolation> {
        for (id, l) in &self.launches {
            if let LaunchOutcome::Admitted {
                sandbox,
                generation,
                ..
            } = l
            {
                match self.sandboxes.get(sandbox) {
                    Some(s) if s.generation > *generation => {}
                    Some(s) if s.generation == *generation && s.launch_id == *id => {}
                    _ => {
                        return fail(
                            "I5",
                            format!("launch {id}: admitted sandbox record missing"),
                        )
                    }
                }
            }
        }
        Ok(())
    }

    /// I6: one running operation, with a deadline, within max_parallel; a
    /// drained member is not active, a draining one is held by a drain.
    fn check_operations(&self) -> Result<(), InvariantViolation> {
        let running: Vec<&Operation> = self
            .operations
            .values()
            .filter(|o| o.phase == OperationPhase::Running)
            .collect();
        if running.len() > 1 {
            return fail("I6", format!("{} operations running", running.len()));
        }
        if let Some(op) = running.first() {
            if op.deadline_tick.is_none() {
                return fail("I6", format!("{}: running without deadline", op.id));
            }
        }
        for op in self.operations.values() {
            if !(1..=MAX_PARALLEL_LIMIT).contains(&op.max_parallel) {
                return fail("I6", format!("{}: max_parallel {}", op.id, op.max_parallel));
            }
            if self.moves_in_flight(&op.id) > op.max_parallel {
                return fail(
                    "I6",
                    format!("{}: more moves in flight than max_parallel", op.id),
                );
            }
            if let OperationKind::DrainMember { member } = &op.kind {
                let held = matches!(
                    op.phase,
                    OperationPhase::Running | OperationPhase::Succeeded
                );
                if held
                    && self
                        .members
                        .get(member)
                        .is_some_and(|m| m.state == MemberState::Active)
                {
                    return fail(
                        "I6",
                        format!("{}: drained member {member} is active", op.id),
                    );
                }
            }
        }
        for m in self.members.values() {
            if m.state == MemberState::Draining {
                let held = self.operations.values().any(|o| {
                    matches!(&o.kind, OperationKind::DrainMember { member } if *member == m.id)
                        && matches!(o.phase, OperationPhase::Running | OperationPhase::Succeeded)
                });
                if !held {
                    return fail("I6", format!("{}: draining with no drain holding it", m.id));
                }
            }
        }
        Ok(())
    }
}

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

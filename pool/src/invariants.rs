//! Invariant checks on one state: [`PoolState::check_invariants`], and
//! [`InvariantViolation`], what any check reports (across steps:
//! [`crate::invariant_tracker`]). Used by tests and available to the
//! gateway for debug assertions.

use std::collections::{BTreeMap, BTreeSet};

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

pub(crate) fn fail<T>(invariant: &'static str, detail: String) -> Result<T, InvariantViolation> {
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
        self.check_operations()?;
        self.check_indexes()
    }

    /// The tables' derived indexes (`crate::table`) match their records.
    fn check_indexes(&self) -> Result<(), InvariantViolation> {
        self.sandboxes
            .check_index()
            .and_then(|()| self.launches.check_index())
            .or_else(|detail| fail("state", detail))
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
        for (id, l) in self.launches.iter() {
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

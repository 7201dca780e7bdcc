//! Appliers of the maintenance-operation commands: `StartDrain`,
//! `StartRebalance`, `Move`, `CompleteOperation`, `FailOperation`,
//! `CancelOperation`, and the one-at-a-time queue they share (I6).

// The parent's imports (commands, state) and shared checks.
use super::*;

impl PoolState {
    /// Eligible members other than `member` exist (I6 drain refusal).
    pub(super) fn others_eligible(&self, member: &str) -> bool {
        self.members
            .values()
            .any(|m| m.id != member && self.is_eligible(m))
    }

    /// Creates a drain; runs it now if nothing runs, else queues it (I6).
    /// A drain that would leave no eligible member is refused (I6).
    pub(super) fn apply_start_drain(&mut self, index: u64, c: &StartDrain) -> R<Effect> {
        check_id(&c.operation_id)?;
        check_max_parallel(c.max_parallel)?;
        if self.operations.contains_key(&c.operation_id) {
            return Err(Reason::OperationExists(c.operation_id.clone()));
        }
        if !self.members.contains_key(&c.member) {
            return Err(Reason::UnknownMember(c.member.clone()));
        }
        let busy = self.operations.values().any(|o| {
            matches!(&o.kind, OperationKind::DrainMember { member } if *member == c.member)
                && matches!(o.phase, OperationPhase::Queued | OperationPhase::Running)
        });
        if busy {
            return Err(Reason::OperationInProgress);
        }
        if !self.others_eligible(&c.member) {
            return Err(Reason::WouldLeaveNoEligibleMember);
        }
        self.create_operation(
            index,
            &c.operation_id,
            OperationKind::DrainMember {
                member: c.member.clone(),
            },
            c.max_parallel,
        )
    }

    /// Creates a rebalance; runs it now if nothing runs, else queues it (I6).
    pub(super) fn apply_start_rebalance(&mut self, index: u64, c: &StartRebalance) -> R<Effect> {
        check_id(&c.operation_id)?;
        check_max_parallel(c.max_parallel)?;
        if self.operations.contains_key(&c.operation_id) {
            return Err(Reason::OperationExists(c.operation_id.clone()));
        }
        self.create_operation(
            index,
            &c.operation_id,
            OperationKind::RebalancePool,
            c.max_parallel,
        )
    }

    pub(super) fn create_operation(
        &mut self,
        index: u64,
        id: &str,
        kind: OperationKind,
        max_parallel: u32,
    ) -> R<Effect> {
        self.operations.insert(
            id.to_string(),
            Operation {
                id: id.to_string(),
                kind,
                phase: OperationPhase::Queued,
                message: "queued".to_string(),
                attempts: 0,
                moves_planned: 0,
                moves_done: 0,
                max_parallel,
                deadline_tick: None,
                created_index: index,
                finished_tick: None,
            },
        );
        if self.running_operation().is_none() {
            self.promote(id);
            match self.operations[id].phase {
                OperationPhase::Running => Ok(Effect::OperationStarted),
                _ => Ok(Effect::OperationFailed),
            }
        } else {
            Ok(Effect::OperationQueued)
        }
    }

    /// Starts a queued operation (I6: the caller ensures none is running). A
    /// drain that would now leave no eligible member fails instead.
    pub(super) fn promote(&mut self, id: &str) {
        let now = self.now_tick;
        let deadline = now.saturating_add(self.config.operation_deadline_ticks);
        let kind = self.operations[id].kind.clone();
        let (planned, ok) = match &kind {
            OperationKind::DrainMember { member } => {
                let ok = self.others_eligible(member);
                if ok {
                    if let Some(m) = self.members.get_mut(member) {
                        if m.state == MemberState::Active {
                            m.state = MemberState::Draining;
                        }
                    }
                }
                (self.members.get(member).map(|m| m.charged).unwrap_or(0), ok)
            }
            OperationKind::RebalancePool => (self.rebalance_candidates().len() as u32, true),
        };
        let Some(op) = self.operations.get_mut(id) else {
            unreachable!("operation {id} vanished")
        };
        if ok {
            op.phase = OperationPhase::Running;
            op.message = "running".to_string();
            op.moves_planned = planned;
            op.deadline_tick = Some(deadline);
        } else {
            op.phase = OperationPhase::Failed;
            op.message = "drain would leave no eligible member".to_string();
            op.finished_tick = Some(now);
        }
    }

    /// After the running operation ends, starts the oldest queued one (I6).
    pub(super) fn promote_next(&mut self) {
        loop {
            if self.running_operation().is_some() {
                return;
            }
            let next = self
                .operations
                .values()
                .filter(|o| o.phase == OperationPhase::Queued)
                .min_by_key(|o| (o.created_index, o.id.clone()))
                .map(|o| o.id.clone());
            match next {
                Some(id) => self.promote(&id),
                None => return,
            }
        }
    }

    pub(super) fn running(&self, id: &str) -> R<&Operation> {
        let op = self
            .operations
            .get(id)
            .ok_or_else(|| Reason::UnknownOperation(id.to_string()))?;
        if op.phase != OperationPhase::Running {
            return Err(Reason::OperationNotRunning);
        }
        Ok(op)
    }

    /// A planned move for the running operation: same path as a takeover
    /// (I1/I2: term and epoch +1, new owner must acknowledge, I3), bounded by
    /// `max_parallel`, never for stopping/deleted sandboxes (I8), target has
    /// a free slot (I5).
    pub(super) fn apply_move(&mut self, c: &Move) -> R<Effect> {
        let op = self.running(&c.operation_id)?;
        let s = self.movable(&c.sandbox, c.generation)?;
        Self::check_owner(
            s,
            &c.expected_owner,
            c.expected_incarnation,
            c.expected_term,
        )?;
        match &op.kind {
            OperationKind::DrainMember { member } => {
                if s.owner.member != *member {
                    return Err(Reason::NotPlanned);
                }
            }
            OperationKind::RebalancePool => {
                if s.phase != Phase::Assigned {
                    return Err(Reason::NotAcknowledged);
                }
            }
        }
        if self.moves_in_flight(&op.id) >= op.max_parallel {
            return Err(Reason::ParallelLimit);
        }
        let owner = s.owner.member.clone();
        let target = match &c.to {
            Some(to) => {
                let m = self
                    .members
                    .get(to)
                    .ok_or_else(|| Reason::UnknownMember(to.clone()))?;
                if m.id == owner || !self.is_eligible(m) {
                    return Err(Reason::InvalidTarget(to.clone()));
                }
                if m.free() == 0 {
                    return Err(Reason::CapacityExhausted);
                }
                (m.id.clone(), m.incarnation)
            }
            None => self
                .place(&c.sandbox, c.generation, |m| {
                    m.id != owner && self.is_eligible(m) && m.free() > 0
                })
                .map(|m| (m.id.clone(), m.incarnation))
                .ok_or(Reason::NoEligibleMember)?,
        };
        let a = self.change_owner(
            &c.sandbox,
            target.0,
            target.1,
            RecoveryCause::Move(c.operation_id.clone()),
        );
        if let Some(op) = self.operations.get_mut(&c.operation_id) {
            op.attempts = op.attempts.saturating_add(1);
        }
        Ok(Effect::OwnerChanged(a))
    }

    /// Completes the running operation if its work is done (checked here):
    /// a drain when the member owns nothing, a rebalance when nothing is
    /// misplaced and no move is in flight. Then starts the next (I6). A
    /// completed drain keeps the member out of service until cancelled.
    pub(super) fn apply_complete_operation(&mut self, c: &CompleteOperation) -> R<Effect> {
        let now = self.now_tick;
        let op = self.running(&c.operation_id)?;
        let complete = match &op.kind {
            // A drain is done when the member owns nothing AND every moved
            // sandbox was acknowledged by its new owner (sessions are safe).
            OperationKind::DrainMember { member } => {
                self.members.get(member).map(|m| m.charged).unwrap_or(0) == 0
                    && self.moves_in_flight(&op.id) == 0
            }
            OperationKind::RebalancePool => {
                self.moves_in_flight(&op.id) == 0 && self.rebalance_candidates().is_empty()
            }
        };
        if !complete {
            return Err(Reason::OperationNotComplete);
        }
        let Some(op) = self.operations.get_mut(&c.operation_id) else {
            unreachable!("operation vanished")
        };
        op.phase = OperationPhase::Succeeded;
        op.message = "succeeded".to_string();
        op.finished_tick = Some(now);
        self.promote_next();
        Ok(Effect::OperationSucceeded)
    }

    /// Fails the running operation once its deadline passed; a drained member
    /// returns to service (I6). Then starts the next.
    pub(super) fn apply_fail_operation(&mut self, c: &FailOperation) -> R<Effect> {
        let now = self.now_tick;
        let op = self.running(&c.operation_id)?;
        if op.deadline_tick.is_none_or(|d| self.now_tick < d) {
            return Err(Reason::DeadlineNotReached);
        }
        let kind = op.kind.clone();
        let Some(op) = self.operations.get_mut(&c.operation_id) else {
            unreachable!("operation vanished")
        };
        op.phase = OperationPhase::Failed;
        op.message = "deadline passed".to_string();
        op.finished_tick = Some(now);
        self.undrain(&kind);
        self.promote_next();
        Ok(Effect::OperationFailed)
    }

    /// Returns a drained member to service unless another drain holds it.
    /// Call after the operation's phase changed.
    pub(super) fn undrain(&mut self, kind: &OperationKind) {
        if let OperationKind::DrainMember { member } = kind {
            if self.drain_holds(member) {
                return;
            }
            if let Some(m) = self.members.get_mut(member) {
                if m.state == MemberState::Draining {
                    m.state = MemberState::Active;
                }
            }
        }
    }

    /// Cancels a queued or running operation, or returns a completed drain's
    /// member to service; the member becomes Active again (I6). Moves already
    /// made stay (they were ownership changes with their own terms).
    pub(super) fn apply_cancel_operation(&mut self, c: &CancelOperation) -> R<Effect> {
        let now = self.now_tick;
        let op = self
            .operations
            .get(&c.operation_id)
            .ok_or_else(|| Reason::UnknownOperation(c.operation_id.clone()))?;
        let is_drain = matches!(op.kind, OperationKind::DrainMember { .. });
        match op.phase {
            OperationPhase::Queued | OperationPhase::Running => {}
            OperationPhase::Succeeded if is_drain => {}
            _ => return Err(Reason::OperationFinished),
        }
        let kind = op.kind.clone();
        let held = matches!(
            op.phase,
            OperationPhase::Running | OperationPhase::Succeeded
        );
        let Some(op) = self.operations.get_mut(&c.operation_id) else {
            unreachable!("operation vanished")
        };
        op.message = if op.phase == OperationPhase::Succeeded {
            "cancelled after success: member returned to service".to_string()
        } else {
            "cancelled".to_string()
        };
        op.phase = OperationPhase::Cancelled;
        op.finished_tick = Some(now);
        if held {
            self.undrain(&kind);
        }
        self.promote_next();
        Ok(Effect::OperationCancelled)
    }
}

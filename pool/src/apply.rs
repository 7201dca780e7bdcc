//! `apply`: the deterministic transition function.
//!
//! Every `apply_<variant>` first checks all preconditions without mutating,
//! then mutates. A failed precondition returns `Rejected(reason)` and leaves
//! the state byte-identical (tests compare snapshots).

use crate::command::*;
use crate::state::*;

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
        })
    }

    /// Advances logical time. Keeps "deadlines stretch, never shrink": the
    /// `expected_now_tick` precondition stops two proposers from advancing
    /// time twice for one interval.
    fn apply_tick(&mut self, c: &Tick) -> R<Effect> {
        if c.expected_now_tick != self.now_tick {
            return Err(Reason::StaleTick {
                expected: c.expected_now_tick,
                current: self.now_tick,
            });
        }
        self.now_tick += 1;
        Ok(Effect::Ticked {
            now_tick: self.now_tick,
        })
    }

    /// Sets timeouts (all > 0). Keeps the liveness basis of I4.
    fn apply_configure(&mut self, c: &Configure) -> R<Effect> {
        if c.heartbeat_ttl_ticks == 0 {
            return Err(Reason::InvalidConfig("heartbeat_ttl_ticks".into()));
        }
        if c.recovery_deadline_ticks == 0 {
            return Err(Reason::InvalidConfig("recovery_deadline_ticks".into()));
        }
        if c.operation_deadline_ticks == 0 {
            return Err(Reason::InvalidConfig("operation_deadline_ticks".into()));
        }
        self.config = Config {
            heartbeat_ttl_ticks: c.heartbeat_ttl_ticks,
            recovery_deadline_ticks: c.recovery_deadline_ticks,
            operation_deadline_ticks: c.operation_deadline_ticks,
        };
        Ok(Effect::Configured)
    }

    /// Grants every non-expired member a full TTL (I4).
    ///
    /// Why: while there is no leader no heartbeat batch commits, and the
    /// batches a gateway accepted during the election may have been lost
    /// with the old leader. Without this grace, a member that heartbeated
    /// faithfully could be expired by the new leader's first coordinator
    /// pass, and its healthy sandboxes taken over. With it, no member
    /// expires sooner than one TTL after the new leader starts.
    fn apply_leader_changed(&mut self, c: &LeaderChanged) -> R<Effect> {
        if c.leader_term <= self.leader_term {
            return Err(Reason::StaleLeaderTerm {
                given: c.leader_term,
                current: self.leader_term,
            });
        }
        self.leader_term = c.leader_term;
        let now = self.now_tick;
        let mut n = 0;
        for m in self.members.values_mut() {
            if m.state != MemberState::Expired {
                m.last_heartbeat_tick = now;
                n += 1;
            }
        }
        Ok(Effect::GraceGranted { members: n })
    }

    /// Joins a member incarnation. A higher incarnation supersedes the old
    /// one: the member keeps its charged sandboxes, but they now belong to a
    /// dead incarnation and become eligible for takeover (I4), by the new
    /// incarnation or others, through the normal `Takeover` path (new term
    /// and epoch, I1/I2). Capacity may never drop below the slots still
    /// charged (I5).
    fn apply_join(&mut self, c: &Join) -> R<Effect> {
        check_id(&c.member)?;
        if c.capacity == 0 {
            return Err(Reason::ZeroCapacity);
        }
        let now = self.now_tick;
        match self.members.get(&c.member) {
            Some(m) if c.incarnation < m.incarnation => Err(Reason::StaleIncarnation {
                given: c.incarnation,
                current: m.incarnation,
            }),
            Some(m) if c.incarnation == m.incarnation => {
                if matches!(m.state, MemberState::Expired | MemberState::Leaving) {
                    Err(Reason::IncarnationRetired)
                } else {
                    Ok(Effect::AlreadyJoined)
                }
            }
            Some(m) => {
                if c.capacity < m.charged {
                    return Err(Reason::CapacityBelowCharge {
                        capacity: c.capacity,
                        charged: m.charged,
                    });
                }
                let drained = self.drain_holds(&c.member);
                let Some(m) = self.members.get_mut(&c.member) else {
                    unreachable!("member {} vanished", c.member)
                };
                let old = m.incarnation;
                m.uid = c.uid.clone();
                m.incarnation = c.incarnation;
                m.address = c.address.clone();
                m.capacity = c.capacity;
                m.state = if drained {
                    MemberState::Draining
                } else {
                    MemberState::Active
                };
                m.last_heartbeat_tick = now;
                m.down_since_tick = Some(now);
                Ok(Effect::Joined {
                    superseded: Some(old),
                })
            }
            None => {
                self.members.insert(
                    c.member.clone(),
                    Member {
                        id: c.member.clone(),
                        uid: c.uid.clone(),
                        incarnation: c.incarnation,
                        address: c.address.clone(),
                        capacity: c.capacity,
                        charged: 0,
                        state: MemberState::Active,
                        last_heartbeat_tick: now,
                        down_since_tick: None,
                    },
                );
                self.ring.add(&c.member);
                Ok(Effect::Joined { superseded: None })
            }
        }
    }

    /// True if a running or succeeded drain holds this member out of service.
    fn drain_holds(&self, member: &str) -> bool {
        self.operations.values().any(|o| {
            matches!(&o.kind, OperationKind::DrainMember { member: m } if m == member)
                && matches!(o.phase, OperationPhase::Running | OperationPhase::Succeeded)
        })
    }

    /// Applies a batch of heartbeats; bad entries are skipped one by one.
    /// Keeps I4's basis: only the current, non-retired incarnation refreshes.
    fn apply_heartbeat(&mut self, c: &Heartbeat) -> R<Effect> {
        let now = self.now_tick;
        let mut accepted = 0;
        let mut skipped = Vec::new();
        for b in &c.beats {
            let reason = match self.members.get_mut(&b.member) {
                None => Some(Reason::UnknownMember(b.member.clone())),
                Some(m) if m.incarnation != b.incarnation => Some(Reason::StaleIncarnation {
                    given: b.incarnation,
                    current: m.incarnation,
                }),
                Some(m) if matches!(m.state, MemberState::Expired | MemberState::Leaving) => {
                    Some(Reason::IncarnationRetired)
                }
                Some(m) => {
                    m.last_heartbeat_tick = now;
                    None
                }
            };
            match reason {
                None => accepted += 1,
                Some(reason) => skipped.push(SkippedBeat {
                    member: b.member.clone(),
                    reason,
                }),
            }
        }
        Ok(Effect::Heartbeats { accepted, skipped })
    }

    /// The member leaves; its sandboxes become eligible for takeover (I4).
    fn apply_leave(&mut self, c: &Leave) -> R<Effect> {
        let now = self.now_tick;
        let m = self
            .members
            .get_mut(&c.member)
            .ok_or_else(|| Reason::UnknownMember(c.member.clone()))?;
        if m.incarnation != c.incarnation {
            return Err(Reason::StaleIncarnation {
                given: c.incarnation,
                current: m.incarnation,
            });
        }
        if matches!(m.state, MemberState::Expired | MemberState::Leaving) {
            return Err(Reason::IncarnationRetired);
        }
        m.state = MemberState::Leaving;
        m.down_since_tick = Some(now);
        Ok(Effect::Left)
    }

    /// Expires a member, re-checking the TTL at this log position (I4: never
    /// on an earlier read).
    fn apply_expire(&mut self, c: &Expire) -> R<Effect> {
        let now = self.now_tick;
        let ttl = self.config.heartbeat_ttl_ticks;
        let m = self
            .members
            .get_mut(&c.member)
            .ok_or_else(|| Reason::UnknownMember(c.member.clone()))?;
        if m.incarnation != c.incarnation {
            return Err(Reason::StaleIncarnation {
                given: c.incarnation,
                current: m.incarnation,
            });
        }
        if matches!(m.state, MemberState::Expired | MemberState::Leaving) {
            return Err(Reason::IncarnationRetired);
        }
        if m.last_heartbeat_tick != c.last_heartbeat_tick {
            return Err(Reason::StaleHeartbeat {
                expected: c.last_heartbeat_tick,
                current: m.last_heartbeat_tick,
            });
        }
        if now.saturating_sub(m.last_heartbeat_tick) <= ttl {
            return Err(Reason::MemberAlive);
        }
        m.state = MemberState::Expired;
        m.down_since_tick = Some(now);
        Ok(Effect::Expired)
    }

    /// Admits a launch in one command (place, owner at term 1 / epoch 1,
    /// charge) or records its refusal. Keeps I5 (capacity; a refusal leaves
    /// only a tombstone) and I1 (one owner).
    fn apply_launch(&mut self, c: &Launch) -> R<Effect> {
        check_id(&c.launch_id)?;
        check_id(&c.sandbox)?;
        match self.launches.get(&c.launch_id) {
            Some(LaunchOutcome::Refused { .. }) => {
                return Err(Reason::LaunchRefused(c.launch_id.clone()))
            }
            Some(LaunchOutcome::Admitted {
                sandbox,
                generation,
            }) => {
                return match self.sandboxes.get(sandbox) {
                    Some(s) if s.generation == *generation && s.phase.is_charged() => {
                        Ok(Effect::Admitted {
                            assignment: self.assignment_of(s),
                            replay: true,
                        })
                    }
                    Some(s) if s.generation == *generation && s.phase == Phase::Failed => {
                        Err(Reason::Failed)
                    }
                    _ => Err(Reason::Deleted),
                };
            }
            None => {}
        }
        let generation = match self.sandboxes.get(&c.sandbox) {
            Some(s) if s.phase.is_charged() => {
                return Err(Reason::SandboxExists(c.sandbox.clone()))
            }
            Some(s) => s.generation + 1,
            None => 1,
        };
        let target = self
            .place(&c.sandbox, generation, |m| {
                self.is_eligible(m) && m.free() > 0
            })
            .map(|m| (m.id.clone(), m.incarnation));
        let Some((member, incarnation)) = target else {
            self.launches.insert(
                c.launch_id.clone(),
                LaunchOutcome::Refused {
                    sandbox: c.sandbox.clone(),
                    reason: Reason::NoEligibleMember.to_string(),
                },
            );
            return Ok(Effect::LaunchRefused(Reason::NoEligibleMember));
        };
        self.charge(&member, 1);
        let s = Sandbox {
            id: c.sandbox.clone(),
            generation,
            phase: Phase::Admitting,
            owner: Owner {
                member,
                incarnation,
                term: 1,
                epoch: 1,
                acknowledged: false,
            },
            recovery: None,
            last_report: None,
            launch_id: c.launch_id.clone(),
            material_ref: c.material_ref.clone(),
            failure: None,
        };
        let assignment = self.assignment_of(&s);
        self.sandboxes.insert(c.sandbox.clone(), s);
        self.launches.insert(
            c.launch_id.clone(),
            LaunchOutcome::Admitted {
                sandbox: c.sandbox.clone(),
                generation,
            },
        );
        Ok(Effect::Admitted {
            assignment,
            replay: false,
        })
    }

    fn charge(&mut self, member: &str, n: u32) {
        let Some(m) = self.members.get_mut(member) else {
            panic!("invariant broken: charging unknown member {member}")
        };
        m.charged += n;
        assert!(
            m.charged <= m.capacity,
            "invariant I5 broken: {member} over capacity"
        );
    }

    fn release(&mut self, member: &str) {
        let Some(m) = self.members.get_mut(member) else {
            panic!("invariant broken: releasing on unknown member {member}")
        };
        m.charged = m
            .charged
            .checked_sub(1)
            .unwrap_or_else(|| panic!("invariant I5 broken: {member} charge underflow"));
    }

    /// Checks the sandbox exists at `generation` and is movable; returns it.
    fn movable(&self, id: &str, generation: u64) -> R<&Sandbox> {
        let s = self
            .sandboxes
            .get(id)
            .ok_or_else(|| Reason::UnknownSandbox(id.to_string()))?;
        if s.generation != generation {
            return Err(Reason::StaleGeneration {
                given: generation,
                current: s.generation,
            });
        }
        match s.phase {
            Phase::Deleted => Err(Reason::Deleted),
            Phase::Stopping => Err(Reason::Stopping),
            Phase::Failed => Err(Reason::Failed),
            Phase::Admitting | Phase::Assigned | Phase::Recovering => Ok(s),
        }
    }

    fn check_owner(s: &Sandbox, member: &str, incarnation: u64, term: u64) -> R<()> {
        if s.owner.member != member {
            return Err(Reason::NotOwner);
        }
        if s.owner.incarnation != incarnation {
            return Err(Reason::StaleIncarnation {
                given: incarnation,
                current: s.owner.incarnation,
            });
        }
        if s.owner.term != term {
            return Err(Reason::StaleTerm {
                expected: term,
                current: s.owner.term,
            });
        }
        Ok(())
    }

    /// Rejects an owner whose member record shows it superseded, expired or
    /// leaving: a late message from a dead process never counts (I3).
    fn check_owner_alive(&self, owner: &Owner) -> R<()> {
        match self.members.get(&owner.member) {
            None => Err(Reason::UnknownMember(owner.member.clone())),
            Some(m) if m.incarnation > owner.incarnation => Err(Reason::StaleIncarnation {
                given: owner.incarnation,
                current: m.incarnation,
            }),
            Some(m) if matches!(m.state, MemberState::Expired | MemberState::Leaving) => {
                Err(Reason::IncarnationRetired)
            }
            Some(_) => Ok(()),
        }
    }

    /// Moves ownership to `(member, incarnation)`: term +1 and epoch +1 (I1,
    /// I2), unacknowledged, recovering; the charge moves with it (I5).
    fn change_owner(
        &mut self,
        id: &str,
        member: String,
        incarnation: u64,
        cause: RecoveryCause,
    ) -> Assignment {
        let now = self.now_tick;
        let rd = self.config.recovery_deadline_ticks;
        let old_member = self.sandboxes[id].owner.member.clone();
        if old_member != member {
            self.release(&old_member);
            self.charge(&member, 1);
        }
        let Some(s) = self.sandboxes.get_mut(id) else {
            unreachable!("sandbox {id} vanished")
        };
        // A recovery already in progress keeps its deadline: the total time
        // without an active owner stays bounded.
        let deadline_tick = match (&s.phase, &s.recovery) {
            (Phase::Recovering, Some(r)) => r.deadline_tick,
            _ => now + rd,
        };
        s.owner = Owner {
            member,
            incarnation,
            term: s.owner.term + 1,
            epoch: s.owner.epoch + 1,
            acknowledged: false,
        };
        s.phase = Phase::Recovering;
        s.recovery = Some(Recovery {
            deadline_tick,
            cause,
        });
        let s = s.clone();
        self.assignment_of(&s)
    }

    /// Takes over a sandbox. I4: the owner's own member record, at this log
    /// position, is expired, leaving, draining or superseded; an absent record
    /// rejects. I1/I2: term and epoch +1. I8: deleted/stopping never revive.
    /// The old owner incarnation is excluded; the new incarnation of the same
    /// member may take it back (its slot is already charged). If no member can
    /// take it, the command is rejected (`NoEligibleMember`, nothing changes)
    /// and the coordinator retries until the orphan deadline fails it.
    fn apply_takeover(&mut self, c: &Takeover) -> R<Effect> {
        let s = self.movable(&c.sandbox, c.generation)?;
        Self::check_owner(
            s,
            &c.expected_owner,
            c.expected_incarnation,
            c.expected_term,
        )?;
        if !self.members.contains_key(&s.owner.member) {
            return Err(Reason::UnknownMember(s.owner.member.clone()));
        }
        // FAULT INJECTION (Jepsen only, feature `fault-skip-i4`, never on by
        // default): the I4 check below is skipped, so a takeover of a live
        // owner is applied. jepsen/tests/t60_skip_i4_detected.rs proves the
        // pool checker reports it.
        #[cfg(not(feature = "fault-skip-i4"))]
        if !self.owner_takeover_eligible(&s.owner) {
            return Err(Reason::OwnerAlive);
        }
        let old = (s.owner.member.clone(), s.owner.incarnation);
        let target = self
            .place(&c.sandbox, c.generation, |m| {
                self.is_eligible(m)
                    && !(m.id == old.0 && m.incarnation == old.1)
                    && (m.id == old.0 || m.free() > 0)
            })
            .map(|m| (m.id.clone(), m.incarnation))
            .ok_or(Reason::NoEligibleMember)?;
        let a = self.change_owner(&c.sandbox, target.0, target.1, RecoveryCause::Takeover);
        Ok(Effect::OwnerChanged(a))
    }

    /// The owner acknowledges its term: phase Assigned, its reports count
    /// from now on (I3).
    fn apply_acknowledge(&mut self, c: &Acknowledge) -> R<Effect> {
        let s = self.movable(&c.sandbox, c.generation)?;
        Self::check_owner(s, &c.member, c.incarnation, c.term)?;
        if s.owner.acknowledged {
            return Ok(Effect::AlreadyAcknowledged);
        }
        self.check_owner_alive(&s.owner)?;
        let op = match &s.recovery {
            Some(Recovery {
                cause: RecoveryCause::Move(op),
                ..
            }) => Some(op.clone()),
            _ => None,
        };
        let Some(s) = self.sandboxes.get_mut(&c.sandbox) else {
            unreachable!("sandbox vanished")
        };
        s.owner.acknowledged = true;
        s.phase = Phase::Assigned;
        s.recovery = None;
        if let Some(op) = op.and_then(|op| self.operations.get_mut(&op)) {
            op.moves_done += 1;
        }
        Ok(Effect::Acknowledged)
    }

    /// Stores a report from the current owner's incarnation in its current,
    /// acknowledged term, with the log index that accepted it (I3).
    fn apply_report(&mut self, index: u64, c: &Report) -> R<Effect> {
        let s = self
            .sandboxes
            .get(&c.sandbox)
            .ok_or_else(|| Reason::UnknownSandbox(c.sandbox.clone()))?;
        if s.generation != c.generation {
            return Err(Reason::StaleGeneration {
                given: c.generation,
                current: s.generation,
            });
        }
        match s.phase {
            Phase::Deleted => return Err(Reason::Deleted),
            Phase::Failed => return Err(Reason::Failed),
            _ => {}
        }
        Self::check_owner(s, &c.member, c.incarnation, c.term)?;
        if !s.owner.acknowledged {
            return Err(Reason::NotAcknowledged);
        }
        self.check_owner_alive(&s.owner)?;
        let Some(s) = self.sandboxes.get_mut(&c.sandbox) else {
            unreachable!("sandbox vanished")
        };
        s.last_report = Some(ReportRecord {
            member: c.member.clone(),
            incarnation: c.incarnation,
            term: c.term,
            status: c.status.clone(),
            index,
        });
        Ok(Effect::ReportAccepted)
    }

    /// Stop wins over recovery and moves (I8): a stopping sandbox is never
    /// taken over or moved; it keeps its slot until deleted (I5).
    fn apply_stop(&mut self, c: &Stop) -> R<Effect> {
        self.movable(&c.sandbox, c.generation)?;
        let Some(s) = self.sandboxes.get_mut(&c.sandbox) else {
            unreachable!("sandbox vanished")
        };
        s.phase = Phase::Stopping;
        s.recovery = None;
        Ok(Effect::Stopping)
    }

    /// Deletes a generation directly (no intermediate phase is needed: the
    /// owner observes the deletion on its stream and stops the workload).
    /// Wins over recovery and moves (I8); releases exactly its own slot and
    /// launch material (I5).
    fn apply_delete(&mut self, c: &Delete) -> R<Effect> {
        let s = self
            .sandboxes
            .get(&c.sandbox)
            .ok_or_else(|| Reason::UnknownSandbox(c.sandbox.clone()))?;
        if s.generation != c.generation {
            return Err(Reason::StaleGeneration {
                given: c.generation,
                current: s.generation,
            });
        }
        if s.phase == Phase::Deleted {
            return Err(Reason::Deleted);
        }
        let charged = s.phase.is_charged();
        let member = s.owner.member.clone();
        if charged {
            self.release(&member);
        }
        let Some(s) = self.sandboxes.get_mut(&c.sandbox) else {
            unreachable!("sandbox vanished")
        };
        s.phase = Phase::Deleted;
        s.recovery = None;
        s.material_ref.clear();
        Ok(Effect::Deleted {
            released: u32::from(charged),
        })
    }

    /// Fails a sandbox whose recovery deadline passed, or an orphan (dead
    /// owner nobody could take over) past its orphan deadline. Releases its
    /// slot and material (I5).
    fn apply_fail_recovery(&mut self, c: &FailRecovery) -> R<Effect> {
        let s = self.movable(&c.sandbox, c.generation)?;
        if s.owner.term != c.expected_term {
            return Err(Reason::StaleTerm {
                expected: c.expected_term,
                current: s.owner.term,
            });
        }
        let now = self.now_tick;
        let recovering_late = s.phase == Phase::Recovering
            && s.recovery.as_ref().is_some_and(|r| now >= r.deadline_tick);
        let orphan_late = self.orphan_deadline(s).is_some_and(|d| now >= d);
        if !recovering_late && !orphan_late {
            return Err(Reason::DeadlineNotReached);
        }
        let member = s.owner.member.clone();
        self.release(&member);
        let Some(s) = self.sandboxes.get_mut(&c.sandbox) else {
            unreachable!("sandbox vanished")
        };
        s.phase = Phase::Failed;
        s.recovery = None;
        s.material_ref.clear();
        s.failure = Some(SUPERVISOR_RECOVERY_FAILED.to_string());
        Ok(Effect::RecoveryFailed)
    }

    /// Eligible members other than `member` exist (I6 drain refusal).
    fn others_eligible(&self, member: &str) -> bool {
        self.members
            .values()
            .any(|m| m.id != member && self.is_eligible(m))
    }

    /// Creates a drain; runs it now if nothing runs, else queues it (I6).
    /// A drain that would leave no eligible member is refused (I6).
    fn apply_start_drain(&mut self, index: u64, c: &StartDrain) -> R<Effect> {
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
    fn apply_start_rebalance(&mut self, index: u64, c: &StartRebalance) -> R<Effect> {
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

    fn create_operation(
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
    fn promote(&mut self, id: &str) {
        let now = self.now_tick;
        let deadline = now + self.config.operation_deadline_ticks;
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
        }
    }

    /// After the running operation ends, starts the oldest queued one (I6).
    fn promote_next(&mut self) {
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

    fn running(&self, id: &str) -> R<&Operation> {
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
    fn apply_move(&mut self, c: &Move) -> R<Effect> {
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
            op.attempts += 1;
        }
        Ok(Effect::OwnerChanged(a))
    }

    /// Completes the running operation if its work is done (checked here):
    /// a drain when the member owns nothing, a rebalance when nothing is
    /// misplaced and no move is in flight. Then starts the next (I6). A
    /// completed drain keeps the member out of service until cancelled.
    fn apply_complete_operation(&mut self, c: &CompleteOperation) -> R<Effect> {
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
        self.promote_next();
        Ok(Effect::OperationSucceeded)
    }

    /// Fails the running operation once its deadline passed; a drained member
    /// returns to service (I6). Then starts the next.
    fn apply_fail_operation(&mut self, c: &FailOperation) -> R<Effect> {
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
        self.undrain(&kind);
        self.promote_next();
        Ok(Effect::OperationFailed)
    }

    /// Returns a drained member to service unless another drain holds it.
    /// Call after the operation's phase changed.
    fn undrain(&mut self, kind: &OperationKind) {
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
    fn apply_cancel_operation(&mut self, c: &CancelOperation) -> R<Effect> {
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
        if held {
            self.undrain(&kind);
        }
        self.promote_next();
        Ok(Effect::OperationCancelled)
    }
}

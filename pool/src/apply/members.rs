//! Appliers of the membership and logical-time commands: `Tick`, `Configure`,
//! `LeaderChanged`, `Join`, `Heartbeat`, `Leave`, `Expire`.

// The parent's imports (commands, state) and shared checks.
use super::*;

impl PoolState {
    /// Advances logical time. Keeps "deadlines stretch, never shrink": the
    /// `expected_now_tick` precondition stops two proposers from advancing
    /// time twice for one interval.
    pub(super) fn apply_tick(&mut self, c: &Tick) -> R<Effect> {
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
    pub(super) fn apply_configure(&mut self, c: &Configure) -> R<Effect> {
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
    pub(super) fn apply_leader_changed(&mut self, c: &LeaderChanged) -> R<Effect> {
        if c.raft_term <= self.raft_term {
            return Err(Reason::StaleRaftTerm {
                given: c.raft_term,
                current: self.raft_term,
            });
        }
        self.raft_term = c.raft_term;
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
    pub(super) fn apply_join(&mut self, c: &Join) -> R<Effect> {
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
    pub(super) fn drain_holds(&self, member: &str) -> bool {
        self.operations.values().any(|o| {
            matches!(&o.kind, OperationKind::DrainMember { member: m } if m == member)
                && matches!(o.phase, OperationPhase::Running | OperationPhase::Succeeded)
        })
    }

    /// Applies a batch of heartbeats; bad entries are skipped one by one.
    /// Keeps I4's basis: only the current, non-retired incarnation refreshes.
    pub(super) fn apply_heartbeat(&mut self, c: &Heartbeat) -> R<Effect> {
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
    pub(super) fn apply_leave(&mut self, c: &Leave) -> R<Effect> {
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
    pub(super) fn apply_expire(&mut self, c: &Expire) -> R<Effect> {
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
}

//! Appliers of the membership and logical-time commands: `Tick`, `Configure`,
//! `LeaderChanged`, `Join`, `Heartbeat`, `Leave`, `Expire`.

// The parent's imports (commands, state) and shared checks.
use super::*;

impl PoolState {
    /// Advances logical time. Keeps "deadlines stretch, never shrink": the
    /// `expected_now_tick` precondition stops two proposers from advancing
    /// time twice for one interval. Then collects garbage: at most
    /// [`GC_BATCH`] records finished a retention ago (see [`super::gc`]).
    pub(super) fn apply_tick(&mut self, c: &Tick) -> R<Effect> {
        if c.expected_now_tick != self.now_tick {
            return Err(Reason::StaleTick {
                expected: c.expected_now_tick,
                current: self.now_tick,
            });
        }
        // Saturates: a tick count of 2^64 is unreachable (and a restored
        // snapshot is refused above MAX_COUNTER), but apply never panics.
        self.now_tick = self.now_tick.saturating_add(1);
        let collected = self.collect_garbage();
        Ok(Effect::Ticked {
            now_tick: self.now_tick,
            collected,
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
        // 0: a Configure written before retention existed (or by an older
        // gateway): the retention stays what it is.
        let retention_ticks = match c.retention_ticks {
            0 => self.config.retention_ticks,
            n => n,
        };
        self.config = Config {
            heartbeat_ttl_ticks: c.heartbeat_ttl_ticks,
            recovery_deadline_ticks: c.recovery_deadline_ticks,
            operation_deadline_ticks: c.operation_deadline_ticks,
            retention_ticks,
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
        let mut n: u32 = 0;
        for m in self.members.values_mut() {
            if m.state != MemberState::Expired {
                m.last_heartbeat_tick = now;
                n = n.saturating_add(1);
            }
        }
        Ok(Effect::GraceGranted { members: n })
    }

    /// Joins a member incarnation, numbered by the log (docs/design/0002):
    /// a process asking for a new incarnation gets the member's current one
    /// plus one (1 for a new member), whatever any clock says. A newer
    /// incarnation supersedes the old one: the member keeps its charged
    /// sandboxes, but they now belong to a dead incarnation and become
    /// eligible for takeover (I4), by the new incarnation or others, through
    /// the normal `Takeover` path (new term and epoch, I1/I2). Capacity may
    /// never drop below the slots still charged (I5).
    pub(super) fn apply_join(&mut self, c: &Join) -> R<Effect> {
        check_id(&c.member)?;
        if c.capacity == 0 {
            return Err(Reason::ZeroCapacity);
        }
        let now = self.now_tick;
        let incarnation = match self.members.get(&c.member) {
            None => {
                let incarnation = if c.process_id == 0 { c.incarnation } else { 1 };
                self.members.insert(
                    c.member.clone(),
                    Member {
                        id: c.member.clone(),
                        uid: c.uid.clone(),
                        incarnation,
                        process_id: c.process_id,
                        address: c.address.clone(),
                        capacity: c.capacity,
                        charged: 0,
                        state: MemberState::Active,
                        last_heartbeat_tick: now,
                        down_since_tick: None,
                    },
                );
                self.ring.add(&c.member);
                return Ok(Effect::Joined {
                    superseded: None,
                    incarnation,
                });
            }
            Some(m) => match join_rule(m, c)? {
                JoinRule::Already => {
                    return Ok(Effect::AlreadyJoined {
                        incarnation: m.incarnation,
                    })
                }
                JoinRule::Supersede(incarnation) => incarnation,
            },
        };
        let Some(m) = self.members.get(&c.member) else {
            unreachable!("member {} vanished", c.member)
        };
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
        m.incarnation = incarnation;
        m.process_id = c.process_id;
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
            incarnation,
        })
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
        let mut accepted: u32 = 0;
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
                None => accepted = accepted.saturating_add(1),
                Some(reason) => skipped.push(SkippedBeat {
                    member: b.member.clone(),
                    reason,
                }),
            }
        }
        Ok(Effect::Heartbeats { accepted, skipped })
    }

    /// The record of `member` if `incarnation` is its current, live one
    /// (neither expired nor leaving); the typed refusal otherwise.
    fn live_member_mut(&mut self, member: &str, incarnation: u64) -> R<&mut Member> {
        let m = self
            .members
            .get_mut(member)
            .ok_or_else(|| Reason::UnknownMember(member.to_string()))?;
        if m.incarnation != incarnation {
            return Err(Reason::StaleIncarnation {
                given: incarnation,
                current: m.incarnation,
            });
        }
        if matches!(m.state, MemberState::Expired | MemberState::Leaving) {
            return Err(Reason::IncarnationRetired);
        }
        Ok(m)
    }

    /// The member leaves; its sandboxes become eligible for takeover (I4).
    pub(super) fn apply_leave(&mut self, c: &Leave) -> R<Effect> {
        let now = self.now_tick;
        let m = self.live_member_mut(&c.member, c.incarnation)?;
        m.state = MemberState::Leaving;
        // Also the departure tick garbage collection counts from.
        m.down_since_tick = Some(now);
        Ok(Effect::Left)
    }

    /// Expires a member, re-checking the TTL at this log position (I4: never
    /// on an earlier read).
    pub(super) fn apply_expire(&mut self, c: &Expire) -> R<Effect> {
        let now = self.now_tick;
        let ttl = self.config.heartbeat_ttl_ticks;
        let m = self.live_member_mut(&c.member, c.incarnation)?;
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

/// What a join of an existing member does.
enum JoinRule {
    /// The process already holds the current, live incarnation.
    Already,
    /// It supersedes the current incarnation with this one.
    Supersede(u64),
}

/// The join rule of docs/design/0002, against member `m`'s record.
///
/// * Legacy join (`process_id` 0): the process chose `incarnation`; lower
///   than the current one is stale, equal is a repeat, higher supersedes.
/// * The member's current process (a retried hello, or a reconnect through
///   another gateway): a repeat, whatever it names; never a second bump.
/// * Another process naming a granted incarnation `k > 0`: `k` below the
///   current one was superseded (stale, for good); equal is a repeat.
/// * Another process asking for a new one (`known_incarnation` 0, or a `k`
///   above the current one, which only a restored state can show): the
///   current one plus one.
///
/// A repeat of an expired or leaving incarnation is `IncarnationRetired`:
/// the process asks again for a new one.
fn join_rule(m: &Member, c: &Join) -> R<JoinRule> {
    let claimed = if c.process_id == 0 {
        c.incarnation
    } else if c.process_id == m.process_id {
        m.incarnation
    } else if c.known_incarnation == 0 || c.known_incarnation > m.incarnation {
        return Ok(JoinRule::Supersede(m.incarnation.saturating_add(1)));
    } else {
        c.known_incarnation
    };
    if claimed < m.incarnation {
        return Err(Reason::StaleIncarnation {
            given: claimed,
            current: m.incarnation,
        });
    }
    if claimed > m.incarnation {
        return Ok(JoinRule::Supersede(claimed));
    }
    if matches!(m.state, MemberState::Expired | MemberState::Leaving) {
        Err(Reason::IncarnationRetired)
    } else {
        Ok(JoinRule::Already)
    }
}

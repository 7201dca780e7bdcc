//! The leader-side coordinator: a synchronous, driven proposer (etcd's
//! `RawNode` shape). It reads the applied state and returns commands to
//! propose; it never mutates state and never does I/O.
//!
//! # Caller duties (the gateway's leader loop)
//!
//! 1. **Create on leadership.** When this node becomes raft leader for term
//!    `T`, create `Coordinator::new(CoordinatorConfig::new(T))`. Drop it when
//!    leadership is lost. Never keep one across terms: a fresh coordinator on
//!    a successor continues any operation from the replicated state alone
//!    (deadlines are stored ticks, so nothing is relaunched or extended).
//! 2. **Tick.** Every tick interval of the leader's *monotonic* clock, call
//!    [`Coordinator::tick`]. The next [`Coordinator::step`] then includes a
//!    `Tick` (with an `expected_now_tick` precondition).
//! 3. **Step after apply.** After the local state machine applies new
//!    entries (and at least once per tick), call `step(&state)` with the
//!    applied state and propose every returned command, in order, through
//!    raft. The first step of a new coordinator returns only
//!    `LeaderChanged`; expiry and takeovers wait until it is applied, so
//!    every member gets a full TTL of grace under the new leader.
//! 4. **Ignore rejections.** Every command carries preconditions; a
//!    `Rejected` outcome means the world moved on (or this leader was
//!    deposed) and is expected. Do not retry by hand: the coordinator
//!    re-proposes from fresh state after `retry_after_ticks`.
//! 5. **Propose admissions and reports yourself.** Launches, heartbeat
//!    batches, reports, acknowledgements, deletes and operation starts come
//!    from RPCs, not from the coordinator.

use std::collections::BTreeMap;

use crate::command::*;
use crate::state::*;

/// Coordinator settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoordinatorConfig {
    /// The raft term this node leads.
    pub raft_term: u64,
    /// A proposed command not reflected in state is re-proposed after this
    /// many ticks.
    pub retry_after_ticks: u64,
}

impl CoordinatorConfig {
    /// Defaults for a leader of `raft_term`.
    pub fn new(raft_term: u64) -> Self {
        CoordinatorConfig {
            raft_term,
            retry_after_ticks: 2,
        }
    }
}

/// The leader-side proposer. Its only memory is the set of recent
/// proposals (to avoid duplicates) and whether a tick is due.
#[derive(Clone, Debug)]
pub struct Coordinator {
    cfg: CoordinatorConfig,
    tick_due: bool,
    /// Encoded command -> (tick when proposed, is a move).
    in_flight: BTreeMap<Vec<u8>, (u64, bool)>,
    /// Sandbox records read by the plans of this coordinator's steps.
    sandboxes_examined: u64,
}

impl Coordinator {
    /// A coordinator for a fresh leadership term.
    pub fn new(cfg: CoordinatorConfig) -> Self {
        Coordinator {
            cfg,
            tick_due: false,
            in_flight: BTreeMap::new(),
            sandboxes_examined: 0,
        }
    }

    /// The leader's tick interval elapsed.
    pub fn tick(&mut self) {
        self.tick_due = true;
    }

    /// Returns the commands to propose now, given the applied state.
    pub fn step(&mut self, state: &PoolState) -> Vec<Command> {
        let now = state.now_tick();
        let retry = self.cfg.retry_after_ticks;
        self.in_flight
            .retain(|_, (t, _)| now < t.saturating_add(retry));

        let mut out = Vec::new();
        if state.raft_term() > self.cfg.raft_term {
            // A newer leader's term is applied: this one is deposed, and
            // apply would refuse whatever it planned (crate::fence).
            return out;
        }
        if state.raft_term() < self.cfg.raft_term {
            // Nothing else until the grace is applied: every other command
            // is fenced by this term, which apply knows only from then on
            // (a due tick waits; time stretches, never shrinks).
            self.offer(
                &mut out,
                now,
                Command::LeaderChanged(LeaderChanged {
                    raft_term: self.cfg.raft_term,
                }),
            );
            return out;
        }
        if self.tick_due {
            self.tick_due = false;
            out.push(Command::Tick(Tick {
                expected_now_tick: now,
                raft_term: self.cfg.raft_term,
            }));
        }
        let pending_moves = self.pending_moves();
        for c in plan_counted(state, pending_moves, &mut self.sandboxes_examined) {
            self.offer(&mut out, now, c);
        }
        out
    }

    /// Sandbox records its steps' plans read so far (the cost a pass pays:
    /// proportional to what calls for a command, not to the pool).
    pub fn sandboxes_examined(&self) -> u64 {
        self.sandboxes_examined
    }

    fn pending_moves(&self) -> u32 {
        self.in_flight.values().filter(|(_, mv)| *mv).count() as u32
    }

    fn offer(&mut self, out: &mut Vec<Command>, now: u64, c: Command) {
        let key = c.encode_to_vec();
        if self.in_flight.contains_key(&key) {
            return;
        }
        self.in_flight
            .insert(key, (now, matches!(c, Command::Move(_))));
        out.push(c);
    }
}

/// The commands the state calls for, without duplicate suppression: a pure
/// function of the state (plus the number of moves already proposed but not
/// yet applied). Each is planned in the state's raft term (the term of its
/// last applied `LeaderChanged`, which is the coordinator's own when it
/// plans): apply refuses it once another term is applied (crate::fence).
///
/// It reads every member, but only the sandboxes that may call for a
/// command (`crate::table`): the live ones of dead owner incarnations and
/// the recovering ones (plus, while a drain runs, the drained member's;
/// while a rebalance runs, every sandbox). `examined` counts the sandbox
/// The commands are those of [`plan_by_scan`], in the same order
/// (sandboxes in id order).
pub fn plan(state: &PoolState, pending_moves: u32) -> Vec<Command> {
    plan_counted(state, pending_moves, &mut 0)
}

/// [`plan`], adding the sandbox records it read to `examined`.
pub fn plan_counted(state: &PoolState, pending_moves: u32, examined: &mut u64) -> Vec<Command> {
    let mut out = expiries(state);
    let table = state.sandbox_table();
    let mut by_sandbox: BTreeMap<&str, Command> = BTreeMap::new();
    // The owners and the members are both in member-id order: walk them
    // together (a comparison or two per owner, not a map lookup each: with
    // thousands of members this walk is most of a quiet step).
    let mut members = state.members().iter().peekable();
    for (member, incarnation, _) in table.owners() {
        while members.next_if(|(id, _)| id.as_str() < member).is_some() {}
        let record = members
            .peek()
            .filter(|(id, _)| id.as_str() == member)
            .map(|(_, m)| *m);
        if !state.record_says_dead(record, incarnation) {
            continue;
        }
        for s in table.owned_by(member, incarnation) {
            *examined = examined.saturating_add(1);
            if let Some(c) = sandbox_command(state, s) {
                by_sandbox.insert(&s.id, c);
            }
        }
    }
    for s in table.recovering() {
        *examined = examined.saturating_add(1);
        if by_sandbox.contains_key(s.id.as_str()) {
            continue;
        }
        if let Some(c) = sandbox_command(state, s) {
            by_sandbox.insert(&s.id, c);
        }
    }
    out.extend(by_sandbox.into_values());
    if let Some(op) = state.running_operation() {
        plan_operation(state, op, pending_moves, examined, &mut out);
    }
    out
}

/// [`plan`] by reading every sandbox: the reference the indexed plan is
/// checked against (unit tests, and the simulation after every applied
/// command).
pub fn plan_by_scan(state: &PoolState, pending_moves: u32) -> Vec<Command> {
    let mut out = expiries(state);
    out.extend(
        state
            .sandboxes()
            .values()
            .filter_map(|s| sandbox_command(state, s)),
    );
    if let Some(op) = state.running_operation() {
        plan_operation(state, op, pending_moves, &mut 0, &mut out);
    }
    out
}

/// `Expire` for every active or draining member past its TTL.
fn expiries(state: &PoolState) -> Vec<Command> {
    let raft_term = state.raft_term();
    state
        .members()
        .values()
        .filter(|m| {
            matches!(m.state, MemberState::Active | MemberState::Draining) && state.is_overdue(m)
        })
        .map(|m| {
            Command::Expire(Expire {
                raft_term,
                member: m.id.clone(),
                incarnation: m.incarnation,
                last_heartbeat_tick: m.last_heartbeat_tick,
            })
        })
        .collect()
}

/// What one sandbox calls for: the delete of a stopping one whose owner is
/// dead; the failure of a movable one past its recovery or orphan
/// deadline; the takeover of a movable one whose owner is dead.
fn sandbox_command(state: &PoolState, s: &Sandbox) -> Option<Command> {
    let raft_term = state.raft_term();
    let now = state.now_tick();
    let dead = state.owner_is_dead(&s.owner);
    if s.phase == Phase::Stopping && dead {
        return Some(Command::Delete(Delete {
            raft_term,
            sandbox: s.id.clone(),
            generation: s.generation,
        }));
    }
    if !s.phase.is_movable() {
        return None;
    }
    let recovery_late = s.recovery.as_ref().is_some_and(|r| now >= r.deadline_tick);
    let orphan_late = state.orphan_deadline(s).is_some_and(|d| now >= d);
    if recovery_late || orphan_late {
        Some(Command::FailRecovery(FailRecovery {
            raft_term,
            sandbox: s.id.clone(),
            generation: s.generation,
            expected_term: s.owner.term,
        }))
    } else if dead {
        Some(Command::Takeover(Takeover {
            raft_term,
            sandbox: s.id.clone(),
            generation: s.generation,
            expected_owner: s.owner.member.clone(),
            expected_incarnation: s.owner.incarnation,
            expected_term: s.owner.term,
        }))
    } else {
        None
    }
}

fn plan_operation(
    state: &PoolState,
    op: &Operation,
    pending_moves: u32,
    examined: &mut u64,
    out: &mut Vec<Command>,
) {
    let now = state.now_tick();
    let raft_term = state.raft_term();
    if op.deadline_tick.is_some_and(|d| now >= d) {
        out.push(Command::FailOperation(FailOperation {
            raft_term,
            operation_id: op.id.clone(),
        }));
        return;
    }
    let in_flight = state.moves_in_flight(&op.id).saturating_add(pending_moves);
    let mut slots = op.max_parallel.saturating_sub(in_flight) as usize;
    let mv = |s: &Sandbox, to: Option<String>| {
        Command::Move(Move {
            raft_term,
            operation_id: op.id.clone(),
            sandbox: s.id.clone(),
            generation: s.generation,
            expected_owner: s.owner.member.clone(),
            expected_incarnation: s.owner.incarnation,
            expected_term: s.owner.term,
            to,
        })
    };
    match &op.kind {
        OperationKind::DrainMember { member } => {
            if state.member(member).is_none_or(|m| m.charged == 0)
                && state.moves_in_flight(&op.id) == 0
            {
                out.push(Command::CompleteOperation(CompleteOperation {
                    raft_term,
                    operation_id: op.id.clone(),
                }));
                return;
            }
            for s in state.sandbox_table().owned_by_member(member).into_values() {
                if slots == 0 {
                    break;
                }
                *examined = examined.saturating_add(1);
                if s.phase.is_movable() && !state.owner_is_dead(&s.owner) {
                    out.push(mv(s, None));
                    slots -= 1;
                }
            }
        }
        OperationKind::RebalancePool => {
            // A rebalance reads every sandbox while it runs (an operator's
            // command, not a steady cost).
            *examined = examined.saturating_add(state.sandboxes().len() as u64);
            let candidates = state.rebalance_candidates();
            if candidates.is_empty() && state.moves_in_flight(&op.id) == 0 {
                out.push(Command::CompleteOperation(CompleteOperation {
                    raft_term,
                    operation_id: op.id.clone(),
                }));
                return;
            }
            let mut free: BTreeMap<&str, u32> = BTreeMap::new();
            for (s, p) in candidates {
                if slots == 0 {
                    break;
                }
                let f = free.entry(p.id.as_str()).or_insert(p.free());
                if *f == 0 {
                    continue;
                }
                *f -= 1;
                out.push(mv(s, Some(p.id.clone())));
                slots -= 1;
            }
        }
    }
}

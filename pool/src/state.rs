//! The pool's durable state and its read helpers.

use std::collections::BTreeMap;

use crate::hash::{sandbox_point, Ring};
use crate::outcome::Assignment;
pub use crate::records::*;
use crate::table::{LaunchTable, SandboxTable};

/// Default TTL in ticks.
pub const DEFAULT_HEARTBEAT_TTL_TICKS: u64 = 10;
/// Default recovery deadline in ticks.
pub const DEFAULT_RECOVERY_DEADLINE_TICKS: u64 = 60;
/// Default operation deadline in ticks.
pub const DEFAULT_OPERATION_DEADLINE_TICKS: u64 = 600;
/// Default retention: how many ticks a finished record (deleted or failed
/// sandbox, launch outcome, departed member, finished operation) is kept
/// before the garbage collector in `Tick` removes it. 14,400 ticks is one
/// hour at the default 250 ms tick.
pub const DEFAULT_RETENTION_TICKS: u64 = 14_400;
/// Most records one `Tick` removes (the rest wait for the next ticks), so a
/// tick's apply stays short however much became collectible at once.
pub const GC_BATCH: usize = 256;
/// Largest value of any `Configure` field, in ticks (2^40: 348 years at a
/// 10 ms tick). With `now_tick` at most [`MAX_COUNTER`], `now_tick + value`
/// cannot overflow a u64.
pub const MAX_CONFIG_TICKS: u64 = 1 << 40;
/// Largest counter (tick, generation, term, credential epoch, incarnation)
/// a restored snapshot may hold and a legacy `Join` may name (2^62: a
/// million increments a second for 146,000 years). Apply saturates above
/// it rather than overflow; a snapshot beyond it is refused.
pub const MAX_COUNTER: u64 = 1 << 62;
/// Largest `max_parallel`.
pub const MAX_PARALLEL_LIMIT: u32 = 8;
/// The failure recorded when recovery does not finish in time.
pub const SUPERVISOR_RECOVERY_FAILED: &str = "SupervisorRecoveryFailed";
/// The prefix of the failure recorded when the leader's launcher could not
/// launch a generation's runtime (`LaunchFailed: <the driver's reason>`).
pub const LAUNCH_FAILED: &str = "LaunchFailed";
/// The prefix of the failure recorded when a generation's recorded runtime
/// is gone (`RuntimeLost: <name> ...`); it is never relaunched.
pub const RUNTIME_LOST: &str = "RuntimeLost";

/// Tick-counted timeouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// A member expires when `now - last_heartbeat > heartbeat_ttl_ticks`.
    pub heartbeat_ttl_ticks: u64,
    /// Ticks a recovering sandbox waits for its new owner.
    pub recovery_deadline_ticks: u64,
    /// Ticks a running operation may take.
    pub operation_deadline_ticks: u64,
    /// Ticks a finished record is kept before garbage collection.
    pub retention_ticks: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            heartbeat_ttl_ticks: DEFAULT_HEARTBEAT_TTL_TICKS,
            recovery_deadline_ticks: DEFAULT_RECOVERY_DEADLINE_TICKS,
            operation_deadline_ticks: DEFAULT_OPERATION_DEADLINE_TICKS,
            retention_ticks: DEFAULT_RETENTION_TICKS,
        }
    }
}

pub use crate::member_state::MemberState;

/// A supervisor pool member. The record is removed only by garbage
/// collection, once it departed (leaving or expired) a retention ago and no
/// sandbox or operation names it, so an owner's member record can always be
/// checked (I4 never acts on absence).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Member id.
    pub id: String,
    /// Member uid.
    pub uid: String,
    /// Current incarnation: assigned in apply, +1 per superseding join
    /// (log-ordered; legacy joins may have set a process-chosen value).
    pub incarnation: u64,
    /// Process id of the current incarnation (0 for a legacy join): a join
    /// from this process is a retry, never a new incarnation.
    pub process_id: u64,
    /// Advertise address.
    pub address: String,
    /// Slots.
    pub capacity: u32,
    /// Slots charged: equals the number of charged sandboxes it owns (I5).
    pub charged: u32,
    /// Lifecycle state.
    pub state: MemberState,
    /// Tick of the last accepted heartbeat (or join / grace).
    pub last_heartbeat_tick: u64,
    /// Tick since which sandboxes of this member's dead incarnations (or of
    /// this one, if expired or leaving) are orphaned; recovery deadlines of
    /// orphans that could not be taken over count from here.
    pub down_since_tick: Option<u64>,
}

impl Member {
    /// Free slots.
    pub fn free(&self) -> u32 {
        self.capacity.saturating_sub(self.charged)
    }
}

/// Maintenance operation kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OperationKind {
    /// Drain one member.
    DrainMember {
        /// The member.
        member: String,
    },
    /// Move sandboxes to their ring-preferred members.
    RebalancePool,
}

/// Maintenance operation phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum OperationPhase {
    /// Waiting for the running one.
    Queued,
    /// Running (at most one, I6).
    Running,
    /// Done.
    Succeeded,
    /// Deadline passed or could not start.
    Failed,
    /// Cancelled.
    Cancelled,
}

/// A durable maintenance operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// Operation id.
    pub id: String,
    /// Kind.
    pub kind: OperationKind,
    /// Phase.
    pub phase: OperationPhase,
    /// Human-readable progress or failure message.
    pub message: String,
    /// Move commands applied for it.
    pub attempts: u32,
    /// Moves planned when it started running.
    pub moves_planned: u32,
    /// Moves acknowledged by their new owner.
    pub moves_done: u32,
    /// 1..=8.
    pub max_parallel: u32,
    /// Fails when `now_tick >= deadline_tick` (set when it starts running).
    pub deadline_tick: Option<u64>,
    /// Log index that created it (queue order).
    pub created_index: u64,
    /// The tick it finished (succeeded, failed or cancelled): garbage
    /// collection removes it a retention later (a succeeded drain only
    /// once its member is no longer held draining).
    pub finished_tick: Option<u64>,
}

/// The pool state machine. Mutated only by [`PoolState::apply`].
#[derive(Clone, Debug)]
pub struct PoolState {
    /// Logical time.
    pub(crate) now_tick: u64,
    /// Highest applied `LeaderChanged` term.
    pub(crate) raft_term: u64,
    /// Timeouts.
    pub(crate) config: Config,
    /// Members by id.
    pub(crate) members: BTreeMap<String, Member>,
    /// Sandboxes by id (the current generation), with the indexes the
    /// leader's passes read (`crate::table`).
    pub(crate) sandboxes: SandboxTable,
    /// Operations by id.
    pub(crate) operations: BTreeMap<String, Operation>,
    /// Launch outcomes by launch id, finished ones indexed for retention.
    pub(crate) launches: LaunchTable,
    /// The highest generation of any sandbox record garbage collection
    /// removed: a sandbox id with no record starts above it, so a
    /// generation number (and the grants naming it) is never reused.
    pub(crate) generation_floor: u64,
    /// Derived from `members`; never serialized.
    pub(crate) ring: Ring,
}

impl Default for PoolState {
    fn default() -> Self {
        PoolState::new()
    }
}

/// What a fenced read of a sandbox's observed status returns (I3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObservedStatus {
    /// The current term is not acknowledged, or no report in this term.
    Pending,
    /// The latest report of the current, acknowledged term.
    Reported {
        /// Opaque status.
        status: String,
        /// Term.
        term: u64,
        /// Log index that accepted it.
        index: u64,
    },
    /// Deleted.
    Deleted,
    /// Failed, with reason (`SupervisorRecoveryFailed`, `LaunchFailed: ...`,
    /// `RuntimeLost: ...`).
    Failed(String),
}

/// One member in the status view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberView {
    /// Member record.
    pub member: Member,
    /// Ticks since the last heartbeat.
    pub ticks_since_heartbeat: u64,
    /// Eligible for placement now.
    pub eligible: bool,
}

/// The operator status view (`GetSupervisorPoolStatus`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolStatus {
    /// Logical time.
    pub now_tick: u64,
    /// Config.
    pub config: Config,
    /// Members.
    pub members: Vec<MemberView>,
    /// Count of sandboxes per phase.
    pub sandboxes_by_phase: BTreeMap<Phase, u64>,
    /// Operations.
    pub operations: Vec<Operation>,
}

impl PoolState {
    /// An empty pool with default config at tick 0.
    pub fn new() -> PoolState {
        PoolState {
            now_tick: 0,
            raft_term: 0,
            config: Config::default(),
            members: BTreeMap::new(),
            sandboxes: SandboxTable::default(),
            operations: BTreeMap::new(),
            launches: LaunchTable::default(),
            generation_floor: 0,
            ring: Ring::default(),
        }
    }

    /// Logical time.
    pub fn now_tick(&self) -> u64 {
        self.now_tick
    }

    /// Raft term of the last applied LeaderChanged (the highest so far).
    pub fn raft_term(&self) -> u64 {
        self.raft_term
    }

    /// Config.
    pub fn config(&self) -> Config {
        self.config
    }

    /// Members by id.
    pub fn members(&self) -> &BTreeMap<String, Member> {
        &self.members
    }

    /// Sandboxes by id.
    pub fn sandboxes(&self) -> &BTreeMap<String, Sandbox> {
        &self.sandboxes
    }

    /// Sandboxes with their indexes (live ones by owner, recovering ones).
    pub fn sandbox_table(&self) -> &SandboxTable {
        &self.sandboxes
    }

    /// Operations by id.
    pub fn operations(&self) -> &BTreeMap<String, Operation> {
        &self.operations
    }

    /// Launch outcomes by launch id.
    pub fn launches(&self) -> &BTreeMap<String, LaunchOutcome> {
        &self.launches
    }

    /// The highest generation garbage collection removed (0: none); a
    /// sandbox id without a record is launched above it.
    pub fn generation_floor(&self) -> u64 {
        self.generation_floor
    }

    /// One member.
    pub fn member(&self, id: &str) -> Option<&Member> {
        self.members.get(id)
    }

    /// One sandbox.
    pub fn sandbox(&self, id: &str) -> Option<&Sandbox> {
        self.sandboxes.get(id)
    }

    /// The running operation, if any (at most one, I6).
    pub fn running_operation(&self) -> Option<&Operation> {
        self.operations
            .values()
            .find(|o| o.phase == OperationPhase::Running)
    }

    /// True if the member's TTL has run out at the current tick (whether or
    /// not an `Expire` was applied yet).
    pub fn is_overdue(&self, m: &Member) -> bool {
        self.now_tick.saturating_sub(m.last_heartbeat_tick) > self.config.heartbeat_ttl_ticks
    }

    /// Eligible for new placements: active and not overdue (any free
    /// capacity is checked separately).
    pub fn is_eligible(&self, m: &Member) -> bool {
        m.state == MemberState::Active && !self.is_overdue(m)
    }

    /// True if the owner's *own member record* says the owner is gone: the
    /// incarnation was superseded, or the member is expired or leaving (I4).
    /// An absent record is never "dead".
    pub fn owner_is_dead(&self, owner: &Owner) -> bool {
        self.incarnation_is_dead(&owner.member, owner.incarnation)
    }

    /// [`Self::owner_is_dead`] for an owner named by member and incarnation
    /// (all it reads).
    pub fn incarnation_is_dead(&self, member: &str, incarnation: u64) -> bool {
        self.record_says_dead(self.members.get(member), incarnation)
    }

    /// [`Self::incarnation_is_dead`] given the member's record (`None`: no
    /// record), for a caller that already walks the members in order.
    pub fn record_says_dead(&self, record: Option<&Member>, incarnation: u64) -> bool {
        match record {
            None => false,
            // FAULT INJECTION (Jepsen only, `crate::fault`, never on by
            // default): an active member whose heartbeat is older than half
            // the TTL is called dead, so the coordinator proposes takeovers of
            // briefly paused but live owners (which `apply_takeover`, with the
            // same feature, no longer refuses).
            Some(m)
                if crate::fault::skip_i4()
                    && m.incarnation == incarnation
                    && m.state == MemberState::Active
                    && self.now_tick.saturating_sub(m.last_heartbeat_tick)
                        > self.config.heartbeat_ttl_ticks / 2 =>
            {
                true
            }
            Some(m) => {
                m.incarnation > incarnation
                    || matches!(m.state, MemberState::Expired | MemberState::Leaving)
            }
        }
    }

    /// True if I4 permits a takeover of this owner now: dead, or draining.
    pub fn owner_takeover_eligible(&self, owner: &Owner) -> bool {
        match self.members.get(&owner.member) {
            None => false,
            Some(m) => self.owner_is_dead(owner) || m.state == MemberState::Draining,
        }
    }

    /// The tick by which an orphaned (dead-owner, not yet taken over)
    /// sandbox fails if no member can take it.
    pub fn orphan_deadline(&self, s: &Sandbox) -> Option<u64> {
        if !self.owner_is_dead(&s.owner) {
            return None;
        }
        let down = self.members.get(&s.owner.member)?.down_since_tick?;
        Some(down.saturating_add(self.config.recovery_deadline_ticks))
    }

    /// Places `(sandbox, generation)` on the ring: the first member for which
    /// `accept` holds. Used by launch, takeover and move.
    pub(crate) fn place(
        &self,
        sandbox: &str,
        generation: u64,
        accept: impl Fn(&Member) -> bool,
    ) -> Option<&Member> {
        let id = self.ring.walk(sandbox_point(sandbox, generation), |id| {
            match self.members.get(id) {
                Some(m) => accept(m),
                None => false,
            }
        })?;
        self.members.get(id)
    }

    /// The ring-preferred member ignoring capacity (eligible only): the
    /// target of a rebalance.
    pub fn preferred_member(&self, sandbox: &str, generation: u64) -> Option<&Member> {
        self.place(sandbox, generation, |m| self.is_eligible(m))
    }

    /// Fenced observed status (I3): a report counts only if it was made by
    /// the current owner's incarnation in the current term, and that term
    /// is acknowledged; otherwise `Pending`.
    pub fn observed_status(&self, sandbox: &str) -> Option<ObservedStatus> {
        let s = self.sandboxes.get(sandbox)?;
        Some(match s.phase {
            Phase::Deleted => ObservedStatus::Deleted,
            Phase::Failed => ObservedStatus::Failed(s.failure.clone().unwrap_or_default()),
            _ => match &s.last_report {
                Some(r)
                    if s.owner.acknowledged
                        && r.term == s.owner.term
                        && r.member == s.owner.member
                        && r.incarnation == s.owner.incarnation =>
                {
                    ObservedStatus::Reported {
                        status: r.status.clone(),
                        term: r.term,
                        index: r.index,
                    }
                }
                _ => ObservedStatus::Pending,
            },
        })
    }

    /// The current assignment of a sandbox (for the supervisor stream's
    /// `AssignmentSnapshot`), if it is live.
    pub fn assignment(&self, sandbox: &str) -> Option<Assignment> {
        let s = self.sandboxes.get(sandbox)?;
        if !s.phase.is_charged() {
            return None;
        }
        Some(self.assignment_of(s))
    }

    pub(crate) fn assignment_of(&self, s: &Sandbox) -> Assignment {
        Assignment {
            sandbox: s.id.clone(),
            generation: s.generation,
            member: s.owner.member.clone(),
            incarnation: s.owner.incarnation,
            address: self
                .members
                .get(&s.owner.member)
                .map(|m| m.address.clone())
                .unwrap_or_default(),
            term: s.owner.term,
            credential_epoch: s.owner.credential_epoch,
        }
    }

    /// Live assignments owned by one member incarnation (what its gateway
    /// streams to it).
    pub fn assignments_for(&self, member: &str, incarnation: u64) -> Vec<Assignment> {
        self.sandboxes
            .values()
            .filter(|s| {
                s.phase.is_charged()
                    && s.owner.member == member
                    && s.owner.incarnation == incarnation
            })
            .map(|s| self.assignment_of(s))
            .collect()
    }

    /// Every member's operator view, by id.
    pub fn member_views(&self) -> impl Iterator<Item = MemberView> + '_ {
        self.members.values().map(|m| MemberView {
            member: m.clone(),
            ticks_since_heartbeat: self.now_tick.saturating_sub(m.last_heartbeat_tick),
            eligible: self.is_eligible(m),
        })
    }

    /// The operator status view.
    pub fn status(&self) -> PoolStatus {
        let mut by_phase = BTreeMap::new();
        for s in self.sandboxes.values() {
            let n = by_phase.entry(s.phase).or_insert(0u64);
            *n = n.saturating_add(1);
        }
        PoolStatus {
            now_tick: self.now_tick,
            config: self.config,
            members: self.member_views().collect(),
            sandboxes_by_phase: by_phase,
            operations: self.operations.values().cloned().collect(),
        }
    }

    /// Sandboxes in flight for an operation's moves (recovering by a move of
    /// this operation).
    pub(crate) fn moves_in_flight(&self, op: &str) -> u32 {
        self.sandboxes
            .recovering()
            .filter(|s| {
                s.phase == Phase::Recovering
                    && matches!(&s.recovery, Some(Recovery { cause: RecoveryCause::Move(o), .. }) if o == op)
            })
            .count() as u32
    }

    /// Rebalance candidates: healthy (assigned) sandboxes whose
    /// ring-preferred member differs from the owner and has a free slot.
    /// Shared by apply (completion and move checks) and the coordinator.
    pub fn rebalance_candidates(&self) -> Vec<(&Sandbox, &Member)> {
        let mut out = Vec::new();
        for s in self.sandboxes.values() {
            if s.phase != Phase::Assigned || !s.owner.acknowledged {
                continue;
            }
            if let Some(p) = self.preferred_member(&s.id, s.generation) {
                if p.id != s.owner.member && p.free() > 0 {
                    out.push((s, p));
                }
            }
        }
        out
    }
}

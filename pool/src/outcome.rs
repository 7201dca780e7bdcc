//! What applying a command yields: [`Outcome`] (applied with an [`Effect`],
//! or rejected with a typed [`Reason`] and nothing changed), and the records
//! effects carry ([`Assignment`], [`SkippedBeat`]).

/// Why a command was rejected. A rejected command changed nothing.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    /// No member record with this id.
    #[error("unknown member {0}")]
    UnknownMember(String),
    /// No sandbox record with this id.
    #[error("unknown sandbox {0}")]
    UnknownSandbox(String),
    /// No operation with this id.
    #[error("unknown operation {0}")]
    UnknownOperation(String),
    /// An id field was empty.
    #[error("empty id")]
    EmptyId,
    /// The term in the command is not the current ownership term.
    #[error("stale term: command has {expected}, current is {current}")]
    StaleTerm {
        /// The term the command carried.
        expected: u64,
        /// The sandbox's current term.
        current: u64,
    },
    /// The incarnation is not the member's current one.
    #[error("stale incarnation: command has {given}, current is {current}")]
    StaleIncarnation {
        /// The incarnation the command carried.
        given: u64,
        /// The current one.
        current: u64,
    },
    /// The generation is not the sandbox's current one.
    #[error("stale generation: command has {given}, current is {current}")]
    StaleGeneration {
        /// The generation the command carried.
        given: u64,
        /// The current one.
        current: u64,
    },
    /// `Tick` precondition failed.
    #[error("stale tick: command expected {expected}, now is {current}")]
    StaleTick {
        /// The tick the proposer read.
        expected: u64,
        /// The current tick.
        current: u64,
    },
    /// `LeaderChanged` for a term not newer than the last one.
    #[error("stale raft term {given} (last {current})")]
    #[serde(alias = "StaleLeaderTerm")]
    StaleRaftTerm {
        /// The raft term of the command's leader.
        given: u64,
        /// The raft term of the last applied LeaderChanged.
        current: u64,
    },
    /// A command a leader planned (see [`crate::fence`]) in a raft term
    /// other than the one of the last applied `LeaderChanged`: its leader
    /// was deposed (or had not yet taken office) at this log position.
    #[error(
        "fenced: planned by the leader of raft term {planned}, but the pool is in raft term {current}"
    )]
    FencedRaftTerm {
        /// The raft term the command was planned in.
        planned: u64,
        /// The raft term of the last applied `LeaderChanged`.
        current: u64,
    },
    /// `Expire` precondition: the heartbeat tick changed since the read.
    #[error("heartbeat moved: command read {expected}, now {current}")]
    StaleHeartbeat {
        /// The tick the proposer read.
        expected: u64,
        /// The member's current last heartbeat tick.
        current: u64,
    },
    /// The member is not past its TTL at this log position.
    #[error("member still alive")]
    MemberAlive,
    /// I4: the owner's member record is active at this log position.
    #[error("owner alive")]
    OwnerAlive,
    /// The member/incarnation is not the sandbox's current owner.
    #[error("not the owner")]
    NotOwner,
    /// The owner has not acknowledged the current term (I3).
    #[error("current term not acknowledged")]
    NotAcknowledged,
    /// This incarnation has expired or left and cannot come back.
    #[error("incarnation retired (expired or left)")]
    IncarnationRetired,
    /// Join with capacity 0.
    #[error("zero capacity")]
    ZeroCapacity,
    /// A re-join would set capacity below the slots still charged.
    #[error("capacity {capacity} below charged slots {charged}")]
    CapacityBelowCharge {
        /// Requested capacity.
        capacity: u32,
        /// Slots still charged.
        charged: u32,
    },
    /// The target member has no free slot.
    #[error("capacity exhausted")]
    CapacityExhausted,
    /// No eligible member with free capacity.
    #[error("no eligible member")]
    NoEligibleMember,
    /// Explicit move target is the current owner or ineligible.
    #[error("invalid move target {0}")]
    InvalidTarget(String),
    /// The launch id was refused earlier and can never be admitted.
    #[error("launch {0} was refused")]
    LaunchRefused(String),
    /// A live sandbox with this id exists under another launch.
    #[error("sandbox {0} exists")]
    SandboxExists(String),
    /// The sandbox generation is deleted (I8).
    #[error("sandbox deleted")]
    Deleted,
    /// The sandbox is stopping (I8).
    #[error("sandbox stopping")]
    Stopping,
    /// The sandbox generation failed.
    #[error("sandbox failed")]
    Failed,
    /// The recovery deadline has not passed.
    #[error("deadline not reached")]
    DeadlineNotReached,
    /// `max_parallel` outside 1..=8.
    #[error("invalid max_parallel {0} (1..=8)")]
    InvalidMaxParallel(u32),
    /// A config value was zero.
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    /// The operation id exists already.
    #[error("operation {0} exists")]
    OperationExists(String),
    /// A drain for this member is already queued or running.
    #[error("operation in progress")]
    OperationInProgress,
    /// The operation is not running.
    #[error("operation not running")]
    OperationNotRunning,
    /// The operation has finished (nothing to cancel).
    #[error("operation finished")]
    OperationFinished,
    /// The operation still has work to do.
    #[error("operation not complete")]
    OperationNotComplete,
    /// The operation already has max_parallel moves in flight.
    #[error("parallel limit reached")]
    ParallelLimit,
    /// Draining this member would leave no eligible member (I6).
    #[error("drain would leave no eligible member")]
    WouldLeaveNoEligibleMember,
    /// The move does not belong to this operation's plan.
    #[error("move not part of operation")]
    NotPlanned,
    /// A `RecordRuntime` field is malformed (the field is named).
    #[error("invalid runtime {field}: {detail}")]
    InvalidRuntime {
        /// `name`, `address` or `ca_pem`.
        field: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The generation already has a different runtime recorded; a recorded
    /// runtime is never replaced.
    #[error("runtime already recorded as {0}")]
    RuntimeAlreadyRecorded(String),
    /// A `FailLaunch` reason without a known prefix, or too long.
    #[error("invalid failure reason: {0}")]
    InvalidFailureReason(String),
}

/// The records one tick's garbage collection removed (at most
/// [`crate::GC_BATCH`] in all), each list in key order.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Collected {
    /// Launch ids (refused tombstones, admitted records of ended
    /// generations).
    #[serde(default)]
    pub launches: Vec<String>,
    /// Sandbox ids whose (deleted or failed) record was removed.
    #[serde(default)]
    pub sandboxes: Vec<String>,
    /// Operation ids.
    #[serde(default)]
    pub operations: Vec<String>,
    /// Departed member ids.
    #[serde(default)]
    pub members: Vec<String>,
}

impl Collected {
    /// True if nothing was removed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many records were removed.
    pub fn len(&self) -> usize {
        self.launches.len() + self.sandboxes.len() + self.operations.len() + self.members.len()
    }
}

/// Why a heartbeat entry of a batch was skipped.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SkippedBeat {
    /// The member id of the entry.
    pub member: String,
    /// Why it was skipped.
    pub reason: Reason,
}

/// Where a sandbox generation is assigned.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// Sandbox id.
    pub sandbox: String,
    /// Generation.
    pub generation: u64,
    /// Owner member.
    pub member: String,
    /// Owner incarnation.
    pub incarnation: u64,
    /// Owner's advertise address.
    pub address: String,
    /// Ownership term.
    pub term: u64,
    /// Credential epoch. The outcome travels as JSON in the log result; the
    /// alias reads one encoded before the rename.
    #[serde(alias = "epoch")]
    pub credential_epoch: u64,
}

/// What an applied command did.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Time advanced.
    Ticked {
        /// The new tick.
        now_tick: u64,
        /// What garbage collection removed in this tick (absent in the
        /// JSON when nothing; results written before GC read as nothing).
        #[serde(default, skip_serializing_if = "Collected::is_empty")]
        collected: Collected,
    },
    /// Config stored.
    Configured,
    /// Grace granted to this many members.
    GraceGranted {
        /// Members whose heartbeat was refreshed.
        members: u32,
    },
    /// A member (incarnation) joined.
    Joined {
        /// The incarnation it superseded, if any.
        superseded: Option<u64>,
        /// The incarnation the process holds from now on.
        #[serde(default)]
        incarnation: u64,
    },
    /// Idempotent repeat of a join; nothing changed.
    AlreadyJoined {
        /// The incarnation the process holds.
        #[serde(default)]
        incarnation: u64,
    },
    /// Heartbeat batch applied.
    Heartbeats {
        /// Entries accepted.
        accepted: u32,
        /// Entries skipped, with reasons.
        skipped: Vec<SkippedBeat>,
    },
    /// Member is leaving.
    Left,
    /// Member expired.
    Expired,
    /// Launch admitted (now, or earlier if `replay`).
    Admitted {
        /// The assignment.
        assignment: Assignment,
        /// True if this launch id was admitted by an earlier command.
        replay: bool,
    },
    /// Launch refused; the refusal is recorded so the launch id can never be
    /// admitted later.
    LaunchRefused(Reason),
    /// Ownership moved (takeover or move): new term and epoch.
    OwnerChanged(Assignment),
    /// The owner acknowledged its term.
    Acknowledged,
    /// The term was already acknowledged; nothing changed.
    AlreadyAcknowledged,
    /// Report stored.
    ReportAccepted,
    /// Sandbox is stopping.
    Stopping,
    /// Sandbox generation deleted.
    Deleted {
        /// Slots released (0 or 1).
        released: u32,
    },
    /// Recovery failed: `SupervisorRecoveryFailed`.
    RecoveryFailed,
    /// The runtime endpoint of the generation was recorded.
    RuntimeRecorded,
    /// The same runtime endpoint was recorded already; nothing changed.
    RuntimeAlreadyRecorded,
    /// The generation failed (`LaunchFailed: ...` or `RuntimeLost: ...`).
    LaunchFailed {
        /// The failure recorded.
        reason: String,
    },
    /// Operation created and running.
    OperationStarted,
    /// Operation created and queued behind the running one.
    OperationQueued,
    /// Operation succeeded.
    OperationSucceeded,
    /// Operation failed.
    OperationFailed,
    /// Operation cancelled (or a completed drain's member returned).
    OperationCancelled,
}

/// The result of applying one command.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The command was applied.
    Applied(Effect),
    /// A precondition failed; the state is unchanged.
    Rejected(Reason),
}

impl Outcome {
    /// True if rejected.
    pub fn is_rejected(&self) -> bool {
        matches!(self, Outcome::Rejected(_))
    }
}

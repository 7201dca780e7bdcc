//! Commands (the raft log's pool entries), their wire format, and outcomes.
//!
//! # Wire format
//!
//! Every command is a prost message with explicit field tags, carried in the
//! [`CommandEnvelope`] oneof whose variant tags are the command's wire
//! discriminant. Rules (nomad's, see STYLE.md practice 8):
//!
//! * A tag is never reused, neither for a oneof variant nor for a field.
//! * New commands and fields take the next free number, at the end.
//! * A retired command keeps its tag and a no-op arm in `apply`, so old logs
//!   still replay; its tag is listed below as retired.
//!
//! | tag | command | tag | command |
//! | --- | --- | --- | --- |
//! | 1 | `Tick` | 11 | `Report` |
//! | 2 | `Configure` | 12 | `Stop` |
//! | 3 | `LeaderChanged` | 13 | `Delete` |
//! | 4 | `Join` | 14 | `FailRecovery` |
//! | 5 | `Heartbeat` | 15 | `StartDrain` |
//! | 6 | `Leave` | 16 | `StartRebalance` |
//! | 7 | `Expire` | 17 | `Move` |
//! | 8 | `Launch` | 18 | `CompleteOperation` |
//! | 9 | `Takeover` | 19 | `FailOperation` |
//! | 10 | `Acknowledge` | 20 | `CancelOperation` |
//! | 21 | `RecordRuntime` | 22 | `FailLaunch` |
//!
//! Retired tags: none yet.
//!
//! # Fencing
//!
//! A command a leader plans from its reads or its observations of the world
//! outside the log carries the raft term it was planned in
//! ([`Command::planned_raft_term`]); apply refuses it once another
//! leader's term has been applied ([`crate::fence`]).

use prost::Message;

/// Decoding a log entry or snapshot failed. The raft-store treats this as
/// fatal for log entries (an undecodable committed entry is a bug).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DecodeError {
    /// The bytes are not a valid protobuf message of the expected type.
    #[error("protobuf decode failed: {0}")]
    Protobuf(String),
    /// The envelope carried no command, or one with a tag this binary does
    /// not know (written by a newer version).
    #[error("command envelope carries no known command")]
    UnknownCommand,
    /// An enumeration field carried an unknown value.
    #[error("invalid value {value} for {field}")]
    InvalidEnum {
        /// Which field.
        field: &'static str,
        /// The raw value.
        value: i32,
    },
    /// A snapshot record was missing a required part.
    #[error("snapshot record incomplete: {0}")]
    Incomplete(&'static str),
    /// Two records of a snapshot table had the same key.
    #[error("duplicate key {0} in snapshot")]
    DuplicateKey(String),
    /// The snapshot decoded but its state breaks an invariant: it is
    /// refused, never installed.
    #[error("snapshot refused: {0}")]
    Invariant(crate::invariants::InvariantViolation),
}

impl From<prost::DecodeError> for DecodeError {
    fn from(e: prost::DecodeError) -> Self {
        DecodeError::Protobuf(e.to_string())
    }
}

/// Advances logical time by one tick. Proposed by the leader every tick
/// interval, paced by its own monotonic clock.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct Tick {
    /// Precondition: the tick the proposer read. Two proposers racing (a
    /// deposed leader and its successor) cannot advance time twice for one
    /// interval: time may stretch, never shrink.
    #[prost(uint64, tag = "1")]
    pub expected_now_tick: u64,
    /// The raft term of the leader that planned this command: a fencing
    /// token (see [`Command::planned_raft_term`]). 0: unfenced (a command
    /// written before fencing existed).
    #[prost(uint64, tag = "2")]
    pub raft_term: u64,
}

/// Sets the tick-counted timeouts. Each must be > 0 (apply refuses 0) and
/// at most [`crate::MAX_CONFIG_TICKS`] (checked before proposing).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct Configure {
    /// A member expires when `now - last_heartbeat > heartbeat_ttl_ticks`.
    #[prost(uint64, tag = "1")]
    pub heartbeat_ttl_ticks: u64,
    /// Ticks a recovering sandbox may wait for its new owner's acknowledgement.
    #[prost(uint64, tag = "2")]
    pub recovery_deadline_ticks: u64,
    /// Ticks a running maintenance operation may take.
    #[prost(uint64, tag = "3")]
    pub operation_deadline_ticks: u64,
    /// Ticks a finished record is kept before garbage collection; 0 (every
    /// `Configure` written before retention existed) leaves the current
    /// retention unchanged, which is [`crate::DEFAULT_RETENTION_TICKS`]
    /// unless a `Configure` set it, so old logs replay to the same state.
    #[prost(uint64, tag = "4")]
    pub retention_ticks: u64,
    /// The raft term of the leader that planned this command: a fencing
    /// token (see [`Command::planned_raft_term`]). 0: unfenced (a command
    /// written before fencing existed).
    #[prost(uint64, tag = "5")]
    pub raft_term: u64,
}

/// The first command a new leader proposes: every non-expired member gets a
/// full TTL of grace (see `apply_leader_changed`).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct LeaderChanged {
    /// The raft term of the new leader; must exceed the last one applied.
    #[prost(uint64, tag = "1")]
    pub raft_term: u64,
}

/// A supervisor process joins the pool (or re-joins through another
/// gateway). The log orders incarnations (docs/design/0002): apply assigns
/// them, and the effect returns the one the process holds from then on.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct Join {
    /// Member id (stable across restarts).
    #[prost(string, tag = "1")]
    pub member: String,
    /// Member uid (e.g. the pod uid).
    #[prost(string, tag = "2")]
    pub uid: String,
    /// Legacy (only with `process_id` 0, i.e. entries written before 0002
    /// and supervisors that predate it): an incarnation the process chose
    /// itself, compared with the current one (higher supersedes). Kept so
    /// old logs replay to the same state.
    #[prost(uint64, tag = "3")]
    pub incarnation: u64,
    /// Advertise address.
    #[prost(string, tag = "4")]
    pub address: String,
    /// Sandbox slots; must be > 0.
    #[prost(uint32, tag = "5")]
    pub capacity: u32,
    /// Random per-process id (never 0): identifies a process so a retried
    /// hello does not join twice; never compared for order. 0 selects the
    /// legacy rule of `incarnation`.
    #[prost(uint64, tag = "6")]
    pub process_id: u64,
    /// The incarnation the pool last granted this process; 0 asks for a new
    /// one (a fresh process, or one told its incarnation was retired).
    #[prost(uint64, tag = "7")]
    pub known_incarnation: u64,
}

/// One member's heartbeat inside a batch.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct Beat {
    /// Member id.
    #[prost(string, tag = "1")]
    pub member: String,
    /// The incarnation that sent the heartbeat.
    #[prost(uint64, tag = "2")]
    pub incarnation: u64,
}

/// One gateway's batch of heartbeats for one tick interval.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct Heartbeat {
    /// The beats; bad entries are skipped individually.
    #[prost(message, repeated, tag = "1")]
    pub beats: Vec<Beat>,
}

/// A member leaves gracefully; its sandboxes become eligible for takeover.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct Leave {
    /// Member id.
    #[prost(string, tag = "1")]
    pub member: String,
    /// Must be the member's current incarnation.
    #[prost(uint64, tag = "2")]
    pub incarnation: u64,
}

/// Marks a member expired. Proposed by the coordinator; apply re-checks.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct Expire {
    /// Member id.
    #[prost(string, tag = "1")]
    pub member: String,
    /// Precondition: current incarnation.
    #[prost(uint64, tag = "2")]
    pub incarnation: u64,
    /// Precondition: the last heartbeat tick the proposer read.
    #[prost(uint64, tag = "3")]
    pub last_heartbeat_tick: u64,
    /// The raft term of the leader that planned this command: a fencing
    /// token (see [`Command::planned_raft_term`]). 0: unfenced (a command
    /// written before fencing existed).
    #[prost(uint64, tag = "4")]
    pub raft_term: u64,
}

/// Admits (or refuses) a sandbox launch. Idempotent by `launch_id`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct Launch {
    /// Idempotency key.
    #[prost(string, tag = "1")]
    pub launch_id: String,
    /// Sandbox id; a new generation is created if a deleted/failed record
    /// with this id exists.
    #[prost(string, tag = "2")]
    pub sandbox: String,
    /// Opaque reference to the launch material (e.g. an object id); kept
    /// only while the sandbox is live.
    #[prost(string, tag = "3")]
    pub material_ref: String,
}

/// Takes a sandbox over from an owner that is expired, leaving, draining or
/// superseded (I4), checked at apply time.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct Takeover {
    /// Sandbox id.
    #[prost(string, tag = "1")]
    pub sandbox: String,
    /// Precondition: sandbox generation.
    #[prost(uint64, tag = "2")]
    pub generation: u64,
    /// Precondition: current owner member.
    #[prost(string, tag = "3")]
    pub expected_owner: String,
    /// Precondition: current owner incarnation.
    #[prost(uint64, tag = "4")]
    pub expected_incarnation: u64,
    /// Precondition: current ownership term.
    #[prost(uint64, tag = "5")]
    pub expected_term: u64,
    /// The raft term of the leader that planned this command: a fencing
    /// token (see [`Command::planned_raft_term`]). 0: unfenced (a command
    /// written before fencing existed).
    #[prost(uint64, tag = "6")]
    pub raft_term: u64,
}

/// The owner acknowledges its term; only then do its reports count (I3).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct Acknowledge {
    /// Sandbox id.
    #[prost(string, tag = "1")]
    pub sandbox: String,
    /// Sandbox generation.
    #[prost(uint64, tag = "2")]
    pub generation: u64,
    /// Acknowledging member.
    #[prost(string, tag = "3")]
    pub member: String,
    /// Its incarnation.
    #[prost(uint64, tag = "4")]
    pub incarnation: u64,
    /// The term acknowledged.
    #[prost(uint64, tag = "5")]
    pub term: u64,
}

/// An owner's status report for a sandbox.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct Report {
    /// Sandbox id.
    #[prost(string, tag = "1")]
    pub sandbox: String,
    /// Sandbox generation.
    #[prost(uint64, tag = "2")]
    pub generation: u64,
    /// Reporting member.
    #[prost(string, tag = "3")]
    pub member: String,
    /// Its incarnation.
    #[prost(uint64, tag = "4")]
    pub incarnation: u64,
    /// The term the report was produced under.
    #[prost(uint64, tag = "5")]
    pub term: u64,
    /// Opaque workload status (the pool does not interpret it).
    #[prost(string, tag = "6")]
    pub status: String,
}

/// Asks the owner to stop the workload; the sandbox is no longer recovered
/// or moved (I8).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct Stop {
    /// Sandbox id.
    #[prost(string, tag = "1")]
    pub sandbox: String,
    /// Sandbox generation.
    #[prost(uint64, tag = "2")]
    pub generation: u64,
}

/// Deletes a sandbox generation; wins over recovery and moves (I8).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct Delete {
    /// Sandbox id.
    #[prost(string, tag = "1")]
    pub sandbox: String,
    /// Sandbox generation.
    #[prost(uint64, tag = "2")]
    pub generation: u64,
    /// The raft term of the leader that planned this command: a fencing
    /// token (see [`Command::planned_raft_term`]). 0: unfenced (a command
    /// written before fencing existed, or a client's delete).
    #[prost(uint64, tag = "3")]
    pub raft_term: u64,
}

/// Fails a sandbox whose recovery deadline passed (`SupervisorRecoveryFailed`).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct FailRecovery {
    /// Sandbox id.
    #[prost(string, tag = "1")]
    pub sandbox: String,
    /// Precondition: generation.
    #[prost(uint64, tag = "2")]
    pub generation: u64,
    /// Precondition: ownership term.
    #[prost(uint64, tag = "3")]
    pub expected_term: u64,
    /// The raft term of the leader that planned this command: a fencing
    /// token (see [`Command::planned_raft_term`]). 0: unfenced (a command
    /// written before fencing existed).
    #[prost(uint64, tag = "4")]
    pub raft_term: u64,
}

/// Starts (or queues) a drain of one member.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct StartDrain {
    /// New operation id.
    #[prost(string, tag = "1")]
    pub operation_id: String,
    /// Member to drain.
    #[prost(string, tag = "2")]
    pub member: String,
    /// Moves in flight at once, 1..=8; 0 on the wire is invalid (the
    /// gateway substitutes the default 1 before proposing).
    #[prost(uint32, tag = "3")]
    pub max_parallel: u32,
}

/// Starts (or queues) a rebalance of the pool.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct StartRebalance {
    /// New operation id.
    #[prost(string, tag = "1")]
    pub operation_id: String,
    /// Moves in flight at once, 1..=8.
    #[prost(uint32, tag = "2")]
    pub max_parallel: u32,
}

/// A planned move of a healthy sandbox on behalf of a running operation.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct Move {
    /// The running operation asking for the move.
    #[prost(string, tag = "1")]
    pub operation_id: String,
    /// Sandbox id.
    #[prost(string, tag = "2")]
    pub sandbox: String,
    /// Precondition: generation.
    #[prost(uint64, tag = "3")]
    pub generation: u64,
    /// Precondition: current owner member.
    #[prost(string, tag = "4")]
    pub expected_owner: String,
    /// Precondition: current owner incarnation.
    #[prost(uint64, tag = "5")]
    pub expected_incarnation: u64,
    /// Precondition: current term.
    #[prost(uint64, tag = "6")]
    pub expected_term: u64,
    /// Target member; if absent the ring picks one (excluding the owner).
    #[prost(string, optional, tag = "7")]
    pub to: Option<String>,
    /// The raft term of the leader that planned this command: a fencing
    /// token (see [`Command::planned_raft_term`]). 0: unfenced (a command
    /// written before fencing existed).
    #[prost(uint64, tag = "8")]
    pub raft_term: u64,
}

/// Completes the running operation (apply checks it is done).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct CompleteOperation {
    /// Operation id.
    #[prost(string, tag = "1")]
    pub operation_id: String,
    /// The raft term of the leader that planned this command: a fencing
    /// token (see [`Command::planned_raft_term`]). 0: unfenced (a command
    /// written before fencing existed).
    #[prost(uint64, tag = "2")]
    pub raft_term: u64,
}

/// Fails the running operation once its deadline passed.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct FailOperation {
    /// Operation id.
    #[prost(string, tag = "1")]
    pub operation_id: String,
    /// The raft term of the leader that planned this command: a fencing
    /// token (see [`Command::planned_raft_term`]). 0: unfenced (a command
    /// written before fencing existed).
    #[prost(uint64, tag = "2")]
    pub raft_term: u64,
}

/// Cancels an operation; a drained member returns to service.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct CancelOperation {
    /// Operation id.
    #[prost(string, tag = "1")]
    pub operation_id: String,
}

/// Records the endpoint of a sandbox generation's runtime. Proposed by the
/// leader's launcher once the driver reports the runtime serving
/// (docs/design/0003); the owner gets the endpoint in its assignment.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct RecordRuntime {
    /// Sandbox id.
    #[prost(string, tag = "1")]
    pub sandbox: String,
    /// Precondition: the generation the runtime was launched for.
    #[prost(uint64, tag = "2")]
    pub generation: u64,
    /// Runtime name: 1 to 63 of `a-z0-9-` (a DNS label).
    #[prost(string, tag = "3")]
    pub name: String,
    /// `host:port`, a socket address of at most 256 bytes.
    #[prost(string, tag = "4")]
    pub address: String,
    /// PEM of the runtime's CA certificate, at most 16 KiB.
    #[prost(string, tag = "5")]
    pub ca_pem: String,
    /// The raft term of the leader that planned this command: a fencing
    /// token (see [`Command::planned_raft_term`]). 0: unfenced (a command
    /// written before fencing existed).
    #[prost(uint64, tag = "6")]
    pub raft_term: u64,
    /// The scope of the driver that listed the runtime (`process:<id>`,
    /// `kubernetes:<namespace>`): which runtimes that driver can see. A
    /// launcher judges a recorded runtime lost only from a list of the
    /// same scope. At most 128 bytes of printable ASCII; empty: recorded
    /// before scopes were kept (judged by any list).
    #[prost(string, tag = "7")]
    pub driver_scope: String,
}

/// Fails a live sandbox generation whose runtime could not be launched
/// (`LaunchFailed: ...`) or was lost (`RuntimeLost: ...`). Proposed by the
/// leader's launcher; the effect is the one of `FailRecovery`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, prost::Message)]
pub struct FailLaunch {
    /// Sandbox id.
    #[prost(string, tag = "1")]
    pub sandbox: String,
    /// Precondition: generation.
    #[prost(uint64, tag = "2")]
    pub generation: u64,
    /// The failure recorded: starts with `LaunchFailed: ` or
    /// `RuntimeLost: `, at most 1024 bytes.
    #[prost(string, tag = "3")]
    pub reason: String,
    /// The raft term of the leader that planned this command: a fencing
    /// token (see [`Command::planned_raft_term`]). 0: unfenced (a command
    /// written before fencing existed).
    #[prost(uint64, tag = "4")]
    pub raft_term: u64,
}

/// A pool command: one raft log entry's payload. The oneof tags are the wire
/// discriminants (see the module doc); never reuse one.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Command {
    /// Tag 1.
    #[prost(message, tag = "1")]
    Tick(Tick),
    /// Tag 2.
    #[prost(message, tag = "2")]
    Configure(Configure),
    /// Tag 3.
    #[prost(message, tag = "3")]
    LeaderChanged(LeaderChanged),
    /// Tag 4.
    #[prost(message, tag = "4")]
    Join(Join),
    /// Tag 5.
    #[prost(message, tag = "5")]
    Heartbeat(Heartbeat),
    /// Tag 6.
    #[prost(message, tag = "6")]
    Leave(Leave),
    /// Tag 7.
    #[prost(message, tag = "7")]
    Expire(Expire),
    /// Tag 8.
    #[prost(message, tag = "8")]
    Launch(Launch),
    /// Tag 9.
    #[prost(message, tag = "9")]
    Takeover(Takeover),
    /// Tag 10.
    #[prost(message, tag = "10")]
    Acknowledge(Acknowledge),
    /// Tag 11.
    #[prost(message, tag = "11")]
    Report(Report),
    /// Tag 12.
    #[prost(message, tag = "12")]
    Stop(Stop),
    /// Tag 13.
    #[prost(message, tag = "13")]
    Delete(Delete),
    /// Tag 14.
    #[prost(message, tag = "14")]
    FailRecovery(FailRecovery),
    /// Tag 15.
    #[prost(message, tag = "15")]
    StartDrain(StartDrain),
    /// Tag 16.
    #[prost(message, tag = "16")]
    StartRebalance(StartRebalance),
    /// Tag 17.
    #[prost(message, tag = "17")]
    Move(Move),
    /// Tag 18.
    #[prost(message, tag = "18")]
    CompleteOperation(CompleteOperation),
    /// Tag 19.
    #[prost(message, tag = "19")]
    FailOperation(FailOperation),
    /// Tag 20.
    #[prost(message, tag = "20")]
    CancelOperation(CancelOperation),
    /// Tag 21.
    #[prost(message, tag = "21")]
    RecordRuntime(RecordRuntime),
    /// Tag 22.
    #[prost(message, tag = "22")]
    FailLaunch(FailLaunch),
}

/// The on-wire container of one command.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CommandEnvelope {
    /// The command; `None` after decoding means an unknown tag.
    #[prost(
        oneof = "Command",
        tags = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22"
    )]
    pub command: Option<Command>,
}

impl Command {
    /// Checks the ids that become record keys (a joining member, a launched
    /// sandbox) against [`crate::ids`]. Called before a command is proposed
    /// (the store's `validate`, on the proposing node and on a leader taking
    /// a forward), never in apply: apply of a log written by an older
    /// version must not change.
    ///
    /// # Errors
    /// The first id outside the rule, naming its field.
    pub fn check_ids(&self) -> Result<(), crate::ids::InvalidId> {
        match self {
            Command::Join(c) => crate::ids::check_id("member_id", &c.member),
            Command::Launch(c) => crate::ids::check_id("sandbox_id", &c.sandbox),
            _ => Ok(()),
        }
    }

    /// Encodes the command for the raft log.
    pub fn encode_to_vec(&self) -> Vec<u8> {
        CommandEnvelope {
            command: Some(self.clone()),
        }
        .encode_to_vec()
    }

    /// Decodes a command from raft log bytes.
    ///
    /// # Errors
    /// [`DecodeError`] if the bytes are not a command envelope or carry an
    /// unknown command tag.
    pub fn decode(bytes: &[u8]) -> Result<Command, DecodeError> {
        CommandEnvelope::decode(bytes)?
            .command
            .ok_or(DecodeError::UnknownCommand)
    }

    /// The variant's name, for logs and golden files.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Tick(_) => "Tick",
            Command::Configure(_) => "Configure",
            Command::LeaderChanged(_) => "LeaderChanged",
            Command::Join(_) => "Join",
            Command::Heartbeat(_) => "Heartbeat",
            Command::Leave(_) => "Leave",
            Command::Expire(_) => "Expire",
            Command::Launch(_) => "Launch",
            Command::Takeover(_) => "Takeover",
            Command::Acknowledge(_) => "Acknowledge",
            Command::Report(_) => "Report",
            Command::Stop(_) => "Stop",
            Command::Delete(_) => "Delete",
            Command::FailRecovery(_) => "FailRecovery",
            Command::StartDrain(_) => "StartDrain",
            Command::StartRebalance(_) => "StartRebalance",
            Command::Move(_) => "Move",
            Command::CompleteOperation(_) => "CompleteOperation",
            Command::FailOperation(_) => "FailOperation",
            Command::CancelOperation(_) => "CancelOperation",
            Command::RecordRuntime(_) => "RecordRuntime",
            Command::FailLaunch(_) => "FailLaunch",
        }
    }
}

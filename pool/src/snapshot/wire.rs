//! The snapshot's wire types: prost messages with explicit tags (a wire
//! format: a field or table takes the next free number, never a reused
//! one). Re-exported by [`crate::snapshot`].

#[allow(unused_imports)] // doc links
use crate::state::{MemberState, OperationPhase, Phase};

/// Wire enum of [`Phase`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub enum PhaseWire {
    /// Never written.
    Unspecified = 0,
    /// Admitting.
    Admitting = 1,
    /// Assigned.
    Assigned = 2,
    /// Recovering.
    Recovering = 3,
    /// Stopping.
    Stopping = 4,
    /// Deleted.
    Deleted = 5,
    /// Failed.
    Failed = 6,
}

/// Wire enum of [`OperationPhase`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub enum OperationPhaseWire {
    /// Never written.
    Unspecified = 0,
    /// Queued.
    Queued = 1,
    /// Running.
    Running = 2,
    /// Succeeded.
    Succeeded = 3,
    /// Failed.
    Failed = 4,
    /// Cancelled.
    Cancelled = 5,
}

/// Meta record: clock, raft term, config.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MetaRecord {
    /// Logical time.
    #[prost(uint64, tag = "1")]
    pub now_tick: u64,
    /// Raft term of the last applied LeaderChanged.
    #[prost(uint64, tag = "2")]
    pub raft_term: u64,
    /// Config.
    #[prost(uint64, tag = "3")]
    pub heartbeat_ttl_ticks: u64,
    /// Config.
    #[prost(uint64, tag = "4")]
    pub recovery_deadline_ticks: u64,
    /// Config.
    #[prost(uint64, tag = "5")]
    pub operation_deadline_ticks: u64,
    /// Config (absent before issue 16: the default retention).
    #[prost(uint64, tag = "6")]
    pub retention_ticks: u64,
    /// Highest generation garbage collection removed (absent: 0).
    #[prost(uint64, tag = "7")]
    pub generation_floor: u64,
}

/// Member record.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MemberRecord {
    /// Id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Uid.
    #[prost(string, tag = "2")]
    pub uid: String,
    /// Incarnation.
    #[prost(uint64, tag = "3")]
    pub incarnation: u64,
    /// Address.
    #[prost(string, tag = "4")]
    pub address: String,
    /// Capacity.
    #[prost(uint32, tag = "5")]
    pub capacity: u32,
    /// Charged slots.
    #[prost(uint32, tag = "6")]
    pub charged: u32,
    /// State: [`MemberState::tag`] (an enum on the wire is a varint
    /// int32, so snapshots written with the former wire enum read the
    /// same).
    #[prost(int32, tag = "7")]
    pub state: i32,
    /// Last heartbeat tick.
    #[prost(uint64, tag = "8")]
    pub last_heartbeat_tick: u64,
    /// Down since.
    #[prost(uint64, optional, tag = "9")]
    pub down_since_tick: Option<u64>,
    /// Process id of the current incarnation (absent before 0002: 0).
    #[prost(uint64, tag = "10")]
    pub process_id: u64,
}

/// Owner of a sandbox.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OwnerRecord {
    /// Member.
    #[prost(string, tag = "1")]
    pub member: String,
    /// Incarnation.
    #[prost(uint64, tag = "2")]
    pub incarnation: u64,
    /// Term.
    #[prost(uint64, tag = "3")]
    pub term: u64,
    /// Credential epoch.
    #[prost(uint64, tag = "4")]
    pub credential_epoch: u64,
    /// Acknowledged.
    #[prost(bool, tag = "5")]
    pub acknowledged: bool,
}

/// Recovery in progress.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RecoveryRecord {
    /// Deadline.
    #[prost(uint64, tag = "1")]
    pub deadline_tick: u64,
    /// Operation id if caused by a move; absent for a takeover.
    #[prost(string, optional, tag = "2")]
    pub move_operation: Option<String>,
}

/// Last report.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReportRecordWire {
    /// Member.
    #[prost(string, tag = "1")]
    pub member: String,
    /// Incarnation.
    #[prost(uint64, tag = "2")]
    pub incarnation: u64,
    /// Term.
    #[prost(uint64, tag = "3")]
    pub term: u64,
    /// Status.
    #[prost(string, tag = "4")]
    pub status: String,
    /// Log index.
    #[prost(uint64, tag = "5")]
    pub index: u64,
}

/// The runtime endpoint of a sandbox generation.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RuntimeRecord {
    /// Runtime name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// `host:port`.
    #[prost(string, tag = "2")]
    pub address: String,
    /// CA certificate PEM.
    #[prost(string, tag = "3")]
    pub ca_pem: String,
    /// The log index that recorded it (absent before issue 27: 0).
    #[prost(uint64, tag = "4")]
    pub recorded_index: u64,
    /// The driver scope that listed it (absent before: empty).
    #[prost(string, tag = "5")]
    pub driver_scope: String,
}

/// Sandbox record.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SandboxRecord {
    /// Id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Generation.
    #[prost(uint64, tag = "2")]
    pub generation: u64,
    /// Phase.
    #[prost(enumeration = "PhaseWire", tag = "3")]
    pub phase: i32,
    /// Owner.
    #[prost(message, optional, tag = "4")]
    pub owner: Option<OwnerRecord>,
    /// Recovery.
    #[prost(message, optional, tag = "5")]
    pub recovery: Option<RecoveryRecord>,
    /// Last report.
    #[prost(message, optional, tag = "6")]
    pub last_report: Option<ReportRecordWire>,
    /// Launch id.
    #[prost(string, tag = "7")]
    pub launch_id: String,
    /// Material.
    #[prost(string, tag = "8")]
    pub material_ref: String,
    /// Failure.
    #[prost(string, optional, tag = "9")]
    pub failure: Option<String>,
    /// Runtime endpoint (absent before issue 14, and until recorded).
    #[prost(message, optional, tag = "10")]
    pub runtime: Option<RuntimeRecord>,
    /// Tick it became deleted or failed (absent before issue 16: a
    /// terminal record decodes as ended at the snapshot's tick).
    #[prost(uint64, optional, tag = "11")]
    pub ended_tick: Option<u64>,
}

/// Operation record.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OperationRecord {
    /// Id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Drain target; absent for a rebalance.
    #[prost(string, optional, tag = "2")]
    pub drain_member: Option<String>,
    /// Phase.
    #[prost(enumeration = "OperationPhaseWire", tag = "3")]
    pub phase: i32,
    /// Message.
    #[prost(string, tag = "4")]
    pub message: String,
    /// Attempts.
    #[prost(uint32, tag = "5")]
    pub attempts: u32,
    /// Moves planned.
    #[prost(uint32, tag = "6")]
    pub moves_planned: u32,
    /// Moves done.
    #[prost(uint32, tag = "7")]
    pub moves_done: u32,
    /// Max parallel.
    #[prost(uint32, tag = "8")]
    pub max_parallel: u32,
    /// Deadline.
    #[prost(uint64, optional, tag = "9")]
    pub deadline_tick: Option<u64>,
    /// Created index.
    #[prost(uint64, tag = "10")]
    pub created_index: u64,
    /// Tick it finished (absent before issue 16: a finished operation
    /// decodes as finished at the snapshot's tick).
    #[prost(uint64, optional, tag = "11")]
    pub finished_tick: Option<u64>,
}

/// Launch record.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LaunchRecord {
    /// Launch id.
    #[prost(string, tag = "1")]
    pub launch_id: String,
    /// Sandbox id.
    #[prost(string, tag = "2")]
    pub sandbox: String,
    /// Admitted generation (absent if refused).
    #[prost(uint64, optional, tag = "3")]
    pub generation: Option<u64>,
    /// Refusal reason (absent if admitted).
    #[prost(string, optional, tag = "4")]
    pub refused: Option<String>,
    /// The refusal's tick, or the tick the admitted generation ended
    /// (absent before issue 16: decodes as the snapshot's tick once the
    /// generation ended).
    #[prost(uint64, optional, tag = "5")]
    pub ended_tick: Option<u64>,
}

/// One table-tagged snapshot record.
// The sandbox record (with its runtime endpoint) is the largest variant and
// also by far the most common one in a snapshot: boxing it would add an
// allocation per sandbox to save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Record {
    /// Table tag 1.
    #[prost(message, tag = "1")]
    Meta(MetaRecord),
    /// Table tag 2.
    #[prost(message, tag = "2")]
    Member(MemberRecord),
    /// Table tag 3.
    #[prost(message, tag = "3")]
    Sandbox(SandboxRecord),
    /// Table tag 4.
    #[prost(message, tag = "4")]
    Operation(OperationRecord),
    /// Table tag 5.
    #[prost(message, tag = "5")]
    Launch(LaunchRecord),
}

/// Wrapper so records can be repeated.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RecordEnvelope {
    /// The record.
    #[prost(oneof = "Record", tags = "1, 2, 3, 4, 5")]
    pub record: Option<Record>,
}

/// A whole snapshot.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Snapshot {
    /// Records in table order.
    #[prost(message, repeated, tag = "1")]
    pub records: Vec<RecordEnvelope>,
}

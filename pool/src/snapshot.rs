//! Snapshot encoding.
//!
//! A snapshot is a [`Snapshot`] message: a sequence of [`Record`]s, each
//! tagged by table through a oneof (nomad's `persistX` per table). Tags are
//! explicit and never reused; a new table takes the next number.
//!
//! | record tag | table |
//! | --- | --- |
//! | 1 | meta (exactly one, first) |
//! | 2 | members |
//! | 3 | sandboxes |
//! | 4 | operations |
//! | 5 | launches |
//!
//! A sandbox record's optional runtime endpoint is field 10 of
//! [`SandboxRecord`] ([`RuntimeRecord`]); a snapshot written before it
//! existed decodes to no runtime.
//!
//! Order: meta, then each table in `BTreeMap` key order, so two replicas
//! with the same state produce byte-identical snapshots. The hash ring is
//! derived data and is rebuilt on restore.

use std::collections::BTreeMap;

use prost::Message;

use crate::command::DecodeError;
use crate::hash::Ring;
use crate::state::*;

/// Wire enum of [`MemberState`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, prost::Enumeration)]
#[repr(i32)]
pub enum MemberStateWire {
    /// Never written.
    Unspecified = 0,
    /// Active.
    Active = 1,
    /// Draining.
    Draining = 2,
    /// Leaving.
    Leaving = 3,
    /// Expired.
    Expired = 4,
}

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
    /// State.
    #[prost(enumeration = "MemberStateWire", tag = "7")]
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

fn member_state_to(s: MemberState) -> MemberStateWire {
    match s {
        MemberState::Active => MemberStateWire::Active,
        MemberState::Draining => MemberStateWire::Draining,
        MemberState::Leaving => MemberStateWire::Leaving,
        MemberState::Expired => MemberStateWire::Expired,
    }
}

fn member_state_from(v: i32) -> Result<MemberState, DecodeError> {
    match MemberStateWire::try_from(v) {
        Ok(MemberStateWire::Active) => Ok(MemberState::Active),
        Ok(MemberStateWire::Draining) => Ok(MemberState::Draining),
        Ok(MemberStateWire::Leaving) => Ok(MemberState::Leaving),
        Ok(MemberStateWire::Expired) => Ok(MemberState::Expired),
        _ => Err(DecodeError::InvalidEnum {
            field: "member.state",
            value: v,
        }),
    }
}

fn phase_to(p: Phase) -> PhaseWire {
    match p {
        Phase::Admitting => PhaseWire::Admitting,
        Phase::Assigned => PhaseWire::Assigned,
        Phase::Recovering => PhaseWire::Recovering,
        Phase::Stopping => PhaseWire::Stopping,
        Phase::Deleted => PhaseWire::Deleted,
        Phase::Failed => PhaseWire::Failed,
    }
}

fn phase_from(v: i32) -> Result<Phase, DecodeError> {
    match PhaseWire::try_from(v) {
        Ok(PhaseWire::Admitting) => Ok(Phase::Admitting),
        Ok(PhaseWire::Assigned) => Ok(Phase::Assigned),
        Ok(PhaseWire::Recovering) => Ok(Phase::Recovering),
        Ok(PhaseWire::Stopping) => Ok(Phase::Stopping),
        Ok(PhaseWire::Deleted) => Ok(Phase::Deleted),
        Ok(PhaseWire::Failed) => Ok(Phase::Failed),
        _ => Err(DecodeError::InvalidEnum {
            field: "sandbox.phase",
            value: v,
        }),
    }
}

fn op_phase_to(p: OperationPhase) -> OperationPhaseWire {
    match p {
        OperationPhase::Queued => OperationPhaseWire::Queued,
        OperationPhase::Running => OperationPhaseWire::Running,
        OperationPhase::Succeeded => OperationPhaseWire::Succeeded,
        OperationPhase::Failed => OperationPhaseWire::Failed,
        OperationPhase::Cancelled => OperationPhaseWire::Cancelled,
    }
}

fn op_phase_from(v: i32) -> Result<OperationPhase, DecodeError> {
    match OperationPhaseWire::try_from(v) {
        Ok(OperationPhaseWire::Queued) => Ok(OperationPhase::Queued),
        Ok(OperationPhaseWire::Running) => Ok(OperationPhase::Running),
        Ok(OperationPhaseWire::Succeeded) => Ok(OperationPhase::Succeeded),
        Ok(OperationPhaseWire::Failed) => Ok(OperationPhase::Failed),
        Ok(OperationPhaseWire::Cancelled) => Ok(OperationPhase::Cancelled),
        _ => Err(DecodeError::InvalidEnum {
            field: "operation.phase",
            value: v,
        }),
    }
}

/// Encodes one member (public for per-table tests).
pub fn member_to_record(m: &Member) -> MemberRecord {
    MemberRecord {
        id: m.id.clone(),
        uid: m.uid.clone(),
        incarnation: m.incarnation,
        address: m.address.clone(),
        capacity: m.capacity,
        charged: m.charged,
        state: member_state_to(m.state) as i32,
        last_heartbeat_tick: m.last_heartbeat_tick,
        down_since_tick: m.down_since_tick,
        process_id: m.process_id,
    }
}

/// Decodes one member.
pub fn member_from_record(r: MemberRecord) -> Result<Member, DecodeError> {
    Ok(Member {
        state: member_state_from(r.state)?,
        id: r.id,
        uid: r.uid,
        incarnation: r.incarnation,
        process_id: r.process_id,
        address: r.address,
        capacity: r.capacity,
        charged: r.charged,
        last_heartbeat_tick: r.last_heartbeat_tick,
        down_since_tick: r.down_since_tick,
    })
}

/// Encodes one sandbox.
pub fn sandbox_to_record(s: &Sandbox) -> SandboxRecord {
    SandboxRecord {
        id: s.id.clone(),
        generation: s.generation,
        phase: phase_to(s.phase) as i32,
        owner: Some(OwnerRecord {
            member: s.owner.member.clone(),
            incarnation: s.owner.incarnation,
            term: s.owner.term,
            credential_epoch: s.owner.credential_epoch,
            acknowledged: s.owner.acknowledged,
        }),
        recovery: s.recovery.as_ref().map(|r| RecoveryRecord {
            deadline_tick: r.deadline_tick,
            move_operation: match &r.cause {
                RecoveryCause::Takeover => None,
                RecoveryCause::Move(op) => Some(op.clone()),
            },
        }),
        last_report: s.last_report.as_ref().map(|r| ReportRecordWire {
            member: r.member.clone(),
            incarnation: r.incarnation,
            term: r.term,
            status: r.status.clone(),
            index: r.index,
        }),
        launch_id: s.launch_id.clone(),
        material_ref: s.material_ref.clone(),
        failure: s.failure.clone(),
        runtime: s.runtime.as_ref().map(|r| RuntimeRecord {
            name: r.name.clone(),
            address: r.address.clone(),
            ca_pem: r.ca_pem.clone(),
        }),
    }
}

/// Decodes one sandbox.
pub fn sandbox_from_record(r: SandboxRecord) -> Result<Sandbox, DecodeError> {
    let o = r.owner.ok_or(DecodeError::Incomplete("sandbox.owner"))?;
    Ok(Sandbox {
        phase: phase_from(r.phase)?,
        id: r.id,
        generation: r.generation,
        owner: Owner {
            member: o.member,
            incarnation: o.incarnation,
            term: o.term,
            credential_epoch: o.credential_epoch,
            acknowledged: o.acknowledged,
        },
        recovery: r.recovery.map(|rc| Recovery {
            deadline_tick: rc.deadline_tick,
            cause: match rc.move_operation {
                None => RecoveryCause::Takeover,
                Some(op) => RecoveryCause::Move(op),
            },
        }),
        last_report: r.last_report.map(|rp| ReportRecord {
            member: rp.member,
            incarnation: rp.incarnation,
            term: rp.term,
            status: rp.status,
            index: rp.index,
        }),
        launch_id: r.launch_id,
        material_ref: r.material_ref,
        failure: r.failure,
        runtime: r.runtime.map(|rt| Runtime {
            name: rt.name,
            address: rt.address,
            ca_pem: rt.ca_pem,
        }),
    })
}

/// Encodes one operation.
pub fn operation_to_record(o: &Operation) -> OperationRecord {
    OperationRecord {
        id: o.id.clone(),
        drain_member: match &o.kind {
            OperationKind::DrainMember { member } => Some(member.clone()),
            OperationKind::RebalancePool => None,
        },
        phase: op_phase_to(o.phase) as i32,
        message: o.message.clone(),
        attempts: o.attempts,
        moves_planned: o.moves_planned,
        moves_done: o.moves_done,
        max_parallel: o.max_parallel,
        deadline_tick: o.deadline_tick,
        created_index: o.created_index,
    }
}

/// Decodes one operation.
pub fn operation_from_record(r: OperationRecord) -> Result<Operation, DecodeError> {
    Ok(Operation {
        phase: op_phase_from(r.phase)?,
        id: r.id,
        kind: match r.drain_member {
            Some(member) => OperationKind::DrainMember { member },
            None => OperationKind::RebalancePool,
        },
        message: r.message,
        attempts: r.attempts,
        moves_planned: r.moves_planned,
        moves_done: r.moves_done,
        max_parallel: r.max_parallel,
        deadline_tick: r.deadline_tick,
        created_index: r.created_index,
    })
}

/// Encodes one launch outcome.
pub fn launch_to_record(id: &str, l: &LaunchOutcome) -> LaunchRecord {
    match l {
        LaunchOutcome::Admitted {
            sandbox,
            generation,
        } => LaunchRecord {
            launch_id: id.to_string(),
            sandbox: sandbox.clone(),
            generation: Some(*generation),
            refused: None,
        },
        LaunchOutcome::Refused { sandbox, reason } => LaunchRecord {
            launch_id: id.to_string(),
            sandbox: sandbox.clone(),
            generation: None,
            refused: Some(reason.clone()),
        },
    }
}

/// Decodes one launch outcome.
pub fn launch_from_record(r: LaunchRecord) -> Result<(String, LaunchOutcome), DecodeError> {
    let outcome = match (r.generation, r.refused) {
        (Some(generation), None) => LaunchOutcome::Admitted {
            sandbox: r.sandbox,
            generation,
        },
        (None, Some(reason)) => LaunchOutcome::Refused {
            sandbox: r.sandbox,
            reason,
        },
        _ => return Err(DecodeError::Incomplete("launch outcome")),
    };
    Ok((r.launch_id, outcome))
}

fn insert_unique<V>(map: &mut BTreeMap<String, V>, k: String, v: V) -> Result<(), DecodeError> {
    if map.contains_key(&k) {
        return Err(DecodeError::DuplicateKey(k));
    }
    map.insert(k, v);
    Ok(())
}

impl PoolState {
    /// Encodes the whole state as table-tagged records (deterministic).
    pub fn encode_snapshot(&self) -> Vec<u8> {
        let mut records = Vec::with_capacity(
            1 + self.members.len()
                + self.sandboxes.len()
                + self.operations.len()
                + self.launches.len(),
        );
        let mut push = |r: Record| records.push(RecordEnvelope { record: Some(r) });
        push(Record::Meta(MetaRecord {
            now_tick: self.now_tick,
            raft_term: self.raft_term,
            heartbeat_ttl_ticks: self.config.heartbeat_ttl_ticks,
            recovery_deadline_ticks: self.config.recovery_deadline_ticks,
            operation_deadline_ticks: self.config.operation_deadline_ticks,
        }));
        for m in self.members.values() {
            push(Record::Member(member_to_record(m)));
        }
        for s in self.sandboxes.values() {
            push(Record::Sandbox(sandbox_to_record(s)));
        }
        for o in self.operations.values() {
            push(Record::Operation(operation_to_record(o)));
        }
        for (id, l) in &self.launches {
            push(Record::Launch(launch_to_record(id, l)));
        }
        Snapshot { records }.encode_to_vec()
    }

    /// Decodes a snapshot and rebuilds derived data (the ring).
    ///
    /// # Errors
    /// [`DecodeError`] on malformed bytes, unknown enum values, a missing or
    /// repeated meta record, duplicate keys or unknown record tables.
    pub fn decode_snapshot(bytes: &[u8]) -> Result<PoolState, DecodeError> {
        let snap = Snapshot::decode(bytes)?;
        let mut st = PoolState::new();
        let mut meta_seen = false;
        for env in snap.records {
            match env.record {
                None => return Err(DecodeError::Incomplete("unknown snapshot table")),
                Some(Record::Meta(m)) => {
                    if meta_seen {
                        return Err(DecodeError::DuplicateKey("meta".to_string()));
                    }
                    meta_seen = true;
                    st.now_tick = m.now_tick;
                    st.raft_term = m.raft_term;
                    st.config = Config {
                        heartbeat_ttl_ticks: m.heartbeat_ttl_ticks,
                        recovery_deadline_ticks: m.recovery_deadline_ticks,
                        operation_deadline_ticks: m.operation_deadline_ticks,
                    };
                }
                Some(Record::Member(r)) => {
                    let m = member_from_record(r)?;
                    insert_unique(&mut st.members, m.id.clone(), m)?;
                }
                Some(Record::Sandbox(r)) => {
                    let s = sandbox_from_record(r)?;
                    insert_unique(&mut st.sandboxes, s.id.clone(), s)?;
                }
                Some(Record::Operation(r)) => {
                    let o = operation_from_record(r)?;
                    insert_unique(&mut st.operations, o.id.clone(), o)?;
                }
                Some(Record::Launch(r)) => {
                    let (id, l) = launch_from_record(r)?;
                    insert_unique(&mut st.launches, id, l)?;
                }
            }
        }
        if !meta_seen {
            return Err(DecodeError::Incomplete("meta"));
        }
        st.ring = Ring::new(st.members.keys().map(String::as_str));
        Ok(st)
    }
}

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
//! existed decodes to no runtime; its field 4 `recorded_index` (issue 27)
//! decodes to 0 from an older snapshot (recorded before any list), and its
//! field 5 `driver_scope` to empty (judged by a list of any scope).
//!
//! Garbage collection's fields (issue 16): meta 6 `retention_ticks` and 7
//! `generation_floor`, sandbox 11 `ended_tick`, operation 11
//! `finished_tick`, launch 5 `ended_tick`. A snapshot written before them
//! decodes to the default retention, floor 0, and every finished record
//! finished at the snapshot's `now_tick`. The prost types live in `wire`.
//!
//! Order: meta, then each table in `BTreeMap` key order, so two replicas
//! with the same state produce byte-identical snapshots. The hash ring is
//! derived data and is rebuilt on restore.

use std::collections::BTreeMap;

use prost::Message;

use crate::command::DecodeError;
use crate::hash::Ring;
use crate::state::*;

mod wire;

pub use wire::*;

fn member_state_from(v: i32) -> Result<MemberState, DecodeError> {
    MemberState::from_tag(v).ok_or(DecodeError::InvalidEnum {
        field: "member.state",
        value: v,
    })
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
        state: m.state.tag(),
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
            recorded_index: r.recorded_index,
            driver_scope: r.driver_scope.clone(),
        }),
        ended_tick: s.ended_tick,
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
            recorded_index: rt.recorded_index,
            driver_scope: rt.driver_scope,
        }),
        ended_tick: r.ended_tick,
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
        finished_tick: o.finished_tick,
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
        finished_tick: r.finished_tick,
    })
}

/// Encodes one launch outcome.
pub fn launch_to_record(id: &str, l: &LaunchOutcome) -> LaunchRecord {
    match l {
        LaunchOutcome::Admitted {
            sandbox,
            generation,
            ended_tick,
        } => LaunchRecord {
            launch_id: id.to_string(),
            sandbox: sandbox.clone(),
            generation: Some(*generation),
            refused: None,
            ended_tick: *ended_tick,
        },
        LaunchOutcome::Refused {
            sandbox,
            reason,
            tick,
        } => LaunchRecord {
            launch_id: id.to_string(),
            sandbox: sandbox.clone(),
            generation: None,
            refused: Some(reason.clone()),
            ended_tick: Some(*tick),
        },
    }
}

/// Decodes one launch outcome. A refusal without a tick (written before
/// issue 16) decodes as refused at `now_tick`, the snapshot's tick.
pub fn launch_from_record(
    r: LaunchRecord,
    now_tick: u64,
) -> Result<(String, LaunchOutcome), DecodeError> {
    let outcome = match (r.generation, r.refused) {
        (Some(generation), None) => LaunchOutcome::Admitted {
            sandbox: r.sandbox,
            generation,
            ended_tick: r.ended_tick,
        },
        (None, Some(reason)) => LaunchOutcome::Refused {
            sandbox: r.sandbox,
            reason,
            tick: r.ended_tick.unwrap_or(now_tick),
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
            retention_ticks: self.config.retention_ticks,
            generation_floor: self.generation_floor,
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
        for (id, l) in self.launches.iter() {
            push(Record::Launch(launch_to_record(id, l)));
        }
        Snapshot { records }.encode_to_vec()
    }

    /// Decodes a snapshot, rebuilds derived data (the ring) and checks the
    /// result against the invariants ([`PoolState::check_invariants`])
    /// before returning it: a snapshot that decodes but breaks one is
    /// refused, never installed.
    ///
    /// A snapshot written before issue 16 (no retention, no finish ticks)
    /// decodes to the default retention, generation floor 0, and every
    /// finished record (terminal sandbox, ended launch, refused tombstone,
    /// finished operation, departed member without a departure tick)
    /// finished at the snapshot's `now_tick`: retention counts from there.
    ///
    /// # Errors
    /// [`DecodeError`] on malformed bytes, unknown enum values, a missing or
    /// repeated meta record, duplicate keys, unknown record tables or a
    /// broken invariant ([`DecodeError::Invariant`]).
    pub fn decode_snapshot(bytes: &[u8]) -> Result<PoolState, DecodeError> {
        let st = Self::decode_snapshot_unchecked(bytes)?;
        st.check_invariants().map_err(DecodeError::Invariant)?;
        Ok(st)
    }

    /// Decodes a snapshot without the invariant check (tests and tools
    /// that must look at a broken state); never install its result.
    ///
    /// # Errors
    /// As [`PoolState::decode_snapshot`], except for invariants.
    pub fn decode_snapshot_unchecked(bytes: &[u8]) -> Result<PoolState, DecodeError> {
        let snap = Snapshot::decode(bytes)?;
        let mut st = PoolState::new();
        let mut sandboxes = BTreeMap::new();
        let mut launches = BTreeMap::new();
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
                        retention_ticks: match m.retention_ticks {
                            0 => DEFAULT_RETENTION_TICKS,
                            n => n,
                        },
                    };
                    st.generation_floor = m.generation_floor;
                }
                Some(Record::Member(r)) => {
                    let m = member_from_record(r)?;
                    insert_unique(&mut st.members, m.id.clone(), m)?;
                }
                Some(Record::Sandbox(r)) => {
                    let s = sandbox_from_record(r)?;
                    insert_unique(&mut sandboxes, s.id.clone(), s)?;
                }
                Some(Record::Operation(r)) => {
                    let o = operation_from_record(r)?;
                    insert_unique(&mut st.operations, o.id.clone(), o)?;
                }
                Some(Record::Launch(r)) => {
                    let (id, l) = launch_from_record(r, st.now_tick)?;
                    insert_unique(&mut launches, id, l)?;
                }
            }
        }
        if !meta_seen {
            return Err(DecodeError::Incomplete("meta"));
        }
        st.ring = Ring::new(st.members.keys().map(String::as_str));
        fill_ended_ticks(st.now_tick, &mut sandboxes, &mut launches);
        st.sandboxes = sandboxes.into();
        st.launches = launches.into();
        st.fill_finish_ticks();
        Ok(st)
    }

    /// Gives every finished operation and departed member of a snapshot
    /// written before issue 16 the snapshot's tick as its finish tick (see
    /// `decode_snapshot`; sandboxes and launches: [`fill_ended_ticks`]).
    fn fill_finish_ticks(&mut self) {
        let now = self.now_tick;
        for o in self.operations.values_mut() {
            if o.phase > OperationPhase::Running && o.finished_tick.is_none() {
                o.finished_tick = Some(now);
            }
        }
        for m in self.members.values_mut() {
            let departed = matches!(m.state, MemberState::Leaving | MemberState::Expired);
            if departed && m.down_since_tick.is_none() {
                m.down_since_tick = Some(now);
            }
        }
    }
}

/// Gives every terminal sandbox and ended launch of a snapshot written
/// before issue 16 the snapshot's tick `now` as its end tick, before the
/// records are filed in their tables' indexes.
fn fill_ended_ticks(
    now: u64,
    sandboxes: &mut BTreeMap<String, Sandbox>,
    launches: &mut BTreeMap<String, LaunchOutcome>,
) {
    for s in sandboxes.values_mut() {
        if matches!(s.phase, Phase::Deleted | Phase::Failed) && s.ended_tick.is_none() {
            s.ended_tick = Some(now);
        }
    }
    for l in launches.values_mut() {
        if let LaunchOutcome::Admitted {
            sandbox,
            generation,
            ended_tick: ended @ None,
        } = l
        {
            let live = sandboxes.get(sandbox.as_str()).is_some_and(|s| {
                s.generation == *generation && !matches!(s.phase, Phase::Deleted | Phase::Failed)
            });
            if !live {
                *ended = Some(now);
            }
        }
    }
}

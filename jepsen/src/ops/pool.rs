//! The pool workload's event values ([`crate::workload::pool`] documents
//! which `f` carries which). Every struct denies unknown fields and has no
//! defaults: the workload writes exactly these, and a checker reading a
//! history that lacks one of them fails naming the event.

use proto::pool_types::{MemberState, SandboxPhase};
use serde::{Deserialize, Serialize};

/// A sandbox view: the gateway's `Sandbox` message (`launch`, `delete`,
/// `get` results; `status` rows).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxView {
    /// Sandbox id.
    pub sandbox: String,
    /// Generation.
    pub generation: u64,
    /// Phase (`assigned`, `deleted`, ...).
    pub phase: String,
    /// Owner member.
    pub owner: String,
    /// Owner incarnation.
    pub incarnation: u64,
    /// Ownership term.
    pub term: u64,
    /// Credential epoch (`epoch` in histories written before the rename).
    #[serde(alias = "epoch")]
    pub credential_epoch: u64,
    /// Term acknowledged by the owner.
    pub acknowledged: bool,
    /// Fenced observed status.
    pub observed: String,
}

impl From<&proto::pool_admin::Sandbox> for SandboxView {
    fn from(s: &proto::pool_admin::Sandbox) -> Self {
        SandboxView {
            sandbox: s.id.clone(),
            generation: s.generation,
            phase: SandboxPhase::name_of(s.phase).to_string(),
            owner: s.owner.clone(),
            incarnation: s.owner_incarnation,
            term: s.term,
            credential_epoch: s.credential_epoch,
            acknowledged: s.acknowledged,
            observed: s.observed_status.clone(),
        }
    }
}

/// A `get` of a sandbox that does not exist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Absent {
    /// Sandbox id.
    pub sandbox: String,
    /// Always true.
    pub absent: bool,
}

/// A `get` result: the view, or [`Absent`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GetResult {
    /// The sandbox.
    View(SandboxView),
    /// No such sandbox.
    Absent(Absent),
}

impl GetResult {
    /// Decodes a `get` `ok` value (`absent` present: [`Absent`]).
    ///
    /// # Errors
    /// When the value is neither shape.
    pub fn decode(event: &crate::history::Event) -> Result<GetResult, super::ValueError> {
        if event.value.get("absent").is_some() {
            super::decode(event).map(GetResult::Absent)
        } else {
            super::decode(event).map(GetResult::View)
        }
    }
}

/// A member row of a status read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberRow {
    /// Member id.
    pub id: String,
    /// Incarnation.
    pub incarnation: u64,
    /// State (`active`, `draining`, `expired`, ...).
    pub state: String,
    /// Slots.
    pub capacity: u64,
    /// Slots used.
    pub used: u64,
    /// Ticks since its last heartbeat (always written; no check reads it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ticks_since_heartbeat: Option<u64>,
}

/// An operation row of a status read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperationRow {
    /// Operation id.
    pub id: String,
    /// Kind (`drain`, ...).
    pub kind: String,
    /// The member it works on.
    pub member: String,
    /// Phase (`running`, ...).
    pub phase: String,
}

/// A `status` `ok` value: `PoolAdmin.GetSupervisorPoolStatus`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusRead {
    /// The gateway's tick.
    pub now_tick: u64,
    /// Raft log position of the state read.
    pub applied_index: u64,
    /// Every member.
    pub members: Vec<MemberRow>,
    /// Every sandbox.
    pub sandboxes: Vec<SandboxView>,
    /// Every pool operation.
    pub operations: Vec<OperationRow>,
}

impl From<&proto::pool_admin::SupervisorPoolStatus> for StatusRead {
    fn from(s: &proto::pool_admin::SupervisorPoolStatus) -> Self {
        StatusRead {
            now_tick: s.now_tick,
            applied_index: s.applied_index,
            members: s
                .members
                .iter()
                .map(|m| MemberRow {
                    id: m.id.clone(),
                    incarnation: m.incarnation,
                    state: MemberState::name_of(m.state).to_string(),
                    capacity: u64::from(m.capacity),
                    used: u64::from(m.used),
                    ticks_since_heartbeat: Some(m.ticks_since_heartbeat),
                })
                .collect(),
            sandboxes: s.sandboxes.iter().map(SandboxView::from).collect(),
            operations: s
                .operations
                .iter()
                .map(|o| OperationRow {
                    id: o.id.clone(),
                    kind: o.kind.clone(),
                    member: o.member.clone(),
                    phase: o.phase.clone(),
                })
                .collect(),
        }
    }
}

/// `launch` invoke (and `fail`/`info`) value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    /// Sandbox id (unique).
    pub sandbox: String,
    /// Launch id (unique).
    pub launch_id: String,
    /// `fail` only: refused for capacity (`RESOURCE_EXHAUSTED`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<bool>,
}

/// The sandbox an invoke names (`launch`, `delete`, `get`): the one field
/// the checkers read from those invokes, required; the others are the
/// workload's business.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct SandboxOf {
    /// Sandbox id.
    pub sandbox: String,
}

/// `delete` and `get` invoke value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxRef {
    /// Sandbox id.
    pub sandbox: String,
}

/// `drain` and `cancel` value (invoke; `ok` adds the operation's `phase`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Drain {
    /// Operation id.
    pub op: String,
    /// The drained member.
    pub member: String,
    /// `ok` only: the operation's phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

/// `join` value (scripted members).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Join {
    /// Member id.
    pub member: String,
    /// The incarnation it last held (0 asks the pool for a new one).
    pub known_incarnation: u64,
    /// Its process id (identity only; new per start).
    pub process_id: u64,
    /// Slots.
    pub capacity: u32,
    /// `ok` only: the incarnation the pool assigned (log-ordered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<u64>,
    /// `ok` only: the accepting gateway.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway_node_id: Option<u64>,
}

/// `grant` value: an assignment streamed to a scripted member.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// Sandbox id.
    pub sandbox: String,
    /// Generation.
    pub generation: u64,
    /// Ownership term.
    pub term: u64,
    /// Credential epoch (`epoch` in histories written before the rename).
    #[serde(alias = "epoch")]
    pub credential_epoch: u64,
    /// Term acknowledged.
    pub acknowledged: bool,
    /// Phase.
    pub phase: String,
    /// The member streamed it.
    pub member: String,
    /// Its incarnation.
    pub incarnation: u64,
    /// Raft log position of the snapshot.
    pub log_index: u64,
    /// Size of the signed grant.
    pub grant_bytes: usize,
}

/// `ack` value: a scripted member's `TermAck`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ack {
    /// Sandbox id.
    pub sandbox: String,
    /// Generation.
    pub generation: u64,
    /// Term acknowledged.
    pub term: u64,
    /// Credential epoch (`epoch` in histories written before the rename).
    #[serde(alias = "epoch")]
    pub credential_epoch: u64,
    /// The member.
    pub member: String,
    /// Its incarnation.
    pub incarnation: u64,
    /// `ok` only: log position of the snapshot showing the term acknowledged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_index: Option<u64>,
}

/// `report` value: a scripted member's `SandboxReport`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// Sandbox id.
    pub sandbox: String,
    /// Generation.
    pub generation: u64,
    /// Term reported under.
    pub term: u64,
    /// The member.
    pub member: String,
    /// Its incarnation.
    pub incarnation: u64,
    /// `r:<member>:<incarnation>:<term>:<seq>`.
    pub status: String,
}

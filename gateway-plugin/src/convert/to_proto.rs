//! Pool and raft-store types -> proto messages: the supervisor stream's
//! `HelloAccepted` and `AssignmentSnapshot` (with the grant of each
//! assignment), the typed `AttachRefusal`, the operator views of
//! `openshell.pool_admin.v1`, and the cluster replies of
//! `openshell.cluster.v1` and the object store's list page. Every wire value of a pool enum (sandbox
//! phase, member state, operation kind and phase) is chosen here and nowhere else.

use std::collections::BTreeMap;

use pool::visibility::{GrantClaims, Push, Retirement, SandboxView};
use pool::{MemberState, ObservedStatus, OperationKind, OperationPhase, Phase, PoolState, Reason};
use proto::cluster::{
    BackupReply, ClusterStatus as PbStatus, MembershipReply, Node, NodeStatus as PbNode,
    StateDigestReply, TransferLeaderReply,
};
use proto::objects::ListResponse;
use proto::pool_admin::{PoolMember, Sandbox, SupervisorPoolOperation, SupervisorPoolStatus};
use proto::pool_types::{MemberState as PbMemberState, SandboxPhase};
use proto::sandbox_runtime::Grant;
use proto::supervisor_host::{
    gateway_message, AssignmentSnapshot, AttachRefusal, GatewayMessage, HelloAccepted,
    RuntimeEndpoint, SandboxInstanceAssignment,
};
use raft_store::node::MembershipChange;

use crate::config_pool::PoolSettings;

/// The wire enum of a sandbox phase (its lowercase name is
/// [`proto::pool_types::SandboxPhase::name`]).
pub fn sandbox_phase(phase: Phase) -> SandboxPhase {
    match phase {
        Phase::Admitting => SandboxPhase::Admitting,
        Phase::Assigned => SandboxPhase::Assigned,
        Phase::Recovering => SandboxPhase::Recovering,
        Phase::Stopping => SandboxPhase::Stopping,
        Phase::Deleted => SandboxPhase::Deleted,
        Phase::Failed => SandboxPhase::Failed,
    }
}

/// The wire enum of a member state (its lowercase name is
/// [`proto::pool_types::MemberState::name`]).
///
/// The numbers are [`MemberState::tag`]'s (the pool's one definition); the
/// proto enum spells the same numbers, checked by a unit test below.
pub fn member_state(state: MemberState) -> PbMemberState {
    PbMemberState::try_from(state.tag()).unwrap_or(PbMemberState::Unspecified)
}

/// The wire name of an operation phase.
pub fn operation_phase_name(phase: OperationPhase) -> &'static str {
    match phase {
        OperationPhase::Queued => "queued",
        OperationPhase::Running => "running",
        OperationPhase::Succeeded => "succeeded",
        OperationPhase::Failed => "failed",
        OperationPhase::Cancelled => "cancelled",
    }
}

/// The stream's first gateway message: the accepted hello with the
/// incarnation the pool assigned, the timing the supervisor follows and the
/// key grants are signed with.
pub fn hello_accepted(
    node_id: u64,
    settings: &PoolSettings,
    cluster_public_key: String,
    incarnation: u64,
) -> GatewayMessage {
    GatewayMessage {
        message: Some(gateway_message::Message::Accepted(HelloAccepted {
            incarnation,
            gateway_node_id: node_id,
            status_interval_ms: u64::try_from(settings.status_interval.as_millis()).unwrap_or(250),
            cluster_public_key,
            recovery_deadline_ms: u64::try_from(
                settings.tick_interval.as_millis() * u128::from(settings.recovery_deadline_ticks),
            )
            .unwrap_or(u64::MAX),
        })),
    }
}

/// The wire form of a generation's recorded runtime endpoint.
pub fn runtime_endpoint(r: &pool::Runtime) -> RuntimeEndpoint {
    RuntimeEndpoint {
        name: r.name.clone(),
        address: r.address.clone(),
        ca_pem: r.ca_pem.clone(),
    }
}

/// A sandbox as its owner sees it in a snapshot, without its grant (with
/// its runtime endpoint once recorded, live or released).
pub fn assignment(s: &SandboxView) -> SandboxInstanceAssignment {
    SandboxInstanceAssignment {
        sandbox_id: s.sandbox.clone(),
        generation: s.generation,
        term: s.term,
        credential_epoch: s.credential_epoch,
        acknowledged: s.acknowledged,
        phase: sandbox_phase(s.phase).into(),
        material_ref: s.material_ref.clone(),
        grant: Vec::new(),
        runtime: s.runtime.as_ref().map(runtime_endpoint),
    }
}

/// The grant message of one pushed sandbox (signed by the caller).
pub fn grant(c: &GrantClaims) -> Grant {
    Grant {
        sandbox_id: c.sandbox.clone(),
        generation: c.generation,
        member_id: c.member.clone(),
        incarnation: c.incarnation,
        term: c.term,
        credential_epoch: c.credential_epoch,
        log_index: c.log_index,
        release: c.release,
    }
}

/// The `AssignmentSnapshot` of `push`, each assignment carrying the grant
/// `sign` makes of its claims (which name the push's incarnation).
pub fn snapshot(push: &Push, sign: impl Fn(&GrantClaims) -> Vec<u8>) -> GatewayMessage {
    let signed = |views: &BTreeMap<String, SandboxView>, release: bool| {
        views
            .values()
            .map(|view| SandboxInstanceAssignment {
                grant: sign(&push.claims(view, release)),
                ..assignment(view)
            })
            .collect()
    };
    GatewayMessage {
        message: Some(gateway_message::Message::Snapshot(AssignmentSnapshot {
            log_index: push.index,
            assignments: signed(&push.view.assignments, false),
            draining: push.view.draining,
            released: signed(&push.view.released, true),
        })),
    }
}

/// The typed refusal and message of a stream closed because its
/// incarnation no longer counts.
pub fn retirement(why: Retirement) -> (AttachRefusal, &'static str) {
    match why {
        Retirement::Superseded => (
            AttachRefusal::IncarnationSuperseded,
            "superseded by a newer incarnation of this member",
        ),
        Retirement::Retired => (
            AttachRefusal::IncarnationRetired,
            "incarnation retired (expired or left): re-join as a new incarnation",
        ),
    }
}

/// The [`AttachRefusal`] a rejected join carries, when the cause is the
/// incarnation (the supervisor renews a retired one, never a superseded one).
pub fn incarnation_refusal(reason: &Reason) -> Option<AttachRefusal> {
    match reason {
        Reason::IncarnationRetired => Some(AttachRefusal::IncarnationRetired),
        Reason::StaleIncarnation { .. } => Some(AttachRefusal::IncarnationSuperseded),
        _ => None,
    }
}

/// The operator view of one sandbox.
pub fn sandbox(state: &PoolState, s: &pool::Sandbox) -> Sandbox {
    let observed = match state.observed_status(&s.id) {
        Some(ObservedStatus::Pending) | None => "pending".to_string(),
        Some(ObservedStatus::Reported { status, .. }) => status,
        Some(ObservedStatus::Deleted) => "deleted".to_string(),
        Some(ObservedStatus::Failed(reason)) => format!("failed: {reason}"),
    };
    // Supervisors report the runtime's view as JSON; pid and start time are
    // shown when the report carries them.
    let report: Option<serde_json::Value> = serde_json::from_str(&observed).ok();
    let field = |name: &str| {
        report
            .as_ref()
            .and_then(|r| r.get(name))
            .and_then(|v| v.as_u64())
            .unwrap_or(0)
    };
    Sandbox {
        pid: u32::try_from(field("pid")).unwrap_or(0),
        started_at_unix_ms: field("started_at_unix_ms"),
        id: s.id.clone(),
        generation: s.generation,
        phase: sandbox_phase(s.phase).into(),
        owner: s.owner.member.clone(),
        owner_incarnation: s.owner.incarnation,
        term: s.owner.term,
        credential_epoch: s.owner.credential_epoch,
        acknowledged: s.owner.acknowledged,
        observed_status: observed,
        last_report_index: s.last_report.as_ref().map(|r| r.index).unwrap_or(0),
        failure: s.failure.clone().unwrap_or_default(),
        launch_id: s.launch_id.clone(),
        runtime_name: s
            .runtime
            .as_ref()
            .map(|r| r.name.clone())
            .unwrap_or_default(),
        runtime_address: s
            .runtime
            .as_ref()
            .map(|r| r.address.clone())
            .unwrap_or_default(),
    }
}

/// The operator view of one operation.
pub fn operation(o: &pool::Operation) -> SupervisorPoolOperation {
    let (kind, member) = match &o.kind {
        OperationKind::DrainMember { member } => ("drain", member.clone()),
        OperationKind::RebalancePool => ("rebalance", String::new()),
    };
    SupervisorPoolOperation {
        id: o.id.clone(),
        kind: kind.to_string(),
        member,
        phase: operation_phase_name(o.phase).to_string(),
        message: o.message.clone(),
        attempts: o.attempts,
        moves_planned: o.moves_planned,
        moves_done: o.moves_done,
        max_parallel: o.max_parallel,
        deadline_tick: o.deadline_tick.unwrap_or(0),
    }
}

/// The whole operator status view at `applied_index`.
pub fn pool_status(state: &PoolState, applied_index: u64) -> SupervisorPoolStatus {
    let status = state.status();
    SupervisorPoolStatus {
        members: status.members.iter().map(pool_member).collect(),
        sandboxes: state
            .sandboxes()
            .values()
            .map(|s| sandbox(state, s))
            .collect(),
        operations: status.operations.iter().map(operation).collect(),
        ..pool_status_header(state, applied_index)
    }
}

/// The pool status without its records: tick, applied index, settings and
/// the whole counts (a page fills in members, operations and sandboxes).
pub fn pool_status_header(state: &PoolState, applied_index: u64) -> SupervisorPoolStatus {
    let config = state.config();
    SupervisorPoolStatus {
        now_tick: state.now_tick(),
        applied_index,
        heartbeat_ttl_ticks: config.heartbeat_ttl_ticks,
        recovery_deadline_ticks: config.recovery_deadline_ticks,
        member_count: state.members().len() as u64,
        operation_count: state.operations().len() as u64,
        sandbox_count: state.sandboxes().len() as u64,
        ..SupervisorPoolStatus::default()
    }
}

/// A member's operator view.
pub fn pool_member(v: &pool::MemberView) -> PoolMember {
    PoolMember {
        id: v.member.id.clone(),
        uid: v.member.uid.clone(),
        incarnation: v.member.incarnation,
        address: v.member.address.clone(),
        state: member_state(v.member.state).into(),
        capacity: v.member.capacity,
        used: v.member.charged,
        ticks_since_heartbeat: v.ticks_since_heartbeat,
        eligible: v.eligible,
    }
}

fn nodes(list: Vec<(u64, String)>) -> Vec<Node> {
    list.into_iter()
        .map(|(id, addr)| Node { id, addr })
        .collect()
}

/// The reply of a membership change.
pub fn membership_reply(change: MembershipChange) -> MembershipReply {
    MembershipReply {
        log_index: change.log_index,
        voters: nodes(change.voters),
        learners: nodes(change.learners),
        learner_matched: change.learner_matched,
        leader_last_index: change.leader_last_index,
    }
}

/// The cluster status reply.
pub fn cluster_status(s: raft_store::ClusterStatus, data_size_bytes: u64) -> PbStatus {
    let (leader_id, leader_addr) = s.leader.unwrap_or((0, String::new()));
    PbStatus {
        node_id: s.node_id,
        leader_id,
        leader_addr,
        term: s.term,
        commit_index: s.commit_index,
        applied_index: s.applied_index,
        last_log_index: s.last_log_index,
        snapshot_index: s.snapshot_index,
        purged_index: s.purged_index,
        nodes: s
            .nodes
            .into_iter()
            .map(|n| PbNode {
                id: n.id,
                addr: n.addr,
                voter: n.voter,
                matched_index: n.matched_index.unwrap_or(0),
                lag: n.lag.unwrap_or(0),
                progress_known: n.matched_index.is_some(),
                last_ack_ms: n.last_ack_ms,
            })
            .collect(),
        state: s.state,
        cluster_id: s.cluster_id,
        unfinished_change_to_voters: s.unfinished_change.unwrap_or_default(),
        version: crate::VERSION.to_string(),
        data_size_bytes,
        errors: s.errors,
    }
}

/// The reply of a leadership transfer: (new leader, raft term).
pub fn transfer_leader_reply((leader_id, term): (u64, u64)) -> TransferLeaderReply {
    TransferLeaderReply { leader_id, term }
}

/// The reply of a backup taken by `node_id` of `cluster_id`: (raft term,
/// log index, state bytes).
pub fn backup_reply(
    cluster_id: &str,
    node_id: u64,
    (term, index, state): (u64, u64, Vec<u8>),
) -> BackupReply {
    BackupReply {
        cluster_id: cluster_id.to_string(),
        term,
        index,
        state,
        taken_by_node: node_id,
    }
}

/// The reply of a state digest of `node_id`: (applied index, crc32, bytes).
pub fn state_digest_reply(node_id: u64, digest: raft_store::digest::Digest) -> StateDigestReply {
    StateDigestReply {
        node_id,
        applied_index: digest.applied_index,
        crc32: digest.crc32,
        bytes: digest.bytes,
    }
}

/// One page of an object-store list, read at `read_index`.
pub fn list_response(page: raft_store::objects::Page, read_index: u64) -> ListResponse {
    ListResponse {
        objects: page.objects,
        next_page_token: page.next_page_token.unwrap_or_default(),
        read_index,
    }
}

#[cfg(test)]
mod tests {
    use pool::visibility::{IncarnationView, Push, SandboxView};
    use pool::{Command, Delete, Join, Launch, PoolState, RecordRuntime};
    use proto::supervisor_host::gateway_message;

    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    /// The API's enum spells the pool's member states with the same
    /// numbers and names: no state maps to UNSPECIFIED or another state.
    #[test]
    fn every_member_state_keeps_its_number_and_name_on_the_api() {
        for state in MemberState::ALL {
            let pb = member_state(state);
            assert_eq!(pb as i32, state.tag(), "{state:?}");
            assert_eq!(
                pb.name(),
                format!("{state:?}").to_lowercase(),
                "{state:?} is {pb:?} on the API"
            );
        }
        assert_eq!(MemberState::from_tag(0), None, "0 is never a state");
    }

    /// One member `m` owning `sb` generation 1; with its runtime recorded
    /// when `runtime`.
    fn state(runtime: bool) -> PoolState {
        let mut st = PoolState::new();
        let mut index = 0;
        let mut apply = |st: &mut PoolState, c: Command| {
            index += 1;
            assert!(!st.apply(index, &c).is_rejected(), "{}", c.name());
        };
        apply(
            &mut st,
            Command::Join(Join {
                member: "m".into(),
                uid: "u".into(),
                address: "10.0.0.1:7000".into(),
                capacity: 2,
                process_id: 7,
                ..Join::default()
            }),
        );
        apply(
            &mut st,
            Command::Launch(Launch {
                launch_id: "l".into(),
                sandbox: "sb".into(),
                material_ref: "demo".into(),
            }),
        );
        if runtime {
            apply(
                &mut st,
                Command::RecordRuntime(RecordRuntime {
                    raft_term: 0,
                    sandbox: "sb".into(),
                    generation: 1,
                    name: "sb-g1".into(),
                    address: "10.1.0.5:7400".into(),
                    ca_pem: CA.into(),
                    driver_scope: "process:0123456789abcdef0123456789abcdef".into(),
                }),
            );
        }
        st
    }

    fn push_of(st: &PoolState) -> Push {
        let s = st.sandbox("sb").expect("sb");
        let mut view = IncarnationView::default();
        let target = if s.phase.is_charged() {
            &mut view.assignments
        } else {
            &mut view.released
        };
        target.insert("sb".into(), SandboxView::of(s));
        Push {
            member: "m".into(),
            incarnation: s.owner.incarnation,
            index: 9,
            view,
        }
    }

    fn snapshot_of(push: &Push) -> proto::supervisor_host::AssignmentSnapshot {
        match snapshot(push, |_| vec![1]).message {
            Some(gateway_message::Message::Snapshot(s)) => s,
            other => panic!("not a snapshot: {other:?}"),
        }
    }

    fn expected() -> RuntimeEndpoint {
        RuntimeEndpoint {
            name: "sb-g1".into(),
            address: "10.1.0.5:7400".into(),
            ca_pem: CA.into(),
        }
    }

    #[test]
    fn assignment_carries_the_recorded_runtime_and_none_before() {
        let with = snapshot_of(&push_of(&state(true)));
        assert_eq!(with.assignments.len(), 1);
        assert_eq!(with.assignments[0].runtime, Some(expected()));
        assert_eq!(with.assignments[0].grant, vec![1]);
        let without = snapshot_of(&push_of(&state(false)));
        assert_eq!(without.assignments[0].runtime, None);
    }

    #[test]
    fn released_entry_keeps_the_runtime() {
        let mut st = state(true);
        let c = Command::Delete(Delete {
            raft_term: 0,
            sandbox: "sb".into(),
            generation: 1,
        });
        assert!(!st.apply(10, &c).is_rejected());
        let snap = snapshot_of(&push_of(&st));
        assert!(snap.assignments.is_empty());
        assert_eq!(snap.released.len(), 1);
        assert_eq!(snap.released[0].runtime, Some(expected()));
    }

    #[test]
    fn pool_status_shows_the_runtime_name_and_address() {
        let st = state(true);
        let status = pool_status(&st, 3);
        assert_eq!(status.sandboxes[0].runtime_name, "sb-g1");
        assert_eq!(status.sandboxes[0].runtime_address, "10.1.0.5:7400");
        let st = state(false);
        let s = sandbox(&st, st.sandbox("sb").expect("sb"));
        assert_eq!(
            (s.runtime_name.as_str(), s.runtime_address.as_str()),
            ("", "")
        );
    }

    #[test]
    fn launch_failure_reason_shows_as_the_failure() {
        let mut st = state(true);
        let c = Command::FailLaunch(pool::FailLaunch {
            raft_term: 0,
            sandbox: "sb".into(),
            generation: 1,
            reason: "RuntimeLost: sb-g1 is gone".into(),
        });
        assert!(!st.apply(10, &c).is_rejected());
        let s = sandbox(&st, st.sandbox("sb").expect("sb"));
        assert_eq!(s.failure, "RuntimeLost: sb-g1 is gone");
        assert_eq!(s.observed_status, "failed: RuntimeLost: sb-g1 is gone");
        assert_eq!(s.runtime_address, "10.1.0.5:7400");
    }
}

//! Proto requests -> pool commands and raft-store arguments: a supervisor's
//! `HostHello`, `TermAck` and `SandboxReport` (proposed with the stream's
//! member incarnation, so apply fences stale ones), and the operator
//! requests of `openshell.pool_admin.v1` and `openshell.cluster.v1`.
//! Missing required fields are `INVALID_ARGUMENT`.

use pool::Command;
use proto::cluster::InitializeRequest;
use proto::pool_admin::{
    start_supervisor_pool_operation_request, CreateSandboxRequest,
    StartSupervisorPoolOperationRequest,
};
use proto::supervisor_host::{supervisor_message, ExecResult, HostHello};
use tonic::Status;

/// The join a hello asks for.
pub fn join(hello: &HostHello) -> pool::Join {
    pool::Join {
        member: hello.member_id.clone(),
        uid: hello.member_uid.clone(),
        incarnation: hello.incarnation,
        address: hello.advertise_address.clone(),
        capacity: hello.capacity,
        process_id: hello.process_id,
        known_incarnation: hello.known_incarnation,
    }
}

/// What one message on an attached supervisor stream asks for.
pub enum StreamInput {
    /// `HostStatus`: the member is alive (batched into the tick's heartbeat);
    /// `stopping`: it asks to be drained ([`crate::hub::leave`]).
    Status {
        /// `HostStatus.stopping`.
        stopping: bool,
    },
    /// `HostLeave`: the member's incarnation leaves the pool.
    Leave,
    /// A command to propose, on behalf of the stream's incarnation.
    Propose(Command),
    /// The answer (or a piece of it) to an exec sent on the stream.
    ExecResult(ExecResult),
    /// Not expected once attached (a second hello, or an empty message).
    Unexpected,
    /// Over a size limit: not proposed; the text names the field and the
    /// limit. The stream stays open (the supervisor's next report counts).
    Refused(String),
}

/// Longest `SandboxReport.status`, in bytes. A status is a short word
/// ("running", "exited: 0"); it is kept in the sandbox record, so it is
/// bounded before it is proposed.
pub const MAX_REPORT_STATUS_BYTES: usize = 1024;

/// The input of `message`, received on the stream of `member`'s
/// `incarnation`.
pub fn stream_input(
    message: Option<supervisor_message::Message>,
    member: &str,
    incarnation: u64,
) -> StreamInput {
    match message {
        Some(supervisor_message::Message::Status(status)) => StreamInput::Status {
            stopping: status.stopping,
        },
        Some(supervisor_message::Message::Leave(_)) => StreamInput::Leave,
        Some(supervisor_message::Message::Ack(ack)) => {
            StreamInput::Propose(Command::Acknowledge(pool::Acknowledge {
                sandbox: ack.sandbox_id,
                generation: ack.generation,
                member: member.to_string(),
                incarnation,
                term: ack.term,
            }))
        }
        Some(supervisor_message::Message::Report(report))
            if report.status.len() > MAX_REPORT_STATUS_BYTES =>
        {
            StreamInput::Refused(format!(
                "SandboxReport.status for sandbox {:?} is {} bytes, over the limit of {MAX_REPORT_STATUS_BYTES}: the report was dropped",
                report.sandbox_id.chars().take(128).collect::<String>(),
                report.status.len()
            ))
        }
        Some(supervisor_message::Message::Report(report)) => {
            StreamInput::Propose(Command::Report(pool::Report {
                sandbox: report.sandbox_id,
                generation: report.generation,
                member: member.to_string(),
                incarnation,
                term: report.term,
                status: report.status,
            }))
        }
        Some(supervisor_message::Message::ExecResult(result)) => StreamInput::ExecResult(result),
        Some(supervisor_message::Message::Hello(_)) | None => StreamInput::Unexpected,
    }
}

/// The command of a start-operation request and the operation's id
/// (`fresh_id` when the request names none).
///
/// # Errors
/// `INVALID_ARGUMENT` when the request names no kind, or an operation id
/// or member that is not an identifier ([`pool::ids`]: an operation id is
/// kept in the pool state and shown in `pool status`).
pub fn start_operation(
    request: StartSupervisorPoolOperationRequest,
    fresh_id: impl FnOnce() -> String,
) -> Result<(String, Command), Status> {
    let id = if request.operation_id.is_empty() {
        fresh_id()
    } else {
        crate::status::check_id("operation_id", &request.operation_id)?;
        request.operation_id
    };
    let max_parallel = if request.max_parallel == 0 {
        1
    } else {
        request.max_parallel
    };
    let command = match request.kind {
        Some(start_supervisor_pool_operation_request::Kind::DrainMember(member)) => {
            crate::status::check_id("drain_member", &member)?;
            Command::StartDrain(pool::StartDrain {
                operation_id: id.clone(),
                member,
                max_parallel,
            })
        }
        Some(start_supervisor_pool_operation_request::Kind::Rebalance(_)) => {
            Command::StartRebalance(pool::StartRebalance {
                operation_id: id.clone(),
                max_parallel,
            })
        }
        None => {
            return Err(Status::invalid_argument(
                "kind is required: drain_member or rebalance",
            ))
        }
    };
    Ok((id, command))
}

/// The launch a create-sandbox request asks for (`fresh_id` names the
/// sandbox when the request does not; the launch id defaults to it).
pub fn launch(request: CreateSandboxRequest, fresh_id: impl FnOnce() -> String) -> pool::Launch {
    let sandbox = if request.sandbox_id.is_empty() {
        fresh_id()
    } else {
        request.sandbox_id
    };
    let launch_id = if request.launch_id.is_empty() {
        sandbox.clone()
    } else {
        request.launch_id
    };
    pool::Launch {
        launch_id,
        sandbox,
        material_ref: request.material_ref,
    }
}

/// The initial voters of an initialize request, (node id, address).
pub fn initial_voters(request: &InitializeRequest) -> Vec<(u64, String)> {
    request
        .voters
        .iter()
        .map(|m| (m.id, m.addr.clone()))
        .collect()
}

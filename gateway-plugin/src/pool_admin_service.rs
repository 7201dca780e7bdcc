//! `openshell.pool_admin.v1.PoolAdmin`: the operator surface of the
//! supervisor pool (status, drain and rebalance operations, sandboxes).
//!
//! Who may call it: operators and the gateway's own sandbox API. Any gateway
//! serves every call; writes are forwarded to the leader, reads are
//! linearizable (read-index) unless `stale` is set. A command the pool
//! rejects maps to a status naming the reason; nothing changed.

use std::sync::Arc;

use pool::{Command, ObservedStatus, OperationKind, OperationPhase, Outcome, PoolState, Reason};
use proto::pool_admin::pool_admin_server::PoolAdmin;
use proto::pool_admin::{
    start_supervisor_pool_operation_request, CancelSupervisorPoolOperationRequest,
    CreateSandboxRequest, DeleteSandboxRequest, ExecSandboxRequest, ExecSandboxResponse,
    GetSandboxRequest, GetSupervisorPoolStatusRequest, ListSandboxesRequest, ListSandboxesResponse,
    PoolMember, Sandbox, StartSupervisorPoolOperationRequest, SupervisorPoolOperation,
    SupervisorPoolStatus,
};
use proto::supervisor_host::supervisor_control_client::SupervisorControlClient;
use proto::supervisor_host::SupervisorExecRequest;
use tonic::{Request, Response, Status};

use crate::auth::{Auth, Role};
use crate::hub::{phase_name, Hub};
use crate::state::GatewayState;

/// The pool admin service of one gateway.
pub struct PoolAdminService {
    hub: Arc<Hub>,
    auth: Auth,
}

impl PoolAdminService {
    /// The service over `hub`, checking callers with `auth`.
    pub fn new(hub: Arc<Hub>, auth: Auth) -> Self {
        PoolAdminService { hub, auth }
    }

    fn allow<T>(&self, request: &Request<T>, role: Role) -> Result<(), Status> {
        self.auth
            .require(request.metadata(), role, "pool_admin", self.hub.metrics())
    }

    async fn read<T>(
        &self,
        stale: bool,
        f: impl FnOnce(&GatewayState, u64) -> T,
    ) -> Result<T, Status> {
        if stale {
            Ok(self.hub.node().read_local(f))
        } else {
            self.hub.node().read(f).await.map_err(crate::status::read)
        }
    }

    async fn apply(&self, command: Command) -> Result<pool::Effect, Status> {
        match self.hub.propose(&command).await? {
            Outcome::Applied(effect) => Ok(effect),
            Outcome::Rejected(reason) => Err(rejection(&reason)),
        }
    }
}

/// Maps a pool rejection to a status.
pub fn rejection(reason: &Reason) -> Status {
    let text = reason.to_string();
    match reason {
        Reason::UnknownMember(_) | Reason::UnknownSandbox(_) | Reason::UnknownOperation(_) => {
            Status::not_found(text)
        }
        Reason::EmptyId
        | Reason::ZeroCapacity
        | Reason::InvalidMaxParallel(_)
        | Reason::InvalidConfig(_)
        | Reason::InvalidTarget(_) => Status::invalid_argument(text),
        Reason::CapacityExhausted | Reason::NoEligibleMember | Reason::LaunchRefused(_) => {
            Status::resource_exhausted(text)
        }
        Reason::SandboxExists(_) | Reason::OperationExists(_) => Status::already_exists(text),
        _ => Status::failed_precondition(text),
    }
}

fn member_state(state: pool::MemberState) -> &'static str {
    match state {
        pool::MemberState::Active => "active",
        pool::MemberState::Draining => "draining",
        pool::MemberState::Leaving => "leaving",
        pool::MemberState::Expired => "expired",
    }
}

/// The operator view of one sandbox.
pub fn sandbox_view(state: &PoolState, s: &pool::Sandbox) -> Sandbox {
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
        phase: phase_name(s.phase).to_string(),
        owner: s.owner.member.clone(),
        owner_incarnation: s.owner.incarnation,
        term: s.owner.term,
        epoch: s.owner.epoch,
        acknowledged: s.owner.acknowledged,
        observed_status: observed,
        last_report_index: s.last_report.as_ref().map(|r| r.index).unwrap_or(0),
        failure: s.failure.clone().unwrap_or_default(),
        launch_id: s.launch_id.clone(),
    }
}

/// The operator view of one operation.
pub fn operation_view(o: &pool::Operation) -> SupervisorPoolOperation {
    let (kind, member) = match &o.kind {
        OperationKind::DrainMember { member } => ("drain", member.clone()),
        OperationKind::RebalancePool => ("rebalance", String::new()),
    };
    SupervisorPoolOperation {
        id: o.id.clone(),
        kind: kind.to_string(),
        member,
        phase: match o.phase {
            OperationPhase::Queued => "queued",
            OperationPhase::Running => "running",
            OperationPhase::Succeeded => "succeeded",
            OperationPhase::Failed => "failed",
            OperationPhase::Cancelled => "cancelled",
        }
        .to_string(),
        message: o.message.clone(),
        attempts: o.attempts,
        moves_planned: o.moves_planned,
        moves_done: o.moves_done,
        max_parallel: o.max_parallel,
        deadline_tick: o.deadline_tick.unwrap_or(0),
    }
}

/// The whole status view.
pub fn status_view(state: &PoolState, applied_index: u64) -> SupervisorPoolStatus {
    let status = state.status();
    SupervisorPoolStatus {
        now_tick: status.now_tick,
        applied_index,
        members: status
            .members
            .iter()
            .map(|v| PoolMember {
                id: v.member.id.clone(),
                uid: v.member.uid.clone(),
                incarnation: v.member.incarnation,
                address: v.member.address.clone(),
                state: member_state(v.member.state).to_string(),
                capacity: v.member.capacity,
                used: v.member.charged,
                ticks_since_heartbeat: v.ticks_since_heartbeat,
                eligible: v.eligible,
            })
            .collect(),
        sandboxes: state
            .sandboxes()
            .values()
            .map(|s| sandbox_view(state, s))
            .collect(),
        operations: status.operations.iter().map(operation_view).collect(),
        heartbeat_ttl_ticks: status.config.heartbeat_ttl_ticks,
        recovery_deadline_ticks: status.config.recovery_deadline_ticks,
    }
}

/// A fresh id: the gateway's node id and a per-process counter over the
/// process start time (ids, not state: this never enters apply).
fn fresh_id(prefix: &str, node: u64) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    format!(
        "{prefix}-{node}-{start:x}-{}",
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

#[tonic::async_trait]
impl PoolAdmin for PoolAdminService {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn get_supervisor_pool_status(
        &self,
        request: Request<GetSupervisorPoolStatusRequest>,
    ) -> Result<Response<SupervisorPoolStatus>, Status> {
        self.allow(&request, Role::Viewer)?;
        let view = self
            .read(request.get_ref().stale, |s, index| {
                status_view(&s.pool, index)
            })
            .await?;
        Ok(Response::new(view))
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn start_supervisor_pool_operation(
        &self,
        request: Request<StartSupervisorPoolOperationRequest>,
    ) -> Result<Response<SupervisorPoolOperation>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        let request = request.into_inner();
        let id = if request.operation_id.is_empty() {
            fresh_id("op", self.hub.node().id())
        } else {
            request.operation_id.clone()
        };
        let max_parallel = if request.max_parallel == 0 {
            1
        } else {
            request.max_parallel
        };
        let command = match request.kind {
            Some(start_supervisor_pool_operation_request::Kind::DrainMember(member)) => {
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
        self.apply(command).await?;
        let view = self
            .read(false, |s, _| {
                s.pool.operations().get(&id).map(operation_view)
            })
            .await?
            .ok_or_else(|| Status::internal("operation applied but not found"))?;
        Ok(Response::new(view))
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn cancel_supervisor_pool_operation(
        &self,
        request: Request<CancelSupervisorPoolOperationRequest>,
    ) -> Result<Response<SupervisorPoolOperation>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        let id = request.into_inner().operation_id;
        if id.is_empty() {
            return Err(Status::invalid_argument("operation_id is required"));
        }
        self.apply(Command::CancelOperation(pool::CancelOperation {
            operation_id: id.clone(),
        }))
        .await?;
        let view = self
            .read(false, |s, _| {
                s.pool.operations().get(&id).map(operation_view)
            })
            .await?
            .ok_or_else(|| Status::internal("operation cancelled but not found"))?;
        Ok(Response::new(view))
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn create_sandbox(
        &self,
        request: Request<CreateSandboxRequest>,
    ) -> Result<Response<Sandbox>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        let request = request.into_inner();
        let sandbox = if request.sandbox_id.is_empty() {
            fresh_id("sb", self.hub.node().id())
        } else {
            request.sandbox_id.clone()
        };
        let launch_id = if request.launch_id.is_empty() {
            sandbox.clone()
        } else {
            request.launch_id.clone()
        };
        match self
            .apply(Command::Launch(pool::Launch {
                launch_id,
                sandbox: sandbox.clone(),
                material_ref: request.material_ref,
            }))
            .await?
        {
            pool::Effect::LaunchRefused(reason) => return Err(rejection(&reason)),
            pool::Effect::Admitted { .. } => {}
            other => {
                return Err(Status::internal(format!(
                    "unexpected launch effect {other:?}"
                )))
            }
        }
        let view = self
            .read(false, |s, _| {
                s.pool.sandbox(&sandbox).map(|sb| sandbox_view(&s.pool, sb))
            })
            .await?
            .ok_or_else(|| Status::internal("sandbox admitted but not found"))?;
        Ok(Response::new(view))
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn delete_sandbox(
        &self,
        request: Request<DeleteSandboxRequest>,
    ) -> Result<Response<Sandbox>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        let id = request.into_inner().sandbox_id;
        if id.is_empty() {
            return Err(Status::invalid_argument("sandbox_id is required"));
        }
        let generation = self
            .read(false, |s, _| s.pool.sandbox(&id).map(|sb| sb.generation))
            .await?
            .ok_or_else(|| Status::not_found(format!("sandbox {id} does not exist")))?;
        self.apply(Command::Delete(pool::Delete {
            sandbox: id.clone(),
            generation,
        }))
        .await?;
        let view = self
            .read(false, |s, _| {
                s.pool.sandbox(&id).map(|sb| sandbox_view(&s.pool, sb))
            })
            .await?
            .ok_or_else(|| Status::internal("sandbox deleted but not found"))?;
        Ok(Response::new(view))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn get_sandbox(
        &self,
        request: Request<GetSandboxRequest>,
    ) -> Result<Response<Sandbox>, Status> {
        self.allow(&request, Role::Viewer)?;
        let request = request.into_inner();
        if request.sandbox_id.is_empty() {
            return Err(Status::invalid_argument("sandbox_id is required"));
        }
        let id = request.sandbox_id;
        self.read(request.stale, |s, _| {
            s.pool.sandbox(&id).map(|sb| sandbox_view(&s.pool, sb))
        })
        .await?
        .map(Response::new)
        .ok_or_else(|| Status::not_found(format!("sandbox {id} does not exist")))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list_sandboxes(
        &self,
        request: Request<ListSandboxesRequest>,
    ) -> Result<Response<ListSandboxesResponse>, Status> {
        self.allow(&request, Role::Viewer)?;
        let sandboxes = self
            .read(request.get_ref().stale, |s, _| {
                s.pool
                    .sandboxes()
                    .values()
                    .map(|sb| sandbox_view(&s.pool, sb))
                    .collect()
            })
            .await?;
        Ok(Response::new(ListSandboxesResponse { sandboxes }))
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn exec_sandbox(
        &self,
        request: Request<ExecSandboxRequest>,
    ) -> Result<Response<ExecSandboxResponse>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        let request = request.into_inner();
        if request.sandbox_id.is_empty() || request.argv.is_empty() {
            return Err(Status::invalid_argument(
                "sandbox_id and a command are required",
            ));
        }
        let id = request.sandbox_id.clone();
        let owner = self
            .read(false, |s, _| {
                s.pool.sandbox(&id).map(|sb| {
                    let address = s
                        .pool
                        .member(&sb.owner.member)
                        .map(|m| m.address.clone())
                        .unwrap_or_default();
                    (
                        sb.phase,
                        sb.owner.member.clone(),
                        sb.owner.term,
                        sb.owner.acknowledged,
                        address,
                    )
                })
            })
            .await?
            .ok_or_else(|| Status::not_found(format!("sandbox {id} does not exist")))?;
        let (phase, member, term, acknowledged, address) = owner;
        if !acknowledged || !matches!(phase, pool::Phase::Assigned) {
            return Err(Status::failed_precondition(format!(
                "sandbox {id} has no active supervisor (phase {}); retry once it is assigned",
                phase_name(phase)
            )));
        }
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
            .map_err(|e| {
                Status::internal(format!(
                    "member {member} has an invalid address {address:?}: {e}"
                ))
            })?
            .connect_timeout(std::time::Duration::from_secs(2));
        let channel = endpoint.connect().await.map_err(|e| {
            Status::unavailable(format!(
                "supervisor {member} at {address} is unreachable: {e}"
            ))
        })?;
        let mut client = SupervisorControlClient::new(channel);
        let mut call = Request::new(SupervisorExecRequest {
            sandbox_id: id,
            term,
            argv: request.argv,
            timeout_ms: request.timeout_ms,
        });
        if let Some(token) = &self.hub.settings().supervisor_token {
            if let Ok(v) = tonic::metadata::MetadataValue::try_from(format!("Bearer {token}")) {
                call.metadata_mut().insert("authorization", v);
            }
        }
        let reply = client.exec(call).await?.into_inner();
        Ok(Response::new(ExecSandboxResponse {
            exit_code: reply.exit_code,
            stdout: reply.stdout,
            stderr: reply.stderr,
            executed_by: member,
            term,
        }))
    }
}

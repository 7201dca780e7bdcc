//! `openshell.pool_admin.v1.PoolAdmin`: the operator surface of the
//! supervisor pool (status, drain and rebalance operations, sandboxes).
//!
//! Who may call it: operators and the gateway's own sandbox API. Any gateway
//! serves every call; writes are forwarded to the leader, reads are
//! linearizable (read-index) unless `stale` is set. A command the pool
//! rejects maps to a status naming the reason; nothing changed. The status
//! and the sandbox list are paginated (`crate::convert::page`): a page
//! holds at most `page_size` records, and `next_page_token` leads on.

use std::sync::Arc;

use pool::{Command, Outcome};
use proto::gateway::ExecOnStreamRequest;
use proto::pool_admin::pool_admin_server::PoolAdmin;
use proto::pool_admin::{
    CancelSupervisorPoolOperationRequest, CreateSandboxRequest, DeleteSandboxRequest,
    ExecSandboxRequest, ExecSandboxResponse, GetSandboxRequest, GetSupervisorPoolStatusRequest,
    ListSandboxesRequest, ListSandboxesResponse, PoolChange, Sandbox,
    StartSupervisorPoolOperationRequest, SupervisorPoolOperation, SupervisorPoolStatus,
    WatchPoolRequest,
};
use tonic::{Request, Response, Status};

use crate::audit::Record;
use crate::auth::{Auth, Role};
use crate::convert::from_proto;
use crate::convert::page::{self, PageRequest};
use crate::convert::to_proto::{self, sandbox_phase};
use crate::hub::Hub;
use crate::pool_watch::PoolWatchers;
use crate::state::GatewayState;
use crate::status::{self, pool_rejection as rejection};

/// The pool admin service of one gateway.
pub struct PoolAdminService {
    hub: Arc<Hub>,
    auth: Auth,
    watchers: PoolWatchers,
}

impl PoolAdminService {
    /// The service over `hub`, checking callers with `auth`; its watchers
    /// end when `stopping` turns true.
    pub fn new(hub: Arc<Hub>, auth: Auth, stopping: tokio::sync::watch::Receiver<bool>) -> Self {
        PoolAdminService {
            watchers: PoolWatchers::new(hub.node().clone(), stopping, hub.metrics().clone()),
            hub,
            auth,
        }
    }

    fn allow<T>(&self, request: &Request<T>, role: Role) -> Result<(), Status> {
        self.auth
            .require(request, role, "pool_admin", self.hub.metrics())
            .map(drop)
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

    /// Proposes `command` (no client request id); a rejection becomes its
    /// status.
    async fn apply(&self, command: Command) -> Result<pool::Effect, Status> {
        Ok(self.apply_replayed(command, "", &[]).await?.0)
    }

    /// Proposes `command` with the client request id `request_id` (empty:
    /// none) and the `fingerprint` of the request it was made from
    /// ([`crate::requests::fingerprint`]); says whether the outcome is a
    /// replay of an earlier attempt with the same request id.
    async fn apply_replayed(
        &self,
        command: Command,
        request_id: &str,
        fingerprint: &[u8],
    ) -> Result<(pool::Effect, bool), Status> {
        match self
            .hub
            .propose_with_id(&command, request_id, fingerprint)
            .await?
        {
            (Outcome::Applied(effect), replayed) => Ok((effect, replayed)),
            (Outcome::Rejected(reason), _) => Err(rejection(&reason)),
        }
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
        let request = request.into_inner();
        let page = PageRequest::new(request.page_size, &request.page_token)?;
        let view = self
            .read(request.stale, |s, index| {
                page::pool_status(&s.pool, index, &page)
            })
            .await?;
        Ok(Response::new(view))
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn start_supervisor_pool_operation(
        &self,
        request: Request<StartSupervisorPoolOperationRequest>,
    ) -> Result<Response<SupervisorPoolOperation>, Status> {
        use proto::pool_admin::start_supervisor_pool_operation_request::Kind;
        let (action, member) = match &request.get_ref().kind {
            Some(Kind::DrainMember(member)) => ("pool.drain", member.clone()),
            Some(Kind::Rebalance(_)) => ("pool.rebalance", String::new()),
            None => ("pool.operation", String::new()),
        };
        let operation = request.get_ref().operation_id.clone();
        let record = Record::start(
            action,
            &self.auth,
            &request,
            &[
                ("operation_id", operation.as_str()),
                ("member_id", member.as_str()),
            ],
        );
        record.finish(self.start_supervisor_pool_operation_audited(request).await)
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn cancel_supervisor_pool_operation(
        &self,
        request: Request<CancelSupervisorPoolOperationRequest>,
    ) -> Result<Response<SupervisorPoolOperation>, Status> {
        let operation = request.get_ref().operation_id.clone();
        let record = Record::start(
            "pool.cancel_operation",
            &self.auth,
            &request,
            &[("operation_id", operation.as_str())],
        );
        record.finish(self.cancel_supervisor_pool_operation_audited(request).await)
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn create_sandbox(
        &self,
        request: Request<CreateSandboxRequest>,
    ) -> Result<Response<Sandbox>, Status> {
        let asked = request.get_ref().sandbox_id.clone();
        let mut record = Record::start(
            "sandbox.create",
            &self.auth,
            &request,
            &[("sandbox_id", asked.as_str())],
        );
        let result = self.create_sandbox_audited(request).await;
        if let Ok(sandbox) = &result {
            record.name("sandbox_id", &sandbox.get_ref().id);
        }
        record.finish(result)
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn delete_sandbox(
        &self,
        request: Request<DeleteSandboxRequest>,
    ) -> Result<Response<Sandbox>, Status> {
        let id = request.get_ref().sandbox_id.clone();
        let record = Record::start(
            "sandbox.delete",
            &self.auth,
            &request,
            &[("sandbox_id", id.as_str())],
        );
        record.finish(self.delete_sandbox_audited(request).await)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn get_sandbox(
        &self,
        request: Request<GetSandboxRequest>,
    ) -> Result<Response<Sandbox>, Status> {
        self.allow(&request, Role::Viewer)?;
        let request = request.into_inner();
        status::check_id("sandbox_id", &request.sandbox_id)?;
        let id = request.sandbox_id;
        self.read(request.stale, |s, _| {
            s.pool.sandbox(&id).map(|sb| to_proto::sandbox(&s.pool, sb))
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
        let request = request.into_inner();
        let page = PageRequest::new(request.page_size, &request.page_token)?;
        let view = self
            .read(request.stale, |s, _| page::sandboxes(&s.pool, &page))
            .await?;
        Ok(Response::new(view))
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn exec_sandbox(
        &self,
        request: Request<ExecSandboxRequest>,
    ) -> Result<Response<ExecSandboxResponse>, Status> {
        let id = request.get_ref().sandbox_id.clone();
        let mut record =
            Record::start("sandbox.exec", &self.auth, &request, &[("sandbox_id", &id)]);
        record.check(self.allow(&request, Role::PlatformAdmin))?;
        let carried = self.auth.carried(&request);
        let request = request.into_inner();
        status::check_id("sandbox_id", &request.sandbox_id)?;
        if request.argv.is_empty() {
            return Err(Status::invalid_argument("a command is required"));
        }
        proto::exec::check_timeout_ms(request.timeout_ms).map_err(Status::invalid_argument)?;
        let id = request.sandbox_id.clone();
        let owner = self
            .read(false, |s, _| {
                s.pool.sandbox(&id).map(|sb| {
                    (
                        sb.phase,
                        sb.owner.member.clone(),
                        sb.owner.term,
                        sb.owner.acknowledged,
                    )
                })
            })
            .await?
            .ok_or_else(|| Status::not_found(format!("sandbox {id} does not exist")))?;
        let (phase, member, term, acknowledged) = owner;
        if !acknowledged || !matches!(phase, pool::Phase::Assigned) {
            return Err(Status::failed_precondition(format!(
                "sandbox {id} has no active supervisor (phase {}); retry once it is assigned",
                sandbox_phase(phase).name()
            )));
        }
        // Gateways never dial supervisors: the exec travels on the owner's
        // own stream, here or through the gateway that holds it.
        let here = self
            .hub
            .exec_on_stream(&member, &id, term, request.argv.clone(), request.timeout_ms)
            .await;
        let outcome = match here {
            Some(outcome) => outcome?,
            None => {
                let relayed = ExecOnStreamRequest {
                    member_id: member.clone(),
                    sandbox_id: id,
                    term,
                    argv: request.argv,
                    timeout_ms: request.timeout_ms,
                };
                crate::peer_relay_service::relay_exec(&self.hub, carried, &member, relayed).await?
            }
        };
        record.ok();
        Ok(Response::new(ExecSandboxResponse {
            exit_code: outcome.exit_code,
            stdout: outcome.stdout,
            stderr: outcome.stderr,
            executed_by: member,
            term,
            stdout_truncated: outcome.stdout_truncated,
            stderr_truncated: outcome.stderr_truncated,
        }))
    }

    type WatchPoolStream = tokio_stream::wrappers::ReceiverStream<Result<PoolChange, Status>>;

    /// See [`crate::pool_watch`].
    #[tracing::instrument(level = "debug", skip_all)]
    async fn watch_pool(
        &self,
        request: Request<WatchPoolRequest>,
    ) -> Result<Response<Self::WatchPoolStream>, Status> {
        self.allow(&request, Role::Viewer)?;
        let rx = self.watchers.start(request.into_inner()).await?;
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            rx,
        )))
    }
}

impl PoolAdminService {
    /// `start_supervisor_pool_operation` without its audit record.
    async fn start_supervisor_pool_operation_audited(
        &self,
        request: Request<StartSupervisorPoolOperationRequest>,
    ) -> Result<Response<SupervisorPoolOperation>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        let node = self.hub.node().id();
        let request = request.into_inner();
        crate::requests::check_request_id(&request.request_id).map_err(Status::invalid_argument)?;
        let request_id = request.request_id.clone();
        let fingerprint = crate::requests::fingerprint_of(
            "pool_admin.StartSupervisorPoolOperation",
            &request,
            |r| r.request_id.clear(),
        );
        // Every retry of one request names the same operation.
        let (id, command) = from_proto::start_operation(request, || {
            if request_id.is_empty() {
                fresh_id("op", node)
            } else {
                crate::requests::derived_id("op", &request_id)
            }
        })?;
        let (_, replayed) = self
            .apply_replayed(command, &request_id, &fingerprint)
            .await?;
        let view = self
            .read(false, |s, _| {
                s.pool.operations().get(&id).map(to_proto::operation)
            })
            .await?
            .ok_or_else(|| Status::internal("operation applied but not found"))?;
        Ok(replied(view, replayed))
    }

    /// `cancel_supervisor_pool_operation` without its audit record.
    async fn cancel_supervisor_pool_operation_audited(
        &self,
        request: Request<CancelSupervisorPoolOperationRequest>,
    ) -> Result<Response<SupervisorPoolOperation>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        let id = request.into_inner().operation_id;
        if id.is_empty() {
            return Err(Status::invalid_argument("operation_id is required"));
        }
        // Printable and within the proposal bound, not the identifier rule:
        // an operation an older version admitted under a longer id stays
        // cancellable (new ones are identifiers: `from_proto::start_operation`).
        proto::text::check_printable("operation_id", &id, pool::validate::MAX_SHORT_LEN)
            .map_err(Status::invalid_argument)?;
        self.apply(Command::CancelOperation(pool::CancelOperation {
            operation_id: id.clone(),
        }))
        .await?;
        let view = self
            .read(false, |s, _| {
                s.pool.operations().get(&id).map(to_proto::operation)
            })
            .await?
            .ok_or_else(|| Status::internal("operation cancelled but not found"))?;
        Ok(Response::new(view))
    }

    /// `create_sandbox` without its audit record.
    async fn create_sandbox_audited(
        &self,
        request: Request<CreateSandboxRequest>,
    ) -> Result<Response<Sandbox>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        let node = self.hub.node().id();
        let request = request.into_inner();
        // An empty id asks the gateway to name the sandbox.
        if !request.sandbox_id.is_empty() {
            status::check_id("sandbox_id", &request.sandbox_id)?;
        }
        check_material(&request.material_ref)?;
        crate::requests::check_request_id(&request.request_id).map_err(Status::invalid_argument)?;
        let request_id = request.request_id.clone();
        let fingerprint =
            crate::requests::fingerprint_of("pool_admin.CreateSandbox", &request, |r| {
                r.request_id.clear()
            });
        let launch = from_proto::launch(request, || fresh_id("sb", node));
        // The admitted sandbox, as the outcome names it: a replayed
        // outcome names the one the first attempt admitted (which, for a
        // request without a sandbox id, another fresh id than this one).
        let (effect, replayed) = self
            .apply_replayed(Command::Launch(launch), &request_id, &fingerprint)
            .await?;
        let sandbox = match effect {
            pool::Effect::LaunchRefused(reason) => return Err(rejection(&reason)),
            pool::Effect::Admitted { assignment, .. } => assignment.sandbox,
            other => {
                return Err(Status::internal(format!(
                    "unexpected launch effect {other:?}"
                )))
            }
        };
        let view = self
            .read(false, |s, _| {
                s.pool
                    .sandbox(&sandbox)
                    .map(|sb| to_proto::sandbox(&s.pool, sb))
            })
            .await?
            .ok_or_else(|| Status::internal("sandbox admitted but not found"))?;
        Ok(replied(view, replayed))
    }

    /// `delete_sandbox` without its audit record.
    async fn delete_sandbox_audited(
        &self,
        request: Request<DeleteSandboxRequest>,
    ) -> Result<Response<Sandbox>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        let request = request.into_inner();
        let fingerprint =
            crate::requests::fingerprint_of("pool_admin.DeleteSandbox", &request, |r| {
                r.request_id.clear()
            });
        let (id, request_id) = (request.sandbox_id, request.request_id);
        status::check_id("sandbox_id", &id)?;
        crate::requests::check_request_id(&request_id).map_err(Status::invalid_argument)?;
        let generation = self
            .read(false, |s, _| s.pool.sandbox(&id).map(|sb| sb.generation))
            .await?
            .ok_or_else(|| Status::not_found(format!("sandbox {id} does not exist")))?;
        let (_, replayed) = self
            .apply_replayed(
                Command::Delete(pool::Delete {
                    // A client's intention, not a leader's decision: not
                    // fenced (pool::fence).
                    raft_term: 0,
                    sandbox: id.clone(),
                    generation,
                }),
                &request_id,
                &fingerprint,
            )
            .await?;
        let view = self
            .read(false, |s, _| {
                s.pool.sandbox(&id).map(|sb| to_proto::sandbox(&s.pool, sb))
            })
            .await?
            .ok_or_else(|| Status::internal("sandbox deleted but not found"))?;
        Ok(replied(view, replayed))
    }
}

/// The reply `view`, marked [`proto::metadata::REPLAYED`] when it answers a
/// retried request id with the first attempt's outcome.
fn replied<T>(view: T, replayed: bool) -> Response<T> {
    let mut response = Response::new(view);
    if replayed {
        response.metadata_mut().insert(
            proto::metadata::REPLAYED,
            tonic::metadata::MetadataValue::from_static("1"),
        );
    }
    response
}

/// Largest launch material (the workload command as JSON, or a reference),
/// in bytes: the one limit of `material_ref` ([`pool::validate::MAX_MATERIAL_LEN`],
/// which proposal validation applies too). It is kept in the sandbox record
/// while the sandbox lives and becomes the runtime's argv (a process's or a
/// Pod's), which the kernel and the Kubernetes API bound far below the 2 MiB
/// request limit: a larger one could only fail its launch, again and again.
/// It fits, with the launch's other fields, in one command (64 KiB).
pub const MAX_MATERIAL_BYTES: usize = pool::validate::MAX_MATERIAL_LEN;

/// Refuses launch material over [`MAX_MATERIAL_BYTES`], naming the field.
fn check_material(material: &str) -> Result<(), Status> {
    if material.len() > MAX_MATERIAL_BYTES {
        return Err(Status::invalid_argument(format!(
            "material_ref is {} bytes; at most {MAX_MATERIAL_BYTES} (the workload command)",
            material.len()
        )));
    }
    Ok(())
}

//! The `openshell.sandbox_runtime.v1.SandboxRuntime` gRPC service.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use proto::grant::GrantError;
use proto::sandbox_runtime::sandbox_runtime_server::SandboxRuntime;
use proto::sandbox_runtime::{
    ActivateRequest, ActivateResponse, ExecRequest, ExecResponse, Grant, ReleaseRequest,
    RuntimeStatus, RuntimeStatusRequest, SessionRequest, SignedGrant, WorkloadInfo,
};
use tokio::process::Child;
use tokio::sync::watch;
use tonic::{Request, Response, Status};
use tracing::{debug, info, warn};

use super::exec::{self, ExecError};
use super::session::{Core, SessionError};
use super::workload::{self, Facts};
use crate::trusted_keys::TrustedKeys;

/// How long Release waits for the workload process to be gone.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// State shared by the service, the workload holder and the run loop.
#[derive(Debug)]
pub(crate) struct Shared {
    pub sandbox_id: String,
    pub generation: u64,
    pub trusted_keys: TrustedKeys,
    pub exe: PathBuf,
    pub pid: u32,
    pub started_at_unix_ms: u64,
    pub workload_addr: String,
    core: Mutex<Core>,
    /// Set once the workload must stop; the holder task acts on it.
    stop: watch::Sender<bool>,
    /// Set once the workload process is gone (reaped).
    exited: watch::Sender<bool>,
}

fn session_status(e: SessionError) -> Status {
    match e {
        SessionError::Stopped { .. } => Status::failed_precondition(e.to_string()),
        SessionError::StaleEpoch { .. }
        | SessionError::EpochHeld { .. }
        | SessionError::UnknownSession => Status::permission_denied(e.to_string()),
    }
}

fn exec_status(e: ExecError) -> Status {
    match e {
        ExecError::EmptyArgv | ExecError::TimeoutAboveCap(_) => {
            Status::invalid_argument(e.to_string())
        }
        ExecError::Spawn { .. } => Status::failed_precondition(e.to_string()),
        ExecError::Timeout { .. } => Status::deadline_exceeded(e.to_string()),
        ExecError::Wait { .. } => Status::internal(e.to_string()),
    }
}

/// Logs a refused request inside the RPC's span.
fn logged<T>(result: Result<T, Status>) -> Result<T, Status> {
    if let Err(status) = &result {
        warn!(code = ?status.code(), "refused: {}", status.message());
    }
    result
}

impl Shared {
    pub fn new(
        sandbox_id: String,
        generation: u64,
        trusted_keys: TrustedKeys,
        exe: PathBuf,
        started: Facts,
        core: Core,
    ) -> Arc<Self> {
        Arc::new(Shared {
            sandbox_id,
            generation,
            trusted_keys,
            exe,
            pid: started.pid,
            started_at_unix_ms: started.started_at_unix_ms,
            workload_addr: started.addr,
            core: Mutex::new(core),
            stop: watch::channel(false).0,
            exited: watch::channel(false).0,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        self.core
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `f` on the core after enforcing the recovery deadline; asks the
    /// holder to stop the workload when the core is stopped afterwards.
    pub fn decide<R>(&self, f: impl FnOnce(&mut Core, Instant) -> R) -> R {
        let mut core = self.lock();
        let now = Instant::now();
        if core.enforce_deadline(now) {
            warn!(
                sandbox = %self.sandbox_id,
                pid = self.pid,
                "no supervisor within the recovery deadline: stopping the workload (SupervisorRecoveryFailed)"
            );
        }
        let result = f(&mut core, now);
        if core.stop_reason().is_some() {
            self.stop
                .send_if_modified(|stop| !std::mem::replace(stop, true));
        }
        result
    }

    fn info(&self, core: &Core) -> WorkloadInfo {
        WorkloadInfo {
            pid: self.pid,
            started_at_unix_ms: self.started_at_unix_ms,
            state: if core.stop_reason().is_some() {
                "stopped"
            } else {
                "running"
            }
            .to_string(),
            workload_addr: self.workload_addr.clone(),
        }
    }

    /// Waits until the workload process is gone, at most `limit`.
    pub async fn wait_exited(&self, limit: Duration) -> bool {
        let mut rx = self.exited.subscribe();
        tokio::time::timeout(limit, rx.wait_for(|gone| *gone))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// A receiver that sees the workload process go.
    pub fn exited_rx(&self) -> watch::Receiver<bool> {
        self.exited.subscribe()
    }

    /// Holds the workload process: waits for it to exit or for a stop
    /// decision (then SIGTERM, SIGKILL after the grace), records why it
    /// stopped and reaps it.
    pub async fn hold_workload(self: Arc<Self>, mut child: Child) {
        let mut stop_rx = self.stop.subscribe();
        let exited = tokio::select! {
            status = child.wait() => Some(status),
            _ = stop_rx.wait_for(|stop| *stop) => None,
        };
        let status = match exited {
            Some(status) => {
                // Stragglers of the group that survived the leader.
                workload::kill_group(self.pid, libc::SIGKILL);
                status
            }
            None => workload::stop(&mut child, self.pid).await,
        };
        let exit = match status {
            Ok(status) => format!("workload exited: {status}"),
            Err(e) => format!("workload exited: wait failed: {e}"),
        };
        let reason = self.decide(|core, _| {
            core.workload_exited(exit.clone());
            core.stop_reason().unwrap_or_default().to_string()
        });
        info!(sandbox = %self.sandbox_id, pid = self.pid, %exit, stop_reason = %reason, "workload stopped");
        self.exited.send_replace(true);
    }

    fn verify(&self, signed: Option<SignedGrant>) -> Result<Grant, Status> {
        let signed = signed.ok_or_else(|| Status::invalid_argument("grant is required"))?;
        let grant = self
            .trusted_keys
            .current()
            .verify(&signed)
            .map_err(|e| match e {
                GrantError::BadSignature => Status::unauthenticated(format!(
                    "grant is not signed by a trusted grant key: this runtime trusts {}",
                    self.trusted_keys.describe()
                )),
                other => Status::unauthenticated(other.to_string()),
            })?;
        if grant.sandbox_id != self.sandbox_id {
            return Err(Status::permission_denied(format!(
                "grant is for sandbox {:?}, this runtime holds {:?}",
                grant.sandbox_id, self.sandbox_id
            )));
        }
        if grant.generation != self.generation {
            return Err(Status::permission_denied(format!(
                "grant is for generation {} of sandbox {:?}, this runtime holds generation {}",
                grant.generation, self.sandbox_id, self.generation
            )));
        }
        Ok(grant)
    }

    #[tracing::instrument(name = "Activate", skip_all, fields(sandbox = %self.sandbox_id))]
    async fn activate(&self, req: ActivateRequest) -> Result<ActivateResponse, Status> {
        logged((|| {
            let grant = self.verify(req.grant)?;
            if grant.release {
                return Err(Status::invalid_argument(
                    "a release grant cannot activate; use Release",
                ));
            }
            if grant.member_id.is_empty() {
                return Err(Status::invalid_argument("grant names no member"));
            }
            let token = hex::encode(rand::random::<[u8; 16]>());
            let workload = self.decide(|core, now| {
                core.activate(&grant, token.clone(), now)
                    .map(|()| self.info(core))
                    .map_err(session_status)
            })?;
            info!(
                member = %grant.member_id,
                incarnation = grant.incarnation,
                term = grant.term,
                credential_epoch = grant.credential_epoch,
                "activated"
            );
            Ok(ActivateResponse {
                session_token: token,
                workload: Some(workload),
            })
        })())
    }

    #[tracing::instrument(name = "Heartbeat", skip_all, fields(sandbox = %self.sandbox_id))]
    async fn heartbeat(&self, req: SessionRequest) -> Result<WorkloadInfo, Status> {
        let result = self.decide(|core, now| {
            core.heartbeat(&req.session_token, now)
                .map(|()| self.info(core))
                .map_err(session_status)
        });
        if result.is_ok() {
            debug!("heartbeat");
        }
        logged(result)
    }

    #[tracing::instrument(name = "Relinquish", skip_all, fields(sandbox = %self.sandbox_id))]
    async fn relinquish(&self, req: SessionRequest) -> Result<WorkloadInfo, Status> {
        let result = self.decide(|core, now| {
            core.relinquish(&req.session_token, now)
                .map(|()| self.info(core))
                .map_err(session_status)
        });
        if result.is_ok() {
            info!("relinquished: unsupervised until the next activation");
        }
        logged(result)
    }

    #[tracing::instrument(name = "Release", skip_all, fields(sandbox = %self.sandbox_id))]
    async fn release(&self, req: ReleaseRequest) -> Result<WorkloadInfo, Status> {
        let grant = logged(self.verify(req.grant))?;
        if !grant.release {
            return logged(Err(Status::invalid_argument(
                "Release needs a grant with release = true",
            )));
        }
        let stopped_now =
            logged(self.decide(|core, _| core.release(&grant).map_err(session_status)))?;
        if stopped_now {
            info!(credential_epoch = grant.credential_epoch, member = %grant.member_id, "released: stopping the workload");
        }
        if !self.wait_exited(RELEASE_WAIT).await {
            warn!(
                pid = self.pid,
                "workload still exiting after {RELEASE_WAIT:?}"
            );
        }
        Ok(self.decide(|core, _| self.info(core)))
    }

    #[tracing::instrument(name = "Exec", skip_all, fields(sandbox = %self.sandbox_id))]
    async fn exec(&self, req: ExecRequest) -> Result<ExecResponse, Status> {
        logged(self.decide(|core, _| core.check_exec(&req.session_token).map_err(session_status)))?;
        let program = req.argv.first().cloned().unwrap_or_default();
        let timeout = logged(exec::effective_timeout(req.timeout_ms).map_err(exec_status))?;
        let env = [
            ("OPENSHELL_WORKLOAD_ADDR", self.workload_addr.clone()),
            ("OPENSHELL_WORKLOAD_PID", self.pid.to_string()),
            ("OPENSHELL_SANDBOX_ID", self.sandbox_id.clone()),
        ];
        let out = logged(
            exec::run(&req.argv, &env, timeout, &self.exe)
                .await
                .map_err(exec_status),
        )?;
        info!(%program, args = req.argv.len(), exit_code = out.exit_code, "exec finished");
        Ok(ExecResponse {
            exit_code: out.exit_code,
            stdout: out.stdout,
            stderr: out.stderr,
            stdout_truncated: out.stdout_truncated,
            stderr_truncated: out.stderr_truncated,
        })
    }

    #[tracing::instrument(name = "Status", skip_all, fields(sandbox = %self.sandbox_id))]
    async fn status(&self) -> RuntimeStatus {
        self.decide(|core, now| {
            let view = core.status(now);
            RuntimeStatus {
                sandbox_id: self.sandbox_id.clone(),
                generation: self.generation,
                workload: Some(self.info(core)),
                active_member: view.active_member,
                active_incarnation: view.active_incarnation,
                credential_epoch: view.credential_epoch,
                term: view.term,
                state: view.state.to_string(),
                unsupervised_ms: view.unsupervised_ms,
                stop_reason: view.stop_reason,
            }
        })
    }
}

/// The tonic service over [`Shared`].
#[derive(Debug, Clone)]
pub(crate) struct Service(pub Arc<Shared>);

#[tonic::async_trait]
impl SandboxRuntime for Service {
    async fn activate(
        &self,
        request: Request<ActivateRequest>,
    ) -> Result<Response<ActivateResponse>, Status> {
        self.0
            .activate(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn heartbeat(
        &self,
        request: Request<SessionRequest>,
    ) -> Result<Response<WorkloadInfo>, Status> {
        self.0
            .heartbeat(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn relinquish(
        &self,
        request: Request<SessionRequest>,
    ) -> Result<Response<WorkloadInfo>, Status> {
        self.0
            .relinquish(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn release(
        &self,
        request: Request<ReleaseRequest>,
    ) -> Result<Response<WorkloadInfo>, Status> {
        self.0
            .release(request.into_inner())
            .await
            .map(Response::new)
    }

    async fn exec(&self, request: Request<ExecRequest>) -> Result<Response<ExecResponse>, Status> {
        self.0.exec(request.into_inner()).await.map(Response::new)
    }

    async fn status(
        &self,
        _request: Request<RuntimeStatusRequest>,
    ) -> Result<Response<RuntimeStatus>, Status> {
        Ok(Response::new(self.0.status().await))
    }
}

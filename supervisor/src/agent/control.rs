//! `openshell.supervisor_host.v1.SupervisorControl`, served on the
//! supervisor's advertise address. Who may call it: gateways, presenting the
//! supervisor credential as a bearer token (when one is configured). Exec runs
//! in the sandbox's runtime through this supervisor's session, only for the
//! term the gateway names.

use std::sync::Arc;

use proto::sandbox_runtime::ExecRequest;
use proto::supervisor_host::supervisor_control_server::SupervisorControl;
use proto::supervisor_host::{SupervisorExecRequest, SupervisorExecResponse};
use tonic::{Request, Response, Status};

use super::Agent;

/// The control service.
pub struct ControlService {
    agent: Arc<Agent>,
}

impl ControlService {
    /// The service of `agent`.
    pub fn new(agent: Arc<Agent>) -> Self {
        ControlService { agent }
    }
}

#[tonic::async_trait]
impl SupervisorControl for ControlService {
    #[tracing::instrument(level = "info", skip_all, fields(sandbox = %request.get_ref().sandbox_id))]
    async fn exec(
        &self,
        request: Request<SupervisorExecRequest>,
    ) -> Result<Response<SupervisorExecResponse>, Status> {
        let credential = &self.agent.config.credential;
        if !credential.is_empty() {
            let presented = request
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or_default();
            if !proto::secret::ct_eq(presented.as_bytes(), credential.as_bytes()) {
                return Err(Status::unauthenticated(
                    "gateway credential missing or wrong",
                ));
            }
        }
        let request = request.into_inner();
        if request.argv.is_empty() {
            return Err(Status::invalid_argument("argv is empty"));
        }
        // Refused here too (not only by the runtime): a timeout is never
        // shortened silently at any hop.
        proto::exec::check_timeout_ms(request.timeout_ms).map_err(Status::invalid_argument)?;
        let (addr, token, term) = {
            let sessions = Agent::lock(&self.agent.sessions);
            let session = sessions.get(&request.sandbox_id).ok_or_else(|| {
                Status::failed_precondition(format!(
                    "no session for sandbox {}",
                    request.sandbox_id
                ))
            })?;
            (
                session.runtime_addr.clone(),
                session.token.clone(),
                session.term,
            )
        };
        if term != request.term {
            return Err(Status::failed_precondition(format!(
                "this supervisor holds term {term} of sandbox {}, the gateway asked for term {}",
                request.sandbox_id, request.term
            )));
        }
        let mut runtime =
            super::session::runtime_client(&addr, &self.agent.config.runtime_client).await?;
        let reply = runtime
            .exec(ExecRequest {
                session_token: token,
                argv: request.argv,
                timeout_ms: request.timeout_ms,
            })
            .await?
            .into_inner();
        Ok(Response::new(SupervisorExecResponse {
            exit_code: reply.exit_code,
            stdout: reply.stdout,
            stderr: reply.stderr,
            stdout_truncated: reply.stdout_truncated,
            stderr_truncated: reply.stderr_truncated,
        }))
    }
}

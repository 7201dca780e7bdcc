//! Sessions: one per sandbox this supervisor holds. Activation presents the
//! grant to the sandbox runtime, a heartbeat task keeps the session alive and
//! reports the workload, relinquish lets go of a moved sandbox, release stops
//! a deleted one.

use std::sync::Arc;

use prost::Message;
use proto::client::{self, ClientConfig, ClientError, Role};
use proto::sandbox_runtime::sandbox_runtime_client::SandboxRuntimeClient;
use proto::sandbox_runtime::{
    ActivateRequest, ReleaseRequest, SessionRequest, SignedGrant, WorkloadInfo,
};
use proto::supervisor_host::{
    supervisor_message, AssignmentSnapshot, RuntimeEndpoint, SandboxInstanceAssignment,
    SandboxReport,
};
use tonic::transport::Channel;
use tonic::{Code, Status};

use super::Agent;

/// A sandbox this supervisor holds.
pub struct Session {
    /// Sandbox generation.
    pub generation: u64,
    /// Ownership term the session was activated for.
    pub term: u64,
    /// Runtime session token.
    pub token: String,
    /// The runtime, as the launcher recorded it.
    pub runtime: RuntimeEndpoint,
    /// The heartbeat task; aborted when the session ends.
    heartbeat: tokio::task::AbortHandle,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

/// A client to the runtime at `runtime`: TLS 1.3, its certificate verified
/// against the CA the launcher recorded for it, for the runtime's name
/// (whatever IP is dialled). A runtime recorded without a CA is dialled in
/// plaintext by an `--insecure` supervisor only.
///
/// # Errors
/// `FAILED_PRECONDITION` when the recorded CA is unusable or missing (secure
/// supervisor); `UNAVAILABLE` when the runtime cannot be reached or its
/// certificate does not verify.
pub async fn runtime_client(
    agent: &Agent,
    runtime: &RuntimeEndpoint,
) -> Result<SandboxRuntimeClient<Channel>, Status> {
    let config = runtime_tls(agent, runtime)?;
    let addr = runtime.address.as_str();
    let channel = client::connect(Role::SupervisorToRuntime, addr, &config)
        .await
        .map_err(|e| match e {
            ClientError::InvalidAddress { source, .. } => {
                Status::internal(format!("bad runtime address {addr:?}: {source}"))
            }
            ClientError::Unreachable { source, .. } => Status::unavailable(format!(
                "runtime {} at {addr} is unreachable: {source}",
                runtime.name
            )),
        })?;
    Ok(SandboxRuntimeClient::new(channel))
}

/// The client configuration for `runtime`: TLS trusting its recorded CA for
/// its name, or plaintext when none is recorded and this supervisor runs
/// `--insecure`.
fn runtime_tls(agent: &Agent, runtime: &RuntimeEndpoint) -> Result<ClientConfig, Status> {
    let base = agent.config.runtime_client.clone();
    if runtime.ca_pem.is_empty() {
        return if agent.config.insecure {
            Ok(base)
        } else {
            Err(Status::failed_precondition(format!(
                "runtime {} has no CA certificate recorded: its TLS cannot be verified",
                runtime.name
            )))
        };
    }
    let tls = proto::tls::ClientTls::from_ca_pem(&runtime.ca_pem)
        .map_err(|e| {
            Status::failed_precondition(format!(
                "the recorded CA certificate of runtime {}: {e}",
                runtime.name
            ))
        })?
        .with_server_name(runtime.name.clone());
    Ok(base.with_tls(Some(tls)))
}

fn signed(a: &SandboxInstanceAssignment) -> Option<SignedGrant> {
    SignedGrant::decode(a.grant.as_slice()).ok()
}

/// Brings sessions in line with a snapshot.
pub fn reconcile(agent: &Arc<Agent>, snapshot: &AssignmentSnapshot) {
    agent.forget_acks(snapshot);
    // Sessions whose assignment went away: relinquish (planned move) or, if
    // released, let the release below stop the workload.
    let gone: Vec<(String, Session)> = {
        let mut sessions = Agent::lock(&agent.sessions);
        let stale: Vec<String> = sessions
            .iter()
            .filter(|(id, s)| {
                !snapshot
                    .assignments
                    .iter()
                    .any(|a| &a.sandbox_id == *id && a.generation == s.generation)
            })
            .map(|(id, _)| id.clone())
            .collect();
        stale
            .into_iter()
            .filter_map(|id| sessions.remove(&id).map(|s| (id, s)))
            .collect()
    };
    for (sandbox, session) in gone {
        let released = snapshot
            .released
            .iter()
            .any(|r| r.sandbox_id == sandbox && r.generation == session.generation);
        let agent = agent.clone();
        tokio::spawn(async move {
            if !released {
                tracing::info!(%sandbox, term = session.term, "relinquishing (planned move): the workload keeps running");
                if let Ok(mut client) = runtime_client(&agent, &session.runtime).await {
                    let _ = client
                        .relinquish(SessionRequest {
                            session_token: session.token.clone(),
                        })
                        .await;
                }
            }
        });
    }
    for a in &snapshot.assignments {
        let current = Agent::lock(&agent.sessions)
            .get(&a.sandbox_id)
            .map(|s| (s.generation, s.term));
        if current == Some((a.generation, a.term)) {
            if !a.acknowledged {
                // The ack may have been lost (a previous stream, a full
                // buffer, a write that failed): resend, at most once per
                // `ACK_RESEND_AFTER`.
                agent.ack(&a.sandbox_id, a.generation, a.term, true);
            }
            continue;
        }
        if a.runtime.is_none() {
            // The leader's launcher has not recorded the runtime yet; a
            // later snapshot carries it.
            tracing::debug!(sandbox = %a.sandbox_id, "waiting for the runtime to be launched");
            continue;
        }
        let key = (a.sandbox_id.clone(), a.term);
        if !Agent::lock(&agent.activating).insert(key.clone()) {
            continue;
        }
        let agent = agent.clone();
        let a = a.clone();
        tokio::spawn(async move {
            if let Err(e) = activate(&agent, &a).await {
                tracing::warn!(sandbox = %a.sandbox_id, term = a.term, error = %e, "activation failed; will retry");
            }
            Agent::lock(&agent.activating).remove(&key);
        });
    }
    for r in &snapshot.released {
        let key = (r.sandbox_id.clone(), r.generation);
        if !Agent::lock(&agent.released).insert(key.clone()) {
            continue;
        }
        let agent = agent.clone();
        let r = r.clone();
        tokio::spawn(async move {
            if let Err(e) = release(&agent, &r).await {
                tracing::warn!(sandbox = %r.sandbox_id, error = %e, "release failed; will retry");
                Agent::lock(&agent.released).remove(&key);
            }
        });
    }
}

/// Presents the grant to the runtime and starts the session.
#[tracing::instrument(
    name = "activate",
    skip_all,
    fields(sandbox = %a.sandbox_id, term = a.term, credential_epoch = a.credential_epoch)
)]
async fn activate(agent: &Arc<Agent>, a: &SandboxInstanceAssignment) -> Result<(), String> {
    let grant = signed(a).ok_or("the assignment carries no valid grant")?;
    // The leader's launcher records the runtime once it serves; the next
    // snapshot after that carries it.
    let runtime = a
        .runtime
        .clone()
        .ok_or("waiting for the sandbox's runtime to be launched")?;
    let mut client = runtime_client(agent, &runtime)
        .await
        .map_err(|s| s.message().to_string())?;
    let reply = client
        .activate(ActivateRequest { grant: Some(grant) })
        .await
        .map_err(|s| format!("runtime refused the grant: {:?}: {}", s.code(), s.message()))?
        .into_inner();
    let token = reply.session_token;
    let heartbeat = tokio::spawn(heartbeat_loop(
        agent.clone(),
        a.clone(),
        runtime.clone(),
        token.clone(),
    ));
    Agent::lock(&agent.sessions).insert(
        a.sandbox_id.clone(),
        Session {
            generation: a.generation,
            term: a.term,
            token,
            runtime,
            heartbeat: heartbeat.abort_handle(),
        },
    );
    tracing::info!("runtime accepted the grant; acknowledging the term");
    agent.ack(&a.sandbox_id, a.generation, a.term, false);
    if let Some(workload) = reply.workload {
        report(agent, a, &workload);
    }
    Ok(())
}

fn report(agent: &Agent, a: &SandboxInstanceAssignment, workload: &WorkloadInfo) {
    let status = serde_json::json!({
        "state": workload.state,
        "pid": workload.pid,
        "started_at_unix_ms": workload.started_at_unix_ms,
    });
    agent.send(supervisor_message::Message::Report(SandboxReport {
        sandbox_id: a.sandbox_id.clone(),
        generation: a.generation,
        term: a.term,
        status: status.to_string(),
    }));
}

/// Heartbeats the runtime; reports the workload about once a second; ends
/// the session when the runtime fences it.
async fn heartbeat_loop(
    agent: Arc<Agent>,
    a: SandboxInstanceAssignment,
    runtime: RuntimeEndpoint,
    token: String,
) {
    let mut ticker = tokio::time::interval(agent.config.runtime_heartbeat);
    let mut beats: u64 = 0;
    let mut last_report: Option<WorkloadInfo> = None;
    loop {
        ticker.tick().await;
        beats += 1;
        let mut client = match runtime_client(&agent, &runtime).await {
            Ok(client) => client,
            Err(s) => {
                tracing::debug!(sandbox = %a.sandbox_id, %s, "runtime heartbeat failed");
                continue;
            }
        };
        match client
            .heartbeat(SessionRequest {
                session_token: token.clone(),
            })
            .await
        {
            Ok(reply) => {
                let workload = reply.into_inner();
                if last_report.as_ref() != Some(&workload) || beats.is_multiple_of(8) {
                    report(&agent, &a, &workload);
                    last_report = Some(workload);
                }
            }
            Err(s) if matches!(s.code(), Code::PermissionDenied | Code::FailedPrecondition) => {
                tracing::warn!(sandbox = %a.sandbox_id, term = a.term, reason = %s.message(), "session fenced by the runtime");
                let mut sessions = Agent::lock(&agent.sessions);
                if sessions
                    .get(&a.sandbox_id)
                    .map(|s| s.token == token)
                    .unwrap_or(false)
                {
                    // Dropping the session aborts this task.
                    let ended = sessions.remove(&a.sandbox_id);
                    drop(sessions);
                    drop(ended);
                }
                return;
            }
            Err(s) => tracing::debug!(sandbox = %a.sandbox_id, %s, "runtime heartbeat failed"),
        }
    }
}

/// Stops a deleted sandbox's workload with the release grant.
async fn release(agent: &Arc<Agent>, r: &SandboxInstanceAssignment) -> Result<(), String> {
    let grant = signed(r).ok_or("the release carries no valid grant")?;
    let Some(runtime) = &r.runtime else {
        return Ok(()); // never launched: nothing to stop
    };
    let mut client = match runtime_client(agent, runtime).await {
        Ok(client) => client,
        // Gone already (the launcher deletes the runtimes of deleted and
        // failed sandboxes, which stops their workloads).
        Err(s) if s.code() == Code::Unavailable => return Ok(()),
        Err(s) => return Err(s.message().to_string()),
    };
    match client.release(ReleaseRequest { grant: Some(grant) }).await {
        Ok(_) => {
            tracing::info!(sandbox = %r.sandbox_id, "released: the workload is stopped");
            Ok(())
        }
        Err(s) if s.code() == Code::FailedPrecondition => Ok(()), // already stopped
        Err(s) => Err(format!("{:?}: {}", s.code(), s.message())),
    }
}

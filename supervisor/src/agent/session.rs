//! Sessions: one per sandbox this supervisor holds. Activation presents the
//! grant to the sandbox runtime, a heartbeat task keeps the session alive and
//! reports the workload, relinquish lets go of a moved sandbox, release stops
//! a deleted one.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use proto::client::{self, ClientConfig, ClientError, Role};
use proto::pool_types::SandboxPhase;
use proto::sandbox_runtime::sandbox_runtime_client::SandboxRuntimeClient;
use proto::sandbox_runtime::{
    ActivateRequest, ReleaseRequest, RuntimeStatusRequest, SessionRequest, SignedGrant,
    WorkloadInfo,
};
use proto::supervisor_host::{
    supervisor_message, AssignmentSnapshot, SandboxInstanceAssignment, SandboxReport, TermAck,
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
    /// Runtime address.
    pub runtime_addr: String,
    /// The heartbeat task; aborted when the session ends.
    heartbeat: tokio::task::AbortHandle,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

/// A client to the runtime of `sandbox` at `addr`, over TLS 1.3 trusting
/// the CA certificate the runtime published as `<runtime_dir>/<sandbox>.crt`
/// (the certificate must name the address' IP). Without that file only a
/// `--insecure` supervisor dials plaintext (a runtime older than TLS).
///
/// # Errors
/// `FAILED_PRECONDITION` naming the `.crt` file when it is missing (secure
/// supervisor) or unusable; `UNAVAILABLE` when the runtime cannot be reached
/// or its certificate does not verify.
pub async fn runtime_client(
    agent: &Agent,
    sandbox: &str,
    addr: &str,
) -> Result<SandboxRuntimeClient<Channel>, Status> {
    let config = runtime_tls(agent, sandbox)?;
    let channel = client::connect(Role::SupervisorToRuntime, addr, &config)
        .await
        .map_err(|e| match e {
            ClientError::InvalidAddress { source, .. } => {
                Status::internal(format!("bad runtime address {addr:?}: {source}"))
            }
            ClientError::Unreachable { source, .. } => {
                Status::unavailable(format!("runtime at {addr} is unreachable: {source}"))
            }
        })?;
    Ok(SandboxRuntimeClient::new(channel))
}

/// The client configuration for the runtime of `sandbox`: TLS trusting its
/// published `.crt`, or plaintext when there is none and this supervisor
/// runs `--insecure`.
fn runtime_tls(agent: &Agent, sandbox: &str) -> Result<ClientConfig, Status> {
    let path = runtime_file(agent, sandbox, "crt").map_err(Status::invalid_argument)?;
    let base = agent.config.runtime_client.clone();
    match std::fs::read_to_string(&path) {
        Ok(pem) => {
            let tls = proto::tls::ClientTls::from_ca_pem(&pem).map_err(|e| {
                Status::failed_precondition(format!(
                    "runtime CA certificate {}: {e}",
                    path.display()
                ))
            })?;
            Ok(base.with_tls(Some(tls)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && agent.config.insecure => Ok(base),
        Err(e) => Err(Status::failed_precondition(format!(
            "runtime CA certificate {} cannot be read ({e}): the runtime's TLS cannot be verified (a runtime older than TLS is only dialled by an --insecure supervisor)",
            path.display()
        ))),
    }
}

/// `<runtime_dir>/<sandbox>.<ext>`, only for an id within the identifier
/// rule (`proto::ids`): an id never becomes a path outside the runtime dir.
fn runtime_file(agent: &Agent, sandbox: &str, ext: &str) -> Result<PathBuf, String> {
    proto::ids::check_id("sandbox_id", sandbox).map_err(|e| e.to_string())?;
    Ok(agent.config.runtime_dir.join(format!("{sandbox}.{ext}")))
}

fn addr_file(agent: &Agent, sandbox: &str) -> Result<PathBuf, String> {
    runtime_file(agent, sandbox, "addr")
}

/// The runtime's address, if one published it and answers for this
/// sandbox generation (a runtime older than the generation field reports 0
/// and is taken at its word; it checks no generation either).
async fn locate_runtime(agent: &Agent, sandbox: &str, generation: u64) -> Option<String> {
    let addr = std::fs::read_to_string(addr_file(agent, sandbox).ok()?)
        .ok()?
        .trim()
        .to_string();
    let mut client = runtime_client(agent, sandbox, &addr).await.ok()?;
    let status = client
        .status(RuntimeStatusRequest {})
        .await
        .ok()?
        .into_inner();
    (status.sandbox_id == sandbox && (status.generation == generation || status.generation == 0))
        .then_some(addr)
}

/// Starts the runtime of a fresh launch and waits for its address.
///
/// At most once per sandbox generation in this process: once a runtime was
/// spawned, a later activation that finds no runtime answering means that
/// workload is gone (released, or stopped by its recovery deadline), and
/// starting another would run a second workload for the sandbox. That
/// happens when this supervisor keeps acting on a stale term-1 assignment
/// (e.g. streamed by a gateway cut off from the majority) after the
/// sandbox was taken over and deleted: a fresh runtime has no memory of
/// the newer epoch that fenced the old one, so it would accept the stale
/// grant. A restarted supervisor is a new incarnation, which stale term-1
/// grants do not name.
async fn start_runtime(agent: &Agent, a: &SandboxInstanceAssignment) -> Result<String, String> {
    let launch = (a.sandbox_id.clone(), a.generation);
    if Agent::lock(&agent.launched).contains(&launch) {
        return Err(format!(
            "not starting a second runtime for {} generation {}: the one this supervisor started no longer answers",
            a.sandbox_id, a.generation
        ));
    }
    let key_args = agent.runtime_key_args();
    let deadline = agent.recovery_deadline_ms.load(Ordering::SeqCst);
    let addr_path = addr_file(agent, &a.sandbox_id)?;
    let log_path = runtime_file(agent, &a.sandbox_id, "log")?;
    let _ = std::fs::remove_file(&addr_path);
    let _ = std::fs::remove_file(runtime_file(agent, &a.sandbox_id, "crt")?);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("runtime log {}: {e}", log_path.display()))?;
    let err = log.try_clone().map_err(|e| e.to_string())?;
    let mut command = tokio::process::Command::new(&agent.config.runtime_bin);
    command
        .arg("--sandbox-id")
        .arg(&a.sandbox_id)
        .arg("--generation")
        .arg(a.generation.to_string())
        .args(key_args)
        .arg("--addr-file")
        .arg(&addr_path)
        .arg("--recovery-deadline-ms")
        .arg(deadline.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(err)
        .process_group(0)
        // Runtimes this supervisor starts always serve TLS.
        .env_remove("OPENSHELL_RUNTIME_INSECURE");
    // The launch material is the workload command as a JSON array; anything
    // else (empty, "demo") runs the built-in demo workload.
    if let Ok(argv) = serde_json::from_str::<Vec<String>>(&a.material_ref) {
        if !argv.is_empty() {
            command.arg("--").args(argv);
        }
    }
    let mut child = command
        .spawn()
        .map_err(|e| format!("starting {}: {e}", agent.config.runtime_bin.display()))?;
    Agent::lock(&agent.launched).insert(launch);
    // Reap the runtime when it exits (it outlives us if we die first).
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    for _ in 0..200 {
        if let Ok(text) = std::fs::read_to_string(&addr_path) {
            let addr = text.trim().to_string();
            if !addr.is_empty() {
                return Ok(addr);
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err(format!(
        "runtime of {} did not publish its address in 5 s (see {})",
        a.sandbox_id,
        log_path.display()
    ))
}

fn signed(a: &SandboxInstanceAssignment) -> Option<SignedGrant> {
    SignedGrant::decode(a.grant.as_slice()).ok()
}

/// Brings sessions in line with a snapshot.
pub fn reconcile(agent: &Arc<Agent>, snapshot: &AssignmentSnapshot) {
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
                if let Ok(mut client) =
                    runtime_client(&agent, &sandbox, &session.runtime_addr).await
                {
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
                // The ack may have been lost with a previous stream: resend.
                agent.send(supervisor_message::Message::Ack(TermAck {
                    sandbox_id: a.sandbox_id.clone(),
                    generation: a.generation,
                    term: a.term,
                }));
            }
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
    let addr = match locate_runtime(agent, &a.sandbox_id, a.generation).await {
        Some(addr) => addr,
        // Only the first owner of a fresh launch starts the runtime; a
        // takeover never starts a second workload.
        None if a.term == 1 && a.phase() == SandboxPhase::Admitting => {
            start_runtime(agent, a).await?
        }
        None => return Err("no runtime answers for this sandbox".into()),
    };
    let mut client = runtime_client(agent, &a.sandbox_id, &addr)
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
        addr.clone(),
        token.clone(),
    ));
    Agent::lock(&agent.sessions).insert(
        a.sandbox_id.clone(),
        Session {
            generation: a.generation,
            term: a.term,
            token,
            runtime_addr: addr,
            heartbeat: heartbeat.abort_handle(),
        },
    );
    tracing::info!("runtime accepted the grant; acknowledging the term");
    agent.send(supervisor_message::Message::Ack(TermAck {
        sandbox_id: a.sandbox_id.clone(),
        generation: a.generation,
        term: a.term,
    }));
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
    addr: String,
    token: String,
) {
    let mut ticker = tokio::time::interval(agent.config.runtime_heartbeat);
    let mut beats: u64 = 0;
    let mut last_report: Option<WorkloadInfo> = None;
    loop {
        ticker.tick().await;
        beats += 1;
        let mut client = match runtime_client(&agent, &a.sandbox_id, &addr).await {
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
    let Some(addr) = locate_runtime(agent, &r.sandbox_id, r.generation).await else {
        return Ok(()); // no runtime answers: nothing to stop
    };
    let mut client = runtime_client(agent, &r.sandbox_id, &addr)
        .await
        .map_err(|s| s.message().to_string())?;
    match client.release(ReleaseRequest { grant: Some(grant) }).await {
        Ok(_) => {
            tracing::info!(sandbox = %r.sandbox_id, "released: the workload is stopped");
            Ok(())
        }
        Err(s) if s.code() == Code::FailedPrecondition => Ok(()), // already stopped
        Err(s) => Err(format!("{:?}: {}", s.code(), s.message())),
    }
}

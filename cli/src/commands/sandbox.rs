//! `sandbox ...`: create, delete, get, list and exec through
//! `openshell.pool_admin.v1.PoolAdmin`, and the sandbox rows `pool status`
//! shares.

use proto::pool_admin::{CreateSandboxRequest, Sandbox};
use proto::pool_types::SandboxPhase;
use serde_json::{json, Value};

use super::{emit, table};
use crate::{CliError, Gateway, Output, SandboxCommand};

pub(crate) fn sandbox_json(s: &Sandbox) -> Value {
    json!({
        "id": s.id, "generation": s.generation, "phase": SandboxPhase::name_of(s.phase), "owner": s.owner,
        "owner_incarnation": s.owner_incarnation, "term": s.term, "credential_epoch": s.credential_epoch,
        "acknowledged": s.acknowledged, "observed_status": s.observed_status,
        "pid": if s.pid == 0 { Value::Null } else { json!(s.pid) },
        "started_at": if s.started_at_unix_ms == 0 { Value::Null } else { json!(s.started_at_unix_ms) },
        "failure": s.failure, "launch_id": s.launch_id,
        "runtime_name": s.runtime_name, "runtime_address": s.runtime_address,
    })
}

pub(crate) fn sandbox_rows(list: &[Sandbox]) -> String {
    let rows = list
        .iter()
        .map(|s| {
            vec![
                s.id.clone(),
                SandboxPhase::name_of(s.phase).to_string(),
                s.owner.clone(),
                s.term.to_string(),
                s.credential_epoch.to_string(),
                if s.pid == 0 {
                    "-".into()
                } else {
                    s.pid.to_string()
                },
                // Where the runtime serves, once the leader's launcher
                // recorded it.
                if s.runtime_address.is_empty() {
                    "-".into()
                } else {
                    s.runtime_address.clone()
                },
                if s.failure.is_empty() {
                    String::new()
                } else {
                    s.failure.clone()
                },
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "PHASE",
            "OWNER",
            "TERM",
            "CREDENTIAL_EPOCH",
            "PID",
            "RUNTIME",
            "FAILURE",
        ],
        rows,
    )
}

/// The create request of `sandbox create [--id ID] [-- COMMAND]`.
///
/// # Errors
/// [`CliError::Local`] for `--id ""` (the wire's empty id means "name it
/// for me", so an explicit empty one is refused in the rule's own words).
pub(crate) fn create_request(
    id: Option<String>,
    command: &[String],
) -> Result<CreateSandboxRequest, CliError> {
    if id.as_deref() == Some("") {
        proto::ids::check_id("sandbox_id", "").map_err(|e| CliError::Local(e.to_string()))?;
    }
    let material_ref = if command.is_empty() {
        "demo".to_string()
    } else {
        serde_json::to_string(command).map_err(|e| CliError::Local(e.to_string()))?
    };
    Ok(CreateSandboxRequest {
        sandbox_id: id.unwrap_or_default(),
        launch_id: String::new(),
        material_ref,
        // Drawn by the client: one id on every attempt.
        request_id: String::new(),
    })
}

/// `sandbox ...`
pub async fn sandbox(
    gw: &Gateway,
    output: Output,
    command: SandboxCommand,
) -> Result<(), CliError> {
    let client = gw.client();
    match command {
        SandboxCommand::Create { id, command } => {
            let request = create_request(id, &command)?;
            let s = gw.ask(client.create_sandbox(request)).await?.value;
            emit(output, sandbox_json(&s), || {
                sandbox_rows(std::slice::from_ref(&s))
            });
        }
        SandboxCommand::Delete { id } => {
            let s = gw.ask(client.delete_sandbox(&id)).await?.value;
            emit(output, sandbox_json(&s), || {
                sandbox_rows(std::slice::from_ref(&s))
            });
        }
        SandboxCommand::Get { id } => {
            let s = gw
                .ask(client.get_sandbox(&id))
                .await?
                .ok_or_else(|| CliError::NotFound(format!("sandbox {id} does not exist")))?;
            emit(output, sandbox_json(&s), || {
                sandbox_rows(std::slice::from_ref(&s))
            });
        }
        SandboxCommand::List {
            watch: true,
            interval,
        } => {
            return super::follow::follow(gw, output, "sandbox list", interval, |s| {
                (
                    Value::Array(s.sandboxes.iter().map(sandbox_json).collect()),
                    sandbox_rows(&s.sandboxes),
                )
            })
            .await;
        }
        SandboxCommand::List {
            watch: false,
            interval: Some(_),
        } => {
            return Err(CliError::Usage(
                "--interval is the --watch interval: add --watch".into(),
            ))
        }
        SandboxCommand::List { .. } => {
            let list = gw.ask(client.list_sandboxes()).await?;
            emit(
                output,
                Value::Array(list.iter().map(sandbox_json).collect()),
                || sandbox_rows(&list),
            );
        }
        SandboxCommand::Exec {
            id,
            command,
            timeout_ms,
        } => exec(gw, output, id, command, timeout_ms).await?,
    }
    Ok(())
}

/// `sandbox exec`: the command's output as it came, or one JSON document;
/// a non-zero exit status becomes [`CliError::ExitStatus`].
async fn exec(
    gw: &Gateway,
    output: Output,
    id: String,
    command: Vec<String>,
    timeout_ms: u64,
) -> Result<(), CliError> {
    // The CLI's own deadline outlasts the command's timeout.
    let deadline = std::time::Duration::from_millis(timeout_ms + 15_000);
    let r = gw
        .ask(gw.client_within(deadline)?.exec_sandbox(
            &id,
            &command,
            std::time::Duration::from_millis(timeout_ms),
        ))
        .await?;
    match output {
        Output::Json => emit(
            output,
            json!({"exit_code": r.exit_code, "stdout": String::from_utf8_lossy(&r.stdout),
                   "stderr": String::from_utf8_lossy(&r.stderr), "executed_by": r.executed_by, "term": r.term,
                   "stdout_truncated": r.stdout_truncated, "stderr_truncated": r.stderr_truncated}),
            String::new,
        ),
        Output::Table => {
            use std::io::Write;
            let _ = std::io::stdout().write_all(&r.stdout);
            let _ = std::io::stderr().write_all(&r.stderr);
        }
    }
    // After the output, so the line is the last one on stderr.
    for (stream, truncated) in [
        ("stdout", r.stdout_truncated),
        ("stderr", r.stderr_truncated),
    ] {
        if truncated {
            eprintln!(
                "openshell-pool: the command's {stream} was cut at {} bytes (the cap of sandbox exec); \
                 the rest was dropped",
                proto::exec::OUTPUT_CAP
            );
        }
    }
    if r.exit_code != 0 {
        return Err(CliError::ExitStatus(r.exit_code));
    }
    Ok(())
}

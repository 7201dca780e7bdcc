//! The demo sandboxes of `dev`: deleted and launched afresh on every run.
//! Each runs the runtime's built-in demo workload (`material_ref` `demo`) in
//! the runtime the leader launches for it.

use proto::pool_admin::{CreateSandboxRequest, SupervisorPoolStatus};
use proto::pool_types::SandboxPhase;

use crate::{CliError, Gateway};

/// The pool's status from any gateway.
pub(super) async fn pool_status(gw: &Gateway) -> Result<SupervisorPoolStatus, CliError> {
    gw.ask(gw.client().pool_status()).await
}

/// One demo sandbox this run launched: its id and this run's launch id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Launched {
    /// `demo-<n>`.
    pub sandbox_id: String,
    /// This run's launch id (an earlier run's generation has another).
    pub launch_id: String,
}

/// Whether every demo sandbox this run launched is assigned with a
/// workload pid and a recorded runtime address.
///
/// # Errors
/// [`CliError::Local`] naming the first of them that failed (with the
/// pool's reason) or was deleted: it can never run, so waiting longer is
/// pointless.
pub(super) fn all_running(
    status: &SupervisorPoolStatus,
    launched: &[Launched],
) -> Result<bool, CliError> {
    let mut running = 0;
    for demo in launched {
        let Some(sb) = status
            .sandboxes
            .iter()
            .find(|sb| sb.id == demo.sandbox_id && sb.launch_id == demo.launch_id)
        else {
            continue;
        };
        match sb.phase() {
            SandboxPhase::Failed => {
                return Err(CliError::Local(format!(
                    "demo sandbox {} failed: {}; see the gateway logs in the data directory",
                    sb.id,
                    if sb.failure.is_empty() {
                        "no reason recorded"
                    } else {
                        &sb.failure
                    }
                )))
            }
            SandboxPhase::Deleted => {
                return Err(CliError::Local(format!(
                    "demo sandbox {} was deleted while dev started it",
                    sb.id
                )))
            }
            SandboxPhase::Assigned if sb.pid != 0 && !sb.runtime_address.is_empty() => {
                running += 1;
            }
            _ => {}
        }
    }
    Ok(running == launched.len())
}

/// Launches `demo-1` ..= `demo-<count>`.
///
/// Workloads do not outlive `dev` (Ctrl-C stops the runtimes), so demo
/// sandboxes of an earlier run are deleted and launched afresh: a new
/// generation under a new launch id. Each is retried for up to
/// [`LAUNCH_RETRY`] while the cluster settles (a write right after an
/// election may end "outcome unknown"): the launch id makes a create that
/// did commit answer the same the second time.
pub(super) async fn launch_sandboxes(gw: &Gateway, count: u32) -> Result<Vec<Launched>, CliError> {
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let mut launched = Vec::new();
    for n in 1..=count {
        let sandbox_id = format!("demo-{n}");
        let launch_id = format!("{sandbox_id}@{run}");
        let deadline = tokio::time::Instant::now() + LAUNCH_RETRY;
        loop {
            match launch_one(gw, &sandbox_id, &launch_id).await {
                Ok(()) => {
                    launched.push(Launched {
                        sandbox_id,
                        launch_id,
                    });
                    break;
                }
                Err(e @ (CliError::Unauthorized(_) | CliError::Tls(_))) => return Err(e),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(e) => {
                    let e = proto::text::escaped(&e.to_string()).into_owned();
                    eprintln!("launching {sandbox_id}: {e}; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
            }
        }
    }
    Ok(launched)
}

/// How long one demo sandbox's launch is retried.
const LAUNCH_RETRY: std::time::Duration = std::time::Duration::from_secs(30);

/// Deletes a live `sandbox_id` of an earlier launch, then creates it under
/// `launch_id`.
async fn launch_one(gw: &Gateway, sandbox_id: &str, launch_id: &str) -> Result<(), CliError> {
    let existing = pool_status(gw).await?;
    let earlier = existing.sandboxes.iter().any(|s| {
        s.id == sandbox_id
            && s.launch_id != launch_id
            && s.phase() != SandboxPhase::Deleted
            && s.phase() != SandboxPhase::Failed
    });
    if earlier {
        gw.ask(gw.client().delete_sandbox(sandbox_id))
            .await
            // The leader may fail it (RuntimeLost: its runtime did not survive
            // the last run) in between: the create decides.
            .map_err(|e| {
                let e = proto::text::escaped(&e.to_string()).into_owned();
                eprintln!("deleting {sandbox_id} of an earlier run: {e}");
            })
            .ok();
    }
    let request = CreateSandboxRequest {
        sandbox_id: sandbox_id.to_string(),
        launch_id: launch_id.to_string(),
        material_ref: "demo".into(),
        request_id: String::new(),
    };
    gw.ask(gw.client().create_sandbox(request)).await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::pool_admin::Sandbox;

    fn sandbox(id: &str, launch_id: &str, phase: SandboxPhase, failure: &str) -> Sandbox {
        Sandbox {
            id: id.into(),
            launch_id: launch_id.into(),
            phase: phase as i32,
            failure: failure.into(),
            pid: 42,
            runtime_address: "127.0.0.1:7400".into(),
            ..Sandbox::default()
        }
    }

    fn launched(n: u32) -> Vec<Launched> {
        (1..=n)
            .map(|i| Launched {
                sandbox_id: format!("demo-{i}"),
                launch_id: format!("demo-{i}@9"),
            })
            .collect()
    }

    /// - given: two demo sandboxes of this run, one running, one of them
    ///   failed (an earlier run's failed generation does not count)
    /// - then: not yet running while one is admitting; an error naming the
    ///   failed one and its reason as soon as it fails; running once both are
    #[test]
    fn a_failed_demo_sandbox_is_named_at_once() {
        let mut status = SupervisorPoolStatus {
            sandboxes: vec![
                sandbox("demo-1", "demo-1@9", SandboxPhase::Assigned, ""),
                sandbox(
                    "demo-2",
                    "demo-2@1",
                    SandboxPhase::Failed,
                    "RuntimeLost: old",
                ),
                sandbox("demo-2", "demo-2@9", SandboxPhase::Admitting, ""),
            ],
            ..SupervisorPoolStatus::default()
        };
        assert_eq!(all_running(&status, &launched(2)).ok(), Some(false));
        status.sandboxes[2] = sandbox(
            "demo-2",
            "demo-2@9",
            SandboxPhase::Failed,
            "RuntimeLost: runtime sbx-demo-2-g2 is gone",
        );
        let err = all_running(&status, &launched(2)).expect_err("failed");
        let text = err.to_string();
        assert!(
            text.contains("demo-2") && text.contains("RuntimeLost: runtime sbx-demo-2-g2 is gone"),
            "{text}"
        );
        status.sandboxes[2] = sandbox("demo-2", "demo-2@9", SandboxPhase::Assigned, "");
        assert_eq!(all_running(&status, &launched(2)).ok(), Some(true));
    }
}

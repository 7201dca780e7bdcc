//! The demo sandboxes of `dev`: deleted and launched afresh on every run.
//! Each runs the runtime's built-in demo workload (`material_ref` `demo`) in
//! the runtime the leader launches for it.

use proto::pool_admin::pool_admin_client::PoolAdminClient;
use proto::pool_admin::{
    CreateSandboxRequest, DeleteSandboxRequest, GetSupervisorPoolStatusRequest,
    SupervisorPoolStatus,
};
use proto::pool_types::SandboxPhase;

use crate::{CliError, Gateway};

/// The pool's status from any gateway.
pub(super) async fn pool_status(gw: &Gateway) -> Result<SupervisorPoolStatus, CliError> {
    gw.call(|c| async move {
        PoolAdminClient::new(c)
            .get_supervisor_pool_status(GetSupervisorPoolStatusRequest {
                stale: false,
                ..Default::default()
            })
            .await
    })
    .await
    .map(|r| r.into_inner())
}

/// Whether every live demo sandbox, and at least `count` of them, is
/// assigned with a workload pid and a recorded runtime address.
pub(super) fn all_running(status: &SupervisorPoolStatus, count: u32) -> bool {
    let live: Vec<_> = status
        .sandboxes
        .iter()
        .filter(|sb| {
            sb.id.starts_with("demo-")
                && sb.phase() != SandboxPhase::Deleted
                && sb.phase() != SandboxPhase::Failed
        })
        .collect();
    let running = live
        .iter()
        .filter(|sb| {
            sb.phase() == SandboxPhase::Assigned && sb.pid != 0 && !sb.runtime_address.is_empty()
        })
        .count();
    running == live.len() && running >= usize::try_from(count).unwrap_or(usize::MAX)
}

/// Launches `demo-1` ..= `demo-<count>`.
///
/// Workloads do not outlive `dev` (Ctrl-C stops the runtimes), so demo
/// sandboxes of an earlier run are deleted and launched afresh: a new
/// generation under a new launch id. Each is retried for up to
/// [`LAUNCH_RETRY`] while the cluster settles (a write right after an
/// election may end "outcome unknown"): the launch id makes a create that
/// did commit answer the same the second time.
pub(super) async fn launch_sandboxes(gw: &Gateway, count: u32) -> Result<(), CliError> {
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    for n in 1..=count {
        let sandbox_id = format!("demo-{n}");
        let launch_id = format!("{sandbox_id}@{run}");
        let deadline = tokio::time::Instant::now() + LAUNCH_RETRY;
        loop {
            match launch_one(gw, &sandbox_id, &launch_id).await {
                Ok(()) => break,
                Err(e @ (CliError::Unauthorized(_) | CliError::Tls(_))) => return Err(e),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(e) => {
                    eprintln!("launching {sandbox_id}: {e}; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
            }
        }
    }
    Ok(())
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
        gw.call(|c| {
            let sandbox_id = sandbox_id.to_string();
            async move {
                PoolAdminClient::new(c)
                    .delete_sandbox(DeleteSandboxRequest {
                        sandbox_id,
                        request_id: String::new(),
                    })
                    .await
            }
        })
        .await
        // The leader may fail it (RuntimeLost: its runtime did not survive
        // the last run) in between: the create decides.
        .map_err(|e| eprintln!("deleting {sandbox_id} of an earlier run: {e}"))
        .ok();
    }
    gw.call(|c| {
        let request = CreateSandboxRequest {
            sandbox_id: sandbox_id.to_string(),
            launch_id: launch_id.to_string(),
            material_ref: "demo".into(),
            request_id: String::new(),
        };
        async move { PoolAdminClient::new(c).create_sandbox(request).await }
    })
    .await
    .map(drop)
}

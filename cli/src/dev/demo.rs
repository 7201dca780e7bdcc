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
            .get_supervisor_pool_status(GetSupervisorPoolStatusRequest { stale: false })
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
/// generation under a new launch id.
pub(super) async fn launch_sandboxes(gw: &Gateway, count: u32) -> Result<(), CliError> {
    let existing = pool_status(gw).await?;
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    for n in 1..=count {
        let sandbox_id = format!("demo-{n}");
        let live = existing.sandboxes.iter().any(|s| {
            s.id == sandbox_id
                && s.phase() != SandboxPhase::Deleted
                && s.phase() != SandboxPhase::Failed
        });
        if live {
            gw.call(|c| {
                let sandbox_id = sandbox_id.clone();
                async move {
                    PoolAdminClient::new(c)
                        .delete_sandbox(DeleteSandboxRequest { sandbox_id })
                        .await
                }
            })
            .await
            // The leader may fail it (RuntimeLost: its runtime did not
            // survive the last run) in between: the create decides.
            .map_err(|e| eprintln!("deleting {sandbox_id} of an earlier run: {e}"))
            .ok();
        }
        gw.call(|c| {
            let request = CreateSandboxRequest {
                sandbox_id: sandbox_id.clone(),
                launch_id: format!("{sandbox_id}@{run}"),
                material_ref: "demo".into(),
            };
            async move { PoolAdminClient::new(c).create_sandbox(request).await }
        })
        .await?;
    }
    Ok(())
}

//! The demo sandboxes of `dev`: deleted and launched afresh on every run.

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
            .await?;
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

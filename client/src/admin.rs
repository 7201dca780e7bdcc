//! The calls an operator makes (the `openshell-pool` CLI's): the raft
//! group's administration (`openshell.cluster.v1.ClusterAdmin`: status,
//! membership, leadership, snapshots, the backup stream) and the pool's
//! operator calls (`openshell.pool_admin.v1.PoolAdmin`: operations, `exec`).
//!
//! They run through the same retry loop as every other call. A membership
//! change is idempotent (adding a learner that is one, removing a node that
//! is gone, promoting a voter change nothing), so it is retried like a read;
//! a gateway that is not the leader names the leader and the next attempt
//! goes there. Starting an operation carries a request id (a retry is
//! answered with the first attempt's operation). Moving the leadership and
//! running a command in a sandbox carry none and must not run twice:
//! [`Repeat::Once`].

use std::time::Duration;

use proto::cluster::cluster_admin_client::ClusterAdminClient;
use proto::cluster::{
    AddLearnerRequest, BackupChunk, BackupRequest, ClusterStatus, MembershipReply, Node,
    PromoteRequest, RemoveRequest, StateDigestReply, StateDigestRequest, StatusRequest,
    TransferLeaderReply, TransferLeaderRequest, TriggerSnapshotReply, TriggerSnapshotRequest,
};
use proto::pool_admin::pool_admin_client::PoolAdminClient;
use proto::pool_admin::{
    start_supervisor_pool_operation_request, CancelSupervisorPoolOperationRequest,
    ExecSandboxRequest, ExecSandboxResponse, StartSupervisorPoolOperationRequest,
    SupervisorPoolOperation,
};
use tonic::Streaming;

use crate::error::Result;
use crate::retry::{Authed, Repeat};
use crate::Client;

/// A kind of pool operation ([`Client::start_operation`]).
pub use start_supervisor_pool_operation_request::Kind as OperationKind;

impl Client {
    /// Runs `call` (one RPC on a channel) through the retry loop.
    async fn admin<T, F, Fut>(&self, operation: &'static str, repeat: Repeat, call: F) -> Result<T>
    where
        F: FnMut(Authed) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, tonic::Status>>,
    {
        Ok(self.endpoints.call(operation, repeat, call).await?.value)
    }

    /// The raft group's status as the leader sees it (`local`: as the
    /// answering gateway sees it).
    ///
    /// # Errors
    /// [`crate::Error`].
    pub async fn cluster_status(&self, local: bool) -> Result<ClusterStatus> {
        self.admin("cluster_status", Repeat::Safe, |c| async move {
            Ok(ClusterAdminClient::new(c)
                .status(StatusRequest { local })
                .await?
                .into_inner())
        })
        .await
    }

    /// Adds `node` as a learner; `blocking`: the answer waits until it
    /// caught up.
    ///
    /// # Errors
    /// [`crate::Error`]; [`crate::Error::NoQuorum`] when the leader cannot
    /// commit the change.
    pub async fn add_learner(&self, node: Node, blocking: bool) -> Result<MembershipReply> {
        self.admin("add_learner", Repeat::Safe, |c| {
            let node = Some(node.clone());
            async move {
                Ok(ClusterAdminClient::new(c)
                    .add_learner(AddLearnerRequest { node, blocking })
                    .await?
                    .into_inner())
            }
        })
        .await
    }

    /// Promotes learner `id` to voter (`force`: even if it lags).
    ///
    /// # Errors
    /// As [`Client::add_learner`].
    pub async fn promote(&self, id: u64, force: bool) -> Result<MembershipReply> {
        self.admin("promote", Repeat::Safe, |c| async move {
            Ok(ClusterAdminClient::new(c)
                .promote(PromoteRequest { id, force })
                .await?
                .into_inner())
        })
        .await
    }

    /// Removes node `id` from the group.
    ///
    /// # Errors
    /// As [`Client::add_learner`].
    pub async fn remove(&self, id: u64) -> Result<MembershipReply> {
        self.admin("remove", Repeat::Safe, |c| async move {
            Ok(ClusterAdminClient::new(c)
                .remove(RemoveRequest { id })
                .await?
                .into_inner())
        })
        .await
    }

    /// Moves the leadership to voter `to` (0: any up-to-date voter).
    ///
    /// # Errors
    /// [`crate::Error`].
    pub async fn transfer_leader(&self, to: u64) -> Result<TransferLeaderReply> {
        self.admin("transfer_leader", Repeat::Once, |c| async move {
            Ok(ClusterAdminClient::new(c)
                .transfer_leader(TransferLeaderRequest { to })
                .await?
                .into_inner())
        })
        .await
    }

    /// The answering gateway's digest of its applied state: now
    /// (`at_index` 0) or right after it applies `at_index`, waiting up to
    /// `wait` for it. Always that gateway's own state (never forwarded):
    /// build a client of one endpoint to digest a given gateway.
    ///
    /// # Errors
    /// [`crate::Error`]; [`crate::Error::Refused`] (`FAILED_PRECONDITION`)
    /// when the gateway applied past `at_index` already.
    pub async fn state_digest(&self, at_index: u64, wait: Duration) -> Result<StateDigestReply> {
        let wait_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
        self.admin("state_digest", Repeat::Safe, |c| async move {
            Ok(ClusterAdminClient::new(c)
                .state_digest(StateDigestRequest { at_index, wait_ms })
                .await?
                .into_inner())
        })
        .await
    }

    /// Has the leader take a snapshot now.
    ///
    /// # Errors
    /// [`crate::Error`].
    pub async fn trigger_snapshot(&self) -> Result<TriggerSnapshotReply> {
        self.admin("trigger_snapshot", Repeat::Safe, |c| async move {
            Ok(ClusterAdminClient::new(c)
                .trigger_snapshot(TriggerSnapshotRequest {})
                .await?
                .into_inner())
        })
        .await
    }

    /// A consistent snapshot from the leader as a stream of chunks (the
    /// first carries the header). Only opening the stream is retried; an
    /// error in the middle of it ends it.
    ///
    /// # Errors
    /// [`crate::Error`].
    pub async fn backup_stream(&self) -> Result<Streaming<BackupChunk>> {
        self.admin("backup_stream", Repeat::Safe, |c| async move {
            Ok(ClusterAdminClient::new(c)
                .backup_stream(BackupRequest {})
                .await?
                .into_inner())
        })
        .await
    }

    /// Starts a pool operation (drain a member, rebalance) moving at most
    /// `max_parallel` sandboxes at once (0: the gateway's default), with
    /// one request id for every attempt: a retry after a lost answer is
    /// answered with the operation the first attempt started
    /// ([`crate::Written::replayed`]), never starts a second one.
    ///
    /// # Errors
    /// [`crate::Error`]; [`crate::Error::RequestIdReused`] never (the id is
    /// fresh).
    pub async fn start_operation(
        &self,
        kind: OperationKind,
        max_parallel: u32,
    ) -> Result<crate::Written<SupervisorPoolOperation>> {
        let request = StartSupervisorPoolOperationRequest {
            operation_id: String::new(),
            kind: Some(kind),
            max_parallel,
            request_id: crate::new_request_id()?,
        };
        self.endpoints
            .write(
                "start_operation",
                request.request_id.clone(),
                request,
                |channel, request| async move {
                    let reply = PoolAdminClient::new(channel)
                        .start_supervisor_pool_operation(request)
                        .await?;
                    let replayed = reply.metadata().contains_key(proto::metadata::REPLAYED);
                    Ok((reply.into_inner(), replayed))
                },
            )
            .await
    }

    /// Cancels the operation `operation_id` (idempotent).
    ///
    /// # Errors
    /// [`crate::Error`].
    pub async fn cancel_operation(&self, operation_id: &str) -> Result<SupervisorPoolOperation> {
        self.admin("cancel_operation", Repeat::Safe, |c| {
            let operation_id = operation_id.to_string();
            async move {
                Ok(PoolAdminClient::new(c)
                    .cancel_supervisor_pool_operation(CancelSupervisorPoolOperationRequest {
                        operation_id,
                    })
                    .await?
                    .into_inner())
            }
        })
        .await
    }

    /// Runs `argv` in the sandbox `sandbox_id` (killed after `timeout`),
    /// at most once.
    ///
    /// # Errors
    /// [`crate::Error`]; [`crate::Error::Unanswered`] when the outcome is
    /// unknown.
    pub async fn exec_sandbox(
        &self,
        sandbox_id: &str,
        argv: &[String],
        timeout: Duration,
    ) -> Result<ExecSandboxResponse> {
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.admin("exec_sandbox", Repeat::Once, |c| {
            let request = ExecSandboxRequest {
                sandbox_id: sandbox_id.to_string(),
                argv: argv.to_vec(),
                timeout_ms,
            };
            async move {
                Ok(PoolAdminClient::new(c)
                    .exec_sandbox(request)
                    .await?
                    .into_inner())
            }
        })
        .await
    }
}

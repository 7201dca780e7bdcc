//! The inbound `openshell.raft.v1.RaftTransport` service.
//!
//! Who may call it: the other gateway replicas of the same cluster. Every call
//! carries the cluster id; a call from another cluster is refused with
//! `PERMISSION_DENIED`. Every call also names the node it is meant for; a
//! call meant for another node is refused with `FAILED_PRECONDITION` and this
//! node's id in the `x-openshell-node-id` metadata ([`refuse_other_node`]),
//! so one process never answers (and counts) as two members. A call that
//! names no node (0) comes from an older sender and is served (rolling
//! upgrade). `Identify` tells a caller which node answers here. A body that
//! does not decode gets `INVALID_ARGUMENT`, never a panic. InstallSnapshot
//! chunks are bounded (size, snapshot id, a snapshot that decodes) before
//! raft sees them ([`crate::network::incoming_snapshot`]).
//!
//! Like openraft's gRPC example, the service holds only what it serves: the
//! `Raft` handle (raft RPCs, read-index, campaign), the peer authenticator,
//! the [`Proposer`] (forwarded writes), the [`ElectionHold`] and the
//! [`Campaigns`] it tells each AppendEntries and Vote answer. It knows
//! nothing of [`crate::node`].

use std::marker::PhantomData;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use openraft::error::RaftError;
use proto::raft::raft_transport_server::RaftTransport;
use proto::raft::{
    forward_response, forward_result, read_index_response, Applied as PbApplied, CampaignRequest,
    CampaignResponse, ForwardBatchRequest, ForwardBatchResponse, ForwardRequest, ForwardResponse,
    ForwardResult, HoldElectionRequest, HoldElectionResponse, IdentifyRequest, IdentifyResponse,
    NotLeader, RaftPayload, ReadIndexRequest, ReadIndexResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::{Request, Response, Status};

use crate::batcher::{check_size, Proposed, Proposer};
use crate::campaign::Campaigns;
use crate::codec;
use crate::leadership::ElectionHold;
use crate::membership;
use crate::network::client::{NODE_ID, REFUSAL_LOG_EVERY};
use crate::network::incoming_snapshot::{IncomingSnapshot, DEFAULT_MAX_SNAPSHOT_BYTES};
use crate::state_machine::StateMachine;
use crate::types::typ::Raft;
use crate::types::{Applied, NodeId};

/// Decides who may call the transport: peers of the same cluster. Who
/// may connect at all is decided by the peer port's mutual TLS (a
/// certificate signed by the cluster's CA); a cluster started with
/// `--insecure` checks only the cluster id.
#[derive(Clone, Debug)]
pub struct PeerAuthenticator {
    /// The cluster every caller must belong to.
    cluster_id: String,
}

impl PeerAuthenticator {
    /// Admits callers of `cluster_id`.
    pub fn new(cluster_id: &str) -> Self {
        PeerAuthenticator {
            cluster_id: cluster_id.to_string(),
        }
    }

    /// Refuses callers of another cluster.
    ///
    /// # Errors
    /// `PERMISSION_DENIED` from another cluster.
    pub fn check(
        &self,
        _metadata: &tonic::metadata::MetadataMap,
        cluster_id: &str,
    ) -> Result<(), Status> {
        self.check_cluster(cluster_id)
    }

    fn check_cluster(&self, cluster_id: &str) -> Result<(), Status> {
        if cluster_id != self.cluster_id {
            tracing::warn!(
                from_cluster = cluster_id,
                "refused raft RPC from another cluster"
            );
            return Err(Status::permission_denied(format!(
                "this node belongs to cluster {:?}, the caller to {:?}",
                self.cluster_id, cluster_id
            )));
        }
        Ok(())
    }
}

/// The raft transport service of one node, for a state machine `SM` (whose
/// `validate` checks forwarded commands).
pub struct TransportService<SM: StateMachine> {
    /// Serves AppendEntries, Vote, InstallSnapshot, ReadIndex and Campaign,
    /// and names the leader in a not-leader reply.
    raft: Raft,
    /// Checks every caller.
    auth: PeerAuthenticator,
    /// Takes forwarded writes (the same batcher as this node's own writes).
    proposer: Proposer,
    /// Serves HoldElection.
    hold: ElectionHold,
    /// This node's id: calls meant for another node are refused.
    me: NodeId,
    /// Bounds InstallSnapshot chunks before raft sees them.
    incoming: IncomingSnapshot<SM>,
    /// Told every AppendEntries and Vote answer ([`Campaigns`]).
    campaigns: Campaigns,
    /// Only `SM::validate` is used; no `SM` value is held.
    machine: PhantomData<fn() -> SM>,
}

impl<SM: StateMachine> TransportService<SM> {
    /// The service over a node's raft handle, peer authenticator, proposer,
    /// election hold and campaign rules.
    pub fn new(
        raft: Raft,
        auth: PeerAuthenticator,
        proposer: Proposer,
        hold: ElectionHold,
        campaigns: Campaigns,
    ) -> Self {
        let me = raft.metrics().borrow().id;
        TransportService {
            campaigns,
            raft,
            me,
            auth,
            proposer,
            hold,
            incoming: IncomingSnapshot::new(DEFAULT_MAX_SNAPSHOT_BYTES),
            machine: PhantomData,
        }
    }

    /// Refuses received snapshots larger than `max_bytes`
    /// ([`IncomingSnapshot`]; default [`DEFAULT_MAX_SNAPSHOT_BYTES`]).
    pub fn with_max_snapshot_bytes(mut self, max_bytes: u64) -> Self {
        self.incoming = IncomingSnapshot::new(max_bytes);
        self
    }

    /// Checks the caller (cluster, token) and that the call is meant for
    /// this node (`target` 0: an older sender that names none).
    fn check_peer(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        cluster_id: &str,
        target: NodeId,
    ) -> Result<(), Status> {
        self.auth.check(metadata, cluster_id)?;
        refuse_other_node(self.me, target)
    }

    fn decode<T: DeserializeOwned>(
        &self,
        request: &Request<RaftPayload>,
        what: &str,
    ) -> Result<T, Status> {
        let payload = request.get_ref();
        self.check_peer(
            request.metadata(),
            &payload.cluster_id,
            payload.target_node_id,
        )?;
        if payload.encoding != codec::ENCODING_V1 {
            return Err(Status::invalid_argument(format!(
                "{what}: encoding {} is not supported (this node speaks {})",
                payload.encoding,
                codec::ENCODING_V1
            )));
        }
        codec::decode(&payload.data, what).map_err(|e| {
            tracing::warn!(error = %e, "malformed raft RPC");
            Status::invalid_argument(e.to_string())
        })
    }

    fn reply<T: Serialize>(&self, value: &T) -> Response<RaftPayload> {
        Response::new(RaftPayload {
            encoding: codec::ENCODING_V1,
            data: codec::encode(value),
            cluster_id: self.auth.cluster_id.clone(),
            // A reply goes back on the caller's own connection.
            target_node_id: 0,
        })
    }

    /// One command's result in a forwarded batch: as [`RaftTransport::forward`]
    /// answers it, with its failures as values instead of statuses.
    fn batch_result(&self, outcome: Result<Applied, Proposed>) -> forward_result::Result {
        match outcome {
            Ok(applied) => forward_result::Result::Applied(PbApplied {
                log_index: applied.log_index,
                response: applied.response,
            }),
            Err(Proposed::NotLeader(_)) => forward_result::Result::NotLeader(self.not_leader()),
            Err(Proposed::Fatal(e)) => forward_result::Result::Unknown(format!("raft: {e}")),
            Err(Proposed::Abandoned(why)) => forward_result::Result::Unknown(why),
            Err(Proposed::ReplyMismatch {
                log_index,
                commands,
                replies,
            }) => forward_result::Result::Unknown(format!(
                "applied at log index {log_index}, but {replies} responses came back for {commands} commands; the response is lost"
            )),
        }
    }

    fn not_leader(&self) -> NotLeader {
        let (leader_id, leader_addr) = membership::leader(&self.raft).unwrap_or((0, String::new()));
        NotLeader {
            leader_id,
            leader_addr,
        }
    }
}

#[tonic::async_trait]
impl<SM: StateMachine> RaftTransport for TransportService<SM> {
    #[tracing::instrument(level = "trace", skip_all)]
    async fn append_entries(
        &self,
        request: Request<RaftPayload>,
    ) -> Result<Response<RaftPayload>, Status> {
        let rpc: openraft::raft::AppendEntriesRequest<crate::types::TypeConfig> =
            self.decode(&request, "append-entries request")?;
        // Before raft answers: the sender may give up on the answer, and
        // this future is then dropped (Campaigns::append_arrived).
        self.campaigns.append_arrived(&rpc.vote);
        let result = self.raft.append_entries(rpc).await;
        self.campaigns.appended(&result);
        Ok(self.reply(&result))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn vote(&self, request: Request<RaftPayload>) -> Result<Response<RaftPayload>, Status> {
        let rpc: openraft::raft::VoteRequest<NodeId> = self.decode(&request, "vote request")?;
        let result = self.raft.vote(rpc.clone()).await;
        // A campaign only queues elections on raft's core (it does not wait
        // for them), so the reply is not held up.
        self.campaigns.voted(&rpc, &result).await;
        Ok(self.reply(&result))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn install_snapshot(
        &self,
        request: Request<RaftPayload>,
    ) -> Result<Response<RaftPayload>, Status> {
        let rpc: openraft::raft::InstallSnapshotRequest<crate::types::TypeConfig> =
            self.decode(&request, "install-snapshot request")?;
        if let Some(complete) = self
            .incoming
            .check(&rpc.meta, rpc.offset, &rpc.data, rpc.done)?
        {
            let id = rpc.meta.snapshot_id.clone();
            tokio::task::spawn_blocking(move || IncomingSnapshot::<SM>::verify(&id, &complete))
                .await
                .map_err(|e| Status::internal(format!("checking the snapshot: {e}")))??;
        }
        let result = self.raft.install_snapshot(rpc).await;
        Ok(self.reply(&result))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn forward(
        &self,
        request: Request<ForwardRequest>,
    ) -> Result<Response<ForwardResponse>, Status> {
        let target = request.get_ref().target_node_id;
        self.check_peer(request.metadata(), &request.get_ref().cluster_id, target)?;
        let request = request.into_inner();
        check_size(&request.command).map_err(|e| Status::invalid_argument(e.to_string()))?;
        // The one check of this node: the forwarding node checked the
        // command with its own build, which during a rolling upgrade may
        // not be this one, and apply may panic on what `validate` refuses.
        SM::validate(&request.command).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let result = match self.proposer.propose(request.command).await {
            Ok(applied) => forward_response::Result::Applied(PbApplied {
                log_index: applied.log_index,
                response: applied.response,
            }),
            Err(Proposed::NotLeader(_)) => forward_response::Result::NotLeader(self.not_leader()),
            Err(Proposed::Fatal(e)) => return Err(Status::unavailable(format!("raft: {e}"))),
            // Outcome unknown: ABORTED is never taken for "not sent".
            Err(Proposed::Abandoned(why)) => return Err(Status::aborted(why)),
            // Applied, but its response is lost: the caller must not retry.
            Err(Proposed::ReplyMismatch {
                log_index,
                commands,
                replies,
            }) => {
                return Err(Status::internal(format!(
                    "applied at log index {log_index}, but {replies} responses came back for {commands} commands; the response is lost"
                )))
            }
        };
        Ok(Response::new(ForwardResponse {
            result: Some(result),
        }))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(commands = request.get_ref().commands.len()))]
    async fn forward_batch(
        &self,
        request: Request<ForwardBatchRequest>,
    ) -> Result<Response<ForwardBatchResponse>, Status> {
        let target = request.get_ref().target_node_id;
        self.check_peer(request.metadata(), &request.get_ref().cluster_id, target)?;
        let commands = request.into_inner().commands;
        // Malformed commands are answered at once; the others are proposed
        // together, each keeping its place in the reply.
        let mut results: Vec<Option<forward_result::Result>> = Vec::with_capacity(commands.len());
        let mut valid = Vec::with_capacity(commands.len());
        for command in commands {
            let checked = check_size(&command)
                .and_then(|()| SM::validate(&command))
                .map_err(|e| e.to_string());
            match checked {
                Ok(()) => {
                    results.push(None);
                    valid.push(command);
                }
                Err(why) => results.push(Some(forward_result::Result::Rejected(why))),
            }
        }
        let mut outcomes = self.proposer.propose_all(valid).await.into_iter();
        let results = results
            .into_iter()
            .map(|result| {
                let result = result.unwrap_or_else(|| match outcomes.next() {
                    Some(outcome) => self.batch_result(outcome),
                    None => forward_result::Result::Unknown("no outcome for the command".into()),
                });
                ForwardResult {
                    result: Some(result),
                }
            })
            .collect();
        Ok(Response::new(ForwardBatchResponse { results }))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn read_index(
        &self,
        request: Request<ReadIndexRequest>,
    ) -> Result<Response<ReadIndexResponse>, Status> {
        let target = request.get_ref().target_node_id;
        self.check_peer(request.metadata(), &request.get_ref().cluster_id, target)?;
        let result = match self.raft.get_read_log_id().await {
            Ok((read_log_id, _)) => {
                read_index_response::Result::ReadIndex(read_log_id.map(|l| l.index).unwrap_or(0))
            }
            Err(RaftError::APIError(_)) => {
                read_index_response::Result::NotLeader(self.not_leader())
            }
            Err(e) => return Err(Status::unavailable(format!("raft: {e}"))),
        };
        Ok(Response::new(ReadIndexResponse {
            result: Some(result),
        }))
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn hold_election(
        &self,
        request: Request<HoldElectionRequest>,
    ) -> Result<Response<HoldElectionResponse>, Status> {
        let target = request.get_ref().target_node_id;
        self.check_peer(request.metadata(), &request.get_ref().cluster_id, target)?;
        let request = request.into_inner();
        if request.hold_ms == 0 || request.hold_ms > 60_000 {
            return Err(Status::invalid_argument("hold_ms must be within 1..=60000"));
        }
        self.hold.hold(Duration::from_millis(request.hold_ms));
        Ok(Response::new(HoldElectionResponse {}))
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn campaign(
        &self,
        request: Request<CampaignRequest>,
    ) -> Result<Response<CampaignResponse>, Status> {
        let target = request.get_ref().target_node_id;
        self.check_peer(request.metadata(), &request.get_ref().cluster_id, target)?;
        self.raft
            .trigger()
            .elect()
            .await
            .map_err(|e| Status::unavailable(format!("raft: {e}")))?;
        Ok(Response::new(CampaignResponse {}))
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn identify(
        &self,
        request: Request<IdentifyRequest>,
    ) -> Result<Response<IdentifyResponse>, Status> {
        self.check_peer(request.metadata(), &request.get_ref().cluster_id, 0)?;
        Ok(Response::new(IdentifyResponse {
            node_id: self.me,
            cluster_id: self.auth.cluster_id.clone(),
        }))
    }
}

/// Refuses a call meant for node `target` on node `me` (0: the sender
/// predates the field and names no node, so the call is served).
///
/// # Errors
/// `FAILED_PRECONDITION`, with `me` in the [`NODE_ID`] metadata, when
/// `target` is another node.
pub fn refuse_other_node(me: NodeId, target: NodeId) -> Result<(), Status> {
    if target == 0 || target == me {
        return Ok(());
    }
    if refusal_log_due() {
        tracing::warn!(
            me,
            meant_for = target,
            "refused a raft RPC meant for node {target}: this is node {me}; the membership holds this node's address for node {target}"
        );
    }
    let mut status = Status::failed_precondition(format!(
        "this is node {me}, not node {target}: the caller's membership holds a wrong address for node {target}"
    ));
    status
        .metadata_mut()
        .insert(NODE_ID, tonic::metadata::MetadataValue::from(me));
    Err(status)
}

/// Whether a refusal of a call meant for another node should be logged now:
/// at most once every [`REFUSAL_LOG_EVERY`] per process (the leader retries
/// such calls every heartbeat).
fn refusal_log_due() -> bool {
    static LAST: Mutex<Option<Instant>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    if last.is_some_and(|at| at.elapsed() < REFUSAL_LOG_EVERY) {
        return false;
    }
    *last = Some(Instant::now());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_of_another_cluster_are_refused() {
        let auth = PeerAuthenticator::new("blue");
        assert!(auth.check(&Default::default(), "blue").is_ok());
        let refused = auth.check(&Default::default(), "green");
        assert_eq!(
            refused.map_err(|s| s.code()),
            Err(tonic::Code::PermissionDenied)
        );
    }

    #[test]
    fn calls_meant_for_another_node_are_refused() {
        assert!(refuse_other_node(3, 3).is_ok());
        assert!(
            refuse_other_node(3, 0).is_ok(),
            "an older sender names no node"
        );
        let refused = refuse_other_node(3, 4).map_err(|s| {
            let id = s
                .metadata()
                .get(NODE_ID)
                .and_then(|v| v.to_str().ok().map(str::to_string));
            (s.code(), id)
        });
        assert_eq!(
            refused,
            Err((tonic::Code::FailedPrecondition, Some("3".to_string())))
        );
    }
}

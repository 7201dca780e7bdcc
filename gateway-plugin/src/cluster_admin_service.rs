//! `openshell.cluster.v1.ClusterAdmin`: bootstrap, membership, leadership
//! transfer, snapshots and status.
//!
//! Who may call it: operators (through `openshell-pool raft ...`) and
//! automation. Any gateway serves it: a follower forwards mutating calls to the
//! leader (one hop, marked with `x-openshell-forwarded`); `Status` answers with
//! the leader's view unless `local` is set or no leader is known.

use proto::client::{self, Role as ClientRole};
use proto::cluster::cluster_admin_client::ClusterAdminClient;
use proto::cluster::cluster_admin_server::ClusterAdmin;
use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use proto::cluster::{
    AddLearnerRequest, BackupChunk, BackupReply, BackupRequest, ClusterStatus as PbStatus,
    InitializeRequest, MembershipReply, PromoteRequest, RemoveRequest, StateDigestReply,
    StateDigestRequest, StatusRequest, TransferLeaderReply, TransferLeaderRequest,
    TriggerSnapshotReply, TriggerSnapshotRequest,
};
use raft_store::{AdminError, RaftNode};
use tonic::{Request, Response, Status};

use crate::audit::Record;
use crate::auth::{Auth, Role};
use crate::convert::from_proto;
use crate::convert::to_proto::{self, cluster_status, membership_reply};
use crate::metrics::Metrics;
use crate::state::GatewayState;
use crate::status::{self, FORWARDED};

/// How long a `StateDigest` for a future index waits by default, and at
/// most.
const DIGEST_WAIT_DEFAULT_MS: u32 = 5_000;
const DIGEST_WAIT_MAX_MS: u32 = 30_000;

/// The chunks of a `BackupStream`.
type BackupChunks = Pin<Box<dyn Stream<Item = Result<BackupChunk, Status>> + Send>>;

/// The cluster admin service of one gateway.
pub struct ClusterAdminService {
    node: RaftNode<GatewayState>,
    auth: Auth,
    metrics: Metrics,
}

impl ClusterAdminService {
    /// The service of `node`, checking callers with `auth`.
    pub fn new(node: RaftNode<GatewayState>, auth: Auth, metrics: Metrics) -> Self {
        ClusterAdminService {
            node,
            auth,
            metrics,
        }
    }

    fn allow<T>(&self, request: &Request<T>, role: Role) -> Result<(), Status> {
        self.auth
            .require(request, role, "cluster_admin", &self.metrics)
            .map(drop)
    }

    /// A client of the leader when another node leads and the request was
    /// not forwarded already (backups are taken on the leader).
    async fn client_of_other_leader<T>(
        &self,
        request: &Request<T>,
    ) -> Option<ClusterAdminClient<tonic::transport::Channel>> {
        let (leader_id, leader_addr) =
            self.node.leader().filter(|(id, _)| *id != self.node.id())?;
        let err = AdminError::NotLeader {
            leader_id,
            leader_addr,
        };
        self.leader_client(request, &err).await
    }

    /// A client to the leader, when this node is not it and the call was not
    /// already forwarded.
    async fn leader_client<T>(
        &self,
        request: &Request<T>,
        err: &AdminError,
    ) -> Option<ClusterAdminClient<tonic::transport::Channel>> {
        let AdminError::NotLeader { leader_addr, .. } = err else {
            return None;
        };
        if request.metadata().contains_key(FORWARDED) {
            return None;
        }
        // The leader's peer port, with this gateway's peer TLS.
        let config = self.node.peer_client_config(ClientRole::Forwarding);
        let channel = client::connect(ClientRole::Forwarding, leader_addr, &config)
            .await
            .ok()?;
        Some(ClusterAdminClient::new(channel))
    }
}

impl ClusterAdminService {
    /// The call to replay on the leader: same message and credential (the
    /// caller's token, or the role this gateway vouches for a caller it
    /// identified by certificate), marked as forwarded.
    fn forwarded<T>(&self, original: Request<T>) -> Request<T> {
        let carried = self.auth.carried(&original);
        Self::replay(&carried, original.into_inner())
    }

    /// `message` as a forwarded call carrying `carried`.
    fn replay<T>(carried: &crate::auth::Carried, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request
            .metadata_mut()
            .insert(FORWARDED, tonic::metadata::MetadataValue::from_static("1"));
        carried.apply(request.metadata_mut());
        request
    }
}

/// Runs `local` here; on `NotLeader`, replays the call on the leader.
macro_rules! on_leader {
    ($self:ident, $request:ident, $local:expr, $remote:ident) => {{
        match $local {
            Ok(reply) => Ok(Response::new(reply)),
            Err(err) => match $self.leader_client(&$request, &err).await {
                Some(mut leader) => leader.$remote($self.forwarded($request)).await,
                None => Err(status::admin(err)),
            },
        }
    }};
}

#[tonic::async_trait]
impl ClusterAdmin for ClusterAdminService {
    #[tracing::instrument(level = "info", skip_all)]
    async fn initialize(
        &self,
        request: Request<InitializeRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        let voters = from_proto::initial_voters(request.get_ref())
            .iter()
            .map(|(id, _)| id.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let record = Record::start(
            "raft.initialize",
            &self.auth,
            &request,
            &[("voters", voters.as_str())],
        );
        record.finish(self.initialize_audited(request).await)
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn add_learner(
        &self,
        request: Request<AddLearnerRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        let node = request.get_ref().node.clone().unwrap_or_default();
        let id = node.id.to_string();
        let record = Record::start(
            "raft.add_learner",
            &self.auth,
            &request,
            &[("node_id", id.as_str()), ("addr", node.addr.as_str())],
        );
        record.finish(self.add_learner_audited(request).await)
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn promote(
        &self,
        request: Request<PromoteRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        let node_id = request.get_ref().id.to_string();
        let record = Record::start(
            "raft.promote",
            &self.auth,
            &request,
            &[("node_id", node_id.as_str())],
        );
        record.finish(self.promote_audited(request).await)
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn remove(
        &self,
        request: Request<RemoveRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        let node_id = request.get_ref().id.to_string();
        let record = Record::start(
            "raft.remove",
            &self.auth,
            &request,
            &[("node_id", node_id.as_str())],
        );
        record.finish(self.remove_audited(request).await)
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn transfer_leader(
        &self,
        request: Request<TransferLeaderRequest>,
    ) -> Result<Response<TransferLeaderReply>, Status> {
        let to = request.get_ref().to.to_string();
        let record = Record::start(
            "raft.transfer_leader",
            &self.auth,
            &request,
            &[("to", to.as_str())],
        );
        record.finish(self.transfer_leader_audited(request).await)
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn trigger_snapshot(
        &self,
        request: Request<TriggerSnapshotRequest>,
    ) -> Result<Response<TriggerSnapshotReply>, Status> {
        let record = Record::start("raft.trigger_snapshot", &self.auth, &request, &[]);
        record.finish(self.trigger_snapshot_audited(request).await)
    }

    type BackupStreamStream = BackupChunks;

    #[tracing::instrument(level = "info", skip_all)]
    async fn backup_stream(
        &self,
        request: Request<BackupRequest>,
    ) -> Result<Response<BackupChunks>, Status> {
        let record = Record::start("backup", &self.auth, &request, &[]);
        record.finish(self.backup_stream_audited(request).await)
    }

    #[tracing::instrument(level = "info", skip_all)]
    async fn backup(
        &self,
        request: Request<BackupRequest>,
    ) -> Result<Response<BackupReply>, Status> {
        let record = Record::start("backup", &self.auth, &request, &[]);
        record.finish(self.backup_audited(request).await)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn state_digest(
        &self,
        request: Request<StateDigestRequest>,
    ) -> Result<Response<StateDigestReply>, Status> {
        self.allow(&request, Role::Viewer)?;
        let StateDigestRequest { at_index, wait_ms } = *request.get_ref();
        let wait_ms = match wait_ms {
            0 => DIGEST_WAIT_DEFAULT_MS,
            ms => ms.min(DIGEST_WAIT_MAX_MS),
        };
        let digest = self
            .node
            .state_digest_at(at_index, std::time::Duration::from_millis(wait_ms.into()))
            .await
            .map_err(|e| status::digest(&e))?;
        Ok(Response::new(to_proto::state_digest_reply(
            self.node.id(),
            digest,
        )))
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn status(&self, request: Request<StatusRequest>) -> Result<Response<PbStatus>, Status> {
        self.allow(&request, Role::Viewer)?;
        let local = self.node.status();
        let leader_elsewhere = local
            .leader
            .as_ref()
            .filter(|(id, _)| *id != self.node.id())
            .cloned();
        if let (false, false, Some((leader_id, leader_addr))) = (
            request.get_ref().local,
            request.metadata().contains_key(FORWARDED),
            leader_elsewhere,
        ) {
            let err = AdminError::NotLeader {
                leader_id,
                leader_addr,
            };
            if let Some(mut leader) = self.leader_client(&request, &err).await {
                if let Ok(reply) = leader
                    .status(Self::replay(
                        &self.auth.carried(&request),
                        *request.get_ref(),
                    ))
                    .await
                {
                    return Ok(reply);
                }
            }
        }
        let node = self.node.clone();
        let data_size = tokio::task::spawn_blocking(move || node.data_size_bytes())
            .await
            .unwrap_or(0);
        Ok(Response::new(cluster_status(local, data_size)))
    }
}

impl ClusterAdminService {
    /// `initialize` without its audit record.
    async fn initialize_audited(
        &self,
        request: Request<InitializeRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        let list = from_proto::initial_voters(request.get_ref());
        self.node
            .initialize(list)
            .await
            .map(|c| Response::new(membership_reply(c)))
            .map_err(status::admin)
    }

    /// `add_learner` without its audit record.
    async fn add_learner_audited(
        &self,
        request: Request<AddLearnerRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        let Some(node) = request.get_ref().node.clone() else {
            return Err(Status::invalid_argument("node is required"));
        };
        let local = self
            .node
            .add_learner(node.id, &node.addr, request.get_ref().blocking)
            .await;
        on_leader!(self, request, local.map(membership_reply), add_learner)
    }

    /// `promote` without its audit record.
    async fn promote_audited(
        &self,
        request: Request<PromoteRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        let local = self
            .node
            .promote(request.get_ref().id, request.get_ref().force)
            .await;
        on_leader!(self, request, local.map(membership_reply), promote)
    }

    /// `remove` without its audit record.
    async fn remove_audited(
        &self,
        request: Request<RemoveRequest>,
    ) -> Result<Response<MembershipReply>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        let local = self.node.remove(request.get_ref().id).await;
        on_leader!(self, request, local.map(membership_reply), remove)
    }

    /// `transfer_leader` without its audit record.
    async fn transfer_leader_audited(
        &self,
        request: Request<TransferLeaderRequest>,
    ) -> Result<Response<TransferLeaderReply>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        let to = Some(request.get_ref().to).filter(|id| *id != 0);
        let local = self.node.transfer_leader(to).await;
        on_leader!(
            self,
            request,
            local.map(to_proto::transfer_leader_reply),
            transfer_leader
        )
    }

    /// `trigger_snapshot` without its audit record.
    async fn trigger_snapshot_audited(
        &self,
        request: Request<TriggerSnapshotRequest>,
    ) -> Result<Response<TriggerSnapshotReply>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        // Every node snapshots on its own; this one is asked to now.
        let _ = request;
        self.node
            .trigger_snapshot()
            .await
            .map(|snapshot_index| Response::new(TriggerSnapshotReply { snapshot_index }))
            .map_err(status::admin)
    }

    /// `backup` without its audit record.
    async fn backup_audited(
        &self,
        request: Request<BackupRequest>,
    ) -> Result<Response<BackupReply>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        if let Some(leader) = self.client_of_other_leader(&request).await {
            return leader
                .max_decoding_message_size(64 * 1024 * 1024)
                .backup(self.forwarded(request))
                .await;
        }
        let backup = self.node.backup().await.map_err(status::read)?;
        Ok(Response::new(to_proto::backup_reply(
            self.node.cluster_id(),
            self.node.id(),
            backup,
        )))
    }
}

impl ClusterAdminService {
    /// `backup_stream` without its audit record: on a follower, the
    /// leader's stream relayed chunk by chunk; on the leader, the state
    /// taken after read-index, in chunks of [`proto::backup::CHUNK_BYTES`].
    async fn backup_stream_audited(
        &self,
        request: Request<BackupRequest>,
    ) -> Result<Response<BackupChunks>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        if let Some(mut leader) = self.client_of_other_leader(&request).await {
            let relayed = leader
                .backup_stream(self.forwarded(request))
                .await?
                .into_inner();
            return Ok(Response::new(Box::pin(relayed) as BackupChunks));
        }
        let (term, index, state) = self.node.backup().await.map_err(status::read)?;
        let header = proto::backup::BackupHeader::for_state(
            self.node.cluster_id().to_string(),
            term,
            index,
            self.node.id(),
            &state,
        );
        let first = BackupChunk {
            cluster_id: header.cluster_id,
            term,
            index,
            taken_by_node: header.taken_by_node,
            bytes: header.bytes,
            crc32: header.crc32,
            data: Vec::new(),
        };
        Ok(Response::new(Box::pin(backup_chunks(
            first,
            Arc::new(state),
        ))))
    }
}

/// The chunks of `state`: `first` (the header) carries the first part, every
/// chunk at most [`proto::backup::CHUNK_BYTES`] of data; an empty state is
/// the header alone. Each chunk is copied out only when the stream is
/// polled, so a slow reader holds one chunk in flight, not a copy of the state.
fn backup_chunks(
    first: BackupChunk,
    state: Arc<Vec<u8>>,
) -> impl Stream<Item = Result<BackupChunk, Status>> + Send {
    let parts = state.len().div_ceil(proto::backup::CHUNK_BYTES).max(1);
    futures::stream::iter(0..parts).map(move |i| {
        let start = i * proto::backup::CHUNK_BYTES;
        let end = (start + proto::backup::CHUNK_BYTES).min(state.len());
        let data = state.get(start..end).unwrap_or_default().to_vec();
        let header = if i == 0 {
            first.clone()
        } else {
            BackupChunk::default()
        };
        Ok(BackupChunk { data, ..header })
    })
}

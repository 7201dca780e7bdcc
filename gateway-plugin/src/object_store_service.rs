//! `openshell.objects.v1.ObjectStore`: the gateway's generic object store.
//!
//! Who may call it: the gateway's own components and operators. Any gateway
//! serves every call: writes are forwarded to the leader by raft-store, reads
//! are linearizable through read-index unless `stale` is set.
//!
//! An object's `type` and `id` are identifiers (`proto::ids`: 1 to 128
//! characters of `[A-Za-z0-9._-]`, not starting with `.` or `-`); a put,
//! delete or get naming another is refused with `INVALID_ARGUMENT` before
//! anything is proposed or read.
//!
//! A failed precondition is `ALREADY_EXISTS` (must-create), `NOT_FOUND` or
//! `FAILED_PRECONDITION` (resource version mismatch); the current resource
//! version travels in `x-openshell-resource-version`. These are certain
//! failures: nothing changed. `UNKNOWN` means the outcome is unknown.
//!
//! A put or delete may carry a client `request_id` ([`crate::requests`]):
//! apply answers a retry of it with the first attempt's outcome
//! (`replayed` set) instead of applying it twice, so the write is safe to
//! resend, and this gateway itself resends it across a leader change
//! (`RaftNode::write_idempotent`) instead of answering `UNKNOWN` at once.
//! The id names one write: another put or delete under a remembered id is
//! refused with `FAILED_PRECONDITION` carrying
//! [`status::REQUEST_ID_REUSED`], and nothing is written.

use proto::objects::object_store_server::ObjectStore;
use proto::objects::{
    object_command, object_result, DeleteRequest, DeleteResponse, GetRequest, GetResponse,
    ListRequest, ListResponse, ObjectCommand, PutRequest, PutResponse, WatchRequest, WatchResponse,
};
use raft_store::RaftNode;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::auth::{Auth, Role};
use crate::metrics::Metrics;
use crate::object_watch::Watchers;
use crate::state::{GatewayState, Replied, Reply};
use crate::status;

pub use crate::status::RESOURCE_VERSION;

/// The object store service of one gateway.
pub struct ObjectStoreService {
    node: RaftNode<GatewayState>,
    auth: Auth,
    metrics: Metrics,
    watchers: Watchers,
}

impl ObjectStoreService {
    /// The service of `node`, checking callers with `auth`; its watchers
    /// end when `stopping` turns true.
    pub fn new(
        node: RaftNode<GatewayState>,
        auth: Auth,
        metrics: Metrics,
        stopping: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        ObjectStoreService {
            watchers: Watchers::new(node.clone(), stopping, metrics.clone()),
            node,
            auth,
            metrics,
        }
    }

    fn allow<T>(&self, request: &Request<T>, role: Role) -> Result<(), Status> {
        self.auth
            .require(request, role, "object_store", &self.metrics)
            .map(drop)
    }

    /// Proposes one write; returns its result, the log index of the
    /// entry that carried it, and whether the result is a replay of an
    /// earlier attempt with the same request id.
    async fn propose(
        &self,
        op: object_command::Op,
        request_id: &str,
    ) -> Result<(object_result::Result, u64, bool), Status> {
        crate::requests::check_request_id(request_id).map_err(Status::invalid_argument)?;
        // Validated once, by the node the write enters (`RaftNode::write`:
        // a malformed command is INVALID_ARGUMENT), not here again.
        let command = GatewayState::object_command(ObjectCommand { op: Some(op) });
        let applied = if request_id.is_empty() {
            self.node.write(command).await
        } else {
            let timeout = self.node.config().write_timeout;
            self.node.write_idempotent(command, timeout).await
        }
        .map_err(status::write)?;
        let Replied { reply, replayed } =
            GatewayState::reply(&applied.response).map_err(Status::internal)?;
        let result = match (reply, replayed) {
            (Reply::RequestIdReused { first }, _) => {
                return Err(status::request_id_reused(request_id, first))
            }
            (Reply::Objects(result), _) => result
                .result
                .ok_or_else(|| Status::internal("empty object-store result"))?,
            // A replayed pool outcome: the id's record predates
            // fingerprints, but it was another write all the same.
            (Reply::Pool(_), Some(first)) => {
                return Err(status::request_id_reused(request_id, first))
            }
            (Reply::Pool(_), None) => {
                return Err(Status::internal(
                    "an object-store write answered with a pool outcome",
                ))
            }
        };
        // A replay answers with the index that applied the write.
        let log_index = replayed.unwrap_or(applied.log_index);
        Ok((result, log_index, replayed.is_some()))
    }
}

#[tonic::async_trait]
impl ObjectStore for ObjectStoreService {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn put(&self, request: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        let request = request.into_inner();
        let request_id = request.request_id.clone();
        match self
            .propose(object_command::Op::Put(request), &request_id)
            .await?
        {
            (object_result::Result::Put(object), log_index, replayed) => {
                Ok(Response::new(PutResponse {
                    object: Some(object),
                    log_index,
                    replayed,
                }))
            }
            (object_result::Result::Rejected(r), ..) => Err(status::object_rejection(r)),
            // A replayed delete: the id's record predates fingerprints,
            // but it was another write all the same.
            (object_result::Result::Deleted(_), first, true) => {
                Err(status::request_id_reused(&request_id, first))
            }
            (object_result::Result::Deleted(_), _, false) => {
                Err(Status::internal("put answered as a delete"))
            }
        }
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn delete(
        &self,
        request: Request<DeleteRequest>,
    ) -> Result<Response<DeleteResponse>, Status> {
        self.allow(&request, Role::PlatformAdmin)?;
        let request = request.into_inner();
        let request_id = request.request_id.clone();
        match self
            .propose(object_command::Op::Delete(request), &request_id)
            .await?
        {
            (object_result::Result::Deleted(d), _, replayed) => {
                Ok(Response::new(DeleteResponse { replayed, ..d }))
            }
            (object_result::Result::Rejected(r), ..) => Err(status::object_rejection(r)),
            // As in put: a replayed put is a reused id.
            (object_result::Result::Put(_), first, true) => {
                Err(status::request_id_reused(&request_id, first))
            }
            (object_result::Result::Put(_), _, false) => {
                Err(Status::internal("delete answered as a put"))
            }
        }
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn get(&self, request: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        self.allow(&request, Role::Viewer)?;
        let request = request.into_inner();
        // Jepsen fault injection (`crate::fault`, never on by default):
        // every read is served from local state without read-index.
        let request = GetRequest {
            stale: request.stale || crate::fault::stale_reads(),
            ..request
        };
        status::check_id("type", &request.r#type)?;
        status::check_id("id", &request.id)?;
        let read = |state: &GatewayState, index: u64| {
            (
                state.objects.get(&request.r#type, &request.id).cloned(),
                index,
            )
        };
        let (object, read_index) = if request.stale {
            self.node.read_local(read)
        } else {
            self.node.read(read).await.map_err(status::read)?
        };
        match object {
            Some(object) => Ok(Response::new(GetResponse {
                object: Some(object),
                read_index,
            })),
            None => Err(Status::not_found(format!(
                "object {}/{} does not exist",
                request.r#type, request.id
            ))),
        }
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn list(&self, request: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        self.allow(&request, Role::Viewer)?;
        let request = request.into_inner();
        // Jepsen fault injection (`crate::fault`), as in `get`.
        let request = ListRequest {
            stale: request.stale || crate::fault::stale_reads(),
            ..request
        };
        let list = |state: &GatewayState, index: u64| {
            (
                state.objects.list(
                    &request.r#type,
                    &request.scope,
                    request.page_size,
                    &request.page_token,
                ),
                index,
            )
        };
        let (page, read_index) = if request.stale {
            self.node.read_local(list)
        } else {
            self.node.read(list).await.map_err(status::read)?
        };
        let page = page.map_err(|e| Status::invalid_argument(e.to_string()))?;
        Ok(Response::new(crate::convert::to_proto::list_response(
            page, read_index,
        )))
    }

    type WatchStream = ReceiverStream<Result<WatchResponse, Status>>;

    /// See [`crate::object_watch`].
    #[tracing::instrument(level = "debug", skip_all)]
    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        self.allow(&request, Role::Viewer)?;
        let rx = self.watchers.start(request.into_inner()).await?;
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

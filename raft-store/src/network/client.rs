//! Outbound raft RPCs: openraft's `RaftNetworkFactory` over tonic.
//!
//! One HTTP/2 channel per peer address, created lazily and shared by every
//! call to that peer (connection reuse). Each call carries openraft's TTL as
//! its gRPC deadline; connecting has its own timeout.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use proto::raft::raft_transport_client::RaftTransportClient;
use proto::raft::RaftPayload;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tonic::transport::{Channel, Endpoint};

use crate::codec;
use crate::network::MAX_MESSAGE_BYTES;
use crate::{NodeId, TypeConfig};

/// How long a connection attempt to a peer may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// Metadata key of the peer token on raft transport calls.
pub const PEER_TOKEN: &str = "x-openshell-peer-token";

/// Adds the peer token to every outbound raft transport call.
#[derive(Clone)]
pub struct PeerAuth(Option<tonic::metadata::AsciiMetadataValue>);

impl tonic::service::Interceptor for PeerAuth {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            request.metadata_mut().insert(PEER_TOKEN, token.clone());
        }
        Ok(request)
    }
}

/// A raft transport client to one peer.
pub type TransportClient =
    RaftTransportClient<tonic::service::interceptor::InterceptedService<Channel, PeerAuth>>;

/// Channels to peers, shared by the raft network and by write forwarding.
#[derive(Clone)]
pub struct Channels {
    cluster_id: Arc<str>,
    auth: PeerAuth,
    /// Address -> channel. A std lock: held only to look up or insert.
    by_addr: Arc<Mutex<BTreeMap<String, Channel>>>,
}

impl Channels {
    /// Channels of a node of `cluster_id`, presenting `peer_token` (if any)
    /// on every call.
    pub fn new(cluster_id: &str, peer_token: Option<&str>) -> Self {
        Channels {
            cluster_id: cluster_id.into(),
            auth: PeerAuth(peer_token.and_then(|t| t.parse().ok())),
            by_addr: Arc::default(),
        }
    }

    /// The cluster id every outbound call carries.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// A client to the peer at `addr` (host:port), reusing its channel.
    ///
    /// # Errors
    /// A description when `addr` is not a valid address.
    pub fn client(&self, addr: &str) -> Result<TransportClient, String> {
        let mut map = self.by_addr.lock().unwrap_or_else(|p| p.into_inner());
        let channel = match map.get(addr) {
            Some(c) => c.clone(),
            None => {
                let endpoint = Endpoint::from_shared(format!("http://{addr}"))
                    .map_err(|e| format!("invalid peer address {addr:?}: {e}"))?
                    .connect_timeout(CONNECT_TIMEOUT)
                    .tcp_nodelay(true)
                    .http2_keep_alive_interval(Duration::from_secs(10))
                    .keep_alive_timeout(Duration::from_secs(5));
                let channel = endpoint.connect_lazy();
                map.insert(addr.to_string(), channel.clone());
                channel
            }
        };
        Ok(
            RaftTransportClient::with_interceptor(channel, self.auth.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        )
    }

    /// Wraps an openraft message for the wire.
    pub fn payload<T: Serialize>(&self, value: &T) -> RaftPayload {
        RaftPayload {
            encoding: codec::ENCODING_V1,
            data: codec::encode(value),
            cluster_id: self.cluster_id.to_string(),
        }
    }
}

/// openraft's network factory: one [`PeerClient`] per target.
#[derive(Clone)]
pub struct NetworkFactory {
    channels: Channels,
}

impl NetworkFactory {
    /// A factory over shared channels.
    pub fn new(channels: Channels) -> Self {
        NetworkFactory { channels }
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        PeerClient {
            target,
            addr: node.addr.clone(),
            channels: self.channels.clone(),
        }
    }
}

/// Raft RPCs to one peer.
pub struct PeerClient {
    target: NodeId,
    addr: String,
    channels: Channels,
}

/// Which RPC to call.
enum Rpc {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

impl PeerClient {
    async fn call<Req, Resp, E>(
        &self,
        rpc: Rpc,
        request: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let mut client = self
            .channels
            .client(&self.addr)
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&Msg(e))))?;
        let mut grpc = tonic::Request::new(self.channels.payload(request));
        grpc.set_timeout(option.hard_ttl());
        let reply = match rpc {
            Rpc::AppendEntries => client.append_entries(grpc).await,
            Rpc::Vote => client.vote(grpc).await,
            Rpc::InstallSnapshot => client.install_snapshot(grpc).await,
        };
        let reply = reply.map_err(|status| match status.code() {
            tonic::Code::Unavailable => RPCError::Unreachable(Unreachable::new(&status)),
            _ => RPCError::Network(NetworkError::new(&status)),
        })?;
        let result: Result<Resp, RaftError<NodeId, E>> = codec::decode(
            &reply.into_inner().data,
            format!("reply from node {}", self.target),
        )
        .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                BasicNode::new(&self.addr),
                e,
            ))
        })
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(Rpc::AppendEntries, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(Rpc::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(Rpc::Vote, &rpc, &option).await
    }
}

/// A plain message as an error.
#[derive(Debug)]
struct Msg(String);

impl std::fmt::Display for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Msg {}

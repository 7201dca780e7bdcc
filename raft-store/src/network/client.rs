//! Every outbound call to a peer replica: openraft's `RaftNetworkFactory`
//! over tonic, forwarding a write to the leader ([`Channels::forward`]), the
//! remote read-index ([`Channels::read_index`]), the two calls of a
//! leadership transfer ([`Channels::hold_election`], [`Channels::campaign`])
//! and asking an address which node answers there ([`Channels::identify`]).
//!
//! Every raft call names the node it is meant for (`target_node_id`); a
//! peer that is another node refuses it, and [`PeerClient`] logs that
//! refusal (at most every [`REFUSAL_LOG_EVERY`] per target) as a wrong
//! address in the membership. [`AppendAcks`] records when each target last
//! acknowledged an append (openraft 0.9 has no such metric): a promotion
//! checks it.
//!
//! One HTTP/2 channel per peer address, built by the workspace's one channel
//! builder (`proto::client::connect`, role `Peer`), connected lazily and
//! shared by every call to that peer (connection reuse). Each raft call carries openraft's
//! TTL as its gRPC deadline, a forward or read-index the caller's deadline;
//! connecting has its own timeout. A dead connection that never closes is
//! noticed by the channel's HTTP/2 keep-alive, and a channel whose calls
//! keep timing out is replaced by a fresh connection
//! ([`super::channel_cache`]).
//!
//! Every raft message is bounded by the node's `max_message_bytes`
//! (tonic's encode and decode limits on both ends). An AppendEntries whose
//! encoding is over it is not sent: [`PeerClient`] answers openraft with
//! [`PayloadTooLarge`] and an entries hint ([`entries_hint`]), and openraft
//! retries at once with that many entries. A peer that refuses a message as
//! too large (`OUT_OF_RANGE`/`RESOURCE_EXHAUSTED`, e.g. a smaller limit
//! there) is answered the same way, halving the batch. One entry always
//! fits (`codec::MIN_MESSAGE_BYTES`); should one not, the error names the
//! entry and the limit (openraft retries it at its heartbeat pace, logged).
//!
//! [`never_sent`] ([`super::sent`]) decides from a failed call's typed error source whether
//! the request certainly never reached the peer, which is when a write may
//! be retried without risk of applying it twice.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use proto::client::{connect, connect_via, ClientConfig, ClientError, Dialer, Role};
use proto::raft::raft_transport_client::RaftTransportClient;
use proto::raft::{
    forward_response, read_index_response, CampaignRequest, ForwardRequest, HoldElectionRequest,
    IdentifyRequest, RaftPayload, ReadIndexRequest,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;
use tonic::transport::Channel;
use tracing::Instrument;

use super::channel_cache::{CallWatch, ChannelCache};
pub use super::sent::{never_sent, PeerCallError};
use crate::codec::{self, MAX_MESSAGE_BYTES};
use crate::error::WriteError;
use crate::types::{Applied, NodeId, TypeConfig};

/// Metadata key of the receiver's own node id on a refusal of a call meant
/// for another node.
pub const NODE_ID: &str = "x-openshell-node-id";

/// How often a refusal by a peer that is another node is logged per target
/// (heartbeats retry it every few tens of milliseconds).
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// When each target last acknowledged an append from this node (as leader).
/// Cloning shares it. A std lock: held only to read or write one entry.
#[derive(Clone, Debug, Default)]
pub struct AppendAcks(Arc<Mutex<BTreeMap<NodeId, Instant>>>);

impl AppendAcks {
    /// Notes that `target` acknowledged an append now.
    pub fn record(&self, target: NodeId) {
        self.map().insert(target, Instant::now());
    }

    /// How long ago `target` last acknowledged an append; `None` if it never
    /// did since this process started.
    pub fn since(&self, target: NodeId) -> Option<Duration> {
        self.map().get(&target).map(Instant::elapsed)
    }

    /// The map; a poisoned lock is recovered (it holds only instants).
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, Instant>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A raft transport client to one peer.
pub type TransportClient = RaftTransportClient<Channel>;

/// Channels to peers, shared by the raft network and by write forwarding.
#[derive(Clone)]
pub struct Channels {
    cluster_id: Arc<str>,
    /// How peer channels connect ([`Role::Peer`]'s defaults, with the
    /// node's peer TLS).
    config: ClientConfig,
    /// Address -> channel, replaced after repeated timeouts.
    cache: ChannelCache,
    /// When each target last acknowledged an append.
    acks: AppendAcks,
    /// Largest message sent or accepted (tonic's limits on every client).
    max_message_bytes: usize,
    /// Opens connections instead of TCP (the simulation only; `None` in a
    /// gateway).
    dialer: Option<Dialer>,
}

impl Channels {
    /// Channels of a node of `cluster_id`, dialling with `tls` (`None`:
    /// plaintext, `--insecure`).
    pub fn new(cluster_id: &str, tls: Option<proto::tls::ClientTls>) -> Self {
        Channels {
            cluster_id: cluster_id.into(),
            config: ClientConfig::for_role(Role::Peer).with_tls(tls),
            cache: ChannelCache::default(),
            acks: AppendAcks::default(),
            max_message_bytes: MAX_MESSAGE_BYTES,
            dialer: None,
        }
    }

    /// The same channels, connecting through `dialer` instead of TCP, in
    /// plaintext ([`proto::client::connect_via`]): the deterministic
    /// simulation's network. A gateway never sets one.
    pub fn with_dialer(mut self, dialer: Dialer) -> Self {
        self.dialer = Some(dialer);
        self
    }

    /// The same channels with messages bounded by `max_bytes` (default
    /// [`MAX_MESSAGE_BYTES`]).
    pub fn with_max_message_bytes(mut self, max_bytes: usize) -> Self {
        self.max_message_bytes = max_bytes;
        self
    }

    /// The largest message sent or accepted.
    pub fn max_message_bytes(&self) -> usize {
        self.max_message_bytes
    }

    /// When each target last acknowledged an append from this node.
    pub fn acks(&self) -> &AppendAcks {
        &self.acks
    }

    /// How a call to a peer connects (forwarded admin calls use it too).
    pub fn client_config(&self, role: Role) -> ClientConfig {
        ClientConfig::for_role(role).with_tls(self.config.tls.clone())
    }

    /// The cluster id every outbound call carries.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// A client to the peer at `addr` (host:port), reusing its channel.
    /// A new channel comes from the workspace's one channel builder,
    /// [`proto::client::connect`], as [`Role::Peer`] (lazy: a peer that is
    /// down now may be up at the next call).
    ///
    /// # Errors
    /// [`ClientError::InvalidAddress`] when `addr` is not a valid address.
    pub async fn client(&self, addr: &str) -> Result<TransportClient, ClientError> {
        let channel = match self.cache.get(addr) {
            Some(channel) => channel,
            None => {
                let channel = match &self.dialer {
                    None => connect(Role::Peer, addr, &self.config).await?,
                    Some(dialer) => connect_via(Role::Peer, addr, &self.config, dialer).await?,
                };
                // Another caller may have built one meanwhile: keep the first.
                self.cache.insert_first(addr, channel)
            }
        };
        Ok(RaftTransportClient::new(channel)
            .max_decoding_message_size(self.max_message_bytes)
            .max_encoding_message_size(self.max_message_bytes))
    }

    /// Watches one call to `addr` (a timed-out call counts towards a fresh
    /// connection, [`channel_cache`](super::channel_cache)).
    pub fn watch(&self, addr: &str) -> CallWatch {
        CallWatch::new(&self.cache, addr)
    }

    /// Wraps an openraft message for the wire.
    pub fn payload<T: Serialize>(&self, value: &T) -> RaftPayload {
        RaftPayload {
            encoding: codec::ENCODING_V1,
            data: codec::encode(value),
            cluster_id: self.cluster_id.to_string(),
            // Set by the caller that knows the target (see `PeerClient`).
            target_node_id: 0,
        }
    }

    /// Forwards a write to the leader `leader` at `addr` (one hop), within
    /// `deadline`, in a `Forward` call of its own. The node's write path
    /// batches instead (`crate::network::forward_batch`); this call serves a
    /// leader that predates `ForwardBatch`.
    ///
    /// # Errors
    /// [`WriteError::Rejected`] when the leader refused the command as
    /// malformed; [`WriteError::Unknown`] when it was sent but its outcome is
    /// unknown. A call that certainly never reached the leader, or that the
    /// leader answered with "not the leader", is [`Forwarded::Retry`].
    pub async fn forward(
        &self,
        leader: NodeId,
        addr: &str,
        command: &[u8],
        deadline: Instant,
    ) -> Result<Forwarded, WriteError> {
        let span = tracing::debug_span!("forward_write", leader);
        self.forward_once(leader, addr, command, deadline)
            .instrument(span)
            .await
    }

    async fn forward_once(
        &self,
        leader: NodeId,
        addr: &str,
        command: &[u8],
        deadline: Instant,
    ) -> Result<Forwarded, WriteError> {
        let Ok(mut client) = self.client(addr).await else {
            return Ok(Forwarded::Retry);
        };
        let mut request = tonic::Request::new(ForwardRequest {
            command: command.to_vec(),
            cluster_id: self.cluster_id().to_string(),
            target_node_id: leader,
        });
        request.set_timeout(until(deadline));
        let watch = self.watch(addr);
        let reply = client.forward(request).await;
        match &reply {
            Ok(_) => watch.answered(),
            Err(status) => watch.failed(status),
        }
        match reply {
            Ok(reply) => match reply.into_inner().result {
                Some(forward_response::Result::Applied(a)) => Ok(Forwarded::Applied(Applied {
                    log_index: a.log_index,
                    response: a.response,
                })),
                Some(forward_response::Result::NotLeader(_)) => Ok(Forwarded::Retry),
                None => Err(WriteError::Unknown(format!(
                    "leader {leader} sent an empty forward reply"
                ))),
            },
            Err(status) if status.code() == tonic::Code::InvalidArgument => {
                Err(WriteError::Rejected(status.message().to_string()))
            }
            Err(status) if never_sent(&status) => Ok(Forwarded::Retry),
            // Another node answers at the leader's address: it refused the
            // call before looking at it, so nothing was appended.
            Err(status) if status.metadata().contains_key(NODE_ID) => Ok(Forwarded::Retry),
            Err(status) => Err(WriteError::Unknown(format!(
                "forwarding to leader {leader} at {addr}: {status}"
            ))),
        }
    }

    /// Asks the leader `leader` at `addr` for a read index, within
    /// `deadline`: `None` when it cannot give one (not the leader any more,
    /// unreachable, no answer in time), so the caller retries.
    pub async fn read_index(&self, leader: NodeId, addr: &str, deadline: Instant) -> Option<u64> {
        let mut client = self.client(addr).await.ok()?;
        let mut request = tonic::Request::new(ReadIndexRequest {
            cluster_id: self.cluster_id().to_string(),
            target_node_id: leader,
        });
        request.set_timeout(until(deadline));
        let watch = self.watch(addr);
        let reply = client.read_index(request).await;
        match &reply {
            Ok(_) => watch.answered(),
            Err(status) => watch.failed(status),
        }
        match reply {
            Ok(reply) => match reply.into_inner().result {
                Some(read_index_response::Result::ReadIndex(i)) => Some(i),
                _ => None,
            },
            Err(status) => {
                tracing::debug!(leader, %status, "read-index from leader failed");
                None
            }
        }
    }

    /// Asks the voter `target` at `addr` to hold its election timer for
    /// `hold` (part of a leadership transfer).
    ///
    /// # Errors
    /// [`PeerCallError`] when `addr` is invalid or the call failed.
    pub async fn hold_election(
        &self,
        target: NodeId,
        addr: &str,
        hold: Duration,
    ) -> Result<(), PeerCallError> {
        let mut client = self.client(addr).await?;
        let request = HoldElectionRequest {
            cluster_id: self.cluster_id().to_string(),
            hold_ms: u64::try_from(hold.as_millis()).unwrap_or(60_000),
            target_node_id: target,
        };
        client.hold_election(request).await?;
        Ok(())
    }

    /// Asks the voter `target` at `addr` to campaign now (the last step of
    /// a leadership transfer).
    ///
    /// # Errors
    /// [`PeerCallError`] when `addr` is invalid or the call failed.
    pub async fn campaign(&self, target: NodeId, addr: &str) -> Result<(), PeerCallError> {
        let mut client = self.client(addr).await?;
        let request = CampaignRequest {
            cluster_id: self.cluster_id().to_string(),
            target_node_id: target,
        };
        client.campaign(request).await?;
        Ok(())
    }

    /// Asks the gateway at `addr` which node it is, within `timeout`.
    ///
    /// # Errors
    /// [`PeerCallError`] when `addr` is invalid, nothing answers in time, or
    /// the peer refused (another cluster, wrong peer token, or a version
    /// without the call: `UNIMPLEMENTED`).
    pub async fn identify(&self, addr: &str, timeout: Duration) -> Result<NodeId, PeerCallError> {
        let mut client = self.client(addr).await?;
        let mut request = tonic::Request::new(IdentifyRequest {
            cluster_id: self.cluster_id().to_string(),
        });
        request.set_timeout(timeout);
        let reply = client.identify(request).await?.into_inner();
        Ok(reply.node_id)
    }
}

/// The time left until `deadline`, at least 1 ms (a zero gRPC timeout would
/// mean none).
pub(crate) fn until(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// What one attempt to forward a write to the leader came to.
#[derive(Debug)]
pub enum Forwarded {
    /// The leader applied it.
    Applied(Applied),
    /// Certainly not appended: retry.
    Retry,
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
            refusal_logged: None,
        }
    }
}

/// Raft RPCs to one peer.
pub struct PeerClient {
    /// The node the calls are meant for.
    target: NodeId,
    /// Its address in the membership.
    addr: String,
    /// Shared channels (and the append acknowledgements).
    channels: Channels,
    /// When a refusal by another node at `addr` was last logged.
    refusal_logged: Option<Instant>,
}

/// Which RPC to call.
enum Rpc {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

impl PeerClient {
    /// Logs, at most every [`REFUSAL_LOG_EVERY`], that the peer at `addr`
    /// refused a call because it is another node.
    fn log_refusal(&mut self, status: &tonic::Status) {
        if self
            .refusal_logged
            .is_some_and(|at| at.elapsed() < REFUSAL_LOG_EVERY)
        {
            return;
        }
        self.refusal_logged = Some(Instant::now());
        let answered_as = status
            .metadata()
            .get(NODE_ID)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("another node")
            .to_string();
        tracing::warn!(
            target_node = self.target,
            addr = %self.addr,
            answered_as = %answered_as,
            "the gateway at this address is node {answered_as}, not node {}: the membership holds a wrong address for node {}; remove it (`raft remove {}`) and add it again with its own address",
            self.target, self.target, self.target
        );
    }

    async fn call<Req, Resp, E>(
        &mut self,
        rpc: Rpc,
        request: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let payload = self.channels.payload(request);
        self.send(rpc, payload, option).await
    }

    /// Sends an encoded request to the target and decodes its reply.
    async fn send<Resp, E>(
        &mut self,
        rpc: Rpc,
        mut payload: RaftPayload,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let mut client = self
            .channels
            .client(&self.addr)
            .await
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
        payload.target_node_id = self.target;
        let mut grpc = tonic::Request::new(payload);
        grpc.set_timeout(option.hard_ttl());
        // Dropped unfinished (openraft gives up at its TTL), it counts as a
        // timeout too.
        let watch = self.channels.watch(&self.addr);
        let reply = match rpc {
            Rpc::AppendEntries => client.append_entries(grpc).await,
            Rpc::Vote => client.vote(grpc).await,
            Rpc::InstallSnapshot => client.install_snapshot(grpc).await,
        };
        match &reply {
            Ok(_) => watch.answered(),
            Err(status) => watch.failed(status),
        }
        let reply = match reply {
            Ok(reply) => reply,
            Err(status) if status.metadata().contains_key(NODE_ID) => {
                // Another node answers at this address: back off as for an
                // unreachable peer (the target itself is not there).
                self.log_refusal(&status);
                return Err(RPCError::Unreachable(Unreachable::new(&status)));
            }
            Err(status) if status.code() == tonic::Code::Unavailable => {
                return Err(RPCError::Unreachable(Unreachable::new(&status)))
            }
            // Refused as over a size limit (tonic's encoder here or the
            // peer's decoder): `append_within_limit` picks the hint.
            Err(status) if matches!(rpc, Rpc::AppendEntries) && refused_as_too_large(&status) => {
                tracing::debug!(target_node = self.target, %status, "append-entries refused as too large");
                return Err(RPCError::PayloadTooLarge(
                    PayloadTooLarge::new_entries_hint(1),
                ));
            }
            Err(status) => return Err(RPCError::Network(NetworkError::new(&status))),
        };
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

    /// Sends an AppendEntries within the message limit: over it, or refused
    /// by the peer as too large, it becomes [`PayloadTooLarge`] with a
    /// smaller entries hint (openraft retries at once with fewer entries).
    async fn append_within_limit(
        &mut self,
        rpc: &AppendEntriesRequest<TypeConfig>,
        option: &RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let entries = rpc.entries.len();
        let payload = self.channels.payload(rpc);
        let limit = self.channels.max_message_bytes();
        let encoded = prost::Message::encoded_len(&payload);
        if encoded > limit {
            return Err(self.too_large(rpc, entries_hint(entries, encoded, limit), encoded));
        }
        let reply = self.send(Rpc::AppendEntries, payload, option).await;
        match reply {
            Err(RPCError::PayloadTooLarge(_)) => {
                Err(self.too_large(rpc, (entries / 2) as u64, encoded))
            }
            other => other,
        }
    }

    /// The error for an AppendEntries of `encoded` bytes over the limit:
    /// [`PayloadTooLarge`] with `hint` entries, or, for a single entry (no
    /// smaller batch exists), a network error naming it.
    fn too_large(
        &self,
        rpc: &AppendEntriesRequest<TypeConfig>,
        hint: u64,
        encoded: usize,
    ) -> RPCError<NodeId, BasicNode, RaftError<NodeId>> {
        let limit = self.channels.max_message_bytes();
        if rpc.entries.len() <= 1 {
            let index = rpc.entries.first().map(|e| e.log_id.index).unwrap_or(0);
            tracing::error!(
                target_node = self.target,
                index,
                encoded,
                limit,
                "log entry {index} alone is {encoded} bytes, over the raft message limit of {limit} bytes: it cannot be replicated to node {}; raise max_message_bytes on every node",
                self.target
            );
            let e = io::Error::other(format!(
                "log entry {index} is {encoded} bytes encoded, over max_message_bytes {limit}"
            ));
            return RPCError::Network(NetworkError::new(&e));
        }
        tracing::debug!(
            target_node = self.target,
            entries = rpc.entries.len(),
            encoded,
            limit,
            hint,
            "append-entries over the message limit: asking openraft for fewer entries"
        );
        RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(hint.max(1)))
    }
}

/// How many of `entries` entries (encoded together in `encoded` bytes)
/// should fit in `limit`: proportional, with a tenth of margin, at least 1
/// and fewer than `entries` (so every retry sends less).
pub fn entries_hint(entries: usize, encoded: usize, limit: usize) -> u64 {
    let fit = (entries as u128 * (limit as u128 * 9 / 10)) / (encoded.max(1) as u128);
    let fit = fit.min(entries.saturating_sub(1) as u128).max(1);
    fit as u64
}

/// Whether a failed call was refused because its message is over a size
/// limit: tonic's encoder (here) or decoder (the peer) says so with
/// `OUT_OF_RANGE` ("... message length too large ..."), or
/// `RESOURCE_EXHAUSTED` for a body over 4 GB. The code alone does not say
/// it: HTTP/2's `ENHANCE_YOUR_CALM` (a connection closed by the peer's
/// flood defence) also arrives as `RESOURCE_EXHAUSTED`; taken for a size
/// refusal it shrank every append to one entry and then called that entry
/// too large to replicate, stalling writes after a paused leader resumed.
fn refused_as_too_large(status: &tonic::Status) -> bool {
    let message = status.message();
    match status.code() {
        tonic::Code::OutOfRange | tonic::Code::ResourceExhausted => {
            message.contains("message length too large") || message.contains("more than 4GB")
        }
        _ => false,
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let reply = self.append_within_limit(&rpc, &option).await;
        if let Ok(AppendEntriesResponse::Success | AppendEntriesResponse::PartialSuccess(_)) =
            &reply
        {
            self.channels.acks.record(self.target);
        }
        reply
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A size refusal shrinks the append; a connection closed with
    /// `ENHANCE_YOUR_CALM` (also `RESOURCE_EXHAUSTED`) is a network error.
    #[test]
    fn only_a_size_refusal_counts_as_too_large() {
        let decoded = tonic::Status::out_of_range(
            "Error, decoded message length too large: found 70000000 bytes, the limit is: 67108864 bytes",
        );
        let encoded = tonic::Status::out_of_range(
            "Error, encoded message length too large: found 70000000 bytes, the limit is: 67108864 bytes",
        );
        assert!(refused_as_too_large(&decoded));
        assert!(refused_as_too_large(&encoded));
        let calm = tonic::Status::from_error(Box::new(h2_calm()));
        assert_eq!(calm.code(), tonic::Code::ResourceExhausted, "{calm:?}");
        assert!(!refused_as_too_large(&calm), "{calm:?}");
        assert!(!refused_as_too_large(&tonic::Status::resource_exhausted(
            "too many requests"
        )));
        assert!(!refused_as_too_large(&tonic::Status::unavailable(
            "message length too large"
        )));
    }

    /// The error h2 gives a stream of a connection closed with
    /// `ENHANCE_YOUR_CALM`.
    fn h2_calm() -> h2::Error {
        h2::Error::from(h2::Reason::ENHANCE_YOUR_CALM)
    }

    /// A port nothing listens on: bound, then released.
    fn refused_addr() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap_or_else(|e| panic!("cannot bind a loopback port: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("no local address: {e}"));
        drop(listener);
        addr.to_string()
    }

    #[tokio::test]
    async fn a_refused_connection_was_never_sent() {
        let channels = Channels::new("test", None);
        let addr = refused_addr();
        let mut client = channels
            .client(&addr)
            .await
            .unwrap_or_else(|e| panic!("client: {e}"));
        let status = match client
            .read_index(ReadIndexRequest {
                cluster_id: "test".into(),
                target_node_id: 0,
            })
            .await
        {
            Ok(_) => panic!("a call to a closed port succeeded"),
            Err(status) => status,
        };
        assert!(never_sent(&status), "{status:?}");
        // The decision rests on types tonic really gives, not on text.
        let mut kinds = Vec::new();
        let mut connect_error = false;
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&status);
        while let Some(error) = source {
            connect_error |= error.is::<tonic::ConnectError>();
            kinds.extend(error.downcast_ref::<io::Error>().map(io::Error::kind));
            source = error.source();
        }
        assert!(connect_error, "{status:?}");
        assert_eq!(kinds, vec![io::ErrorKind::ConnectionRefused], "{status:?}");
    }

    #[tokio::test]
    async fn a_forward_to_a_refused_leader_is_retried() {
        let channels = Channels::new("test", None);
        let deadline = Instant::now() + Duration::from_secs(5);
        let forwarded = channels
            .forward(2, &refused_addr(), b"command", deadline)
            .await;
        assert!(matches!(forwarded, Ok(Forwarded::Retry)), "{forwarded:?}");
    }

    #[test]
    fn the_entries_hint_always_shrinks_and_fits() {
        // 300 entries of 6 MiB against 256 KiB: about 11 with a margin.
        assert_eq!(entries_hint(300, 6 * 1024 * 1024, 256 * 1024), 11);
        // Barely over: one fewer at least.
        assert_eq!(entries_hint(10, 1001, 1000), 8);
        assert_eq!(entries_hint(2, 1001, 1000), 1);
        // Never 0, never as many as before.
        assert_eq!(entries_hint(5, usize::MAX, 1), 1);
        assert_eq!(entries_hint(1, 10, 1), 1);
    }

    #[test]
    fn a_status_sent_by_the_peer_was_sent() {
        // Same code and text as a refused connect, but no typed source: the
        // peer itself answered, so the request reached it.
        let status =
            tonic::Status::unavailable("tcp connect error: Connection refused (os error 111)");
        assert!(!never_sent(&status));
    }

    #[test]
    fn the_source_chain_decides() {
        let with_source = |error: Box<dyn std::error::Error + Send + Sync>| {
            let mut status = tonic::Status::unavailable("transport error");
            status.set_source(Arc::from(error));
            status
        };
        let refused = || Box::new(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert!(never_sent(&with_source(refused())));
        assert!(never_sent(&with_source(Box::new(tonic::ConnectError(
            Box::new(io::Error::other("dns error"))
        )))));
        // A connection that broke after the request went out: maybe sent.
        let reset = Box::new(io::Error::from(io::ErrorKind::ConnectionReset));
        assert!(!never_sent(&with_source(reset)));
        // Only UNAVAILABLE can mean "never sent".
        let mut deadline = tonic::Status::deadline_exceeded("timeout");
        deadline.set_source(Arc::new(io::Error::from(io::ErrorKind::ConnectionRefused)));
        assert!(!never_sent(&deadline));
    }
}

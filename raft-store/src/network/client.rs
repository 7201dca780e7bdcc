//! Every outbound call to a peer replica but openraft's own (those are in
//! [`super::peer`]): forwarding a write to the leader
//! ([`Channels::forward`]), the remote read-index ([`Channels::read_index`]),
//! the two calls of a leadership transfer ([`Channels::hold_election`],
//! [`Channels::campaign`]) and asking an address which node answers there
//! ([`Channels::identify`]). [`AppendAcks`] records when each target last
//! acknowledged an append (openraft 0.9 has no such metric): a promotion
//! checks it.
//!
//! One HTTP/2 channel per peer address, built by the workspace's one channel
//! builder (`proto::client::connect`, role `Peer`), connected lazily and
//! shared by every call to that peer, raft calls included (connection
//! reuse). A forward or read-index carries the caller's deadline;
//! connecting has its own timeout. A dead connection that never closes is
//! noticed by the channel's HTTP/2 keep-alive, and a channel whose calls
//! keep timing out is replaced by a fresh connection
//! ([`super::channel_cache`]).
//!
//! [`never_sent`] ([`super::sent`]) decides from a failed call's typed error source whether
//! the request certainly never reached the peer, which is when a write may
//! be retried without risk of applying it twice.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proto::client::{connect, connect_via, ClientConfig, ClientError, Dialer, Role};
use proto::raft::raft_transport_client::RaftTransportClient;
use proto::raft::{
    forward_response, read_index_response, CampaignRequest, ForwardRequest, HoldElectionRequest,
    IdentifyRequest, RaftPayload, ReadIndexRequest,
};
use serde::Serialize;
use tokio::time::Instant;
use tonic::transport::Channel;
use tracing::Instrument;

use super::channel_cache::{CallWatch, ChannelCache};
pub use super::sent::{never_sent, PeerCallError};
use crate::codec::{self, MAX_MESSAGE_BYTES};
use crate::error::WriteError;
use crate::types::{Applied, NodeId};

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

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

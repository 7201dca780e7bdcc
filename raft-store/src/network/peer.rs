//! openraft's network: [`NetworkFactory`] makes a [`PeerClient`] per
//! target, whose raft calls go over the shared [`Channels`].
//!
//! Every raft call names the node it is meant for (`target_node_id`); a
//! peer that is another node refuses it, and [`PeerClient`] logs that
//! refusal (at most every [`REFUSAL_LOG_EVERY`] per target) as a wrong
//! address in the membership.
//!
//! An AppendEntries runs in a task of its own with a deadline of at least
//! [`outstanding::APPEND_DEADLINE`]: openraft 0.9 stops waiting for each
//! at its heartbeat interval, and a follower slower than that (an fsync on
//! a loaded disk, a long link) would otherwise never be heard
//! ([`outstanding`], issue 33). A vote or snapshot call carries openraft's
//! TTL as its gRPC deadline.
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
use proto::raft::RaftPayload;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;
use tracing::Instrument;

use super::client::{Channels, NODE_ID, REFUSAL_LOG_EVERY};
use super::outstanding::{self, AppendReply, Outstanding, Sent};
use crate::codec;
use crate::types::{NodeId, TypeConfig};

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
            peer: Peer {
                target,
                addr: node.addr.as_str().into(),
                channels: self.channels.clone(),
                refusal_logged: Arc::default(),
            },
            outstanding: None,
        }
    }
}

/// Raft RPCs to one peer, for one replication session (openraft makes one
/// per target and leadership, and one per leadership check).
pub struct PeerClient {
    /// Who the calls go to.
    peer: Peer,
    /// The AppendEntries sent and not yet answered, when openraft stopped
    /// waiting for it at its TTL ([`outstanding`]).
    outstanding: Option<Outstanding>,
}

impl Drop for PeerClient {
    /// The session is over (leadership lost, target removed): an append
    /// still on its way is of no use to anyone.
    fn drop(&mut self) {
        if let Some(outstanding) = self.outstanding.take() {
            outstanding.task.abort();
        }
    }
}

/// The target of a [`PeerClient`]'s calls; cloned into the task of a
/// detached append.
#[derive(Clone)]
struct Peer {
    /// The node the calls are meant for.
    target: NodeId,
    /// Its address in the membership.
    addr: Arc<str>,
    /// Shared channels (and the append acknowledgements).
    channels: Channels,
    /// When a refusal by another node at `addr` was last logged. A std
    /// lock, held only to read or set it.
    refusal_logged: Arc<Mutex<Option<Instant>>>,
}

impl PeerClient {
    /// Waits for the outstanding append, if any, and takes it with its
    /// reply. Dropped while waiting (openraft's TTL), it leaves the append
    /// outstanding.
    async fn finish_outstanding(&mut self) -> Option<(Sent, AppendReply)> {
        let outstanding = self.outstanding.as_mut()?;
        let joined = (&mut outstanding.task).await;
        let sent = outstanding.sent.clone();
        self.outstanding = None;
        let reply = joined.unwrap_or_else(|e| {
            let e = io::Error::other(format!("the append task ended: {e}"));
            Err(RPCError::Network(NetworkError::new(&e)))
        });
        Some((sent, reply))
    }

    /// The answer to `rpc` that an earlier, outstanding append gives, once
    /// it is answered; `None` when none was outstanding or its reply says
    /// nothing about `rpc` (then `rpc` is sent).
    async fn earlier_answer(
        &mut self,
        rpc: &AppendEntriesRequest<TypeConfig>,
    ) -> Option<AppendReply> {
        let (sent, reply) = self.finish_outstanding().await?;
        let answer = outstanding::answer_from_earlier(&sent, reply, &Sent::of(rpc));
        if answer.is_some() {
            tracing::debug!(
                target_node = self.peer.target,
                "an append answered after openraft's TTL answers the next one"
            );
        }
        answer
    }
}

/// The reply when no append was outstanding to wait for (never: each call
/// makes its own append outstanding before it waits).
fn no_append_outstanding() -> AppendReply {
    let e = io::Error::other("no append outstanding");
    Err(RPCError::Network(NetworkError::new(&e)))
}

/// Which RPC to call.
enum Rpc {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

impl Peer {
    /// Logs, at most every [`REFUSAL_LOG_EVERY`], that the peer at `addr`
    /// refused a call because it is another node.
    fn log_refusal(&self, status: &tonic::Status) {
        {
            let mut logged = self
                .refusal_logged
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if logged.is_some_and(|at| at.elapsed() < REFUSAL_LOG_EVERY) {
                return;
            }
            *logged = Some(Instant::now());
        }
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
        &self,
        rpc: Rpc,
        request: &Req,
        deadline: Duration,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let payload = self.channels.payload(request);
        self.send(rpc, payload, deadline).await
    }

    /// Sends an encoded request to the target and decodes its reply.
    async fn send<Resp, E>(
        &self,
        rpc: Rpc,
        mut payload: RaftPayload,
        deadline: Duration,
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
        grpc.set_timeout(deadline);
        // A deadline tonic enforces counts towards a fresh connection; a
        // call dropped unfinished (openraft gives up on a vote at its TTL)
        // does not.
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
        &self,
        rpc: &AppendEntriesRequest<TypeConfig>,
        deadline: Duration,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let entries = rpc.entries.len();
        let payload = self.channels.payload(rpc);
        let limit = self.channels.max_message_bytes();
        let encoded = prost::Message::encoded_len(&payload);
        if encoded > limit {
            return Err(self.too_large(rpc, entries_hint(entries, encoded, limit), encoded));
        }
        let reply = self.send(Rpc::AppendEntries, payload, deadline).await;
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
    /// Sends the append in a task of its own and waits for it, up to
    /// openraft's TTL (openraft drops this call there). A call dropped so
    /// leaves its append on its way: the next call first waits for that
    /// one and, when it covers the new request, answers from it
    /// ([`outstanding`]). A follower that answers later than the heartbeat
    /// interval so still moves the leader's view of it forward.
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let reply = match self.earlier_answer(&rpc).await {
            Some(reply) => reply,
            None => {
                let sent = Sent::of(&rpc);
                let peer = self.peer.clone();
                let deadline = option.hard_ttl().max(outstanding::APPEND_DEADLINE);
                let task = tokio::spawn(
                    async move { peer.append_within_limit(&rpc, deadline).await }.in_current_span(),
                );
                self.outstanding = Some(Outstanding { sent, task });
                self.finish_outstanding()
                    .await
                    .map_or_else(no_append_outstanding, |(_, reply)| reply)
            }
        };
        if let Ok(AppendEntriesResponse::Success | AppendEntriesResponse::PartialSuccess(_)) =
            &reply
        {
            self.peer.channels.acks().record(self.peer.target);
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
        self.peer
            .call(Rpc::InstallSnapshot, &rpc, option.hard_ttl())
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.peer.call(Rpc::Vote, &rpc, option.hard_ttl()).await
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
}

//! `openshell.gateway.v1.PeerRelay`: gateway-to-gateway relay of calls that
//! must reach a supervisor. Gateways never dial supervisors, so an exec
//! served by a gateway that does not hold the owner's stream is relayed to
//! the gateway that does ([`relay_exec`]): every other node of the
//! membership is asked at once, the one holding the stream runs the exec on
//! it and answers, the others answer `NOT_FOUND`.
//!
//! Who may call it: other gateways of the cluster, on behalf of an operator
//! whose `authorization` metadata they forward; the call is checked again
//! here (`platform_admin`), as the operator's own call was. It belongs on
//! the peer port ([`service`] builds it for whichever router mounts it).
//! A relayed call is never relayed further.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use proto::client::{self, ClientConfig, Role as ClientRole};
use proto::gateway::peer_relay_client::PeerRelayClient;
use proto::gateway::peer_relay_server::{PeerRelay, PeerRelayServer};
use proto::gateway::{ExecOnStreamReply, ExecOnStreamRequest};
use tonic::{Code, Request, Response, Status};

use crate::auth::{Auth, Role};
use crate::hub::exec::{ExecOutcome, EXEC_ANSWER_MARGIN};
use crate::hub::Hub;

/// The relay service of one gateway.
pub struct PeerRelayService {
    hub: Arc<Hub>,
    auth: Auth,
}

/// The relay service over `hub`, checking the forwarded operator token with
/// `auth`, ready to be added to a router (its requests are small: the same
/// limit as the client services).
pub fn service(hub: Arc<Hub>, auth: Auth) -> PeerRelayServer<PeerRelayService> {
    PeerRelayServer::new(PeerRelayService { hub, auth })
        .max_decoding_message_size(crate::ports::MAX_REQUEST_BYTES)
}

#[tonic::async_trait]
impl PeerRelay for PeerRelayService {
    #[tracing::instrument(level = "info", skip_all, fields(member = %request.get_ref().member_id, sandbox = %request.get_ref().sandbox_id))]
    async fn exec_on_stream(
        &self,
        request: Request<ExecOnStreamRequest>,
    ) -> Result<Response<ExecOnStreamReply>, Status> {
        self.auth.require(
            &request,
            Role::PlatformAdmin,
            "peer_relay",
            self.hub.metrics(),
        )?;
        let request = request.into_inner();
        crate::status::check_id("member_id", &request.member_id)?;
        crate::status::check_id("sandbox_id", &request.sandbox_id)?;
        if request.argv.is_empty() {
            return Err(Status::invalid_argument("a command is required"));
        }
        let ran = self
            .hub
            .exec_on_stream(
                &request.member_id,
                &request.sandbox_id,
                request.term,
                request.argv,
                request.timeout_ms,
            )
            .await;
        match ran {
            None => Err(Status::not_found(format!(
                "supervisor {} is not attached to gateway {}",
                request.member_id,
                self.hub.node().id()
            ))),
            Some(Ok(outcome)) => Ok(Response::new(ExecOnStreamReply {
                exit_code: outcome.exit_code,
                stdout: outcome.stdout,
                stderr: outcome.stderr,
                stdout_truncated: outcome.stdout_truncated,
                stderr_truncated: outcome.stderr_truncated,
                failure: None,
            })),
            Some(Err(status)) => Ok(Response::new(ExecOnStreamReply {
                failure: Some(proto::exec::failure(&status)),
                ..Default::default()
            })),
        }
    }
}

/// Runs an exec through the gateway that holds `member`'s stream, asking
/// every other node of the membership at once; `carried` is the operator's
/// credential (token, or the role this gateway vouches for). The one answer that is not `NOT_FOUND` decides.
///
/// # Errors
/// The exec's own failure with its code; `UNAVAILABLE` when no gateway
/// holds the member's stream (or none that holds it answered).
pub async fn relay_exec(
    hub: &Hub,
    carried: crate::auth::Carried,
    member: &str,
    request: ExecOnStreamRequest,
) -> Result<ExecOutcome, Status> {
    let effective =
        proto::exec::check_timeout_ms(request.timeout_ms).map_err(Status::invalid_argument)?;
    let deadline = Duration::from_millis(effective) + 2 * EXEC_ANSWER_MARGIN;
    let me = hub.node().id();
    let peers: Vec<(u64, String)> = hub
        .node()
        .status()
        .nodes
        .into_iter()
        .filter(|n| n.id != me)
        .map(|n| (n.id, n.addr))
        .collect();
    let asked = peers.len();
    // Membership addresses are peer ports: this node's peer TLS (its
    // client certificate) applies.
    let config = hub
        .node()
        .peer_client_config(ClientRole::Forwarding)
        .with_request_timeout(deadline);
    let config = &config;
    let mut calls: FuturesUnordered<_> = peers
        .into_iter()
        .map(|(id, addr)| {
            let mut call = Request::new(request.clone());
            call.set_timeout(deadline);
            carried.apply(call.metadata_mut());
            async move { (id, ask(config, &addr, call).await) }
        })
        .collect();
    let mut notes = Vec::new();
    while let Some((id, answer)) = calls.next().await {
        match answer {
            Ok(reply) => {
                tracing::info!(
                    member,
                    gateway = id,
                    "exec relayed to the gateway holding the stream"
                );
                return match reply.failure {
                    Some(failure) => Err(proto::exec::failure_status(&failure)),
                    None => Ok(ExecOutcome {
                        exit_code: reply.exit_code,
                        stdout: reply.stdout,
                        stderr: reply.stderr,
                        stdout_truncated: reply.stdout_truncated,
                        stderr_truncated: reply.stderr_truncated,
                    }),
                };
            }
            Err(status) if status.code() == Code::NotFound => {}
            Err(status) => notes.push(format!("gateway {id}: {}", status.message())),
        }
    }
    let mut message = format!(
        "supervisor {member} is not attached to any gateway (asked this one and {asked} other(s))"
    );
    if !notes.is_empty() {
        message.push_str(&format!("; not answering: {}", notes.join("; ")));
    }
    Err(Status::unavailable(message))
}

/// One relay call to the gateway at `addr`.
async fn ask(
    config: &ClientConfig,
    addr: &str,
    call: Request<ExecOnStreamRequest>,
) -> Result<ExecOnStreamReply, Status> {
    let channel = client::connect(ClientRole::Forwarding, addr, config)
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    PeerRelayClient::new(channel)
        .exec_on_stream(call)
        .await
        .map(Response::into_inner)
}

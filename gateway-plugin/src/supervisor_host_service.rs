//! `openshell.supervisor_host.v1.SupervisorHost`: one bidirectional stream
//! per supervisor.
//!
//! Who may call it: pool supervisors, each presenting the credential of the
//! member id it claims (the member credentials file,
//! [`crate::member_credentials`]); a hello whose credential is not that
//! member's is refused `UNAUTHENTICATED`, naming the member id, and counted
//! in `auth_failures`. The deprecated shared `supervisor_token` admits
//! member ids the file does not list. Any gateway serves any supervisor. The stream: `HostHello` -> the gateway
//! authenticates it and proposes the join -> `HelloAccepted` -> assignment
//! snapshots whenever the member's assignments change; the supervisor sends
//! `HostStatus` (liveness, batched into one heartbeat command per tick),
//! `TermAck` and `SandboxReport` (proposed with the incarnation the join
//! assigned, so apply fences stale ones, in the order sent, by a writer of
//! their own so `HostStatus` is never held behind them:
//! [`crate::hub::proposals`]) and `ExecResult` (the answer to an
//! `ExecCall` the gateway sent on the stream, [`crate::hub::exec`]). A
//! stopping supervisor sets `HostStatus.stopping` (the gateway starts a
//! drain of exactly that member) and then sends `HostLeave` (the gateway
//! proposes `Leave` for its incarnation and answers `HostLeft`),
//! [`crate::hub::leave`]. A newer
//! stream of the same member supersedes the older one.
//!
//! A stream must send its `HostHello` within [`HELLO_DEADLINE`] or it is
//! closed with `DEADLINE_EXCEEDED`.
//!
//! A stopping gateway refuses new streams (UNAVAILABLE, refusal
//! `GATEWAY_LEAVING`) and ends the attached ones with `GatewayLeaving`
//! ([`Hub::move_supervisors`]): their supervisors attach elsewhere at once.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use pool::Command;
use proto::attach::refusal_status;
use proto::supervisor_host::supervisor_host_server::SupervisorHost;
use proto::supervisor_host::{supervisor_message, GatewayMessage, HostHello, SupervisorMessage};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use crate::convert::from_proto::{self, StreamInput};
use crate::convert::to_proto;
use crate::hub::proposals::StreamProposals;
use crate::hub::streams::StopPhase;
use crate::hub::Hub;

/// Longest member uid or address (the member id is an identifier, at most
/// [`pool::ids::MAX_ID_LEN`]).
const MAX_ID_BYTES: usize = 256;
/// How long a new stream may take to send its `HostHello`; a stream that
/// sends nothing is closed after it (`DEADLINE_EXCEEDED`).
pub const HELLO_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);
/// Once the gateway is leaving, how long a stream's supervisor has to close
/// its side after `GatewayLeaving` (it does so at once unless it is paused
/// or cut off); then the stream is dropped, so that no stream holds the
/// gateway's stop up to its bound.
const LEAVING_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The supervisor host service of one gateway.
pub struct SupervisorHostService {
    hub: Arc<Hub>,
}

impl SupervisorHostService {
    /// The service over `hub`.
    pub fn new(hub: Arc<Hub>) -> Self {
        SupervisorHostService { hub }
    }

    /// Checks the hello (counting a refusal in the metrics) and proposes
    /// the join it asks for. Returns the incarnation the pool assigned
    /// (log-ordered, docs/design/0002).
    async fn join(&self, hello: &HostHello) -> Result<u64, Status> {
        let settings = self.hub.settings();
        let members = settings
            .member_credentials
            .as_ref()
            .map(crate::member_credentials::current);
        let token = settings
            .supervisor_token
            .as_ref()
            .map(proto::secret::Secret::expose);
        let checked = match check_hello(hello) {
            Ok(()) => {
                let identity = settings.member_identity.as_deref();
                crate::member_identity::authenticate(
                    hello,
                    token,
                    members.as_deref(),
                    identity,
                    || check_credential(hello, token, members.as_deref()),
                )
                .await
            }
            Err(status) => Err((status, "malformed")),
        };
        if let Err((status, reason)) = checked {
            self.hub
                .metrics()
                .auth_failures
                .with_label_values(&["supervisor_host", reason])
                .inc();
            // A caller can send refused hellos at will: logged at most
            // LINES_PER_WINDOW times per window per reason.
            if let Some(suppressed) = crate::log_limit::REFUSALS.allow(("supervisor_host", reason))
            {
                tracing::warn!(member = %proto::text::escaped(&hello.member_id), reason,
                    suppressed, %status, "supervisor hello refused");
            }
            return Err(status);
        }
        if hello.process_id == 0 {
            tracing::warn!(member = %hello.member_id, incarnation = hello.incarnation,
                "legacy hello: the supervisor chose its incarnation from its clock; upgrade it");
        }
        let join = Command::Join(from_proto::join(hello));
        match self.hub.propose(&join).await? {
            pool::Outcome::Applied(pool::Effect::Joined { incarnation, .. }) => {
                self.hub
                    .close_stale_stop_drains(&hello.member_id, incarnation)
                    .await;
                Ok(incarnation)
            }
            pool::Outcome::Applied(pool::Effect::AlreadyJoined { incarnation }) => Ok(incarnation),
            pool::Outcome::Applied(other) => Err(Status::internal(format!(
                "join applied with an unexpected effect: {other:?}"
            ))),
            pool::Outcome::Rejected(reason) => {
                tracing::warn!(member = %hello.member_id, %reason, "supervisor join rejected");
                let message = format!("join rejected: {reason}");
                Err(match to_proto::incarnation_refusal(&reason) {
                    Some(refusal) => {
                        refusal_status(tonic::Code::FailedPrecondition, message, refusal)
                    }
                    None => Status::failed_precondition(message),
                })
            }
        }
    }
}

/// Checks a hello's credential against the member it claims: a member
/// listed in `members` must present its own credential; any other needs
/// the shared `token` when one is set, and is refused when only `members`
/// is. Neither set: any credential (an insecure gateway).
fn check_credential(
    hello: &HostHello,
    token: Option<&str>,
    members: Option<&crate::member_credentials::MemberCredentials>,
) -> Result<(), Status> {
    let member = &hello.member_id;
    let presented = hello.credential.as_bytes();
    if let Some(expected) = members.and_then(|m| m.credential_of(member)) {
        return if proto::secret::ct_eq(presented, expected.as_bytes()) {
            Ok(())
        } else {
            Err(Status::unauthenticated(format!(
                "supervisor credential does not match member id {member:?}: a supervisor may only join as the member it is"
            )))
        };
    }
    match (token, members) {
        (Some(token), _) if proto::secret::ct_eq(presented, token.as_bytes()) => Ok(()),
        (Some(_), _) => Err(Status::unauthenticated(
            "supervisor credential is missing or wrong",
        )),
        (None, Some(_)) => Err(Status::unauthenticated(format!(
            "member id {member:?} has no credential in the member credentials file"
        ))),
        (None, None) => Ok(()),
    }
}

/// Checks a hello's fields: the member id is an identifier
/// ([`pool::ids`]); its uid and address are printable (1 to
/// [`MAX_ID_BYTES`] bytes of printable ASCII without spaces,
/// [`proto::text::check_printable`]): they are kept in the member record
/// and shown in `pool status`, so no control character may reach them.
fn check_hello(hello: &HostHello) -> Result<(), Status> {
    crate::status::check_id("HostHello.member_id", &hello.member_id)?;
    for (field, value) in [
        ("HostHello.member_uid", &hello.member_uid),
        ("HostHello.advertise_address", &hello.advertise_address),
    ] {
        proto::text::check_printable(field, value, MAX_ID_BYTES)
            .map_err(Status::invalid_argument)?;
    }
    if hello.capacity == 0 {
        return Err(Status::invalid_argument(
            "HostHello.capacity must be at least 1",
        ));
    }
    if hello.process_id == 0 && hello.incarnation == 0 {
        return Err(Status::invalid_argument(
            "HostHello.process_id must be set (or, from a legacy supervisor, incarnation)",
        ));
    }
    Ok(())
}

type GatewayStream = Pin<Box<dyn Stream<Item = Result<GatewayMessage, Status>> + Send>>;

#[tonic::async_trait]
impl SupervisorHost for SupervisorHostService {
    type AttachStream = GatewayStream;

    #[tracing::instrument(level = "info", skip_all)]
    async fn attach(
        &self,
        request: Request<Streaming<SupervisorMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        if self.hub.is_leaving() {
            return Err(self.hub.leaving_status());
        }
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(HELLO_DEADLINE, inbound.message())
            .await
            .map_err(|_| {
                let key = ("supervisor_host", "no_hello");
                if let Some(suppressed) = crate::log_limit::REFUSALS.allow(key) {
                    tracing::warn!(
                        deadline_ms = HELLO_DEADLINE.as_millis() as u64,
                        suppressed,
                        "supervisor stream sent no HostHello in time: closed"
                    );
                }
                Status::deadline_exceeded(format!(
                    "no HostHello within {} ms of opening the stream",
                    HELLO_DEADLINE.as_millis()
                ))
            })??
            .ok_or_else(|| Status::invalid_argument("stream ended before HostHello"))?;
        let Some(supervisor_message::Message::Hello(hello)) = first.message else {
            return Err(Status::invalid_argument(
                "the first message must be HostHello",
            ));
        };
        let incarnation = self.join(&hello).await?;
        let (tx, rx) = mpsc::channel(64);
        let accepted = to_proto::hello_accepted(
            self.hub.node().id(),
            self.hub.settings(),
            self.hub.signer().public_key_hex(),
            incarnation,
        );
        tx.try_send(Ok(accepted))
            .map_err(|_| Status::internal("stream closed"))?;
        let reattached = hello.known_incarnation != 0 && hello.known_incarnation == incarnation;
        let stream_id = self
            .hub
            .attach(&hello.member_id, incarnation, reattached, tx)?;
        tracing::info!(member = %hello.member_id, incarnation, process_id = hello.process_id, stream_id, "supervisor attached");
        tokio::spawn(serve_stream(
            self.hub.clone(),
            inbound,
            hello.member_id,
            incarnation,
            stream_id,
        ));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// The next message of `inbound`. Once the gateway moved its supervisors
/// away, only until [`LEAVING_GRACE`] after that (then `None`: the stream is
/// dropped).
async fn next_message(
    inbound: &mut Streaming<SupervisorMessage>,
    leaving: &mut tokio::sync::watch::Receiver<StopPhase>,
    until: &mut Option<tokio::time::Instant>,
) -> Option<Result<SupervisorMessage, Status>> {
    loop {
        match *until {
            None => tokio::select! {
                message = inbound.next() => return message,
                _ = leaving.wait_for(|phase| *phase == StopPhase::Moved) => {
                    *until = Some(tokio::time::Instant::now() + LEAVING_GRACE);
                }
            },
            Some(until) => {
                return match tokio::time::timeout_at(until, inbound.next()).await {
                    Ok(message) => message,
                    Err(_) => {
                        tracing::info!(
                            "the supervisor did not close its stream after GatewayLeaving: dropped"
                        );
                        None
                    }
                }
            }
        }
    }
}

/// Serves the messages of one attached stream until it ends, fails or is
/// superseded, or (the gateway leaving) its supervisor closes it or the
/// grace runs out; then detaches it.
async fn serve_stream(
    hub: Arc<Hub>,
    mut inbound: Streaming<SupervisorMessage>,
    member: String,
    incarnation: u64,
    stream_id: u64,
) {
    let mut leaving = hub.stop_phase();
    let mut leaving_until = None;
    let proposals = StreamProposals::start(hub.clone(), member.clone(), stream_id);
    loop {
        let message = match next_message(&mut inbound, &mut leaving, &mut leaving_until).await {
            Some(Ok(m)) => m,
            Some(Err(status)) => {
                tracing::info!(%member, %status, "supervisor stream failed");
                break;
            }
            None => break,
        };
        let input = from_proto::stream_input(message.message, &member, incarnation);
        // One registry lookup per message: a status (most messages) is
        // recorded by the same lookup that tells whether the stream is
        // still the member's current one.
        let current = match input {
            StreamInput::Status { .. } => hub.touch(&member, stream_id),
            _ => hub.is_current(&member, stream_id),
        };
        if !current {
            if hub.is_leaving() {
                // Told to move: its messages go to its next gateway; wait
                // (within the grace) for it to close this stream, so that
                // `GatewayLeaving` is delivered before the stream goes.
                continue;
            }
            tracing::info!(%member, stream_id, "message on a superseded stream ignored");
            break;
        }
        let command = match input {
            StreamInput::Status { stopping } => {
                if stopping {
                    hub.request_stop_drain(&member, incarnation, stream_id);
                }
                continue;
            }
            StreamInput::Leave => {
                // Its last acknowledgements and reports first.
                proposals.settle().await;
                hub.leave(&member, incarnation, stream_id).await;
                continue;
            }
            StreamInput::Propose(command) => command,
            StreamInput::ExecResult(result) => {
                hub.exec_result(&member, stream_id, result);
                continue;
            }
            StreamInput::Unexpected => {
                tracing::warn!(%member, "unexpected message on an attached stream ignored");
                continue;
            }
            StreamInput::Refused(why) => {
                tracing::warn!(%member, "{why}; the stream stays open");
                continue;
            }
        };
        proposals.push(command).await;
    }
    hub.detach(&member, stream_id);
    tracing::info!(%member, stream_id, "supervisor detached");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member_credentials::MemberCredentials;

    const C1: &str = "c1-0123456789abcdef";
    const C2: &str = "c2-0123456789abcdef";

    fn hello(member: &str, credential: &str) -> HostHello {
        HostHello {
            member_id: member.into(),
            credential: credential.into(),
            ..Default::default()
        }
    }

    fn members() -> MemberCredentials {
        MemberCredentials::parse(&format!("m1 {C1}\nm2 {C2}\n")).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_listed_member_must_present_its_own_credential() {
        let m = members();
        assert!(check_credential(&hello("m1", C1), None, Some(&m)).is_ok());
        let refused = check_credential(&hello("m2", C1), None, Some(&m))
            .err()
            .unwrap_or_else(|| panic!("m2 with m1's credential was admitted"));
        assert_eq!(refused.code(), tonic::Code::Unauthenticated);
        assert!(
            refused.message().contains("\"m2\""),
            "{}",
            refused.message()
        );
        assert!(!refused.message().contains(C1), "{}", refused.message());
        // The shared token never admits a listed member.
        assert!(
            check_credential(&hello("m1", "shared-token"), Some("shared-token"), Some(&m)).is_err()
        );
        // An unlisted member: refused with the file alone, admitted by the
        // (deprecated) shared token.
        assert!(check_credential(&hello("m3", C1), None, Some(&m)).is_err());
        assert!(
            check_credential(&hello("m3", "shared-token"), Some("shared-token"), Some(&m)).is_ok()
        );
        assert!(check_credential(&hello("m3", "wrong"), Some("shared-token"), Some(&m)).is_err());
        // Neither configured: an insecure gateway admits anyone.
        assert!(check_credential(&hello("m3", ""), None, None).is_ok());
    }
}

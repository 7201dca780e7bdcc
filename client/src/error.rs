//! [`Error`]: what a call of the client can end in, typed so a caller
//! branches on it (a conflict is not a lost connection).

use std::sync::Arc;
use std::time::Duration;

use tonic::{Code, Status};

/// The client's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The builder was given no endpoint.
    #[error("no gateway endpoint configured: pass at least one host:port to endpoints()")]
    NoEndpoints,
    /// Neither TLS nor plaintext was chosen (secure by default: no silent
    /// plaintext).
    #[error("no transport security chosen: call ca_file()/tls() for TLS, or insecure() for gateways started with --insecure")]
    NoSecurity,
    /// The CA file cannot be read or used.
    #[error("TLS: {0}")]
    Tls(String),
    /// The token cannot travel in a header.
    #[error("the token holds characters a header cannot carry")]
    InvalidToken,
    /// No randomness for a request id (the OS refused).
    #[error("cannot draw a random request id: {0}")]
    Random(String),
    /// The object or sandbox does not exist (`NOT_FOUND`).
    #[error("not found: {0}")]
    NotFound(String),
    /// A must-create write met an existing object, or a sandbox id is taken
    /// (`ALREADY_EXISTS`).
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// A compare-and-swap failed: the object is at another resource
    /// version (`FAILED_PRECONDITION` carrying it). Nothing changed.
    #[error("conflict: the object is at resource version {current_resource_version}: {message}")]
    Conflict {
        /// The object's resource version when the write was decided.
        current_resource_version: u64,
        /// The gateway's message.
        message: String,
    },
    /// The write's request id was already used for another write
    /// (`FAILED_PRECONDITION` carrying `x-openshell-request-id-reused`).
    /// Nothing was written. Never retried: the same request gets the same
    /// answer; a new write needs a fresh id (the client draws one per
    /// call unless the caller set it, as `create_sandbox` allows).
    #[error(
        "request id reused: {message} (first used by the write at log index {first_log_index})"
    )]
    RequestIdReused {
        /// The log index that applied the write the id was first used for.
        first_log_index: u64,
        /// The gateway's message.
        message: String,
    },
    /// A watch asked for a revision the gateway no longer holds
    /// (`OUT_OF_RANGE` or `RESOURCE_EXHAUSTED` carrying
    /// `x-openshell-compacted-revision`): re-read the objects (`list`) and
    /// watch again from `oldest` or later, as after an etcd compaction.
    #[error("compacted: {endpoint}: {message} (the oldest revision it holds is {oldest})")]
    Compacted {
        /// The gateway that answered (for a watch: the last one asked).
        endpoint: String,
        /// The oldest revision the gateway could serve.
        oldest: u64,
        /// The gateway's message.
        message: String,
    },
    /// The request is malformed (`INVALID_ARGUMENT`); the message names the
    /// field.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// No or a wrong token, or a token without the role the call needs
    /// (`UNAUTHENTICATED`, `PERMISSION_DENIED`).
    #[error("unauthorized ({code:?}): {message}")]
    Unauthorized {
        /// The status code.
        code: Code,
        /// The gateway's message.
        message: String,
    },
    /// A membership change the leader could not commit: no majority of the
    /// voters is reachable (`UNAVAILABLE` carrying `x-openshell-no-quorum`).
    /// Not retried: every gateway would reach the same leader, and the
    /// change completes by itself once a majority is back.
    #[error("no quorum: {0}")]
    NoQuorum(String),
    /// Any other status that retrying cannot change (`FAILED_PRECONDITION`
    /// without a resource version, `RESOURCE_EXHAUSTED`, `INTERNAL`, ...).
    #[error("refused by {endpoint} ({code:?}): {message}")]
    Refused {
        /// The gateway that answered.
        endpoint: String,
        /// The status code.
        code: Code,
        /// The gateway's message.
        message: String,
    },
    /// Every attempt failed with a retryable error until the call's
    /// deadline. For a write the outcome is unknown, but retrying it with
    /// the same request id (as the client did) can never apply it twice.
    #[error("{operation}: gave up after {attempts} attempts in {elapsed:?} (deadline {deadline:?}); last error: {last}")]
    DeadlineExceeded {
        /// The call (`put`, `create_sandbox`, ...).
        operation: &'static str,
        /// How many attempts were made.
        attempts: u32,
        /// How long the call ran.
        elapsed: Duration,
        /// The call's deadline.
        deadline: Duration,
        /// The last attempt's error, in words.
        last: String,
        /// The failed attempts, oldest first (at most [`MAX_FAILURES`],
        /// the latest kept).
        failures: Vec<Failure>,
    },
    /// Every endpoint failed with a retryable error in each of the
    /// policy's rounds ([`crate::RetryPolicy::max_rounds`]), or, for a
    /// call that must not run twice, the one attempt that reached a
    /// gateway lost its answer.
    #[error(
        "{operation}: no gateway answered in {attempts} attempts; last error: {}",
        last_words(failures)
    )]
    Unanswered {
        /// The call.
        operation: &'static str,
        /// How many attempts were made.
        attempts: u32,
        /// The failed attempts, oldest first (at most [`MAX_FAILURES`]).
        failures: Vec<Failure>,
    },
}

/// The most failed attempts an error keeps.
pub const MAX_FAILURES: usize = 32;

/// Why one attempt at one gateway failed.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The gateway tried.
    pub endpoint: String,
    /// What happened.
    pub cause: Cause,
}

/// What ended an attempt without an answer.
#[derive(Clone, Debug)]
pub enum Cause {
    /// The channel could not be opened (refused, TLS handshake failed, or
    /// timed out): nothing was sent.
    Connect(Arc<proto::client::ClientError>),
    /// A retryable status, from the gateway or the transport.
    Status(Status),
    /// No answer within the attempt's timeout.
    TimedOut(Duration),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.cause {
            Cause::Connect(e) => write!(f, "{e}"),
            Cause::Status(status) => write!(
                f,
                "{}: {:?}: {}",
                self.endpoint,
                status.code(),
                status.message()
            ),
            Cause::TimedOut(after) => write!(f, "{}: no answer within {after:?}", self.endpoint),
        }
    }
}

/// The last failure in words.
fn last_words(failures: &[Failure]) -> String {
    failures
        .last()
        .map_or_else(|| "no attempt made".to_string(), ToString::to_string)
}

impl Error {
    /// The error a non-retryable `status` from `endpoint` stands for.
    pub(crate) fn from_status(endpoint: &str, status: &Status) -> Self {
        let message = status.message().to_string();
        if let Some(oldest) = number(status, proto::metadata::COMPACTED_REVISION) {
            return Error::Compacted {
                endpoint: endpoint.to_string(),
                oldest,
                message,
            };
        }
        match status.code() {
            Code::NotFound => Error::NotFound(message),
            Code::AlreadyExists => Error::AlreadyExists(message),
            Code::InvalidArgument => Error::InvalidArgument(message),
            Code::Unavailable if no_quorum(status) => Error::NoQuorum(message),
            Code::Unauthenticated | Code::PermissionDenied => Error::Unauthorized {
                code: status.code(),
                message,
            },
            Code::FailedPrecondition => match (resource_version(status), reused(status)) {
                (_, Some(first_log_index)) => Error::RequestIdReused {
                    first_log_index,
                    message,
                },
                (Some(current_resource_version), None) => Error::Conflict {
                    current_resource_version,
                    message,
                },
                (None, None) => Error::Refused {
                    endpoint: endpoint.to_string(),
                    code: status.code(),
                    message,
                },
            },
            code => Error::Refused {
                endpoint: endpoint.to_string(),
                code,
                message,
            },
        }
    }

    /// Whether this is a failed compare-and-swap.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }
}

/// Whether `status` says the leader has no quorum for a membership change.
fn no_quorum(status: &Status) -> bool {
    status.metadata().contains_key(proto::metadata::NO_QUORUM)
}

/// The leader's address a "not the leader" answer carries, if any
/// (`FAILED_PRECONDITION` with `x-openshell-leader-addr`).
pub(crate) fn leader_hint(status: &Status) -> Option<String> {
    if status.code() != Code::FailedPrecondition {
        return None;
    }
    let addr = status.metadata().get(proto::metadata::LEADER_ADDR)?;
    addr.to_str()
        .ok()
        .filter(|a| !a.is_empty())
        .map(str::to_string)
}

/// The current resource version a rejection carries, if any.
fn resource_version(status: &Status) -> Option<u64> {
    number(status, proto::metadata::RESOURCE_VERSION)
}

/// The log index of the first write of a reused request id, if the status
/// says the id was reused.
fn reused(status: &Status) -> Option<u64> {
    number(status, proto::metadata::REQUEST_ID_REUSED)
}

/// The number in `status`'s metadata `key`, if any.
fn number(status: &Status, key: &str) -> Option<u64> {
    status.metadata().get(key)?.to_str().ok()?.parse().ok()
}

/// Whether a failed attempt may be retried on the next endpoint: the
/// gateway was unreachable or lost, had no leader, or cannot say whether
/// the write applied (`UNAVAILABLE`, `UNKNOWN`, `ABORTED`,
/// `DEADLINE_EXCEEDED`, or a transport error: a status with a transport
/// cause, whatever its code, since no gateway sent it). Every other code is
/// an answer: retrying cannot change it; so is `UNAVAILABLE` marked no
/// quorum ([`Error::NoQuorum`]: every gateway would reach the same leader).
pub fn is_retryable(status: &Status) -> bool {
    if from_transport(status) {
        return true;
    }
    match status.code() {
        Code::Unavailable => !no_quorum(status),
        Code::Unknown | Code::Aborted | Code::DeadlineExceeded => true,
        _ => false,
    }
}

/// Whether a failed attempt of a call that must not run twice
/// ([`crate::retry::Repeat::Once`]) may be retried: only when the gateway itself
/// answered `UNAVAILABLE` (it did not act: no leader, or not serving); an
/// outcome it cannot vouch for (`UNKNOWN`, a deadline, a broken
/// connection) ends the call.
pub fn is_retryable_once(status: &Status) -> bool {
    status.code() == Code::Unavailable && !from_transport(status) && !no_quorum(status)
}

/// Whether `status` came from the transport (a broken connection, a reset
/// stream) rather than from a gateway: tonic attaches the transport error as
/// its source; a status a gateway sent carries none.
fn from_transport(status: &Status) -> bool {
    use std::error::Error as _;
    status.source().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lost_or_unknown_outcomes_are_retried() {
        for code in [
            Code::Unavailable,
            Code::Unknown,
            Code::Aborted,
            Code::DeadlineExceeded,
        ] {
            assert!(is_retryable(&Status::new(code, "x")), "{code:?}");
        }
        for code in [
            Code::InvalidArgument,
            Code::FailedPrecondition,
            Code::PermissionDenied,
            Code::Unauthenticated,
            Code::NotFound,
            Code::AlreadyExists,
            Code::ResourceExhausted,
            Code::Internal,
            Code::Cancelled,
        ] {
            assert!(!is_retryable(&Status::new(code, "x")), "{code:?}");
        }
    }

    #[test]
    fn a_version_mismatch_is_a_conflict_naming_the_current_version() {
        let mut status = Status::failed_precondition("resource version mismatch");
        status.metadata_mut().insert(
            proto::metadata::RESOURCE_VERSION,
            tonic::metadata::MetadataValue::from_static("42"),
        );
        let err = Error::from_status("g1", &status);
        assert!(
            matches!(
                err,
                Error::Conflict {
                    current_resource_version: 42,
                    ..
                }
            ),
            "{err}"
        );
        let plain = Error::from_status("g1", &Status::failed_precondition("no member"));
        assert!(matches!(plain, Error::Refused { .. }), "{plain}");
    }

    #[test]
    fn a_reused_request_id_is_its_own_error_and_not_retried() {
        let mut status = Status::failed_precondition("request_id \"R\" was already used");
        status.metadata_mut().insert(
            proto::metadata::REQUEST_ID_REUSED,
            tonic::metadata::MetadataValue::from_static("7"),
        );
        assert!(!is_retryable(&status));
        let err = Error::from_status("g1", &status);
        assert!(
            matches!(
                err,
                Error::RequestIdReused {
                    first_log_index: 7,
                    ..
                }
            ),
            "{err}"
        );
        assert!(!err.is_conflict());
    }

    #[test]
    fn no_quorum_is_an_answer_and_a_transport_cause_is_retried() {
        let mut status = Status::unavailable("no quorum for the membership change");
        status.metadata_mut().insert(
            proto::metadata::NO_QUORUM,
            tonic::metadata::MetadataValue::from_static("1"),
        );
        assert!(!is_retryable(&status));
        assert!(!is_retryable_once(&status));
        let err = Error::from_status("g1", &status);
        assert!(matches!(err, Error::NoQuorum(_)), "{err}");

        let mut cut = Status::internal("h2 protocol error");
        cut.set_source(Arc::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        )));
        assert!(is_retryable(&cut), "no gateway sent it");
        assert!(!is_retryable_once(&cut), "the call may have run");
        assert!(is_retryable_once(&Status::unavailable("no leader")));
        assert!(!is_retryable_once(&Status::unknown("outcome unknown")));
    }
}

//! [`Error`]: what a call of the client can end in, typed so a caller
//! branches on it (a conflict is not a lost connection).

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
    },
}

impl Error {
    /// The error a non-retryable `status` from `endpoint` stands for.
    pub(crate) fn from_status(endpoint: &str, status: &Status) -> Self {
        let message = status.message().to_string();
        match status.code() {
            Code::NotFound => Error::NotFound(message),
            Code::AlreadyExists => Error::AlreadyExists(message),
            Code::InvalidArgument => Error::InvalidArgument(message),
            Code::Unauthenticated | Code::PermissionDenied => Error::Unauthorized {
                code: status.code(),
                message,
            },
            Code::FailedPrecondition => match resource_version(status) {
                Some(current_resource_version) => Error::Conflict {
                    current_resource_version,
                    message,
                },
                None => Error::Refused {
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

/// The current resource version a rejection carries, if any.
fn resource_version(status: &Status) -> Option<u64> {
    status
        .metadata()
        .get(proto::metadata::RESOURCE_VERSION)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// Whether a failed attempt may be retried on the next endpoint: the
/// gateway was unreachable or lost, had no leader, or cannot say whether
/// the write applied (`UNAVAILABLE`, `UNKNOWN`, `ABORTED`,
/// `DEADLINE_EXCEEDED`, or a transport error, which tonic reports as one of
/// those or as `CANCELLED` with a transport cause). Every other code is an
/// answer: retrying cannot change it.
pub fn is_retryable(status: &Status) -> bool {
    use std::error::Error as _;
    match status.code() {
        Code::Unavailable | Code::Unknown | Code::Aborted | Code::DeadlineExceeded => true,
        Code::Cancelled => status.source().is_some(),
        _ => false,
    }
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
}

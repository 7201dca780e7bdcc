//! What a failed peer call tells: whether its request certainly never left
//! this node ([`never_sent`]: a write may then be retried without the risk
//! of applying it twice), and the error of a leadership-transfer call
//! ([`PeerCallError`]).

use std::io;

use proto::client::ClientError;

/// A call of a leadership transfer that failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerCallError {
    /// The peer's address is not a valid address.
    #[error(transparent)]
    BadAddress(#[from] ClientError),
    /// The call failed.
    #[error("{}", .0.message())]
    Failed(#[from] tonic::Status),
}

/// Whether a failed gRPC call certainly never reached the peer, so retrying
/// it cannot apply a write twice.
///
/// Decided from the typed error source, never from text. tonic 0.14 reports
/// a connection that could not be established as `UNAVAILABLE` with the
/// source chain `tonic::transport::Error` (kind Transport) ->
/// [`tonic::ConnectError`] -> hyper-util's `ConnectError` ("tcp connect
/// error" or "dns error") -> the [`io::Error`] of the failed `connect`
/// (`ConnectionRefused` and kin). A `ConnectError` means TCP connect, DNS or
/// the TLS handshake failed: no request byte left this node. A status the
/// peer itself sent has no source, and a connection that broke after the
/// request went out has neither a `ConnectError` nor a connect error kind.
pub fn never_sent(status: &tonic::Status) -> bool {
    if status.code() != tonic::Code::Unavailable {
        return false;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(status);
    while let Some(error) = source {
        if error.is::<tonic::ConnectError>() {
            return true;
        }
        if let Some(io) = error.downcast_ref::<io::Error>() {
            if connect_failed(io.kind()) {
                return true;
            }
        }
        source = error.source();
    }
    false
}

/// I/O error kinds of a connection that was never established.
fn connect_failed(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::AddrNotAvailable
            | io::ErrorKind::NotConnected
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
    )
}

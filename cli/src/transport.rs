//! Transport security of the CLI: TLS or plaintext from the flags
//! ([`security`]), and a failed handshake as one line naming the gateway and
//! the cause ([`connect_error`], [`plaintext_refused`]: a certificate, a
//! plaintext gateway, a handshake that timed out, the gateway's
//! per-address handshake limit) instead of a transport error chain or "no
//! gateway reachable".

use std::error::Error as _;
use std::path::Path;

use proto::client::ClientError;
use proto::tls::{ClientTls, Reload};
use rustls::CertificateError;

use crate::CliError;

/// The one line when a command that talks to gateways has neither
/// `--ca-file` nor `--insecure` (secure by default: no silent plaintext).
pub const NO_SECURITY: &str = "no transport security chosen: pass --ca-file FILE \
     (OPENSHELL_CA_FILE; the CA that signed the gateways' certificates) to talk TLS, or --insecure \
     for gateways started with --insecure (for `openshell-pool dev`: `source openshell-dev/env`)";

/// The transport the flags choose: TLS verifying the gateways against the
/// CA in `ca_file`, or plaintext when `insecure`.
///
/// # Errors
/// [`CliError::Usage`] ([`NO_SECURITY`]) with neither; [`CliError::Local`]
/// naming the file when the CA cannot be read or parsed.
pub fn security(
    ca_file: Option<&Path>,
    client_cert: Option<(&Path, &Path)>,
    insecure: bool,
) -> Result<Option<ClientTls>, CliError> {
    match (ca_file, insecure) {
        (_, true) if client_cert.is_some() => Err(CliError::Usage(
            "--client-cert-file needs TLS: drop --insecure and pass --ca-file".into(),
        )),
        (_, true) => Ok(None),
        (Some(ca), false) => ClientTls::load(ca, client_cert)
            .map(Some)
            .map_err(|e| CliError::Local(format!("--ca-file/--client-cert-file {e}"))),
        (None, false) => Err(CliError::Usage(NO_SECURITY.into())),
    }
}

/// The rustls error, if any, in the source chain of `err`.
fn rustls_cause<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(r) = e.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        if let Some(r) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(r);
        }
        next = e.source();
    }
    None
}

/// The handshake timeout, if any, in the source chain of `err`.
fn handshake_timed_out<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a proto::tls::HandshakeTimedOut> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(t) = e.downcast_ref::<proto::tls::HandshakeTimedOut>() {
            return Some(t);
        }
        if let Some(t) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<proto::tls::HandshakeTimedOut>())
        {
            return Some(t);
        }
        next = e.source();
    }
    None
}

/// True when the chain of `err` holds an I/O error of `kind`.
fn has_io_kind(err: &(dyn std::error::Error + 'static), kind: std::io::ErrorKind) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == kind)
        {
            return true;
        }
        next = e.source();
    }
    false
}

/// What a TLS failure means for the user, and what to do.
fn explain(cause: &rustls::Error, tls: &ClientTls) -> String {
    let ca = tls.describe();
    match cause {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => format!(
            "certificate not signed by --ca-file {ca} (pass the CA that signed the gateways' certificates)"
        ),
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => "its certificate does not name this address (use a host name or IP address its certificate lists)"
            .to_string(),
        rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => "its certificate has expired (renew it)".to_string(),
        rustls::Error::InvalidCertificate(other) => format!("its certificate is refused: {other:?}"),
        rustls::Error::InvalidMessage(_)
        | rustls::Error::InappropriateMessage { .. }
        | rustls::Error::InappropriateHandshakeMessage { .. } => {
            "the gateway does not speak TLS (started with --insecure? then pass --insecure instead of --ca-file)"
                .to_string()
        }
        e if proto::tls::refused_for_limit(e) => format!(
            "the gateway refused the handshake: too many handshakes in progress from this address \
             (its limit is {} per address); retry shortly, or look for a client on this host holding \
             connections open",
            proto::tls::MAX_PENDING_PER_ADDRESS
        ),
        rustls::Error::AlertReceived(alert) => {
            format!("the gateway refused the handshake ({alert:?})")
        }
        other => other.to_string(),
    }
}

/// [`CliError::Tls`] when dialling `addr` failed in the TLS handshake (one
/// line: the gateway, "TLS", the cause and what to do); otherwise
/// [`CliError::Unreachable`].
pub fn connect_error(addr: &str, tls: Option<&ClientTls>, err: &ClientError) -> CliError {
    let Some(tls) = tls else {
        return CliError::Unreachable(addr.to_string());
    };
    if let Some(cause) = rustls_cause(err) {
        return CliError::Tls(format!("gateway {addr}: TLS: {}", explain(cause, tls)));
    }
    if let Some(timed_out) = handshake_timed_out(err) {
        return CliError::Tls(format!(
            "gateway {addr}: TLS: the handshake timed out after {} ms: the gateway accepted the \
             connection but did not answer (stopped or overloaded, or its {} handshake slots are \
             full)",
            timed_out.after.as_millis(),
            proto::tls::MAX_HANDSHAKES
        ));
    }
    // The server closed the connection in the middle of the handshake: a
    // plaintext gateway reading a ClientHello as HTTP/2 does that.
    if has_io_kind(err, std::io::ErrorKind::UnexpectedEof) {
        return CliError::Tls(format!(
            "gateway {addr}: TLS: the gateway closed the connection during the handshake (started with \
             --insecure? then pass --insecure instead of --ca-file)"
        ));
    }
    CliError::Unreachable(addr.to_string())
}

/// A call presenting a client certificate (`--client-cert-file`) that
/// `addr` cut off before any answer: with TLS 1.3 a server that refuses
/// the certificate says so after the client finished its handshake, so the
/// refusal surfaces on the first call (an alert, or a closed connection).
/// `None` without a client certificate, or when the gateway answered.
pub fn certificate_refused(
    addr: &str,
    tls: Option<&ClientTls>,
    status: &tonic::Status,
) -> Option<CliError> {
    let tls = tls.filter(|t| t.presents_certificate())?;
    let source = status.source()?;
    let why = match rustls_cause(source) {
        Some(rustls::Error::AlertReceived(alert)) => format!("{alert:?}"),
        Some(other) => other.to_string(),
        None => format!("the connection closed: {}", status.message()),
    };
    Some(CliError::Tls(format!(
        "gateway {addr}: TLS: the gateway refused the client certificate ({why}): it accepts \
         only certificates its openshell.gateway.auth.client_ca_file signed ({})",
        tls.describe()
    )))
}

/// A plaintext (`--insecure`) call that `addr` cut off before any answer
/// (a TLS server reads the HTTP/2 preface as a bad handshake and closes;
/// the client then sees an HTTP/2 error, a cancelled or a broken
/// connection): the gateway most likely serves TLS. `None` when TLS was in
/// use, the call ran out of time, or the gateway itself answered (a status
/// it sent carries no transport error).
pub fn plaintext_refused(
    addr: &str,
    tls: Option<&ClientTls>,
    status: &tonic::Status,
) -> Option<CliError> {
    let timed_out = status.code() == tonic::Code::DeadlineExceeded;
    if tls.is_some() || timed_out || status.source().is_none() {
        return None;
    }
    Some(CliError::Tls(format!(
        "gateway {addr}: no plaintext answer, the connection closed ({}): it most likely serves TLS \
         (the default); pass --ca-file (OPENSHELL_CA_FILE) instead of --insecure",
        status.message()
    )))
}

//! A runtime's TLS identity: a CA made for this one runtime signs its
//! serving certificate (for the runtime's name, and for its IP when known
//! before launch), then the CA key is dropped. The launcher hands the
//! certificate and key to the runtime (a 0600 file, a Kubernetes Secret)
//! and records the CA certificate, public, in the replicated state.

use proto::tls::generate::{Ca, Usage};

use crate::DriverError;

/// A runtime's certificate and key, and the CA certificate that verifies it
/// (`Debug` prints the key as `<redacted>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// PEM of the per-runtime CA certificate (public).
    pub ca_pem: String,
    /// PEM of the runtime's serving certificate.
    pub cert_pem: String,
    /// PEM of the runtime's private key.
    pub key_pem: proto::secret::Secret,
}

/// Makes the identity of runtime `name`; its certificate names `name` and
/// each of `ips`.
///
/// # Errors
/// [`DriverError::Refused`] when a name is not acceptable to rcgen.
pub fn issue(
    driver: &'static str,
    name: &str,
    ips: &[std::net::IpAddr],
) -> Result<Identity, DriverError> {
    let refused = |e: proto::tls::generate::GenerateError| DriverError::Refused {
        driver,
        message: format!("TLS identity of {name}: {e}"),
    };
    let ca = Ca::ephemeral(&format!("openshell runtime {name}")).map_err(refused)?;
    let mut names = vec![name.to_string()];
    names.extend(ips.iter().map(ToString::to_string));
    let issued = ca.issue_pem(name, &names, Usage::Server).map_err(refused)?;
    Ok(Identity {
        ca_pem: ca.cert_pem().to_string(),
        cert_pem: issued.cert,
        key_pem: issued.key,
    })
}

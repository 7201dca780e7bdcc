//! The transport-security part of the gateway configuration: the two
//! gRPC ports and the advertised (membership) address, `[openshell.gateway.tls]`,
//! and secure mode: without `insecure`, every missing piece (signing key,
//! TLS files, peer port, admin token) is named in one
//! [`ConfigError::NotSecured`]; `[openshell.gateway.auth]`, whose admin
//! token secure mode needs, is here too.

use std::net::SocketAddr;

pub use gateway_config::tls::{AuthSection, TlsSection};

use crate::config_error::ConfigError;

/// TLS of a gateway: what each port serves and how it dials its peers.
/// Each re-reads its files when they change.
#[derive(Clone, Debug)]
pub struct GatewayTls {
    /// The client port: this gateway's certificate; callers authenticate
    /// by token or credential.
    pub client_port: proto::tls::ServerTls,
    /// The peer port: this gateway's certificate; a caller must present a
    /// certificate the CA signed (a gateway of this cluster).
    pub peer_port: proto::tls::ServerTls,
    /// Calls to peers: the server must chain to the CA; this gateway's
    /// certificate is presented as the client certificate.
    pub peer_client: proto::tls::ClientTls,
}

/// Without `--insecure`: every missing piece of secure mode, in one error.
fn check_secured(
    tls: &TlsSection,
    peer_port: bool,
    insecure_signing_key: bool,
    auth: &AuthSection,
) -> Result<(), ConfigError> {
    let mut missing = Vec::new();
    if insecure_signing_key {
        missing.push(("openshell.gateway.signing_key_file", "--signing-key-file"));
    }
    if tls.cert_file.is_none() {
        missing.push(("openshell.gateway.tls.cert_file", "--tls-cert-file"));
    }
    if tls.key_file.is_none() {
        missing.push(("openshell.gateway.tls.key_file", "--tls-key-file"));
    }
    if tls.ca_file.is_none() {
        missing.push(("openshell.gateway.tls.ca_file", "--tls-ca-file"));
    }
    if !peer_port {
        missing.push(("openshell.gateway.peer_listen_addr", "--peer-listen"));
    }
    let has_admin = auth
        .admin_tokens
        .as_ref()
        .is_some_and(|t| t.iter().any(|t| !t.is_empty()));
    if !has_admin {
        missing.push(("openshell.gateway.auth.admin_tokens", "--admin-token-file"));
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::NotSecured(missing))
    }
}

/// Loads `[openshell.gateway.tls]`: all three files, or none (plaintext);
/// the client port asks for client certificates signed by
/// `client_ca` when one is given.
fn load_tls(
    section: &TlsSection,
    client_ca: Option<&std::path::Path>,
) -> Result<Option<GatewayTls>, ConfigError> {
    let (cert, key, ca) = match (&section.cert_file, &section.key_file, &section.ca_file) {
        (None, None, None) => return Ok(None),
        (Some(cert), Some(key), Some(ca)) => (cert, key, ca),
        (cert, key, _) => {
            let (key, flag) = if cert.is_none() {
                ("openshell.gateway.tls.cert_file", "--tls-cert-file")
            } else if key.is_none() {
                ("openshell.gateway.tls.key_file", "--tls-key-file")
            } else {
                ("openshell.gateway.tls.ca_file", "--tls-ca-file")
            };
            return Err(ConfigError::Missing { key, flag });
        }
    };
    let invalid = |e: proto::tls::TlsError| ConfigError::Invalid {
        key: "openshell.gateway.tls",
        value: format!(
            "cert_file={} key_file={} ca_file={}",
            cert.display(),
            key.display(),
            ca.display()
        ),
        problem: e.to_string(),
    };
    use proto::tls::{ClientAuth, ClientTls, ServerTls};
    let rate = handshake_rate(section)?;
    Ok(Some(GatewayTls {
        client_port: ServerTls::load(
            cert,
            key,
            client_ca.map_or(ClientAuth::None, |ca| {
                ClientAuth::Optional(ca.to_path_buf())
            }),
        )
        .map_err(invalid)?
        .with_handshake_rate(rate),
        peer_port: ServerTls::load(cert, key, ClientAuth::Required(ca.clone()))
            .map_err(invalid)?
            .with_handshake_rate(rate),
        peer_client: ClientTls::load(ca, Some((cert, key))).map_err(invalid)?,
    }))
}

/// The most a handshake rate or burst may be set to.
const MAX_HANDSHAKE_RATE: u64 = 100_000;

/// `tls.handshake_rate_per_address` and `tls.handshake_burst_per_address`,
/// in range (defaults: [`proto::tls::HandshakeRate::default`]).
fn handshake_rate(section: &TlsSection) -> Result<proto::tls::HandshakeRate, ConfigError> {
    let defaults = proto::tls::HandshakeRate::default();
    let pick = |key: &'static str, value: Option<u32>, default: std::num::NonZeroU32| {
        let Some(value) = value else {
            return Ok(default);
        };
        let value = crate::config_error::in_range(key, value.into(), 1, MAX_HANDSHAKE_RATE)?;
        u32::try_from(value)
            .ok()
            .and_then(std::num::NonZeroU32::new)
            .ok_or_else(|| ConfigError::Invalid {
                key,
                value: value.to_string(),
                problem: format!("must be 1..={MAX_HANDSHAKE_RATE}"),
            })
    };
    Ok(proto::tls::HandshakeRate {
        per_second: pick(
            "openshell.gateway.tls.handshake_rate_per_address",
            section.handshake_rate_per_address,
            defaults.per_second,
        )?,
        burst: pick(
            "openshell.gateway.tls.handshake_burst_per_address",
            section.handshake_burst_per_address,
            defaults.burst,
        )?,
    })
}

/// The client port, the peer port (if any) and the advertised address
/// (default: the peer port, else the client port), validated.
///
/// # Errors
/// An address that does not parse, or a peer port equal to the client
/// port, naming the key.
pub(crate) fn ports(
    listen: &str,
    peer_listen: Option<&str>,
    advertise: Option<String>,
) -> Result<(SocketAddr, Option<SocketAddr>, String), ConfigError> {
    let listen_addr: SocketAddr = listen.parse().map_err(|_| ConfigError::Invalid {
        key: "openshell.gateway.listen_addr",
        value: listen.to_string(),
        problem: "must be ip:port, e.g. 127.0.0.1:7001".into(),
    })?;
    let peer_listen_addr = match peer_listen {
        None => None,
        Some(text) => Some(
            text.parse::<SocketAddr>()
                .map_err(|_| ConfigError::Invalid {
                    key: "openshell.gateway.peer_listen_addr",
                    value: text.to_string(),
                    problem: "must be ip:port, e.g. 127.0.0.1:7101".into(),
                })?,
        ),
    };
    if peer_listen_addr == Some(listen_addr) {
        return Err(ConfigError::Invalid {
            key: "openshell.gateway.peer_listen_addr",
            value: listen.to_string(),
            problem: "must differ from listen_addr (the client port)".into(),
        });
    }
    let advertise = advertise
        .or_else(|| peer_listen.map(str::to_string))
        .unwrap_or_else(|| listen.to_string());
    if advertise
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .is_none()
    {
        return Err(ConfigError::Invalid {
            key: "openshell.gateway.advertise_addr",
            value: advertise,
            problem: "must be host:port".into(),
        });
    }
    Ok((listen_addr, peer_listen_addr, advertise))
}

/// Secure mode's checks (skipped when `insecure`), then the TLS files.
///
/// # Errors
/// [`ConfigError::NotSecured`] naming every missing piece; a TLS file that
/// cannot be used; TLS without a peer port.
pub(crate) fn secure(
    insecure: bool,
    tls: &TlsSection,
    peer_port: bool,
    insecure_signing_key: bool,
    auth: &AuthSection,
) -> Result<Option<GatewayTls>, ConfigError> {
    if !insecure {
        check_secured(tls, peer_port, insecure_signing_key, auth)?;
    }
    check_certificate_identity(tls, auth)?;
    let loaded = load_tls(tls, auth.client_ca_file.as_deref())?;
    if loaded.is_some() && !peer_port {
        return Err(ConfigError::Missing {
            key: "openshell.gateway.peer_listen_addr",
            flag: "--peer-listen (TLS needs the peer port: peers present certificates there)",
        });
    }
    Ok(loaded)
}

/// Client certificates as identities (`auth.client_ca_file` and the two
/// name lists): all or nothing, over TLS, with a CA of their own, and
/// names a certificate can carry, each in one list.
fn check_certificate_identity(tls: &TlsSection, auth: &AuthSection) -> Result<(), ConfigError> {
    let names: Vec<(&'static str, &String)> = [
        (
            "openshell.gateway.auth.admin_certificate_names",
            &auth.admin_certificate_names,
        ),
        (
            "openshell.gateway.auth.viewer_certificate_names",
            &auth.viewer_certificate_names,
        ),
    ]
    .into_iter()
    .flat_map(|(key, list)| list.iter().flatten().map(move |name| (key, name)))
    .collect();
    let invalid = |key: &'static str, value: String, problem: String| {
        Err(ConfigError::Invalid {
            key,
            value,
            problem,
        })
    };
    let Some(ca) = &auth.client_ca_file else {
        return match names.first() {
            Some((key, name)) => invalid(
                key,
                (*name).clone(),
                "certificate names need openshell.gateway.auth.client_ca_file, the CA that signs \
                 those certificates"
                    .into(),
            ),
            None => Ok(()),
        };
    };
    let key = "openshell.gateway.auth.client_ca_file";
    let shown = ca.display().to_string();
    if names.is_empty() {
        return invalid(
            key,
            shown,
            "maps no certificate to a role: list common names in admin_certificate_names or \
             viewer_certificate_names"
                .into(),
        );
    }
    if tls.cert_file.is_none() {
        return invalid(
            key,
            shown,
            "client certificates need TLS on the client port: set openshell.gateway.tls".into(),
        );
    }
    if tls.ca_file.as_ref() == Some(ca) {
        return invalid(
            key,
            shown,
            "is the cluster CA (tls.ca_file), which signs gateways: a certificate it signed \
             passes the peer port; give operators a CA of their own"
                .into(),
        );
    }
    let mut seen = std::collections::BTreeSet::new();
    for (key, name) in names {
        if let Err(problem) = proto::text::check_printable("a certificate name", name, 256) {
            return invalid(key, name.clone(), problem);
        }
        if !seen.insert(name) {
            return invalid(
                key,
                name.clone(),
                "is listed twice; give each name one role".into(),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_identities_are_all_or_nothing_over_tls_with_their_own_ca() {
        let tls = TlsSection {
            cert_file: Some("/etc/gw.crt".into()),
            key_file: Some("/etc/gw.key".into()),
            ca_file: Some("/etc/cluster-ca.crt".into()),
            ..TlsSection::default()
        };
        let auth = |ca: Option<&str>, admin: &[&str], viewer: &[&str]| AuthSection {
            client_ca_file: ca.map(Into::into),
            admin_certificate_names: Some(admin.iter().map(|s| s.to_string()).collect()),
            viewer_certificate_names: Some(viewer.iter().map(|s| s.to_string()).collect()),
            ..AuthSection::default()
        };
        let refused = |tls: &TlsSection, auth: AuthSection, key: &str, words: &str| {
            let e = check_certificate_identity(tls, &auth)
                .map(|()| "accepted".to_string())
                .unwrap_or_else(|e| e.to_string());
            assert!(e.contains(key) && e.contains(words), "{key} / {words}: {e}");
        };
        assert!(check_certificate_identity(
            &tls,
            &auth(Some("/etc/ops-ca.crt"), &["alice"], &["dana"])
        )
        .is_ok());
        assert!(check_certificate_identity(&tls, &AuthSection::default()).is_ok());
        refused(
            &tls,
            auth(None, &["alice"], &[]),
            "admin_certificate_names",
            "client_ca_file",
        );
        refused(
            &tls,
            auth(Some("/etc/ops-ca.crt"), &[], &[]),
            "client_ca_file",
            "maps no certificate",
        );
        refused(
            &TlsSection::default(),
            auth(Some("/etc/ops-ca.crt"), &["alice"], &[]),
            "client_ca_file",
            "need TLS",
        );
        refused(
            &tls,
            auth(Some("/etc/cluster-ca.crt"), &["alice"], &[]),
            "client_ca_file",
            "cluster CA",
        );
        refused(
            &tls,
            auth(Some("/etc/ops-ca.crt"), &["alice"], &["alice"]),
            "viewer_certificate_names",
            "twice",
        );
        refused(
            &tls,
            auth(Some("/etc/ops-ca.crt"), &["Alice Smith"], &[]),
            "admin_certificate_names",
            "Alice Smith",
        );
    }

    #[test]
    fn the_handshake_rate_defaults_and_refuses_out_of_range_naming_the_key() {
        let section = TlsSection::default();
        assert_eq!(
            handshake_rate(&section).ok(),
            Some(proto::tls::HandshakeRate::default())
        );
        let section = TlsSection {
            handshake_rate_per_address: Some(500),
            handshake_burst_per_address: Some(1000),
            ..TlsSection::default()
        };
        let rate = handshake_rate(&section).expect("in range");
        assert_eq!((rate.per_second.get(), rate.burst.get()), (500, 1000));
        for (rate, burst, key) in [
            (Some(0), None, "handshake_rate_per_address"),
            (None, Some(100_001), "handshake_burst_per_address"),
        ] {
            let section = TlsSection {
                handshake_rate_per_address: rate,
                handshake_burst_per_address: burst,
                ..TlsSection::default()
            };
            let e = handshake_rate(&section).expect_err("out of range");
            assert!(e.to_string().contains(key), "{e}");
        }
    }
}

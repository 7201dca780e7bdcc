//! Caller authentication (a bearer token, or a client certificate) and the
//! `platform_admin` role.
//!
//! Tokens come from `[openshell.gateway.auth]` (`admin_tokens`,
//! `viewer_tokens`) or `--admin-token`. Client certificates: with
//! `auth.client_ca_file`, the client port asks for an optional client
//! certificate signed by that CA (verified in the TLS handshake); its
//! subject common name is looked up in `admin_certificate_names` and
//! `viewer_certificate_names`. A call carrying a token is judged by the
//! token (a wrong token is refused, never excused by a certificate);
//! without one, by its certificate. Reads need any valid identity,
//! mutating calls need `platform_admin`. With neither tokens nor
//! certificate names configured, the gateway runs open (development) and
//! says so at start-up.
//!
//! A call a gateway replays on another (ClusterAdmin on the leader, an exec
//! relayed to the gateway holding a stream) carries the caller's token; a
//! caller identified by certificate is vouched for instead
//! ([`proto::metadata::VOUCHED_ROLE`]), which only the peer-port services
//! of a TLS cluster honour ([`Auth::trusting_vouched`]): mutual TLS there
//! proves the sender is one of this cluster's gateways.
//!
//! Two checks, in order. [`authenticated`] wraps a service (ClusterAdmin,
//! PoolAdmin, ObjectStore) in an interceptor ([`Authenticate`]) that refuses
//! a call without a valid token of any role with `UNAUTHENTICATED` from its
//! headers alone, before tonic reads or decodes the body: a caller without a
//! token cannot make the gateway buffer up to the message-size limit per
//! call. The handler then checks the role its call needs
//! ([`Auth::require`]). SupervisorHost (its credential is in the first
//! message) and the raft transport (peers) are not wrapped.

use std::collections::BTreeSet;

use proto::metadata::{VOUCHED_IDENTITY, VOUCHED_ROLE};
use proto::secret::Secret;

use tonic::metadata::{Ascii, MetadataMap, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::metrics::Metrics;

/// What a caller may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Read status.
    Viewer,
    /// Everything, including mutations (`platform_admin`).
    PlatformAdmin,
}

impl Role {
    /// The role's name in metadata and audit records.
    pub fn name(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::PlatformAdmin => "platform_admin",
        }
    }

    fn from_name(name: &str) -> Option<Role> {
        match name {
            "viewer" => Some(Role::Viewer),
            "platform_admin" => Some(Role::PlatformAdmin),
            _ => None,
        }
    }
}

/// The configured identities: tokens (`Debug` prints them as
/// `<redacted>`) and client certificate names.
#[derive(Clone, Debug, Default)]
pub struct Auth {
    admin: Vec<Secret>,
    viewer: Vec<Secret>,
    admin_certificates: BTreeSet<String>,
    viewer_certificates: BTreeSet<String>,
    /// Whether a vouched role counts (peer-port services of a TLS cluster).
    trust_vouched: bool,
}

/// How a caller was identified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identified {
    /// No identity is configured: every call passes.
    Open,
    /// By its bearer token (the token's fingerprint).
    Token(Role, String),
    /// By its client certificate's common name.
    Certificate(Role, String),
    /// Vouched for by the gateway that replayed the call (the identity it
    /// named).
    Vouched(Role, String),
}

impl Identified {
    /// The role it grants.
    pub fn role(&self) -> Role {
        match self {
            Identified::Open => Role::PlatformAdmin,
            Identified::Token(role, _)
            | Identified::Certificate(role, _)
            | Identified::Vouched(role, _) => *role,
        }
    }
}

/// Why a caller has no identity: the metrics reason and the status.
type Refusal = (&'static str, Status);

/// Whether `token` is one of `set`, comparing every member in constant time
/// (no early exit on the first match).
fn holds(set: &[Secret], token: &str) -> bool {
    set.iter().fold(false, |found, t| {
        proto::secret::ct_eq(token.as_bytes(), t.expose().as_bytes()) | found
    })
}

impl Auth {
    /// Tokens for each role (empty ones are ignored).
    pub fn new<T: Into<Secret>>(
        admin: impl IntoIterator<Item = T>,
        viewer: impl IntoIterator<Item = T>,
    ) -> Self {
        let keep = |tokens: Vec<Secret>| tokens.into_iter().filter(|t| !t.is_empty()).collect();
        Auth {
            admin: keep(admin.into_iter().map(Into::into).collect()),
            viewer: keep(viewer.into_iter().map(Into::into).collect()),
            ..Auth::default()
        }
    }

    /// The same, also mapping client certificates by subject common name
    /// to a role.
    #[must_use]
    pub fn with_certificates(
        mut self,
        admin: impl IntoIterator<Item = String>,
        viewer: impl IntoIterator<Item = String>,
    ) -> Self {
        self.admin_certificates = admin.into_iter().collect();
        self.viewer_certificates = viewer.into_iter().collect();
        self
    }

    /// The same, honouring a role another gateway vouches for: for the
    /// services of a TLS cluster's peer port only (mutual TLS proves the
    /// caller is one of its gateways), and only when certificates are
    /// mapped (nothing else is vouched for).
    #[must_use]
    pub fn trusting_vouched(&self) -> Self {
        Auth {
            trust_vouched: self.certificates_enabled(),
            ..self.clone()
        }
    }

    /// Whether any token or certificate name is configured.
    pub fn enabled(&self) -> bool {
        !self.admin.is_empty() || !self.viewer.is_empty() || self.certificates_enabled()
    }

    /// Whether client certificates are mapped to roles.
    pub fn certificates_enabled(&self) -> bool {
        !self.admin_certificates.is_empty() || !self.viewer_certificates.is_empty()
    }

    /// Who makes `request`: a vouched role (when trusted), its token, or
    /// its client certificate, in that order.
    ///
    /// # Errors
    /// The metrics reason and `UNAUTHENTICATED` status when none holds.
    pub fn identify<T>(&self, request: &Request<T>) -> Result<Identified, Refusal> {
        if !self.enabled() {
            return Ok(Identified::Open);
        }
        let metadata = request.metadata();
        if self.trust_vouched {
            if let Some(role) = metadata
                .get(VOUCHED_ROLE)
                .and_then(|v| v.to_str().ok())
                .and_then(Role::from_name)
            {
                let who = metadata
                    .get(VOUCHED_IDENTITY)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-");
                return Ok(Identified::Vouched(role, who.to_string()));
            }
        }
        if metadata.contains_key("authorization") {
            let token = bearer(metadata);
            return if holds(&self.admin, token) {
                Ok(Identified::Token(Role::PlatformAdmin, fingerprint(token)))
            } else if holds(&self.viewer, token) {
                Ok(Identified::Token(Role::Viewer, fingerprint(token)))
            } else {
                Err(("invalid", Status::unauthenticated("invalid bearer token")))
            };
        }
        let name = match request.peer_certs() {
            Some(chain) if self.certificates_enabled() => {
                chain.first().and_then(proto::tls::common_name).ok_or((
                    "certificate",
                    Status::unauthenticated(
                        "the client certificate has no single printable subject common name",
                    ),
                ))?
            }
            _ => {
                let how = if self.certificates_enabled() {
                    "missing bearer token or client certificate: pass --token (or OPENSHELL_TOKEN), or a client certificate"
                } else {
                    "missing bearer token: pass --token or set OPENSHELL_TOKEN"
                };
                return Err(("missing", Status::unauthenticated(how)));
            }
        };
        if self.admin_certificates.contains(&name) {
            Ok(Identified::Certificate(Role::PlatformAdmin, name))
        } else if self.viewer_certificates.contains(&name) {
            Ok(Identified::Certificate(Role::Viewer, name))
        } else {
            Err((
                "certificate",
                Status::unauthenticated(format!(
                    "client certificate CN={name} is not mapped to a role: add it to \
                     openshell.gateway.auth.admin_certificate_names or viewer_certificate_names"
                )),
            ))
        }
    }

    /// What a gateway replaying `request` on another carries: the token, or
    /// the vouched role of a caller identified by certificate.
    pub fn carried<T>(&self, request: &Request<T>) -> Carried {
        let authorization = request.metadata().get("authorization").cloned();
        let vouched = match self.identify(request) {
            Ok(Identified::Certificate(role, name)) => Some((role, format!("cert:{name}"))),
            Ok(Identified::Vouched(role, who)) => Some((role, who)),
            _ => None,
        };
        Carried {
            authorization,
            vouched,
        }
    }

    /// Checks that `request`'s caller ([`Auth::identify`]) has `needed`.
    ///
    /// # Errors
    /// `UNAUTHENTICATED` for no or an unknown identity, `PERMISSION_DENIED`
    /// for one without the role; both counted in metrics, and logged at
    /// most [`crate::log_limit::LINES_PER_WINDOW`] times per window per
    /// service and reason (a caller can send refused calls at will).
    pub fn require<T>(
        &self,
        request: &Request<T>,
        needed: Role,
        service: &'static str,
        metrics: &Metrics,
    ) -> Result<Identified, Status> {
        let fail = |reason: &'static str, status: Status| {
            metrics
                .auth_failures
                .with_label_values(&[service, reason])
                .inc();
            if let Some(suppressed) = crate::log_limit::REFUSALS.allow((service, reason)) {
                tracing::warn!(service, reason, suppressed, "request refused");
            }
            Err(status)
        };
        let identified = match self.identify(request) {
            Ok(identified) => identified,
            Err((reason, status)) => return fail(reason, status),
        };
        if identified.role() < needed {
            return fail(
                "forbidden",
                Status::permission_denied("this call needs the platform_admin role"),
            );
        }
        Ok(identified)
    }
}

/// What a replayed call carries ([`Auth::carried`]).
#[derive(Clone, Debug, Default)]
pub struct Carried {
    authorization: Option<MetadataValue<Ascii>>,
    vouched: Option<(Role, String)>,
}

impl Carried {
    /// Puts it in the replayed call's `metadata`.
    pub fn apply(&self, metadata: &mut MetadataMap) {
        if let Some(value) = &self.authorization {
            metadata.insert("authorization", value.clone());
        }
        if let Some((role, who)) = &self.vouched {
            metadata.insert(VOUCHED_ROLE, MetadataValue::from_static(role.name()));
            if let Ok(value) = MetadataValue::try_from(who.as_str()) {
                metadata.insert(VOUCHED_IDENTITY, value);
            }
        }
    }
}

/// Who made a call, as an audit record names it ([`crate::audit`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// `platform_admin`, `viewer`, `none` (no valid token) or `open` (no
    /// token is configured).
    pub role: &'static str,
    /// The first 8 hex digits of the SHA-256 of the presented token, `-`
    /// without one: names a token in logs without revealing it; for a
    /// client certificate `cert:<common name>`; for a vouched call the
    /// identity the vouching gateway named.
    pub token: String,
}

/// The fingerprint of a token in audit records and logs.
pub fn fingerprint(token: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(token.as_bytes());
    hex::encode(&digest[..4])
}

impl Auth {
    /// Who makes `request` (for audit records; the checks are
    /// [`Auth::require`]'s).
    pub fn caller<T>(&self, request: &Request<T>) -> Caller {
        let token = bearer(request.metadata());
        let token = if token.is_empty() {
            "-".to_string()
        } else {
            fingerprint(token)
        };
        match self.identify(request) {
            Ok(Identified::Open) => Caller {
                role: "open",
                token,
            },
            Ok(Identified::Token(role, _)) => Caller {
                role: role.name(),
                token,
            },
            Ok(Identified::Certificate(role, name)) => Caller {
                role: role.name(),
                token: format!("cert:{name}"),
            },
            Ok(Identified::Vouched(role, who)) => Caller {
                role: role.name(),
                token: who,
            },
            Err(_) => Caller {
                role: "none",
                token,
            },
        }
    }
}

/// The token of an `authorization: Bearer <token>` header (empty without).
fn bearer(metadata: &MetadataMap) -> &str {
    metadata
        .get("authorization")
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim)
        .unwrap_or_default()
}

/// The interceptor of [`authenticated`]: any valid token passes (the
/// handler checks the role); none, or an unknown one, is `UNAUTHENTICATED`
/// before the body is read. Passes everything when no token is configured.
#[derive(Clone)]
pub struct Authenticate {
    /// The configured tokens.
    auth: Auth,
    /// Counts refusals (`auth_failures`).
    metrics: Metrics,
    /// The service label of refusals (`cluster_admin`, ...).
    service: &'static str,
}

impl Interceptor for Authenticate {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        self.auth
            .require(&request, Role::Viewer, self.service, &self.metrics)?;
        Ok(request)
    }
}

/// `service` behind [`Authenticate`]: a call without a valid bearer token is
/// refused from its headers, before its body is read. `label` names the
/// service in metrics and logs.
pub fn authenticated<S>(
    auth: &Auth,
    metrics: &Metrics,
    label: &'static str,
    service: S,
) -> InterceptedService<S, Authenticate> {
    InterceptedService::new(
        service,
        Authenticate {
            auth: auth.clone(),
            metrics: metrics.clone(),
            service: label,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_does_not_show_tokens() {
        let auth = Auth::new(["adm1n-s3cret".to_string()], ["v1ewer-s3cret".to_string()]);
        let shown = format!("{auth:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn the_interceptor_wants_any_valid_token_and_passes_all_when_open() {
        let metrics = Metrics::new();
        let with = |token: Option<&str>| {
            let mut request = Request::new(());
            if let Some(t) = token {
                let value = format!("Bearer {t}").parse().expect("ascii");
                request.metadata_mut().insert("authorization", value);
            }
            request
        };
        let auth = Auth::new(["adm".to_string()], ["view".to_string()]);
        let mut gate = Authenticate {
            auth,
            metrics: metrics.clone(),
            service: "test",
        };
        assert!(gate.call(with(Some("adm"))).is_ok());
        assert!(gate.call(with(Some("view"))).is_ok());
        for refused in [None, Some("nope")] {
            let status = gate.call(with(refused)).unwrap_err();
            assert_eq!(status.code(), tonic::Code::Unauthenticated);
        }
        let mut open = Authenticate {
            auth: Auth::default(),
            metrics,
            service: "test",
        };
        assert!(open.call(with(None)).is_ok());
    }

    #[test]
    fn callers_are_named_by_role_and_fingerprint() {
        let auth = Auth::new(["adm".to_string()], []);
        let mut request = Request::new(());
        assert_eq!(auth.caller(&request).token, "-");
        assert_eq!(auth.caller(&request).role, "none");
        request
            .metadata_mut()
            .insert("authorization", "Bearer adm".parse().expect("ascii"));
        let caller = auth.caller(&request);
        assert_eq!(caller.role, "platform_admin");
        assert_eq!(caller.token, fingerprint("adm"));
        assert_eq!(caller.token.len(), 8);
        assert_eq!(Auth::default().caller(&request).role, "open");
    }

    #[test]
    fn a_vouched_role_counts_only_where_trusted() {
        let auth = Auth::new(["adm".to_string()], []).with_certificates(["alice".to_string()], []);
        let mut request = Request::new(());
        request
            .metadata_mut()
            .insert(VOUCHED_ROLE, "platform_admin".parse().expect("ascii"));
        let metrics = Metrics::new();
        let client_port = auth.require(&request, Role::Viewer, "test", &metrics);
        assert_eq!(
            client_port.err().map(|s| s.code()),
            Some(tonic::Code::Unauthenticated)
        );
        let peer_port =
            auth.trusting_vouched()
                .require(&request, Role::PlatformAdmin, "test", &metrics);
        assert_eq!(peer_port.ok().map(|i| i.role()), Some(Role::PlatformAdmin));
        let no_certificates = Auth::new(["adm".to_string()], []).trusting_vouched();
        assert!(no_certificates
            .require(&request, Role::Viewer, "test", &metrics)
            .is_err());
    }

    #[test]
    fn tokens_match_whole() {
        let set: Vec<Secret> = vec!["abc".into(), "xyz".into()];
        assert!(holds(&set, "abc"));
        assert!(holds(&set, "xyz"));
        assert!(!holds(&set, "ab"));
        assert!(!holds(&set, "abcd"));
    }
}

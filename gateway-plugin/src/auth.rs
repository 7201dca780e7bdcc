//! Bearer-token authentication and the `platform_admin` role.
//!
//! Tokens come from `[openshell.gateway.auth]` (`admin_tokens`,
//! `viewer_tokens`) or `--admin-token`. Reads need any valid token, mutating
//! calls need `platform_admin`. With no token configured at all, the gateway
//! runs open (development) and says so at start-up.
//!
//! Two checks, in order. [`authenticated`] wraps a service (ClusterAdmin,
//! PoolAdmin, ObjectStore) in an interceptor ([`Authenticate`]) that refuses
//! a call without a valid token of any role with `UNAUTHENTICATED` from its
//! headers alone, before tonic reads or decodes the body: a caller without a
//! token cannot make the gateway buffer up to the message-size limit per
//! call. The handler then checks the role its call needs
//! ([`Auth::require`]). SupervisorHost (its credential is in the first
//! message) and the raft transport (peers) are not wrapped.

use proto::secret::Secret;

use tonic::metadata::MetadataMap;
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

/// The configured tokens (`Debug` prints them as `<redacted>`).
#[derive(Clone, Debug, Default)]
pub struct Auth {
    admin: Vec<Secret>,
    viewer: Vec<Secret>,
}

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
        }
    }

    /// Whether any token is configured.
    pub fn enabled(&self) -> bool {
        !self.admin.is_empty() || !self.viewer.is_empty()
    }

    /// Checks the `authorization: Bearer` header for `needed`.
    ///
    /// # Errors
    /// `UNAUTHENTICATED` for a missing or unknown token, `PERMISSION_DENIED`
    /// for a token without the role; both counted in metrics, and logged
    /// at most [`crate::log_limit::LINES_PER_WINDOW`] times per window per
    /// service and reason (a caller can send refused calls at will).
    pub fn require(
        &self,
        metadata: &MetadataMap,
        needed: Role,
        service: &'static str,
        metrics: &Metrics,
    ) -> Result<(), Status> {
        if !self.enabled() {
            return Ok(());
        }
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
        if !metadata.contains_key("authorization") {
            return fail(
                "missing",
                Status::unauthenticated(
                    "missing bearer token: pass --token or set OPENSHELL_TOKEN",
                ),
            );
        }
        let token = bearer(metadata);
        let (admin, viewer) = (holds(&self.admin, token), holds(&self.viewer, token));
        let role = if admin {
            Role::PlatformAdmin
        } else if viewer {
            Role::Viewer
        } else {
            return fail("invalid", Status::unauthenticated("invalid bearer token"));
        };
        if role < needed {
            return fail(
                "forbidden",
                Status::permission_denied("this call needs the platform_admin role"),
            );
        }
        Ok(())
    }
}

/// Who made a call, as an audit record names it ([`crate::audit`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// `platform_admin`, `viewer`, `none` (no valid token) or `open` (no
    /// token is configured).
    pub role: &'static str,
    /// The first 8 hex digits of the SHA-256 of the presented token, `-`
    /// without one: names a token in logs without revealing it.
    pub token: String,
}

/// The fingerprint of a token in audit records and logs.
pub fn fingerprint(token: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(token.as_bytes());
    hex::encode(&digest[..4])
}

impl Auth {
    /// Who presents `metadata`'s bearer token (for audit records; the
    /// checks are [`Auth::require`]'s).
    pub fn caller(&self, metadata: &MetadataMap) -> Caller {
        let token = bearer(metadata);
        let role = if !self.enabled() {
            "open"
        } else if holds(&self.admin, token) {
            "platform_admin"
        } else if holds(&self.viewer, token) {
            "viewer"
        } else {
            "none"
        };
        Caller {
            role,
            token: if token.is_empty() {
                "-".to_string()
            } else {
                fingerprint(token)
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
        self.auth.require(
            request.metadata(),
            Role::Viewer,
            self.service,
            &self.metrics,
        )?;
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
        let mut metadata = MetadataMap::new();
        assert_eq!(auth.caller(&metadata).token, "-");
        assert_eq!(auth.caller(&metadata).role, "none");
        metadata.insert("authorization", "Bearer adm".parse().expect("ascii"));
        let caller = auth.caller(&metadata);
        assert_eq!(caller.role, "platform_admin");
        assert_eq!(caller.token, fingerprint("adm"));
        assert_eq!(caller.token.len(), 8);
        assert_eq!(Auth::default().caller(&metadata).role, "open");
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

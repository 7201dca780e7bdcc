//! Bearer-token authentication and the `platform_admin` role.
//!
//! Tokens come from `[openshell.gateway.auth]` (`admin_tokens`,
//! `viewer_tokens`) or `--admin-token`. Reads need any valid token, mutating
//! calls need `platform_admin`. With no token configured at all, the gateway
//! runs open (development) and says so at start-up.

use std::collections::BTreeSet;

use tonic::metadata::MetadataMap;
use tonic::Status;

use crate::metrics::Metrics;

/// What a caller may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Read status.
    Viewer,
    /// Everything, including mutations (`platform_admin`).
    PlatformAdmin,
}

/// The configured tokens.
#[derive(Clone, Debug, Default)]
pub struct Auth {
    admin: BTreeSet<String>,
    viewer: BTreeSet<String>,
}

impl Auth {
    /// Tokens for each role (empty strings are ignored).
    pub fn new(
        admin: impl IntoIterator<Item = String>,
        viewer: impl IntoIterator<Item = String>,
    ) -> Self {
        Auth {
            admin: admin.into_iter().filter(|t| !t.is_empty()).collect(),
            viewer: viewer.into_iter().filter(|t| !t.is_empty()).collect(),
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
    /// for a token without the role; both counted in metrics.
    pub fn require(
        &self,
        metadata: &MetadataMap,
        needed: Role,
        service: &str,
        metrics: &Metrics,
    ) -> Result<(), Status> {
        if !self.enabled() {
            return Ok(());
        }
        let fail = |reason: &str, status: Status| {
            metrics
                .auth_failures
                .with_label_values(&[service, reason])
                .inc();
            tracing::warn!(service, reason, "request refused");
            Err(status)
        };
        let Some(header) = metadata.get("authorization") else {
            return fail(
                "missing",
                Status::unauthenticated(
                    "missing bearer token: pass --token or set OPENSHELL_TOKEN",
                ),
            );
        };
        let token = header
            .to_str()
            .ok()
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim)
            .unwrap_or_default();
        let role = if self.admin.contains(token) {
            Role::PlatformAdmin
        } else if self.viewer.contains(token) {
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

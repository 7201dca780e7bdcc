//! The harness's service-account tokens: what one says ([`TokenClaims`]),
//! minting one for a Pod ([`mint`]) and reading one back ([`claims_of`]).
//! A leaf the API, RBAC and Pod modules share.

use base64::Engine;
use serde::{Deserialize, Serialize};

/// What a token the harness minted says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenClaims {
    /// Namespace of the service account.
    pub namespace: String,
    /// Service account.
    pub service_account: String,
    /// The pod it was mounted into.
    pub pod: String,
    /// Audiences (empty: the API server's own).
    #[serde(default)]
    pub audiences: Vec<String>,
}

/// Prefix of the harness's tokens.
const TOKEN_PREFIX: &str = "harness-token.";

/// A token for `claims`.
pub fn mint(claims: &TokenClaims) -> String {
    let json = serde_json::to_vec(claims).unwrap_or_default();
    format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    )
}

/// The claims of a harness token, if it is one.
pub fn claims_of(token: &str) -> Option<TokenClaims> {
    let body = token.trim().strip_prefix(TOKEN_PREFIX)?;
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .ok()?;
    serde_json::from_slice(&json).ok()
}

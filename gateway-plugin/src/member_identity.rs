//! Supervisor identity on Kubernetes (`--member-identity kubernetes`): a
//! supervisor Pod presents its projected ServiceAccount token as its
//! credential and may join only as the member its Pod name says.
//!
//! On a hello whose member id is not in the member credentials file
//! ([`crate::member_credentials`]) and whose credential is not the
//! deprecated shared token, [`KubernetesIdentity::check`] sends the
//! credential to the Kubernetes API as a `TokenReview`
//! (`authentication.k8s.io/v1`, `spec.audiences = [<audience>]`), bounded by
//! [`REVIEW_TIMEOUT`]. The hello is accepted only if the review says the
//! token is authenticated, its audiences include the configured one, the
//! username is `system:serviceaccount:<ns>:<name>` of the configured
//! ServiceAccount and the extra `authentication.kubernetes.io/pod-name` is
//! exactly the hello's member id (Vault's Kubernetes auth works this way).
//!
//! A refusal is `UNAUTHENTICATED` naming the member id (never the token),
//! with a metric reason ([`Refusal`]); an API that cannot be reached, does
//! not answer in time or refuses the review (e.g. the gateway's
//! ServiceAccount lacks `create` on `tokenreviews`) is `UNAVAILABLE`
//! (`identity_unavailable`): the supervisor retries.
//!
//! A positive review is cached for at most [`CACHE_FOR`], keyed by the
//! SHA-256 of the token (the token itself is never kept), so a supervisor
//! that re-attaches costs no API call; a negative one is never cached.
//!
//! The Kubernetes client is built on first use from the environment (in a
//! Pod: its ServiceAccount; elsewhere `KUBECONFIG`), so `--check-config`
//! contacts nothing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, TokenReviewStatus};
use kube::api::{Api, PostParams};
use proto::supervisor_host::HostHello;
use sha2::{Digest, Sha256};
use tonic::Status;

/// The longest a `TokenReview` may take before the hello is refused
/// `UNAVAILABLE`.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a positive review is trusted without asking again.
pub const CACHE_FOR: Duration = Duration::from_secs(60);
/// The `TokenReview` extra that names the Pod a token was issued for.
pub const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// Most cached reviews; past it the expired ones are dropped, then all.
const CACHE_MAX: usize = 4096;
/// Longest credential sent for review (a projected token is ~1 KiB).
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// What `--member-identity kubernetes` accepts (from
/// [`crate::config_pool::validate_identity`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentitySettings {
    /// The audience the tokens must carry (`--member-identity-audience`).
    pub audience: String,
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// The ServiceAccount's name: only its tokens are members.
    pub service_account: String,
}

impl IdentitySettings {
    /// The username the API gives the ServiceAccount's tokens.
    pub fn username(&self) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            self.namespace, self.service_account
        )
    }
}

/// A refused hello: the status for the supervisor and the
/// `openshell_auth_failures_total` reason.
#[derive(Debug)]
pub struct Refusal {
    /// What the supervisor is told.
    pub status: Status,
    /// The metric's `reason` label.
    pub reason: &'static str,
}

impl Refusal {
    fn unauthenticated(reason: &'static str, message: String) -> Self {
        Refusal {
            status: Status::unauthenticated(message),
            reason,
        }
    }

    fn unavailable(message: String) -> Self {
        Refusal {
            status: Status::unavailable(message),
            reason: "identity_unavailable",
        }
    }
}

/// The part of a `TokenReview` answer that decides.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reviewed {
    /// `status.authenticated`.
    pub authenticated: bool,
    /// `status.user.username`.
    pub username: String,
    /// `status.audiences`.
    pub audiences: Vec<String>,
    /// `status.user.extra["authentication.kubernetes.io/pod-name"]`.
    pub pod_names: Vec<String>,
    /// `status.error` (logged, never sent to the supervisor).
    pub error: String,
}

impl From<TokenReviewStatus> for Reviewed {
    fn from(status: TokenReviewStatus) -> Self {
        let user = status.user.unwrap_or_default();
        Reviewed {
            authenticated: status.authenticated.unwrap_or(false),
            username: user.username.unwrap_or_default(),
            audiences: status.audiences.unwrap_or_default(),
            pod_names: user
                .extra
                .and_then(|mut extra| extra.remove(POD_NAME_EXTRA))
                .unwrap_or_default(),
            error: status.error.unwrap_or_default(),
        }
    }
}

/// A positive review, remembered until `until`.
struct Cached {
    /// The Pod the token names.
    pod_name: String,
    /// When to ask again.
    until: Instant,
}

/// The TokenReview checker of one gateway; see the module doc.
pub struct KubernetesIdentity {
    /// What is accepted.
    settings: IdentitySettings,
    /// Built on first use (`kube::Client::try_default`); a failure is
    /// retried at the next hello.
    client: tokio::sync::OnceCell<kube::Client>,
    /// SHA-256 of a token -> its positive review. A std mutex: held for a
    /// map lookup or insert only, never across an `.await`.
    cache: Mutex<HashMap<[u8; 32], Cached>>,
}

impl std::fmt::Debug for KubernetesIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesIdentity")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl PartialEq for KubernetesIdentity {
    /// The same settings (the cache is not configuration).
    fn eq(&self, other: &Self) -> bool {
        self.settings == other.settings
    }
}

impl Eq for KubernetesIdentity {}

impl KubernetesIdentity {
    /// A checker of `settings`; contacts nothing until the first hello.
    pub fn new(settings: IdentitySettings) -> Self {
        KubernetesIdentity {
            settings,
            client: tokio::sync::OnceCell::new(),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// What is accepted.
    pub fn settings(&self) -> &IdentitySettings {
        &self.settings
    }

    /// Accepts `token` as the credential of `member` (module doc).
    ///
    /// # Errors
    /// A [`Refusal`] saying why, never containing the token.
    pub async fn check(&self, member: &str, token: &str) -> Result<(), Refusal> {
        if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
            return Err(Refusal::unauthenticated(
                "identity_unauthenticated",
                format!(
                    "member id {member:?} presented no Kubernetes service account token (1..={MAX_TOKEN_BYTES} bytes)"
                ),
            ));
        }
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(pod) = self.cached(&key) {
            return judge_pod(member, &[pod]);
        }
        let reviewed = self.review(token).await?;
        let judged = judge(&self.settings, member, &reviewed);
        if judged.is_ok() {
            self.remember(key, member);
        } else if !reviewed.error.is_empty() {
            // Any caller can present a token: rate-limited (crate::log_limit).
            if let Some(suppressed) =
                crate::log_limit::REFUSALS.allow(("supervisor_host", "token_review"))
            {
                tracing::warn!(member = %proto::text::escaped(member), error = %proto::text::escaped(&reviewed.error),
                    suppressed, "TokenReview refused the supervisor's token");
            }
        }
        judged
    }

    /// The Pod a cached positive review named, if still fresh.
    fn cached(&self, key: &[u8; 32]) -> Option<String> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .get(key)
            .filter(|c| c.until > Instant::now())
            .map(|c| c.pod_name.clone())
    }

    /// Caches a positive review of `key` naming `pod_name`.
    fn remember(&self, key: [u8; 32], pod_name: &str) {
        let now = Instant::now();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= CACHE_MAX {
            cache.retain(|_, c| c.until > now);
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
        }
        cache.insert(
            key,
            Cached {
                pod_name: pod_name.to_string(),
                until: now + CACHE_FOR,
            },
        );
    }

    /// Sends the `TokenReview`, bounded by [`REVIEW_TIMEOUT`]. A failure is
    /// logged in full; the supervisor is told its kind only (no paths or
    /// addresses of the gateway's environment).
    async fn review(&self, token: &str) -> Result<Reviewed, Refusal> {
        let call = async {
            let client = self
                .client
                .get_or_try_init(kube::Client::try_default)
                .await
                .map_err(|e| {
                    (
                        "the gateway has no Kubernetes API credentials".to_string(),
                        e.to_string(),
                    )
                })?;
            let review = TokenReview {
                spec: TokenReviewSpec {
                    token: Some(token.to_string()),
                    audiences: Some(vec![self.settings.audience.clone()]),
                },
                ..Default::default()
            };
            Api::<TokenReview>::all(client.clone())
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| (describe_api_error(&e), e.to_string()))
        };
        let answer = match tokio::time::timeout(REVIEW_TIMEOUT, call).await {
            Ok(answer) => answer,
            Err(_) => {
                let kind = format!(
                    "the Kubernetes API did not answer within {} s",
                    REVIEW_TIMEOUT.as_secs()
                );
                Err((kind.clone(), kind))
            }
        };
        match answer {
            Ok(review) => Ok(review.status.unwrap_or_default().into()),
            Err((kind, detail)) => {
                let detail = detail.replace('\n', " ");
                tracing::error!(%kind, %detail, "supervisor TokenReview failed");
                Err(Refusal::unavailable(format!(
                    "cannot verify the supervisor's Kubernetes identity now: TokenReview failed: {kind}"
                )))
            }
        }
    }
}

/// The kind of an API error, for the supervisor; a 403 names the RBAC rule
/// the gateway needs.
fn describe_api_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) if status.code == 403 => "the Kubernetes API refused it (403): \
             the gateway's service account needs `create` on `tokenreviews` (authentication.k8s.io), \
             a ClusterRole"
            .to_string(),
        kube::Error::Api(status) => format!("the Kubernetes API answered {}", status.code),
        _ => "the Kubernetes API is unreachable".to_string(),
    }
}

/// Decides a review of `member`'s token against `settings`.
///
/// # Errors
/// The first failed condition: not authenticated, audience, ServiceAccount,
/// Pod name.
pub fn judge(
    settings: &IdentitySettings,
    member: &str,
    reviewed: &Reviewed,
) -> Result<(), Refusal> {
    if !reviewed.authenticated {
        return Err(Refusal::unauthenticated(
            "identity_unauthenticated",
            format!(
                "supervisor credential of member id {member:?} is not a valid Kubernetes service account \
                 token for audience {:?}",
                settings.audience
            ),
        ));
    }
    if !reviewed.audiences.contains(&settings.audience) {
        return Err(Refusal::unauthenticated(
            "identity_audience",
            format!(
                "supervisor credential of member id {member:?} is not a token for audience {:?}",
                settings.audience
            ),
        ));
    }
    let expected = settings.username();
    if reviewed.username != expected {
        return Err(Refusal::unauthenticated(
            "identity_service_account",
            format!(
                "supervisor credential of member id {member:?} belongs to {:?}, not to the member service \
                 account {expected:?}",
                reviewed.username
            ),
        ));
    }
    judge_pod(member, &reviewed.pod_names)
}

/// Accepts only a token whose one Pod name is `member`.
fn judge_pod(member: &str, pod_names: &[String]) -> Result<(), Refusal> {
    match pod_names {
        [pod] if pod == member => Ok(()),
        [pod] => Err(Refusal::unauthenticated(
            "identity_pod",
            format!(
                "supervisor credential does not match member id {member:?}: its Kubernetes token was issued \
                 to pod {pod:?}; a supervisor may only join as the member it is"
            ),
        )),
        _ => Err(Refusal::unauthenticated(
            "identity_pod",
            format!(
                "supervisor credential of member id {member:?} is not bound to a pod (mount a projected \
                 service account token)"
            ),
        )),
    }
}

/// Authenticates a (well-formed) hello: a member listed in the member
/// credentials file, or a credential that is the deprecated shared token,
/// is judged by `check_file` as before; any other goes to `identity` when
/// it is set. Returns the status and the metric reason of a refusal.
///
/// # Errors
/// The refusal (`reason` `credential` for the file and token checks).
pub async fn authenticate(
    hello: &HostHello,
    token: Option<&str>,
    members: Option<&crate::member_credentials::MemberCredentials>,
    identity: Option<&KubernetesIdentity>,
    check_file: impl FnOnce() -> Result<(), Status>,
) -> Result<(), (Status, &'static str)> {
    let listed = members.is_some_and(|m| m.credential_of(&hello.member_id).is_some());
    let shared =
        token.is_some_and(|t| proto::secret::ct_eq(hello.credential.as_bytes(), t.as_bytes()));
    match identity {
        Some(identity) if !listed && !shared => identity
            .check(&hello.member_id, &hello.credential)
            .await
            .map_err(|r| (r.status, r.reason)),
        _ => check_file().map_err(|status| (status, "credential")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> IdentitySettings {
        IdentitySettings {
            audience: "openshell-gateway".into(),
            namespace: "ns".into(),
            service_account: "sup".into(),
        }
    }

    fn good(pod: &str) -> Reviewed {
        Reviewed {
            authenticated: true,
            username: "system:serviceaccount:ns:sup".into(),
            audiences: vec!["openshell-gateway".into()],
            pod_names: vec![pod.into()],
            error: String::new(),
        }
    }

    fn reason(r: Result<(), Refusal>) -> &'static str {
        r.err().map(|r| r.reason).unwrap_or("ok")
    }

    #[test]
    fn only_the_own_pod_of_the_service_account_for_the_audience_is_accepted() {
        let s = settings();
        assert_eq!(reason(judge(&s, "sup-1", &good("sup-1"))), "ok");
        assert_eq!(reason(judge(&s, "sup-2", &good("sup-1"))), "identity_pod");
        let mut r = good("sup-1");
        r.authenticated = false;
        assert_eq!(reason(judge(&s, "sup-1", &r)), "identity_unauthenticated");
        let mut r = good("sup-1");
        r.audiences = vec!["api".into()];
        assert_eq!(reason(judge(&s, "sup-1", &r)), "identity_audience");
        let mut r = good("sup-1");
        r.username = "system:serviceaccount:ns:other".into();
        assert_eq!(reason(judge(&s, "sup-1", &r)), "identity_service_account");
        let mut r = good("sup-1");
        r.pod_names = vec![];
        assert_eq!(reason(judge(&s, "sup-1", &r)), "identity_pod");
        r.pod_names = vec!["sup-1".into(), "sup-1".into()];
        assert_eq!(reason(judge(&s, "sup-1", &r)), "identity_pod");
    }

    #[test]
    fn a_review_answer_is_read_from_the_api_types() {
        let status: TokenReviewStatus = serde_json::from_value(serde_json::json!({
            "authenticated": true,
            "audiences": ["openshell-gateway"],
            "user": {
                "username": "system:serviceaccount:ns:sup",
                "extra": {"authentication.kubernetes.io/pod-name": ["sup-1"]}
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Reviewed::from(status), good("sup-1"));
        assert!(!Reviewed::from(TokenReviewStatus::default()).authenticated);
    }

    #[tokio::test]
    async fn a_cached_review_still_checks_the_pod_and_a_bad_token_never_reaches_the_api() {
        let identity = KubernetesIdentity::new(settings());
        let token = "t".repeat(32);
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        identity.remember(key, "sup-1");
        assert!(identity.check("sup-1", &token).await.is_ok());
        let refused = identity.check("sup-2", &token).await.err();
        let refused = refused.unwrap_or_else(|| panic!("sup-2 accepted with sup-1's token"));
        assert_eq!(refused.reason, "identity_pod");
        assert!(!refused.status.message().contains(&token));
        let empty = identity.check("sup-1", "").await.err().map(|r| r.reason);
        assert_eq!(empty, Some("identity_unauthenticated"));
    }
}

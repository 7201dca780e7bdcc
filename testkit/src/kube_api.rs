//! A mock Kubernetes API for tests through real processes: a plain HTTP/1.1
//! server on loopback answering `TokenReview`
//! (`POST /apis/authentication.k8s.io/v1/tokenreviews`) from tokens the test
//! issues ([`MockKubeApi::issue`]), and a kubeconfig pointing at it that a
//! gateway process is given through `KUBECONFIG`
//! ([`crate::gateway::Gateway::start_with_env`]).
//!
//! It answers the way the API server does: an unknown (or revoked) token is
//! `authenticated: false` with an error; a token none of whose audiences is
//! asked for is refused the same way; otherwise `authenticated: true`, the
//! audiences asked for that the token carries, and the user
//! `system:serviceaccount:<ns>:<name>` with the extra
//! `authentication.kubernetes.io/pod-name`. A request without the gateway's
//! own bearer token is 401. [`MockKubeApi::pause`] stops answering (the
//! connection stays open), like an API server that hangs;
//! [`MockKubeApi::forbid`] answers 403, like an API server refusing a
//! gateway without RBAC.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::TestResult;

/// The bearer token the gateway's kubeconfig carries.
pub const GATEWAY_TOKEN: &str = "gateway-service-account-token";

/// What a token issued by the mock says about its holder.
#[derive(Clone, Debug)]
pub struct TokenIdentity {
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// The ServiceAccount's name.
    pub service_account: String,
    /// The Pod the token is bound to.
    pub pod_name: String,
    /// The token's audiences.
    pub audiences: Vec<String>,
}

/// State shared with the server task.
#[derive(Default)]
struct Shared {
    /// token -> identity.
    tokens: Mutex<HashMap<String, TokenIdentity>>,
    /// `TokenReview`s answered.
    reviews: AtomicU64,
    /// Paused: requests are read and never answered.
    paused: AtomicBool,
    /// Forbidden: TokenReview answers 403 (the gateway lacks RBAC).
    forbidden: AtomicBool,
}

/// The mock API; the server stops when it is dropped.
pub struct MockKubeApi {
    /// `127.0.0.1:port`.
    pub addr: String,
    /// A kubeconfig naming the mock (`http://addr`) and [`GATEWAY_TOKEN`].
    pub kubeconfig: PathBuf,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MockKubeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockKubeApi {
    /// Serves on a free loopback port; writes `dir/kubeconfig`.
    ///
    /// # Errors
    /// Binding or writing the kubeconfig failed.
    pub async fn start(dir: &Path) -> TestResult<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: mock\n  cluster:\n    server: http://{addr}\n\
                 users:\n- name: gateway\n  user:\n    token: {GATEWAY_TOKEN}\ncontexts:\n- name: mock\n  \
                 context:\n    cluster: mock\n    user: gateway\n    namespace: openshell\n\
                 current-context: mock\n"
            ),
        )?;
        let shared = Arc::new(Shared::default());
        let serving = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve_connection(stream, serving.clone()));
            }
        });
        Ok(MockKubeApi {
            addr,
            kubeconfig,
            shared,
            task,
        })
    }

    /// Issues `token` to `pod_name` of ServiceAccount `namespace:service_account`
    /// for `audiences` (replacing what it said before).
    pub fn issue(
        &self,
        token: &str,
        namespace: &str,
        service_account: &str,
        pod_name: &str,
        audiences: &[&str],
    ) {
        let identity = TokenIdentity {
            namespace: namespace.into(),
            service_account: service_account.into(),
            pod_name: pod_name.into(),
            audiences: audiences.iter().map(ToString::to_string).collect(),
        };
        self.tokens().insert(token.to_string(), identity);
    }

    /// Forgets `token` (it expired): reviews of it are unauthenticated.
    pub fn revoke(&self, token: &str) {
        self.tokens().remove(token);
    }

    /// How many `TokenReview`s were answered.
    pub fn reviews(&self) -> u64 {
        self.shared.reviews.load(Ordering::SeqCst)
    }

    /// Stops (`true`) or resumes answering.
    pub fn pause(&self, paused: bool) {
        self.shared.paused.store(paused, Ordering::SeqCst);
    }

    /// Answers TokenReview with 403 (`true`), as when the gateway's
    /// ServiceAccount lacks `create` on `tokenreviews`, or normally.
    pub fn forbid(&self, forbidden: bool) {
        self.shared.forbidden.store(forbidden, Ordering::SeqCst);
    }

    fn tokens(&self) -> std::sync::MutexGuard<'_, HashMap<String, TokenIdentity>> {
        self.shared.tokens.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Serves the requests of one connection (keep-alive) until it closes.
async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        match reader.read_line(&mut request_line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut length = 0usize;
        let mut authorization = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "authorization" => authorization = value.trim().to_string(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).await.is_err() {
            return;
        }
        while shared.paused.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let (code, answer) = answer(&shared, &request_line, &authorization, &body);
        let text = answer.to_string();
        let response = format!(
            "HTTP/1.1 {code}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
            text.len()
        );
        if reader
            .get_mut()
            .write_all(response.as_bytes())
            .await
            .is_err()
        {
            return;
        }
    }
}

/// The status line's code and the JSON body for one request.
fn answer(
    shared: &Shared,
    request_line: &str,
    authorization: &str,
    body: &[u8],
) -> (&'static str, Value) {
    let status = |code: u16, reason: &str, message: &str| {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": message, "reason": reason, "code": code})
    };
    if authorization != format!("Bearer {GATEWAY_TOKEN}") {
        return (
            "401 Unauthorized",
            status(401, "Unauthorized", "Unauthorized"),
        );
    }
    if !request_line.starts_with("POST /apis/authentication.k8s.io/v1/tokenreviews") {
        return (
            "404 Not Found",
            status(404, "NotFound", "the mock serves TokenReview only"),
        );
    }
    if shared.forbidden.load(Ordering::SeqCst) {
        let message = "tokenreviews.authentication.k8s.io is forbidden: User \"system:serviceaccount:openshell:gateway\" \
                       cannot create resource \"tokenreviews\" in API group \"authentication.k8s.io\" at the cluster scope";
        return ("403 Forbidden", status(403, "Forbidden", message));
    }
    let Ok(review) = serde_json::from_slice::<Value>(body) else {
        return ("400 Bad Request", status(400, "BadRequest", "not JSON"));
    };
    let token = review["spec"]["token"].as_str().unwrap_or_default();
    let asked: Vec<String> = review["spec"]["audiences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let identity = shared
        .tokens
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(token)
        .cloned();
    shared.reviews.fetch_add(1, Ordering::SeqCst);
    let refused = |error: &str| {
        json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
               "spec": {"audiences": asked}, "status": {"authenticated": false, "error": error}})
    };
    let Some(identity) = identity else {
        return (
            "201 Created",
            refused("[invalid bearer token, token lookup failed]"),
        );
    };
    let audiences: Vec<&String> = if asked.is_empty() {
        identity.audiences.iter().collect()
    } else {
        asked
            .iter()
            .filter(|a| identity.audiences.contains(a))
            .collect()
    };
    if audiences.is_empty() {
        return (
            "201 Created",
            refused("[invalid bearer token, token audiences is invalid for the target audiences]"),
        );
    }
    let user = json!({
        "username": format!("system:serviceaccount:{}:{}", identity.namespace, identity.service_account),
        "uid": format!("uid-{}", identity.service_account),
        "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{}", identity.namespace), "system:authenticated"],
        "extra": {
            "authentication.kubernetes.io/pod-name": [identity.pod_name],
            "authentication.kubernetes.io/pod-uid": [format!("pod-uid-{}", identity.pod_name)],
        },
    });
    (
        "201 Created",
        json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
               "spec": {"audiences": asked},
               "status": {"authenticated": true, "user": user, "audiences": audiences}}),
    )
}

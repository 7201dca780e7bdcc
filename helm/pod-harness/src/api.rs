//! The part of the Kubernetes API the chart's pods call, served over TLS at
//! the harness's address (in-cluster: `KUBERNETES_SERVICE_HOST`, the
//! service-account token and CA mounted in every pod that mounts one):
//!
//! - `GET` a StatefulSet (the gateways' voter autopilot reads
//!   `spec.replicas`);
//! - Pods and Secrets: create, get, list by label selector, delete, and a
//!   merge patch of a Secret (the Kubernetes sandbox driver). A Pod created
//!   here becomes a harness pod, run like the others (its own namespaces),
//!   and its `status` is what the harness sees;
//! - `TokenReview` (supervisors' Kubernetes identity): tokens the harness
//!   minted for its pods, naming the pod and its service account.
//!
//! Every request is authorized against the release's own RBAC objects
//! (Roles, ClusterRoles and their bindings) for the caller's service
//! account, so a verb the chart forgot is refused with 403 here as in a real
//! cluster.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::cluster::{ApiError, Cluster, Owner};
use crate::rbac;
use crate::token::claims_of;

/// The shared harness, locked briefly per request.
pub type Shared = Arc<Mutex<Cluster>>;

/// The routes, over the shared harness.
pub fn router(shared: Shared) -> Router {
    Router::new()
        .route(
            "/apis/apps/v1/namespaces/{ns}/statefulsets/{name}",
            get(get_statefulset),
        )
        .route(
            "/api/v1/namespaces/{ns}/pods",
            post(create_pod).get(list_pods),
        )
        .route(
            "/api/v1/namespaces/{ns}/pods/{name}",
            get(get_pod).delete(delete_pod),
        )
        .route("/api/v1/namespaces/{ns}/secrets", post(create_secret))
        .route(
            "/api/v1/namespaces/{ns}/secrets/{name}",
            get(get_secret).delete(delete_secret).patch(patch_secret),
        )
        .route(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            post(token_review),
        )
        .with_state(shared)
}

fn status(code: StatusCode, reason: &str, message: String) -> Response {
    let body = json!({
        "apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    (code, Json(body)).into_response()
}

/// The caller's service account, checked against the release's RBAC.
fn authorize(
    c: &Cluster,
    headers: &HeaderMap,
    verb: &str,
    group: &str,
    resource: &str,
    ns: &str,
    name: Option<&str>,
) -> Result<(), Box<Response>> {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    let Some(claims) = claims_of(token).filter(|c| c.audiences.is_empty()) else {
        return Err(Box::new(status(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "no valid service account token".into(),
        )));
    };
    if rbac::allows(&c.manifests, &claims, verb, group, resource, ns, name) {
        Ok(())
    } else {
        Err(Box::new(status(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!(
                "{resource}.{group} {} is forbidden: User \"system:serviceaccount:{}:{}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" in the namespace \"{ns}\"",
                name.unwrap_or(""),
                claims.namespace,
                claims.service_account
            ),
        )))
    }
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Cluster> {
    match shared.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

async fn get_statefulset(
    State(s): State<Shared>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    let c = lock(&s);
    if let Err(r) = authorize(
        &c,
        &headers,
        "get",
        "apps",
        "statefulsets",
        &ns,
        Some(&name),
    ) {
        return *r;
    }
    match c
        .manifests
        .statefulsets
        .get(&name)
        .filter(|_| ns == c.namespace)
    {
        Some(sts) => {
            let mut v = serde_json::to_value(sts).unwrap_or_default();
            v["apiVersion"] = json!("apps/v1");
            v["kind"] = json!("StatefulSet");
            Json(v).into_response()
        }
        None => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("statefulsets.apps \"{name}\" not found"),
        ),
    }
}

async fn create_pod(
    State(s): State<Shared>,
    headers: HeaderMap,
    Path(ns): Path<String>,
    body: Bytes,
) -> Response {
    let mut c = lock(&s);
    if let Err(r) = authorize(&c, &headers, "create", "", "pods", &ns, None) {
        return *r;
    }
    let Ok(pod) = serde_json::from_slice::<Value>(&body) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the body is not a Pod".into(),
        );
    };
    match c.api_create_pod(&ns, pod) {
        Ok(v) => (StatusCode::CREATED, Json(v)).into_response(),
        Err(crate::cluster::ApiError::Exists(n)) => status(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("pods \"{n}\" already exists"),
        ),
        Err(e) => status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", e.to_string()),
    }
}

#[derive(Deserialize)]
struct ListQuery {
    #[serde(rename = "labelSelector")]
    label_selector: Option<String>,
}

async fn list_pods(
    State(s): State<Shared>,
    headers: HeaderMap,
    Path(ns): Path<String>,
    Query(q): Query<ListQuery>,
) -> Response {
    let c = lock(&s);
    if let Err(r) = authorize(&c, &headers, "list", "", "pods", &ns, None) {
        return *r;
    }
    let selector: BTreeMap<String, String> = q
        .label_selector
        .unwrap_or_default()
        .split(',')
        .filter_map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    let items = c.api_pods(&ns, &selector);
    Json(json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": items})).into_response()
}

async fn get_pod(
    State(s): State<Shared>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    let c = lock(&s);
    if let Err(r) = authorize(&c, &headers, "get", "", "pods", &ns, Some(&name)) {
        return *r;
    }
    match c.api_pod(&ns, &name) {
        Some(v) => Json(v).into_response(),
        None => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("pods \"{name}\" not found"),
        ),
    }
}

async fn delete_pod(
    State(s): State<Shared>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    let mut c = lock(&s);
    if let Err(r) = authorize(&c, &headers, "delete", "", "pods", &ns, Some(&name)) {
        return *r;
    }
    match c.api_delete_pod(&ns, &name) {
        Some(v) => Json(v).into_response(),
        None => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("pods \"{name}\" not found"),
        ),
    }
}

async fn create_secret(
    State(s): State<Shared>,
    headers: HeaderMap,
    Path(ns): Path<String>,
    body: Bytes,
) -> Response {
    let mut c = lock(&s);
    if let Err(r) = authorize(&c, &headers, "create", "", "secrets", &ns, None) {
        return *r;
    }
    let Ok(secret) = serde_json::from_slice::<k8s_openapi::api::core::v1::Secret>(&body) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the body is not a Secret".into(),
        );
    };
    let name = secret.metadata.name.clone().unwrap_or_default();
    if c.manifests.secrets.contains_key(&name) {
        return status(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("secrets \"{name}\" already exists"),
        );
    }
    c.manifests.secrets.insert(name, secret.clone());
    (StatusCode::CREATED, Json(secret_json(&secret))).into_response()
}

fn secret_json(s: &k8s_openapi::api::core::v1::Secret) -> Value {
    let mut v = serde_json::to_value(s).unwrap_or_default();
    v["apiVersion"] = json!("v1");
    v["kind"] = json!("Secret");
    v
}

async fn get_secret(
    State(s): State<Shared>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    let c = lock(&s);
    if let Err(r) = authorize(&c, &headers, "get", "", "secrets", &ns, Some(&name)) {
        return *r;
    }
    match c.manifests.secrets.get(&name) {
        Some(secret) => Json(secret_json(secret)).into_response(),
        None => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("secrets \"{name}\" not found"),
        ),
    }
}

async fn delete_secret(
    State(s): State<Shared>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    let mut c = lock(&s);
    if let Err(r) = authorize(&c, &headers, "delete", "", "secrets", &ns, Some(&name)) {
        return *r;
    }
    match c.manifests.secrets.remove(&name) {
        Some(secret) => Json(secret_json(&secret)).into_response(),
        None => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("secrets \"{name}\" not found"),
        ),
    }
}

async fn patch_secret(
    State(s): State<Shared>,
    headers: HeaderMap,
    Path((ns, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let mut c = lock(&s);
    if let Err(r) = authorize(&c, &headers, "patch", "", "secrets", &ns, Some(&name)) {
        return *r;
    }
    let Some(secret) = c.manifests.secrets.get(&name) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("secrets \"{name}\" not found"),
        );
    };
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the patch is not JSON".into(),
        );
    };
    let mut v = secret_json(secret);
    merge(&mut v, &patch);
    match serde_json::from_value::<k8s_openapi::api::core::v1::Secret>(v) {
        Ok(merged) => {
            let out = secret_json(&merged);
            c.manifests.secrets.insert(name, merged);
            Json(out).into_response()
        }
        Err(e) => status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", e.to_string()),
    }
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            for (k, v) in p {
                if v.is_null() {
                    if let Some(o) = target.as_object_mut() {
                        o.remove(k);
                    }
                } else {
                    merge(&mut target[k], v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

async fn token_review(State(s): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let c = lock(&s);
    if let Err(r) = authorize(
        &c,
        &headers,
        "create",
        "authentication.k8s.io",
        "tokenreviews",
        "",
        None,
    ) {
        return *r;
    }
    let Ok(review) = serde_json::from_slice::<Value>(&body) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the body is not a TokenReview".into(),
        );
    };
    let token = review["spec"]["token"].as_str().unwrap_or_default();
    let wanted: Vec<String> = review["spec"]["audiences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let claims = claims_of(token).filter(|cl| c.pods.contains_key(&cl.pod));
    let status_obj = match claims {
        Some(cl) if wanted.is_empty() || cl.audiences.iter().any(|a| wanted.contains(a)) => json!({
            "authenticated": true,
            "audiences": cl.audiences,
            "user": {
                "username": format!("system:serviceaccount:{}:{}", cl.namespace, cl.service_account),
                "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{}", cl.namespace)],
                "extra": {
                    "authentication.kubernetes.io/pod-name": [cl.pod],
                },
            },
        }),
        Some(_) => json!({"authenticated": false, "error": "token audiences do not match"}),
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    let mut out = review.clone();
    out["status"] = status_obj;
    (StatusCode::CREATED, Json(out)).into_response()
}

/// The API's port on the harness's address.
pub const API_PORT: u16 = 6443;

/// Serves the API at the harness's address over TLS (a CA made for this
/// run) and tells every pod started from now on how to reach it.
///
/// # Errors
/// When the certificate cannot be made or the port bound.
pub async fn serve(shared: Shared) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    use anyhow::Context;
    let ip = lock(&shared).net.harness_ip();
    let ca =
        proto::tls::generate::Ca::ephemeral("openshell-pod-harness API").context("the API's CA")?;
    let names = vec![
        ip.clone(),
        "kubernetes.default.svc".to_string(),
        "kubernetes.default.svc.cluster.local".to_string(),
    ];
    let issued = ca
        .issue_pem("kubernetes", &names, proto::tls::generate::Usage::Server)
        .context("the API's certificate")?;
    let tls =
        proto::tls::ServerTls::from_pem(&issued.cert, &issued.key).context("the API's TLS")?;
    let mut config = (*tls.current()).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind((ip.as_str(), API_PORT))
        .await
        .with_context(|| format!("binding the API at {ip}:{API_PORT}"))?;
    let env: BTreeMap<String, String> = [
        ("KUBERNETES_SERVICE_HOST".to_string(), ip.clone()),
        ("KUBERNETES_SERVICE_PORT".to_string(), API_PORT.to_string()),
        (
            "KUBERNETES_SERVICE_PORT_HTTPS".to_string(),
            API_PORT.to_string(),
        ),
    ]
    .into_iter()
    .collect();
    lock(&shared).set_api(env, ca.cert_pem().as_bytes().to_vec());
    let app = router(shared);
    Ok(tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let app = app.clone();
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    }))
}

impl Cluster {
    /// Creates a pod from an API request (`POST .../pods`).
    ///
    /// # Errors
    /// When it exists, or is not a pod the harness runs.
    pub fn api_create_pod(
        &mut self,
        ns: &str,
        mut object: serde_json::Value,
    ) -> Result<Value, ApiError> {
        let pod: k8s_openapi::api::core::v1::Pod =
            serde_json::from_value(object.clone()).map_err(|e| ApiError::Invalid(e.to_string()))?;
        let name = pod
            .metadata
            .name
            .clone()
            .ok_or_else(|| ApiError::Invalid("metadata.name is required".into()))?;
        if self.pods.contains_key(&name) {
            return Err(ApiError::Exists(name));
        }
        self.serial += 1;
        object["metadata"]["namespace"] = serde_json::json!(ns);
        object["metadata"]["uid"] = serde_json::json!(format!("harness-uid-{}", self.serial));
        object["metadata"]["creationTimestamp"] = serde_json::json!("2026-01-01T00:00:00Z");
        object["metadata"]["resourceVersion"] = serde_json::json!(self.serial.to_string());
        let template = k8s_openapi::api::core::v1::PodTemplateSpec {
            metadata: Some(pod.metadata.clone()),
            spec: pod.spec.clone(),
        };
        self.create_pod_in(
            ns,
            &name,
            Owner::Api(Box::new(object)),
            &template,
            BTreeMap::new(),
        )
        .map_err(|e| ApiError::Invalid(format!("{e:#}")))?;
        Ok(self.api_pod(ns, &name).unwrap_or_default())
    }

    /// A pod created through the API, with the status the harness sees.
    pub fn api_pod(&self, ns: &str, name: &str) -> Option<serde_json::Value> {
        let p = self.pods.get(name).filter(|p| p.plan.namespace == ns)?;
        let Owner::Api(object) = &p.owner else {
            return None;
        };
        let mut v = (**object).clone();
        v["apiVersion"] = serde_json::json!("v1");
        v["kind"] = serde_json::json!("Pod");
        let container = p
            .plan
            .spec
            .containers
            .first()
            .map(|c| c.name.clone())
            .unwrap_or_default();
        let (phase, state) = match (p.terminated, &p.running) {
            (Some(code), _) => (
                if code == 0 { "Succeeded" } else { "Failed" },
                serde_json::json!({"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" }}}),
            ),
            (None, Some(_)) => (
                "Running",
                serde_json::json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}}),
            ),
            (None, None) => (
                "Pending",
                serde_json::json!({"waiting": {"reason": "ContainerCreating"}}),
            ),
        };
        let ready = p.ready();
        v["status"] = serde_json::json!({
            "phase": phase,
            "podIP": p.ip(),
            "podIPs": [{"ip": p.ip()}],
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
            "containerStatuses": [{
                "name": container, "ready": ready, "started": p.running.is_some(),
                "restartCount": p.restarts, "image": "harness", "imageID": "harness",
                "state": state,
            }],
        });
        if p.kill_at.is_some() {
            v["metadata"]["deletionTimestamp"] = serde_json::json!("2026-01-01T00:00:00Z");
        }
        Some(v)
    }

    /// Pods created through the API in `ns` whose labels include `selector`.
    pub fn api_pods(
        &self,
        ns: &str,
        selector: &BTreeMap<String, String>,
    ) -> Vec<serde_json::Value> {
        self.pods
            .iter()
            .filter(|(_, p)| selector.iter().all(|(k, v)| p.labels.get(k) == Some(v)))
            .filter_map(|(n, _)| self.api_pod(ns, n))
            .collect()
    }

    /// Begins deleting a pod created through the API.
    pub fn api_delete_pod(&mut self, ns: &str, name: &str) -> Option<serde_json::Value> {
        self.api_pod(ns, name)?;
        self.delete_pod(name);
        self.api_pod(ns, name)
    }
}

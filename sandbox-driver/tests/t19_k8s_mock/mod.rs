//! The mock Kubernetes API shared by the Kubernetes driver tests (t10,
//! t11), the way kube-rs documents testing controllers: a
//! `tower_test::mock::pair()` behind `kube::Client::new`; each test serves
//! the driver's requests in order, asserting each and scripting its answer.

#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use sandbox_driver::kubernetes::{KubernetesConfig, KubernetesDriver, PodTemplate};
use sandbox_driver::LaunchSpec;
use serde_json::{json, Value};
use tower_test::mock::{self, Handle, SendResponse};

/// The namespace of the mock.
pub const NS: &str = "sandboxes";

/// The mock API's side.
pub type ApiHandle = Handle<Request<Body>, Response<Body>>;

/// A small valid template.
pub const TEMPLATE: &str = "
metadata:
  labels: {team: sandboxes}
spec:
  containers:
  - name: runtime
    image: registry.example/openshell-sandbox-runtime:1
";

/// A driver over the mock API, and the mock's handle.
pub fn driver(template: &str) -> (KubernetesDriver, ApiHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, NS);
    let template = PodTemplate::parse(template, Path::new("test-template.yaml")).expect("template");
    let config = KubernetesConfig {
        namespace: NS.to_string(),
        template,
    };
    (KubernetesDriver::new(client, config), handle)
}

/// A launch spec of sandbox `id`, generation `generation`.
pub fn spec(id: &str, generation: u64, workload: &[&str]) -> LaunchSpec {
    LaunchSpec {
        sandbox_id: id.to_string(),
        generation,
        workload: workload.iter().map(ToString::to_string).collect(),
        recovery_deadline_ms: 30_000,
        trusted_grant_keys: vec!["ab".repeat(32)],
        trusted_grant_keys_file: None,
    }
}

/// One request the driver sent.
#[derive(Debug)]
pub struct Seen {
    /// `GET`, `POST`, ...
    pub method: String,
    /// Path and query.
    pub path: String,
    /// The JSON body (`Null` when empty).
    pub body: Value,
}

/// Waits (10 s at most) for the driver's next request.
pub async fn next(handle: &mut ApiHandle) -> (Seen, SendResponse<Response<Body>>) {
    let (req, send) = tokio::time::timeout(Duration::from_secs(10), handle.next_request())
        .await
        .expect("the driver sent no request within 10 s")
        .expect("the driver dropped its client");
    let method = req.method().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map(ToString::to_string)
        .unwrap_or_default();
    let bytes = req.into_body().collect_bytes().await.expect("request body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("a JSON request body")
    };
    (Seen { method, path, body }, send)
}

/// Answers `send` with `status` and the JSON `body`.
pub fn answer(send: SendResponse<Response<Body>>, status: u16, body: &Value) {
    let response = Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).expect("json")))
        .expect("response");
    send.send_response(response);
}

/// Expects a request `method` on `path` (path without query), answers it,
/// and returns what was sent.
pub async fn serve(
    handle: &mut ApiHandle,
    method: &str,
    path: &str,
    status: u16,
    body: &Value,
) -> Seen {
    let (seen, send) = next(handle).await;
    assert_eq!(seen.method, method, "{seen:?}");
    assert_eq!(seen.path.split('?').next(), Some(path), "{seen:?}");
    answer(send, status, body);
    seen
}

/// A Kubernetes `Status` error body.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// `path` without its query.
pub fn strip(path: &str) -> &str {
    path.split('?').next().unwrap_or(path)
}

/// `/api/v1/namespaces/sandboxes/<kind>`.
pub fn path(kind: &str) -> String {
    format!("/api/v1/namespaces/{NS}/{kind}")
}

/// The created object `body` as the API returns it (uid set).
pub fn created(body: &Value, uid: &str) -> Value {
    let mut out = body.clone();
    out["metadata"]["uid"] = json!(uid);
    out["metadata"]["namespace"] = json!(NS);
    out
}

/// Runs `ensure(spec)` through the first create: serves the Secret create,
/// the Pod create (answered with `pod_status`) and the ownerReference patch;
/// returns the Secret and Pod bodies the driver sent, and its result.
pub async fn first_create(
    driver: &KubernetesDriver,
    handle: &mut ApiHandle,
    spec: &LaunchSpec,
    pod_status: Value,
) -> (Value, Value, sandbox_driver::RuntimeState) {
    use sandbox_driver::SandboxDriver;
    let d = driver.clone();
    let s = spec.clone();
    let call = tokio::spawn(async move { d.ensure(&s).await });
    let secret = next(handle).await;
    assert_eq!(
        (secret.0.method.as_str(), strip(&secret.0.path)),
        ("POST", path("secrets").as_str())
    );
    let secret_body = secret.0.body.clone();
    answer(secret.1, 201, &created(&secret_body, "uid-secret"));
    let pod = next(handle).await;
    assert_eq!(
        (pod.0.method.as_str(), strip(&pod.0.path)),
        ("POST", path("pods").as_str())
    );
    let pod_body = pod.0.body.clone();
    let mut answered = created(&pod_body, "uid-pod");
    answered["status"] = pod_status;
    answer(pod.1, 201, &answered);
    let name = spec.name();
    let patch = serve(
        handle,
        "PATCH",
        &format!("{}/{name}-tls", path("secrets")),
        200,
        &secret_body,
    )
    .await;
    assert_eq!(
        patch.body["metadata"]["ownerReferences"][0]["uid"],
        "uid-pod"
    );
    assert_eq!(patch.body["metadata"]["ownerReferences"][0]["kind"], "Pod");
    let state = call.await.expect("join").expect("ensure");
    (secret_body, pod_body, state)
}

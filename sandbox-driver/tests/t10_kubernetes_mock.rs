//! The Kubernetes driver against a mock Kubernetes API (requests asserted,
//! responses scripted): create, conflict and adoption, states, list,
//! delete, Pod gone, error classes.

mod t19_k8s_mock;

use sandbox_driver::kubernetes::{objects, ANNOTATION_CA};
use sandbox_driver::{DriverError, RuntimeState, SandboxDriver};
use serde_json::{json, Value};
use t19_k8s_mock::*;

fn b64(v: &Value) -> String {
    // The tests decode base64 by hand: no extra dev-dependency.
    let s = v.as_str().expect("a base64 string");
    let table = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in s.bytes().filter(|&c| c != b'=') {
        let v = table.iter().position(|&t| t == c).expect("base64") as u32;
        bits = (bits << 6) | v;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
            bits &= (1 << n) - 1;
        }
    }
    String::from_utf8(out).expect("utf8")
}

fn running(ip: &str) -> Value {
    json!({"phase": "Running", "podIP": ip,
           "containerStatuses": [{"name": "runtime", "ready": true, "started": true, "restartCount": 0,
             "image": "x", "imageID": "", "state": {"running": {}}}]})
}

/// - given: a driver and an empty namespace
/// - when: ensure(sandbox "Sb_One", generation 2, workload `sleep 1000`)
/// - then: a Secret `<name>-tls` (kubernetes.io/tls), then the Pod `<name>`
///   with the driver's labels, annotation, args, TLS volume, restartPolicy
///   Never, port 7400; then the Secret's ownerReference to the Pod; Pending.
#[tokio::test]
async fn create_sends_the_secret_then_the_pod() {
    let (driver, mut api) = driver(TEMPLATE);
    let spec = spec("Sb_One", 2, &["sleep", "1000"]);
    let name = spec.name();
    // --- step: ensure against an empty namespace
    let (secret, pod, state) =
        first_create(&driver, &mut api, &spec, json!({"phase": "Pending"})).await;
    assert_eq!(
        state,
        RuntimeState::Pending {
            detail: "Pending".into()
        }
    );

    assert_eq!(secret["metadata"]["name"], format!("{name}-tls"));
    assert_eq!(secret["type"], "kubernetes.io/tls");
    assert!(b64(&secret["data"]["tls.crt"]).starts_with("-----BEGIN CERTIFICATE"));
    assert!(b64(&secret["data"]["tls.key"]).contains("PRIVATE KEY"));
    let ca = b64(&secret["data"]["ca.crt"]);
    assert!(ca.starts_with("-----BEGIN CERTIFICATE"));
    assert_eq!(secret["metadata"]["labels"]["openshell.io/runtime"], name);

    let meta = &pod["metadata"];
    assert_eq!(meta["name"], name);
    for (k, v) in [
        ("app.kubernetes.io/name", "openshell-sandbox-runtime"),
        ("app.kubernetes.io/managed-by", "openshell-gateway"),
        ("openshell.io/runtime", name.as_str()),
        ("openshell.io/generation", "2"),
        ("team", "sandboxes"),
    ] {
        assert_eq!(meta["labels"][k], v, "label {k}");
    }
    assert_eq!(meta["annotations"]["openshell.io/sandbox-id"], "Sb_One");
    assert_eq!(meta["annotations"][ANNOTATION_CA], ca);
    let spec_json = &pod["spec"];
    assert_eq!(spec_json["restartPolicy"], "Never");
    assert_eq!(spec_json["automountServiceAccountToken"], false);
    let c = &spec_json["containers"][0];
    assert_eq!(c["name"], "runtime");
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        [
            "--sandbox-id",
            "Sb_One",
            "--generation",
            "2",
            "--cluster-public-key",
            &"ab".repeat(32),
            "--listen",
            "0.0.0.0:7400",
            "--tls-cert-file",
            "/var/run/openshell/runtime-tls/tls.crt",
            "--tls-key-file",
            "/var/run/openshell/runtime-tls/tls.key",
            "--recovery-deadline-ms",
            "30000",
            "--",
            "sleep",
            "1000"
        ]
    );
    assert_eq!(
        c["ports"],
        json!([{"name": "runtime", "containerPort": 7400, "protocol": "TCP"}])
    );
    assert_eq!(
        c["env"],
        json!([{"name": "OPENSHELL_SANDBOX_ID", "value": "Sb_One"}])
    );
    assert_eq!(c["securityContext"]["runAsNonRoot"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    let tls_mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "runtime-tls")
        .unwrap();
    assert_eq!(tls_mount["mountPath"], "/var/run/openshell/runtime-tls");
    assert_eq!(tls_mount["readOnly"], true);
    let volume = spec_json["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "runtime-tls")
        .unwrap();
    assert_eq!(
        volume["secret"],
        json!({"secretName": format!("{name}-tls"), "defaultMode": 0o400})
    );
}

/// - given: a runtime created by a first leader
/// - when: a second leader ensures the same spec (Secret and Pod create
///   answered 409)
/// - then: it GETs both, sends no other create, and returns the running
///   Pod's endpoint with the FIRST Secret's CA.
#[tokio::test]
async fn conflict_adopts_the_existing_pod_and_its_ca() {
    let (driver, mut api) = driver(TEMPLATE);
    let spec = spec("sb-adopt", 1, &[]);
    let name = spec.name();
    let (secret, _pod, _) =
        first_create(&driver, &mut api, &spec, json!({"phase": "Pending"})).await;
    let first_ca = b64(&secret["data"]["ca.crt"]);

    // --- step: a second ensure (a new leader) conflicts on both creates
    let d = driver.clone();
    let s = spec.clone();
    let call = tokio::spawn(async move { d.ensure(&s).await });
    let conflict = status(409, "AlreadyExists", "secrets \"x\" already exists");
    let again = serve(&mut api, "POST", &path("secrets"), 409, &conflict).await;
    assert_ne!(
        b64(&again.body["data"]["ca.crt"]),
        first_ca,
        "a fresh identity is offered"
    );
    serve(
        &mut api,
        "GET",
        &format!("{}/{name}-tls", path("secrets")),
        200,
        &created(&secret, "u"),
    )
    .await;
    let offered = serve(
        &mut api,
        "POST",
        &path("pods"),
        409,
        &status(409, "AlreadyExists", "exists"),
    )
    .await;
    assert_eq!(
        offered.body["metadata"]["annotations"][ANNOTATION_CA], first_ca,
        "the Pod offered uses the adopted CA"
    );
    let mut existing = created(&offered.body, "uid-pod");
    existing["status"] = running("10.1.2.3");
    serve(
        &mut api,
        "GET",
        &format!("{}/{name}", path("pods")),
        200,
        &existing,
    )
    .await;
    let state = call.await.unwrap().unwrap();
    assert_eq!(
        state,
        RuntimeState::Running(sandbox_driver::Endpoint {
            name: name.clone(),
            address: "10.1.2.3:7400".into(),
            ca_pem: first_ca,
        })
    );
}

fn listed_pod(id: Option<&str>, generation: u64, status: Value) -> Value {
    let spec = spec(id.unwrap_or("foreign"), generation, &[]);
    let template =
        sandbox_driver::kubernetes::PodTemplate::parse(TEMPLATE, std::path::Path::new("t"))
            .unwrap();
    let mut pod = serde_json::to_value(objects::pod(&template, &spec, "CA-PEM")).unwrap();
    if id.is_none() {
        pod["metadata"]["annotations"] = json!({});
    }
    pod["status"] = status;
    pod
}

/// - given: three Pods carrying the driver's labels; one lacks the
///   sandbox-id annotation (not ours)
/// - when: list
/// - then: one GET with the label selector; two runtimes: Running with its
///   endpoint and CA, Unschedulable -> Failed with the scheduler's message.
#[tokio::test]
async fn list_parses_pods_and_skips_foreign_ones() {
    let (driver, mut api) = driver(TEMPLATE);
    let unschedulable = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
        "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient cpu."}]});
    let items = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [
        listed_pod(Some("sb.A"), 3, running("10.0.0.7")),
        listed_pod(Some("sb-b"), 1, unschedulable),
        listed_pod(None, 1, running("10.0.0.9")),
    ]});
    let d = driver.clone();
    let call = tokio::spawn(async move { d.list().await });
    let seen = serve(&mut api, "GET", &path("pods"), 200, &items).await;
    assert!(
        seen.path.contains("labelSelector=app.kubernetes.io%2Fmanaged-by%3Dopenshell-gateway%2Capp.kubernetes.io%2Fname%3Dopenshell-sandbox-runtime"),
        "{}",
        seen.path
    );
    let listed = call.await.unwrap().unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0].sandbox_id, "sb.A");
    assert_eq!(listed[0].generation, 3);
    assert_eq!(listed[0].name, sandbox_driver::runtime_name("sb.A", 3));
    assert!(
        matches!(&listed[0].state, RuntimeState::Running(e) if e.address == "10.0.0.7:7400" && e.ca_pem == "CA-PEM")
    );
    assert_eq!(
        listed[1].state,
        RuntimeState::Failed {
            reason: "Unschedulable: 0/3 nodes are available: 3 Insufficient cpu.".into()
        }
    );
}

/// - given: a Pod whose image cannot be pulled, and a Pod that exited
/// - when: list
/// - then: both Failed with the kubelet's reason.
#[tokio::test]
async fn image_pull_errors_and_exits_are_failures() {
    let (driver, mut api) = driver(TEMPLATE);
    let pull = json!({"phase": "Pending", "containerStatuses": [{"name": "runtime", "ready": false, "restartCount": 0,
        "image": "x", "imageID": "", "state": {"waiting": {"reason": "ErrImagePull", "message": "manifest unknown"}}}]});
    let exited = json!({"phase": "Failed", "containerStatuses": [{"name": "runtime", "ready": false, "restartCount": 0,
        "image": "x", "imageID": "", "state": {"terminated": {"reason": "Error", "exitCode": 3}}}]});
    let items = json!({"items": [listed_pod(Some("a"), 1, pull), listed_pod(Some("b"), 1, exited)], "metadata": {}});
    let d = driver.clone();
    let call = tokio::spawn(async move { d.list().await });
    serve(&mut api, "GET", &path("pods"), 200, &items).await;
    let listed = call.await.unwrap().unwrap();
    assert_eq!(
        listed[0].state,
        RuntimeState::Failed {
            reason: "ErrImagePull: manifest unknown".into()
        }
    );
    assert_eq!(
        listed[1].state,
        RuntimeState::Failed {
            reason: "Failed: Error (exit code 3)".into()
        }
    );
}

/// - given: a runtime whose Secret is already gone
/// - when: delete(name), then list
/// - then: DELETE of the Pod and of the Secret (404 tolerated); the list no
///   longer shows the Pod.
#[tokio::test]
async fn delete_removes_pod_and_secret_and_the_pod_is_gone() {
    let (driver, mut api) = driver(TEMPLATE);
    let name = spec("sb-del", 1, &[]).name();
    let d = driver.clone();
    let n = name.clone();
    let call = tokio::spawn(async move { d.delete(&n).await });
    serve(
        &mut api,
        "DELETE",
        &format!("{}/{name}", path("pods")),
        200,
        &listed_pod(Some("sb-del"), 1, json!({})),
    )
    .await;
    serve(
        &mut api,
        "DELETE",
        &format!("{}/{name}-tls", path("secrets")),
        404,
        &status(404, "NotFound", "gone"),
    )
    .await;
    call.await.unwrap().expect("404 is fine");

    // --- step: deleting again: both 404
    let d = driver.clone();
    let n = name.clone();
    let call = tokio::spawn(async move { d.delete(&n).await });
    serve(
        &mut api,
        "DELETE",
        &format!("{}/{name}", path("pods")),
        404,
        &status(404, "NotFound", "gone"),
    )
    .await;
    serve(
        &mut api,
        "DELETE",
        &format!("{}/{name}-tls", path("secrets")),
        404,
        &status(404, "NotFound", "gone"),
    )
    .await;
    call.await.unwrap().expect("already gone");

    // --- step: the Pod is gone from the list
    let d = driver.clone();
    let call = tokio::spawn(async move { d.list().await });
    serve(
        &mut api,
        "GET",
        &path("pods"),
        200,
        &json!({"items": [], "metadata": {}}),
    )
    .await;
    assert!(call.await.unwrap().unwrap().is_empty());
}

/// - given: an API that answers 500, 429, fails the connection, or 422
/// - then: Unavailable, Unavailable, Unavailable, Refused with the API's
///   message.
#[tokio::test]
async fn errors_are_classified() {
    let (driver, mut api) = driver(TEMPLATE);
    for (code, reason) in [
        (500, "InternalError"),
        (503, "ServiceUnavailable"),
        (429, "TooManyRequests"),
    ] {
        let d = driver.clone();
        let call = tokio::spawn(async move { d.list().await });
        serve(
            &mut api,
            "GET",
            &path("pods"),
            code,
            &status(code, reason, "try later"),
        )
        .await;
        let e = call.await.unwrap().unwrap_err();
        assert!(
            matches!(e, DriverError::Unavailable { .. }),
            "{code}: {e:?}"
        );
    }
    // --- step: a connection error
    let d = driver.clone();
    let call = tokio::spawn(async move { d.delete("sbx-x-g1-00000000").await });
    let (_, send) = next(&mut api).await;
    send.send_error(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        "connection refused",
    ));
    let e = call.await.unwrap().unwrap_err();
    assert!(matches!(e, DriverError::Unavailable { .. }), "{e:?}");

    // --- step: 422 on the Pod create: the launch is refused with the API's message
    let d = driver.clone();
    let call = tokio::spawn(async move { d.ensure(&spec("sb-bad", 1, &[])).await });
    serve(
        &mut api,
        "POST",
        &path("secrets"),
        201,
        &json!({"metadata": {"name": "x"}}),
    )
    .await;
    let invalid = status(
        422,
        "Invalid",
        "Pod \"x\" is invalid: spec.containers[0].image: Required value",
    );
    serve(&mut api, "POST", &path("pods"), 422, &invalid).await;
    match call.await.unwrap().unwrap_err() {
        DriverError::Refused { message, .. } => assert!(
            message.contains("spec.containers[0].image: Required value"),
            "{message}"
        ),
        e => panic!("{e:?}"),
    }
}

/// - given: an API server that accepts requests and never answers (paused)
/// - when: list with a 300 ms call timeout
/// - then: Unavailable, naming the timeout, instead of hanging the launcher.
#[tokio::test]
async fn a_silent_api_is_unavailable() {
    let (driver, mut api) = driver(TEMPLATE);
    let driver = driver.with_call_timeout(std::time::Duration::from_millis(300));
    let d = driver.clone();
    let call = tokio::spawn(async move { d.list().await });
    let (_seen, _held) = next(&mut api).await;
    let result = tokio::time::timeout(std::time::Duration::from_secs(30), call)
        .await
        .expect("list still waiting for a silent API after 30 s");
    match result.unwrap().unwrap_err() {
        DriverError::Unavailable { message, .. } => {
            assert!(message.contains("did not answer"), "{message}")
        }
        e => panic!("{e:?}"),
    }
}

//! Every Pod and Secret the Kubernetes driver would create is valid against
//! the Kubernetes 1.30 schemas (`kubernetes-validate --strict`), and its
//! names are valid: the objects are the request bodies the driver sends to
//! the mock API (t19_k8s_mock), for several specs and templates.
//!
//! `kubernetes-validate` comes from PyPI; `scripts/test-deps.sh` installs it
//! in /opt/openshell-test-venv. Missing, this test fails when run as root
//! (CI, scripts/test.sh) and is skipped, counted in `$OPENSHELL_SKIP_LOG`,
//! otherwise.

mod t19_k8s_mock;

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};
use t19_k8s_mock::*;

const VENV_BIN: &str = "/opt/openshell-test-venv/bin/kubernetes-validate";
const INSTALL: &str =
    "bash scripts/test-deps.sh (as root), or: python3 -m venv /opt/openshell-test-venv && \
     /opt/openshell-test-venv/bin/pip install kubernetes-validate==1.37.0";

/// A template setting most of what a template may set.
const RICH_TEMPLATE: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  labels:
    team: sandboxes
    tier: gold
  annotations:
    example.com/owner: platform
spec:
  serviceAccountName: sandbox-runtime
  automountServiceAccountToken: false
  priorityClassName: sandboxes
  nodeSelector:
    pool: sandboxes
    kubernetes.io/arch: amd64
  tolerations:
  - key: dedicated
    operator: Equal
    value: sandboxes
    effect: NoSchedule
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: zone, operator: In, values: [a, b]}
  imagePullSecrets:
  - name: registry
  securityContext:
    runAsUser: 10001
    fsGroup: 10001
    seccompProfile: {type: RuntimeDefault}
  volumes:
  - name: scratch
    emptyDir: {sizeLimit: 1Gi}
  containers:
  - name: runtime
    image: registry.example/openshell-sandbox-runtime:1.2.3
    imagePullPolicy: IfNotPresent
    command: [/usr/local/bin/openshell-sandbox-runtime]
    resources:
      requests: {cpu: 250m, memory: 128Mi}
      limits: {cpu: "2", memory: 1Gi}
    env:
    - name: RUST_LOG
      value: info
    volumeMounts:
    - name: scratch
      mountPath: /tmp
    securityContext:
      readOnlyRootFilesystem: false
      capabilities: {drop: [ALL]}
"#;

/// The validator, or why there is none.
fn validator() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("OPENSHELL_KUBERNETES_VALIDATE") {
        return Ok(PathBuf::from(p));
    }
    if std::path::Path::new(VENV_BIN).exists() {
        return Ok(PathBuf::from(VENV_BIN));
    }
    let on_path = Command::new("kubernetes-validate")
        .arg("--version")
        .output();
    match on_path {
        Ok(o) if o.status.success() => Ok(PathBuf::from("kubernetes-validate")),
        _ => Err(format!(
            "kubernetes-validate not found ({VENV_BIN}, $PATH, $OPENSHELL_KUBERNETES_VALIDATE); install it: {INSTALL}"
        )),
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Kubernetes' DNS-1123 subdomain (object names): 253 characters at most,
/// dot-separated parts of `[a-z0-9-]` (no 63-character limit per part).
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// - given: specs (demo workload, custom argv, odd ids, huge generation)
///   and templates (minimal, rich)
/// - when: the driver creates each runtime against the mock API
/// - then: every Secret and Pod body passes `kubernetes-validate --strict
///   -k 1.30.0`; the Pod name is a DNS label, the Secret name a DNS
///   subdomain, label values at most 63 characters.
#[tokio::test]
async fn every_created_object_is_valid() {
    let validate = match validator() {
        Ok(v) => v,
        Err(why) if !is_root() => {
            eprintln!("skipped: t11 every_created_object_is_valid: {why}");
            if let Some(path) = std::env::var_os("OPENSHELL_SKIP_LOG") {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .unwrap();
                writeln!(f, "t11_kubernetes_schema (kubernetes-validate missing)").unwrap();
            }
            return;
        }
        Err(why) => panic!("{why}"),
    };
    let dir = tempfile::tempdir().unwrap();
    let long_id = format!("Sandbox_{}", "x".repeat(120));
    let cases: Vec<(&str, &str, u64, Vec<&str>)> = vec![
        (TEMPLATE, "sb-demo", 1, vec![]),
        (
            TEMPLATE,
            "Sb.Custom_Argv",
            7,
            vec!["python3", "-c", "print('hi there')", "--flag=x y"],
        ),
        (RICH_TEMPLATE, "sb-rich", 2, vec!["/bin/agent", "--serve"]),
        (RICH_TEMPLATE, &long_id, u64::MAX, vec![]),
    ];
    let mut files = Vec::new();
    for (i, (template, id, generation, workload)) in cases.into_iter().enumerate() {
        let (driver, mut api) = driver(template);
        let spec = spec(id, generation, &workload);
        let (secret, pod, _) =
            first_create(&driver, &mut api, &spec, json!({"phase": "Pending"})).await;
        let pod_name = pod["metadata"]["name"].as_str().unwrap();
        let secret_name = secret["metadata"]["name"].as_str().unwrap();
        assert!(is_dns_label(pod_name), "Pod name {pod_name}");
        assert!(is_dns_subdomain(secret_name), "Secret name {secret_name}");
        for object in [&secret, &pod] {
            for (k, v) in object["metadata"]["labels"].as_object().unwrap() {
                let v = v.as_str().unwrap();
                assert!(v.len() <= 63, "label {k}={v}");
            }
        }
        assert_eq!(
            pod["metadata"]["annotations"]["openshell.io/sandbox-id"],
            id
        );
        for (kind, object) in [("secret", &secret), ("pod", &pod)] {
            let mut object: Value = object.clone();
            object["metadata"]["namespace"] = json!(NS);
            let file = dir.path().join(format!("{i}-{kind}.yaml"));
            std::fs::write(&file, serde_json::to_string_pretty(&object).unwrap()).unwrap();
            files.push(file);
        }
    }
    // --- step: validate every file at once
    let out = Command::new(&validate)
        .args(["--strict", "-k", "1.30.0"])
        .args(&files)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}; install it: {INSTALL}", validate.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "kubernetes-validate failed:\n{stdout}\n{stderr}"
    );
    assert_eq!(
        stdout.matches(" passed for resource ").count(),
        files.len(),
        "{stdout}\n{stderr}"
    );

    // --- step: the validator bites: a Pod with a field the schema lacks fails
    let mut bad: Value =
        serde_json::from_str(&std::fs::read_to_string(&files[1]).unwrap()).unwrap();
    bad["spec"]["containers"][0]["argz"] = json!(["x"]);
    let bad_file = dir.path().join("bad-pod.yaml");
    std::fs::write(&bad_file, bad.to_string()).unwrap();
    let out = Command::new(&validate)
        .args(["--strict", "-k", "1.30.0"])
        .arg(&bad_file)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "an unknown field passed --strict: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

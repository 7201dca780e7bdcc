//! The chart renders with Helm's own library at every size the issue names,
//! `helm lint --strict` is clean, every object is valid against the
//! Kubernetes 1.30 schemas, the fields the issue asks for are there, and a
//! replica change touches only what it must.
//!
//! Offline renders are first installs: `lookup` returns nothing, so every
//! render generates new secret material (keys, tokens, certificates). The
//! comparisons below therefore mask the Secrets' values and the public key
//! derived from the signing key; on a real upgrade `lookup` returns the
//! kept Secrets and these do not change either.

use helm_chart_tests::*;
use serde_json::{json, Value};

fn sizes(gateways: u64, supervisors: u64) -> Value {
    json!({"gateway": {"replicas": gateways}, "supervisor": {"replicas": supervisors}})
}

/// Every option the chart has that renders extra objects or other names.
fn options() -> Vec<Value> {
    vec![
        json!({
            "networkPolicy": {"enabled": true, "extraClientFrom": [
                {"namespaceSelector": {"matchLabels": {"team": "ops"}}}]},
            "metrics": {"serviceMonitor": {"enabled": true, "labels": {"release": "prom"}},
                        "podMonitor": {"enabled": true, "labels": {"release": "prom"}},
                        "grafanaDashboard": {"enabled": true,
                                             "annotations": {"grafana_folder": "OpenShell"}}},
            "gateway": {"persistence": {"storageClassName": "fast"}},
            "workloads": {"namespace": "openshell-sandboxes", "podTemplate": {
                "metadata": {"labels": {"team": "sandboxes"}},
                "spec": {"nodeSelector": {"pool": "sandboxes"},
                         "tolerations": [{"key": "dedicated", "operator": "Equal",
                                          "value": "sandboxes", "effect": "NoSchedule"}]}}},
            "imagePullSecrets": [{"name": "registry"}],
        }),
        json!({
            "fullnameOverride": "osg",
            "image": {"repository": "registry.example/openshell", "tag": "1.2.3"},
            "secrets": {
                "signingKey": {"existingSecret": "my-signing-key",
                               "trustedGrantKeys": format!("# old\n{}\n{}\n", "a".repeat(64), "b".repeat(64))},
                "tokens": {"existingSecret": "my-tokens"},
                "tls": {"existingSecret": "my-tls"},
                "supervisorCredential": {"existingSecret": "my-supervisor-credential"},
            },
            "tests": {"enabled": false},
            "supervisor": {"identity": "sharedToken"},
        }),
        json!({"supervisor": {"identity": "sharedToken", "tokenAudience": "ignored"}}),
    ]
}

fn assert_lint_clean(r: &Rendered, what: &Value) {
    let lint = r.lint.as_ref().expect("lint report");
    assert_eq!(lint["errors"], json!([]), "lint errors for {what}: {lint}");
    for m in lint["messages"].as_array().into_iter().flatten() {
        assert!(
            m["severity"].as_u64().unwrap_or(3) < 2,
            "lint --strict warning or error for {what}: {m}"
        );
    }
}

/// - given: gateway replicas 3 and 5, supervisor replicas 1, 2 and 3, and
///   two renders with every option (NetworkPolicy, ServiceMonitor, a
///   separate workloads namespace, existing Secrets, overrides)
/// - when: each is rendered and linted (`--strict`, kube 1.30)
/// - then: lint reports nothing above info; every object passes
///   `kubernetes-validate --strict -k 1.30.0`
#[test]
fn every_size_renders_lints_clean_and_validates() {
    let Some(tools) = tools("t01_render every_size_renders_lints_clean_and_validates") else {
        return;
    };
    let mut all = Vec::new();
    let mut cases: Vec<Value> = Vec::new();
    for gateways in [3, 5] {
        for supervisors in [1, 2, 3] {
            cases.push(sizes(gateways, supervisors));
        }
    }
    cases.extend(options());
    for values in &cases {
        eprintln!("--- step: render and lint {values}");
        let r = tools.render_and_lint(values.clone());
        assert_lint_clean(&r, values);
        assert!(r.objects.len() >= 15, "{values}: {:?}", r.names());
        all.extend(r.objects);
    }
    eprintln!("--- step: kubernetes-validate {} objects", all.len());
    tools.validate(&all);
}

fn container(workload: &Value) -> &Value {
    &workload["spec"]["template"]["spec"]["containers"][0]
}

fn args(workload: &Value) -> Vec<String> {
    container(workload)["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("arg").to_string())
        .collect()
}

fn assert_hardened(what: &str, pod_spec: &Value, container: &Value) {
    assert_eq!(pod_spec["securityContext"]["runAsNonRoot"], true, "{what}");
    assert_eq!(pod_spec["securityContext"]["runAsUser"], 65532, "{what}");
    let sc = &container["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true, "{what}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]), "{what}");
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{what}");
}

fn probe(c: &Value, which: &str) -> (String, u64, u64) {
    let p = &c[which];
    (
        p["httpGet"]["path"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        p["periodSeconds"].as_u64().unwrap_or_default(),
        p["failureThreshold"].as_u64().unwrap_or_default(),
    )
}

/// - given: the default values (3 gateways, 2 supervisors)
/// - then: the StatefulSet is Parallel with a data PVC, probes as
///   docs/health-probes.md, hardened, and started with the pod-name node id,
///   the advertised peer name, the autopilot and the Kubernetes driver; the
///   peer Service publishes not-ready pods; the PDBs never allow losing
///   quorum / take one supervisor at a time; the supervisor Deployment
///   surges one and keeps all available, drains within its grace period, has
///   no service account token; the RBAC is docs/kubernetes.md's plus `get`
///   on this StatefulSet; Secrets are kept on uninstall; the test hook runs
///   `raft status`.
#[test]
fn workloads_have_the_fields_the_issue_names() {
    let Some(tools) = tools("t01_render workloads_have_the_fields_the_issue_names") else {
        return;
    };
    let r = tools.render(json!({}));
    let f = fullname();
    let peer = format!("{f}-peer");
    let domain = format!("{NAMESPACE}.svc.cluster.local");

    eprintln!("--- step: gateway StatefulSet");
    let sts = r.get("StatefulSet", &f);
    assert_eq!(sts["spec"]["replicas"], 3);
    assert_eq!(sts["spec"]["podManagementPolicy"], "Parallel");
    assert_eq!(sts["spec"]["serviceName"], peer);
    let pvc = &sts["spec"]["volumeClaimTemplates"][0];
    assert_eq!(pvc["metadata"]["name"], "data");
    assert_eq!(pvc["spec"]["resources"]["requests"]["storage"], "10Gi");
    let pod = &sts["spec"]["template"]["spec"];
    let c = container(sts);
    assert!(c["volumeMounts"]
        .as_array()
        .expect("mounts")
        .contains(&json!({"name": "data", "mountPath": "/var/lib/openshell"})));
    assert_eq!(probe(c, "startupProbe"), ("/readyz".into(), 2, 150));
    assert_eq!(probe(c, "livenessProbe"), ("/healthz".into(), 10, 3));
    assert_eq!(probe(c, "readinessProbe"), ("/readyz".into(), 2, 2));
    assert_hardened("gateway", pod, c);
    assert!(
        pod["terminationGracePeriodSeconds"]
            .as_u64()
            .expect("grace")
            >= 30
    );
    assert_eq!(pod["serviceAccountName"], f.as_str());
    assert_eq!(
        pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
            ["podAffinityTerm"]["topologyKey"],
        "kubernetes.io/hostname"
    );
    assert_eq!(c["command"], json!(["/usr/local/bin/openshell-gateway"]));
    assert_eq!(
        args(sts),
        vec![
            "--config=/etc/openshell/gateway.toml".to_string(),
            "--node-id-from-pod-name=$(POD_NAME)".into(),
            format!("--advertise=$(POD_NAME).{peer}.$(POD_NAMESPACE).svc.cluster.local:7101"),
            format!("--autopilot-replicas=statefulset:{f}"),
            format!("--autopilot-peer-address={f}-{{ordinal}}.{peer}.{domain}:7101"),
            "--sandbox-driver=kubernetes".into(),
            format!("--kubernetes-namespace={NAMESPACE}"),
            "--pod-template-file=/etc/openshell/runtime-pod.yaml".into(),
            "--admin-token-file=/etc/openshell/tokens/admin-token".into(),
            "--viewer-token-file=/etc/openshell/tokens/viewer-token".into(),
        ]
    );
    let toml = r.gateway_toml();
    assert!(
        toml.contains(&format!(
            "member_identity_service_account = \"{NAMESPACE}:{f}-supervisor\""
        )),
        "{toml}"
    );

    eprintln!("--- step: Services and PDBs");
    let headless = r.get("Service", &peer);
    assert_eq!(headless["spec"]["clusterIP"], "None");
    assert_eq!(headless["spec"]["publishNotReadyAddresses"], true);
    let client = r.get("Service", &f);
    assert_eq!(client["spec"]["ports"][0]["port"], 7001);
    assert_eq!(client["spec"]["ports"][1]["port"], 9001);
    assert_eq!(r.get("PodDisruptionBudget", &f)["spec"]["minAvailable"], 2);
    let sup_pdb = r.get("PodDisruptionBudget", &format!("{f}-supervisor"));
    assert_eq!(sup_pdb["spec"]["maxUnavailable"], 1);
    let five = tools.render(sizes(5, 2));
    assert_eq!(
        five.get("PodDisruptionBudget", &f)["spec"]["minAvailable"],
        3
    );

    eprintln!("--- step: supervisor Deployment");
    let dep = r.get("Deployment", &format!("{f}-supervisor"));
    assert_eq!(dep["spec"]["replicas"], 2);
    assert_eq!(dep["spec"]["strategy"]["type"], "RollingUpdate");
    assert_eq!(dep["spec"]["strategy"]["rollingUpdate"]["maxSurge"], 1);
    assert_eq!(
        dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        0
    );
    let spod = &dep["spec"]["template"]["spec"];
    let sc = container(dep);
    assert_eq!(probe(sc, "readinessProbe"), ("/readyz".into(), 2, 2));
    assert_eq!(probe(sc, "livenessProbe"), ("/healthz".into(), 10, 3));
    assert_hardened("supervisor", spod, sc);
    assert_eq!(spod["automountServiceAccountToken"], false);
    // supervisor.identity kubernetes: a ServiceAccount only for the
    // audience-bound projected token presented as the credential.
    assert_eq!(spod["serviceAccountName"], format!("{f}-supervisor"));
    let token = spod["volumes"][0]["projected"]["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .find_map(|s| s.get("serviceAccountToken"))
        .cloned()
        .expect("a projected ServiceAccount token");
    assert_eq!(token["audience"], "openshell-gateway");
    assert_eq!(
        r.get("ServiceAccount", &format!("{f}-supervisor"))["automountServiceAccountToken"],
        false
    );
    assert_eq!(spod["terminationGracePeriodSeconds"], 40);
    let sargs = args(dep);
    assert!(
        sargs.contains(&"--drain-timeout-ms=25000".to_string()),
        "{sargs:?}"
    );
    assert!(sargs.contains(&"--pool-member-id=$(POD_NAME)".to_string()));
    assert!(sargs.contains(&format!("--gateways={f}.{domain}:7001")));
    assert!(
        sargs.contains(&"--credential-file=/etc/openshell/supervisor-credential/token".to_string())
    );
    assert!(
        spod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            .is_array()
    );

    eprintln!("--- step: RBAC, Secrets, test hook, NOTES");
    let driver = r.get("Role", &format!("{f}-sandbox-driver"));
    assert_eq!(
        driver["rules"],
        json!([
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "delete"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "get", "delete", "patch"]},
        ])
    );
    assert_eq!(
        r.get("Role", &format!("{f}-autopilot"))["rules"],
        json!([{"apiGroups": ["apps"], "resources": ["statefulsets"], "resourceNames": [f.as_str()], "verbs": ["get"]}])
    );
    assert_eq!(
        r.get("ClusterRole", &format!("{NAMESPACE}-{f}-tokenreview"))["rules"],
        json!([{"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}])
    );
    for s in ["signing-key", "tokens", "tls"] {
        let secret = r.get("Secret", &format!("{f}-{s}"));
        assert_eq!(
            secret["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
            "{s}"
        );
    }
    let hook = r.get("Pod", &format!("{f}-test-raft-status"));
    assert_eq!(hook["metadata"]["annotations"]["helm.sh/hook"], "test");
    let hargs = hook["spec"]["containers"][0]["args"].to_string();
    assert!(
        hargs.contains("\"raft\",\"status\"")
            && hargs.contains("--ca-file=")
            && hargs.contains("viewer-token"),
        "{hargs}"
    );
    assert!(
        r.notes.contains("port-forward") && r.notes.contains("raft status"),
        "{}",
        r.notes
    );

    eprintln!("--- step: supervisor.identity sharedToken");
    let shared = tools.render(json!({"supervisor": {"identity": "sharedToken"}}));
    assert!(args(shared.get("StatefulSet", &f)).contains(
        &"--supervisor-token-file=/etc/openshell/supervisor-credential/supervisor-token"
            .to_string()
    ));
    let dep = shared.get("Deployment", &format!("{f}-supervisor"));
    assert!(args(dep).contains(
        &"--credential-file=/etc/openshell/supervisor-credential/supervisor-token".to_string()
    ));
    assert!(dep["spec"]["template"]["spec"]
        .get("serviceAccountName")
        .is_none());
    let secret = shared.get("Secret", &format!("{f}-supervisor-credential"));
    assert_eq!(
        secret["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    assert!(!shared.gateway_toml().contains("member_identity"));
    assert!(
        !shared.names().iter().any(|n| n.starts_with("ClusterRole")),
        "{:?}",
        shared.names()
    );
}

/// Secret values and what derives from the generated key differ in every
/// offline render (each is a first install): replaced by a marker.
fn masked(objects: &[Value]) -> Vec<Value> {
    let f = fullname();
    objects
        .iter()
        .map(|o| {
            let mut o = o.clone();
            if o["kind"] == "Secret" {
                if let Some(data) = o["data"].as_object_mut() {
                    for v in data.values_mut() {
                        *v = json!("<generated>");
                    }
                }
            }
            if o["kind"] == "ConfigMap"
                && o["metadata"]["name"] == format!("{f}-trusted-grant-keys")
            {
                o["data"] = json!("<derived from the generated signing key>");
            }
            o
        })
        .collect()
}

fn key(o: &Value) -> String {
    format!(
        "{}/{}/{}",
        o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]
    )
}

/// - given: supervisor replicas 1, 2 and 3 (3 gateways)
/// - then: every object but the supervisor Deployment is identical, and
///   the Deployment differs only in spec.replicas (no gateway object, no
///   gateway configuration, no supervisor pod template changes)
#[test]
fn supervisor_replicas_change_no_gateway_object() {
    let Some(tools) = tools("t01_render supervisor_replicas_change_no_gateway_object") else {
        return;
    };
    let base = masked(&tools.render(sizes(3, 1)).objects);
    let deployment = format!("{}-supervisor", fullname());
    for supervisors in [2, 3] {
        eprintln!("--- step: supervisor.replicas 1 -> {supervisors}");
        let other = masked(&tools.render(sizes(3, supervisors)).objects);
        assert_eq!(base.len(), other.len());
        for (a, b) in base.iter().zip(&other) {
            assert_eq!(key(a), key(b));
            if a["kind"] == "Deployment" && a["metadata"]["name"] == deployment.as_str() {
                assert_eq!(b["spec"]["replicas"], supervisors);
                let (mut a, mut b) = (a.clone(), b.clone());
                a["spec"]["replicas"] = json!(0);
                b["spec"]["replicas"] = json!(0);
                assert_eq!(
                    a, b,
                    "the supervisor Deployment changed beyond spec.replicas"
                );
            } else {
                assert_eq!(a, b, "{} changed with supervisor.replicas", key(a));
            }
        }
    }
}

/// - given: gateway replicas 3 and 5 (2 supervisors)
/// - then: no pod template changes (StatefulSet, Deployment); the
///   StatefulSet differs only in spec.replicas, the gateway PDB only in
///   minAvailable, the bootstrap ConfigMap (offline = a first install) only
///   in its voters; nothing else changes (the gateway TOML included)
#[test]
fn gateway_replicas_change_no_pod_template() {
    let Some(tools) = tools("t01_render gateway_replicas_change_no_pod_template") else {
        return;
    };
    let f = fullname();
    let three = masked(&tools.render(sizes(3, 2)).objects);
    let five = masked(&tools.render(sizes(5, 2)).objects);
    assert_eq!(three.len(), five.len());
    let mut changed = Vec::new();
    for (a, b) in three.iter().zip(&five) {
        assert_eq!(key(a), key(b));
        if a["spec"]["template"].is_object() {
            assert_eq!(
                a["spec"]["template"],
                b["spec"]["template"],
                "{}: pod template changed",
                key(a)
            );
        }
        if a == b {
            continue;
        }
        changed.push(key(a));
        let (mut a, mut b) = (a.clone(), b.clone());
        match (a["kind"].as_str(), a["metadata"]["name"].as_str()) {
            (Some("StatefulSet"), _) => {
                assert_eq!(
                    (a["spec"]["replicas"].clone(), b["spec"]["replicas"].clone()),
                    (json!(3), json!(5))
                );
                a["spec"]["replicas"] = json!(0);
                b["spec"]["replicas"] = json!(0);
            }
            (Some("PodDisruptionBudget"), Some(n)) if n == f => {
                assert_eq!(
                    (
                        a["spec"]["minAvailable"].clone(),
                        b["spec"]["minAvailable"].clone()
                    ),
                    (json!(2), json!(3))
                );
                a["spec"]["minAvailable"] = json!(0);
                b["spec"]["minAvailable"] = json!(0);
            }
            (Some("ConfigMap"), Some(n)) if n == format!("{f}-bootstrap") => {
                let voters = b["data"]["initial-voters"]
                    .as_str()
                    .expect("voters")
                    .to_string();
                let want: Vec<String> = (0..5)
                    .map(|i| {
                        format!(
                            "{}={f}-{i}.{f}-peer.{NAMESPACE}.svc.cluster.local:7101",
                            i + 1
                        )
                    })
                    .collect();
                assert_eq!(voters, want.join(","));
                a["data"] = json!(null);
                b["data"] = json!(null);
            }
            _ => panic!("{} changed with gateway.replicas", key(&a)),
        }
        assert_eq!(a, b, "{} changed beyond the replica-derived field", key(&a));
    }
    assert_eq!(changed.len(), 3, "{changed:?}");
}

/// - given: values the schema or the templates must refuse
/// - then: each render fails, naming the key
#[test]
fn bad_values_are_refused_naming_the_key() {
    let Some(tools) = tools("t01_render bad_values_are_refused_naming_the_key") else {
        return;
    };
    let cases = [
        (
            json!({"supervisor": {"identity": "perMember"}}),
            "/supervisor/identity",
        ),
        (json!({"gateway": {"replicaz": 3}}), "replicaz"),
        (json!({"gateway": {"replicas": 0}}), "/gateway/replicas"),
        (
            json!({"gateway": {"config": {"raft": {"heartbeat_interval_ms": 5}}}}),
            "heartbeat_interval_ms",
        ),
        (
            json!({"supervisor": {"terminationGracePeriodSeconds": 20}}),
            "terminationGracePeriodSeconds must exceed",
        ),
        (
            json!({"secrets": {"signingKey": {"existingSecret": "mine"}}}),
            "trustedGrantKeys is required",
        ),
        (
            json!({"secrets": {"signingKey": {"trustedGrantKeys": "not-a-key"}}}),
            "trustedGrantKeys",
        ),
    ];
    for (values, want) in cases {
        let err = tools.render_error(values.clone());
        assert!(err.contains(want), "{values}: expected {want:?} in: {err}");
    }
}

fn hex64(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec())
        .expect("utf-8")
        .trim()
        .to_string()
}

/// - given: the default values and a separate workloads namespace
/// - then: the generated signing key's public half (derived by Helm from a
///   certificate it signs) is the ed25519 public key of the seed, in the
///   Secret and in the trusted grant keys ConfigMaps of both namespaces;
///   the gateway certificate chains to the CA, carries serverAuth and
///   clientAuth and names the peers, the client Service and localhost
#[test]
fn generated_keys_and_certificate_fit_the_binaries() {
    let Some(tools) = tools("t01_render generated_keys_and_certificate_fit_the_binaries") else {
        return;
    };
    let f = fullname();
    let r = tools.render(json!({"workloads": {"namespace": "sbx"}}));
    let seed = hex64(&r.secret_key(&format!("{f}-signing-key"), "signing-key"));
    let public = hex64(&r.secret_key(&format!("{f}-signing-key"), "trusted-grant-keys"));
    let seed: [u8; 32] = hex::decode(&seed)
        .expect("hex seed")
        .try_into()
        .expect("32 bytes");
    let derived = ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key();
    assert_eq!(
        public,
        hex::encode(derived.as_bytes()),
        "Helm's public key is not the seed's"
    );
    let maps: Vec<&Value> = r
        .objects
        .iter()
        .filter(|o| {
            o["kind"] == "ConfigMap" && o["metadata"]["name"] == format!("{f}-trusted-grant-keys")
        })
        .collect();
    let namespaces: Vec<&Value> = maps.iter().map(|m| &m["metadata"]["namespace"]).collect();
    assert_eq!(namespaces, vec![&json!(NAMESPACE), &json!("sbx")]);
    for m in maps {
        assert_eq!(
            m["data"]["trusted-grant-keys"].as_str().map(str::trim),
            Some(public.as_str())
        );
    }

    let pem = r.secret_key(&format!("{f}-tls"), "tls.crt");
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).expect("tls.crt PEM");
    let cert = pem.parse_x509().expect("tls.crt");
    let ca_pem = r.secret_key(&format!("{f}-tls"), "ca.crt");
    let (_, ca_pem) = x509_parser::pem::parse_x509_pem(&ca_pem).expect("ca.crt PEM");
    let ca = ca_pem.parse_x509().expect("ca.crt");
    assert_eq!(cert.issuer(), ca.subject());
    cert.verify_signature(Some(ca.public_key()))
        .expect("signed by the CA");
    let eku = cert
        .extended_key_usage()
        .expect("eku")
        .expect("has eku")
        .value;
    assert!(eku.server_auth && eku.client_auth, "{eku:?}");
    let san = format!(
        "{:?}",
        cert.subject_alternative_name()
            .expect("san")
            .expect("has san")
            .value
    );
    for name in [
        format!("*.{f}-peer.{NAMESPACE}.svc.cluster.local"),
        format!("{f}.{NAMESPACE}.svc.cluster.local"),
        format!("\"{f}\""),
        "localhost".to_string(),
    ] {
        assert!(san.contains(&name), "{name} not in {san}");
    }
    assert!(san.contains("IPAddress([127, 0, 0, 1])"), "{san}");
}

/// - given: the supervisor PodMonitor and the Grafana dashboard turned on
/// - then: the PodMonitor selects exactly the supervisor Deployment's Pods
///   (its selector is the Pod template's labels) and scrapes the port the
///   supervisor container names `http` at `/metrics`, with the configured
///   interval and labels; the dashboard ConfigMap carries the sidecar's
///   label and the folder annotation, and its JSON is the chart's
///   `dashboards/openshell.json` byte for byte; both are off by default
#[test]
fn the_pod_monitor_scrapes_the_supervisors_and_the_dashboard_ships_for_the_sidecar() {
    let Some(tools) = tools(
        "t01_render the_pod_monitor_scrapes_the_supervisors_and_the_dashboard_ships_for_the_sidecar",
    ) else {
        return;
    };
    let off = tools.render(json!({}));
    assert!(
        !off.objects.iter().any(|o| o["kind"] == "PodMonitor"),
        "a PodMonitor rendered by default: {:?}",
        off.names()
    );
    assert!(!off.names().iter().any(|n| n.ends_with("-dashboard")));
    let r = tools.render_and_lint(json!({"metrics": {
        "podMonitor": {"enabled": true, "interval": "15s", "labels": {"release": "prom"}},
        "grafanaDashboard": {"enabled": true, "annotations": {"grafana_folder": "OpenShell"}},
    }}));
    let name = fullname();
    let monitor = r.get("PodMonitor", &format!("{name}-supervisor"));
    let supervisors = r.get("Deployment", &format!("{name}-supervisor"));
    let pod_labels = &supervisors["spec"]["template"]["metadata"]["labels"];
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    assert!(!selector.is_empty());
    for (k, v) in selector {
        assert_eq!(
            &pod_labels[k], v,
            "selector {k} does not match the supervisor Pods"
        );
    }
    assert_eq!(
        supervisors["spec"]["selector"]["matchLabels"].as_object(),
        Some(selector),
        "the PodMonitor selects what the Deployment owns"
    );
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(endpoint["interval"], "15s");
    let ports = container(supervisors)["ports"].as_array().expect("ports");
    assert!(
        ports.iter().any(|p| p["name"] == endpoint["port"]),
        "the supervisor names no port {}: {ports:?}",
        endpoint["port"]
    );
    assert_eq!(monitor["metadata"]["labels"]["release"], "prom");

    let map = r.get("ConfigMap", &format!("{name}-dashboard"));
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(
        map["metadata"]["annotations"]["grafana_folder"],
        "OpenShell"
    );
    let shipped = r.config_map_key(&format!("{name}-dashboard"), "openshell.json");
    let file = std::fs::read_to_string(chart_dir().join("dashboards/openshell.json"))
        .expect("dashboards/openshell.json");
    assert_eq!(
        shipped.trim_end(),
        file.trim_end(),
        "the dashboard is the chart's file"
    );
    let dashboard: Value = serde_json::from_str(&shipped).expect("the dashboard is JSON");
    assert!(dashboard["panels"]
        .as_array()
        .is_some_and(|p| !p.is_empty()));
    tools.validate(&r.objects);
}

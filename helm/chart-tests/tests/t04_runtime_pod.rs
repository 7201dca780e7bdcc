//! The runtime Pod template the chart renders meets the Kubernetes sandbox
//! driver: `PodTemplate::parse` accepts it (as a gateway does at start),
//! and the Pod the driver builds from it for a launch is valid against the
//! Kubernetes 1.30 schemas, runs the runtime binary of the chart's image as
//! 65532 and points `--trusted-grant-keys-file` at the ConfigMap the
//! template mounts (so a signing-key rotation reaches running runtimes).

use std::path::Path;

use helm_chart_tests::*;
use sandbox_driver::kubernetes::{objects, PodTemplate};
use sandbox_driver::LaunchSpec;
use serde_json::{json, Value};

fn runtime_pod(r: &Rendered, namespace: &str) -> Value {
    let text = r.config_map_key(&format!("{}-runtime-pod", fullname()), "runtime-pod.yaml");
    let template = PodTemplate::parse(&text, Path::new("/etc/openshell/runtime-pod.yaml"))
        .unwrap_or_else(|e| panic!("the driver refuses the rendered template: {e}\n{text}"));
    let spec = LaunchSpec {
        sandbox_id: "sb-chart".into(),
        generation: 1,
        workload: vec![],
        recovery_deadline_ms: 60_000,
        trusted_grant_keys: vec![],
        // The gateway TOML's runtime_trusted_keys_file (golden/default.toml).
        trusted_grant_keys_file: Some("/etc/openshell/grant-keys/trusted-grant-keys".into()),
    };
    let mut pod = serde_json::to_value(objects::pod(&template, &spec, "CA PEM")).expect("pod json");
    pod["metadata"]["namespace"] = json!(namespace);
    pod
}

/// - given: the default values, and a workloads namespace with a template
///   that adds labels, a node selector and tolerations
/// - when: the driver builds the Pod of a launch from the rendered template
/// - then: the Pod is valid (kubernetes-validate --strict, 1.30); it runs
///   /usr/local/bin/openshell-sandbox-runtime from the chart's image as
///   65532 with a read-only root; the trusted grant keys ConfigMap (in the
///   Pod's namespace) is mounted where `--trusted-grant-keys-file` points
#[test]
fn the_driver_builds_valid_runtime_pods_from_the_rendered_template() {
    let Some(tools) =
        tools("t04_runtime_pod the_driver_builds_valid_runtime_pods_from_the_rendered_template")
    else {
        return;
    };
    let cases = [
        (json!({}), NAMESPACE),
        (
            json!({"gateway": {"autopilot": {"enabled": false}},
                   "image": {"repository": "registry.example/openshell", "tag": "1.2.3"},
                   "workloads": {"namespace": "sbx", "podTemplate": {
                       "metadata": {"labels": {"team": "sandboxes"}},
                       "spec": {"nodeSelector": {"pool": "sandboxes"},
                                "tolerations": [{"key": "dedicated", "operator": "Equal",
                                                 "value": "sandboxes", "effect": "NoSchedule"}]}}}}),
            "sbx",
        ),
    ];
    let mut pods = Vec::new();
    for (values, namespace) in cases {
        eprintln!("--- step: {values}");
        let r = tools.render(values);
        let pod = runtime_pod(&r, namespace);
        let c = &pod["spec"]["containers"][0];
        assert_eq!(
            c["command"],
            json!(["/usr/local/bin/openshell-sandbox-runtime"])
        );
        let image = r.get("StatefulSet", &fullname())["spec"]["template"]["spec"]["containers"][0]
            ["image"]
            .clone();
        assert_eq!(c["image"], image, "runtimes run the gateways' image");
        assert_eq!(pod["spec"]["securityContext"]["runAsUser"], 65532);
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        let args = c["args"].to_string();
        assert!(
            args.contains(
                "\"--trusted-grant-keys-file\",\"/etc/openshell/grant-keys/trusted-grant-keys\""
            ),
            "{args}"
        );
        assert!(c["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .any(|m| m["mountPath"] == "/etc/openshell/grant-keys"));
        let volume = pod["spec"]["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .find(|v| v["name"] == "trusted-grant-keys")
            .cloned()
            .expect("the trusted grant keys volume");
        let map = volume["configMap"]["name"]
            .as_str()
            .expect("configMap")
            .to_string();
        let rendered_map = r.objects.iter().find(|o| {
            o["kind"] == "ConfigMap"
                && o["metadata"]["name"] == map.as_str()
                && o["metadata"]["namespace"] == namespace
        });
        assert!(
            rendered_map.is_some(),
            "no ConfigMap {map} in namespace {namespace}: {:?}",
            r.names()
        );
        pods.push(pod);
    }
    eprintln!("--- step: kubernetes-validate");
    tools.validate(&pods);
}

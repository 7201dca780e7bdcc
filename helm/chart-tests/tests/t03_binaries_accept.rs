//! The configuration the chart renders is accepted by the real binaries:
//! each gateway pod's and supervisor pod's command, arguments and
//! environment (downward API filled in, ConfigMap keys resolved), with the
//! projected volume written as files under a temporary root (mount paths
//! rewritten to it), run through `openshell-gateway --check-config` and
//! `openshell-supervisor --check-config`: validated like a real start
//! (TOML, flags, TLS files, signing key, tokens, the runtime Pod template,
//! the trusted grant keys), without binding a port or creating the data
//! directory.

use std::process::Command;

use helm_chart_tests::*;
use serde_json::{json, Value};

/// The binary: from `$OPENSHELL_CHART_TEST_BIN_DIR` when set (e.g. release
/// binaries or an unpacked image's `/usr/local/bin`), else the workspace's
/// (built up to date).
fn binary_path(binary: &str) -> std::path::PathBuf {
    match std::env::var_os("OPENSHELL_CHART_TEST_BIN_DIR") {
        Some(dir) => std::path::Path::new(&dir).join(binary),
        None => testkit::bins::workspace_bin(binary),
    }
}

/// Runs `pod`'s command with `--check-config` as the container would (only
/// its own environment), returning (success, stdout + stderr).
fn check_config(pod: &Pod, binary: &str) -> (bool, String) {
    let bin = binary_path(binary);
    assert!(
        pod.argv[0].ends_with(&format!("/{binary}")),
        "the container runs {}, not {binary}",
        pod.argv[0]
    );
    let out = Command::new(&bin)
        .arg("--check-config")
        .args(&pod.argv[1..])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(&pod.env)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{binary} --check-config: {}", text.trim());
    (out.status.success(), text)
}

fn gateway_cases() -> Vec<(Value, u64)> {
    vec![
        (json!({}), 3),
        (json!({"supervisor": {"identity": "sharedToken"}}), 3),
        (
            json!({"gateway": {"replicas": 5, "clusterId": "openshell-prod",
                "config": {"raft": {"heartbeat_interval_ms": 200, "election_timeout_min_ms": 1000,
                                     "election_timeout_max_ms": 2000}}}}),
            5,
        ),
        (
            json!({"gateway": {"autopilot": {"enabled": false}},
                "workloads": {"namespace": "openshell-sandboxes", "podTemplate": {
                    "metadata": {"labels": {"team": "sandboxes"}},
                    "spec": {"nodeSelector": {"pool": "sandboxes"}, "priorityClassName": "sandboxes"}}}}),
            3,
        ),
    ]
}

/// - given: the default render, sharedToken supervisors, 5 tuned gateways, and a separate workloads
///   namespace with a richer runtime Pod template
/// - when: every gateway pod of the StatefulSet runs `--check-config`
/// - then: rc 0, `configuration ok (node <ordinal + 1>`, and no data
///   directory is created
#[test]
fn gateway_accepts_the_rendered_configuration() {
    let Some(tools) = tools("t03_binaries_accept gateway_accepts_the_rendered_configuration")
    else {
        return;
    };
    let f = fullname();
    for (values, replicas) in gateway_cases() {
        eprintln!("--- step: render {values}");
        let r = tools.render(values);
        let sts = r.get("StatefulSet", &f);
        for ordinal in 0..replicas {
            let pod = Pod::new(
                &r,
                sts,
                &format!("{f}-{ordinal}"),
                &format!("10.0.0.{}", 10 + ordinal),
            );
            let (ok, text) = check_config(&pod, "openshell-gateway");
            assert!(
                ok,
                "pod {ordinal}: {text}\nargv {:?}\nenv {:?}",
                pod.argv, pod.env
            );
            assert!(
                text.contains(&format!(
                    "openshell-gateway: configuration ok (node {}",
                    ordinal + 1
                )),
                "pod {ordinal}: {text}"
            );
            assert!(
                !pod.path("/var/lib/openshell/gateway").exists(),
                "--check-config created the data directory"
            );
        }
    }
}

/// - given: the default render with the signing key file missing from the
///   pod (as if its Secret lacked the key)
/// - then: `--check-config` fails rc 1 with one line naming signing_key_file
///   (the check reads the files the chart mounts)
#[test]
fn gateway_check_refuses_a_missing_secret_file() {
    let Some(tools) = tools("t03_binaries_accept gateway_check_refuses_a_missing_secret_file")
    else {
        return;
    };
    let f = fullname();
    let r = tools.render(json!({}));
    let pod = Pod::new(&r, r.get("StatefulSet", &f), &format!("{f}-0"), "10.0.0.10");
    std::fs::remove_file(pod.path("/etc/openshell/secrets/signing-key"))
        .expect("remove signing key");
    let (ok, text) = check_config(&pod, "openshell-gateway");
    assert!(!ok, "accepted without a signing key: {text}");
    assert!(
        text.contains("signing_key_file") || text.contains("signing-key"),
        "{text}"
    );
}

/// - given: supervisor replicas 1, 2, 3 (pods with random-suffixed names;
///   identity kubernetes: a projected token file), and 2 with sharedToken
/// - when: every supervisor pod runs `--check-config`
/// - then: rc 0 and `openshell-supervisor: configuration ok`
#[test]
fn supervisor_accepts_the_rendered_configuration() {
    let Some(tools) = tools("t03_binaries_accept supervisor_accepts_the_rendered_configuration")
    else {
        return;
    };
    let f = fullname();
    for (replicas, identity) in [
        (1u64, "kubernetes"),
        (2, "kubernetes"),
        (3, "kubernetes"),
        (2, "sharedToken"),
    ] {
        let r = tools.render(json!({"supervisor": {"replicas": replicas, "identity": identity}}));
        let dep = r.get("Deployment", &format!("{f}-supervisor"));
        for i in 0..replicas {
            let name = format!("{f}-supervisor-6d8f9c7b5-x{i}k2p");
            let pod = Pod::new(&r, dep, &name, &format!("10.0.1.{}", 10 + i));
            let (ok, text) = check_config(&pod, "openshell-supervisor");
            assert!(ok, "{name}: {text}\nargv {:?}", pod.argv);
            assert!(
                text.contains("openshell-supervisor: configuration ok"),
                "{name}: {text}"
            );
        }
    }
}

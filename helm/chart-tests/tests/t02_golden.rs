//! The gateway TOML the chart renders, byte for byte, against golden files
//! in `helm/chart-tests/golden/`. A change to the chart that changes the
//! TOML shows up as a diff to review: rewrite the files with
//! `UPDATE_GOLDEN=1 cargo test -p helm-chart-tests --test t02_golden` and
//! commit only diffs you understand.

use std::path::Path;

use helm_chart_tests::*;
use serde_json::{json, Value};

fn check(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden");
        eprintln!("rewrote {}", path.display());
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    assert!(
        want == actual,
        "{} differs from the rendered TOML (UPDATE_GOLDEN=1 rewrites it):\n--- golden\n{want}\n--- rendered\n{actual}",
        path.display()
    );
}

/// - given: the default values, tuned raft and pool values with a cluster
///   id at 5 gateways, and supervisor.identity sharedToken
/// - then: the rendered gateway.toml equals `golden/<case>.toml`; the
///   bootstrap voters equal `golden/<case>.initial-voters`
#[test]
fn gateway_toml_matches_golden() {
    let Some(tools) = tools("t02_golden gateway_toml_matches_golden") else {
        return;
    };
    let tuned: Value = json!({
        "gateway": {
            "replicas": 5,
            "clusterId": "openshell-prod",
            "config": {
                "raft": {"heartbeat_interval_ms": 200, "election_timeout_min_ms": 1000,
                         "election_timeout_max_ms": 2000, "write_timeout_ms": 10000},
                "supervisor_pool": {"tick_interval_ms": 500, "heartbeat_ttl_ms": 5000,
                                    "status_interval_ms": 1000, "recovery_deadline_ms": 120000},
            },
        },
    });
    let shared = json!({"supervisor": {"identity": "sharedToken"}});
    for (case, values) in [
        ("default", json!({})),
        ("tuned", tuned),
        ("shared-token", shared),
    ] {
        eprintln!("--- step: {case}");
        let r = tools.render(values);
        check(&format!("{case}.toml"), &r.gateway_toml());
        let voters = r.config_map_key(&format!("{}-bootstrap", fullname()), "initial-voters");
        check(
            &format!("{case}.initial-voters"),
            &format!("{}\n", voters.replace(',', "\n")),
        );
    }
}

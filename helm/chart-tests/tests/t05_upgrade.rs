//! Upgrades keep what the first install made: the Secrets (signing key,
//! tokens, TLS, supervisor credential), the public key derived from the
//! signing key, and the first install's voters; so an upgrade that scales
//! both tiers changes nothing but the replica counts and the gateway PDB.
//!
//! Offline, Helm's `lookup` finds nothing; these tests render a copy of the
//! chart whose `lookup` calls read the objects of a previous render from
//! the values instead (`chart_with_fake_lookup`), which is what `lookup`
//! returns in a cluster. Nothing is masked here.

use helm_chart_tests::*;
use serde_json::{json, Value};

fn key(o: &Value) -> String {
    format!(
        "{}/{}/{}",
        o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]
    )
}

/// - given: a first install at 3 gateways and 2 supervisors
/// - when: upgraded to 5 gateways and 3 supervisors (the cluster holding
///   the first install's Secrets and ConfigMaps)
/// - then: every Secret, the trusted grant keys, the bootstrap voters (still
///   3) and the gateway TOML are byte-identical; the only objects that
///   differ are the StatefulSet (spec.replicas), the Deployment
///   (spec.replicas) and the gateway PDB (minAvailable)
#[test]
fn upgrade_keeps_secrets_and_voters_and_changes_only_replicas() {
    let Some(tools) =
        tools("t05_upgrade upgrade_keeps_secrets_and_voters_and_changes_only_replicas")
    else {
        return;
    };
    let chart = chart_with_fake_lookup();
    let chart = chart.path().join("openshell-gateway");
    let first = json!({"gateway": {"replicas": 3}, "supervisor": {"replicas": 2}});
    let installed = tools.render_chart(
        &chart,
        lookup_values(
            &first,
            &Rendered {
                objects: vec![],
                notes: String::new(),
                lint: None,
            },
        ),
    );
    eprintln!("--- step: a re-render with the same values changes nothing");
    let again = tools.render_chart(&chart, lookup_values(&first, &installed));
    assert_eq!(again.objects, installed.objects);

    eprintln!("--- step: upgrade to 5 gateways, 3 supervisors");
    let upgraded = tools.render_chart(
        &chart,
        lookup_values(
            &json!({"gateway": {"replicas": 5}, "supervisor": {"replicas": 3}}),
            &installed,
        ),
    );
    assert_eq!(installed.objects.len(), upgraded.objects.len());
    let f = fullname();
    let mut changed = Vec::new();
    for (a, b) in installed.objects.iter().zip(&upgraded.objects) {
        assert_eq!(key(a), key(b));
        if a != b {
            changed.push(key(a));
        }
    }
    assert_eq!(
        changed,
        vec![
            format!("\"PodDisruptionBudget\"/\"{NAMESPACE}\"/\"{f}\""),
            format!("\"StatefulSet\"/\"{NAMESPACE}\"/\"{f}\""),
            format!("\"Deployment\"/\"{NAMESPACE}\"/\"{f}-supervisor\""),
        ]
    );
    let voters = upgraded.config_map_key(&format!("{f}-bootstrap"), "initial-voters");
    assert_eq!(voters.split(',').count(), 3, "{voters}");
    assert_eq!(upgraded.get("StatefulSet", &f)["spec"]["replicas"], 5);
    assert_eq!(
        upgraded.get("PodDisruptionBudget", &f)["spec"]["minAvailable"],
        3
    );
}

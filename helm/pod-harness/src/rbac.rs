//! Kubernetes RBAC over the release's own objects: a service account may do
//! what a Role (through a RoleBinding in the request's namespace) or a
//! ClusterRole (through a ClusterRoleBinding, or a RoleBinding in the
//! namespace) grants it, and nothing else.

use serde_json::Value;

use crate::manifest::Manifests;
use crate::token::TokenClaims;

/// Whether `who` may `verb` `resource` (of API `group`) named `name` in
/// namespace `ns` (empty for cluster-scoped resources).
pub fn allows(
    m: &Manifests,
    who: &TokenClaims,
    verb: &str,
    group: &str,
    resource: &str,
    ns: &str,
    name: Option<&str>,
) -> bool {
    let mut rules: Vec<&Value> = Vec::new();
    for (key, binding) in &m.others {
        let Some((kind, _)) = key.split_once('/') else {
            continue;
        };
        let cluster_binding = match kind {
            "RoleBinding" => false,
            "ClusterRoleBinding" => true,
            _ => continue,
        };
        let binding_ns = binding["metadata"]["namespace"]
            .as_str()
            .unwrap_or(&who.namespace);
        if !cluster_binding && binding_ns != ns {
            continue;
        }
        let names_me = binding["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| {
                s["kind"] == "ServiceAccount"
                    && s["name"] == who.service_account.as_str()
                    && s["namespace"].as_str().unwrap_or(binding_ns) == who.namespace
            });
        if !names_me {
            continue;
        }
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap_or_default();
        let role_name = binding["roleRef"]["name"].as_str().unwrap_or_default();
        if let Some(role) = m.others.get(&format!("{role_kind}/{role_name}")) {
            if role_kind == "Role"
                && role["metadata"]["namespace"].as_str().unwrap_or(binding_ns) != ns
            {
                continue;
            }
            rules.extend(role["rules"].as_array().into_iter().flatten());
        }
    }
    rules.iter().any(|r| {
        let has = |field: &str, want: &str| {
            r[field]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == "*" || x == want))
        };
        let named = match r["resourceNames"].as_array() {
            Some(names) if !names.is_empty() => name.is_some_and(|n| names.iter().any(|x| x == n)),
            _ => true,
        };
        has("apiGroups", group) && has("resources", resource) && has("verbs", verb) && named
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_grants_only_its_verbs_to_its_subjects() {
        let text = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: r, namespace: ns}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list]}
- {apiGroups: [apps], resources: [statefulsets], verbs: [get], resourceNames: [gw]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: b, namespace: ns}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: r}
subjects: [{kind: ServiceAccount, name: sa, namespace: ns}]
"#;
        let m = Manifests::parse(text).unwrap();
        let me = TokenClaims {
            namespace: "ns".into(),
            service_account: "sa".into(),
            pod: "p".into(),
            audiences: vec![],
        };
        let other = TokenClaims {
            service_account: "x".into(),
            ..me.clone()
        };
        assert!(allows(&m, &me, "list", "", "pods", "ns", None));
        assert!(!allows(&m, &me, "delete", "", "pods", "ns", Some("p")));
        assert!(!allows(&m, &me, "list", "", "pods", "other", None));
        assert!(!allows(&m, &other, "list", "", "pods", "ns", None));
        assert!(allows(
            &m,
            &me,
            "get",
            "apps",
            "statefulsets",
            "ns",
            Some("gw")
        ));
        assert!(!allows(
            &m,
            &me,
            "get",
            "apps",
            "statefulsets",
            "ns",
            Some("other")
        ));
    }
}

//! All replicas' final state machines are identical: after healing, the run
//! waits until every node applied the leader's commit index, then lists every
//! object on each node from its local state (`stale = true`) and compares.

use serde_json::json;

use crate::checker::verdict::{CheckResult, Checker, FinalState, Validity};
use crate::history::Event;

/// The replicas-identical checker.
pub struct ReplicasIdentical;

impl Checker for ReplicasIdentical {
    fn name(&self) -> &'static str {
        "replicas-identical"
    }

    fn check(&self, _history: &[Event], state: &FinalState) -> CheckResult {
        let failed: Vec<&str> = state
            .replicas
            .iter()
            .filter(|r| r.error.is_some())
            .map(|r| r.node.as_str())
            .collect();
        let Some(reference) = state.replicas.iter().find(|r| r.error.is_none()) else {
            return CheckResult {
                checker: self.name().into(),
                valid: Validity::Unknown,
                summary: "no replica could be read".into(),
                offending: Vec::new(),
                details: serde_json::to_value(state).unwrap_or_default(),
            };
        };
        let mut differences = Vec::new();
        for r in state.replicas.iter().filter(|r| r.error.is_none()) {
            if r.objects != reference.objects {
                let only_ref: Vec<_> = reference
                    .objects
                    .iter()
                    .filter(|o| !r.objects.contains(o))
                    .collect();
                let only_r: Vec<_> = r
                    .objects
                    .iter()
                    .filter(|o| !reference.objects.contains(o))
                    .collect();
                differences.push(json!({
                    "node": r.node, "reference": reference.node,
                    "only_on_reference": only_ref, "only_on_node": only_r,
                }));
            }
        }
        let valid = Validity::judge(!differences.is_empty(), !failed.is_empty());
        CheckResult {
            checker: self.name().into(),
            valid,
            summary: format!(
                "{} replicas at commit index {}: {} differ from {}, {} unreadable",
                state.replicas.len(),
                state.commit_index,
                differences.len(),
                reference.node,
                failed.len()
            ),
            offending: Vec::new(),
            details: json!({
                "differences": differences,
                "unreadable": failed,
                "applied": state.replicas.iter().map(|r| json!({"node": r.node, "applied_index": r.applied_index, "objects": r.objects.len(), "error": r.error})).collect::<Vec<_>>(),
            }),
        }
    }
}

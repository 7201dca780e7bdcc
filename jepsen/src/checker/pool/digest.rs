//! `replicas-identical-digest`: every replica's `StateDigest` crc32 agrees
//! at every applied index sampled on two or more replicas (see the module
//! doc of [`super`]).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use crate::checker::verdict::{CheckResult, Checker, FinalState, Validity};
use crate::history::Event;

/// All replicas' `StateDigest` agree at every common applied index.
pub struct DigestsIdentical;

impl Checker for DigestsIdentical {
    fn name(&self) -> &'static str {
        "replicas-identical-digest"
    }

    fn check(&self, _history: &[Event], state: &FinalState) -> CheckResult {
        let nodes: BTreeSet<&str> = state.digests.iter().map(|d| d.node.as_str()).collect();
        let mut at: BTreeMap<u64, BTreeMap<&str, u32>> = BTreeMap::new();
        let mut mismatches = Vec::new();
        for d in &state.digests {
            let m = at.entry(d.applied_index).or_default();
            if let Some(c) = m.get(d.node.as_str()) {
                if *c != d.crc32 {
                    mismatches.push(json!({"node": d.node, "applied_index": d.applied_index, "crc32": [c, d.crc32]}));
                }
            }
            m.insert(&d.node, d.crc32);
        }
        let mut compared = 0;
        let mut full = Vec::new();
        for (index, m) in &at {
            if m.len() < 2 {
                continue;
            }
            compared += 1;
            let crcs: BTreeSet<u32> = m.values().copied().collect();
            if crcs.len() > 1 {
                mismatches.push(json!({"applied_index": index, "crc32": m}));
            }
            if m.len() == nodes.len() {
                full.push(*index);
            }
        }
        let valid = Validity::judge(
            !mismatches.is_empty(),
            full.is_empty() || nodes.len() < state.replicas.len().max(1),
        );
        CheckResult {
            checker: self.name().into(),
            valid,
            summary: format!(
                "{} digests of {} replicas; {compared} applied indexes sampled on 2+ replicas, {} on all; {} mismatches",
                state.digests.len(),
                nodes.len(),
                full.len(),
                mismatches.len()
            ),
            offending: Vec::new(),
            details: json!({"mismatches": mismatches, "indexes_on_all": full, "samples": state.digests}),
        }
    }
}

//! Every acknowledged write is present (I7), checked on the final reads.
//!
//! After healing, the run reads every key once more, linearizably (`f` =
//! `read`, `final: true` in `value` is not needed: the events are the last
//! client ops of each key). Write values are unique per key, so the final
//! value names the one op that wrote it. The final state loses an
//! acknowledged write if
//!
//! * a write or cas was acknowledged and the final read is absent (`null`), or
//! * the op that wrote the final value had completed before some other
//!   acknowledged write/cas of the key was even invoked: that later op must be
//!   linearized after it, so its value (or a later one) should be there, or
//! * no op ever wrote the final value.
//!
//! This is a targeted subset of linearizability, with an explanation a
//! person can follow.

use std::collections::BTreeMap;

use serde_json::json;

use super::linear::{ops_by_key, Op, RegOp};
use crate::checker::verdict::{CheckResult, Checker, FinalState, Validity};
use crate::history::Event;

/// The acknowledged-writes checker.
pub struct AcknowledgedWrites {
    /// History indexes of the final reads' completions, per key.
    pub final_reads: BTreeMap<String, u64>,
}

fn written(op: &RegOp) -> Option<i64> {
    match op {
        RegOp::Write(v) => Some(*v),
        RegOp::Cas(_, n) => Some(*n),
        RegOp::Read(_) => None,
    }
}

impl Checker for AcknowledgedWrites {
    fn name(&self) -> &'static str {
        "acknowledged-writes"
    }

    fn check(&self, history: &[Event], _state: &FinalState) -> CheckResult {
        let by_key = match ops_by_key(history) {
            Ok(k) => k,
            Err(e) => return CheckResult::malformed_history(self.name(), e),
        };
        let mut problems = Vec::new();
        let mut offending = Vec::new();
        let mut missing_final = Vec::new();
        for (key, ops) in &by_key {
            let Some(final_index) = self.final_reads.get(key) else {
                if ops
                    .iter()
                    .any(|o| o.ret.is_some() && written(&o.op).is_some())
                {
                    missing_final.push(key.clone());
                }
                continue;
            };
            let Some(final_read) = ops.iter().find(|o| o.complete_index == Some(*final_index))
            else {
                missing_final.push(key.clone());
                continue;
            };
            let RegOp::Read(value) = final_read.op else {
                continue;
            };
            let acked: Vec<&Op> = ops
                .iter()
                .filter(|o| o.ret.is_some() && written(&o.op).is_some())
                .collect();
            match value {
                None => {
                    if let Some(first) = acked.first() {
                        problems.push(json!({"key": key, "final": null,
                            "problem": "acknowledged write missing: the register is absent",
                            "acknowledged": first.invoke_index}));
                        offending.extend([first.invoke_index, *final_index]);
                    }
                }
                Some(v) => {
                    let writer = ops.iter().find(|o| written(&o.op) == Some(v));
                    match writer {
                        None => {
                            problems.push(json!({"key": key, "final": v,
                                "problem": "final value was never written"}));
                            offending.push(*final_index);
                        }
                        Some(w) => {
                            let w_ret = w.ret.unwrap_or(u64::MAX);
                            if let Some(later) = acked.iter().find(|o| o.call > w_ret) {
                                problems.push(json!({"key": key, "final": v,
                                    "problem": "acknowledged write lost: a later acknowledged write was invoked after the final value's writer completed",
                                    "writer": w.invoke_index, "lost": later.invoke_index}));
                                offending.extend([
                                    w.invoke_index,
                                    later.invoke_index,
                                    *final_index,
                                ]);
                            }
                        }
                    }
                }
            }
        }
        let valid = Validity::judge(!problems.is_empty(), !missing_final.is_empty());
        CheckResult {
            checker: self.name().into(),
            valid,
            summary: format!(
                "{} keys: {} lost acknowledged writes, {} keys without a final read",
                by_key.len(),
                problems.len(),
                missing_final.len()
            ),
            offending,
            details: json!({"problems": problems, "keys_without_final_read": missing_final}),
        }
    }
}

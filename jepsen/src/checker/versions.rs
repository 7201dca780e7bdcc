//! One version per write (`one-version-per-write`): a `resource_version`
//! names exactly one write of its object.
//!
//! The register workload records, on every `ok` read (of a present
//! register), write and cas, the object's `resource_version` it read or its
//! write was given (the event's extra key `resource_version`). Write values
//! are unique across the run, so per key each version must name one value,
//! and no two acknowledged writes (write or cas) may report the same version.
//! A version shared by two writes is what lets a client compare-and-swap
//! over a write it never saw (the lost update `match_resource_version`
//! exists to prevent): this catches the cause directly, whether or not the
//! run happened to produce an anomaly the linearizability search can prove.
//!
//! Reads are held to the same rule: a read that returns value `Y` with the
//! version another op reported for `X` is a violation too (it catches a
//! shared version even when only one of the two writes was acknowledged).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::json;

use crate::checker::verdict::{CheckResult, Checker, FinalState, Validity};
use crate::history::{Event, OpType, Process};

/// The `one-version-per-write` checker.
pub struct OneVersionPerWrite;

/// What one (key, version) was reported with.
#[derive(Debug, Default)]
struct Reports {
    /// Values read or written under it.
    values: BTreeSet<i64>,
    /// `ok` write/cas completions that reported it.
    writes: Vec<u64>,
    /// Every `ok` completion that reported it.
    events: Vec<u64>,
}

/// One version reported for more than one write.
#[derive(Clone, Debug, Serialize)]
pub struct Shared {
    /// The register.
    pub key: String,
    /// The version.
    pub resource_version: u64,
    /// The distinct values read or written under it.
    pub values: Vec<i64>,
    /// Acknowledged writes (write or cas) that were given it.
    pub writes: usize,
    /// History indexes of every `ok` op that reported it.
    pub events: Vec<u64>,
}

/// The value an `ok` register op read or wrote; `None` for other events.
fn observed(e: &Event) -> Option<Result<i64, String>> {
    if e.kind != OpType::Ok || !matches!(e.process, Process::Client(_)) {
        return None;
    }
    let value = match e.f.as_str() {
        "read" | "write" => e.value.as_i64(),
        "cas" => e.value.get(1).and_then(serde_json::Value::as_i64),
        _ => return None,
    };
    Some(value.ok_or_else(|| format!("event {}: bad value for {}: {}", e.index, e.f, e.value)))
}

/// Every (key, version) reported for more than one write, and how many
/// (key, version) pairs were reported at all.
///
/// # Errors
/// An `ok` register op with a version but a malformed value or no key.
pub fn shared_versions(history: &[Event]) -> Result<(Vec<Shared>, usize), String> {
    let mut by_version: BTreeMap<(&str, u64), Reports> = BTreeMap::new();
    for e in history {
        let Some(version) = e.resource_version else {
            continue;
        };
        let Some(value) = observed(e) else {
            continue;
        };
        let value = value?;
        let key = e
            .key
            .as_deref()
            .ok_or_else(|| format!("event {}: register op without a key", e.index))?;
        let reports = by_version.entry((key, version)).or_default();
        reports.values.insert(value);
        reports.events.push(e.index);
        if e.f != "read" {
            reports.writes.push(e.index);
        }
    }
    let checked = by_version.len();
    let shared = by_version
        .into_iter()
        .filter(|(_, r)| r.values.len() > 1 || r.writes.len() > 1)
        .map(|((key, resource_version), r)| Shared {
            key: key.to_string(),
            resource_version,
            values: r.values.into_iter().collect(),
            writes: r.writes.len(),
            events: r.events,
        })
        .collect();
    Ok((shared, checked))
}

impl Checker for OneVersionPerWrite {
    fn name(&self) -> &'static str {
        "one-version-per-write"
    }

    fn check(&self, history: &[Event], _state: &FinalState) -> CheckResult {
        let (shared, checked) = match shared_versions(history) {
            Ok(r) => r,
            Err(e) => return CheckResult::malformed_history(self.name(), e),
        };
        let acknowledged_writes = history
            .iter()
            .filter(|e| e.kind == OpType::Ok && matches!(e.f.as_str(), "write" | "cas"))
            .count();
        // A register history whose writes carry no version (written before
        // versions were recorded) cannot be judged.
        let undecided = checked == 0 && acknowledged_writes > 0;
        let mut offending: Vec<u64> = shared.iter().flat_map(|s| s.events.clone()).collect();
        offending.sort_unstable();
        offending.dedup();
        let summary = if undecided {
            format!("{acknowledged_writes} acknowledged writes, none recorded a resource_version")
        } else {
            format!(
                "{checked} (key, resource_version) pairs: {} named more than one write",
                shared.len()
            )
        };
        CheckResult {
            checker: self.name().into(),
            valid: Validity::judge(!shared.is_empty(), undecided),
            summary,
            offending,
            details: json!({ "shared": shared }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use OpType::{Fail, Invoke, Ok as Okk};

    /// A hand-written history of key `r`: (process, type, f, value,
    /// resource_version).
    fn history(lines: &[(u64, OpType, &str, serde_json::Value, Option<u64>)]) -> Vec<Event> {
        lines
            .iter()
            .enumerate()
            .map(|(i, (p, t, f, v, rv))| Event {
                index: i as u64,
                kind: *t,
                process: Process::Client(*p),
                f: f.to_string(),
                key: Some("r".into()),
                value: v.clone(),
                time: i as u64 * 10,
                node: None,
                error: None,
                resource_version: *rv,
            })
            .collect()
    }

    fn check(lines: &[(u64, OpType, &str, serde_json::Value, Option<u64>)]) -> CheckResult {
        OneVersionPerWrite.check(&history(lines), &FinalState::default())
    }

    #[test]
    fn every_write_with_its_own_version_is_valid() {
        let r = check(&[
            (0, Invoke, "write", json!(1), None),
            (1, Invoke, "write", json!(2), None),
            (0, Okk, "write", json!(1), Some(7)),
            (1, Okk, "write", json!(2), Some(8)),
            (2, Invoke, "read", json!(null), None),
            (2, Okk, "read", json!(2), Some(8)),
            (0, Invoke, "cas", json!([1, 3]), None),
            (0, Fail, "cas", json!([1, 3]), None),
            (1, Invoke, "cas", json!([2, 4]), None),
            (1, Okk, "cas", json!([2, 4]), Some(9)),
            (2, Invoke, "read", json!(null), None),
            (2, Okk, "read", json!(4), Some(9)),
        ]);
        assert_eq!(r.valid, Validity::Valid, "{}", r.summary);
        assert!(r.offending.is_empty());
    }

    #[test]
    fn two_acknowledged_writes_with_one_version_are_invalid() {
        // Writes 1 and 2 batched into one raft entry, both told version 7.
        let r = check(&[
            (0, Invoke, "write", json!(1), None),
            (1, Invoke, "write", json!(2), None),
            (0, Okk, "write", json!(1), Some(7)),
            (1, Okk, "write", json!(2), Some(7)),
        ]);
        assert_eq!(r.valid, Validity::Invalid, "{}", r.summary);
        assert_eq!(r.offending, vec![2, 3]);
        assert_eq!(r.details["shared"][0]["resource_version"], json!(7));
        assert_eq!(r.details["shared"][0]["values"], json!([1, 2]));
    }

    #[test]
    fn a_read_of_another_value_under_a_writes_version_is_invalid() {
        // Write 2 was never acknowledged, but a read saw it under the version
        // write 1 was given.
        let r = check(&[
            (0, Invoke, "write", json!(1), None),
            (1, Invoke, "write", json!(2), None),
            (0, Okk, "write", json!(1), Some(7)),
            (2, Invoke, "read", json!(null), None),
            (2, Okk, "read", json!(2), Some(7)),
        ]);
        assert_eq!(r.valid, Validity::Invalid, "{}", r.summary);
        assert_eq!(r.offending, vec![2, 4]);
    }

    #[test]
    fn a_cas_given_the_version_of_an_earlier_write_is_invalid() {
        let r = check(&[
            (0, Invoke, "write", json!(1), None),
            (0, Okk, "write", json!(1), Some(7)),
            (0, Invoke, "cas", json!([1, 5]), None),
            (0, Okk, "cas", json!([1, 5]), Some(7)),
        ]);
        assert_eq!(r.valid, Validity::Invalid, "{}", r.summary);
    }

    #[test]
    fn a_history_without_versions_is_undecided() {
        let r = check(&[
            (0, Invoke, "write", json!(1), None),
            (0, Okk, "write", json!(1), None),
        ]);
        assert_eq!(r.valid, Validity::Unknown, "{}", r.summary);
        // No register writes at all (e.g. a pool history): nothing to judge.
        let r = check(&[]);
        assert_eq!(r.valid, Validity::Valid, "{}", r.summary);
    }

    #[test]
    fn a_malformed_value_is_undecided_naming_the_event() {
        let r = check(&[
            (0, Invoke, "cas", json!([1, 2]), None),
            (0, Okk, "cas", json!("two"), Some(3)),
        ]);
        assert_eq!(r.valid, Validity::Unknown);
        assert!(r.summary.contains("event 1"), "{}", r.summary);
    }
}

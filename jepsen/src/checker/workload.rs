//! `workload-continuity`: the promise the pool exists for. A sandbox's
//! workload (its runtime process and the agent in it) survives every
//! crash, pause, drain and takeover of the supervisors watching it, and a
//! takeover never starts a second one.
//!
//! With process members ([`crate::workload::members`]) the observed status
//! a supervisor reports is the runtime's workload,
//! `{"state", "pid", "started_at_unix_ms"}`. Over every linearizable view
//! in the history:
//!
//! * every observed status of one sandbox generation names the same
//!   `(pid, started_at_unix_ms)`: the workload was never restarted or
//!   replaced, whoever owned it;
//! * each sandbox had at most one runtime started per generation observed
//!   (counted from the runtimes' logs after the run);
//! * no supervisor process exited by itself.
//!
//! A run in which no workload status was ever observed is `unknown`: the
//! check would be vacuous.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::pool::observations;
use super::{CheckResult, Checker, FinalState, Validity};
use crate::history::Event;

/// The checker; built by the pool workload after its final reads.
pub struct WorkloadContinuity {
    /// Sandbox id -> runtimes started for it.
    pub runtime_starts: BTreeMap<String, usize>,
    /// Supervisor processes that exited by themselves.
    pub exits: Vec<String>,
}

/// `(pid, started_at_unix_ms)` of an observed status, when it is a
/// workload report with a process.
fn workload_of(observed: &str) -> Option<(u64, u64)> {
    let v: Value = serde_json::from_str(observed).ok()?;
    let pid = v.get("pid")?.as_u64()?;
    let started = v.get("started_at_unix_ms")?.as_u64()?;
    (pid != 0).then_some((pid, started))
}

impl Checker for WorkloadContinuity {
    fn name(&self) -> &'static str {
        "workload-continuity"
    }

    fn check(&self, history: &[Event], _state: &FinalState) -> CheckResult {
        // (sandbox, generation) -> workload -> first event showing it.
        let mut seen: BTreeMap<(String, u64), BTreeMap<(u64, u64), u64>> = BTreeMap::new();
        let mut generations: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
        let mut statuses = 0usize;
        for o in observations(history).iter().filter(|o| o.linear) {
            generations
                .entry(o.sandbox.clone())
                .or_default()
                .insert(o.generation);
            let Some(w) = o.observed.as_deref().and_then(workload_of) else {
                continue;
            };
            statuses += 1;
            seen.entry((o.sandbox.clone(), o.generation))
                .or_default()
                .entry(w)
                .or_insert(o.i_done);
        }
        let mut violations: Vec<(String, Vec<u64>)> = Vec::new();
        for ((sandbox, generation), workloads) in &seen {
            if workloads.len() > 1 {
                let list: Vec<String> = workloads
                    .iter()
                    .map(|((pid, at), i)| format!("pid {pid} started {at} (event {i})"))
                    .collect();
                violations.push((
                    format!(
                        "{sandbox} gen {generation}: the workload changed: {}",
                        list.join(", ")
                    ),
                    workloads.values().copied().collect(),
                ));
            }
        }
        for (sandbox, starts) in &self.runtime_starts {
            let allowed = generations.get(sandbox).map_or(1, BTreeSet::len).max(1);
            if *starts > allowed {
                violations.push((
                    format!(
                        "{sandbox}: {starts} runtimes started for {allowed} generation(s) (runtimes/{sandbox}.log)"
                    ),
                    Vec::new(),
                ));
            }
        }
        for exit in &self.exits {
            violations.push((format!("supervisor {exit}"), Vec::new()));
        }
        let undecided = statuses == 0;
        let valid = Validity::judge(!violations.is_empty(), undecided);
        let mut offending: Vec<u64> = violations.iter().flat_map(|v| v.1.clone()).collect();
        offending.sort_unstable();
        offending.dedup();
        CheckResult {
            checker: self.name().into(),
            valid,
            summary: format!(
                "{} violations; {statuses} workload statuses observed over {} sandbox generations; {} runtimes started for {} sandboxes; {} supervisor exits{}",
                violations.len(),
                seen.len(),
                self.runtime_starts.values().sum::<usize>(),
                self.runtime_starts.len(),
                self.exits.len(),
                if undecided { " (no workload status observed: nothing to check)" } else { "" }
            ),
            offending,
            details: json!({
                "violations": violations.iter().take(100).map(|(what, events)| json!({"what": what, "events": events})).collect::<Vec<_>>(),
                "violations_total": violations.len(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{EventSpec, OpType, Process, Recorder};

    /// A `get` of sb1 whose view names `owner` at `term` with observed
    /// status `observed`; returns the completion's index.
    fn get(r: &Recorder, owner: &str, term: u64, observed: &str) -> u64 {
        let spec = |kind, value| EventSpec {
            kind,
            process: Process::Client(1),
            f: "get".into(),
            key: Some("sb1".into()),
            value,
            node: Some("n1".into()),
            error: None,
        };
        r.record(spec(OpType::Invoke, json!({"sandbox": "sb1"})));
        r.record(spec(
            OpType::Ok,
            json!({"sandbox": "sb1", "generation": 1, "phase": "assigned", "owner": owner,
                   "incarnation": 1, "term": term, "epoch": term, "acknowledged": true,
                   "observed": observed}),
        ))
        .index
    }

    fn workload(pid: u64, started: u64) -> String {
        json!({"state": "running", "pid": pid, "started_at_unix_ms": started}).to_string()
    }

    fn check(r: &Recorder, starts: usize, exits: Vec<String>) -> CheckResult {
        WorkloadContinuity {
            runtime_starts: [("sb1".to_string(), starts)].into(),
            exits,
        }
        .check(&r.snapshot(), &FinalState::default())
    }

    #[test]
    fn the_same_workload_under_every_owner_is_valid() {
        let r = Recorder::new(None).unwrap_or_else(|e| panic!("{e}"));
        get(&r, "s1", 1, "pending");
        get(&r, "s1", 1, &workload(42, 1000));
        get(&r, "s2", 2, &workload(42, 1000));
        let result = check(&r, 1, Vec::new());
        assert_eq!(result.valid, Validity::Valid, "{}", result.summary);
    }

    #[test]
    fn a_restarted_workload_is_a_violation_naming_both_views() {
        let r = Recorder::new(None).unwrap_or_else(|e| panic!("{e}"));
        let first = get(&r, "s1", 1, &workload(42, 1000));
        let second = get(&r, "s2", 2, &workload(77, 2000));
        let result = check(&r, 1, Vec::new());
        assert_eq!(result.valid, Validity::Invalid);
        assert_eq!(result.offending, vec![first, second]);
    }

    #[test]
    fn a_second_runtime_or_a_supervisor_exit_is_a_violation() {
        let r = Recorder::new(None).unwrap_or_else(|e| panic!("{e}"));
        get(&r, "s1", 1, &workload(42, 1000));
        assert_eq!(check(&r, 2, Vec::new()).valid, Validity::Invalid);
        let exit = vec!["s3 (pid 9) exited by itself; see s3.log".to_string()];
        assert_eq!(check(&r, 1, exit).valid, Validity::Invalid);
    }

    #[test]
    fn no_workload_status_at_all_is_unknown() {
        let r = Recorder::new(None).unwrap_or_else(|e| panic!("{e}"));
        get(&r, "s1", 1, "pending");
        assert_eq!(check(&r, 0, Vec::new()).valid, Validity::Unknown);
    }
}

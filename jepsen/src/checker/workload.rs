//! `workload-continuity`: the promise the pool exists for. A sandbox's
//! workload (its runtime process and the agent in it) survives every
//! crash, pause, drain and takeover of the supervisors watching it, and a
//! takeover never starts a second one.
//!
//! With process members ([`crate::members::process`]) the observed status
//! a supervisor reports is the runtime's workload,
//! `{"state", "pid", "started_at_unix_ms"}`. Over every linearizable view
//! in the history:
//!
//! * every observed status of one sandbox generation names the same
//!   `(pid, started_at_unix_ms)`: the workload was never restarted or
//!   replaced, whoever owned it;
//! * each sandbox had at most one runtime started per generation observed
//!   (counted from the runtimes' logs after the run);
//! * the grants the runtimes accepted (their `activated` log lines, in
//!   order) never go back to an older epoch, name one owner per epoch, and
//!   agree with the log: a grant accepted for term t names the member,
//!   incarnation and epoch every linearizable view shows for term t (the
//!   runtime side of I1 and I2);
//! * no supervisor process exited by itself.
//!
//! A run in which no workload status was ever observed is `unknown`: the
//! check would be vacuous.

use std::collections::{BTreeMap, BTreeSet};

use super::pool::observations;
use crate::checker::verdict::{CheckResult, Checker, FinalState};
use crate::history::Event;
use crate::members::runtime_log::RuntimeLog;

/// The checker; built by the pool workload after its final reads.
pub struct WorkloadContinuity {
    /// Sandbox id -> what its runtimes logged.
    pub runtimes: BTreeMap<String, RuntimeLog>,
    /// Supervisor processes that exited by themselves.
    pub exits: Vec<String>,
}

/// `(member, incarnation, epoch)` of one term's owner.
type Owner = (String, u64, u64);

/// `(pid, started_at_unix_ms)` of an observed status, when it is a
/// workload report with a process.
fn workload_of(observed: &str) -> Option<(u64, u64)> {
    // Not every observed status is a workload report (`pending`, a
    // scripted member's `r:...`): those are no workload, not an error.
    let w: WorkloadStatus = serde_json::from_str(observed).ok()?;
    (w.pid != 0).then_some((w.pid, w.started_at_unix_ms))
}

/// The part of a runtime's workload report this check reads.
#[derive(serde::Deserialize)]
struct WorkloadStatus {
    pid: u64,
    started_at_unix_ms: u64,
}

/// The grants one sandbox's runtimes accepted, in log order: never an older
/// epoch, one owner per epoch, and (where the id had one generation) the
/// owner the log's views show for that term. Returns how many there were.
fn check_activations(
    sandbox: &str,
    log: &RuntimeLog,
    gens: usize,
    views: &[u64],
    owners: &BTreeMap<(String, u64), BTreeMap<Owner, u64>>,
    violations: &mut Vec<(String, Vec<u64>)>,
) -> usize {
    let mut accepted = 0usize;
    let mut last: Option<&crate::members::runtime_log::Activation> = None;
    for a in &log.activations {
        accepted += 1;
        if let Some(prev) = last {
            let same_epoch_other_owner = a.credential_epoch == prev.credential_epoch
                && (a.member != prev.member
                    || a.incarnation != prev.incarnation
                    || a.term != prev.term);
            if a.credential_epoch < prev.credential_epoch || same_epoch_other_owner {
                violations.push((
                    format!(
                        "{sandbox}: runtime accepted {}#{} term {} epoch {} after {}#{} term {} epoch {} (runtime-logs/{sandbox}: its runtimes' logs)",
                        a.member, a.incarnation, a.term, a.credential_epoch,
                        prev.member, prev.incarnation, prev.term, prev.credential_epoch
                    ),
                    views.to_vec(),
                ));
            }
        }
        last = Some(a);
        // Cross-check with the log only where the id had one
        // generation (terms restart with a new generation).
        if gens > 1 {
            continue;
        }
        let Some(seen) = owners.get(&(sandbox.to_string(), a.term)) else {
            continue;
        };
        let mine = (a.member.clone(), a.incarnation, a.credential_epoch);
        if seen.keys().any(|k| *k != mine) {
            violations.push((
                format!(
                    "{sandbox} term {}: runtime accepted a grant for {}#{} epoch {}, the log's views show {:?}",
                    a.term, a.member, a.incarnation, a.credential_epoch,
                    seen.keys().collect::<Vec<_>>()
                ),
                seen.values().copied().collect(),
            ));
        }
    }
    accepted
}

impl Checker for WorkloadContinuity {
    fn name(&self) -> &'static str {
        "workload-continuity"
    }

    fn check(&self, history: &[Event], _state: &FinalState) -> CheckResult {
        // (sandbox, generation) -> workload -> first event showing it.
        let mut seen: BTreeMap<(String, u64), BTreeMap<(u64, u64), u64>> = BTreeMap::new();
        let mut generations: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
        // (sandbox, term) -> (member, incarnation, epoch) -> first event.
        let mut owners: BTreeMap<(String, u64), BTreeMap<Owner, u64>> = BTreeMap::new();
        // sandbox -> (first, last) linearizable view events, to point the
        // report at a sandbox whose runtimes misbehaved.
        let mut span: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        let mut statuses = 0usize;
        let observations = match observations(history) {
            Ok(o) => o,
            Err(e) => return super::pool::malformed(self.name(), &e),
        };
        for o in observations.iter().filter(|o| o.linear) {
            generations
                .entry(o.sandbox.clone())
                .or_default()
                .insert(o.generation);
            let e = span
                .entry(o.sandbox.clone())
                .or_insert((o.i_done, o.i_done));
            e.0 = e.0.min(o.i_done);
            e.1 = e.1.max(o.i_done);
            owners
                .entry((o.sandbox.clone(), o.term))
                .or_default()
                .entry((o.member.clone(), o.incarnation, o.credential_epoch))
                .or_insert(o.i_done);
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
        let mut accepted = 0usize;
        for (sandbox, log) in &self.runtimes {
            let gens = generations.get(sandbox).map_or(1, BTreeSet::len).max(1);
            let views: Vec<u64> = span
                .get(sandbox)
                .map(|(a, b)| if a == b { vec![*a] } else { vec![*a, *b] })
                .unwrap_or_default();
            if log.starts > gens {
                violations.push((
                    format!(
                        "{sandbox}: {} runtimes started for {gens} generation(s) (runtime-logs/, spec.json sandbox_id {sandbox}; events: its first and last view)",
                        log.starts
                    ),
                    views.clone(),
                ));
            }
            accepted += check_activations(sandbox, log, gens, &views, &owners, &mut violations);
        }
        for exit in &self.exits {
            violations.push((format!("supervisor {exit}"), Vec::new()));
        }
        let undecided = statuses == 0;
        let summary = format!(
            "{} violations; {statuses} workload statuses observed over {} sandbox generations; {} runtimes started for {} sandboxes, {accepted} grants accepted; {} supervisor exits{}",
            violations.len(),
            seen.len(),
            self.runtimes.values().map(|l| l.starts).sum::<usize>(),
            self.runtimes.len(),
            self.exits.len(),
            if undecided { " (no workload status observed: nothing to check)" } else { "" }
        );
        CheckResult::of_violations(self.name(), &violations, undecided, summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::verdict::Validity;
    use crate::history::{EventSpec, OpType, Process, Recorder};
    use crate::members::runtime_log::Activation;
    use serde_json::json;

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
                   "incarnation": 1, "term": term, "credential_epoch": term, "acknowledged": true,
                   "observed": observed}),
        ))
        .index
    }

    fn workload(pid: u64, started: u64) -> String {
        json!({"state": "running", "pid": pid, "started_at_unix_ms": started}).to_string()
    }

    fn check(r: &Recorder, starts: usize, exits: Vec<String>) -> CheckResult {
        let log = RuntimeLog {
            starts,
            activations: Vec::new(),
            ended_running: Vec::new(),
        };
        check_with(r, log, exits)
    }

    fn check_with(r: &Recorder, log: RuntimeLog, exits: Vec<String>) -> CheckResult {
        WorkloadContinuity {
            runtimes: [("sb1".to_string(), log)].into(),
            exits,
        }
        .check(&r.snapshot(), &FinalState::default())
    }

    fn accepted(member: &str, term: u64, epoch: u64) -> Activation {
        Activation {
            member: member.into(),
            incarnation: 1,
            term,
            credential_epoch: epoch,
        }
    }

    #[test]
    fn grants_accepted_in_epoch_order_from_the_logs_owners_are_valid() {
        let r = Recorder::new(None).unwrap_or_else(|e| panic!("{e}"));
        get(&r, "s1", 1, &workload(42, 1000));
        get(&r, "s2", 2, &workload(42, 1000));
        let log = RuntimeLog {
            starts: 1,
            activations: vec![accepted("s1", 1, 1), accepted("s2", 2, 2)],
            ended_running: Vec::new(),
        };
        let result = check_with(&r, log, Vec::new());
        assert_eq!(result.valid, Validity::Valid, "{}", result.summary);
    }

    #[test]
    fn an_older_epoch_or_a_grant_the_log_never_gave_is_a_violation() {
        let r = Recorder::new(None).unwrap_or_else(|e| panic!("{e}"));
        let view = get(&r, "s2", 2, &workload(42, 1000));
        let back = RuntimeLog {
            starts: 1,
            activations: vec![accepted("s2", 2, 2), accepted("s1", 1, 1)],
            ended_running: Vec::new(),
        };
        assert_eq!(check_with(&r, back, Vec::new()).valid, Validity::Invalid);
        let forged = RuntimeLog {
            starts: 1,
            activations: vec![accepted("s3", 2, 2)],
            ended_running: Vec::new(),
        };
        let result = check_with(&r, forged, Vec::new());
        assert_eq!(result.valid, Validity::Invalid);
        assert_eq!(result.offending, vec![view]);
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
        let view = get(&r, "s1", 1, &workload(42, 1000));
        let twice = check(&r, 2, Vec::new());
        assert_eq!(twice.valid, Validity::Invalid);
        assert_eq!(
            twice.offending,
            vec![view],
            "the report points at the sandbox"
        );
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

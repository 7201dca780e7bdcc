//! `healthy-workloads-kept`: the control plane never ends a healthy
//! workload that nobody asked to end.
//!
//! The pool exists so that a workload survives whatever happens to the
//! supervisors and gateways around it. A workload may end because a client
//! deleted its sandbox, because it exited by itself, or because nobody
//! supervised it before its recovery deadline. It must never end because
//! the control plane failed its sandbox on a wrong observation (issue 27:
//! a deposed leader's launcher compared a stale list of runtimes with its
//! successor's state and failed a sandbox as `RuntimeLost`; the owner then
//! released the runtime and the new leader deleted it), nor because a
//! launcher deleted a runtime a live sandbox owned.
//!
//! From the runtimes' own logs ([`crate::members::runtime_log`]): every
//! time a runtime's workload was ended from outside while it was running
//! (a release grant, or the driver's delete) is a violation unless a client
//! had invoked a `delete` of that sandbox before then (sandbox ids are
//! never reused, so the id names the one generation). "Before" compares the
//! runtime log's timestamp with the history's clock mapped onto the same
//! machine's wall clock ([`crate::history::Recorder::started_at`]), with
//! [`SLACK`] in the client's favour. The pool workload deletes nearly every
//! sandbox sooner or later, so "a client deleted it at some time" would
//! excuse almost every kill. Without the mapping (a kept run from before
//! `history-started.txt` existed) any client delete excuses. The report
//! names the sandbox, how and when its workload was ended, and the phases
//! the linearizable views showed.
//!
//! Process members only (scripted members start no runtimes). A run in
//! which no runtime log was read is `unknown`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::pool::observations;
use crate::checker::verdict::{CheckResult, Checker, FinalState};
use crate::history::{Event, OpType, Process};
use crate::members::runtime_log::RuntimeLog;

/// How much later than a workload's end a client's `delete` invoke may be
/// recorded and still excuse it: the two clocks are one machine's, read by
/// different processes, so only scheduling separates them.
pub const SLACK: Duration = Duration::from_millis(50);

/// The checker; built by the pool workload after its final reads.
pub struct HealthyWorkloadsKept {
    /// Sandbox id -> what its runtimes logged.
    pub runtimes: BTreeMap<String, RuntimeLog>,
    /// The wall-clock time of history time 0
    /// ([`crate::history::Recorder::started_at`]); None: any client delete
    /// excuses, whenever it came.
    pub history_started_at: Option<SystemTime>,
}

impl HealthyWorkloadsKept {
    /// History time (ns) of a runtime log's timestamp; None when it does not
    /// parse or there is no mapping. A time before the history began is 0.
    fn history_time(&self, logged: &str) -> Option<u64> {
        let started = self.history_started_at?;
        let at: SystemTime = chrono::DateTime::parse_from_rfc3339(logged).ok()?.into();
        let since = at.duration_since(started).unwrap_or_default();
        Some(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
    }
}

impl Checker for HealthyWorkloadsKept {
    fn name(&self) -> &'static str {
        "healthy-workloads-kept"
    }

    fn check(&self, history: &[Event], _state: &FinalState) -> CheckResult {
        // Sandboxes a client asked to delete (any delete invoke: one whose
        // outcome is unknown may have applied) -> when it first asked.
        let mut deleted: BTreeMap<&str, u64> = BTreeMap::new();
        for e in history.iter().filter(|e| {
            e.kind == OpType::Invoke && matches!(e.process, Process::Client(_)) && e.f == "delete"
        }) {
            if let Some(sandbox) = e.key.as_deref() {
                let first = deleted.entry(sandbox).or_insert(e.time);
                *first = (*first).min(e.time);
            }
        }
        let slack = u64::try_from(SLACK.as_nanos()).unwrap_or(u64::MAX);
        let observations = match observations(history) {
            Ok(o) => o,
            Err(e) => return super::pool::malformed(self.name(), &e),
        };
        // Sandbox -> phase -> first linearizable view showing it.
        let mut phases: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
        for o in observations.iter().filter(|o| o.linear) {
            phases
                .entry(o.sandbox.as_str())
                .or_default()
                .entry(o.phase.as_str())
                .or_insert(o.i_done);
        }
        let mut violations: Vec<(String, Vec<u64>)> = Vec::new();
        let mut ended = 0usize;
        for (sandbox, log) in &self.runtimes {
            for end in &log.ended_running {
                ended += 1;
                let asked = deleted.get(sandbox.as_str()).copied();
                let excused = match (asked, self.history_time(&end.at)) {
                    (None, _) => false,
                    (Some(_), None) => true,
                    (Some(asked), Some(at)) => asked <= at.saturating_add(slack),
                };
                if excused {
                    continue;
                }
                let later = asked
                    .map(|t| {
                        format!(
                            " (its first delete came {:.2} s into the run, later)",
                            t as f64 / 1e9
                        )
                    })
                    .unwrap_or_default();
                let seen = phases.get(sandbox.as_str());
                let shown: Vec<String> = seen
                    .map(|p| {
                        p.iter()
                            .map(|(phase, i)| format!("{phase} (event {i})"))
                            .collect()
                    })
                    .unwrap_or_default();
                violations.push((
                    format!(
                        "{sandbox} gen {}: its running workload was {} at {} (runtime-logs/) and no client deleted it before then{later}; the views showed {}",
                        end.generation,
                        end.how,
                        end.at,
                        if shown.is_empty() { "nothing".to_string() } else { shown.join(", ") }
                    ),
                    seen.map(|p| p.values().copied().collect()).unwrap_or_default(),
                ));
            }
        }
        let undecided = self.runtimes.is_empty();
        let summary = format!(
            "{} violations; {} runtimes' logs read, {ended} workloads ended from outside while running, {} sandboxes deleted by clients{}",
            violations.len(),
            self.runtimes.len(),
            deleted.len(),
            if undecided { " (no runtime log: nothing to check)" } else { "" }
        );
        CheckResult::of_violations(self.name(), &violations, undecided, summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::verdict::Validity;
    use crate::history::{EventSpec, Recorder};
    use crate::members::runtime_log::parse_runtime_log;
    use serde_json::json;

    /// The runtime log of issue 27's sb992 (run 1): started, activated,
    /// released while running, then deleted by the driver.
    const KILLED: &str = "\
2026-12-03T15:38:05.831767Z  INFO supervisor::runtime: workload started sandbox=sb1 pid=8798 started_at_unix_ms=1796312284950
2026-12-03T15:38:05.834556Z  INFO supervisor::runtime: serving SandboxRuntime sandbox=sb1 addr=10.211.2.200:33001 tls=true
2026-12-03T15:38:06.307648Z  INFO Activate{sandbox=sb1}: supervisor::runtime::service: activated member=s1 incarnation=4 term=1 credential_epoch=1
2026-12-03T15:38:08.431004Z  INFO Release{sandbox=sb1}: supervisor::runtime::service: released: stopping the workload credential_epoch=1 member=s1
2026-12-03T15:38:08.432226Z  INFO supervisor::runtime::service: workload stopped sandbox=sb1 pid=8798 exit=workload exited: signal: 15 (SIGTERM) stop_reason=released
2026-12-03T15:38:08.781373Z  INFO supervisor::runtime: shutdown requested sandbox=sb1
";

    /// A workload that exited by itself, then was released and deleted
    /// (a sandbox failed as `RuntimeLost` for a real reason).
    const EXITED: &str = "\
2026-12-03T15:38:05.831767Z  INFO supervisor::runtime: workload started sandbox=sb1 pid=8798 started_at_unix_ms=1796312284950
2026-12-03T15:38:05.834556Z  INFO supervisor::runtime: serving SandboxRuntime sandbox=sb1 addr=10.211.2.200:33001 tls=true
2026-12-03T15:38:07.432226Z  INFO supervisor::runtime::service: workload stopped sandbox=sb1 pid=8798 exit=workload exited: exit status: 7 stop_reason=workload exited: exit status: 7
2026-12-03T15:38:08.431004Z  INFO Release{sandbox=sb1}: supervisor::runtime::service: released: stopping the workload credential_epoch=1 member=s1
2026-12-03T15:38:08.781373Z  INFO supervisor::runtime: shutdown requested sandbox=sb1
";

    fn record(r: &Recorder, kind: OpType, f: &str, value: serde_json::Value) -> u64 {
        r.record(EventSpec {
            kind,
            process: Process::Client(1),
            f: f.into(),
            key: Some("sb1".into()),
            value,
            node: Some("n1".into()),
            error: None,
        })
        .index
    }

    /// A linearizable `get` of sb1 showing `phase`; returns its index.
    fn get(r: &Recorder, phase: &str) -> u64 {
        record(r, OpType::Invoke, "get", json!({"sandbox": "sb1"}));
        record(
            r,
            OpType::Ok,
            "get",
            json!({"sandbox": "sb1", "generation": 1, "phase": phase, "owner": "s1",
                   "incarnation": 4, "term": 1, "credential_epoch": 1, "acknowledged": true,
                   "observed": ""}),
        )
    }

    fn check(r: &Recorder, log: &str) -> CheckResult {
        HealthyWorkloadsKept {
            runtimes: [("sb1".to_string(), parse_runtime_log(log))].into(),
            history_started_at: None,
        }
        .check(&r.snapshot(), &FinalState::default())
    }

    /// - given: the runtime log of issue 27's failed sandbox, and views
    ///   showing it assigned then failed, with no client delete
    /// - then: invalid, pointing at both views
    #[test]
    fn a_running_workload_ended_without_a_client_delete_is_a_violation() {
        let r = Recorder::new(None).unwrap_or_else(|e| panic!("{e}"));
        let assigned = get(&r, "assigned");
        let failed = get(&r, "failed");
        let result = check(&r, KILLED);
        assert_eq!(result.valid, Validity::Invalid, "{}", result.summary);
        assert_eq!(result.offending, vec![assigned, failed]);
        let what = result.details["violations"][0]["what"]
            .as_str()
            .unwrap_or_default();
        assert!(
            what.contains("released at 2026-12-03T15:38:08.431004Z"),
            "{what}"
        );
    }

    /// - given: the same log, but a client deleted sb1 (its outcome even
    ///   unknown); or a workload that exited by itself before the release
    /// - then: valid
    #[test]
    fn a_client_delete_or_a_workload_that_ended_by_itself_is_valid() {
        let r = Recorder::new(None).unwrap_or_else(|e| panic!("{e}"));
        get(&r, "assigned");
        record(&r, OpType::Invoke, "delete", json!({"sandbox": "sb1"}));
        record(&r, OpType::Info, "delete", json!({"sandbox": "sb1"}));
        let result = check(&r, KILLED);
        assert_eq!(result.valid, Validity::Valid, "{}", result.summary);

        let r = Recorder::new(None).unwrap_or_else(|e| panic!("{e}"));
        get(&r, "failed");
        let result = check(&r, EXITED);
        assert_eq!(result.valid, Validity::Valid, "{}", result.summary);
    }

    /// - given: the killed workload's log (released at 15:38:08.431), the
    ///   history's clock mapped to start at 15:38:00, and a client delete
    ///   of sb1 invoked 9 s into the run (after the release), or 8 s (before)
    /// - then: invalid when the delete came later, naming when; valid when
    ///   it came first
    #[test]
    fn a_delete_only_excuses_a_kill_that_came_after_it() {
        let r = Recorder::new(None).unwrap_or_else(|e| panic!("{e}"));
        get(&r, "assigned");
        let delete = record(&r, OpType::Invoke, "delete", json!({"sandbox": "sb1"}));
        let started = chrono::DateTime::parse_from_rfc3339("2026-12-03T15:38:00Z")
            .unwrap_or_else(|e| panic!("{e}"));
        let checker = HealthyWorkloadsKept {
            runtimes: [("sb1".to_string(), parse_runtime_log(KILLED))].into(),
            history_started_at: Some(started.into()),
        };
        let at = |secs: u64| {
            let mut events = r.snapshot();
            events[usize::try_from(delete).unwrap_or(usize::MAX)].time = secs * 1_000_000_000;
            checker.check(&events, &FinalState::default())
        };
        let late = at(9);
        assert_eq!(late.valid, Validity::Invalid, "{}", late.summary);
        let what = late.details["violations"][0]["what"]
            .as_str()
            .unwrap_or_default();
        assert!(
            what.contains("no client deleted it before then (its first delete came 9.00 s"),
            "{what}"
        );
        let early = at(8);
        assert_eq!(early.valid, Validity::Valid, "{}", early.summary);
    }

    /// A driver delete of a running runtime (no release first) counts too;
    /// no runtime log at all is unknown.
    #[test]
    fn a_shutdown_while_running_counts_and_no_log_is_unknown() {
        let r = Recorder::new(None).unwrap_or_else(|e| panic!("{e}"));
        get(&r, "assigned");
        let log = KILLED
            .lines()
            .filter(|l| !l.contains("released:") && !l.contains("workload stopped"))
            .collect::<Vec<_>>()
            .join("\n");
        let result = check(&r, &log);
        assert_eq!(result.valid, Validity::Invalid, "{}", result.summary);
        let none = HealthyWorkloadsKept {
            runtimes: BTreeMap::new(),
            history_started_at: None,
        }
        .check(&r.snapshot(), &FinalState::default());
        assert_eq!(none.valid, Validity::Unknown);
    }
}

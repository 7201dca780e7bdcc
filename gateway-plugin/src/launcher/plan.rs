//! The launcher's decisions, pure: from the applied pool state and one list
//! of the driver's runtimes, what to ensure, what to fail and what to
//! delete. No I/O and no clock, so every rule is a unit test.
//!
//! - **Ensure** (create) a live generation's runtime when none is recorded
//!   and the list does not show one; a listed one that serves is
//!   **recorded**, a listed one that failed **fails** the launch
//!   (`LaunchFailed`), a pending one is waited for. All this only while no owner
//!   can have supervised a workload of it: phase `Admitting`, or
//!   `Recovering` with no report ever accepted (its first owner died before
//!   the launch finished). An `Assigned` generation without a record was
//!   launched before runtimes were recorded (an upgraded cluster): it is
//!   left alone, since a second runtime would run a second workload.
//! - **Fail** (`RuntimeLost`) a generation in `Admitting`, `Assigned` or
//!   `Recovering` whose recorded runtime the list no longer shows, or shows
//!   failed, but only when the runtime was recorded at or below the log
//!   index applied before the list was taken (`listed_after`): a list taken
//!   before the record (a deposed leader's, a slow driver call's) cannot
//!   show a runtime another leader started meanwhile, and says nothing
//!   about it; and only when it was recorded from a list of this driver's
//!   scope (`Runtime.driver_scope`; empty: recorded before scopes were
//!   kept): a driver looking elsewhere (another directory, another
//!   namespace) cannot see it, and such a runtime is counted
//!   ([`Plan::out_of_scope`]), never judged. Never relaunched. `Stopping`
//!   is exempt: its runtime ends on purpose.
//! - **Delete** a listed runtime whose generation is deleted, failed,
//!   superseded by a newer generation, or unknown to the state.

use pool::{Phase, PoolState, Sandbox, LAUNCH_FAILED, RUNTIME_LOST};
use sandbox_driver::{runtime_name, Endpoint, LaunchSpec, Observed, RuntimeState};

/// One thing the launcher does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the runtime (the list does not show it); record it once it
    /// serves.
    Ensure(LaunchSpec),
    /// Record the endpoint of a listed runtime that serves.
    Record {
        /// Sandbox id.
        sandbox: String,
        /// Generation.
        generation: u64,
        /// Where it serves.
        endpoint: Endpoint,
    },
    /// Fail the generation with `reason` (`LaunchFailed: ...` or
    /// `RuntimeLost: ...`).
    Fail {
        /// Sandbox id.
        sandbox: String,
        /// Generation.
        generation: u64,
        /// The failure reason.
        reason: String,
    },
    /// Remove a runtime that no live generation owns.
    Delete {
        /// Runtime name.
        name: String,
    },
}

/// What every launch carries besides the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchDefaults {
    /// The runtime's recovery deadline, ms.
    pub recovery_deadline_ms: u64,
    /// The grant keys runtimes trust (hex).
    pub trusted_grant_keys: Vec<String>,
    /// The trusted grant keys file runtimes read instead, if configured.
    pub trusted_grant_keys_file: Option<String>,
}

/// What one pass decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The actions, in order: deletes, fails, ensures.
    pub actions: Vec<Action>,
    /// Runtimes of watched generations recorded from a list of another
    /// driver scope: this list cannot see them, so they were not judged.
    pub out_of_scope: usize,
}

/// The plan for one pass. `listed` is the list of a driver of scope
/// `scope`, taken after this node applied log index `listed_after`;
/// `state` was read after the list.
pub fn plan(
    state: &PoolState,
    listed: &[Observed],
    listed_after: u64,
    scope: &str,
    defaults: &LaunchDefaults,
) -> Plan {
    let mut actions = Vec::new();
    let mut out_of_scope = 0;
    for runtime in listed {
        if !owned_by_live_generation(state, runtime) {
            actions.push(Action::Delete {
                name: runtime.name.clone(),
            });
        }
    }
    for sandbox in state.sandboxes().values() {
        match &sandbox.runtime {
            // Recorded after the list was taken: the list cannot tell.
            Some(recorded) if recorded.recorded_index > listed_after => {}
            // Recorded from a list this driver does not see.
            Some(recorded)
                if watched(sandbox.phase)
                    && !recorded.driver_scope.is_empty()
                    && recorded.driver_scope != scope =>
            {
                out_of_scope += 1;
            }
            Some(recorded) if watched(sandbox.phase) => {
                if let Some(reason) = lost(&recorded.name, listed) {
                    actions.push(Action::Fail {
                        sandbox: sandbox.id.clone(),
                        generation: sandbox.generation,
                        reason: format!("{RUNTIME_LOST}: {reason}"),
                    });
                }
            }
            Some(_) => {}
            None if needs_launch(sandbox) => {
                let name = runtime_name(&sandbox.id, sandbox.generation);
                match listed.iter().find(|o| o.name == name).map(|o| &o.state) {
                    None => actions.push(Action::Ensure(spec(sandbox, defaults))),
                    Some(RuntimeState::Running(endpoint)) => actions.push(Action::Record {
                        sandbox: sandbox.id.clone(),
                        generation: sandbox.generation,
                        endpoint: endpoint.clone(),
                    }),
                    Some(RuntimeState::Failed { reason }) => actions.push(Action::Fail {
                        sandbox: sandbox.id.clone(),
                        generation: sandbox.generation,
                        reason: format!("{LAUNCH_FAILED}: {reason}"),
                    }),
                    Some(RuntimeState::Pending { .. }) => {}
                }
            }
            None => {}
        }
    }
    Plan {
        actions,
        out_of_scope,
    }
}

/// The launch of `sandbox`'s current generation.
pub fn spec(sandbox: &Sandbox, defaults: &LaunchDefaults) -> LaunchSpec {
    LaunchSpec {
        sandbox_id: sandbox.id.clone(),
        generation: sandbox.generation,
        workload: workload(&sandbox.material_ref),
        recovery_deadline_ms: defaults.recovery_deadline_ms,
        trusted_grant_keys: defaults.trusted_grant_keys.clone(),
        trusted_grant_keys_file: defaults.trusted_grant_keys_file.clone(),
    }
}

/// The workload command a launch's material names: a JSON array of strings
/// is the command; anything else (empty, `demo`, an object id) runs the
/// runtime's built-in demo workload.
pub fn workload(material_ref: &str) -> Vec<String> {
    serde_json::from_str::<Vec<String>>(material_ref).unwrap_or_default()
}

/// Phases whose runtime must keep existing.
fn watched(phase: Phase) -> bool {
    matches!(
        phase,
        Phase::Admitting | Phase::Assigned | Phase::Recovering
    )
}

/// Whether no owner can have supervised a workload of this generation yet.
fn needs_launch(sandbox: &Sandbox) -> bool {
    match sandbox.phase {
        Phase::Admitting => true,
        Phase::Recovering => sandbox.last_report.is_none(),
        _ => false,
    }
}

/// Why the recorded runtime `name` counts as lost in this list, if it does.
fn lost(name: &str, listed: &[Observed]) -> Option<String> {
    match listed.iter().find(|o| o.name == name) {
        None => Some(format!("runtime {name} is gone")),
        Some(Observed {
            state: RuntimeState::Failed { reason },
            ..
        }) => Some(format!("runtime {name} failed: {reason}")),
        Some(_) => None,
    }
}

/// Whether a live generation of the state owns `runtime`.
fn owned_by_live_generation(state: &PoolState, runtime: &Observed) -> bool {
    let Some(sandbox) = state.sandbox(&runtime.sandbox_id) else {
        return false;
    };
    // A runtime named for another id (a hash collision, a forged label) is
    // not this sandbox's.
    if runtime_name(&sandbox.id, runtime.generation) != runtime.name {
        return false;
    }
    if runtime.generation < sandbox.generation {
        return false;
    }
    runtime.generation > sandbox.generation
        || !matches!(sandbox.phase, Phase::Deleted | Phase::Failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pool::{Acknowledge, Command, Delete, FailLaunch, Join, Launch, RecordRuntime};

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    /// The scope of the driver the tests' launcher lists with.
    const SCOPE: &str = "process:0123456789abcdef0123456789abcdef";

    struct Pool {
        state: PoolState,
        index: u64,
    }

    impl Pool {
        /// One member with room, sandbox `sb` launched (admitting).
        fn with(sb: &str) -> Pool {
            let mut p = Pool {
                state: PoolState::new(),
                index: 0,
            };
            p.apply(Command::Join(Join {
                member: "m".into(),
                uid: "u".into(),
                incarnation: 1,
                address: "m:1".into(),
                capacity: 4,
                ..Join::default()
            }));
            p.launch(sb, "[\"sleep\",\"1000\"]");
            p
        }

        fn apply(&mut self, command: Command) {
            self.index += 1;
            let outcome = self.state.apply(self.index, &command);
            assert!(
                matches!(outcome, pool::Outcome::Applied(_)),
                "{}: {outcome:?}",
                command.name()
            );
        }

        fn launch(&mut self, sb: &str, material: &str) {
            self.apply(Command::Launch(Launch {
                launch_id: format!("l-{sb}-{}", self.index),
                sandbox: sb.into(),
                material_ref: material.into(),
            }));
        }

        fn record(&mut self, sb: &str) {
            self.record_in(sb, SCOPE);
        }

        /// Records `sb`'s runtime as listed by a driver of `scope`.
        fn record_in(&mut self, sb: &str, scope: &str) {
            let generation = self.generation(sb);
            self.apply(Command::RecordRuntime(RecordRuntime {
                raft_term: 0,
                sandbox: sb.into(),
                generation,
                name: runtime_name(sb, generation),
                address: "10.213.0.2:7400".into(),
                ca_pem: CA.into(),
                driver_scope: scope.into(),
            }));
        }

        fn ack(&mut self, sb: &str) {
            let s = self.sandbox(sb);
            self.apply(Command::Acknowledge(Acknowledge {
                sandbox: sb.into(),
                generation: s.generation,
                member: s.owner.member.clone(),
                incarnation: s.owner.incarnation,
                term: s.owner.term,
            }));
        }

        fn delete(&mut self, sb: &str) {
            let generation = self.generation(sb);
            self.apply(Command::Delete(Delete {
                raft_term: 0,
                sandbox: sb.into(),
                generation,
            }));
        }

        fn sandbox(&self, sb: &str) -> Sandbox {
            self.state.sandbox(sb).cloned().expect("sandbox")
        }

        fn generation(&self, sb: &str) -> u64 {
            self.sandbox(sb).generation
        }

        /// A plan from a list taken now (after every record so far) by a
        /// driver of [`SCOPE`].
        fn plan(&self, listed: &[Observed]) -> Vec<Action> {
            plan(&self.state, listed, self.index, SCOPE, &defaults()).actions
        }
    }

    fn defaults() -> LaunchDefaults {
        LaunchDefaults {
            recovery_deadline_ms: 60_000,
            trusted_grant_keys: vec!["ab".repeat(32)],
            trusted_grant_keys_file: None,
        }
    }

    fn listed(sb: &str, generation: u64, state: RuntimeState) -> Observed {
        Observed {
            name: runtime_name(sb, generation),
            sandbox_id: sb.into(),
            generation,
            state,
        }
    }

    fn running(sb: &str, generation: u64) -> RuntimeState {
        RuntimeState::Running(Endpoint {
            name: runtime_name(sb, generation),
            address: "10.213.0.2:7400".into(),
            ca_pem: CA.into(),
        })
    }

    fn ensures(actions: &[Action]) -> Vec<&LaunchSpec> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Ensure(spec) => Some(spec),
                _ => None,
            })
            .collect()
    }

    /// - given: a new launch (admitting, nothing recorded, nothing listed)
    /// - then: its runtime is ensured with the launch's workload command,
    ///   the recovery deadline and the trusted keys
    #[test]
    fn a_new_launch_is_ensured_with_its_workload() {
        let p = Pool::with("sb");
        let actions = p.plan(&[]);
        assert_eq!(
            actions,
            vec![Action::Ensure(LaunchSpec {
                sandbox_id: "sb".into(),
                generation: 1,
                workload: vec!["sleep".into(), "1000".into()],
                recovery_deadline_ms: 60_000,
                trusted_grant_keys: vec!["ab".repeat(32)],
                trusted_grant_keys_file: None,
            })]
        );
        assert_eq!(workload(""), Vec::<String>::new());
        assert_eq!(workload("demo"), Vec::<String>::new());
        assert_eq!(workload("{\"a\":1}"), Vec::<String>::new());
    }

    /// - given: the runtime of a new launch is listed (another leader, or
    ///   an earlier pass, created it)
    /// - then: never ensured again: serving -> recorded, failed -> the
    ///   launch fails with the driver's reason, pending -> waited for
    #[test]
    fn a_listed_runtime_is_adopted_not_created_again() {
        let p = Pool::with("sb");
        let serving = p.plan(&[listed("sb", 1, running("sb", 1))]);
        assert!(matches!(
            serving.as_slice(),
            [Action::Record { sandbox, generation: 1, endpoint }]
                if sandbox == "sb" && endpoint.address == "10.213.0.2:7400"
        ));
        let failed = p.plan(&[listed(
            "sb",
            1,
            RuntimeState::Failed {
                reason: "Unschedulable: 0/3 nodes are available".into(),
            },
        )]);
        assert_eq!(
            failed,
            vec![Action::Fail {
                sandbox: "sb".into(),
                generation: 1,
                reason: "LaunchFailed: Unschedulable: 0/3 nodes are available".into()
            }]
        );
        let pending = p.plan(&[listed(
            "sb",
            1,
            RuntimeState::Pending {
                detail: "ContainerCreating".into(),
            },
        )]);
        assert_eq!(pending, vec![]);
    }

    /// - given: a recorded, acknowledged sandbox
    /// - when: the list shows its runtime, then shows it failed, then not
    ///   at all
    /// - then: nothing; then `RuntimeLost` with the driver's reason; then
    ///   `RuntimeLost ... is gone`; and never an ensure (no relaunch)
    #[test]
    fn a_recorded_runtime_that_is_lost_fails_the_sandbox_and_is_not_relaunched() {
        let mut p = Pool::with("sb");
        p.record("sb");
        p.ack("sb");
        assert_eq!(p.plan(&[listed("sb", 1, running("sb", 1))]), vec![]);
        let dead = p.plan(&[listed(
            "sb",
            1,
            RuntimeState::Failed {
                reason: "runtime exited".into(),
            },
        )]);
        assert!(
            matches!(dead.as_slice(), [Action::Fail { reason, .. }] if reason.starts_with("RuntimeLost: ") && reason.ends_with("runtime exited")),
            "{dead:?}"
        );
        let gone = p.plan(&[]);
        assert!(
            matches!(gone.as_slice(), [Action::Fail { reason, .. }] if reason.starts_with("RuntimeLost: ") && reason.ends_with("is gone")),
            "{gone:?}"
        );
        assert!(ensures(&gone).is_empty());
    }

    /// - given: a leader lists the runtimes (none of `b3` yet), then
    ///   another leader ensures `b3`'s runtime and records it, then the
    ///   first leader's read returns the state with the record (the t32
    ///   race: a deposed leader's stale list against a fresh state)
    /// - then: the plan from that list fails nothing, ensures nothing and
    ///   deletes nothing; a list taken after the record that misses the
    ///   runtime does fail it as lost
    #[test]
    fn a_runtime_recorded_after_the_list_was_taken_is_not_failed_as_lost() {
        let mut p = Pool::with("b3");
        let listed_after = p.index;
        p.record("b3");
        p.ack("b3");
        let stale = plan(&p.state, &[], listed_after, SCOPE, &defaults()).actions;
        assert_eq!(
            stale,
            vec![],
            "a list older than the record decides nothing"
        );
        let fresh = p.plan(&[]);
        assert!(
            matches!(fresh.as_slice(), [Action::Fail { sandbox, reason, .. }]
                if sandbox == "b3" && reason.starts_with("RuntimeLost: ")),
            "{fresh:?}"
        );
    }

    /// - given: a sandbox whose runtime was recorded from a list of
    ///   another driver scope (a gateway whose driver watches another
    ///   directory or namespace, leading now), and one recorded before
    ///   scopes were kept
    /// - then: a list of this scope that misses the first fails nothing
    ///   (it cannot see it) and counts it out of scope; the second is
    ///   judged by any list, as before
    #[test]
    fn a_runtime_recorded_in_another_driver_scope_is_not_failed_as_lost() {
        let mut p = Pool::with("elsewhere");
        p.record_in("elsewhere", "process:ffffffffffffffffffffffffffffffff");
        p.ack("elsewhere");
        let unseen = plan(&p.state, &[], p.index, SCOPE, &defaults());
        assert_eq!(
            unseen,
            Plan {
                actions: vec![],
                out_of_scope: 1
            }
        );
        let own = plan(
            &p.state,
            &[],
            p.index,
            "process:ffffffffffffffffffffffffffffffff",
            &defaults(),
        );
        assert!(
            matches!(own.actions.as_slice(), [Action::Fail { sandbox, reason, .. }]
                if sandbox == "elsewhere" && reason.ends_with("is gone")),
            "{own:?}"
        );

        let mut p = Pool::with("unscoped");
        p.record_in("unscoped", "");
        p.ack("unscoped");
        let judged = plan(&p.state, &[], p.index, SCOPE, &defaults());
        assert_eq!(judged.out_of_scope, 0);
        assert!(
            matches!(judged.actions.as_slice(), [Action::Fail { sandbox, .. }] if sandbox == "unscoped"),
            "{judged:?}"
        );
    }

    /// - given: an assigned sandbox with no runtime recorded (launched
    ///   before runtimes were recorded: its runtime is not the driver's)
    /// - then: nothing is created for it (a second workload)
    #[test]
    fn an_assigned_sandbox_without_a_record_is_left_alone() {
        let mut p = Pool::with("sb");
        p.ack("sb");
        assert_eq!(p.sandbox("sb").phase, Phase::Assigned);
        assert_eq!(p.plan(&[]), vec![]);
    }

    /// - given: listed runtimes of a deleted sandbox, of a failed one, of
    ///   an older generation, and of an id the state does not know
    /// - then: each is deleted; the live generation's runtime is kept
    #[test]
    fn runtimes_no_live_generation_owns_are_deleted() {
        let mut p = Pool::with("gone");
        p.record("gone");
        p.delete("gone");
        p.launch("failed", "");
        p.record("failed");
        let generation = p.generation("failed");
        p.apply(Command::FailLaunch(FailLaunch {
            raft_term: 0,
            sandbox: "failed".into(),
            generation,
            reason: "RuntimeLost: x".into(),
        }));
        p.launch("again", "");
        p.record("again");
        p.delete("again");
        p.launch("again", "");
        p.record("again");
        assert_eq!(p.generation("again"), 2);
        let list = [
            listed("gone", 1, running("gone", 1)),
            listed("failed", 1, RuntimeState::Failed { reason: "x".into() }),
            listed("again", 1, running("again", 1)),
            listed("again", 2, running("again", 2)),
            listed("stranger", 1, running("stranger", 1)),
        ];
        let deleted: Vec<String> = p
            .plan(&list)
            .into_iter()
            .filter_map(|a| match a {
                Action::Delete { name } => Some(name),
                _ => None,
            })
            .collect();
        assert_eq!(
            deleted,
            vec![
                runtime_name("gone", 1),
                runtime_name("failed", 1),
                runtime_name("again", 1),
                runtime_name("stranger", 1),
            ]
        );
    }

    /// - given: a listed runtime whose name is not the one its labels'
    ///   sandbox and generation give (a forged or foreign object)
    /// - then: it is not taken for the live sandbox's runtime: deleted
    #[test]
    fn a_runtime_whose_name_does_not_match_its_sandbox_is_not_adopted() {
        let mut p = Pool::with("sb");
        p.record("sb");
        let forged = Observed {
            name: "sbx-other-g1-00000000".into(),
            sandbox_id: "sb".into(),
            generation: 1,
            state: running("sb", 1),
        };
        let actions = p.plan(&[listed("sb", 1, running("sb", 1)), forged]);
        assert_eq!(
            actions,
            vec![Action::Delete {
                name: "sbx-other-g1-00000000".into()
            }]
        );
    }
}

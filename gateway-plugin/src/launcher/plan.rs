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
//!   failed. Never relaunched. `Stopping` is exempt: its runtime ends on
//!   purpose.
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
}

/// The actions for one pass, in order: deletes, fails, ensures.
pub fn plan(state: &PoolState, listed: &[Observed], defaults: &LaunchDefaults) -> Vec<Action> {
    let mut actions = Vec::new();
    for runtime in listed {
        if !owned_by_live_generation(state, runtime) {
            actions.push(Action::Delete {
                name: runtime.name.clone(),
            });
        }
    }
    for sandbox in state.sandboxes().values() {
        match &sandbox.runtime {
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
    actions
}

/// The launch of `sandbox`'s current generation.
pub fn spec(sandbox: &Sandbox, defaults: &LaunchDefaults) -> LaunchSpec {
    LaunchSpec {
        sandbox_id: sandbox.id.clone(),
        generation: sandbox.generation,
        workload: workload(&sandbox.material_ref),
        recovery_deadline_ms: defaults.recovery_deadline_ms,
        trusted_grant_keys: defaults.trusted_grant_keys.clone(),
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

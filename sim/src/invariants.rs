//! The pool's invariants, checked on every replica after every applied
//! command: [`pool::PoolState::check_invariants`] on the state it left
//! (I1, I3, I5, I6 and the state's own consistency) and
//! [`pool::InvariantTracker`] across steps (terms and epochs bump on every
//! owner change, I2; takeovers only of owners dead or draining at the
//! previous log position, I4; stop and delete win, I8; time, incarnations
//! and generations never go back). And one of the simulation's own: no
//! sandbox fails, because nothing in it ever loses a workload (no runtime
//! dies but those the runtime nemesis kills, which it records, and a member
//! is only ever paused for less than its TTL or cut off until it attaches
//! elsewhere), so any other failed sandbox is a healthy one the control
//! plane failed. A violation is recorded in the trace where it
//! happened and in [`Violations`], which fails the seed.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use gateway_plugin::state::GatewayState;
use pool::InvariantTracker;
use prost::Message;
use proto::gateway::{log_command, LogCommand};

use crate::driver::Killed;
use crate::trace::Trace;

/// What a state-machine store calls as it applies (see
/// [`crate::mem_machine::MemMachine::checked`]).
pub trait Check<SM>: Send + 'static {
    /// The state was restored from a snapshot (at start or by an install):
    /// checks across steps start again from it.
    fn restored(&mut self, machine: &SM);
    /// `command`, at log `index`, was applied and left `machine`.
    fn applied(&mut self, index: u64, command: &[u8], machine: &SM);
}

/// Every invariant violation of a run, in the order they happened.
#[derive(Clone, Default)]
pub struct Violations(Arc<Mutex<Vec<String>>>);

impl Violations {
    fn push(&self, what: String) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(what);
    }

    /// The first violation, if any.
    pub fn first(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .first()
            .cloned()
    }
}

/// The pool checks of one node's state machine.
pub struct PoolCheck {
    node: String,
    tracker: InvariantTracker,
    /// The failed sandbox generations already seen (or restored).
    failed: BTreeSet<(String, u64)>,
    /// The generations whose runtime the runtime nemesis killed: failing
    /// them is right.
    killed: Option<Killed>,
    violations: Violations,
    trace: Trace,
}

impl PoolCheck {
    /// Checks for node `node`, reporting to `violations` and `trace`.
    pub fn new(node: &str, violations: Violations, trace: Trace) -> Self {
        PoolCheck {
            node: node.to_string(),
            tracker: InvariantTracker::new(),
            failed: BTreeSet::new(),
            killed: None,
            violations,
            trace,
        }
    }

    /// Failing a generation of `killed` is no violation.
    #[must_use]
    pub fn with_killed(mut self, killed: Option<Killed>) -> Self {
        self.killed = killed;
        self
    }
}

impl Check<GatewayState> for PoolCheck {
    fn restored(&mut self, machine: &GatewayState) {
        self.tracker = InvariantTracker::from_state(&machine.pool);
        self.failed = failed(&machine.pool).collect();
    }

    fn applied(&mut self, index: u64, command: &[u8], machine: &GatewayState) {
        // Apply already refused anything undecodable with a panic.
        let Ok(LogCommand {
            command: Some(log_command::Command::Pool(bytes)),
            ..
        }) = LogCommand::decode(command)
        else {
            return;
        };
        let Ok(command) = pool::Command::decode(bytes.as_slice()) else {
            return;
        };
        let checked = self
            .tracker
            .observe(&command, &machine.pool)
            .and_then(|()| machine.pool.check_invariants())
            .map_err(|violation| violation.to_string())
            .and_then(|()| indexed_plan_matches(&machine.pool))
            .and_then(|()| {
                let new: Vec<(String, u64)> = failed(&machine.pool)
                    .filter(|f| !self.failed.contains(f))
                    .collect();
                self.failed.extend(new.iter().cloned());
                let killed = self
                    .killed
                    .as_ref()
                    .map(|k| k.lock().unwrap_or_else(|p| p.into_inner()).clone())
                    .unwrap_or_default();
                let healthy: Vec<&(String, u64)> =
                    new.iter().filter(|f| !killed.contains(*f)).collect();
                match healthy.first() {
                    None => Ok(()),
                    Some((id, generation)) => {
                        let reason = machine
                            .pool
                            .sandbox(id)
                            .and_then(|s| s.failure.clone())
                            .unwrap_or_default();
                        Err(format!(
                            "healthy sandbox failed: {id} generation {generation}: {reason}"
                        ))
                    }
                }
            });
        if let Err(violation) = checked {
            let what = format!(
                "{} at index {index} after {}: {violation}",
                self.node,
                command.name()
            );
            self.trace.record(format!("violation {what}"), &[]);
            self.violations.push(what);
        }
    }
}

/// The failed sandbox generations of `pool`.
fn failed(pool: &pool::PoolState) -> impl Iterator<Item = (String, u64)> + '_ {
    pool.sandboxes()
        .values()
        .filter(|s| s.phase == pool::Phase::Failed)
        .map(|s| (s.id.clone(), s.generation))
}

/// The coordinator's indexed plan is the plan by reading every sandbox
/// (`pool::coordinator::plan_by_scan`) on this state: the indexes the
/// leader's passes read (issue 30) never hide a command.
fn indexed_plan_matches(pool: &pool::PoolState) -> Result<(), String> {
    for pending_moves in [0, 1] {
        let indexed = pool::coordinator::plan(pool, pending_moves);
        let scanned = pool::coordinator::plan_by_scan(pool, pending_moves);
        if indexed != scanned {
            return Err(format!(
                "the coordinator's indexed plan ({} commands) differs from the plan by scan ({} commands)",
                indexed.len(),
                scanned.len()
            ));
        }
    }
    Ok(())
}

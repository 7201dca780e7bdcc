//! The leader's launcher (docs/design/0003-sandbox-driver.md): while this
//! gateway leads the raft group, every [`PASS_EVERY`] it lists the sandbox
//! driver's runtimes, reads the pool state linearizably, and carries out
//! [`plan::plan`]: ensure runtimes of new launches (recording their
//! endpoint with `RecordRuntime`, or failing the launch with `FailLaunch`),
//! fail generations whose runtime is lost, delete runtimes no live
//! generation owns.
//!
//! # A pass is bound to its raft term
//!
//! A launcher acts for the leader of one raft term, and only once that
//! term's `LeaderChanged` is applied (so every other leader's decisions are
//! fenced out of the log: `pool::fence`). Its list of runtimes is an
//! observation of the world outside the log, and a deposed leader's list
//! is stale: another leader may have started and recorded a runtime since.
//! So, per pass:
//!
//! 1. it notes the log index it has applied, then lists: a runtime recorded
//!    at or below that index existed before the list, and only such a
//!    runtime counts as lost when the list misses it;
//! 2. it reads the state as the leader of its term
//!    ([`raft_store::RaftNode::read_as_leader`]: a read-index confirmed by a
//!    quorum for this term, served by this node, never by another's
//!    read-index);
//!    a runtime recorded from a list of another driver scope (a gateway
//!    whose driver looks at another directory or namespace) is not judged
//!    from this list at all: this driver cannot see it;
//! 3. before each driver call and each proposal it checks that it still
//!    leads its term, and stops the moment it does not;
//! 4. it proposes through its own raft only, each command stamped with its
//!    term ([`Hub::propose_as_leader`]); apply refuses one still in flight
//!    once another leader's term is applied.
//!
//! Ensure is idempotent by runtime name, so two leaders overlapping for a
//! moment start one runtime; a delete names one runtime, whose generation
//! is terminal (a runtime's name is its sandbox and generation), so a late
//! delete never removes a live generation's runtime.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use pool::{Command, FailLaunch, RecordRuntime, LAUNCH_FAILED};
use sandbox_driver::{DriverError, Endpoint, LaunchSpec, RuntimeState, SandboxDriver};
use tracing::Instrument;

use crate::hub::Hub;

pub mod driver;
#[cfg(feature = "fault-stale-runtime-list")]
mod fault;
pub mod plan;

use plan::{Action, LaunchDefaults};

/// How often a leader runs a pass.
pub const PASS_EVERY: Duration = Duration::from_millis(500);

/// Driver calls in flight at once within a pass.
const CONCURRENT_CALLS: usize = 16;

/// The launcher of one gateway.
pub struct Launcher {
    hub: Arc<Hub>,
    driver: Arc<dyn SandboxDriver>,
    trusted_grant_keys_file: Option<String>,
    /// The last retried error warned about, per runtime name (`""`: the
    /// list): a failure repeated every pass (a full disk, an API down) is
    /// logged once at warn, then at debug until it changes or clears.
    warned: std::sync::Mutex<BTreeMap<String, String>>,
    /// Whether the last pass found runtimes of another driver scope
    /// (warned about once until none are left).
    out_of_scope_warned: std::sync::atomic::AtomicBool,
}

impl Launcher {
    /// A launcher proposing through `hub` and launching with `driver`;
    /// runtimes read `trusted_grant_keys_file` if given, else trust this
    /// cluster's signing key.
    pub fn new(
        hub: Arc<Hub>,
        driver: Arc<dyn SandboxDriver>,
        trusted_grant_keys_file: Option<String>,
    ) -> Self {
        Launcher {
            hub,
            driver,
            trusted_grant_keys_file,
            warned: std::sync::Mutex::new(BTreeMap::new()),
            out_of_scope_warned: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Warns about `error` retried for `key` unless it is the one warned
    /// about last time; clears the key when `error` is None.
    fn retried(&self, key: &str, error: Option<String>) {
        let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        match error {
            None => {
                if warned.remove(key).is_some() {
                    tracing::info!(runtime = %key, "retried driver call succeeded");
                }
            }
            Some(error) if warned.get(key) == Some(&error) => {
                tracing::debug!(runtime = %key, %error, "driver call still failing; retrying");
            }
            Some(error) => {
                tracing::warn!(runtime = %key, %error, "driver call failed; retrying every pass (logged again when the error changes)");
                warned.insert(key.to_string(), error);
            }
        }
    }

    /// Runs passes while this node leads; returns when raft shuts down.
    pub async fn run(self) {
        let node = self.hub.node().clone();
        let mut metrics = node.raft().metrics();
        tracing::info!(driver = self.driver.kind(), "sandbox launcher ready");
        #[cfg(feature = "fault-stale-runtime-list")]
        if crate::fault::stale_runtime_list() {
            tokio::spawn(fault::deposed_passes(
                self.hub.clone(),
                self.driver.clone(),
                self.defaults(),
            ));
        }
        loop {
            let (leader, term) = {
                let m = metrics.borrow();
                (m.current_leader, m.current_term)
            };
            if leader != Some(node.id()) {
                if metrics.changed().await.is_err() {
                    return;
                }
                continue;
            }
            tracing::info!(term, driver = self.driver.kind(), "sandbox launcher active");
            self.lead(term).await;
            tracing::info!(term, "sandbox launcher stopped");
            // The gauge speaks for the leader's passes only.
            self.hub
                .metrics()
                .pool
                .launcher_runtimes_out_of_scope
                .set(0);
            if metrics.has_changed().is_err() {
                return;
            }
        }
    }

    /// Passes for one leadership term, each once the pool state is in that
    /// term (its `LeaderChanged` applied: the coordinator proposes it first).
    async fn lead(&self, term: u64) {
        let node = self.hub.node().clone();
        let mut every = tokio::time::interval(PASS_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if node.check_leading(term).is_err() {
                return;
            }
            if node.read_local(|state, _| state.pool.raft_term()) != term {
                continue;
            }
            let span = tracing::debug_span!("launcher_pass", term);
            self.pass(term).instrument(span).await;
        }
    }

    /// One pass for the leader of `term`: list, read, plan, act (see the
    /// module doc).
    async fn pass(&self, term: u64) {
        let node = self.hub.node();
        let listed_after = node.read_local(|_, applied| applied);
        let listed = match self.driver.list().await {
            Ok(listed) => {
                self.retried("", None);
                listed
            }
            Err(e) => {
                self.retried("", Some(format!("listing runtimes: {e}")));
                return;
            }
        };
        let defaults = self.defaults();
        let scope = self.driver.scope();
        let plan = match node
            .read_as_leader(term, |state, _| {
                plan::plan(&state.pool, &listed, listed_after, scope, &defaults)
            })
            .await
        {
            Ok(plan) => plan,
            Err(e) => {
                tracing::debug!(error = %e, "no read as the leader of this term; skipping the pass");
                return;
            }
        };
        self.out_of_scope(plan.out_of_scope);
        futures::stream::iter(plan.actions)
            .for_each_concurrent(CONCURRENT_CALLS, |action| self.act(term, action))
            .await;
    }

    /// Reports the runtimes this pass could not judge (recorded from a
    /// list of another driver scope): the gauge, and a warning when they
    /// appear (once, until none are left).
    fn out_of_scope(&self, count: usize) {
        self.hub
            .metrics()
            .pool
            .launcher_runtimes_out_of_scope
            .set(i64::try_from(count).unwrap_or(i64::MAX));
        let warned = self
            .out_of_scope_warned
            .swap(count > 0, std::sync::atomic::Ordering::Relaxed);
        if count > 0 && !warned {
            tracing::warn!(
                count,
                scope = self.driver.scope(),
                "runtimes of live sandboxes were recorded from a list of another driver scope than \
                 this gateway's: its driver cannot see them, so it does not judge them lost or \
                 alive; give every gateway of the group the same sandbox_driver process_dir or \
                 kubernetes_namespace"
            );
        } else if count == 0 && warned {
            tracing::info!("every recorded runtime is in this gateway's driver scope again");
        }
    }

    /// What every launch carries: the runtime's recovery deadline (the
    /// pool's, in ms) and the grant keys runtimes trust (this cluster's, or
    /// the configured keys file).
    fn defaults(&self) -> LaunchDefaults {
        let settings = self.hub.settings();
        let deadline = settings
            .tick_interval
            .saturating_mul(u32::try_from(settings.recovery_deadline_ticks).unwrap_or(u32::MAX));
        LaunchDefaults {
            recovery_deadline_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
            trusted_grant_keys: vec![self.hub.signer().public_key_hex()],
            trusted_grant_keys_file: self.trusted_grant_keys_file.clone(),
        }
    }

    /// Carries out `action` for the leader of `term`, unless this node no
    /// longer leads it.
    async fn act(&self, term: u64, action: Action) {
        if let Err(e) = self.hub.node().check_leading(term) {
            tracing::debug!(error = %e, ?action, "not acting: leadership moved");
            return;
        }
        match action {
            Action::Delete { name } => match self.driver.delete(&name).await {
                Ok(()) => tracing::info!(runtime = %name, "deleted a runtime no live sandbox owns"),
                Err(e) => tracing::warn!(runtime = %name, error = %e, "deleting a runtime failed"),
            },
            Action::Fail {
                sandbox,
                generation,
                reason,
            } => {
                tracing::warn!(%sandbox, generation, %reason, "failing the sandbox");
                self.fail(term, sandbox, generation, reason).await;
            }
            Action::Ensure(spec) => self.ensure(term, spec).await,
            Action::Record {
                sandbox,
                generation,
                endpoint,
            } => self.record(term, sandbox, generation, endpoint).await,
        }
    }

    async fn record(&self, term: u64, sandbox: String, generation: u64, endpoint: Endpoint) {
        let name = endpoint.name.clone();
        let address = endpoint.address.clone();
        let command = Command::RecordRuntime(RecordRuntime {
            sandbox: sandbox.clone(),
            generation,
            name: endpoint.name,
            address: endpoint.address,
            ca_pem: endpoint.ca_pem,
            raft_term: term,
            driver_scope: self.driver.scope().to_string(),
        });
        match self.hub.propose_as_leader(term, command).await {
            Ok(pool::Outcome::Applied(_)) => tracing::info!(
                %sandbox,
                generation,
                runtime = %name,
                %address,
                "runtime serving; endpoint recorded"
            ),
            Ok(pool::Outcome::Rejected(reason)) => {
                tracing::debug!(runtime = %name, %reason, "runtime not recorded");
            }
            Err(error) => {
                tracing::debug!(runtime = %name, %error, "recording the runtime failed")
            }
        }
    }

    async fn ensure(&self, term: u64, spec: LaunchSpec) {
        let name = spec.name();
        let ensured = self.driver.ensure(&spec).await;
        if !matches!(ensured, Err(DriverError::Unavailable { .. })) {
            self.retried(&name, None);
        }
        match ensured {
            Ok(RuntimeState::Running(endpoint)) => {
                self.record(term, spec.sandbox_id, spec.generation, endpoint)
                    .await;
            }
            Ok(RuntimeState::Pending { detail }) => {
                tracing::debug!(runtime = %name, %detail, "runtime starting");
            }
            Ok(RuntimeState::Failed { reason }) => {
                tracing::warn!(runtime = %name, %reason, "launch failed");
                let reason = format!("{LAUNCH_FAILED}: {reason}");
                self.fail(term, spec.sandbox_id, spec.generation, reason)
                    .await;
            }
            Err(DriverError::Refused { message, .. }) => {
                tracing::warn!(runtime = %name, %message, "launch refused");
                let reason = format!("{LAUNCH_FAILED}: {message}");
                self.fail(term, spec.sandbox_id, spec.generation, reason)
                    .await;
            }
            Err(e @ DriverError::Unavailable { .. }) => {
                self.retried(&name, Some(format!("launch not done: {e}")));
            }
        }
    }

    async fn fail(&self, term: u64, sandbox: String, generation: u64, reason: String) {
        let reason = bounded(reason);
        let command = Command::FailLaunch(FailLaunch {
            sandbox,
            generation,
            reason,
            raft_term: term,
        });
        match self.hub.propose_as_leader(term, command).await {
            Ok(pool::Outcome::Applied(_)) => {}
            Ok(pool::Outcome::Rejected(reason)) => {
                tracing::info!(%reason, "failing the sandbox refused");
            }
            Err(error) => {
                tracing::debug!(%error, "failing the sandbox not written; retrying next pass");
            }
        }
    }
}

/// A failure reason within the pool's 1024-byte bound (cut on a character
/// boundary).
fn bounded(mut reason: String) -> String {
    const MAX: usize = 1024;
    if reason.len() > MAX {
        let mut cut = MAX - 3;
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        reason.truncate(cut);
        reason.push_str("...");
    }
    reason
}

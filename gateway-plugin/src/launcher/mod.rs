//! The leader's launcher (docs/design/0003-sandbox-driver.md): while this
//! gateway leads the raft group, every [`PASS_EVERY`] it lists the sandbox
//! driver's runtimes, reads the pool state linearizably, and carries out
//! [`plan::plan`]: ensure runtimes of new launches (recording their
//! endpoint with `RecordRuntime`, or failing the launch with `FailLaunch`),
//! fail generations whose runtime is lost, delete runtimes no live
//! generation owns.
//!
//! Safety against a deposed leader: nothing here is decided on a stale
//! state. The list is taken first and the state read after it by a
//! linearizable read (a quorum confirmed this node's leadership), so every
//! listed runtime's sandbox is in the state read; commands go through raft
//! with preconditions checked at apply. Ensure is idempotent by runtime
//! name, so two leaders overlapping for a moment start one runtime.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use pool::{Command, FailLaunch, RecordRuntime, LAUNCH_FAILED};
use sandbox_driver::{DriverError, Endpoint, LaunchSpec, RuntimeState, SandboxDriver};
use tracing::Instrument;

use crate::hub::Hub;

pub mod driver;
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
            if metrics.has_changed().is_err() {
                return;
            }
        }
    }

    /// Passes for one leadership term.
    async fn lead(&self, term: u64) {
        let node = self.hub.node().clone();
        let metrics = node.raft().metrics();
        let mut every = tokio::time::interval(PASS_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let leading = {
                let m = metrics.borrow();
                m.current_leader == Some(node.id()) && m.current_term == term
            };
            if !leading {
                return;
            }
            let span = tracing::debug_span!("launcher_pass", term);
            self.pass().instrument(span).await;
        }
    }

    /// One pass: list, read, plan, act.
    async fn pass(&self) {
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
        let actions = match self
            .hub
            .node()
            .read(|state, _| plan::plan(&state.pool, &listed, &defaults))
            .await
        {
            Ok(actions) => actions,
            Err(e) => {
                tracing::debug!(error = %e, "no linearizable read; skipping the pass");
                return;
            }
        };
        futures::stream::iter(actions)
            .for_each_concurrent(CONCURRENT_CALLS, |action| self.act(action))
            .await;
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

    async fn act(&self, action: Action) {
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
                self.fail(sandbox, generation, reason).await;
            }
            Action::Ensure(spec) => self.ensure(spec).await,
            Action::Record {
                sandbox,
                generation,
                endpoint,
            } => self.record(sandbox, generation, endpoint).await,
        }
    }

    async fn record(&self, sandbox: String, generation: u64, endpoint: Endpoint) {
        let name = endpoint.name.clone();
        let address = endpoint.address.clone();
        let command = Command::RecordRuntime(RecordRuntime {
            sandbox: sandbox.clone(),
            generation,
            name: endpoint.name,
            address: endpoint.address,
            ca_pem: endpoint.ca_pem,
        });
        match self.hub.propose(&command).await {
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
            Err(status) => {
                tracing::debug!(runtime = %name, %status, "recording the runtime failed")
            }
        }
    }

    async fn ensure(&self, spec: LaunchSpec) {
        let name = spec.name();
        let ensured = self.driver.ensure(&spec).await;
        if !matches!(ensured, Err(DriverError::Unavailable { .. })) {
            self.retried(&name, None);
        }
        match ensured {
            Ok(RuntimeState::Running(endpoint)) => {
                self.record(spec.sandbox_id, spec.generation, endpoint)
                    .await;
            }
            Ok(RuntimeState::Pending { detail }) => {
                tracing::debug!(runtime = %name, %detail, "runtime starting");
            }
            Ok(RuntimeState::Failed { reason }) => {
                tracing::warn!(runtime = %name, %reason, "launch failed");
                let reason = format!("{LAUNCH_FAILED}: {reason}");
                self.fail(spec.sandbox_id, spec.generation, reason).await;
            }
            Err(DriverError::Refused { message, .. }) => {
                tracing::warn!(runtime = %name, %message, "launch refused");
                let reason = format!("{LAUNCH_FAILED}: {message}");
                self.fail(spec.sandbox_id, spec.generation, reason).await;
            }
            Err(e @ DriverError::Unavailable { .. }) => {
                self.retried(&name, Some(format!("launch not done: {e}")));
            }
        }
    }

    async fn fail(&self, sandbox: String, generation: u64, reason: String) {
        let reason = bounded(reason);
        let command = Command::FailLaunch(FailLaunch {
            sandbox,
            generation,
            reason,
        });
        if let Err(status) = self.hub.propose(&command).await {
            tracing::debug!(%status, "failing the sandbox not written; retrying next pass");
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

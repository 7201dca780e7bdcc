//! The simulated sandbox driver: one runtime API shared by every gateway
//! (as a Kubernetes API or a host's process table is), in memory, on
//! simulated time. Every gateway's real launcher (`gateway_plugin::launcher`)
//! drives it when it leads.
//!
//! Each call takes a seeded latency, and its effect lands at a seeded point
//! inside it (a create the API made before its reply was lost, a list that
//! was answered from a cache a moment old): the windows in which a leader
//! change meets a launcher pass. A runtime is `Pending` for a seeded time
//! after its creation, then serves. Only the runtime nemesis ([`nemesis`],
//! when the seed turns it on) makes a runtime fail or vanish, and it
//! records each generation it killed ([`Killed`]): a sandbox failed as
//! `RuntimeLost` or `LaunchFailed` that it did not kill is a healthy one the
//! control plane failed ([`crate::invariants`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sandbox_driver::{DriverError, Endpoint, LaunchSpec, Observed, RuntimeState, SandboxDriver};
use tokio::time::Instant;

use crate::trace::Trace;

/// The CA certificate every simulated runtime names (apply checks only
/// its shape; nothing in the simulation dials a runtime).
const CA_PEM: &str = "-----BEGIN CERTIFICATE-----\nc2ltdWxhdGVk\n-----END CERTIFICATE-----\n";

/// One runtime the API holds.
struct Runtime {
    sandbox_id: String,
    generation: u64,
    /// When it starts serving (simulated time).
    serving_from: Instant,
    /// Where it serves: the n-th runtime created listens on the n-th
    /// address of 10.0.0.0/16.
    address: String,
    /// Why it will never serve again, once the nemesis made it fail.
    failed: Option<String>,
}

/// The sandbox generations whose runtime the nemesis killed.
pub type Killed = Arc<Mutex<BTreeSet<(String, u64)>>>;

struct Api {
    runtimes: BTreeMap<String, Runtime>,
    /// Runtimes ever created.
    created: u64,
    rng: StdRng,
}

/// The shared runtime API; cheap to clone (every gateway holds one).
#[derive(Clone)]
pub struct SimDriver {
    api: Arc<Mutex<Api>>,
    /// The slowest call (and the longest start of a runtime).
    max_latency: Duration,
    killed: Killed,
    trace: Trace,
}

impl SimDriver {
    /// An empty API whose calls take up to `max_latency`, drawing from
    /// `seed`.
    pub fn new(seed: u64, max_latency: Duration, trace: Trace) -> Self {
        SimDriver {
            api: Arc::new(Mutex::new(Api {
                runtimes: BTreeMap::new(),
                created: 0,
                rng: StdRng::seed_from_u64(seed),
            })),
            max_latency,
            killed: Killed::default(),
            trace,
        }
    }

    /// The generations whose runtime the nemesis killed so far.
    pub fn killed(&self) -> Killed {
        self.killed.clone()
    }

    /// Kills one serving runtime, drawn by `rng` (in name order): half the
    /// time it vanishes (its node was lost, it was evicted and removed),
    /// otherwise it stays listed as failed (its process exited, its pod was
    /// OOM-killed). Records its generation in [`SimDriver::killed`] first.
    fn kill(&self, rng: &mut StdRng) {
        let now = Instant::now();
        let mut api = self.api();
        let serving: Vec<String> = api
            .runtimes
            .iter()
            .filter(|(name, r)| matches!(state(name, r, now), RuntimeState::Running(_)))
            .map(|(name, _)| name.clone())
            .collect();
        if serving.is_empty() {
            return;
        }
        let name = serving[rng.gen_range(0..serving.len())].clone();
        let vanish = rng.gen_bool(0.5);
        let Some(runtime) = api.runtimes.get_mut(&name) else {
            return;
        };
        self.killed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((runtime.sandbox_id.clone(), runtime.generation));
        if vanish {
            api.runtimes.remove(&name);
        } else {
            runtime.failed = Some("OOMKilled: the simulation's runtime nemesis".into());
        }
        drop(api);
        let how = if vanish { "removed" } else { "failed" };
        self.trace
            .record(format!("driver killed {name} ({how})"), &[]);
    }

    fn api(&self) -> std::sync::MutexGuard<'_, Api> {
        self.api.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A seeded call latency, split at the point where the call takes
    /// effect: (before, after).
    fn latency(&self) -> (Duration, Duration) {
        let mut api = self.api();
        let max = u64::try_from(self.max_latency.as_micros()).unwrap_or(u64::MAX);
        let total = api.rng.gen_range(0..=max);
        let before = api.rng.gen_range(0..=total);
        (
            Duration::from_micros(before),
            Duration::from_micros(total - before),
        )
    }

    /// The runtimes the API holds now, as `list` would show them.
    pub fn runtimes(&self) -> Vec<Observed> {
        let now = Instant::now();
        self.api()
            .runtimes
            .iter()
            .map(|(name, r)| observed(name, r, now))
            .collect()
    }
}

fn observed(name: &str, r: &Runtime, now: Instant) -> Observed {
    Observed {
        name: name.to_string(),
        sandbox_id: r.sandbox_id.clone(),
        generation: r.generation,
        state: state(name, r, now),
    }
}

fn state(name: &str, r: &Runtime, now: Instant) -> RuntimeState {
    if let Some(reason) = &r.failed {
        return RuntimeState::Failed {
            reason: reason.clone(),
        };
    }
    if now < r.serving_from {
        RuntimeState::Pending {
            detail: "starting".into(),
        }
    } else {
        RuntimeState::Running(Endpoint {
            name: name.to_string(),
            address: r.address.clone(),
            ca_pem: CA_PEM.to_string(),
        })
    }
}

#[async_trait]
impl SandboxDriver for SimDriver {
    fn kind(&self) -> &'static str {
        "sim"
    }

    fn scope(&self) -> &str {
        "sim:one"
    }

    async fn ensure(&self, spec: &LaunchSpec) -> Result<RuntimeState, DriverError> {
        let (before, after) = self.latency();
        tokio::time::sleep(before).await;
        let name = spec.name();
        let now = Instant::now();
        let (created, state) = {
            let mut api = self.api();
            let start = api.rng.gen_range(Duration::ZERO..=self.max_latency);
            let created = !api.runtimes.contains_key(&name);
            if created {
                api.created += 1;
            }
            let n = api.created;
            let runtime = api.runtimes.entry(name.clone()).or_insert(Runtime {
                sandbox_id: spec.sandbox_id.clone(),
                generation: spec.generation,
                serving_from: now + start,
                address: format!("10.0.{}.{}:50051", (n >> 8) & 0xff, n & 0xff),
                failed: None,
            });
            (created, state(&name, runtime, now))
        };
        if created {
            self.trace.record(format!("driver created {name}"), &[]);
        }
        tokio::time::sleep(after).await;
        Ok(state)
    }

    async fn list(&self) -> Result<Vec<Observed>, DriverError> {
        let (before, after) = self.latency();
        tokio::time::sleep(before).await;
        let listed = self.runtimes();
        tokio::time::sleep(after).await;
        Ok(listed)
    }

    async fn delete(&self, name: &str) -> Result<(), DriverError> {
        let (before, after) = self.latency();
        tokio::time::sleep(before).await;
        if self.api().runtimes.remove(name).is_some() {
            self.trace.record(format!("driver deleted {name}"), &[]);
        }
        tokio::time::sleep(after).await;
        Ok(())
    }
}

/// The runtime nemesis, until `end`: every 1 to 4 s, half the time, one
/// serving runtime dies ([`SimDriver::kill`]). Its sandbox must then be
/// failed by the launcher (or, killed before its runtime was recorded,
/// launched again), and no other.
pub async fn nemesis(driver: SimDriver, mut rng: StdRng, end: Instant) {
    loop {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(1_000..4_000))).await;
        if Instant::now() >= end {
            return;
        }
        if rng.gen_bool(0.5) {
            driver.kill(&mut rng);
        }
    }
}

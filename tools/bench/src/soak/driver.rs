//! The soak's sandbox driver: creates `total` sandboxes through
//! `PoolAdmin.CreateSandbox` on random gateways, paced evenly over the
//! creation period, and deletes the oldest (`PoolAdmin.DeleteSandbox`)
//! whenever more than `max_live` are live, so the live set stays bounded
//! while every created sandbox is deleted again; once all are created it
//! deletes the rest.
//!
//! Sandboxes are the pool workload's kind: launch material is an opaque
//! reference and the gateways run `--sandbox-driver none`, so nothing is
//! spawned per sandbox; the soak's members acknowledge each term
//! ([`super::members`]). Ids are `sk<n>` (never reused), launch ids
//! `launch-sk<n>`.
//!
//! A call whose outcome is unknown (timeout, no leader, a broken channel)
//! is retried with the same id and launch id (create is idempotent per
//! launch id; a delete of a sandbox already deleted answers
//! `FAILED_PRECONDITION`, counted as deleted). No history is kept: only
//! the [`DriverCounters`] and the first distinct errors.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proto::pool_admin::{CreateSandboxRequest, DeleteSandboxRequest};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use jepsen::cluster::Cluster;

/// Tries per call before it counts as an error.
const TRIES: usize = 8;
/// Distinct error texts kept for the report.
const KEEP_ERRORS: usize = 20;

/// What the driver did, for the samples.
#[derive(Debug, Default)]
pub struct DriverCounters {
    /// Sandboxes created (`ok`).
    pub created: AtomicU64,
    /// Sandboxes deleted (`ok`, or already deleted).
    pub deleted: AtomicU64,
    /// Creates refused for capacity (`RESOURCE_EXHAUSTED`) or given up.
    pub create_failed: AtomicU64,
    /// Deletes given up.
    pub delete_failed: AtomicU64,
    /// Calls retried after an unknown outcome.
    pub retries: AtomicU64,
    /// The first distinct errors (code and message).
    pub errors: Mutex<Vec<String>>,
}

impl DriverCounters {
    fn note(&self, status: &tonic::Status) {
        let mut text = format!("{:?}: {}", status.code(), status.message());
        text.truncate(200);
        let mut errors = match self.errors.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if errors.len() < KEEP_ERRORS && !errors.contains(&text) {
            errors.push(text);
        }
    }
}

/// The driver's settings.
#[derive(Clone, Debug)]
pub struct DriverPlan {
    /// Sandboxes to create (and delete) in all.
    pub total: u64,
    /// Most sandboxes live at once.
    pub max_live: usize,
    /// Concurrent clients.
    pub concurrency: usize,
    /// Creates are spread evenly over this long.
    pub period: Duration,
}

/// The running driver.
pub struct Driver {
    /// What it did.
    pub counters: Arc<DriverCounters>,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

struct Shared {
    cluster: Arc<Cluster>,
    plan: DriverPlan,
    counters: Arc<DriverCounters>,
    /// The next sandbox number to create.
    next: AtomicU64,
    /// Live sandboxes, oldest first.
    live: Mutex<VecDeque<String>>,
    started: Instant,
    stop: AtomicBool,
    /// When the first delete was acknowledged (ms since `started`; 0: none
    /// yet).
    first_delete_ms: AtomicU64,
}

impl Driver {
    /// Starts `plan.concurrency` clients.
    pub fn start(cluster: Arc<Cluster>, plan: DriverPlan, seed: u64) -> Driver {
        let counters = Arc::new(DriverCounters::default());
        let shared = Arc::new(Shared {
            cluster,
            plan: plan.clone(),
            counters: counters.clone(),
            next: AtomicU64::new(0),
            live: Mutex::new(VecDeque::new()),
            started: Instant::now(),
            stop: AtomicBool::new(false),
            first_delete_ms: AtomicU64::new(0),
        });
        let tasks = (0..plan.concurrency.max(1))
            .map(|w| {
                let rng = StdRng::seed_from_u64(seed ^ (w as u64 + 1).wrapping_mul(0xA24B_AED4));
                tokio::spawn(shared.clone().client(rng))
            })
            .collect();
        Driver {
            counters,
            shared,
            tasks,
        }
    }

    /// Sandboxes live now (created, not yet deleted).
    pub fn live(&self) -> usize {
        self.shared.live_len()
    }

    /// When the first delete was acknowledged, since the driver started.
    pub fn first_delete(&self) -> Option<Duration> {
        match self.shared.first_delete_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// Every client finished (all created and deleted).
    pub fn is_done(&self) -> bool {
        self.tasks.iter().all(tokio::task::JoinHandle::is_finished)
    }

    /// Stops the clients after their current call.
    pub async fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.tasks.drain(..) {
            if tokio::time::timeout(Duration::from_secs(30), &mut { t })
                .await
                .is_err()
            {
                tracing::warn!("a soak client did not stop within 30 s");
            }
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Shared {
    fn lock_live(&self) -> std::sync::MutexGuard<'_, VecDeque<String>> {
        match self.live.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    fn live_len(&self) -> usize {
        self.lock_live().len()
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// One client: creates the next sandbox when it is due, deletes the
    /// oldest while too many are live; once all are created, deletes
    /// what is left.
    async fn client(self: Arc<Self>, mut rng: StdRng) {
        let total = self.plan.total;
        while !self.stopped() {
            let k = self.next.fetch_add(1, Ordering::Relaxed);
            if k >= total {
                break;
            }
            let due = self.plan.period.mul_f64(k as f64 / total.max(1) as f64);
            tokio::time::sleep_until((self.started + due).into()).await;
            let id = format!("sk{k}");
            if self.create(&id, &mut rng).await {
                self.lock_live().push_back(id);
            }
            while self.live_len() > self.plan.max_live && !self.stopped() {
                self.delete_oldest(&mut rng).await;
            }
        }
        while !self.stopped() && self.delete_oldest(&mut rng).await {}
    }

    /// Deletes the oldest live sandbox; false when none is live.
    async fn delete_oldest(&self, rng: &mut StdRng) -> bool {
        let Some(id) = self.lock_live().pop_front() else {
            return false;
        };
        if self.delete(&id, rng).await {
            let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
            let _ = self.first_delete_ms.compare_exchange(
                0,
                ms.max(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        true
    }

    fn node(&self, rng: &mut StdRng) -> Option<&jepsen::cluster::Node> {
        let nodes = &self.cluster.nodes;
        (!nodes.is_empty()).then(|| &nodes[rng.gen_range(0..nodes.len())])
    }

    /// Creates `id`; true when it exists now.
    async fn create(&self, id: &str, rng: &mut StdRng) -> bool {
        let c = &self.counters;
        for attempt in 0..TRIES {
            let Some(node) = self.node(rng) else {
                return false;
            };
            let request = CreateSandboxRequest {
                sandbox_id: id.to_string(),
                launch_id: format!("launch-{id}"),
                material_ref: format!("soak-{id}"),
                request_id: String::new(),
            };
            match node.pool().create_sandbox(request).await {
                Ok(_) => {
                    c.created.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
                Err(s) if s.code() == tonic::Code::AlreadyExists && attempt > 0 => {
                    // An earlier try of ours was applied.
                    c.created.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
                Err(s) => {
                    c.note(&s);
                    if matches!(
                        s.code(),
                        tonic::Code::ResourceExhausted
                            | tonic::Code::InvalidArgument
                            | tonic::Code::AlreadyExists
                            | tonic::Code::PermissionDenied
                            | tonic::Code::Unauthenticated
                    ) {
                        break;
                    }
                    c.retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(200 << attempt.min(4))).await;
                }
            }
        }
        c.create_failed.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Deletes `id`; true when it is deleted now.
    async fn delete(&self, id: &str, rng: &mut StdRng) -> bool {
        let c = &self.counters;
        for attempt in 0..TRIES {
            let Some(node) = self.node(rng) else {
                return false;
            };
            let request = DeleteSandboxRequest {
                sandbox_id: id.to_string(),
                request_id: String::new(),
            };
            match node.pool().delete_sandbox(request).await {
                Ok(_) => {
                    c.deleted.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
                Err(s) if s.code() == tonic::Code::FailedPrecondition && attempt > 0 => {
                    // Deleted by an earlier try of ours.
                    c.deleted.fetch_add(1, Ordering::Relaxed);
                    return true;
                }
                Err(s) => {
                    c.note(&s);
                    if matches!(
                        s.code(),
                        tonic::Code::NotFound
                            | tonic::Code::FailedPrecondition
                            | tonic::Code::InvalidArgument
                    ) {
                        break;
                    }
                    c.retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(200 << attempt.min(4))).await;
                }
            }
        }
        c.delete_failed.fetch_add(1, Ordering::Relaxed);
        false
    }
}

//! Prometheus metrics of one gateway, served at `/metrics`.
//!
//! Names use the problem's words: `openshell_raft_*` for the replicated log,
//! `openshell_pool_*` for the supervisor pool, `openshell_auth_failures_total`
//! for refused credentials.

use prometheus::{
    Encoder, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// The gateway's metrics. Cheap to clone (handles to shared collectors).
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// Refused credentials, by service and reason.
    pub auth_failures: IntCounterVec,
    /// Current raft term.
    pub raft_term: IntGauge,
    /// 1 on the leader, else 0.
    pub raft_is_leader: IntGauge,
    /// Last committed index this node knows.
    pub raft_commit_index: IntGauge,
    /// Last applied index.
    pub raft_applied_index: IntGauge,
    /// Forward calls this gateway sent to the leader since it started.
    pub raft_forward_calls: IntGauge,
    /// Writes those forward calls carried (batched: at least as many).
    pub raft_forwarded_writes: IntGauge,
    /// Supervisor streams attached to this gateway.
    pub pool_attached_supervisors: IntGauge,
    /// Pool members by state.
    pub pool_members: IntGaugeVec,
    /// Sandboxes by phase.
    pub pool_sandboxes: IntGaugeVec,
    /// Logical time.
    pub pool_now_tick: IntGauge,
    /// Assignment snapshot push passes (one per applied batch, one per
    /// attach).
    pub pool_push_passes: IntCounter,
    /// Sandbox records the push passes read from the state (a full scan
    /// counts every sandbox): the work of pushing, proportional to what
    /// changed once every stream was shown its view.
    pub pool_push_sandboxes_examined: IntCounter,
}

impl Metrics {
    /// Registers every collector.
    ///
    /// # Panics
    /// Only on a programming error (a duplicate or malformed metric name).
    pub fn new() -> Self {
        let registry = Registry::new();
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help).unwrap_or_else(|e| panic!("metric {name}: {e}"));
            registry
                .register(Box::new(g.clone()))
                .unwrap_or_else(|e| panic!("metric {name}: {e}"));
            g
        };
        let gauge_vec = |name: &str, help: &str, labels: &[&str]| {
            let g = IntGaugeVec::new(Opts::new(name, help), labels)
                .unwrap_or_else(|e| panic!("metric {name}: {e}"));
            registry
                .register(Box::new(g.clone()))
                .unwrap_or_else(|e| panic!("metric {name}: {e}"));
            g
        };
        let auth_failures = IntCounterVec::new(
            Opts::new(
                "openshell_auth_failures_total",
                "Refused credentials by service and reason",
            ),
            &["service", "reason"],
        )
        .unwrap_or_else(|e| panic!("metric: {e}"));
        registry
            .register(Box::new(auth_failures.clone()))
            .unwrap_or_else(|e| panic!("metric: {e}"));
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help).unwrap_or_else(|e| panic!("metric {name}: {e}"));
            registry
                .register(Box::new(c.clone()))
                .unwrap_or_else(|e| panic!("metric {name}: {e}"));
            c
        };
        Metrics {
            pool_push_passes: counter(
                "openshell_pool_push_passes_total",
                "Assignment snapshot push passes (one per applied batch, one per attach)",
            ),
            pool_push_sandboxes_examined: counter(
                "openshell_pool_push_sandboxes_examined_total",
                "Sandbox records read from the state to plan assignment snapshot pushes",
            ),
            auth_failures,
            raft_term: gauge("openshell_raft_term", "Current raft term"),
            raft_is_leader: gauge(
                "openshell_raft_is_leader",
                "1 if this gateway is the raft leader and a majority acknowledged it within the election timeout",
            ),
            raft_commit_index: gauge(
                "openshell_raft_commit_index",
                "Last committed log index known here",
            ),
            raft_applied_index: gauge("openshell_raft_applied_index", "Last applied log index"),
            raft_forward_calls: gauge(
                "openshell_raft_forward_calls",
                "Forward calls this gateway sent to the raft leader since it started",
            ),
            raft_forwarded_writes: gauge(
                "openshell_raft_forwarded_writes",
                "Writes this gateway forwarded to the raft leader since it started (several per call when batched)",
            ),
            pool_attached_supervisors: gauge(
                "openshell_pool_attached_supervisors",
                "Supervisor streams attached to this gateway",
            ),
            pool_members: gauge_vec(
                "openshell_pool_members",
                "Pool members by state",
                &["state"],
            ),
            pool_sandboxes: gauge_vec("openshell_pool_sandboxes", "Sandboxes by phase", &["phase"]),
            pool_now_tick: gauge(
                "openshell_pool_now_tick",
                "Logical time of the pool, in ticks",
            ),
            registry,
        }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            return format!("# encoding metrics failed: {e}\n");
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

//! Prometheus metrics of one gateway, served at `/metrics`.
//!
//! Names follow Prometheus conventions: an `openshell_` prefix and the
//! problem's words (`openshell_raft_*` for the replicated log,
//! `openshell_pool_*` for the supervisor pool), base units as suffixes
//! (`_seconds`, `_bytes`, `_ticks`, `_entries`, `_commands`), `_total` on
//! counters; the gRPC families use the names grpc-ecosystem's interceptors
//! made standard (`grpc_server_handling_seconds`,
//! `grpc_server_handled_total`). `docs/operations.md` lists every family,
//! and the Grafana dashboard next to the chart
//! (`helm/openshell-gateway/dashboards/openshell.json`) queries them.
//!
//! Layout: [`raft`] (raft-store's [`raft_store::Observer`] and the node's
//! status, read at each scrape), [`pool`] (the applied pool state and
//! [`crate::pool_tally`], read at each scrape, and what the hub counts),
//! [`crate::rpc_metrics`] (the per-call layer). Label values known in
//! advance are created at start with zero, so every query of the
//! dashboard has a series before the first event.

pub mod pool;
pub mod raft;

use prometheus::core::Collector;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

pub use self::pool::PoolMetrics;
pub use self::raft::RaftMetrics;
pub use crate::rpc_metrics::GrpcMetrics;

/// The gateway's metrics. Cheap to clone (handles to shared collectors).
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// Refused credentials, by service and reason.
    pub auth_failures: IntCounterVec,
    /// The replicated log.
    pub raft: RaftMetrics,
    /// The supervisor pool.
    pub pool: PoolMetrics,
    /// Every gRPC call this gateway served.
    pub grpc: GrpcMetrics,
    /// Watchers served now, by kind (`objects`, `pool`).
    pub watchers: IntGaugeVec,
    /// Watches refused or cut, by kind and reason (`limit`: too many
    /// watchers; `compacted`: asked for a revision no longer held;
    /// `fell_behind`: cut after the history dropped what it still had to
    /// get).
    pub watch_refusals: IntCounterVec,
}

/// Registers collectors in one registry. Every constructor panics only on
/// a programming error (a duplicate or malformed name).
pub(crate) struct Reg<'a>(pub &'a Registry);

impl Reg<'_> {
    fn register<C: Collector + Clone + 'static>(&self, name: &str, c: C) -> C {
        self.0
            .register(Box::new(c.clone()))
            .unwrap_or_else(|e| panic!("metric {name}: {e}"));
        c
    }

    /// A gauge.
    pub fn gauge(&self, name: &str, help: &str) -> IntGauge {
        let g = IntGauge::new(name, help).unwrap_or_else(|e| panic!("metric {name}: {e}"));
        self.register(name, g)
    }

    /// A gauge with labels.
    pub fn gauge_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        let g = IntGaugeVec::new(Opts::new(name, help), labels)
            .unwrap_or_else(|e| panic!("metric {name}: {e}"));
        self.register(name, g)
    }

    /// A counter (`name` ends in `_total`).
    pub fn counter(&self, name: &str, help: &str) -> IntCounter {
        let c = IntCounter::new(name, help).unwrap_or_else(|e| panic!("metric {name}: {e}"));
        self.register(name, c)
    }

    /// A counter with labels.
    pub fn counter_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        let c = IntCounterVec::new(Opts::new(name, help), labels)
            .unwrap_or_else(|e| panic!("metric {name}: {e}"));
        self.register(name, c)
    }

    /// A histogram with `buckets` (upper bounds, ascending).
    pub fn histogram(&self, name: &str, help: &str, buckets: &[f64]) -> Histogram {
        let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))
            .unwrap_or_else(|e| panic!("metric {name}: {e}"));
        self.register(name, h)
    }

    /// A histogram with labels.
    pub fn histogram_vec(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
        buckets: &[f64],
    ) -> HistogramVec {
        let h = HistogramVec::new(
            HistogramOpts::new(name, help).buckets(buckets.to_vec()),
            labels,
        )
        .unwrap_or_else(|e| panic!("metric {name}: {e}"));
        self.register(name, h)
    }
}

/// Buckets of durations from 100 µs to 60 s (seconds).
pub const LATENCY_BUCKETS: [f64; 18] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

impl Metrics {
    /// Registers every collector.
    ///
    /// # Panics
    /// Only on a programming error (a duplicate or malformed metric name).
    pub fn new() -> Self {
        let registry = Registry::new();
        let reg = Reg(&registry);
        let auth_failures = reg.counter_vec(
            "openshell_auth_failures_total",
            "Refused credentials by service and reason",
            &["service", "reason"],
        );
        // The refusals every service can count, at zero from the start (a
        // Kubernetes identity's `identity_*` reasons appear when counted).
        for service in ["cluster_admin", "object_store", "pool_admin", "peer_relay"] {
            for reason in ["missing", "invalid", "forbidden", "certificate"] {
                auth_failures.with_label_values(&[service, reason]);
            }
        }
        for reason in ["credential", "malformed"] {
            auth_failures.with_label_values(&["supervisor_host", reason]);
        }
        let watchers = reg.gauge_vec(
            "openshell_watchers",
            "Watchers this gateway serves now, by kind (objects: ObjectStore.Watch; pool: PoolAdmin.WatchPool)",
            &["kind"],
        );
        let watch_refusals = reg.counter_vec(
            "openshell_watch_refusals_total",
            "Watches refused or cut, by kind and reason (limit, compacted, fell_behind)",
            &["kind", "reason"],
        );
        for kind in ["objects", "pool"] {
            watchers.with_label_values(&[kind]);
            watch_refusals.with_label_values(&[kind, "limit"]);
        }
        for reason in ["compacted", "fell_behind"] {
            watch_refusals.with_label_values(&["objects", reason]);
        }
        Metrics {
            auth_failures,
            watchers,
            watch_refusals,
            raft: RaftMetrics::new(&reg),
            pool: PoolMetrics::new(&reg),
            grpc: GrpcMetrics::new(&reg),
            registry,
        }
    }

    /// The observer to put in the node config: raft-store reports log
    /// syncs, batches, snapshots and leader changes to [`Metrics::raft`].
    pub fn raft_observer(&self) -> raft_store::observe::SharedObserver {
        std::sync::Arc::new(self.raft.clone())
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

/// Advances `counter` to `now`, a running total kept elsewhere, from
/// `seen`, the total it last advanced to. A total below `seen` started
/// again from zero (a restart of its source): the counter goes on from
/// there, so it never decreases.
pub(crate) fn advance(counter: &IntCounter, seen: &mut u64, now: u64) {
    if now < *seen {
        *seen = 0;
    }
    counter.inc_by(now - *seen);
    *seen = now;
}

/// The per-call families live with their layer ([`crate::rpc_metrics`]),
/// which knows nothing of this registry; they are registered here with the
/// rest.
impl GrpcMetrics {
    /// Registers the collectors in `reg`.
    pub(crate) fn new(reg: &Reg<'_>) -> Self {
        GrpcMetrics {
            handling: reg.histogram_vec(
                "grpc_server_handling_seconds",
                "Time from a gRPC call's arrival to its end (a stream's: its last message), by service, method and status code",
                &crate::rpc_metrics::LABELS,
                &LATENCY_BUCKETS,
            ),
            handled: reg.counter_vec(
                "grpc_server_handled_total",
                "gRPC calls finished on this gateway, by service, method and status code",
                &crate::rpc_metrics::LABELS,
            ),
            known: crate::rpc_metrics::KnownMethods::gateway(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_exposed_with_help_and_type() {
        let m = Metrics::new();
        m.pool.grants_issued.inc();
        let text = m.render();
        for family in [
            "openshell_auth_failures_total",
            "openshell_raft_term",
            "openshell_raft_log_fsync_duration_seconds",
            "openshell_pool_members",
            "openshell_pool_drain_duration_seconds",
            "openshell_pool_grants_issued_total",
        ] {
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "{family} in\n{text}"
            );
        }
    }

    #[test]
    fn an_advanced_counter_never_decreases() {
        let c = IntCounter::new("c_total", "c").unwrap_or_else(|e| panic!("{e}"));
        let mut seen = 0;
        advance(&c, &mut seen, 5);
        advance(&c, &mut seen, 7);
        advance(&c, &mut seen, 2);
        assert_eq!(c.get(), 9);
    }
}

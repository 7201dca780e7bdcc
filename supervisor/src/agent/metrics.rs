//! The supervisor's Prometheus metrics, served at `/metrics` on its health
//! port next to `/healthz` and `/readyz`:
//!
//! - `openshell_supervisor_stream_state{state}`: 1 for the state the stream
//!   to the gateways is in, 0 for the others: `attached` (a gateway
//!   accepted it), `draining` (attached, but the member is draining or the
//!   process stopping), `detached` (attaching, or waiting to);
//! - `openshell_supervisor_stream_reconnects_total{reason}`: attaches
//!   started again after a stream or an attach ended, by how it ended
//!   (`closed`, `gateway_leaving`, `broken`, `attach_failed`);
//! - `openshell_supervisor_runtimes`: sandbox runtimes this supervisor
//!   supervises (one session each);
//! - `openshell_supervisor_incarnation`: the incarnation the pool granted
//!   (0 before the first).

use prometheus::{Encoder, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};

/// The values of the `state` label.
pub const STREAM_STATES: [&str; 3] = ["attached", "draining", "detached"];

/// The values of the `reason` label.
pub const RECONNECT_REASONS: [&str; 4] = ["closed", "gateway_leaving", "broken", "attach_failed"];

/// The supervisor's collectors.
pub struct AgentMetrics {
    registry: Registry,
    /// The stream's state, one-hot.
    stream_state: IntGaugeVec,
    /// Attaches started again, by how the previous one ended.
    pub reconnects: IntCounterVec,
    /// Sandbox runtimes supervised.
    runtimes: IntGauge,
    /// The incarnation the pool granted.
    incarnation: IntGauge,
}

/// Registers `c` in `registry`; panics only on a programming error (a
/// duplicate or malformed name).
fn register<C: prometheus::core::Collector + Clone + 'static>(registry: &Registry, c: C) -> C {
    registry
        .register(Box::new(c.clone()))
        .unwrap_or_else(|e| panic!("supervisor metric: {e}"));
    c
}

impl AgentMetrics {
    /// Registers every collector, with a zero series for every label value.
    ///
    /// # Panics
    /// Only on a programming error (a duplicate or malformed metric name).
    pub fn new() -> Self {
        let registry = Registry::new();
        let opts = Opts::new;
        let fail = |e: prometheus::Error| -> ! { panic!("supervisor metric: {e}") };
        let stream_state = IntGaugeVec::new(
            opts(
                "openshell_supervisor_stream_state",
                "1 for the state the supervisor's stream to the gateways is in (attached, draining, detached)",
            ),
            &["state"],
        )
        .unwrap_or_else(|e| fail(e));
        let reconnects = IntCounterVec::new(
            opts(
                "openshell_supervisor_stream_reconnects_total",
                "Attaches to a gateway started again, by how the previous stream or attach ended",
            ),
            &["reason"],
        )
        .unwrap_or_else(|e| fail(e));
        let runtimes = IntGauge::new(
            "openshell_supervisor_runtimes",
            "Sandbox runtimes this supervisor supervises (one session each)",
        )
        .unwrap_or_else(|e| fail(e));
        let incarnation = IntGauge::new(
            "openshell_supervisor_incarnation",
            "The incarnation the pool granted this supervisor process (0 before the first)",
        )
        .unwrap_or_else(|e| fail(e));
        let m = AgentMetrics {
            stream_state: register(&registry, stream_state),
            reconnects: register(&registry, reconnects),
            runtimes: register(&registry, runtimes),
            incarnation: register(&registry, incarnation),
            registry,
        };
        for state in STREAM_STATES {
            m.stream_state.with_label_values(&[state]);
        }
        for reason in RECONNECT_REASONS {
            m.reconnects.with_label_values(&[reason]);
        }
        m
    }

    /// Counts one reconnect after an end of `reason` (one of
    /// [`RECONNECT_REASONS`]).
    pub fn reconnect(&self, reason: &str) {
        self.reconnects.with_label_values(&[reason]).inc();
    }

    /// The text exposition, with the gauges set to `state` (one of
    /// [`STREAM_STATES`]), `runtimes` and `incarnation`.
    pub fn render(&self, state: &str, runtimes: usize, incarnation: u64) -> String {
        for s in STREAM_STATES {
            self.stream_state
                .with_label_values(&[s])
                .set(i64::from(s == state));
        }
        self.runtimes
            .set(i64::try_from(runtimes).unwrap_or(i64::MAX));
        self.incarnation
            .set(i64::try_from(incarnation).unwrap_or(i64::MAX));
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            return format!("# encoding metrics failed: {e}\n");
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

impl Default for AgentMetrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_state_is_one_hot() {
        let m = AgentMetrics::new();
        m.reconnect("broken");
        let text = m.render("draining", 2, 7);
        assert!(text.contains("openshell_supervisor_stream_state{state=\"draining\"} 1"));
        assert!(text.contains("openshell_supervisor_stream_state{state=\"attached\"} 0"));
        assert!(text.contains("openshell_supervisor_stream_reconnects_total{reason=\"broken\"} 1"));
        assert!(text.contains("openshell_supervisor_runtimes 2"));
    }
}

//! The scale run's figures: [`ScaleReport`] (written as JSON, e.g.
//! `docs/benchmarks/scale.json`) and its markdown table against the issue's
//! targets (docs/benchmarks.md "Scale").

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// Most RSS a gateway may use (issue 17), MiB.
pub const TARGET_RSS_MIB: f64 = 256.0;
/// Longest a restarted gateway may take to `/readyz` 200, seconds.
pub const TARGET_RESTART_S: f64 = 2.0;
/// Longest a takeover of one member's sandboxes may take, seconds.
pub const TARGET_TAKEOVER_S: f64 = 3.0;

/// The push cost over one phase, summed over the gateways.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Push {
    /// Push passes (one per applied batch and per attach, per gateway).
    pub passes: u64,
    /// Sandbox records the passes read from the state.
    pub examined: u64,
    /// `examined / passes`.
    pub examined_per_pass: f64,
    /// Sandboxes in the pool during the phase: what a pass that rescans
    /// every sandbox reads.
    pub full_scan_per_pass: u64,
}

impl Push {
    /// The cost between two readings of (passes, examined).
    pub fn between(before: (u64, u64), after: (u64, u64), sandboxes: u64) -> Push {
        let passes = after.0.saturating_sub(before.0);
        let examined = after.1.saturating_sub(before.1);
        Push {
            passes,
            examined,
            examined_per_pass: if passes == 0 {
                0.0
            } else {
                examined as f64 / passes as f64
            },
            full_scan_per_pass: sandboxes,
        }
    }
}

/// One takeover.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Takeover {
    /// The killed member.
    pub member: String,
    /// Sandboxes it held.
    pub sandboxes: usize,
    /// Of those, shown acknowledged on a new owner's stream in time.
    pub acknowledged: usize,
    /// From the kill to the last of them acknowledged by its new owner,
    /// seconds (None: not all in time).
    pub seconds: Option<f64>,
    /// From the kill to the first of them acknowledged, seconds.
    pub first_seconds: Option<f64>,
}

/// One gateway restart (`kill -9`, start).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Restart {
    /// Node id.
    pub node: usize,
    /// "follower" or "leader".
    pub role: String,
    /// From the start to `/readyz` 200, seconds (None: not in time).
    pub seconds: Option<f64>,
    /// Its RSS once ready again, MiB.
    pub rss_mib: f64,
}

/// Everything one scale run measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ScaleReport {
    /// The run's settings.
    pub settings: serde_json::Value,
    /// `/proc/loadavg` before and after (the machine is shared: read every
    /// figure beside it).
    pub load_before: String,
    /// See `load_before`.
    pub load_after: String,
    /// Streams attached when the sandboxes were created.
    pub attached: usize,
    /// Seconds to create every sandbox.
    pub create_s: f64,
    /// Seconds from the first create to every sandbox shown acknowledged.
    pub converge_s: f64,
    /// Each gateway's RSS with every sandbox and stream in place, MiB.
    pub rss_mib: Vec<f64>,
    /// Push cost while the sandboxes were created.
    pub push_bulk: Push,
    /// Push cost in the quiet window (heartbeats and ticks only).
    pub push_quiet: Push,
    /// Each gateway's CPU seconds over the quiet window.
    pub quiet_cpu_s: Vec<f64>,
    /// Push cost of one more sandbox (its launch and acknowledgement).
    pub push_one: Push,
    /// Push cost of the takeover.
    pub push_takeover: Push,
    /// The takeover.
    pub takeover: Takeover,
    /// The restarts (a follower, then the leader).
    pub restarts: Vec<Restart>,
    /// Each gateway's RSS at the end, MiB.
    pub rss_end_mib: Vec<f64>,
}

impl ScaleReport {
    /// Whether every target was met.
    pub fn targets_met(&self) -> bool {
        let rss = self
            .rss_mib
            .iter()
            .chain(&self.rss_end_mib)
            .all(|r| *r <= TARGET_RSS_MIB);
        let restart = !self.restarts.is_empty()
            && self
                .restarts
                .iter()
                .all(|r| r.seconds.is_some_and(|s| s <= TARGET_RESTART_S));
        let takeover = self
            .takeover
            .seconds
            .is_some_and(|s| s <= TARGET_TAKEOVER_S);
        rss && restart && takeover
    }

    /// The markdown table of docs/benchmarks.md "Scale".
    pub fn table(&self) -> String {
        let opt =
            |s: Option<f64>| s.map_or_else(|| "not in time".to_string(), |s| format!("{s:.2} s"));
        let met = |ok: bool| if ok { "met" } else { "missed" };
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let rss_max = max(&self.rss_mib).max(max(&self.rss_end_mib));
        let mut t = String::from("| figure | measured | target |\n| --- | --- | --- |\n");
        t += &format!(
            "| gateway RSS (each; with every sandbox and stream; at the end) | {} ; {} MiB | <= {TARGET_RSS_MIB:.0} MiB: {} |\n",
            mibs(&self.rss_mib),
            mibs(&self.rss_end_mib),
            met(rss_max <= TARGET_RSS_MIB)
        );
        for r in &self.restarts {
            t += &format!(
                "| restart of the {} (n{}; kill -9, start) to /readyz 200 | {} | <= {TARGET_RESTART_S:.0} s: {} |\n",
                r.role,
                r.node,
                opt(r.seconds),
                met(r.seconds.is_some_and(|s| s <= TARGET_RESTART_S))
            );
        }
        let k = &self.takeover;
        t += &format!(
            "| takeover of {} ({} sandboxes): kill to the last acknowledged by its new owner (first) | {} ({}) | <= {TARGET_TAKEOVER_S:.0} s: {} |\n",
            k.member,
            k.sandboxes,
            opt(k.seconds),
            opt(k.first_seconds),
            met(k.seconds.is_some_and(|s| s <= TARGET_TAKEOVER_S))
        );
        for (name, p) in [
            ("bulk creation", &self.push_bulk),
            ("quiet window", &self.push_quiet),
            ("one more sandbox", &self.push_one),
            ("takeover", &self.push_takeover),
        ] {
            t += &format!(
                "| push cost, {name}: sandbox records examined per pass ({} passes) | {:.1} | proportional to what changed (a rescan reads {}) |\n",
                p.passes, p.examined_per_pass, p.full_scan_per_pass
            );
        }
        t += &format!(
            "| gateway CPU over the quiet window (each) | {} s | |\n",
            self.quiet_cpu_s
                .iter()
                .map(|c| format!("{c:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        t += &format!(
            "| creation of the sandboxes; all shown acknowledged | {:.1} s; {:.1} s | |\n",
            self.create_s, self.converge_s
        );
        t
    }
}

fn mibs(v: &[f64]) -> String {
    v.iter()
        .map(|m| format!("{m:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes `report` as pretty JSON to `path` (creating its directory).
///
/// # Errors
/// When the file cannot be written.
pub fn write(path: &Path, report: &ScaleReport) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let json = serde_json::to_string_pretty(report).context("encoding the scale report")?;
    std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))
}

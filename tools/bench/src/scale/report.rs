//! The scale run's figures: [`ScaleReport`] (written as JSON, e.g.
//! `docs/benchmarks/scale.json`) and its markdown table against the issue's
//! targets (docs/benchmarks.md "Scale").

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// Most RSS a gateway may use (issue 30), MiB.
pub const TARGET_RSS_MIB: f64 = 512.0;
/// Longest a restarted gateway may take to `/readyz` 200, seconds.
pub const TARGET_RESTART_S: f64 = 3.0;
/// Longest from a killed member's TTL running out to the last of its
/// sandboxes acknowledged by a new owner, seconds.
pub const TARGET_AFTER_TTL_S: f64 = 3.0;
/// The heartbeat TTL at the gateway's default timing, seconds.
pub const HEARTBEAT_TTL_S: f64 = 2.0;
/// Most of one core the leader may use in the quiet window.
pub const TARGET_LEADER_CPU: f64 = 0.10;
/// Most of one core a follower may use in the quiet window.
pub const TARGET_FOLLOWER_CPU: f64 = 0.05;

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

/// Snapshots the gateways built during the run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Snapshots {
    /// Each gateway's latest snapshot, bytes (read before the restarts).
    pub size_bytes: Vec<f64>,
    /// Snapshots built, over the gateways.
    pub builds: u64,
    /// Mean time to build one (encode, write, sync), seconds.
    pub build_mean_s: f64,
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
    /// Each gateway's attached supervisors at the quiet window's start and
    /// end (`None`: its `/metrics` was unreadable).
    #[serde(default)]
    pub quiet_attached: Vec<(Option<u64>, Option<u64>)>,
    /// Member beats each gateway wrote over the quiet window (`None`:
    /// unreadable at its start or end, or a gateway without the counter).
    #[serde(default)]
    pub quiet_beats: Vec<Option<u64>>,
    /// Each gateway's supervisors sent away (to other gateways, for
    /// heartbeats not written or not applied) from its start to the quiet
    /// window's end (`None`: unreadable). A calm run sends none; a storm
    /// of elections and send-aways shows here first.
    #[serde(default)]
    pub sent_away: Vec<Option<u64>>,
    /// The highest raft term of any gateway at the quiet window's end: the
    /// group starts at term 1, so each term above it was an election
    /// (`None`: unreadable).
    #[serde(default)]
    pub quiet_end_term: Option<u64>,
    /// At the end, after the restarts: the highest raft term, each
    /// gateway's supervisors sent away since its last start, and the
    /// takeovers the gateway that was never restarted applied over the
    /// whole run (the killed member's are planned; any more are live
    /// members that expired).
    #[serde(default)]
    pub end: EndCounts,
    /// Push cost of one more sandbox (its launch and acknowledgement).
    pub push_one: Push,
    /// Push cost of the takeover.
    pub push_takeover: Push,
    /// The coordinator's cost (steps as passes) while the sandboxes were
    /// created.
    pub coordinator_bulk: Push,
    /// The coordinator's cost in the quiet window.
    pub coordinator_quiet: Push,
    /// The coordinator's cost over the takeover.
    pub coordinator_takeover: Push,
    /// Commands per log entry the leader proposed over the takeover (the
    /// takeovers share entries).
    pub takeover_commands_per_entry: f64,
    /// The leader's node id in the quiet window.
    pub quiet_leader: usize,
    /// Whether another gateway led at the window's end (the CPU figures
    /// then count as missed).
    pub quiet_leader_changed: bool,
    /// Sandboxes created in the timed creation (all but the first
    /// member's).
    pub created: usize,
    /// Each gateway's CPU seconds over the timed creation.
    pub create_cpu_s: Vec<f64>,
    /// The bench process's own CPU seconds over the timed creation (its
    /// clients and every scripted member).
    pub create_bench_cpu_s: f64,
    /// Snapshots.
    pub snapshots: Snapshots,
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
        rss && restart && self.takeover_met() && self.quiet_cpu_met()
    }

    /// From the killed member's TTL to the last of its sandboxes
    /// acknowledged, seconds.
    fn after_ttl(&self) -> Option<f64> {
        self.takeover
            .seconds
            .map(|s| (s - HEARTBEAT_TTL_S).max(0.0))
    }

    fn takeover_met(&self) -> bool {
        self.after_ttl().is_some_and(|s| s <= TARGET_AFTER_TTL_S)
    }

    /// The quiet window's length in seconds, as the run's settings say (0
    /// when missing).
    fn quiet_s(&self) -> f64 {
        self.settings
            .get("quiet_s")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0)
    }

    /// Each gateway's share of one core in the quiet window, with its
    /// role and target.
    fn quiet_shares(&self) -> Vec<(usize, &'static str, f64, f64)> {
        let window = self.quiet_s();
        self.quiet_cpu_s
            .iter()
            .enumerate()
            .map(|(i, cpu)| {
                let node = i + 1;
                let share = if window > 0.0 { cpu / window } else { f64::NAN };
                if node == self.quiet_leader {
                    (node, "leader", share, TARGET_LEADER_CPU)
                } else {
                    (node, "follower", share, TARGET_FOLLOWER_CPU)
                }
            })
            .collect()
    }

    /// "n1 2.00, n2 ..." for the table: each gateway's beats in the quiet
    /// window per supervisor attached at its end, per second ("?" where
    /// unreadable).
    fn beats_row(&self) -> String {
        let quiet_s = self.quiet_s();
        self.quiet_beats
            .iter()
            .zip(&self.quiet_attached)
            .enumerate()
            .map(|(i, (beats, (_, attached)))| match (beats, attached) {
                (Some(b), Some(a)) if *a > 0 && quiet_s > 0.0 => {
                    format!("n{} {:.2}", i + 1, *b as f64 / *a as f64 / quiet_s)
                }
                _ => format!("n{} ?", i + 1),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// "n1 667 → 667, n2 ..." for the table ("?" where unreadable).
    fn attached_row(&self) -> String {
        let show = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
        self.quiet_attached
            .iter()
            .enumerate()
            .map(|(i, (start, end))| format!("n{} {} → {}", i + 1, show(*start), show(*end)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Elections and send-aways from the start to the quiet window's end.
    fn calm_row(&self) -> String {
        let sent = per_node(&self.sent_away);
        let elections = self
            .quiet_end_term
            .map_or_else(|| "?".to_string(), |t| t.saturating_sub(1).to_string());
        format!(
            "| from the start to the quiet window's end: elections after the first (raft term − 1); supervisors sent away by each gateway | {elections}; {sent} | none (a calm run) |\n"
        )
    }

    /// Elections, send-aways and takeovers over the whole run.
    fn end_row(&self) -> String {
        let show = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
        let e = &self.end;
        let sent = per_node(&e.sent_away);
        format!(
            "| at the end, after the restarts: elections after the first; supervisors sent away by each gateway since its last start; takeovers applied over the run (by n{}, never restarted) | {}; {sent}; {} | takeovers: {} planned (the killed member's sandboxes); more are live members that expired |\n",
            e.takeovers_node,
            show(e.term.map(|t| t.saturating_sub(1))),
            show(e.takeovers),
            self.takeover.sandboxes,
        )
    }

    /// Heartbeat commands by outcome over the whole run.
    fn heartbeats_row(&self) -> String {
        let nodes = self
            .end
            .heartbeats
            .iter()
            .enumerate()
            .map(|(i, outcomes)| {
                let counts = outcomes
                    .iter()
                    .filter(|(outcome, n)| **n > 0 || outcome.as_str() == "written")
                    .map(|(outcome, n)| format!("{outcome} {n}"))
                    .collect::<Vec<_>>()
                    .join(" ");
                format!("n{} {counts}", i + 1)
            })
            .collect::<Vec<_>>()
            .join("; ");
        format!(
            "| at the end: each gateway's heartbeat commands since its last start, by outcome (zero outcomes left out) | {nodes} | all written (any other outcome: members' beats were late) |\n"
        )
    }

    fn quiet_cpu_met(&self) -> bool {
        let shares = self.quiet_shares();
        !self.quiet_leader_changed && !shares.is_empty() && shares.iter().all(|(_, _, s, t)| s <= t)
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
            "| takeover of {} ({} sandboxes): its TTL ({HEARTBEAT_TTL_S:.0} s) to the last acknowledged by its new owner (kill to first; to last) | {} ({}; {}) | <= {TARGET_AFTER_TTL_S:.0} s: {} |\n",
            k.member,
            k.sandboxes,
            opt(self.after_ttl()),
            opt(k.first_seconds),
            opt(k.seconds),
            met(self.takeover_met())
        );
        t += &format!(
            "| takeover: commands per log entry the leader proposed | {:.1} | batched (1: one command per entry) |\n",
            self.takeover_commands_per_entry
        );
        let changed = if self.quiet_leader_changed {
            " (the leader changed in the window)"
        } else {
            ""
        };
        for (node, role, share, target) in self.quiet_shares() {
            t += &format!(
                "| CPU of the {role} (n{node}) in the quiet window{changed}, share of one core | {:.1} % | <= {:.0} %: {} |\n",
                share * 100.0,
                target * 100.0,
                met(share <= target && !self.quiet_leader_changed)
            );
        }
        t += &format!(
            "| supervisors attached to each gateway in the quiet window (at its start → end) | {} | |\n",
            self.attached_row()
        );
        t += &format!(
            "| member beats each gateway wrote in the quiet window, per attached supervisor per second | {} | (4 when every member was named at every tick) |\n",
            self.beats_row()
        );
        t += &self.calm_row();
        t += &self.end_row();
        t += &self.heartbeats_row();
        for (name, p) in [
            ("bulk creation", &self.coordinator_bulk),
            ("quiet window", &self.coordinator_quiet),
            ("takeover", &self.coordinator_takeover),
        ] {
            t += &format!(
                "| coordinator cost, {name}: sandbox records examined per step ({} steps) | {:.1} | proportional to what changed (a rescan reads {}) |\n",
                p.passes, p.examined_per_pass, p.full_scan_per_pass
            );
        }
        t += &self.cost_rows();
        t
    }

    /// The rows of the push and coordinator costs, CPU, creation and
    /// snapshots.
    fn cost_rows(&self) -> String {
        let mut t = String::new();
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
        let rate = if self.create_s > 0.0 {
            self.created as f64 / self.create_s
        } else {
            0.0
        };
        t += &format!(
            "| creation of {} sandboxes; all shown acknowledged | {:.1} s ({rate:.0} per second); {:.1} s | |\n",
            self.created, self.create_s, self.converge_s
        );
        let share = |cpu: f64| {
            if self.create_s > 0.0 {
                format!("{:.0} %", cpu / self.create_s * 100.0)
            } else {
                "-".to_string()
            }
        };
        t += &format!(
            "| CPU over the creation, share of one core: gateways (each); the bench's clients and members | {}; {} | |\n",
            self.create_cpu_s
                .iter()
                .map(|c| share(*c))
                .collect::<Vec<_>>()
                .join(", "),
            share(self.create_bench_cpu_s)
        );
        let sn = &self.snapshots;
        t += &format!(
            "| snapshot: size (each gateway's latest); builds, mean build time | {} MiB; {}, {:.2} s | |\n",
            sn.size_bytes
                .iter()
                .map(|b| format!("{:.1}", b / (1024.0 * 1024.0)))
                .collect::<Vec<_>>()
                .join(", "),
            sn.builds,
            sn.build_mean_s
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

/// "n1 3, n2 0, n3 ?": one count per gateway, in node order ("?" where
/// unreadable).
fn per_node(values: &[Option<u64>]) -> String {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let v = v.map_or_else(|| "?".to_string(), |v| v.to_string());
            format!("n{} {v}", i + 1)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the end of a scale run counts (see [`ScaleReport::end`]).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct EndCounts {
    /// The highest raft term of any gateway.
    pub term: Option<u64>,
    /// Each gateway's supervisors sent away since its last start.
    pub sent_away: Vec<Option<u64>>,
    /// Each gateway's heartbeat commands since its last start, by outcome
    /// (`written`, `timed_out_leading`, `timed_out_following`, `no_leader`,
    /// `dropped`, `failed`).
    #[serde(default)]
    pub heartbeats: Vec<std::collections::BTreeMap<String, u64>>,
    /// The gateway never restarted (0: none).
    pub takeovers_node: usize,
    /// Takeovers it applied over the whole run.
    pub takeovers: Option<u64>,
}

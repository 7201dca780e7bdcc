//! The `openshell-bench soak` command line, turned into [`SoakOptions`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::SoakOptions;

/// `openshell-bench soak` (defaults: issue 16's acceptance soak).
#[derive(Args, Clone, Debug)]
pub struct SoakArgs {
    /// Gateways (3 or 5).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Seed of the members and clients (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Seconds over which the sandboxes are created.
    #[arg(long, default_value_t = 1800)]
    pub duration_s: u64,
    /// Sandboxes created and deleted in all.
    #[arg(long, default_value_t = 100_000)]
    pub sandboxes: u64,
    /// Most sandboxes live at once (the oldest is deleted beyond it).
    #[arg(long, default_value_t = 500)]
    pub max_live: usize,
    /// Concurrent sandbox clients.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Pool members alive at once, each leaving and coming back under a
    /// new id every --member-life-s.
    #[arg(long, default_value_t = 50)]
    pub members: usize,
    /// Slots per member.
    #[arg(long, default_value_t = 20)]
    pub capacity: u32,
    /// How long one member generation lives, seconds (min,max).
    #[arg(long, value_delimiter = ',', default_values_t = [120, 240])]
    pub member_life_s: Vec<u64>,
    /// The gateways' --retention-ticks (0: do not pass the flag, for a
    /// gateway without it; the verdict window then starts at the first
    /// delete).
    #[arg(long, default_value_t = 240)]
    pub retention_ticks: u64,
    /// The gateways' --tick-interval-ms.
    #[arg(long, default_value_t = 250)]
    pub tick_ms: u64,
    /// The gateways' --heartbeat-ttl-ms.
    #[arg(long, default_value_t = 4000)]
    pub heartbeat_ttl_ms: u64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 10)]
    pub sample_every_s: u64,
    /// A metric is flat when the last third of the window is within this
    /// many percent of the middle third (or twice its noise).
    #[arg(long, default_value_t = 10.0)]
    pub tolerance_pct: f64,
    /// Seconds of sampling after the churn ended, beyond one retention
    /// period.
    #[arg(long, default_value_t = 60)]
    pub cool_down_s: u64,
    /// Client request timeout, ms.
    #[arg(long, default_value_t = 10_000)]
    pub client_timeout_ms: u64,
    /// The openshell-gateway binary (default: target/debug/openshell-gateway
    /// of the workspace).
    #[arg(long)]
    pub gateway_bin: Option<PathBuf>,
    /// Soak directory (default: jepsen/runs/soak-<timestamp>).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

impl SoakArgs {
    /// The options, with the workspace root `root` for the defaults.
    ///
    /// # Errors
    /// A value out of range, naming its flag.
    pub fn options(&self, root: &std::path::Path) -> Result<SoakOptions, String> {
        if self.nodes != 3 && self.nodes != 5 {
            return Err("--nodes must be 3 or 5".into());
        }
        let life = match self.member_life_s.as_slice() {
            [a] if *a > 0 => (*a, *a),
            [a, b] if *a > 0 && b >= a => (*a, *b),
            _ => return Err("--member-life-s takes min,max seconds (0 < min <= max)".into()),
        };
        if self.sandboxes == 0 || self.max_live == 0 || self.members == 0 {
            return Err("--sandboxes, --max-live and --members must be at least 1".into());
        }
        if self.sample_every_s == 0 || self.duration_s == 0 {
            return Err("--sample-every-s and --duration-s must be at least 1".into());
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Ok(SoakOptions {
            nodes: self.nodes,
            seed: self.seed.unwrap_or(now),
            duration: Duration::from_secs(self.duration_s),
            sandboxes: self.sandboxes,
            max_live: self.max_live,
            concurrency: self.concurrency.max(1),
            members: self.members,
            capacity: self.capacity.max(1),
            member_life: (Duration::from_secs(life.0), Duration::from_secs(life.1)),
            retention_ticks: (self.retention_ticks > 0).then_some(self.retention_ticks),
            tick_ms: self.tick_ms,
            heartbeat_ttl_ms: self.heartbeat_ttl_ms,
            sample_every: Duration::from_secs(self.sample_every_s),
            tolerance_pct: self.tolerance_pct,
            cool_down: Duration::from_secs(self.cool_down_s),
            gateway_bin: self
                .gateway_bin
                .clone()
                .unwrap_or_else(|| root.join("target/debug/openshell-gateway")),
            out: self
                .out
                .clone()
                .unwrap_or_else(|| root.join(format!("jepsen/runs/soak-{now}"))),
            client_timeout: Duration::from_millis(self.client_timeout_ms),
        })
    }
}

//! The `openshell-bench scale` command line, turned into [`ScaleOptions`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::ScaleOptions;

/// `openshell-bench scale` (defaults: issue 17's scale).
#[derive(Args, Clone, Debug)]
pub struct ScaleArgs {
    /// Gateways.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Scripted members (supervisor streams).
    #[arg(long, default_value_t = 200)]
    pub members: usize,
    /// Sandboxes.
    #[arg(long, default_value_t = 10_000)]
    pub sandboxes: usize,
    /// Slots per member (default: twice an even share, so a killed
    /// member's sandboxes fit elsewhere).
    #[arg(long)]
    pub capacity: Option<u32>,
    /// Concurrent create clients.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Sandboxes the killed member holds: member 0 attaches alone first
    /// and these are created on it, before the others attach.
    #[arg(long, default_value_t = 500)]
    pub takeover_size: usize,
    /// Seconds of the quiet window.
    #[arg(long, default_value_t = 10)]
    pub quiet_s: u64,
    /// Longest wait for one step, seconds.
    #[arg(long, default_value_t = 300)]
    pub step_timeout_s: u64,
    /// The openshell-gateway binary (default: target/release/openshell-gateway
    /// of the workspace).
    #[arg(long)]
    pub gateway_bin: Option<PathBuf>,
    /// The gateways' `worker_threads` (default: the gateway's own, one per
    /// CPU).
    #[arg(long)]
    pub gateway_worker_threads: Option<u64>,
    /// The members' HTTP/2 pings: `as-supervisor` (a ping after 500 ms
    /// without a frame read, as `openshell-supervisor` sends them) or `off`
    /// (what the gateways spend on statuses alone; not a deployment's cost).
    #[arg(long, default_value = "as-supervisor", value_parser = ["as-supervisor", "off"])]
    pub member_pings: String,
    /// Where the members connect from: `many` (spread over 100 addresses
    /// of the run's network, as supervisors on their own machines or pods
    /// are: the gateways' per-address limits see at most a few dozen
    /// members behind each) or `one` (all from the harness's one address,
    /// where the gateways' limit of 128 pending handshakes per address
    /// refuses the rest of a crowd).
    #[arg(long, default_value = "many", value_parser = ["many", "one"])]
    pub member_addresses: String,
    /// Run directory (default: jepsen/runs/scale-<timestamp>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also write the report here (e.g. docs/benchmarks/scale.json).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

impl ScaleArgs {
    /// The options, with the workspace root `root` for the defaults.
    ///
    /// # Errors
    /// A value out of range, naming its flag.
    pub fn options(&self, root: &std::path::Path) -> Result<ScaleOptions, String> {
        if self.nodes == 0 || self.members < 2 || self.sandboxes == 0 {
            return Err("--nodes and --sandboxes must be at least 1, --members at least 2".into());
        }
        let even = self.sandboxes.div_ceil(self.members);
        let capacity = self
            .capacity
            .unwrap_or_else(|| u32::try_from(2 * even + 8).unwrap_or(u32::MAX));
        if self.takeover_size == 0 || self.takeover_size >= self.sandboxes {
            return Err("--takeover-size must be at least 1 and below --sandboxes".into());
        }
        if (capacity as usize) * (self.members - 1) < self.sandboxes + 1 {
            return Err("--capacity too small: the members but one must hold every sandbox".into());
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Ok(ScaleOptions {
            nodes: self.nodes,
            members: self.members,
            sandboxes: self.sandboxes,
            capacity,
            concurrency: self.concurrency.max(1),
            takeover_size: self.takeover_size,
            quiet: Duration::from_secs(self.quiet_s),
            gateway_bin: self
                .gateway_bin
                .clone()
                .unwrap_or_else(|| root.join("target/release/openshell-gateway")),
            out: self
                .out
                .clone()
                .unwrap_or_else(|| root.join(format!("jepsen/runs/scale-{now}"))),
            json: self.json.clone(),
            gateway_worker_threads: self.gateway_worker_threads,
            member_pings: if self.member_pings == "off" {
                testkit::member::Pings::Off
            } else {
                testkit::member::Pings::AsSupervisor
            },
            step_timeout: Duration::from_secs(self.step_timeout_s.max(1)),
            member_many_addresses: self.member_addresses == "many",
        })
    }
}

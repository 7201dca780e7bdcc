//! `openshell-bench scale`: the scale a real pool needs (issue 17
//! "Scale"), measured on real processes.
//!
//! Three real `openshell-gateway` processes run in their network namespaces
//! exactly as in a Jepsen run ([`jepsen::cluster`]: TLS with the run's CA,
//! admin token, a credential per member) at their default raft and pool
//! timing (heartbeat TTL 2 s), each serving `/readyz` and `/metrics` on
//! [`measure::HTTP_PORT`]. Then, in order:
//!
//! 1. [`members`]: `members` scripted supervisors (200 by default; real
//!    `SupervisorHost.Attach` streams with credentials), member `i` on
//!    gateway `i mod 3`, each acknowledging every term it is streamed;
//! 2. `sandboxes` sandboxes (10,000) created through `PoolAdmin`
//!    (`--sandbox-driver none`: records only), until every one is shown
//!    acknowledged on its owner's stream;
//! 3. the push cost: sandbox records the gateways' push passes examined
//!    (`openshell_pool_push_sandboxes_examined_total`) per pass, during the
//!    bulk creation, a quiet window (heartbeats and ticks only, with the
//!    gateways' CPU time), one more sandbox, and the takeover;
//! 4. every gateway's RSS (`VmRSS`);
//! 5. a takeover: the member holding closest to 50 sandboxes is killed
//!    (its stream dropped, no `HostLeave`); the time from the kill to the
//!    last of its sandboxes shown acknowledged on its new owner's stream;
//! 6. restarts: `kill -9` of a follower, start, time to `/readyz` 200; the
//!    same for the leader.
//!
//! [`report`] writes the JSON (`--json`, e.g. `docs/benchmarks/scale.json`)
//! and prints the table for docs/benchmarks.md "Scale".

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use jepsen::cluster::{Cluster, GatewayOptions};
use jepsen::net;
use jepsen::security::Security;
use local_cluster::gateway::{GatewaySection, SandboxDriverSection};

mod args;
pub mod measure;
pub mod members;
pub mod report;
mod steps;

pub use args::ScaleArgs;
use members::{MemberPlan, ScaleMembers};
pub use report::{Push, Restart, ScaleReport, Snapshots, Takeover};

/// Everything a scale run needs.
#[derive(Clone, Debug)]
pub struct ScaleOptions {
    /// Gateways.
    pub nodes: usize,
    /// Scripted members (supervisor streams).
    pub members: usize,
    /// Sandboxes created.
    pub sandboxes: usize,
    /// Slots per member.
    pub capacity: u32,
    /// Concurrent create clients.
    pub concurrency: usize,
    /// Sandboxes the killed member should hold (the member closest to it
    /// is chosen).
    pub takeover_size: usize,
    /// Seconds of the quiet window (push cost and CPU with nothing
    /// changing).
    pub quiet: Duration,
    /// The `openshell-gateway` binary.
    pub gateway_bin: PathBuf,
    /// The run directory (must be empty or absent).
    pub out: PathBuf,
    /// Also write the report here (e.g. `docs/benchmarks/scale.json`).
    pub json: Option<PathBuf>,
    /// Longest wait for any one step (creation, convergence, takeover,
    /// readiness).
    pub step_timeout: Duration,
    /// The gateways' `worker_threads` (`None`: the gateway's default).
    pub gateway_worker_threads: Option<u64>,
    /// Whether the members ping as supervisors do (the faithful default)
    /// or not at all (the statuses alone).
    pub member_pings: testkit::member::Pings,
    /// Whether the members connect from many addresses of the run's
    /// network (the faithful default: `jepsen::net::Net::
    /// add_client_addresses`) or all from the harness's one address.
    pub member_many_addresses: bool,
}

impl ScaleOptions {
    /// The settings as recorded in the report.
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "nodes": self.nodes,
            "members": self.members,
            "sandboxes": self.sandboxes,
            "capacity": self.capacity,
            "concurrency": self.concurrency,
            "takeover_size": self.takeover_size,
            "quiet_s": self.quiet.as_secs_f64(),
            "gateway_bin": self.gateway_bin.display().to_string(),
            "gateway_worker_threads": self.gateway_worker_threads,
            "member_pings": match self.member_pings {
                testkit::member::Pings::AsSupervisor => "as-supervisor",
                testkit::member::Pings::Off => "off",
            },
            "member_addresses": if self.member_many_addresses { "many" } else { "one" },
            "raft_and_pool_timing": "gateway defaults (heartbeat 50 ms, election 150-300 ms, tick 250 ms, heartbeat TTL 2 s, HostStatus at the interval HelloAccepted gives: 500 ms)",
            "sandbox_driver": "none (PoolAdmin.CreateSandbox; scripted members ack the terms)",
            "security": "tls",
        })
    }
}

/// Runs one scale measurement.
///
/// # Errors
/// When the environment cannot be set up (preflight, network, binary), the
/// cluster never elects a leader, or a step does not finish within
/// `step_timeout`.
pub async fn run(options: ScaleOptions) -> anyhow::Result<ScaleReport> {
    jepsen::run::preflight()?;
    raise_open_file_limit(options.members);
    let dir = crate::run_dir(&options.out, "scale")?;
    let run_id = format!(
        "{:06x}",
        (u64::from(std::process::id()) ^ 0x5ca1e) & 0xff_ffff
    );
    let prefix = format!("{}{run_id}-", net::PREFIX);
    let lock = net::RunLock::acquire(&run_id)?;
    let ctrl_c = {
        let pid_file = lock.path().to_path_buf();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("openshell-bench scale: interrupted; cleaning up {prefix}*");
                let _ = net::clean(&prefix);
                let _ = std::fs::remove_file(&pid_file);
                std::process::exit(130);
            }
        })
    };
    let result = scale(&options, &dir, &run_id).await;
    ctrl_c.abort();
    drop(lock);
    let report = result?;
    report::write(&dir.join("scale.json"), &report)?;
    if let Some(path) = &options.json {
        report::write(path, &report)?;
    }
    Ok(report)
}

/// Starts the cluster (TLS, a credential per member, default timing, the
/// HTTP endpoints on [`measure::HTTP_PORT`]).
async fn start_cluster(
    options: &ScaleOptions,
    dir: &std::path::Path,
    run_id: &str,
) -> anyhow::Result<Arc<Cluster>> {
    let gateway = GatewayOptions {
        bin: options.gateway_bin.clone(),
        // The gateway's own defaults (gateway-plugin/src/config.rs).
        heartbeat_ms: 50,
        election_ms: (150, 300),
        faketime: false,
        client_timeout: Duration::from_secs(10),
        config: GatewaySection {
            sandbox_driver: Some(SandboxDriverSection {
                kind: Some("none".into()),
                ..SandboxDriverSection::default()
            }),
            http_listen_addr: Some(format!("0.0.0.0:{}", measure::HTTP_PORT)),
            // Every scripted member dials from this host's one address: the
            // per-address handshake rate of a real deployment (one address
            // per supervisor Pod) would pace their attaches.
            tls: Some(crate::one_address_for_many_clients()),
            worker_threads: options.gateway_worker_threads,
            ..GatewaySection::default()
        },
        security: Security::Tls,
        members: (0..options.members).map(members::member_id).collect(),
    };
    let cluster = Arc::new(Cluster::create(run_id, options.nodes, dir, gateway).await?);
    cluster.start_all()?;
    let leader = cluster
        .wait_leader(Duration::from_secs(60), "initial election")
        .await
        .context("the cluster did not elect a leader; see the node logs")?;
    tracing::info!(leader, dir = %dir.display(), "scale cluster up");
    Ok(cluster)
}

async fn scale(
    options: &ScaleOptions,
    dir: &std::path::Path,
    run_id: &str,
) -> anyhow::Result<ScaleReport> {
    let cluster = start_cluster(options, dir, run_id).await?;
    let mut report = ScaleReport {
        settings: options.json(),
        load_before: measure::load_average(),
        ..ScaleReport::default()
    };
    let plan = MemberPlan {
        members: options.members,
        capacity: options.capacity,
        gateways: cluster.nodes.iter().map(|n| n.addr.clone()).collect(),
        security: cluster
            .credentials
            .as_ref()
            .map(jepsen::security::Credentials::member_security),
        first_capacity: u32::try_from(options.takeover_size).unwrap_or(u32::MAX),
        pings: options.member_pings,
        sources: if options.member_many_addresses {
            cluster
                .net
                .add_client_addresses(jepsen::net::CLIENT_ADDRESSES)?
        } else {
            Vec::new()
        },
    };
    let mut members = ScaleMembers::start(plan);
    let result = steps::all(options, &cluster, &mut members, &mut report).await;
    report.load_after = measure::load_average();
    drop(members);
    drop(cluster);
    result.map(|()| report)
}

/// Raises this process's soft limit of open files to its hard limit (the
/// gateways it starts inherit it): every scripted member holds a
/// connection here and on a gateway, and a shell's default of 1,024 does
/// not hold 2,000 members. Warns when even the hard limit is short.
fn raise_open_file_limit(members: usize) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit write and read the struct given.
    let raised = unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0
        }
    };
    let needed = (members as u64).saturating_mul(2).saturating_add(1024);
    if !raised || limit.rlim_cur < needed {
        tracing::warn!(
            limit = limit.rlim_cur,
            needed,
            "the open-file limit may be short for this many members (ulimit -n)"
        );
    }
}

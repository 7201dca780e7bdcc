//! `openshell-pool dev`: a complete local system on loopback, in the
//! foreground, on embedded defaults: three gateways, two supervisors and a
//! few demo sandboxes, all real processes. Data lives under one directory;
//! running it again resumes that data. The gateways launch the sandbox
//! runtimes (the leader, through the process driver, into
//! `<data dir>/runtimes/`, a network namespace per runtime as root:
//! [`runtimes`]); the supervisors attach to them over the network. Ctrl-C
//! (or SIGTERM) stops every process it started, sandbox runtimes included
//! ([`children`]), and removes their namespaces.
//!
//! It runs secure, as a deployment does: TLS on every gRPC port (a client
//! port and a mutual-TLS peer port per gateway), a signing key its
//! supervisors trust, an admin token and a credential per supervisor, all
//! generated under `<data dir>/tls/` on the first run ([`secure`]);
//! `<data dir>/env` points the CLI at them.
//!
//! - [`run`]: locate the binaries, prepare the TLS material, start the
//!   gateways, [`bring_up`] the rest, print what to try, wait for Ctrl-C,
//!   stop everything.
//! - [`bring_up`]: wait for a leader, start the supervisors, launch the demo
//!   sandboxes and wait until each runs with a recorded runtime address
//!   (talking to the gateways over gRPC only).

pub mod children;
mod demo;
pub mod runtimes;
pub mod secure;

use std::path::{Path, PathBuf};
use std::time::Duration;

use proto::pool_types::MemberState;

use crate::{CliError, Gateway};
use children::Children;
use local_cluster::gateway::GatewaySpec;
use local_cluster::supervisor::SupervisorSpec;

/// `dev` options.
#[derive(clap::Args, Debug)]
pub struct DevArgs {
    /// Where the cluster keeps its data and logs (created if absent).
    #[arg(long, default_value = "openshell-dev")]
    pub data_dir: PathBuf,
    /// First gRPC port; gateways serve clients on PORT..PORT+2 and their
    /// peers on PORT+10..PORT+12, their HTTP endpoints on PORT+100..,
    /// supervisors' health endpoints on PORT+200...
    #[arg(long, default_value_t = 7001)]
    pub base_port: u16,
    /// Demo sandboxes to create on the first run.
    #[arg(long, default_value_t = 3)]
    pub sandboxes: u32,
}

/// The binaries `dev` starts, found next to `openshell-pool`.
struct Bins {
    gateway: PathBuf,
    supervisor: PathBuf,
    runtime: PathBuf,
    pool: PathBuf,
}

impl Bins {
    fn locate() -> Result<Self, CliError> {
        Ok(Bins {
            gateway: sibling("openshell-gateway")?,
            supervisor: sibling("openshell-supervisor")?,
            runtime: sibling("openshell-sandbox-runtime")?,
            pool: sibling("openshell-pool")?,
        })
    }
}

fn sibling(name: &str) -> Result<PathBuf, CliError> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Local(format!("cannot find this binary: {e}")))?;
    let path = exe
        .parent()
        .map(|d| d.join(name))
        .unwrap_or_else(|| PathBuf::from(name));
    if path.exists() {
        Ok(path)
    } else {
        Err(CliError::Local(format!(
            "{} not found next to openshell-pool; build every binary first (`cargo build --bins`)",
            path.display()
        )))
    }
}

/// The supervisors' member ids.
const MEMBERS: [&str; 2] = ["s1", "s2"];

/// Offset of the gateways' peer ports from their client ports.
const PEER_OFFSET: u16 = 10;

/// `127.0.0.1:<base + offset>`.
fn port(args: &DevArgs, offset: u16) -> String {
    format!("127.0.0.1:{}", args.base_port + offset)
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                eprintln!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term => {},
    }
}

/// Runs the dev cluster until Ctrl-C.
///
/// # Errors
/// When a binary is missing, a port is taken, or the cluster does not come up.
pub async fn run(args: DevArgs) -> Result<(), CliError> {
    let bins = Bins::locate()?;
    raft_store::modes::create_private_dir_all(&args.data_dir)
        .map_err(|e| CliError::Local(format!("creating {}: {e}", args.data_dir.display())))?;
    let dir = args
        .data_dir
        .canonicalize()
        .map_err(|e| CliError::Local(e.to_string()))?;
    let _lock = runtimes::DevLock::take(&dir)?;
    let first_run = !dir.join("gateway-1").exists();
    if !first_run && !dir.join("tls").join("ca.crt").exists() {
        return Err(CliError::Local(format!(
            "{} holds a cluster of an older, insecure `openshell-pool dev` (no tls/ directory; its raft \
             membership names the gateways' client ports, which now serve TLS apart from the peer ports): \
             remove {} (`rm -r {}`) and run again",
            dir.display(),
            args.data_dir.display(),
            args.data_dir.display()
        )));
    }
    // Once it is known to be a directory dev runs on (not refused above).
    if let Some(mode) = raft_store::modes::open_to_others(&dir) {
        eprintln!(
            "warning: {} is mode {mode:04o}: other local users can read its logs and the gateways' \
             data; run `chmod 700 {}`",
            dir.display(),
            dir.display()
        );
    }
    let secrets = secure::prepare(&dir.join("tls"), 3, &MEMBERS)?;
    let endpoints: Vec<String> = (0..3).map(|i| port(&args, i)).collect();
    secure::write_env(&dir.join("env"), &secrets, &endpoints)?;
    // The runtimes the gateways launch are reparented to this process when
    // their gateway exits, so that stopping can reach them by pid.
    children::become_subreaper()
        .map_err(|e| CliError::Local(format!("cannot become a child subreaper: {e}")))?;
    let earlier = runtimes::count(&dir.join(runtimes::DIR));
    let mut children = Children::with_runtimes(runtimes::Runtimes {
        dir: dir.join(runtimes::DIR),
        runtime_bin: bins.runtime.clone(),
    });
    start_gateways(&args, &dir, first_run, &secrets, &bins, &mut children)?;
    // Ctrl-C during start-up stops everything too.
    let interrupted = tokio::select! {
        result = bring_up(&args, &dir, &endpoints, &secrets, &bins, &mut children) => match result {
            Ok(()) => false,
            Err(e) => {
                children.stop().await;
                return Err(e);
            }
        },
        () = shutdown_signal() => true,
    };
    if interrupted {
        eprintln!("interrupted during start-up; stopping");
        children.stop().await;
        return Ok(());
    }
    if !first_run {
        println!(
            "Resumed the data in {}; the demo sandboxes were started afresh",
            dir.display()
        );
    }
    if earlier > 0 {
        println!(
            "Found {earlier} runtime(s) of an earlier run in {}: the leader adopted those still \
             alive; Ctrl-C stops them with the others",
            dir.join(runtimes::DIR).display()
        );
    }
    print_banner(&args, &dir, &endpoints, &bins.pool);
    tokio::select! {
        () = shutdown_signal() => {}
        () = children.report_exits() => {}
    }
    eprintln!("stopping...");
    children.stop().await;
    eprintln!(
        "stopped; data kept in {} (run again to resume)",
        dir.display()
    );
    Ok(())
}

/// Starts the three gateways, secure (on the first run with the initial
/// voters, at their peer ports), each with the process driver over the one
/// runtime directory (whichever leads launches the runtimes).
fn start_gateways(
    args: &DevArgs,
    dir: &Path,
    first_run: bool,
    secrets: &secure::Secrets,
    bins: &Bins,
    children: &mut Children,
) -> Result<(), CliError> {
    let peers: Vec<String> = (0..3u16).map(|i| port(args, PEER_OFFSET + i)).collect();
    for (i, issued) in (0..3u16).zip(&secrets.gateways) {
        let id = u64::from(i) + 1;
        let data_dir = dir.join(format!("gateway-{id}"));
        let mut spec = GatewaySpec::new(id, &port(args, i), &data_dir, "openshell-dev")
            .secured(&secrets.gateway_files(), issued)
            .peer_listen(&peers[usize::from(i)])
            .http_listen(&port(args, 100 + i))
            .process_driver(&dir.join(runtimes::DIR), &bins.runtime, "auto")
            // Runtimes re-read the supervisors' file: a key rotation
            // reaches them.
            .runtime_trusted_keys(&secrets.trusted_keys);
        if first_run {
            spec = spec.initial_voters((1..).zip(peers.iter().map(String::as_str)));
        }
        let config = dir.join(format!("gateway-{id}.toml"));
        let gw_args = spec
            .write(&config)
            .map_err(|e| CliError::Local(e.to_string()))?;
        children.spawn(
            format!("gateway {id}"),
            &bins.gateway,
            &gw_args,
            &dir.join(format!("gateway-{id}.log")),
        )?;
    }
    Ok(())
}

/// Prints where everything is and what to try.
fn print_banner(args: &DevArgs, dir: &Path, endpoints: &[String], pool_bin: &Path) {
    let pool = pool_bin.display().to_string();
    println!(
        "OpenShell pool dev cluster is up, over TLS (data and logs in {})",
        dir.display()
    );
    println!("  gateways (gRPC, TLS):         {}", endpoints.join(" "));
    println!(
        "  gateways (peers, mutual TLS): {}",
        (PEER_OFFSET..PEER_OFFSET + 3)
            .map(|i| port(args, i))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "  gateways (HTTP):              {}  (/healthz /readyz /metrics)",
        (100..103)
            .map(|i| port(args, i))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "  supervisors:                  s1 s2 (health on {} {})",
        port(args, 200),
        port(args, 201)
    );
    println!(
        "  sandbox runtimes:             {}  (launched by the leader; <name>/runtime.log)",
        dir.join(runtimes::DIR).display()
    );
    println!(
        "  CA, certificates, signing key, tokens: {}",
        dir.join("tls").display()
    );
    println!();
    println!("Try, in another shell (the env file sets the CA, token and endpoints):");
    println!("  source {}", args.data_dir.join("env").display());
    println!("  {pool} raft status");
    println!("  {pool} pool status");
    println!("  {pool} sandbox list");
    println!("  {pool} sandbox exec demo-1 -- demo-read");
    println!();
    println!("Ctrl-C stops every process this command started.");
}

/// Waits for a leader, starts the supervisors, waits for them to attach,
/// and launches the demo sandboxes.
async fn bring_up(
    args: &DevArgs,
    dir: &Path,
    endpoints: &[String],
    secrets: &secure::Secrets,
    bins: &Bins,
    children: &mut Children,
) -> Result<(), CliError> {
    let tls = proto::tls::ClientTls::load(&secrets.ca, None)
        .map_err(|e| CliError::Local(e.to_string()))?;
    let token = proto::secret::read_secret_file("--token-file", &secrets.admin_token)
        .map_err(|e| CliError::Local(e.to_string()))?;
    let gw = Gateway::new(endpoints.to_vec(), Some(token.into()), Some(tls))?;
    wait_until("a gateway leader", Duration::from_secs(30), || async {
        let s = gw.client().cluster_status(false).await;
        matches!(s, Ok(r) if r.leader_id != 0)
    })
    .await?;
    start_supervisors(args, dir, endpoints, secrets, bins, children)?;
    wait_until("both supervisors attached", Duration::from_secs(30), || async {
        matches!(demo::pool_status(&gw).await, Ok(s) if s.members.iter().filter(|m| m.state() == MemberState::Active || m.state() == MemberState::Draining)
            .filter(|m| m.ticks_since_heartbeat <= 2).count() >= 2)
    })
    .await?;
    let launched = demo::launch_sandboxes(&gw, args.sandboxes).await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        // A demo sandbox that failed can never run: say which and why at
        // once rather than wait out the minute.
        if let Ok(status) = demo::pool_status(&gw).await {
            if demo::all_running(&status, &launched)? {
                return Ok(());
            }
        }
        if std::time::Instant::now() > deadline {
            return Err(CliError::Local(
                "timed out waiting for the demo sandboxes to run; see the logs in the data directory"
                    .into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts supervisors `s1` and `s2`, attached to every gateway over TLS,
/// each with its own credential and the trusted grant key. They start no
/// runtimes: they dial the ones the leader launched, at the endpoints the
/// replicated state records.
fn start_supervisors(
    args: &DevArgs,
    dir: &Path,
    endpoints: &[String],
    secrets: &secure::Secrets,
    bins: &Bins,
    children: &mut Children,
) -> Result<(), CliError> {
    for (i, member) in (0..2u16).zip(MEMBERS) {
        let member = member.to_string();
        let mut spec = SupervisorSpec::new(&member, endpoints.to_vec());
        spec.uid = format!("dev-{member}");
        spec.http_listen = Some(port(args, 200 + i));
        spec.security = secrets.supervisor_security(&member);
        let sup_args = spec.args();
        children.spawn(
            format!("supervisor {member}"),
            &bins.supervisor,
            &sup_args,
            &dir.join(format!("supervisor-{member}.log")),
        )?;
    }
    Ok(())
}

async fn wait_until<F, Fut>(what: &str, within: Duration, mut check: F) -> Result<(), CliError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + within;
    while !check().await {
        if std::time::Instant::now() > deadline {
            return Err(CliError::Local(format!(
                "timed out waiting for {what}; see the logs in the data directory"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

//! `openshell-pool dev`: a complete local system on loopback, in the
//! foreground, on embedded defaults: three gateways, two supervisors and a
//! few demo sandboxes, all real processes. Data lives under one directory;
//! running it again resumes that data. Ctrl-C (or SIGTERM) stops every
//! process it started, sandbox runtimes included.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use proto::cluster::cluster_admin_client::ClusterAdminClient;
use proto::cluster::StatusRequest;
use proto::pool_admin::pool_admin_client::PoolAdminClient;
use proto::pool_admin::{
    CreateSandboxRequest, DeleteSandboxRequest, GetSupervisorPoolStatusRequest,
};

use super::CliError;

/// `dev` options.
#[derive(clap::Args, Debug)]
pub struct DevArgs {
    /// Where the cluster keeps its data and logs (created if absent).
    #[arg(long, default_value = "openshell-dev")]
    pub data_dir: PathBuf,
    /// First gRPC port; gateways use PORT..PORT+2, their HTTP endpoints
    /// PORT+100.., supervisors' health endpoints PORT+200...
    #[arg(long, default_value_t = 7001)]
    pub base_port: u16,
    /// Demo sandboxes to create on the first run.
    #[arg(long, default_value_t = 3)]
    pub sandboxes: u32,
}

/// Children that are killed when dropped.
struct Children(Vec<(String, Child)>);

impl Children {
    fn stop(&mut self, runtimes: &Path) {
        for (_, child) in &self.0 {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        for (name, child) in &mut self.0 {
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    _ if Instant::now() > deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        eprintln!("killed {name}");
                        break;
                    }
                    _ => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        }
        self.0.clear();
        // Runtimes (and their workloads) were started by the supervisors.
        let _ = Command::new("pkill")
            .args(["-TERM", "-f", &runtimes.display().to_string()])
            .status();
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

fn spawn(name: &str, bin: &Path, args: &[String], log: &Path) -> Result<Child, CliError> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| CliError::Local(format!("log file {}: {e}", log.display())))?;
    let err = file
        .try_clone()
        .map_err(|e| CliError::Local(e.to_string()))?;
    Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .spawn()
        .map_err(|e| CliError::Local(format!("starting {name} ({}): {e}", bin.display())))
}

/// Runs the dev cluster until Ctrl-C.
///
/// # Errors
/// When a binary is missing, a port is taken, or the cluster does not come up.
pub async fn run(args: DevArgs) -> Result<(), CliError> {
    let gateway_bin = sibling("openshell-gateway")?;
    let supervisor_bin = sibling("openshell-supervisor")?;
    let runtime_bin = sibling("openshell-sandbox-runtime")?;
    let pool_bin = sibling("openshell-pool")?;
    std::fs::create_dir_all(&args.data_dir)
        .map_err(|e| CliError::Local(format!("creating {}: {e}", args.data_dir.display())))?;
    let dir = args
        .data_dir
        .canonicalize()
        .map_err(|e| CliError::Local(e.to_string()))?;
    let runtimes = dir.join("runtimes");
    let first_run = !dir.join("gateway-1").exists();
    let port = |offset: u16| format!("127.0.0.1:{}", args.base_port + offset);
    let endpoints: Vec<String> = (0..3).map(port).collect();
    let members = (0..3u16)
        .map(|i| format!("{}={}", i + 1, port(i)))
        .collect::<Vec<_>>()
        .join(",");
    let mut children = Children(Vec::new());
    for i in 0..3u16 {
        let id = i + 1;
        let mut gw_args = vec![
            "--node-id".to_string(),
            id.to_string(),
            "--listen".into(),
            port(i),
            "--http-listen".into(),
            port(100 + i),
            "--data-dir".into(),
            dir.join(format!("gateway-{id}")).display().to_string(),
            "--cluster-id".into(),
            "openshell-dev".into(),
        ];
        if first_run {
            gw_args.extend(["--initial-members".to_string(), members.clone()]);
        }
        let child = spawn(
            "gateway",
            &gateway_bin,
            &gw_args,
            &dir.join(format!("gateway-{id}.log")),
        )?;
        children.0.push((format!("gateway {id}"), child));
    }
    // Ctrl-C during start-up stops everything too.
    let interrupted = tokio::select! {
        result = bring_up(&args, &dir, &endpoints, &supervisor_bin, &runtime_bin, &mut children) => match result {
            Ok(()) => false,
            Err(e) => {
                children.stop(&runtimes);
                return Err(e);
            }
        },
        _ = crate::server::shutdown_signal() => true,
    };
    if interrupted {
        eprintln!("interrupted during start-up; stopping");
        children.stop(&runtimes);
        return Ok(());
    }
    if !first_run {
        println!(
            "Resumed the data in {}; the demo sandboxes were started afresh",
            dir.display()
        );
    }
    let pool = if args.base_port == 7001 {
        pool_bin.display().to_string()
    } else {
        format!("{} --endpoints {}", pool_bin.display(), endpoints.join(","))
    };
    println!(
        "OpenShell pool dev cluster is up (data and logs in {})",
        dir.display()
    );
    println!("  gateways (gRPC):  {}", endpoints.join(" "));
    println!(
        "  gateways (HTTP):  {}  (/healthz /readyz /metrics)",
        (100..103).map(port).collect::<Vec<_>>().join(" ")
    );
    println!(
        "  supervisors:      s1 s2 (health on {} {})",
        port(200),
        port(201)
    );
    println!();
    println!("Try, in another shell:");
    println!("  {pool} raft status");
    println!("  {pool} pool status");
    println!("  {pool} sandbox exec demo-1 -- demo-read");
    println!();
    println!("Ctrl-C stops every process this command started.");
    crate::server::shutdown_signal().await;
    eprintln!("stopping...");
    children.stop(&runtimes);
    eprintln!(
        "stopped; data kept in {} (run again to resume)",
        dir.display()
    );
    Ok(())
}

async fn bring_up(
    args: &DevArgs,
    dir: &Path,
    endpoints: &[String],
    supervisor_bin: &Path,
    runtime_bin: &Path,
    children: &mut Children,
) -> Result<(), CliError> {
    let gw = super::Gateway {
        endpoints: endpoints.to_vec(),
        token: None,
    };
    wait_until("a gateway leader", Duration::from_secs(30), || async {
        let s = gw
            .call(|c| async move {
                ClusterAdminClient::new(c)
                    .status(StatusRequest { local: false })
                    .await
            })
            .await;
        matches!(s, Ok(r) if r.get_ref().leader_id != 0)
    })
    .await?;
    for i in 0..2u16 {
        let member = format!("s{}", i + 1);
        let sup_args = vec![
            "--gateways".to_string(),
            endpoints.join(","),
            "--pool-member-id".into(),
            member.clone(),
            "--pool-member-uid".into(),
            format!("dev-{member}"),
            "--pool-advertise-ip".into(),
            "127.0.0.1".into(),
            "--http-listen".into(),
            format!("127.0.0.1:{}", args.base_port + 200 + i),
            "--runtime-dir".into(),
            dir.join("runtimes").display().to_string(),
            "--runtime-bin".into(),
            runtime_bin.display().to_string(),
        ];
        let child = spawn(
            "supervisor",
            supervisor_bin,
            &sup_args,
            &dir.join(format!("supervisor-{member}.log")),
        )?;
        children.0.push((format!("supervisor {member}"), child));
    }
    let status = || async {
        gw.call(|c| async move {
            PoolAdminClient::new(c)
                .get_supervisor_pool_status(GetSupervisorPoolStatusRequest { stale: false })
                .await
        })
        .await
        .map(|r| r.into_inner())
    };
    wait_until("both supervisors attached", Duration::from_secs(30), || async {
        matches!(status().await, Ok(s) if s.members.iter().filter(|m| m.state == "active" || m.state == "draining")
            .filter(|m| m.ticks_since_heartbeat <= 2).count() >= 2)
    })
    .await?;
    // Workloads do not outlive `dev` (Ctrl-C stops the runtimes), so demo
    // sandboxes of an earlier run are deleted and launched afresh: a new
    // generation under a new launch id.
    let existing = status().await?;
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    {
        for n in 1..=args.sandboxes {
            let sandbox_id = format!("demo-{n}");
            let live = existing
                .sandboxes
                .iter()
                .any(|s| s.id == sandbox_id && s.phase != "deleted" && s.phase != "failed");
            if live {
                gw.call(|c| {
                    let sandbox_id = sandbox_id.clone();
                    async move {
                        PoolAdminClient::new(c)
                            .delete_sandbox(DeleteSandboxRequest { sandbox_id })
                            .await
                    }
                })
                .await?;
            }
            gw.call(|c| {
                let request = CreateSandboxRequest {
                    sandbox_id: sandbox_id.clone(),
                    launch_id: format!("{sandbox_id}@{run}"),
                    material_ref: "demo".into(),
                };
                async move { PoolAdminClient::new(c).create_sandbox(request).await }
            })
            .await?;
        }
        wait_until("demo sandboxes running", Duration::from_secs(30), || async {
            let s = gw
                .call(|c| async move {
                    PoolAdminClient::new(c)
                        .get_supervisor_pool_status(GetSupervisorPoolStatusRequest { stale: false })
                        .await
                })
                .await;
            matches!(s, Ok(r) if r.get_ref().sandboxes.iter()
                .filter(|sb| sb.id.starts_with("demo-") && sb.phase != "deleted" && sb.phase != "failed")
                .all(|sb| sb.phase == "assigned" && sb.pid != 0))
        })
        .await?;
    }
    Ok(())
}

async fn wait_until<F, Fut>(what: &str, within: Duration, mut check: F) -> Result<(), CliError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        if Instant::now() > deadline {
            return Err(CliError::Local(format!(
                "timed out waiting for {what}; see the logs in the data directory"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

//! `openshell-sandbox-runtime`: one process per sandbox; holds the workload
//! alive and accepts exactly one supervisor at a time. The semantics are
//! documented in `supervisor::runtime`; this binary only parses flags.
//!
//! ```text
//! openshell-sandbox-runtime --sandbox-id ID --generation N
//!     (--trusted-grant-keys-file PATH | --cluster-public-key HEX[,HEX...]) [--listen ADDR]
//!     [--addr-file PATH] [--recovery-deadline-ms N] [--heartbeat-timeout-ms N]
//!     [--linger-ms N] [--insecure | --tls-cert-file PATH --tls-key-file PATH]
//!     [-- CMD ARGS...]
//! openshell-sandbox-runtime demo-workload --addr-file PATH
//! openshell-sandbox-runtime demo-read [ADDR]
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use clap::{Args, Parser, Subcommand};
use proto::grant::GrantVerifier;
use supervisor::runtime::{self, RuntimeConfig, Workload};
use supervisor::trusted_keys::TrustedKeys;

#[derive(Debug, Parser)]
#[command(
    name = "openshell-sandbox-runtime",
    version,
    about = "Holds one sandbox's workload alive and fences stale supervisors",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Args)]
struct RunArgs {
    #[command(flatten)]
    logs: proto::logs::LogArgs,
    /// The sandbox this runtime holds; grants must name it.
    #[arg(long, env = "OPENSHELL_SANDBOX_ID", required = true)]
    sandbox_id: Option<String>,
    /// The sandbox generation this runtime holds (>= 1); grants and releases
    /// naming another generation are refused.
    #[arg(long, env = "OPENSHELL_SANDBOX_GENERATION", value_name = "N")]
    generation: Option<u64>,
    /// Trusted grant keys file (one 64-hex ed25519 public key per line,
    /// `#` comments), re-read when it changes: grants must be signed by one
    /// of its keys.
    #[arg(
        long,
        env = "OPENSHELL_TRUSTED_GRANT_KEYS_FILE",
        value_name = "PATH",
        required_unless_present = "cluster_public_key"
    )]
    trusted_grant_keys_file: Option<PathBuf>,
    /// Trusted grant public keys (64 hex characters each, comma-separated),
    /// instead of --trusted-grant-keys-file.
    #[arg(
        long,
        env = "OPENSHELL_CLUSTER_PUBLIC_KEY",
        value_name = "HEX",
        value_delimiter = ',',
        conflicts_with = "trusted_grant_keys_file"
    )]
    cluster_public_key: Option<Vec<String>>,
    /// gRPC listen address.
    #[arg(long, env = "OPENSHELL_RUNTIME_LISTEN", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// After binding, write the bound ip:port here (atomically).
    #[arg(long, env = "OPENSHELL_RUNTIME_ADDR_FILE", value_name = "PATH")]
    addr_file: Option<PathBuf>,
    /// Longest unsupervised time before the workload is stopped
    /// (SupervisorRecoveryFailed).
    #[arg(
        long,
        env = "OPENSHELL_RUNTIME_RECOVERY_DEADLINE_MS",
        default_value_t = 60_000
    )]
    recovery_deadline_ms: u64,
    /// A session without Heartbeat for this long no longer counts as
    /// supervising.
    #[arg(
        long,
        env = "OPENSHELL_RUNTIME_HEARTBEAT_TIMEOUT_MS",
        default_value_t = 1000
    )]
    heartbeat_timeout_ms: u64,
    /// After the workload stopped, keep serving Status this long, then exit 0.
    #[arg(long, env = "OPENSHELL_RUNTIME_LINGER_MS", default_value_t = 300_000)]
    linger_ms: u64,
    /// Serve plaintext gRPC (tests that drive a runtime directly). Without
    /// it --tls-cert-file and --tls-key-file are required.
    #[arg(long, env = "OPENSHELL_RUNTIME_INSECURE")]
    insecure: bool,
    /// Serve TLS 1.3 with this certificate chain (PEM) and publish no CA
    /// certificate: whoever launched the runtime holds its CA (a sandbox
    /// driver). Needs --tls-key-file.
    #[arg(
        long,
        env = "OPENSHELL_RUNTIME_TLS_CERT_FILE",
        value_name = "PATH",
        requires = "tls_key_file",
        conflicts_with = "insecure"
    )]
    tls_cert_file: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert-file.
    #[arg(
        long,
        env = "OPENSHELL_RUNTIME_TLS_KEY_FILE",
        value_name = "PATH",
        requires = "tls_cert_file",
        conflicts_with = "insecure"
    )]
    tls_key_file: Option<PathBuf>,
    /// The workload command (default: the built-in demo workload).
    #[arg(last = true, value_name = "CMD")]
    workload: Vec<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The built-in demo workload: a counter served on 127.0.0.1:0.
    DemoWorkload {
        /// Where to write the bound ip:port.
        #[arg(long, value_name = "PATH")]
        addr_file: PathBuf,
    },
    /// Prints the demo workload's counter.
    DemoRead {
        /// The workload address (default: $OPENSHELL_WORKLOAD_ADDR).
        #[arg(env = "OPENSHELL_WORKLOAD_ADDR")]
        addr: Option<String>,
    },
}

fn config(args: RunArgs) -> anyhow::Result<RuntimeConfig> {
    let sandbox_id = args
        .sandbox_id
        .filter(|s| !s.is_empty())
        .ok_or_else(|| anyhow!("--sandbox-id is required"))?;
    let trusted_keys = match (args.trusted_grant_keys_file, args.cluster_public_key) {
        (Some(file), _) => {
            TrustedKeys::load(&file).map_err(|e| anyhow!("--trusted-grant-keys-file {e}"))?
        }
        (None, Some(keys)) => TrustedKeys::Fixed(Arc::new(
            GrantVerifier::from_public_hexes(&keys)
                .map_err(|e| anyhow!("--cluster-public-key: {e}"))?,
        )),
        (None, None) => {
            return Err(anyhow!(
                "--trusted-grant-keys-file or --cluster-public-key is required"
            ))
        }
    };
    let generation = args
        .generation
        .filter(|g| *g >= 1)
        .ok_or_else(|| anyhow!("--generation is required and must be at least 1 (the sandbox generation this runtime holds)"))?;
    let mut config = RuntimeConfig::with_trusted_keys(sandbox_id, generation, trusted_keys);
    config.listen = args.listen;
    config.addr_file = args.addr_file;
    config.recovery_deadline = Duration::from_millis(args.recovery_deadline_ms);
    config.heartbeat_timeout = Duration::from_millis(args.heartbeat_timeout_ms);
    config.linger = Duration::from_millis(args.linger_ms);
    config.insecure = args.insecure;
    config.tls_files = args.tls_cert_file.zip(args.tls_key_file);
    if !args.workload.is_empty() {
        config.workload = Workload::Command(args.workload);
    }
    Ok(config)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            tracing::warn!("cannot install signal handlers; only Ctrl-C stops the runtime");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn serve(args: RunArgs) -> anyhow::Result<()> {
    let log_format = args.logs.log_format;
    let config = config(args)?;
    proto::logs::init(
        log_format,
        "info",
        &[
            ("sandbox", config.sandbox_id.clone().into()),
            ("generation", config.generation.into()),
        ],
    )
    .map_err(anyhow::Error::msg)?;
    match runtime::become_session_leader() {
        Ok(true) => tracing::debug!("started a new session (setsid)"),
        Ok(false) => tracing::debug!("already detached (session or process-group leader)"),
        Err(e) => tracing::warn!("setsid failed, the runtime may die with its parent: {e}"),
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    // block_on polls `run` on this (main) thread, which spawns the workload.
    rt.block_on(runtime::run(config, shutdown_signal()))?;
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::DemoWorkload { addr_file }) => {
            runtime::demo::serve_counter(&addr_file).map_err(Into::into)
        }
        Some(Command::DemoRead { addr }) => addr
            .ok_or_else(|| anyhow!("no address: pass ADDR or set OPENSHELL_WORKLOAD_ADDR"))
            .and_then(|addr| Ok(runtime::demo::read_counter(&addr)?))
            .map(|n| println!("{n}")),
        None => serve(cli.run),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("openshell-sandbox-runtime: {e:#}");
            ExitCode::FAILURE
        }
    }
}

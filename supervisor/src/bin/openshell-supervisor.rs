//! `openshell-supervisor`: a pool member. Parses flags and runs the library.

use std::path::PathBuf;

use clap::Parser;
use supervisor::agent::{self, RawAgentConfig};

/// A member of the OpenShell supervisor pool.
// No `Debug`: the flags hold the credential.
#[derive(Parser)]
#[command(name = "openshell-supervisor", version, about)]
struct Args {
    /// Gateway endpoints, comma-separated host:port; any one will do.
    #[arg(long, env = "OPENSHELL_GATEWAYS", value_delimiter = ',')]
    gateways: Vec<String>,
    /// Pool member id (stable across restarts, e.g. the Pod name).
    #[arg(long, env = "OPENSHELL_POOL_MEMBER_ID")]
    pool_member_id: Option<String>,
    /// Pool member uid (e.g. the Pod uid).
    #[arg(long, env = "OPENSHELL_POOL_MEMBER_UID")]
    pool_member_uid: Option<String>,
    /// This supervisor's IP, shown in the pool status (informational: no
    /// gateway dials it; exec travels on the supervisor's stream).
    #[arg(long, env = "OPENSHELL_POOL_ADVERTISE_IP")]
    pool_advertise_ip: Option<String>,
    /// Ignored: kept so that old configurations still start (the supervisor
    /// opens no gRPC port any more).
    #[arg(long, env = "OPENSHELL_SUPERVISOR_LISTEN")]
    listen: Option<String>,
    /// Address of /healthz and /readyz.
    #[arg(long, env = "OPENSHELL_SUPERVISOR_HTTP_LISTEN")]
    http_listen: Option<String>,
    /// Sessions this supervisor hosts at most.
    #[arg(long, env = "OPENSHELL_SUPERVISOR_CAPACITY")]
    capacity: Option<u32>,
    /// Credential presented to gateways.
    #[arg(long, env = "OPENSHELL_SUPERVISOR_TOKEN", hide_env_values = true)]
    credential: Option<String>,
    /// File holding the credential (a trailing newline is trimmed); keeps it
    /// out of /proc/*/cmdline. Re-read at every hello, so a rotated token
    /// (a Kubernetes projected ServiceAccount token) is the one presented.
    #[arg(
        long,
        env = "OPENSHELL_SUPERVISOR_TOKEN_FILE",
        conflicts_with = "credential"
    )]
    credential_file: Option<PathBuf>,
    /// Ignored (logged): runtimes are launched by the gateway leader and
    /// found through the replicated state, not a shared directory.
    #[arg(long, env = "OPENSHELL_RUNTIME_DIR", hide = true)]
    runtime_dir: Option<PathBuf>,
    /// Attach to gateways in the listed order (default: start at a random one).
    #[arg(long, env = "OPENSHELL_ATTACH_LISTED_ORDER")]
    attach_listed_order: bool,
    /// The CA (PEM) the gateways' certificates chain to: the attach stream
    /// speaks TLS and verifies the gateway; re-read when it changes.
    #[arg(long, env = "OPENSHELL_TLS_CA_FILE")]
    tls_ca_file: Option<PathBuf>,
    /// Ignored (logged): the gateway's sandbox driver starts runtimes.
    #[arg(long, env = "OPENSHELL_RUNTIME_BIN", hide = true)]
    runtime_bin: Option<PathBuf>,
    /// The grant public keys this supervisor trusts: one
    /// 64-hex ed25519 public key per line, `#` comments; re-read when it
    /// changes. A gateway signing with another key is refused.
    #[arg(long, env = "OPENSHELL_TRUSTED_GRANT_KEYS_FILE")]
    trusted_grant_keys_file: Option<PathBuf>,
    /// Run without a credential and trusted grant keys, learning the grant
    /// key from the gateway's hello (experiments only; logged at start).
    #[arg(long, env = "OPENSHELL_SUPERVISOR_INSECURE")]
    insecure: bool,
}

fn main() {
    // One line on stderr naming what failed (no backtrace), non-zero exit.
    if let Err(e) = run() {
        eprintln!("openshell-supervisor: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if args.listen.is_some() {
        tracing::warn!("--listen is ignored: the supervisor opens no gRPC port (exec travels on its stream to the gateway)");
    }
    let config = RawAgentConfig {
        gateways: args.gateways,
        member_id: args.pool_member_id,
        member_uid: args.pool_member_uid,
        advertise_ip: args.pool_advertise_ip,
        listen: args.listen,
        http_listen: args.http_listen,
        capacity: args.capacity,
        credential: match &args.credential_file {
            Some(file) => Some(proto::secret::read_secret_file("--credential-file", file)?),
            None => args.credential,
        },
        credential_file: args.credential_file,
        runtime_dir: args.runtime_dir,
        runtime_bin: args.runtime_bin,
        listed_order: args.attach_listed_order,
        trusted_grant_keys_file: args.trusted_grant_keys_file,
        insecure: args.insecure,
        tls_ca_file: args.tls_ca_file,
    }
    .validate()?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(agent::run(config, shutdown_signal()))
}

/// Completes on SIGINT or SIGTERM (Kubernetes stops Pods with SIGTERM).
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term => {},
    }
}

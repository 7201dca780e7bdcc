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
    #[command(flatten)]
    logs: proto::logs::LogArgs,
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
    /// On the first SIGTERM/SIGINT, ask the pool to drain this member, keep
    /// supervising until its sandboxes moved away (or --drain-timeout-ms
    /// passed), leave the pool and exit; a second signal exits at once.
    /// The default.
    #[arg(long, overrides_with = "no_drain_on_stop")]
    drain_on_stop: bool,
    /// On SIGTERM/SIGINT exit at once, leaving the sessions to their
    /// runtimes (the member expires and its sandboxes are taken over).
    #[arg(long, env = "OPENSHELL_SUPERVISOR_NO_DRAIN_ON_STOP")]
    no_drain_on_stop: bool,
    /// How long a stop waits for the drain before leaving anyway (ms,
    /// default 25000). Kubernetes' terminationGracePeriodSeconds must
    /// exceed it.
    #[arg(long, env = "OPENSHELL_SUPERVISOR_DRAIN_TIMEOUT_MS")]
    drain_timeout_ms: Option<u64>,
    /// Validate the flags and every file they name (credential, trusted
    /// grant keys, CA), print one line and exit 0, or the error a real
    /// start would give and exit 1; binds no port and dials no gateway.
    #[arg(long)]
    check_config: bool,
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
    let member = args.pool_member_id.clone().unwrap_or_default();
    proto::logs::init(args.logs.log_format, "info", &[("member", member.into())])
        .map_err(anyhow::Error::msg)?;
    if args.listen.is_some() && !args.check_config {
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
            Some(file) => Some(proto::secret::read_secret_file("--credential-file", file)?.into()),
            None => args.credential.map(Into::into),
        },
        credential_file: args.credential_file,
        runtime_dir: args.runtime_dir,
        runtime_bin: args.runtime_bin,
        listed_order: args.attach_listed_order,
        trusted_grant_keys_file: args.trusted_grant_keys_file,
        insecure: args.insecure,
        tls_ca_file: args.tls_ca_file,
        // --drain-on-stop only overrides an earlier --no-drain-on-stop.
        no_drain_on_stop: args.no_drain_on_stop && !args.drain_on_stop,
        drain_timeout_ms: args.drain_timeout_ms,
    }
    .validate()?;
    if args.check_config {
        println!(
            "openshell-supervisor: configuration ok ({})",
            summary(&config)
        );
        return Ok(());
    }
    let runtime = tokio::runtime::Runtime::new()?;
    let result = runtime.block_on(async {
        let signals = stop_signals()?;
        agent::run_until_stopped(config, signals).await
    });
    // Exit now: waiting for blocking tasks (a file re-read, a DNS lookup)
    // would delay the exit a second signal asks for.
    runtime.shutdown_background();
    result
}

/// What `--check-config` reports of a valid configuration (no secret).
fn summary(config: &agent::AgentConfig) -> String {
    let drain = if config.drain_on_stop {
        format!(
            "drain on stop within {} ms",
            config.drain_timeout.as_millis()
        )
    } else {
        "no drain on stop".to_string()
    };
    format!(
        "member {}, {} gateway(s), {}, {}, {}",
        config.member_id,
        config.gateways.len(),
        if config.gateway_client.tls.is_some() {
            "TLS"
        } else {
            "plaintext"
        },
        match &config.trusted_keys {
            Some(keys) => keys.describe(),
            None => "grant key learned from the gateway (--insecure)".to_string(),
        },
        drain
    )
}

/// One item per SIGINT or SIGTERM (Kubernetes stops Pods with SIGTERM):
/// the first one stops the supervisor (draining it), a second one during
/// the drain makes it exit at once.
fn stop_signals() -> anyhow::Result<tokio_stream::wrappers::UnboundedReceiverStream<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                Some(()) = term.recv() => tracing::info!("SIGTERM"),
                Some(()) = int.recv() => tracing::info!("SIGINT"),
                else => return,
            }
            if tx.send(()).is_err() {
                return;
            }
        }
    });
    Ok(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
}

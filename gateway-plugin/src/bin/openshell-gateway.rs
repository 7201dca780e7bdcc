//! `openshell-gateway`: one gateway replica. Parses flags and the config file,
//! then runs the library's server until SIGINT or SIGTERM. The first signal
//! starts a bounded stop (exit 0 within 10 s, after up to 20 s more for a
//! gateway the voter autopilot is scaling away); a second one exits at once
//! (rc 143 after SIGTERM, 130 after SIGINT). `--check-config` validates and
//! exits without starting anything.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use gateway_plugin::config::{
    self, AuthSection, GatewaySection, RaftSection, SupervisorPoolSection, TlsSection,
    ValidateGateway,
};
use gateway_plugin::config_driver::SandboxDriverSection;
use gateway_plugin::config_statefulset::AutopilotSection;
use proto::secret::Secret;

/// mimalloc returns freed memory to the system where glibc's per-worker
/// arenas keep it (the `mimalloc` feature, on by default).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One replica of the OpenShell gateway's raft-replicated pool store.
///
/// SIGTERM or SIGINT stops it within 10 s: /readyz turns 503, attached
/// supervisors are told to move to another gateway, a leader hands
/// leadership over, then it exits 0. With the voter autopilot, a gateway
/// whose node id is beyond the desired count first waits (up to 20 s) until
/// it no longer votes. A second signal exits at once (rc 143 after SIGTERM,
/// 130 after SIGINT).
// No `Debug`: the flags hold tokens.
#[derive(Parser)]
#[command(
    name = "openshell-gateway",
    version,
    about,
    args_conflicts_with_subcommands = true
)]
struct Args {
    #[command(subcommand)]
    command: Option<Offline>,
    /// TOML config file ([openshell.gateway] sections); flags override it.
    #[arg(long, env = "OPENSHELL_GATEWAY_CONFIG")]
    config: Option<PathBuf>,
    /// Validate the flags, the config file and every file they name (TLS,
    /// keys, tokens, credentials, Pod template), print one line and exit:
    /// 0 when a start would accept them, 1 with the start's error. Binds no
    /// port, creates no directory, contacts nothing.
    #[arg(long)]
    check_config: bool,
    #[command(flatten)]
    logs: proto::logs::LogArgs,
    /// This gateway's raft node id (>= 1).
    #[arg(long, env = "OPENSHELL_NODE_ID")]
    node_id: Option<u64>,
    /// The node id from a StatefulSet pod name `<name>-<ordinal>`: the
    /// ordinal + 1 (pod `gw-0` is node 1). Instead of --node-id.
    #[arg(long, env = "OPENSHELL_POD_NAME", value_name = "POD_NAME")]
    node_id_from_pod_name: Option<String>,
    /// Voter autopilot: how many voters there should be (node ids
    /// 1..=N), `file:<path>` (one integer, re-read every second) or
    /// `statefulset:<name>` (its spec.replicas, in --kubernetes-namespace
    /// or the Pod's namespace). Needs --autopilot-peer-address.
    #[arg(long, env = "OPENSHELL_AUTOPILOT_REPLICAS", value_name = "SOURCE")]
    autopilot_replicas: Option<String>,
    /// Voter autopilot: the peer address of node N, with `{ordinal}` (N-1)
    /// and `{node_id}` (N) filled in, e.g.
    /// `gw-{ordinal}.gw-peer.ns.svc.cluster.local:7001`.
    #[arg(
        long,
        env = "OPENSHELL_AUTOPILOT_PEER_ADDRESS",
        value_name = "TEMPLATE"
    )]
    autopilot_peer_address: Option<String>,
    /// The client port to bind, ip:port (CLI, supervisors, object store).
    #[arg(long, env = "OPENSHELL_LISTEN")]
    listen: Option<String>,
    /// The peer port to bind, ip:port (raft and forwarded calls between
    /// gateways; mutual TLS). Required unless --insecure.
    #[arg(long, env = "OPENSHELL_PEER_LISTEN")]
    peer_listen: Option<String>,
    /// This node's address in the raft membership, where other gateways
    /// reach its peer port (default: --peer-listen, else --listen).
    #[arg(long, env = "OPENSHELL_ADVERTISE")]
    advertise: Option<String>,
    /// This gateway's certificate chain (PEM), served on both ports and
    /// presented to peers; re-read when it changes.
    #[arg(long, env = "OPENSHELL_TLS_CERT_FILE")]
    tls_cert_file: Option<PathBuf>,
    /// The private key of --tls-cert-file (PEM).
    #[arg(long, env = "OPENSHELL_TLS_KEY_FILE")]
    tls_key_file: Option<PathBuf>,
    /// The CA (PEM) every gateway's certificate chains to.
    #[arg(long, env = "OPENSHELL_TLS_CA_FILE")]
    tls_ca_file: Option<PathBuf>,
    /// Start without TLS, tokens or a signing key where they are not given
    /// (plaintext, open APIs): development only, logged at every start.
    #[arg(long)]
    insecure: bool,
    /// Worker threads of the async runtime (1..=1024; default: one per CPU
    /// the process may use, the cgroup's CPU quota included).
    #[arg(long, env = "OPENSHELL_WORKER_THREADS")]
    worker_threads: Option<u64>,
    /// Data directory (created if absent).
    #[arg(long, env = "OPENSHELL_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Cluster id; a data directory or peer of another cluster is refused.
    #[arg(long, env = "OPENSHELL_CLUSTER_ID")]
    cluster_id: Option<String>,
    /// Voters of a new cluster, comma-separated id=host:port
    /// (`--initial-members` is the former name).
    #[arg(
        long,
        alias = "initial-members",
        env = "OPENSHELL_INITIAL_VOTERS",
        value_delimiter = ','
    )]
    initial_voters: Option<Vec<String>>,
    /// Raft heartbeat interval in ms.
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// Raft election timeout lower bound in ms.
    #[arg(long)]
    election_min_ms: Option<u64>,
    /// Raft election timeout upper bound in ms.
    #[arg(long)]
    election_max_ms: Option<u64>,
    /// Build a snapshot after this many log entries.
    #[arg(long)]
    snapshot_after_logs: Option<u64>,
    /// Log entries kept behind a snapshot.
    #[arg(long)]
    logs_to_keep: Option<u64>,
    /// Pool tick interval in ms (logical time).
    #[arg(long)]
    tick_interval_ms: Option<u64>,
    /// A supervisor expires after this long without a heartbeat, in ms.
    #[arg(long)]
    heartbeat_ttl_ms: Option<u64>,
    /// A sandbox without an active supervisor fails after this long, in ms.
    #[arg(long)]
    recovery_deadline_ms: Option<u64>,
    /// Finished pool records (deleted sandboxes, launch outcomes, departed
    /// supervisors, finished operations) are removed this many ticks after
    /// they finished (default 14400: one hour at 250 ms ticks).
    #[arg(long)]
    retention_ticks: Option<u64>,
    /// File with the cluster signing key (64 hex characters); the same on
    /// every gateway. Required unless --insecure (which then uses an
    /// insecure development key).
    #[arg(long, env = "OPENSHELL_SIGNING_KEY_FILE")]
    signing_key_file: Option<PathBuf>,
    /// Address of /healthz, /readyz and /metrics, ip:port.
    #[arg(long, env = "OPENSHELL_HTTP_LISTEN")]
    http_listen: Option<String>,
    /// Bearer token with the platform_admin role (repeatable).
    #[arg(
        long,
        env = "OPENSHELL_ADMIN_TOKEN",
        hide_env_values = true,
        value_delimiter = ','
    )]
    admin_token: Option<Vec<Secret>>,
    /// Bearer token that may only read (repeatable).
    #[arg(
        long,
        env = "OPENSHELL_VIEWER_TOKEN",
        hide_env_values = true,
        value_delimiter = ','
    )]
    viewer_token: Option<Vec<Secret>>,
    /// DEPRECATED (any supervisor holding it can join as any member): one
    /// credential for every supervisor; use --member-credentials-file.
    #[arg(long, env = "OPENSHELL_SUPERVISOR_TOKEN", hide_env_values = true)]
    supervisor_token: Option<Secret>,
    /// File holding a platform_admin token (repeatable; one token per file,
    /// a trailing newline is trimmed). Keeps it out of /proc/*/cmdline.
    #[arg(long, env = "OPENSHELL_ADMIN_TOKEN_FILE", value_delimiter = ',')]
    admin_token_file: Vec<PathBuf>,
    /// File holding a read-only token (repeatable; as --admin-token-file).
    #[arg(long, env = "OPENSHELL_VIEWER_TOKEN_FILE", value_delimiter = ',')]
    viewer_token_file: Vec<PathBuf>,
    /// File holding the credential supervisors must present.
    #[arg(
        long,
        env = "OPENSHELL_SUPERVISOR_TOKEN_FILE",
        conflicts_with = "supervisor_token"
    )]
    supervisor_token_file: Option<PathBuf>,
    /// File of `member_id credential` lines: each supervisor member id must
    /// present its own credential (re-read when it changes).
    #[arg(long, env = "OPENSHELL_MEMBER_CREDENTIALS_FILE")]
    member_credentials_file: Option<PathBuf>,
    /// Supervisor identity: none (default) or kubernetes (a supervisor not
    /// in the member credentials file presents its Pod's projected
    /// ServiceAccount token, checked by TokenReview; it joins only as its
    /// Pod name).
    #[arg(long, env = "OPENSHELL_MEMBER_IDENTITY", value_name = "KIND")]
    member_identity: Option<String>,
    /// The audience supervisor tokens must carry (default openshell-gateway).
    #[arg(long, env = "OPENSHELL_MEMBER_IDENTITY_AUDIENCE")]
    member_identity_audience: Option<String>,
    /// The supervisors' ServiceAccount, <namespace>:<name> (required with
    /// --member-identity kubernetes): only its tokens are members.
    #[arg(
        long,
        env = "OPENSHELL_MEMBER_IDENTITY_SERVICE_ACCOUNT",
        value_name = "NS:NAME"
    )]
    member_identity_service_account: Option<String>,
    /// Where this gateway launches sandbox runtimes when it leads: none
    /// (default: launches nothing), process (local processes) or kubernetes
    /// (one Pod per sandbox generation).
    #[arg(long, env = "OPENSHELL_SANDBOX_DRIVER", value_name = "KIND")]
    sandbox_driver: Option<String>,
    /// Process driver: its directory, shared by the gateways of one host
    /// (default: <data-dir>/runtimes).
    #[arg(long, env = "OPENSHELL_PROCESS_DRIVER_DIR")]
    process_driver_dir: Option<PathBuf>,
    /// Process driver: the openshell-sandbox-runtime binary (default: next
    /// to this executable).
    #[arg(long, env = "OPENSHELL_RUNTIME_BIN")]
    runtime_bin: Option<PathBuf>,
    /// Process driver: a network namespace per runtime: auto (when root),
    /// on or off.
    #[arg(long, env = "OPENSHELL_PROCESS_NETNS", value_name = "auto|on|off")]
    process_netns: Option<String>,
    /// Process driver: an existing network namespace every runtime joins
    /// instead of one each (e.g. a test harness's workloads namespace);
    /// needs --process-runtime-ip.
    #[arg(long, env = "OPENSHELL_PROCESS_RUNTIME_NETNS", value_name = "NAME")]
    process_runtime_netns: Option<String>,
    /// Process driver: the address in --process-runtime-netns runtimes
    /// listen on (each at a port it binds).
    #[arg(long, env = "OPENSHELL_PROCESS_RUNTIME_IP", value_name = "IP")]
    process_runtime_ip: Option<String>,
    /// Kubernetes driver: the namespace of runtime Pods (default: the
    /// gateway's own).
    #[arg(long, env = "OPENSHELL_KUBERNETES_NAMESPACE")]
    kubernetes_namespace: Option<String>,
    /// Kubernetes driver: the runtime Pod template (YAML).
    #[arg(long, env = "OPENSHELL_POD_TEMPLATE_FILE")]
    pod_template_file: Option<PathBuf>,
    /// The trusted grant keys file runtimes read and re-read, a path where
    /// they run (default: they trust this cluster's signing key as given at
    /// launch; a key rotation needs this file).
    #[arg(long, env = "OPENSHELL_RUNTIME_TRUSTED_GRANT_KEYS_FILE")]
    runtime_trusted_grant_keys_file: Option<String>,
}

/// `tokens` plus the token in each of `files` (given by `flag`).
fn with_token_files(
    tokens: Option<Vec<Secret>>,
    files: &[PathBuf],
    flag: &str,
) -> anyhow::Result<Option<Vec<Secret>>> {
    if files.is_empty() {
        return Ok(tokens);
    }
    let mut tokens = tokens.unwrap_or_default();
    for file in files {
        tokens.push(proto::secret::read_secret_file(flag, file)?.into());
    }
    Ok(Some(tokens))
}

/// Offline tools on a stopped gateway's data directory.
#[derive(Subcommand, Debug)]
enum Offline {
    /// Seeds the data directory of a new one-voter cluster from a backup
    /// file (`openshell-pool backup save`). Start the gateway on it next,
    /// without --initial-voters, then add the other nodes back.
    Restore {
        /// The backup file.
        #[arg(long = "from")]
        from: PathBuf,
        /// The new (absent or empty) data directory.
        #[arg(long)]
        data_dir: PathBuf,
        /// This gateway's node id in the new cluster.
        #[arg(long, default_value_t = 1)]
        node_id: u64,
        /// The address the gateway will advertise, host:port.
        #[arg(long)]
        advertise: String,
        /// Cluster id of the new cluster (default: the backup's).
        #[arg(long)]
        cluster_id: Option<String>,
        /// Read a format-1 backup (written before format 2): its header is
        /// not covered by a checksum, so check it by eye first.
        #[arg(long)]
        accept_format_1: bool,
    },
    /// Disaster recovery when quorum is lost for good: turns this surviving
    /// member into a one-voter cluster with every entry in its log. Start the
    /// gateway on it next, then add fresh members.
    Recover {
        /// Required: acknowledges that the other members are gone for good.
        #[arg(long, required = true)]
        force_new_cluster: bool,
        /// The surviving member's data directory (the gateway must be stopped).
        #[arg(long)]
        data_dir: PathBuf,
        /// Its node id.
        #[arg(long)]
        node_id: u64,
        /// The address it will advertise, host:port.
        #[arg(long)]
        advertise: String,
        /// Its cluster id.
        #[arg(long, default_value = "openshell")]
        cluster_id: String,
    },
}

fn offline(command: Offline) -> anyhow::Result<()> {
    use gateway_plugin::state::GatewayState;
    match command {
        Offline::Restore {
            from,
            data_dir,
            node_id,
            advertise,
            cluster_id,
            accept_format_1,
        } => {
            let (header, state) = if accept_format_1 {
                proto::backup::read_format_1(&from)?
            } else {
                proto::backup::read(&from)?
            };
            let cluster_id = cluster_id.unwrap_or_else(|| header.cluster_id.clone());
            proto::ids::check_id("cluster_id", &cluster_id).map_err(|e| {
                anyhow::anyhow!("--cluster-id {cluster_id:?}: {e}; nothing was written")
            })?;
            let seeded = raft_store::seed::seed_single_voter::<GatewayState>(
                &data_dir,
                &cluster_id,
                node_id,
                &advertise,
                &state,
                header.term,
                header.index,
            )
            .with_context(|| format!("restoring {} into {}", from.display(), data_dir.display()))?;
            println!(
                "restored {} (log index {}) into {} as node {node_id} of cluster {cluster_id:?}; start the gateway \
                 on it without --initial-voters, then add the other nodes",
                from.display(),
                seeded.last_index,
                data_dir.display()
            );
        }
        Offline::Recover {
            force_new_cluster,
            data_dir,
            node_id,
            advertise,
            cluster_id,
        } => {
            anyhow::ensure!(force_new_cluster, "recover needs --force-new-cluster");
            let seeded = raft_store::seed::recover_single_voter::<GatewayState>(
                &data_dir,
                &cluster_id,
                node_id,
                &advertise,
            )
            .with_context(|| format!("recovering {}", data_dir.display()))?;
            println!(
                "node {node_id} is now a one-voter cluster holding the log up to index {} (term {}, {} entries \
                 re-applied); start it, then add fresh members",
                seeded.last_index, seeded.last_term, seeded.entries_applied
            );
        }
    }
    Ok(())
}

fn main() {
    // One line on stderr naming what failed (no backtrace), non-zero exit.
    if let Err(e) = run() {
        eprintln!("openshell-gateway: {e:#}");
        std::process::exit(1);
    }
}

/// `[openshell.gateway.sandbox_driver]` as the flags give it.
fn sandbox_driver_flags(args: &Args) -> SandboxDriverSection {
    SandboxDriverSection {
        kind: args.sandbox_driver.clone(),
        process_dir: args.process_driver_dir.clone(),
        runtime_bin: args.runtime_bin.clone(),
        process_netns: args.process_netns.clone(),
        process_runtime_netns: args.process_runtime_netns.clone(),
        process_runtime_ip: args.process_runtime_ip.clone(),
        kubernetes_namespace: args.kubernetes_namespace.clone(),
        pod_template_file: args.pod_template_file.clone(),
        runtime_trusted_keys_file: args.runtime_trusted_grant_keys_file.clone(),
    }
}

/// The settings the flags (and their environment variables) give, to lay
/// over the config file's.
fn flag_section(args: Args) -> anyhow::Result<GatewaySection> {
    let node_id = match (&args.node_id_from_pod_name, args.node_id) {
        (Some(_), Some(_)) => anyhow::bail!(
            "--node-id-from-pod-name (OPENSHELL_POD_NAME) and --node-id (OPENSHELL_NODE_ID) are both set: give one"
        ),
        (Some(pod), None) => Some(gateway_plugin::config_statefulset::node_id_from_pod_name(pod)?),
        (None, id) => id,
    };
    let sandbox_driver = sandbox_driver_flags(&args);
    Ok(GatewaySection {
        node_id,
        listen_addr: args.listen,
        peer_listen_addr: args.peer_listen,
        advertise_addr: args.advertise,
        tls: Some(TlsSection {
            cert_file: args.tls_cert_file,
            key_file: args.tls_key_file,
            ca_file: args.tls_ca_file,
            // The handshake rate is a configuration-file key only.
            ..TlsSection::default()
        }),
        insecure: args.insecure.then_some(true),
        worker_threads: args.worker_threads,
        data_dir: args.data_dir,
        cluster_id: args.cluster_id,
        initial_voters: args.initial_voters,
        raft: Some(RaftSection {
            heartbeat_interval_ms: args.heartbeat_ms,
            election_timeout_min_ms: args.election_min_ms,
            election_timeout_max_ms: args.election_max_ms,
            snapshot_after_logs: args.snapshot_after_logs,
            logs_to_keep: args.logs_to_keep,
            ..Default::default()
        }),
        signing_key_file: args.signing_key_file,
        http_listen_addr: args.http_listen,
        auth: Some(AuthSection {
            admin_tokens: with_token_files(
                args.admin_token,
                &args.admin_token_file,
                "--admin-token-file",
            )?,
            viewer_tokens: with_token_files(
                args.viewer_token,
                &args.viewer_token_file,
                "--viewer-token-file",
            )?,
            ..Default::default()
        }),
        supervisor_pool: Some(SupervisorPoolSection {
            tick_interval_ms: args.tick_interval_ms,
            heartbeat_ttl_ms: args.heartbeat_ttl_ms,
            recovery_deadline_ms: args.recovery_deadline_ms,
            retention_ticks: args.retention_ticks,
            supervisor_token: match &args.supervisor_token_file {
                Some(file) => {
                    Some(proto::secret::read_secret_file("--supervisor-token-file", file)?.into())
                }
                None => args.supervisor_token,
            },
            member_credentials_file: args.member_credentials_file,
            member_identity: args.member_identity,
            member_identity_audience: args.member_identity_audience,
            member_identity_service_account: args.member_identity_service_account,
            ..Default::default()
        }),
        sandbox_driver: Some(sandbox_driver),
        autopilot: Some(AutopilotSection {
            replicas: args.autopilot_replicas,
            peer_address: args.autopilot_peer_address,
        }),
    })
}

fn run() -> anyhow::Result<()> {
    let mut args = Args::parse();
    // The variable's former name: refuse it rather than start a node that
    // silently waits to be added as a learner.
    if std::env::var_os("OPENSHELL_INITIAL_MEMBERS").is_some() {
        anyhow::bail!(
            "OPENSHELL_INITIAL_MEMBERS was renamed OPENSHELL_INITIAL_VOTERS (same value: comma-separated id=host:port); set that instead"
        );
    }
    if let Some(command) = args.command.take() {
        return offline(command);
    }
    let check_only = args.check_config;
    let log_format = args.logs.log_format;
    let file = match &args.config {
        Some(path) => config::read_file(path)?,
        None => GatewaySection::default(),
    };
    let config = file.overlay(flag_section(args)?).validate()?;
    if !check_only {
        proto::logs::init(
            log_format,
            "info,openraft=warn",
            &[("node_id", config.node.node_id.into())],
        )
        .map_err(anyhow::Error::msg)?;
        let faults = gateway_plugin::fault::enable_from_env()?;
        if !faults.is_empty() {
            tracing::warn!(
                ?faults,
                "JEPSEN FAULT INJECTION ON: this gateway is wrong on purpose"
            );
        }
    }
    if check_only {
        gateway_plugin::config_check::check(&config)?;
        println!(
            "openshell-gateway: {}",
            gateway_plugin::config_check::summary(&config)
        );
        return Ok(());
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(n) = config.worker_threads {
        builder.worker_threads(n);
    }
    let runtime = builder.build().context("starting the tokio runtime")?;
    // The library's typed `ServeError` becomes anyhow here; its Display
    // names what failed and its source chain says why (printed by `main`).
    let served = runtime.block_on(gateway_plugin::server::run(config, async {
        let mut signals = gateway_plugin::server::Signals::new();
        signals.next().await;
        tracing::info!(
            bound_ms = gateway_plugin::server::STOP_BOUND.as_millis() as u64,
            "shutting down (a second SIGTERM or SIGINT exits at once)"
        );
        tokio::spawn(async move {
            let code = signals.next().await;
            tracing::warn!(code, "second signal: exiting at once");
            std::process::exit(code);
        });
    }));
    // Tasks still blocked (e.g. on a peer that does not answer) must not
    // hold the exit past the stop's bound.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    served?;
    Ok(())
}

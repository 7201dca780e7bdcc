//! `openshell-sandbox-runtime`: one process per sandbox (as the workload Pod
//! would be). It holds the workload process alive and accepts exactly one
//! supervisor at a time, trusting only grants signed by one of its trusted
//! grant keys.
//!
//! This page is the contract supervisors rely on. The service is
//! `openshell.sandbox_runtime.v1.SandboxRuntime` (`proto/.../runtime.proto`).
//!
//! # Process
//!
//! - At start the binary calls `setsid()` ([`become_session_leader`]) so the
//!   runtime survives the death of whoever spawned it (a supervisor may be
//!   `kill -9`ed).
//! - It binds the gRPC listener (`--listen`, default `127.0.0.1:0`; a
//!   network namespace's or a Pod's IP as a sandbox driver launches it),
//!   starts the workload, then writes the bound `ip:port` to `--addr-file`
//!   (optional) atomically (temporary file + rename). The file is removed
//!   when the runtime exits cleanly. Nobody discovers a runtime through a
//!   shared directory: its launcher records its endpoint in the replicated
//!   state (docs/design/0003-sandbox-driver.md).
//! - TLS: the runtime serves TLS 1.3 only ([`proto::tls::incoming`]; a
//!   plaintext client is refused) with exactly the certificate chain and key
//!   of `--tls-cert-file` / `--tls-key-file` (no client certificate asked).
//!   The launcher made them for this runtime alone (a CA for it signs a
//!   certificate naming the runtime) and recorded the CA certificate with
//!   the endpoint; supervisors verify the runtime's name with it. Without
//!   the files the runtime refuses to start, unless `--insecure` (tests
//!   driving a runtime directly), which serves plaintext.
//! - The workload runs in its own process group, with `PR_SET_PDEATHSIG`
//!   (it dies with the runtime), and gets `OPENSHELL_SANDBOX_ID`. Stopping it
//!   sends SIGTERM to the group, SIGKILL after 2 s ([`workload::STOP_GRACE`]).
//!   The default workload is the built-in demo ([`demo`]): `<exe>
//!   demo-workload --addr-file F`, an in-memory counter incremented every
//!   100 ms and served on `127.0.0.1:0`; the runtime learns its address from
//!   `F`. Any other command is given after `--`.
//! - [`WorkloadInfo`](proto::sandbox_runtime::WorkloadInfo): `pid`,
//!   `started_at_unix_ms` (from `/proc/<pid>/stat` field 22 and `/proc/stat`
//!   `btime`; the spawn time if unreadable; fixed for the process'
//!   lifetime), `state` (`running` | `stopped`), `workload_addr` (the demo's
//!   counter address, empty for other workloads).
//! - After the workload stopped, the runtime keeps serving (Status in
//!   particular) for `--linger-ms` (default 300000), then exits 0. SIGTERM or
//!   SIGINT stops the workload ("runtime shutdown") and exits at once.
//!
//! # Sessions and fencing
//!
//! The runtime holds a current credential epoch (0 at start), the member
//! incarnation that holds it, and at most one session (a random 128-bit hex
//! token).
//!
//! - **Activate(SignedGrant)**, checked in this order: missing grant ->
//!   `INVALID_ARGUMENT`; signature does not verify with any trusted grant
//!   key (`--trusted-grant-keys-file`, re-read on change, or the keys of
//!   `--cluster-public-key`; never a key from the wire) -> `UNAUTHENTICATED`
//!   "grant is not signed by a trusted grant key" naming the trusted set by
//!   fingerprint; the grant bytes do not decode -> `UNAUTHENTICATED`;
//!   `grant.sandbox_id` is not ours, or `grant.generation` is not the one
//!   the runtime was started for (`--generation`, >= 1; a grant of
//!   generation 0 is refused too) -> `PERMISSION_DENIED` naming both;
//!   `release = true`
//!   (or no member) -> `INVALID_ARGUMENT`; workload stopped ->
//!   `FAILED_PRECONDITION`; `credential_epoch` below the current one -> `PERMISSION_DENIED`
//!   naming both epochs (I2: a credential of an earlier epoch is refused
//!   everywhere); `credential_epoch` equal to the current one -> accepted only from the
//!   member incarnation that holds it (re-attach after a reconnect: a new
//!   token, the old token is invalid), else `PERMISSION_DENIED`; a higher
//!   epoch fences the previous session (its token becomes invalid) and
//!   becomes the holder. The first activation accepts any epoch. Returns the
//!   token and the `WorkloadInfo`; the workload process is untouched.
//! - **Heartbeat(token)**: only the current session's token ->
//!   `WorkloadInfo`; any other -> `PERMISSION_DENIED` "fenced or unknown
//!   session". After the workload stopped it still answers the current
//!   session (state `stopped`) but revives nothing.
//! - **Relinquish(token)**: planned move. Ends the session; the workload
//!   keeps running (same pid); unsupervised time starts. The holder may
//!   re-activate at the same epoch; anyone else needs a higher one.
//! - **Release(SignedGrant, release = true)**: grant checks as for Activate,
//!   `release = false` -> `INVALID_ARGUMENT`, `credential_epoch` below current ->
//!   `PERMISSION_DENIED`. Stops the workload (state `stopped`, stop_reason
//!   `released`) and answers once the process is gone. Idempotent. Nothing
//!   revives a stopped workload: every later Activate gets
//!   `FAILED_PRECONDITION` (I8: stop and delete win over recovery).
//! - **Exec(token, argv, timeout_ms)**: only the current session (else
//!   `PERMISSION_DENIED`), only while running (else `FAILED_PRECONDITION`);
//!   empty argv -> `INVALID_ARGUMENT`. Runs argv as a child (own process
//!   group) with `OPENSHELL_WORKLOAD_ADDR`, `OPENSHELL_WORKLOAD_PID` and
//!   `OPENSHELL_SANDBOX_ID` in its environment; stdout and stderr are
//!   captured up to 1 MiB each (the rest is dropped). Timeout: 0 means 10 s,
//!   longer than 60 s is clamped to 60 s; past it the group is killed ->
//!   `DEADLINE_EXCEEDED`. A program that cannot start ->
//!   `FAILED_PRECONDITION`. `exit_code` is the exit code, or 128 + signal.
//!   For convenience argv[0] `demo-read` runs `<runtime exe> demo-read
//!   [ADDR]`, which prints the demo counter (from `$OPENSHELL_WORKLOAD_ADDR`
//!   when no ADDR is given).
//! - **Status** (no session): sandbox id and generation, `WorkloadInfo`, active member and
//!   incarnation (empty / 0 unless supervised), current credential epoch and the term of
//!   the grant that set it, state `supervised` | `unsupervised` | `stopped`,
//!   `unsupervised_ms` (0 unless unsupervised), `stop_reason`.
//!
//! # Recovery deadline
//!
//! The runtime is *unsupervised* when no session has had a valid Heartbeat
//! (or its activation) within `--heartbeat-timeout-ms` (default 1000): also
//! from start until the first activation and after Relinquish. A lapsed
//! session's token stays valid; its next heartbeat resumes supervision. When
//! the unsupervised time exceeds `--recovery-deadline-ms` (default 60000) the
//! workload is stopped with stop_reason `SupervisorRecoveryFailed`. The
//! deadline is enforced before every RPC decision (and by a 50 ms ticker), so
//! a late heartbeat cannot win against it. A workload that exits by itself:
//! state `stopped`, stop_reason `workload exited: <status>` (e.g. `workload
//! exited: exit status: 7`).

pub mod demo;
pub mod exec;
mod service;
pub mod session;
pub mod workload;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::grant::GrantVerifier;
use proto::sandbox_runtime::sandbox_runtime_server::SandboxRuntimeServer;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tracing::{error, info, warn};

use crate::trusted_keys::TrustedKeys;

pub use session::{STOP_RECOVERY_FAILED, STOP_RELEASED};
pub use workload::Workload;

/// Stop reason when the runtime itself is asked to shut down.
pub const STOP_SHUTDOWN: &str = "runtime shutdown";

/// How often the run loop enforces the recovery deadline.
const DEADLINE_TICK: Duration = Duration::from_millis(50);

/// Everything a runtime needs to run.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The sandbox this runtime holds; grants must name it.
    pub sandbox_id: String,
    /// The sandbox generation this runtime holds (>= 1); grants must name it.
    pub generation: u64,
    /// The trusted grant keys grants are verified against (a fixed set, or
    /// a file re-read on change).
    pub trusted_keys: TrustedKeys,
    /// gRPC listen address (port 0 picks one).
    pub listen: SocketAddr,
    /// Where to publish the bound `ip:port` (atomically).
    pub addr_file: Option<PathBuf>,
    /// Longest unsupervised time before the workload is stopped.
    pub recovery_deadline: Duration,
    /// A session without Heartbeat for this long no longer supervises.
    pub heartbeat_timeout: Duration,
    /// How long to keep serving after the workload stopped.
    pub linger: Duration,
    /// What to run.
    pub workload: Workload,
    /// Serve plaintext gRPC and publish no CA certificate (tests only).
    pub insecure: bool,
    /// Serve TLS with this certificate chain file and key file, publishing
    /// (required unless `insecure`).
    pub tls_files: Option<(PathBuf, PathBuf)>,
}

impl RuntimeConfig {
    /// A config with the defaults: listen `127.0.0.1:0`, no addr file,
    /// recovery deadline 60 s, heartbeat timeout 1 s, linger 300 s, the demo
    /// workload.
    pub fn new(sandbox_id: impl Into<String>, generation: u64, verifier: GrantVerifier) -> Self {
        Self::with_trusted_keys(
            sandbox_id,
            generation,
            TrustedKeys::Fixed(Arc::new(verifier)),
        )
    }

    /// [`RuntimeConfig::new`] with a set of trusted grant keys (e.g. a file
    /// re-read on change).
    pub fn with_trusted_keys(
        sandbox_id: impl Into<String>,
        generation: u64,
        trusted_keys: TrustedKeys,
    ) -> Self {
        RuntimeConfig {
            sandbox_id: sandbox_id.into(),
            generation,
            trusted_keys,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            addr_file: None,
            recovery_deadline: Duration::from_millis(60_000),
            heartbeat_timeout: Duration::from_millis(1000),
            linger: Duration::from_millis(300_000),
            workload: Workload::Demo,
            insecure: false,
            tls_files: None,
        }
    }
}

/// Why the runtime could not run.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// Generation 0 names no sandbox generation (they start at 1).
    #[error("--generation must be at least 1 (the sandbox generation this runtime holds)")]
    NoGeneration,
    /// The path of the running executable is unknown (needed for the demo
    /// workload and `demo-read`).
    #[error("cannot locate the runtime executable: {0}")]
    CurrentExe(std::io::Error),
    /// The gRPC listener could not bind.
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        /// The requested address.
        addr: SocketAddr,
        /// The OS error.
        error: std::io::Error,
    },
    /// The address file could not be written.
    #[error("cannot write the address file {path}: {error}")]
    AddrFile {
        /// The file.
        path: PathBuf,
        /// The OS error.
        error: std::io::Error,
    },
    /// The TLS files are missing or unusable.
    #[error("cannot set up TLS: {0}")]
    Tls(String),
    /// The workload could not be started.
    #[error("{0}")]
    Workload(String),
    /// The gRPC server failed.
    #[error("gRPC server failed: {0}")]
    Serve(String),
}

/// Makes this process a session leader (`setsid`) so that it outlives
/// whoever spawned it, unless it already leads its session or its process
/// group (a parent that spawned it in a group of its own, as the supervisor
/// does, already detached it from the parent's group signals; setsid would
/// fail with EPERM). Returns true when it called setsid.
///
/// # Errors
/// The OS error of `setsid`.
pub fn become_session_leader() -> std::io::Result<bool> {
    // SAFETY: plain syscalls without pointers.
    unsafe {
        let me = libc::getpid();
        if libc::getsid(0) == me || libc::getpgrp() == me {
            return Ok(false);
        }
        if libc::setsid() < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(true)
}

/// Runs the runtime until the workload stopped and the linger passed, or
/// until `shutdown` resolves (then the workload is stopped first).
///
/// Drive it on a thread that lives as long as the runtime (e.g. `block_on`
/// on the main thread): the workload is spawned from the polling thread and
/// its parent-death signal follows that thread.
///
/// # Errors
/// See [`RuntimeError`]; a workload that stops is not an error.
pub async fn run(
    config: RuntimeConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RuntimeError> {
    if config.generation == 0 {
        return Err(RuntimeError::NoGeneration);
    }
    let exe = std::env::current_exe().map_err(RuntimeError::CurrentExe)?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|error| RuntimeError::Bind {
            addr: config.listen,
            error,
        })?;
    let local = listener.local_addr().map_err(|error| RuntimeError::Bind {
        addr: config.listen,
        error,
    })?;
    let tls = serving_tls(&config)?;
    let (child, facts) = workload::spawn(&config.workload, &config.sandbox_id, &exe).await?;
    info!(
        sandbox = %config.sandbox_id,
        pid = facts.pid,
        started_at_unix_ms = facts.started_at_unix_ms,
        workload_addr = %facts.addr,
        "workload started"
    );
    let core = session::Core::new(
        config.heartbeat_timeout,
        config.recovery_deadline,
        Instant::now(),
    );
    let shared = service::Shared::new(
        config.sandbox_id.clone(),
        config.generation,
        config.trusted_keys.clone(),
        exe,
        facts,
        core,
    );
    let mut exited_rx = shared.exited_rx();
    let holder = tokio::spawn(Arc::clone(&shared).hold_workload(child));

    let (server_stop_tx, server_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serves_tls = tls.is_some();
    let mut server = spawn_server(&shared, listener, tls, server_stop_rx);
    info!(sandbox = %config.sandbox_id, addr = %local, tls = serves_tls, "serving SandboxRuntime");

    let mut outcome = publish(config.addr_file.as_deref(), local);

    let mut server_done = false;
    if outcome.is_ok() {
        (outcome, server_done) = serve_until_done(
            &shared,
            &mut exited_rx,
            &mut server,
            config.linger,
            shutdown,
        )
        .await;
    }

    // Stop the workload (a no-op when it already stopped) and wait for it.
    if shared.decide(|core, _| core.stop(STOP_SHUTDOWN)) {
        info!("stopping the workload");
    }
    if !shared
        .wait_exited(workload::STOP_GRACE + Duration::from_secs(3))
        .await
    {
        warn!("workload still exiting; leaving it to its parent-death signal");
        holder.abort();
    }
    if !server_done {
        let _ = server_stop_tx.send(());
        if tokio::time::timeout(Duration::from_secs(3), &mut server)
            .await
            .is_err()
        {
            server.abort();
        }
    }
    if let Some(path) = &config.addr_file {
        if outcome.is_ok() {
            let _ = std::fs::remove_file(path);
        }
    }
    if let Err(e) = &outcome {
        error!("{e}");
    }
    outcome
}

/// What the runtime serves: plaintext (`insecure`) or TLS from the files.
fn serving_tls(config: &RuntimeConfig) -> Result<Option<proto::tls::ServerTls>, RuntimeError> {
    if config.insecure {
        warn!("--insecure: serving plaintext gRPC");
        return Ok(None);
    }
    let (cert, key) = config.tls_files.as_ref().ok_or_else(|| {
        RuntimeError::Tls(
            "--tls-cert-file and --tls-key-file are required (the identity its launcher made), \
             or --insecure for plaintext"
                .into(),
        )
    })?;
    let server = proto::tls::ServerTls::load(cert, key, proto::tls::ClientAuth::None)
        .map_err(|e| RuntimeError::Tls(format!("--tls-cert-file/--tls-key-file: {e}")))?;
    Ok(Some(server))
}

/// Serves the runtime's gRPC on `listener`: TLS with `tls`, plaintext
/// without.
fn spawn_server(
    shared: &Arc<service::Shared>,
    listener: TcpListener,
    tls: Option<proto::tls::ServerTls>,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<Result<(), tonic::transport::Error>> {
    let (reporter, _) = proto::discovery::health_reporter();
    tokio::spawn(follow_workload(shared.exited_rx(), reporter.clone()));
    let reflection = match proto::discovery::reflection(&[RUNTIME_SERVICE]) {
        Ok(services) => Some(services),
        Err(e) => {
            error!("serving without gRPC reflection: {e}");
            None
        }
    };
    let (reflection_v1, reflection_v1alpha) = reflection.unzip();
    let router = tonic::transport::Server::builder()
        .add_service(SandboxRuntimeServer::new(service::Service(Arc::clone(
            shared,
        ))))
        .add_service(proto::discovery::health_service(reporter))
        .add_optional_service(reflection_v1)
        .add_optional_service(reflection_v1alpha);
    let stop = async {
        let _ = stop.await;
    };
    match tls {
        Some(tls) => tokio::spawn(
            router.serve_with_incoming_shutdown(proto::tls::incoming(listener, tls), stop),
        ),
        None => {
            tokio::spawn(router.serve_with_incoming_shutdown(TcpIncoming::from(listener), stop))
        }
    }
}

/// The runtime's service name, as gRPC health and reflection give it.
pub const RUNTIME_SERVICE: &str =
    <SandboxRuntimeServer<service::Service> as tonic::server::NamedService>::NAME;

/// `grpc.health.v1.Health`: the runtime (`""`) and SandboxRuntime are
/// SERVING while the workload runs, NOT_SERVING once it stopped (released,
/// recovery deadline passed, exited): nothing revives it.
async fn follow_workload(
    mut exited: tokio::sync::watch::Receiver<bool>,
    reporter: proto::discovery::HealthReporter,
) {
    use proto::discovery::ServingStatus;
    loop {
        let status = if *exited.borrow_and_update() {
            ServingStatus::NotServing
        } else {
            ServingStatus::Serving
        };
        for name in ["", RUNTIME_SERVICE] {
            reporter.set_service_status(name, status).await;
        }
        if exited.changed().await.is_err() {
            return;
        }
    }
}

/// Publishes the CA certificate (when serving TLS), then the address, each
/// atomically: a reader that sees the address finds the certificate.
fn publish(addr_file: Option<&Path>, local: SocketAddr) -> Result<(), RuntimeError> {
    let Some(path) = addr_file else {
        return Ok(());
    };
    demo::write_atomically(path, &local.to_string()).map_err(|error| RuntimeError::AddrFile {
        path: path.to_path_buf(),
        error,
    })
}

/// Serves until shutdown is requested, the workload stopped (then through
/// the linger, so supervisors can still read its end), or the server failed;
/// meanwhile applies the session deadlines every [`DEADLINE_TICK`].
///
/// # Returns
/// The run's outcome and whether the server task has already ended.
async fn serve_until_done(
    shared: &service::Shared,
    exited_rx: &mut tokio::sync::watch::Receiver<bool>,
    server: &mut tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    linger: Duration,
    shutdown: impl Future<Output = ()>,
) -> (Result<(), RuntimeError>, bool) {
    tokio::pin!(shutdown);
    let mut tick = tokio::time::interval(DEADLINE_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = &mut shutdown => {
                info!("shutdown requested");
                return (Ok(()), false);
            }
            _ = tick.tick() => shared.decide(|_, _| ()),
            changed = exited_rx.changed() => {
                if changed.is_err() || *exited_rx.borrow_and_update() {
                    info!(linger_ms = linger.as_millis(), "workload stopped; serving until the linger ends");
                    tokio::select! {
                        () = tokio::time::sleep(linger) => {}
                        () = &mut shutdown => info!("shutdown requested"),
                    }
                    return (Ok(()), false);
                }
            }
            served = &mut *server => {
                return (Err(RuntimeError::Serve(match served {
                    Ok(Ok(())) => "stopped unexpectedly".to_string(),
                    Ok(Err(e)) => e.to_string(),
                    Err(e) => e.to_string(),
                })), true);
            }
        }
    }
}

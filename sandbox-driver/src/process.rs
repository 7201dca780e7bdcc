//! The process driver: each runtime is a separate `openshell-sandbox-runtime`
//! process on this host, for local development and tests. When the driver
//! may create network namespaces (root, `ip` present) each runtime runs in
//! its own ([`netns`]), reached over a veth pair at `<namespace IP>:7400`;
//! otherwise on `127.0.0.1:<free port>`. With a shared namespace
//! ([`ProcessDriver::with_shared_netns`], e.g. the Jepsen harness's
//! members namespace) every runtime instead joins that existing namespace
//! and listens on its address with a port the runtime binds (port 0, read
//! back from `address`); the driver neither creates nor removes it.
//!
//! # The directory
//!
//! `dir` plays the API server's part (gateways on one host share it;
//! created 0700). Runtime `name` is the directory `<dir>/<name>/`, created
//! by one atomic `mkdir`: when it exists the runtime is adopted, never
//! started a second time. Inside, in the order they are written:
//!
//! | file | content |
//! |---|---|
//! | `spec.json` | `{"sandbox_id": ..., "generation": ...}` |
//! | `subnet` | the /30 (namespace mode) |
//! | `netns` | the namespace name (namespace mode) |
//! | `tls.key` (0600), `tls.crt`, `ca.crt` | the runtime's identity ([`crate::identity`]) |
//! | `runtime.log` | the runtime's stdout and stderr |
//! | `pid` | the runtime's pid, once spawned |
//! | `address` | `ip:port`, written by the runtime once it serves (`--addr-file`) |
//!
//! The directory's scope ([`SandboxDriver::scope`]) is `process:<id>`, the
//! id (32 hex digits) read from `<dir>/.driver-scope`, which the first
//! driver over the directory writes (to a temporary file, then linked into
//! place, so two gateways starting at once agree on one id). Gateways
//! sharing the directory share the scope; a gateway pointed at another
//! directory has another, and its launcher never judges this directory's
//! runtimes lost.
//!
//! A failed create (an `ip` command, the spawn) removes what it made,
//! directory included, and returns the error: the next `ensure` starts
//! over. A directory without `pid` is Pending (another gateway is creating
//! it), Failed once quiet for [`entry::CREATE_TIMEOUT`] (its creator died).
//!
//! # Processes
//!
//! The runtime starts in a session of its own (`setsid` before exec), with
//! stdin null and its output in `runtime.log`, so a gateway killed with
//! SIGKILL leaves it running; the spawning driver reaps it in a task. It is
//! alive when `/proc/<pid>/cmdline` names the runtime executable and its
//! sandbox id (a reused pid is not ours). `delete` sends SIGTERM to its
//! process group, SIGKILL after [`STOP_GRACE`], deletes the namespace (the
//! veth pair goes with it) and the directory (its /30 returns to the pool).

pub mod entry;
pub mod netns;

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tracing::{info, warn};

use crate::{DriverError, LaunchSpec, Observed, RuntimeState, SandboxDriver, RUNTIME_PORT};
use netns::Netns;

/// `spec.json` of an entry.
pub const ENTRY_SPEC: &str = "spec.json";
/// The runtime's pid.
pub const ENTRY_PID: &str = "pid";
/// The runtime's `ip:port`.
pub const ENTRY_ADDRESS: &str = "address";
/// The runtime's network namespace.
pub const ENTRY_NETNS: &str = "netns";
/// The runtime's /30 (`10.213.x.y/30`).
pub const ENTRY_SUBNET: &str = "subnet";
/// The runtime's stdout and stderr.
pub const ENTRY_LOG: &str = "runtime.log";
/// The CA certificate that signed the runtime's certificate.
pub const ENTRY_CA: &str = "ca.crt";
/// The runtime's certificate.
pub const ENTRY_CERT: &str = "tls.crt";
/// The runtime's private key (0600).
pub const ENTRY_KEY: &str = "tls.key";

/// Between SIGTERM and SIGKILL when deleting a runtime.
pub const STOP_GRACE: Duration = Duration::from_secs(3);

/// Whether runtimes get network namespaces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NetnsMode {
    /// Namespaces when the driver may create them (euid 0 and `ip netns
    /// list` works), else 127.0.0.1.
    #[default]
    Auto,
    /// Namespaces, or [`ProcessDriver::new`] fails.
    On,
    /// 127.0.0.1 ports.
    Off,
}

/// An existing network namespace every runtime joins
/// ([`ProcessDriver::with_shared_netns`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedNetns {
    /// Its name (as `ip netns list` shows it).
    pub name: String,
    /// An address it carries: runtimes listen on `<ip>:<port they bind>`.
    pub ip: Ipv4Addr,
}

/// What a [`ProcessDriver`] needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessConfig {
    /// The driver's directory (created 0700; shared by the gateways of a
    /// host).
    pub dir: PathBuf,
    /// The `openshell-sandbox-runtime` executable.
    pub runtime_bin: PathBuf,
    /// Network namespaces or not.
    pub netns: NetnsMode,
}

/// Runtimes as local processes. See the module doc.
#[derive(Debug)]
pub struct ProcessDriver {
    /// The driver's directory.
    dir: PathBuf,
    /// The runtime executable.
    runtime_bin: PathBuf,
    /// Its file name, which a live runtime's command line carries.
    runtime_file: OsString,
    /// Whether runtimes get network namespaces.
    netns: bool,
    /// The namespace every runtime joins instead (never created or
    /// removed by the driver).
    shared: Option<SharedNetns>,
    /// `process:<id>` of the directory (see the module doc).
    scope: String,
}

/// The file in the driver's directory holding its scope id.
pub const SCOPE_FILE: &str = ".driver-scope";

/// The scope id of `dir`: read from [`SCOPE_FILE`], or made (16 random
/// bytes, hex) and linked into place when absent; whoever links first wins
/// and every driver reads the winner's.
fn directory_scope(dir: &Path) -> Result<String, DriverError> {
    let path = dir.join(SCOPE_FILE);
    if !path.exists() {
        let mut id = [0u8; 16];
        getrandom::fill(&mut id)
            .map_err(|e| unavailable(format!("no random bytes for {}: {e}", path.display())))?;
        let id = hex::encode(id);
        // Named by the id itself: no other writer shares this file.
        let temp = dir.join(format!("{SCOPE_FILE}.{id}"));
        let made =
            std::fs::write(&temp, format!("{id}\n")).and_then(|()| {
                match std::fs::hard_link(&temp, &path) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
                    _ => Ok(()),
                }
            });
        let _ = std::fs::remove_file(&temp);
        made.map_err(|e| unavailable(format!("{}: {e}", path.display())))?;
    }
    // At most 64 bytes are read: an id is 32 (and a newline).
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, 64), &mut bytes))
        .map_err(|e| unavailable(format!("{}: {e}", path.display())))?;
    let text = String::from_utf8_lossy(&bytes);
    let id = text.trim();
    if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(unavailable(format!(
            "{} holds {:?}, not a scope id (32 hex digits); it names which runtimes \
             gateways sharing this directory see: restore it, or remove it only if \
             no runtime of this directory is recorded",
            path.display(),
            text.chars().take(64).collect::<String>()
        )));
    }
    Ok(format!("process:{}", id.to_ascii_lowercase()))
}

pub(crate) fn unavailable(message: String) -> DriverError {
    DriverError::Unavailable {
        driver: "process",
        message,
    }
}

fn refused(message: String) -> DriverError {
    DriverError::Refused {
        driver: "process",
        message,
    }
}

impl ProcessDriver {
    /// A driver over `config.dir` (created 0700 if missing).
    ///
    /// # Errors
    /// [`DriverError::Unavailable`]: the directory cannot be made; the
    /// runtime executable has no file name; [`NetnsMode::On`] without root
    /// or without a working `ip netns`.
    pub fn new(config: ProcessConfig) -> Result<Self, DriverError> {
        let runtime_file = config
            .runtime_bin
            .file_name()
            .ok_or_else(|| {
                unavailable(format!(
                    "runtime executable {} has no file name",
                    config.runtime_bin.display()
                ))
            })?
            .to_os_string();
        if !config.dir.is_dir() {
            std::fs::create_dir_all(&config.dir)
                .and_then(|()| {
                    std::fs::set_permissions(&config.dir, std::fs::Permissions::from_mode(0o700))
                })
                .map_err(|e| unavailable(format!("{}: {e}", config.dir.display())))?;
        }
        let netns = match config.netns {
            NetnsMode::Off => false,
            NetnsMode::On => {
                netns::available().map_err(|why| {
                    unavailable(format!(
                        "network namespaces requested (On) but unavailable: {why}"
                    ))
                })?;
                true
            }
            NetnsMode::Auto => netns::available().is_ok(),
        };
        let scope = directory_scope(&config.dir)?;
        info!(dir = %config.dir.display(), netns, %scope, "process driver");
        Ok(ProcessDriver {
            dir: config.dir,
            runtime_bin: config.runtime_bin,
            runtime_file,
            netns,
            shared: None,
            scope,
        })
    }

    /// Runs every runtime in the existing namespace `shared` (no namespace
    /// per runtime), listening on `shared.ip` at a port it binds: for hosts
    /// whose supervisors reach runtimes through one namespace (the Jepsen
    /// harness's members namespace). Deleting a runtime leaves the
    /// namespace alone.
    ///
    /// # Errors
    /// [`DriverError::Unavailable`] when the namespace does not exist
    /// (`/run/netns/<name>`) or the driver may not enter it (not root).
    pub fn with_shared_netns(mut self, shared: SharedNetns) -> Result<Self, DriverError> {
        if shared.name.is_empty() || shared.name.contains('/') {
            return Err(unavailable(format!(
                "{:?} is not a namespace name",
                shared.name
            )));
        }
        let path = Path::new("/run/netns").join(&shared.name);
        if !path.exists() {
            return Err(unavailable(format!(
                "shared namespace {}: {} does not exist (ip netns add it first)",
                shared.name,
                path.display()
            )));
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(unavailable(format!(
                "shared namespace {}: entering it needs root",
                shared.name
            )));
        }
        info!(netns = %shared.name, ip = %shared.ip, "process driver: runtimes join a shared namespace");
        self.netns = false;
        self.shared = Some(shared);
        Ok(self)
    }

    /// The namespace every runtime joins, if one was given.
    pub fn shared_netns(&self) -> Option<&SharedNetns> {
        self.shared.as_ref()
    }

    /// Whether runtimes get network namespaces.
    pub fn uses_netns(&self) -> bool {
        self.netns
    }

    /// The driver's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory of runtime `name`, refusing names that are not one
    /// path component.
    fn entry(&self, name: &str) -> Result<PathBuf, DriverError> {
        if name.is_empty() || name.starts_with('.') || name.contains('/') {
            return Err(refused(format!("{name:?} is not a runtime name")));
        }
        Ok(self.dir.join(name))
    }

    /// Creates runtime `name` in its fresh directory `entry`.
    async fn create(&self, spec: &LaunchSpec, name: &str, entry: &Path) -> Result<(), DriverError> {
        std::fs::set_permissions(entry, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| unavailable(format!("{}: {e}", entry.display())))?;
        let spec_file = entry::SpecFile {
            sandbox_id: spec.sandbox_id.clone(),
            generation: spec.generation,
        };
        let json = serde_json::to_vec(&spec_file)
            .map_err(|e| unavailable(format!("spec.json of {name}: {e}")))?;
        entry::write_atomically(&entry.join(ENTRY_SPEC), &json, 0o600)?;
        let (listen, ns) = if let Some(shared) = &self.shared {
            // Port 0: the runtime binds a free port of that namespace and
            // writes it to `address` (no port is guessed from outside).
            (SocketAddr::new(IpAddr::V4(shared.ip), 0), None)
        } else if self.netns {
            let (dir, at) = (self.dir.clone(), entry.to_path_buf());
            let (index, locks) = tokio::task::spawn_blocking(move || netns::allocate(&dir, &at))
                .await
                .map_err(|e| unavailable(format!("subnet allocation: {e}")))??;
            let ns = Netns::new(&netns::namespace_name(&self.dir, name), index);
            ns.add().await?;
            // Recorded once it is ours: a failed create removes only what
            // it made, never a namespace someone else left by this name.
            if let Err(e) =
                entry::write_atomically(&entry.join(ENTRY_NETNS), ns.name.as_bytes(), 0o600)
            {
                let _ = netns::remove(&ns.name, &ns.host_link).await;
                return Err(e);
            }
            ns.plumb().await?;
            drop(locks);
            (
                SocketAddr::new(IpAddr::V4(ns.runtime_ip()), RUNTIME_PORT),
                Some(ns),
            )
        } else {
            (
                SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), free_port()?),
                None,
            )
        };
        let identity = crate::identity::issue("process", name, &[listen.ip()])?;
        entry::write_atomically(
            &entry.join(ENTRY_KEY),
            identity.key_pem.expose().as_bytes(),
            0o600,
        )?;
        entry::write_atomically(&entry.join(ENTRY_CERT), identity.cert_pem.as_bytes(), 0o644)?;
        entry::write_atomically(&entry.join(ENTRY_CA), identity.ca_pem.as_bytes(), 0o644)?;
        let join = ns
            .as_ref()
            .map(|ns| ns.name.as_str())
            .or(self.shared.as_ref().map(|s| s.name.as_str()));
        let mut child = self.spawn(spec, entry, listen, join)?;
        let pid = child.id().unwrap_or_default();
        if let Err(e) =
            entry::write_atomically(&entry.join(ENTRY_PID), pid.to_string().as_bytes(), 0o600)
        {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(e);
        }
        info!(
            runtime = %name,
            sandbox = %spec.sandbox_id,
            generation = spec.generation,
            pid,
            %listen,
            netns = join.unwrap_or(""),
            "runtime started"
        );
        // Reap it when it exits; it never depends on this task.
        tokio::spawn(async move {
            let status = child.wait().await;
            info!(pid, ?status, "runtime exited");
        });
        Ok(())
    }

    /// Spawns the runtime detached: its own session, stdin null, output to
    /// `runtime.log`, no `OPENSHELL_*` variables of the gateway's.
    fn spawn(
        &self,
        spec: &LaunchSpec,
        entry: &Path,
        listen: SocketAddr,
        ns: Option<&str>,
    ) -> Result<tokio::process::Child, DriverError> {
        let log_path = entry.join(ENTRY_LOG);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            // Only the driver's user reads what the workload printed.
            .mode(0o600)
            .open(&log_path)
            .map_err(|e| unavailable(format!("{}: {e}", log_path.display())))?;
        let log_err = log
            .try_clone()
            .map_err(|e| unavailable(format!("{}: {e}", log_path.display())))?;
        let mut cmd = match ns {
            Some(ns) => {
                let mut cmd = tokio::process::Command::new("ip");
                cmd.args(["netns", "exec", ns]).arg(&self.runtime_bin);
                cmd
            }
            None => tokio::process::Command::new(&self.runtime_bin),
        };
        cmd.args(runtime_args(spec, entry, listen));
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("OPENSHELL_") {
                cmd.env_remove(key);
            }
        }
        cmd.stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .kill_on_drop(false);
        // SAFETY: between fork and exec, only setsid (async-signal-safe).
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.spawn()
            .map_err(|e| unavailable(format!("cannot start {}: {e}", self.runtime_bin.display())))
    }

    /// Removes what a failed create made: the namespace, the directory.
    async fn roll_back(&self, name: &str, entry: &Path) {
        if let Some(ns) = entry::read_line(entry, ENTRY_NETNS) {
            let (host_link, _) = netns::veth_names(&ns);
            if let Err(e) = netns::remove(&ns, &host_link).await {
                warn!(runtime = %name, error = %e, "cannot remove the namespace of a failed create");
            }
        }
        if let Err(e) = std::fs::remove_dir_all(entry) {
            warn!(runtime = %name, error = %e, "cannot remove the directory of a failed create");
        }
    }

    /// The state of the entry of `name`.
    fn observe(&self, entry: &Path, name: &str, sandbox_id: &str) -> RuntimeState {
        entry::observe(entry, name, sandbox_id, &self.runtime_file)
    }

    /// SIGTERM to the runtime's process group, SIGKILL after
    /// [`STOP_GRACE`]; returns once it is gone (or 2 s after SIGKILL).
    async fn stop(&self, pid: i32, sandbox_id: &str) {
        let alive =
            || entry::liveness(pid, sandbox_id, &self.runtime_file) != entry::Liveness::Gone;
        signal_group(pid, libc::SIGTERM);
        let deadline = Instant::now() + STOP_GRACE;
        while alive() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if !alive() {
            return;
        }
        warn!(
            pid,
            "runtime still alive {STOP_GRACE:?} after SIGTERM: SIGKILL"
        );
        signal_group(pid, libc::SIGKILL);
        let deadline = Instant::now() + Duration::from_secs(2);
        while alive() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Sends `signal` to process group `pid` (the runtime leads its session),
/// and to `pid` itself should it lead no group.
fn signal_group(pid: i32, signal: libc::c_int) {
    // SAFETY: plain syscalls; a pid that is gone gives ESRCH.
    unsafe {
        if libc::kill(-pid, signal) != 0 {
            libc::kill(pid, signal);
        }
    }
}

/// The runtime's arguments.
fn runtime_args(spec: &LaunchSpec, entry: &Path, listen: SocketAddr) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![
        "--sandbox-id".into(),
        spec.sandbox_id.clone().into(),
        "--generation".into(),
        spec.generation.to_string().into(),
    ];
    // Checked by `ensure` before anything is created.
    if let Ok(trust) = spec.trust_args("process") {
        args.extend(trust.into_iter().map(Into::into));
    }
    args.extend([
        "--listen".into(),
        listen.to_string().into(),
        "--tls-cert-file".into(),
        entry.join(ENTRY_CERT).into(),
        "--tls-key-file".into(),
        entry.join(ENTRY_KEY).into(),
        "--addr-file".into(),
        entry.join(ENTRY_ADDRESS).into(),
        "--recovery-deadline-ms".into(),
        spec.recovery_deadline_ms.to_string().into(),
    ]);
    if !spec.workload.is_empty() {
        args.push("--".into());
        args.extend(spec.workload.iter().map(Into::into));
    }
    args
}

/// A free port on 127.0.0.1: bound, read and closed (another process may
/// take it before the runtime binds it; the runtime then fails, and the
/// launch with it).
fn free_port() -> Result<u16, DriverError> {
    std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| unavailable(format!("no free port on 127.0.0.1: {e}")))
}

/// Whether `address` accepts a TCP connection within 1 s.
async fn accepts_tcp(address: &str) -> bool {
    matches!(
        tokio::time::timeout(
            Duration::from_secs(1),
            tokio::net::TcpStream::connect(address)
        )
        .await,
        Ok(Ok(_))
    )
}

#[async_trait]
impl SandboxDriver for ProcessDriver {
    fn kind(&self) -> &'static str {
        "process"
    }

    fn scope(&self) -> &str {
        &self.scope
    }

    async fn ensure(&self, spec: &LaunchSpec) -> Result<RuntimeState, DriverError> {
        spec.trust_args("process")?;
        let name = spec.name();
        let entry = self.entry(&name)?;
        match std::fs::create_dir(&entry) {
            Ok(()) => {
                if let Err(e) = self.create(spec, &name, &entry).await {
                    // The caller (the launcher) reports the error it returns.
                    tracing::debug!(runtime = %name, error = %e, "create failed; removing what it made");
                    self.roll_back(&name, &entry).await;
                    return Err(e);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(unavailable(format!("{}: {e}", entry.display()))),
        }
        let state = self.observe(&entry, &name, &spec.sandbox_id);
        if let RuntimeState::Running(endpoint) = &state {
            if !accepts_tcp(&endpoint.address).await {
                return Ok(RuntimeState::Pending {
                    detail: format!(
                        "starting: {} does not accept connections yet",
                        endpoint.address
                    ),
                });
            }
        }
        Ok(state)
    }

    async fn list(&self) -> Result<Vec<Observed>, DriverError> {
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| unavailable(format!("{}: {e}", self.dir.display())))?;
        let mut observed = Vec::new();
        for dir_entry in entries.filter_map(Result::ok) {
            let path = dir_entry.path();
            let Some(name) = dir_entry.file_name().to_str().map(ToString::to_string) else {
                continue;
            };
            if name.starts_with('.') || !path.is_dir() {
                continue;
            }
            let Some(spec) = entry::read_spec(&path) else {
                continue;
            };
            let state = self.observe(&path, &name, &spec.sandbox_id);
            observed.push(Observed {
                name,
                sandbox_id: spec.sandbox_id,
                generation: spec.generation,
                state,
            });
        }
        observed.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(observed)
    }

    async fn delete(&self, name: &str) -> Result<(), DriverError> {
        let entry = self.entry(name)?;
        if !entry.is_dir() {
            return Ok(());
        }
        if let (Some(spec), Some(pid)) = (entry::read_spec(&entry), entry::read_pid(&entry)) {
            if entry::liveness(pid, &spec.sandbox_id, &self.runtime_file) != entry::Liveness::Gone {
                self.stop(pid, &spec.sandbox_id).await;
            }
        }
        if let Some(ns) = entry::read_line(&entry, ENTRY_NETNS) {
            let (host_link, _) = netns::veth_names(&ns);
            netns::remove(&ns, &host_link).await?;
        }
        match std::fs::remove_dir_all(&entry) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(unavailable(format!("{}: {e}", entry.display()))),
        }
        info!(runtime = %name, "runtime deleted");
        Ok(())
    }
}

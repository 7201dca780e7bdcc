//! Supervisor processes for end-to-end tests: real `openshell-supervisor`
//! processes ([`Supervisor`]) on loopback, beside a [`Cluster`] of gateways
//! (whose leader launches the sandbox runtimes, see [`crate::runtimes`]);
//! plus the pool helpers the
//! supervision scenarios share ([`three_gateways`], [`wait_pool`],
//! [`running_sandbox`], ...).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::bins::supervisor_bin;
use crate::gateway::{eventually, Cluster, Gateway};
use crate::ports::free_port;
use crate::TestResult;
use local_cluster::process::{log_to, ChildProcess};
use local_cluster::supervisor::{SupervisorSecurity, SupervisorSpec};
use proto::pool_admin::pool_admin_client::PoolAdminClient;
use proto::pool_admin::{
    CreateSandboxRequest, ExecSandboxRequest, GetSupervisorPoolStatusRequest, ListSandboxesRequest,
    PoolMember, Sandbox, SupervisorPoolStatus,
};
use proto::pool_types::{MemberState, SandboxPhase};
use tonic::transport::Channel;

/// The gateway flags a test asks for, or none when `OPENSHELL_BENCH_DEFAULTS`
/// is set: `scripts/bench-supervision.sh` reruns the scenarios at default
/// settings to measure them.
pub fn timing<'a>(flags: &[&'a str]) -> Vec<&'a str> {
    if std::env::var_os("OPENSHELL_BENCH_DEFAULTS").is_some() {
        Vec::new()
    } else {
        flags.to_vec()
    }
}

/// One `openshell-supervisor` process.
pub struct Supervisor {
    pub member: String,
    pub gateways: Vec<String>,
    pub http: String,
    pub log_path: PathBuf,
    pub credential: String,
    /// Attach in the listed gateway order.
    pub listed_order: bool,
    /// Extra environment.
    pub env: Vec<(String, String)>,
    /// Pass `--insecure` (the default: no credential or trusted keys
    /// needed, as before the supervisor was secure by default).
    pub insecure: bool,
    /// `--credential-file` (instead of `--credential`), if set.
    pub credential_file: Option<PathBuf>,
    /// `--trusted-grant-keys-file`, if set.
    pub trusted_keys_file: Option<PathBuf>,
    /// `--tls-ca-file` (TLS to the gateways), if set.
    pub tls_ca_file: Option<PathBuf>,
    child: ChildProcess,
}

impl Supervisor {
    pub fn new(member: &str, gateways: Vec<String>, root: &std::path::Path) -> Self {
        Supervisor {
            member: member.into(),
            gateways,
            http: format!("127.0.0.1:{}", free_port()),
            log_path: root.join(format!("{member}.log")),
            credential: String::new(),
            listed_order: false,
            env: Vec::new(),
            insecure: true,
            credential_file: None,
            trusted_keys_file: None,
            tls_ca_file: None,
            child: ChildProcess::default(),
        }
    }

    pub fn start(&mut self) {
        assert!(!self.child.is_running(), "{} already running", self.member);
        let mut spec = SupervisorSpec::new(&self.member, self.gateways.clone());
        spec.http_listen = Some(self.http.clone());
        spec.capacity = Some(10);
        spec.listed_order = self.listed_order;
        spec.security = SupervisorSecurity {
            insecure: self.insecure,
            tls_ca_file: self.tls_ca_file.clone(),
            credential: self
                .credential_file
                .is_none()
                .then(|| self.credential.clone()),
            credential_file: self.credential_file.clone(),
            trusted_keys_file: self.trusted_keys_file.clone(),
        };
        let mut command = Command::new(supervisor_bin());
        command
            .args(spec.args())
            .env("RUST_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        log_to(&mut command, &self.log_path).unwrap_or_else(|e| panic!("{e}"));
        self.child
            .spawn(&mut command, &format!("supervisor {}", self.member))
            .unwrap_or_else(|e| panic!("{e}"));
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.pid().and_then(|pid| u32::try_from(pid).ok())
    }

    pub fn kill9(&mut self) {
        self.child.kill9();
    }

    pub fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .args([signal, &pid.to_string()])
                .status();
        }
    }

    /// GET /readyz: (status code, body).
    pub async fn readyz(&self) -> (u16, String) {
        http_get(&self.http, "/readyz").await
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A gateway's extra arguments for an HTTP listener (`/metrics`, probes)
/// on a free loopback port (for [`Cluster::start_each`]).
pub fn http_args(_: u64) -> Vec<String> {
    vec!["--http-listen".into(), format!("127.0.0.1:{}", free_port())]
}

/// One counter or gauge of `node`'s `/metrics` (0 when absent).
///
/// # Panics
/// When `node` was started without `--http-listen` ([`http_args`]).
pub async fn metric(node: &Gateway, name: &str) -> u64 {
    let Some(http) = node.http_addr() else {
        panic!("node {} has no --http-listen", node.id)
    };
    let (_, body) = http_get(&http, "/metrics").await;
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// A minimal HTTP/1.0 GET on loopback.
pub async fn http_get(addr: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(Ok(mut stream)) =
        tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr)).await
    else {
        return (0, "unreachable".into());
    };
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return (0, "write failed".into());
    }
    let mut response = String::new();
    let _ =
        tokio::time::timeout(Duration::from_secs(2), stream.read_to_string(&mut response)).await;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (code, body)
}

/// A 100 ms tick and a 1 s heartbeat TTL: scenarios finish in seconds.
pub const FAST_TIMING: &[&str] = &["--tick-interval-ms", "100", "--heartbeat-ttl-ms", "1000"];

/// The set-up of every supervision scenario: three gateways started with
/// `flags`, a leader elected, their addresses (what supervisors dial), and
/// the guard that kills the runtimes and workloads started under the
/// cluster's root. Bind all three (`let (cluster, gateways, _cleanup)`): the
/// guard, declared last, drops first.
pub async fn three_gateways(flags: &[&str]) -> (Cluster, Vec<String>, KillUnder) {
    let cluster = Cluster::start(3, flags);
    cluster.wait_leader("bootstrap").await;
    let gateways = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
    let cleanup = KillUnder(cluster.root.path().to_path_buf());
    (cluster, gateways, cleanup)
}

/// Starts one supervisor per member id of `members` (insecure, on
/// `gateways`, under the cluster's root) and waits until the pool shows
/// that many active members.
pub async fn start_supervisors(
    cluster: &Cluster,
    gateways: &[String],
    members: &[&str],
) -> Vec<Supervisor> {
    let mut supervisors: Vec<Supervisor> = members
        .iter()
        .map(|m| Supervisor::new(m, gateways.to_vec(), cluster.root.path()))
        .collect();
    for s in &mut supervisors {
        s.start();
    }
    wait_pool(
        cluster,
        &format!("{} active members", members.len()),
        Duration::from_secs(20),
        |s| {
            s.members
                .iter()
                .filter(|m| m.state() == MemberState::Active)
                .count()
                == members.len()
        },
    )
    .await;
    supervisors
}

/// Kills every process whose command line mentions `dir` (the runtimes and
/// workloads a test started), when dropped.
pub struct KillUnder(pub PathBuf);

impl Drop for KillUnder {
    fn drop(&mut self) {
        let _ = Command::new("pkill")
            .args(["-9", "-f", &self.0.display().to_string()])
            .status();
    }
}

pub async fn pool_admin(node: &Gateway) -> TestResult<PoolAdminClient<Channel>> {
    // TLS for a secure gateway (its calls then need `node.request`).
    Ok(PoolAdminClient::new(node.channel().await?))
}

/// Sandbox `id` as `node` lists it (first page of 10: for pools of a few
/// sandboxes); an error when it is not listed.
pub async fn listed_sandbox(node: &Gateway, id: &str) -> TestResult<Sandbox> {
    let page = pool_admin(node)
        .await?
        .list_sandboxes(ListSandboxesRequest {
            page_size: 10,
            ..Default::default()
        })
        .await?
        .into_inner();
    page.sandboxes
        .into_iter()
        .find(|s| s.id == id)
        .ok_or_else(|| format!("{id} is not listed").into())
}

/// Pool status through the first live gateway that answers.
pub async fn pool_status(cluster: &Cluster) -> TestResult<SupervisorPoolStatus> {
    let mut last = None;
    for node in cluster.nodes.iter().filter(|n| n.is_running()) {
        match pool_admin(node).await {
            Ok(mut c) => match c
                .get_supervisor_pool_status(node.request(GetSupervisorPoolStatusRequest {
                    stale: false,
                    ..Default::default()
                }))
                .await
            {
                Ok(s) => return Ok(s.into_inner()),
                Err(e) => last = Some(e.to_string()),
            },
            Err(e) => last = Some(e.to_string()),
        }
    }
    Err(last.unwrap_or_else(|| "no gateway running".into()).into())
}

/// Waits until `cond` holds on the pool status.
pub async fn wait_pool(
    cluster: &Cluster,
    why: &str,
    timeout: Duration,
    cond: impl Fn(&SupervisorPoolStatus) -> bool,
) -> SupervisorPoolStatus {
    let deadline = Instant::now() + timeout;
    let mut last = None;
    loop {
        if let Ok(status) = pool_status(cluster).await {
            if cond(&status) {
                return status;
            }
            last = Some(status);
        }
        if Instant::now() > deadline {
            cluster.dump_logs();
            panic!("pool did not reach: {why}; last status: {last:#?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn sandbox<'a>(status: &'a SupervisorPoolStatus, id: &str) -> Option<&'a Sandbox> {
    status.sandboxes.iter().find(|s| s.id == id)
}

pub fn member<'a>(status: &'a SupervisorPoolStatus, id: &str) -> Option<&'a PoolMember> {
    status.members.iter().find(|m| m.id == id)
}

/// Creates a demo sandbox through any gateway.
pub async fn create_sandbox(cluster: &Cluster, id: &str) -> Sandbox {
    create_sandbox_running(cluster, id, "demo").await
}

/// Creates a sandbox whose launch material is `material` (a JSON argv, or
/// "demo") through any gateway.
pub async fn create_sandbox_running(cluster: &Cluster, id: &str, material: &str) -> Sandbox {
    eventually("create sandbox", || async {
        let node = cluster
            .nodes
            .iter()
            .find(|n| n.is_running())
            .ok_or("no gateway")?;
        Ok(pool_admin(node)
            .await?
            .create_sandbox(node.request(CreateSandboxRequest {
                sandbox_id: id.into(),
                launch_id: String::new(),
                material_ref: material.into(),
                request_id: String::new(),
            }))
            .await?
            .into_inner())
    })
    .await
}

/// Runs `demo-read` in the sandbox through a gateway; returns (counter, member that ran it).
pub async fn read_counter(cluster: &Cluster, id: &str) -> TestResult<(u64, String)> {
    let node = cluster
        .nodes
        .iter()
        .find(|n| n.is_running())
        .ok_or("no gateway")?;
    let reply = pool_admin(node)
        .await?
        .exec_sandbox(node.request(ExecSandboxRequest {
            sandbox_id: id.into(),
            argv: vec!["demo-read".into()],
            timeout_ms: 5000,
        }))
        .await?
        .into_inner();
    if reply.exit_code != 0 {
        return Err(format!(
            "demo-read exited {}: {}",
            reply.exit_code,
            String::from_utf8_lossy(&reply.stderr)
        )
        .into());
    }
    let counter = String::from_utf8_lossy(&reply.stdout)
        .trim()
        .parse::<u64>()?;
    Ok((counter, reply.executed_by))
}

/// Reads sandbox `id`'s demo counter until it passes `floor` (the value
/// read before a kill, drain or takeover); returns (counter, member that ran
/// it). The workload ticks every 100 ms, so a takeover faster than one tick
/// still reads `floor`; a workload frozen, or one that went away, never
/// passes it within 10 s and the call fails naming the last value.
pub async fn read_counter_above(
    cluster: &Cluster,
    id: &str,
    floor: u64,
) -> TestResult<(u64, String)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (counter, by) = read_counter(cluster, id).await?;
        if counter > floor {
            return Ok((counter, by));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(
                format!("{id}: counter still {counter}, not above {floor}, after 10 s").into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether a process is alive.
pub fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// Waits until member `id` is in `state` ("active", "expired", ...).
pub async fn wait_member(cluster: &Cluster, id: &str, state: &str) {
    let why = format!("member {id} {state}");
    wait_pool(cluster, &why, Duration::from_secs(20), |s| {
        s.members
            .iter()
            .any(|m| m.id == id && MemberState::name_of(m.state) == state)
    })
    .await;
}

/// Creates a demo sandbox and waits until it is assigned and its workload
/// reported; returns that view.
pub async fn running_sandbox(cluster: &Cluster, id: &str) -> Sandbox {
    create_sandbox(cluster, id).await;
    let status = wait_pool(
        cluster,
        &format!("{id} running"),
        Duration::from_secs(30),
        |s| {
            sandbox(s, id)
                .map(|sb| sb.phase() == SandboxPhase::Assigned && sb.pid != 0)
                .unwrap_or(false)
        },
    )
    .await;
    sandbox(&status, id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} vanished"))
}

/// Prints the tail of every supervisor's log when the test panics (keep it
/// alive for the test's length: `let _logs = LogsOnFailure(&supervisors);`).
pub struct LogsOnFailure<'a>(pub &'a [Supervisor]);

impl Drop for LogsOnFailure<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for s in self.0 {
            let log = s.log();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            eprintln!("----- supervisor {} log (last 30 lines) -----", s.member);
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// A client to the runtime of `sandbox`'s newest generation that the
/// cluster's gateways launched, verified as a supervisor verifies it.
pub async fn runtime_client(
    cluster: &Cluster,
    sandbox: &str,
) -> TestResult<proto::sandbox_runtime::sandbox_runtime_client::SandboxRuntimeClient<Channel>> {
    let entry = crate::runtimes::entry_of(&cluster.runtimes_dir(), sandbox)?;
    crate::runtimes::client(&entry).await
}

/// Exits of a running supervisor, for the stop scenarios (t41).
impl Supervisor {
    /// Waits up to `timeout` for the process to exit by itself. Returns its
    /// exit status (the process is reaped, so [`Supervisor::start`] may run
    /// it again), or `None` while it still runs (it is left running).
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if !self.child.is_running() {
                return None;
            }
            if let Some(status) = self.child.take_exit() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

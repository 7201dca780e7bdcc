//! Gateway processes for end-to-end tests: real `openshell-gateway`
//! processes on loopback ([`Gateway`], a bootstrapped [`Cluster`]), real
//! gRPC, real sled directories, `kill -9` and restarts; plus the object
//! helpers ([`put`], [`get`], [`dump`]) and [`eventually`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use proto::client::{self, ClientConfig, Role};
use proto::cluster::cluster_admin_client::ClusterAdminClient;
use proto::cluster::{ClusterStatus, StatusRequest};
use proto::objects::object_store_client::ObjectStoreClient;
use proto::objects::{precondition, GetRequest, ListRequest, Object, Precondition, PutRequest};
use tonic::transport::Channel;

use crate::bins::gateway_bin;
use crate::ports::free_port;
use crate::secure::{ClientSecurity, Material};
use crate::TestResult;
use local_cluster::gateway::{read_file, GatewaySection, GatewaySpec};
use local_cluster::process::{log_to, ChildProcess};
use proto::tls::generate::Usage;

/// One gateway process.
pub struct Gateway {
    pub id: u64,
    pub addr: String,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
    pub extra_args: Vec<String>,
    /// The peer port (`--peer-listen`), for a secure gateway.
    pub peer_addr: Option<String>,
    /// How test clients reach a secure gateway (TLS and token).
    pub security: Option<ClientSecurity>,
    /// The process driver's directory (`<root>/runtimes`, shared by the
    /// cluster's gateways), unless the extra arguments choose a driver.
    pub runtimes_dir: PathBuf,
    /// The cluster id (`test`).
    pub cluster_id: String,
    /// The voters of the new cluster this node bootstraps, if any
    /// ([`Cluster::bootstrap`] sets them).
    pub initial_voters: Option<Vec<(u64, String)>>,
    /// The address in the membership when not [`Gateway::member_addr`]
    /// (a proxy in front of the peer port).
    pub advertise: Option<String>,
    /// The TLS and secret files of a secure gateway ([`Gateway::new_secure`]),
    /// as a part of its configuration.
    secured: Option<GatewaySection>,
    child: ChildProcess,
}

impl Gateway {
    pub fn new(id: u64, root: &Path, extra_args: Vec<String>) -> Self {
        let addr = format!("127.0.0.1:{}", free_port());
        Gateway {
            id,
            addr,
            data_dir: root.join(format!("node-{id}")),
            log_path: root.join(format!("node-{id}.log")),
            extra_args,
            peer_addr: None,
            security: None,
            runtimes_dir: root.join("runtimes"),
            cluster_id: "test".into(),
            initial_voters: None,
            advertise: None,
            secured: None,
            child: ChildProcess::default(),
        }
    }

    /// A secure gateway: TLS on both ports with a certificate `material`'s
    /// CA issues, a peer port, the signing key and admin token.
    pub fn new_secure(id: u64, root: &Path, material: &Material, extra_args: Vec<String>) -> Self {
        let issued = material.issue(&format!("gateway-{id}"), Usage::ServerAndClient);
        Self::new_secure_with(id, root, material, &issued, extra_args)
    }

    /// [`Gateway::new_secure`] with the certificate `issued` (e.g. a
    /// [`crate::secure::Mounted`] one).
    pub fn new_secure_with(
        id: u64,
        root: &Path,
        material: &Material,
        issued: &proto::tls::generate::Issued,
        extra_args: Vec<String>,
    ) -> Self {
        let mut gateway = Gateway::new(id, root, extra_args);
        gateway.peer_addr = Some(format!("127.0.0.1:{}", free_port()));
        gateway.security = Some(material.client());
        gateway.secured = Some(material.gateway_files().section(issued));
        gateway
    }

    /// Sets `flag` to `value`: replaces its value if the extra arguments
    /// have it, else appends both.
    pub fn set_flag(&mut self, flag: &str, value: String) {
        match self.extra_args.iter().position(|a| a == flag) {
            Some(i) if i + 1 < self.extra_args.len() => self.extra_args[i + 1] = value,
            _ => self.extra_args.extend([flag.to_string(), value]),
        }
    }

    /// The address in the raft membership: the peer port if any.
    pub fn member_addr(&self) -> &str {
        self.peer_addr.as_deref().unwrap_or(&self.addr)
    }

    /// A channel to the client port, with TLS for a secure gateway, and a
    /// 15 s call deadline.
    pub async fn channel(&self) -> TestResult<Channel> {
        self.channel_with_deadline(Duration::from_secs(15)).await
    }

    /// [`Gateway::channel`] with another call deadline: for calls that wait
    /// on the server longer than 15 s (a `StateDigest` with `wait_ms`).
    pub async fn channel_with_deadline(&self, deadline: Duration) -> TestResult<Channel> {
        let config = ClientConfig::for_role(Role::Cli)
            .with_connect_timeout(Duration::from_millis(500))
            .with_request_timeout(deadline)
            .with_tls(self.security.as_ref().map(|s| s.tls.clone()));
        Ok(client::connect(Role::Cli, &self.addr, &config).await?)
    }

    /// `message` as a request carrying the admin token (secure gateways).
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(security) = &self.security {
            if let Ok(value) = format!("Bearer {}", security.token).parse() {
                request.metadata_mut().insert("authorization", value);
            }
        }
        request
    }

    /// The gateway's configuration ([`GatewaySpec`], the local cluster's
    /// one description of a gateway): insecure (plaintext, one port) unless
    /// it is a [`Gateway::new_secure`] one or the extra arguments configure
    /// TLS; the process sandbox driver on [`Gateway::runtimes_dir`] (a
    /// network namespace per runtime when root, unless
    /// `OPENSHELL_TEST_NETNS` says `off`) unless they choose a driver; a
    /// `--config FILE` among the extra arguments laid over it as a section,
    /// the other extra arguments as flags.
    pub fn spec(&self) -> GatewaySpec {
        let mut spec = GatewaySpec::new(self.id, &self.addr, &self.data_dir, &self.cluster_id);
        match &self.secured {
            Some(secured) => spec.config = spec.config.overlay(secured.clone()),
            None if self.extra_args.iter().any(|a| a == "--tls-cert-file") => {}
            None => spec = spec.insecure(),
        }
        if let Some(peer) = &self.peer_addr {
            spec = spec.peer_listen(peer);
        }
        if let Some(addr) = &self.advertise {
            spec = spec.advertise(addr);
        }
        if let Some(voters) = &self.initial_voters {
            spec = spec.initial_voters(voters.iter().map(|(id, addr)| (*id, addr.as_str())));
        }
        if !self.extra_args.iter().any(|a| a == "--sandbox-driver") {
            let netns = std::env::var("OPENSHELL_TEST_NETNS").unwrap_or_else(|_| "auto".into());
            spec = spec.process_driver(&self.runtimes_dir, &crate::bins::runtime_bin(), &netns);
        }
        // A test's own `--config` file is laid over the spec (the gateway
        // takes one file); the other extra arguments stay flags.
        let mut flags = Vec::new();
        let mut args = self.extra_args.iter();
        while let Some(arg) = args.next() {
            match (arg.as_str(), args.as_slice().first()) {
                ("--config", Some(file)) => {
                    let own = read_file(Path::new(file)).unwrap_or_else(|e| panic!("{e}"));
                    spec.config = spec.config.overlay(own);
                    args.next();
                }
                _ => flags.push(arg.clone()),
            }
        }
        spec.with_args(flags)
    }

    /// The arguments the gateway runs with: `--config <file>` (its
    /// [`Gateway::spec`], written next to its log) and the extra arguments.
    pub fn args(&self) -> Vec<String> {
        let file = self.log_path.with_extension("toml");
        self.spec()
            .write(&file)
            .unwrap_or_else(|e| panic!("node {}: {e}", self.id))
    }

    /// Starts the process (appending to its log file), logging at
    /// [`gateway_log_filter`].
    pub fn start(&mut self) {
        self.start_with_env(&[]);
    }

    /// [`Gateway::start`] with extra environment variables (e.g.
    /// `KUBECONFIG` naming a [`crate::kube_api::MockKubeApi`]).
    pub fn start_with_env(&mut self, env: &[(&str, &str)]) {
        assert!(!self.child.is_running(), "node {} already running", self.id);
        let mut command = Command::new(gateway_bin());
        command
            .args(self.args())
            .env("RUST_LOG", gateway_log_filter())
            .envs(env.iter().copied());
        log_to(&mut command, &self.log_path).unwrap_or_else(|e| panic!("{e}"));
        self.child
            .spawn(&mut command, &format!("gateway {}", self.id))
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) {
        self.child.kill9();
    }

    /// The HTTP address (`--http-listen`) this gateway was given, if any.
    pub fn http_addr(&self) -> Option<String> {
        let i = self.extra_args.iter().position(|a| a == "--http-listen")?;
        self.extra_args.get(i + 1).cloned()
    }

    pub fn is_running(&self) -> bool {
        self.child.is_running()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub async fn admin(&self) -> TestResult<ClusterAdminClient<Channel>> {
        Ok(ClusterAdminClient::new(self.channel().await?))
    }

    pub async fn objects(&self) -> TestResult<ObjectStoreClient<Channel>> {
        Ok(ObjectStoreClient::new(self.channel().await?))
    }

    /// This node's own view of the cluster.
    pub async fn status(&self) -> TestResult<ClusterStatus> {
        Ok(self
            .admin()
            .await?
            .status(self.request(StatusRequest { local: true }))
            .await?
            .into_inner())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A channel for a test client to `addr`, the way the operator CLI connects
/// (through `proto::client::connect`, the workspace's one channel builder),
/// with a `connect_ms` connect timeout and a 15 s call deadline.
pub async fn test_channel(addr: &str, connect_ms: u64) -> TestResult<Channel> {
    let config = ClientConfig::for_role(Role::Cli)
        .with_connect_timeout(Duration::from_millis(connect_ms))
        .with_request_timeout(Duration::from_secs(15));
    Ok(client::connect(Role::Cli, addr, &config).await?)
}

/// Kills the runtimes the cluster's gateways launched and removes their
/// network namespaces (after the gateways, which drop with the fields).
impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill9();
        }
        crate::runtimes::cleanup(&self.root.path().join("runtimes"));
    }
}

/// A set of gateways under one temp directory.
pub struct Cluster {
    pub root: tempfile::TempDir,
    pub nodes: Vec<Gateway>,
    /// The TLS material of a secure cluster ([`Cluster::start_secure`]).
    pub material: Option<Material>,
}

impl Cluster {
    /// Starts `n` voters that bootstrap together, with extra flags.
    pub fn start(n: u64, extra: &[&str]) -> Cluster {
        Self::start_each(n, extra, |_| Vec::new())
    }

    /// Like [`Cluster::start`], with flags that differ per node id.
    pub fn start_each(n: u64, extra: &[&str], per_node: impl Fn(u64) -> Vec<String>) -> Cluster {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let nodes: Vec<Gateway> = (1..=n)
            .map(|id| {
                let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
                args.extend(per_node(id));
                Gateway::new(id, root.path(), args)
            })
            .collect();
        Self::bootstrap(root, nodes)
    }

    /// Starts `nodes` (made with [`Gateway::new`] under `root`, and changed
    /// as a test needs, e.g. a data directory elsewhere) as the voters of a
    /// new cluster.
    pub fn bootstrap(root: tempfile::TempDir, mut nodes: Vec<Gateway>) -> Cluster {
        let voters: Vec<(u64, String)> = nodes
            .iter()
            .map(|g| (g.id, g.member_addr().to_string()))
            .collect();
        for node in &mut nodes {
            node.initial_voters = Some(voters.clone());
            node.start();
        }
        Cluster {
            root,
            nodes,
            material: None,
        }
    }

    /// Starts `n` secure voters (TLS on both ports, mutual TLS between
    /// them, tokens, a signing key) that bootstrap together.
    pub fn start_secure(n: u64, extra: &[&str]) -> Cluster {
        let (root, material, nodes) = Self::secure_nodes(n, extra);
        Self::bootstrap_secure(root, material, nodes)
    }

    /// The pieces of [`Cluster::start_secure`] before anything starts, for a
    /// test to change (a node's flags, the signing key file's contents).
    pub fn secure_nodes(n: u64, extra: &[&str]) -> (tempfile::TempDir, Material, Vec<Gateway>) {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let material = Material::generate(&root.path().join("tls"));
        let nodes = (1..=n)
            .map(|id| {
                let extra = extra.iter().map(|s| s.to_string()).collect();
                Gateway::new_secure(id, root.path(), &material, extra)
            })
            .collect();
        (root, material, nodes)
    }

    /// Starts [`Cluster::secure_nodes`]' gateways as a new cluster.
    pub fn bootstrap_secure(
        root: tempfile::TempDir,
        material: Material,
        nodes: Vec<Gateway>,
    ) -> Cluster {
        let mut cluster = Self::bootstrap(root, nodes);
        cluster.material = Some(material);
        cluster
    }

    /// The process driver's directory of this cluster's gateways.
    pub fn runtimes_dir(&self) -> PathBuf {
        self.root.path().join("runtimes")
    }

    pub fn node(&mut self, id: u64) -> &mut Gateway {
        self.nodes
            .iter_mut()
            .find(|g| g.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    pub fn get(&self, id: u64) -> &Gateway {
        self.nodes
            .iter()
            .find(|g| g.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    /// Adds a gateway that is not an initial member (it joins as a learner).
    pub fn add_node(&mut self, id: u64, extra: &[&str]) -> &mut Gateway {
        let mut g = Gateway::new(
            id,
            self.root.path(),
            extra.iter().map(|s| s.to_string()).collect(),
        );
        g.start();
        self.nodes.push(g);
        self.node(id)
    }

    /// Waits until every running node agrees on one leader among them.
    pub async fn wait_leader(&self, why: &str) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut leaders = Vec::new();
            for node in self.nodes.iter().filter(|n| n.is_running()) {
                match node.status().await {
                    Ok(s) => leaders.push(s.leader_id),
                    Err(_) => leaders.push(0),
                }
            }
            let first = leaders.first().copied().unwrap_or(0);
            let running: Vec<u64> = self
                .nodes
                .iter()
                .filter(|n| n.is_running())
                .map(|n| n.id)
                .collect();
            if first != 0 && running.contains(&first) && leaders.iter().all(|l| *l == first) {
                return first;
            }
            if Instant::now() > deadline {
                self.dump_logs();
                panic!("no agreed leader within 30 s ({why}); views: {leaders:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until node `id` applied at least `index`.
    pub async fn wait_applied(&self, id: u64, index: u64, why: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(s) = self.get(id).status().await {
                if s.applied_index >= index {
                    return;
                }
            }
            if Instant::now() > deadline {
                self.dump_logs();
                panic!("node {id} did not apply index {index} within 30 s ({why})");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `result`, after printing every node's log ([`Cluster::dump_logs`])
    /// when it is an error: for a step whose error the test returns with
    /// `?`, which would otherwise end the test without the logs.
    pub fn logs_on_err<T>(&self, result: TestResult<T>) -> TestResult<T> {
        if result.is_err() {
            self.dump_logs();
        }
        result
    }

    /// Prints the last 40 lines of every node's log (on a test's failure).
    /// Before each tail, the node's warnings and errors from the whole run
    /// (at most [`WARNINGS_SHOWN`], openraft's replication retries left out):
    /// what failed a sandbox or a write is usually said long before the end.
    /// With `TESTKIT_LOG_DIR` set, every node's whole log is copied there too
    /// (`node-<id>.log`).
    pub fn dump_logs(&self) {
        let keep = std::env::var_os("TESTKIT_LOG_DIR").map(std::path::PathBuf::from);
        for node in &self.nodes {
            let log = node.log();
            if let Some(dir) = &keep {
                let path = dir.join(format!("node-{}.log", node.id));
                if let Err(e) =
                    std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, &log))
                {
                    eprintln!("cannot keep {}: {e}", path.display());
                }
            }
            let warnings: Vec<&str> = log
                .lines()
                .filter(|l| {
                    (l.contains(" WARN ") || l.contains(" ERROR ")) && !l.contains("openraft::")
                })
                .take(WARNINGS_SHOWN)
                .collect();
            if !warnings.is_empty() {
                eprintln!(
                    "----- node {} warnings and errors (first {WARNINGS_SHOWN}) -----",
                    node.id
                );
                for line in warnings {
                    eprintln!("{line}");
                }
            }
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("----- node {} log (last 40 lines) -----", node.id);
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// Warnings and errors [`Cluster::dump_logs`] shows per node.
pub const WARNINGS_SHOWN: usize = 30;

/// An object of the test type with `value` as payload.
pub fn object(id: &str, value: &str) -> Object {
    Object {
        id: id.into(),
        r#type: "test".into(),
        scope: "s".into(),
        payload: value.as_bytes().to_vec(),
        ..Default::default()
    }
}

/// Puts unconditionally; returns the resource version.
pub async fn put(node: &Gateway, id: &str, value: &str) -> TestResult<u64> {
    put_at(&node.addr, id, value).await
}

/// [`put`] through the gateway at `addr`.
pub async fn put_at(addr: &str, id: &str, value: &str) -> TestResult<u64> {
    let reply = ObjectStoreClient::new(test_channel(addr, 500).await?)
        .put(PutRequest {
            object: Some(object(id, value)),
            precondition: Some(Precondition {
                kind: Some(precondition::Kind::Unconditional(true)),
            }),
            request_id: String::new(),
        })
        .await?;
    Ok(reply
        .into_inner()
        .object
        .map(|o| o.resource_version)
        .unwrap_or(0))
}

/// Linearizable (or stale) get of the payload; None if absent.
pub async fn get(node: &Gateway, id: &str, stale: bool) -> TestResult<Option<String>> {
    match node
        .objects()
        .await?
        .get(GetRequest {
            r#type: "test".into(),
            id: id.into(),
            stale,
        })
        .await
    {
        Ok(reply) => Ok(reply
            .into_inner()
            .object
            .map(|o| String::from_utf8_lossy(&o.payload).into_owned())),
        Err(status) if status.code() == tonic::Code::NotFound => Ok(None),
        Err(status) => Err(status.into()),
    }
}

/// Every object of the test type on `node` (stale: this node's applied state),
/// as (id, payload, resource_version).
pub async fn dump(node: &Gateway, stale: bool) -> TestResult<Vec<(String, String, u64)>> {
    let mut client = node.objects().await?;
    let mut out = Vec::new();
    let mut token = String::new();
    loop {
        let page = client
            .list(ListRequest {
                r#type: "test".into(),
                scope: String::new(),
                page_size: 1000,
                page_token: token.clone(),
                stale,
            })
            .await?
            .into_inner();
        out.extend(page.objects.into_iter().map(|o| {
            (
                o.id,
                String::from_utf8_lossy(&o.payload).into_owned(),
                o.resource_version,
            )
        }));
        if page.next_page_token.is_empty() {
            return Ok(out);
        }
        token = page.next_page_token;
    }
}

/// Retries `f` until it succeeds or 20 s pass.
pub async fn eventually<T, F, Fut>(why: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = TestResult<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if Instant::now() > deadline => panic!("{why}: still failing after 20 s: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Signals and exits of a running gateway, for the stop scenarios.
impl Gateway {
    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.pid().and_then(|pid| u32::try_from(pid).ok())
    }

    /// Sends `signal` (e.g. `-TERM`, `-INT`, `-STOP`) with kill(1).
    pub fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .args([signal, &pid.to_string()])
                .status();
        }
    }

    /// Waits up to `timeout` for the process to exit by itself. Returns its
    /// exit status (the process is reaped, so [`Gateway::start`] may run it
    /// again), or `None` while it still runs (it is left running).
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

/// Gateways on distinct loopback IPs sharing one port (the voter autopilot's
/// address template needs every node's address to follow one pattern).
impl Gateway {
    /// The address of node `id` in [`Cluster::start_on_loopback_ips`]'s
    /// scheme: `127.0.1.<id>:<port>`.
    pub fn loopback_addr(id: u64, port: u16) -> String {
        format!("127.0.1.{id}:{port}")
    }

    /// An insecure gateway (one port) at [`Gateway::loopback_addr`]; not
    /// started.
    pub fn new_on_loopback_ip(id: u64, port: u16, root: &Path, extra_args: Vec<String>) -> Self {
        let mut gateway = Gateway::new(id, root, extra_args);
        gateway.addr = Self::loopback_addr(id, port);
        gateway
    }
}

impl Cluster {
    /// Starts `n` voters at `127.0.1.<id>:<port>` (one shared port, see
    /// [`crate::ports::free_port_on`]) that bootstrap together, with extra
    /// flags.
    pub fn start_on_loopback_ips(n: u64, port: u16, extra: &[&str]) -> Cluster {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let nodes = (1..=n)
            .map(|id| {
                let args = extra.iter().map(|s| s.to_string()).collect();
                Gateway::new_on_loopback_ip(id, port, root.path(), args)
            })
            .collect();
        Self::bootstrap(root, nodes)
    }

    /// Starts node `id` at `127.0.1.<id>:<port>`, not an initial voter (it
    /// waits to be added).
    pub fn add_node_on_loopback_ip(&mut self, id: u64, port: u16, extra: &[&str]) -> &mut Gateway {
        let args = extra.iter().map(|s| s.to_string()).collect();
        let mut gateway = Gateway::new_on_loopback_ip(id, port, self.root.path(), args);
        gateway.start();
        self.nodes.push(gateway);
        self.node(id)
    }
}

/// The gateways' `RUST_LOG`: `info,openraft=warn`, or
/// `TESTKIT_GATEWAY_RUST_LOG` when set (to chase a failure with debug logs).
pub fn gateway_log_filter() -> String {
    std::env::var("TESTKIT_GATEWAY_RUST_LOG").unwrap_or_else(|_| "info,openraft=warn".into())
}

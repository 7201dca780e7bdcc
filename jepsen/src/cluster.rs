//! Real `openshell-gateway` processes, one per network namespace, and gRPC
//! clients to them from the harness.
//!
//! A node's process is started with `ip netns exec <ns> <gateway-bin> ...`
//! (which execs, so the child's pid is the gateway's), its stdout and stderr
//! appended to `<run>/n<i>.log`. `kill -9` + restart reuses the data
//! directory. With the clock nemesis enabled, every gateway runs under
//! `LD_PRELOAD=libfaketime` with a per-node `FAKETIME_TIMESTAMP_FILE`
//! (`FAKETIME_NO_CACHE=1`, `FAKETIME_DONT_FAKE_MONOTONIC=1`: only the wall
//! clock moves).
//!
//! Secure runs (the default, [`Security::Tls`]): every gateway serves its
//! client port ([`PORT`]) and its peer port ([`PEER_PORT`], mutual TLS) over
//! TLS with a certificate of the run's CA naming its address, requires the
//! run's admin token and per-member supervisor credentials, and signs
//! grants with the run's key ([`crate::security::Credentials`]); the raft
//! membership holds peer addresses. The harness's channels trust the CA and carry the token.
//! `--insecure` runs start the gateways as before: plaintext, one port.
//!
//! Dropping the [`Cluster`] kills every process (SIGCONT, then SIGKILL) and
//! then removes the network ([`crate::net::Net`]'s own drop).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use proto::client::{connect, ClientConfig, Role};
use proto::cluster::cluster_admin_client::ClusterAdminClient;
use proto::cluster::{ClusterStatus, StatusRequest};
use proto::objects::object_store_client::ObjectStoreClient;
use proto::objects::ListRequest;
use proto::pool_admin::pool_admin_client::PoolAdminClient;
use tonic::service::interceptor::InterceptedService;

use crate::checker::verdict::ReplicaDump;
use crate::net::Net;
use crate::power::Disks;
use crate::security::{Authed, Bearer, Credentials, Security};
use local_cluster::gateway::{GatewaySection, GatewaySpec};
use local_cluster::process::{in_namespace, log_to, ChildProcess};

/// Where Debian's `faketime` package puts the preload library.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
/// gRPC client port every gateway listens on (inside its own namespace).
pub const PORT: u16 = 7000;
/// gRPC peer port (raft, forwarding; mutual TLS) of a secure gateway.
pub const PEER_PORT: u16 = 7001;
/// Object type the register workload writes.
pub const OBJECT_TYPE: &str = "jepsen-register";

/// Gateway settings the harness passes on.
#[derive(Clone, Debug)]
pub struct GatewayOptions {
    /// The `openshell-gateway` binary.
    pub bin: PathBuf,
    /// Raft heartbeat, ms.
    pub heartbeat_ms: u64,
    /// Election timeout bounds, ms.
    pub election_ms: (u64, u64),
    /// Run under libfaketime.
    pub faketime: bool,
    /// Per-request timeout of the harness's clients.
    pub client_timeout: Duration,
    /// Settings of every gateway, laid over the harness's own (the pool
    /// workload sets its tick interval, heartbeat TTL and sandbox driver
    /// here).
    pub config: GatewaySection,
    /// TLS (the default) or `--insecure`.
    pub security: Security,
    /// The pool members of the run (each gets its own credential).
    pub members: Vec<String>,
}

/// One gateway node.
pub struct Node {
    /// 1-based id (also the raft node id).
    pub id: usize,
    /// `n<i>`.
    pub name: String,
    /// Network namespace.
    pub ns: String,
    /// `ip:port` of the client port.
    pub addr: String,
    /// `ip:port` of the peer port: the node's address in the raft
    /// membership (the client port's in `--insecure` runs).
    pub peer_addr: String,
    /// The gateway's TLS, signing-key, token and member-credential
    /// settings (none when `--insecure`).
    secured: Option<GatewaySection>,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Log file.
    pub log_path: PathBuf,
    /// Wall-clock offset file read by libfaketime.
    pub clock_file: PathBuf,
    /// The running process.
    child: ChildProcess,
    /// Start with `--initial-voters` (false once wiped and re-joined as a
    /// learner by the membership nemesis).
    initial: Mutex<bool>,
    /// A lazily connected channel (reconnects after restarts) whose calls
    /// carry the run's admin token.
    channel: Authed,
}

impl Node {
    /// Process id, when running.
    pub fn pid(&self) -> Option<i32> {
        self.child.pid()
    }

    /// Whether the process is running (started and not killed).
    pub fn is_running(&self) -> bool {
        self.child.is_running()
    }

    /// An object-store client.
    pub fn objects(&self) -> ObjectStoreClient<Authed> {
        ObjectStoreClient::new(self.channel.clone())
    }

    /// A cluster-admin client.
    pub fn admin(&self) -> ClusterAdminClient<Authed> {
        ClusterAdminClient::new(self.channel.clone())
    }

    /// A pool-admin client (the pool workload's clients and operator).
    pub fn pool(&self) -> PoolAdminClient<Authed> {
        PoolAdminClient::new(self.channel.clone())
    }

    /// `StateDigest` of this node's local state machine: (applied index,
    /// crc32 of the deterministic snapshot encoding), now (`at_index` 0) or
    /// right after it applies `at_index` (waiting up to `wait_ms`).
    ///
    /// # Errors
    /// The gRPC status.
    pub async fn digest(&self, at_index: u64, wait_ms: u32) -> Result<(u64, u32), tonic::Status> {
        let r = self
            .admin()
            .state_digest(proto::cluster::StateDigestRequest { at_index, wait_ms })
            .await?
            .into_inner();
        Ok((r.applied_index, r.crc32))
    }

    /// This node's own view (`local = true`).
    ///
    /// # Errors
    /// The gRPC status.
    pub async fn status(&self) -> Result<ClusterStatus, tonic::Status> {
        Ok(self
            .admin()
            .status(StatusRequest { local: true })
            .await?
            .into_inner())
    }

    /// Sends `sig` to the process.
    fn signal(&self, sig: i32) -> anyhow::Result<()> {
        self.child
            .signal(sig)
            .with_context(|| format!("signalling {}", self.name))
    }

    /// `kill -STOP`.
    ///
    /// # Errors
    /// When not running.
    pub fn pause(&self) -> anyhow::Result<()> {
        self.signal(libc::SIGSTOP)
    }

    /// `kill -CONT`.
    ///
    /// # Errors
    /// When not running.
    pub fn resume(&self) -> anyhow::Result<()> {
        self.signal(libc::SIGCONT)
    }

    /// Whether the started process has exited by itself (a gateway that
    /// refused its data directory).
    pub fn exited(&self) -> bool {
        self.child.exited()
    }

    /// `kill -9` and reap.
    pub fn kill9(&self) {
        self.child.kill9();
    }

    /// Sets the wall-clock offset libfaketime applies (e.g. `+30`, `-120`).
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn set_clock_offset(&self, offset_s: i64) -> anyhow::Result<()> {
        std::fs::write(&self.clock_file, format!("{offset_s:+}\n"))
            .with_context(|| format!("writing {}", self.clock_file.display()))
    }

    /// Wipes the data directory (the node must be stopped) and marks it to
    /// start without `--initial-voters`, to be added back as a learner.
    ///
    /// # Errors
    /// When running, or the directory cannot be removed.
    pub fn wipe(&self) -> anyhow::Result<()> {
        if self.is_running() {
            bail!("{} is running", self.name);
        }
        if lazyfs::mount::is_mounted(&self.data_dir) {
            // A lazyfs mount point stays; its contents go (straight to the
            // backing directory: lazyfs keeps metadata durable at once).
            for entry in std::fs::read_dir(&self.data_dir)
                .with_context(|| format!("reading {}", self.data_dir.display()))?
            {
                let path = entry.context("reading the data directory")?.path();
                if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                }
                .with_context(|| format!("removing {}", path.display()))?;
            }
        } else if self.data_dir.exists() {
            std::fs::remove_dir_all(&self.data_dir)
                .with_context(|| format!("removing {}", self.data_dir.display()))?;
        }
        *match self.initial.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        } = false;
        Ok(())
    }
}

/// The nodes of one run, on their network.
pub struct Cluster {
    /// The run directory (logs, data directories).
    pub dir: PathBuf,
    /// Nodes, index i is node i+1.
    pub nodes: Vec<Node>,
    /// `(node id, peer address)` of every node.
    pub voters: Vec<(u64, String)>,
    /// The run's TLS material and credentials (`None` when `--insecure`).
    pub credentials: Option<Credentials>,
    /// Gateway settings.
    pub options: GatewayOptions,
    /// The nodes' lazyfs mounts (power-cut runs; dropped, i.e. cut, after
    /// the processes are killed).
    pub disks: Option<Disks>,
    /// The network (dropped after the processes are killed).
    pub net: Net,
}

impl Cluster {
    /// Creates the network and the node records (nothing started yet).
    ///
    /// # Errors
    /// When the network cannot be built or the binary is missing.
    pub async fn create(
        run: &str,
        n: usize,
        dir: &Path,
        options: GatewayOptions,
    ) -> anyhow::Result<Cluster> {
        if !options.bin.is_file() {
            bail!(
                "gateway binary {} not found; build it first: cargo build -p gateway-plugin --bin openshell-gateway",
                options.bin.display()
            );
        }
        if options.faketime && !Path::new(LIBFAKETIME).is_file() {
            bail!("{LIBFAKETIME} not found: install Debian's faketime package (jepsen/ci-deps.sh)");
        }
        let net = Net::setup(run, n)?;
        let credentials = match options.security {
            Security::Tls => Some(Credentials::generate(&dir.join("tls"), &options.members)?),
            Security::Insecure => None,
        };
        let mut nodes = Vec::new();
        for i in 1..=n {
            let ip = net.node_ip(i);
            let addr = format!("{ip}:{PORT}");
            let (peer_addr, secured) = match &credentials {
                Some(c) => (
                    format!("{ip}:{PEER_PORT}"),
                    Some(c.gateway_section(&c.issue_gateway(&format!("n{i}"), &ip)?)),
                ),
                None => (addr.clone(), None),
            };
            let config = ClientConfig::for_role(Role::Jepsen)
                .with_connect_timeout(Duration::from_millis(1000))
                .with_request_timeout(options.client_timeout)
                .with_tls(credentials.as_ref().map(Credentials::client_tls));
            let channel = connect(Role::Jepsen, &addr, &config)
                .await
                .context("endpoint")?;
            let bearer = credentials.as_ref().map(Credentials::bearer);
            let channel = InterceptedService::new(channel, bearer.unwrap_or_else(Bearer::default));
            let clock_file = dir.join(format!("n{i}.clock"));
            std::fs::write(&clock_file, "+0\n").context("writing the clock file")?;
            nodes.push(Node {
                id: i,
                name: format!("n{i}"),
                ns: net.node_ns(i),
                addr,
                peer_addr,
                secured,
                data_dir: dir.join(format!("n{i}-data")),
                log_path: dir.join(format!("n{i}.log")),
                clock_file,
                child: ChildProcess::default(),
                initial: Mutex::new(true),
                channel,
            });
        }
        let voters = nodes
            .iter()
            .map(|n| (n.id as u64, n.peer_addr.clone()))
            .collect();
        Ok(Cluster {
            dir: dir.to_path_buf(),
            nodes,
            voters,
            credentials,
            options,
            disks: None,
            net,
        })
    }

    /// Node `id` (1-based).
    ///
    /// # Errors
    /// When there is no such node.
    pub fn node(&self, id: usize) -> anyhow::Result<&Node> {
        self.nodes
            .get(id.wrapping_sub(1))
            .with_context(|| format!("no node {id}"))
    }

    /// Starts node `id` (no-op when running).
    ///
    /// # Errors
    /// When the process cannot be spawned.
    pub fn start(&self, id: usize) -> anyhow::Result<()> {
        let node = self.node(id)?;
        if node.child.is_running() {
            return Ok(());
        }
        let initial = *match node.initial.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let mut spec = GatewaySpec::new(node.id as u64, &node.addr, &node.data_dir, "jepsen")
            .raft_timing(self.options.heartbeat_ms, self.options.election_ms);
        spec = match &node.secured {
            Some(secured) => {
                spec.config = spec.config.overlay(secured.clone());
                spec.peer_listen(&node.peer_addr)
            }
            None => spec.insecure(),
        };
        if initial {
            spec = spec.initial_voters(self.voters.iter().map(|(id, a)| (*id, a.as_str())));
        }
        spec.config = spec.config.overlay(self.options.config.clone());
        let args = spec
            .write(&self.dir.join(format!("{}.toml", node.name)))
            .with_context(|| format!("writing the configuration of {}", node.name))?;
        let mut cmd = in_namespace(&node.ns, &self.options.bin);
        cmd.args(args);
        cmd.env("RUST_LOG", "info,openraft=warn");
        log_to(&mut cmd, &node.log_path)?;
        if self.options.faketime {
            cmd.env("LD_PRELOAD", LIBFAKETIME)
                .env("FAKETIME_TIMESTAMP_FILE", &node.clock_file)
                .env("FAKETIME_NO_CACHE", "1")
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        node.child
            .spawn(&mut cmd, &self.options.bin.display().to_string())?;
        Ok(())
    }

    /// Starts every node.
    ///
    /// # Errors
    /// When one cannot be spawned.
    pub fn start_all(&self) -> anyhow::Result<()> {
        for n in &self.nodes {
            self.start(n.id)?;
        }
        Ok(())
    }

    /// Kills every node.
    pub fn kill_all(&self) {
        for n in &self.nodes {
            n.kill9();
        }
    }

    /// The leader every reachable node agrees on, waiting up to `within`.
    ///
    /// # Errors
    /// When no leader is agreed on in time.
    pub async fn wait_leader(&self, within: Duration, why: &str) -> anyhow::Result<usize> {
        let deadline = Instant::now() + within;
        loop {
            let mut views = Vec::new();
            for n in self.nodes.iter().filter(|n| n.is_running()) {
                views.push(n.status().await.map(|s| s.leader_id).unwrap_or(0));
            }
            if let Some(first) = views.first().copied() {
                let leader_up = self
                    .nodes
                    .iter()
                    .any(|n| n.id as u64 == first && n.is_running());
                if first != 0 && leader_up && views.iter().all(|v| *v == first) {
                    return Ok(first as usize);
                }
            }
            if Instant::now() > deadline {
                bail!("no agreed leader within {within:?} ({why}); views {views:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Any node's view of the current leader (0 if unknown).
    pub async fn current_leader(&self) -> usize {
        for n in self.nodes.iter().filter(|n| n.is_running()) {
            if let Ok(s) = n.status().await {
                if s.leader_id != 0 {
                    return s.leader_id as usize;
                }
            }
        }
        0
    }

    /// Waits until every voter/learner in the leader's membership applied
    /// the leader's commit index; returns that index.
    ///
    /// # Errors
    /// When a node does not catch up within `within`.
    pub async fn wait_converged(&self, within: Duration) -> anyhow::Result<u64> {
        let leader = self.wait_leader(within, "before convergence").await?;
        let target = self.node(leader)?.status().await?.commit_index;
        let deadline = Instant::now() + within;
        for n in &self.nodes {
            loop {
                match n.status().await {
                    Ok(s) if s.applied_index >= target => break,
                    other => {
                        if Instant::now() > deadline {
                            bail!(
                                "{} did not apply commit index {target} within {within:?}: {:?}",
                                n.name,
                                other.map(|s| s.applied_index)
                            );
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(target)
    }

    /// Every object of the register type on node `id`'s local state
    /// (`stale = true`). The pool workload will list its own types here too.
    pub async fn dump(&self, id: usize) -> ReplicaDump {
        let name = format!("n{id}");
        let Ok(node) = self.node(id) else {
            return ReplicaDump {
                node: name,
                applied_index: 0,
                objects: Vec::new(),
                error: Some("no such node".into()),
            };
        };
        let applied_index = node.status().await.map(|s| s.applied_index).unwrap_or(0);
        let mut client = node.objects();
        let mut objects = Vec::new();
        let mut token = String::new();
        loop {
            let page = client
                .list(ListRequest {
                    r#type: OBJECT_TYPE.to_string(),
                    scope: String::new(),
                    page_size: 1000,
                    page_token: token.clone(),
                    stale: true,
                })
                .await;
            match page {
                Err(e) => {
                    return ReplicaDump {
                        node: name,
                        applied_index,
                        objects,
                        error: Some(e.to_string()),
                    }
                }
                Ok(page) => {
                    let page = page.into_inner();
                    objects.extend(page.objects.into_iter().map(|o| {
                        (
                            o.r#type,
                            o.id,
                            String::from_utf8_lossy(&o.payload).into_owned(),
                            o.resource_version,
                        )
                    }));
                    if page.next_page_token.is_empty() {
                        break;
                    }
                    token = page.next_page_token;
                }
            }
        }
        objects.sort();
        ReplicaDump {
            node: name,
            applied_index,
            objects,
            error: None,
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_all();
        // self.net drops next and removes the namespaces.
    }
}

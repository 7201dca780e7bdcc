//! Three `openshell-gateway` processes on loopback as a [`BenchSystem`].
//!
//! [`Gateways::start`] runs each release gateway the way `scripts/dev.sh`
//! and the Jepsen harness's `--insecure` runs do: plaintext gRPC on one
//! loopback port (`--insecure`, the same transport security as PostgreSQL
//! and etcd here), its own data directory, `--initial-voters` naming all
//! three, every timeout at its default. Stdout and stderr go to
//! `<dir>/gateway-<i>.log`. Dropping [`Gateways`] kills every process.
//!
//! The workload: `ObjectStore.Put` of object `k<key>` (type `bench`, a
//! 256-byte payload) with `match_resource_version` = the version from this
//! client's last read or write of the key (the preload's `must_create` put
//! the first time; a `Get` after a failure). Client `i` connects to gateway
//! `i mod 3`, so two thirds of the writes are forwarded by a follower.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use proto::client::{connect, ClientConfig, Role};
use proto::cluster::cluster_admin_client::ClusterAdminClient;
use proto::cluster::StatusRequest;
use proto::objects::object_store_client::ObjectStoreClient;
use proto::objects::{precondition, GetRequest};
use tonic::transport::Channel;

use super::inproc::{object_id, put_request, OBJECT_TYPE};
use super::{BenchSystem, Versions, WriteError, UNKNOWN};
use local_cluster::gateway::GatewaySpec;
use local_cluster::process::{log_to, ChildProcess};

/// Per-request timeout of the bench's gateway clients.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// One gateway process.
pub struct GatewayProcess {
    /// 1-based node id.
    pub id: u64,
    /// `127.0.0.1:<port>`: client and peer port (`--insecure`).
    pub addr: String,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Log file (stdout and stderr, appended).
    pub log_path: PathBuf,
    child: ChildProcess,
}

impl GatewayProcess {
    /// Process id, when running.
    pub fn pid(&self) -> Option<i32> {
        self.child.pid()
    }

    /// Sends `sig` (e.g. `libc::SIGSTOP`, `libc::SIGCONT`).
    ///
    /// # Errors
    /// When it is not running or kill(2) fails.
    pub fn signal(&self, sig: i32) -> anyhow::Result<()> {
        Ok(self.child.signal(sig)?)
    }

    /// `kill -9` (after SIGCONT) and reap.
    pub fn kill9(&self) {
        self.child.kill9();
    }

    /// A plaintext channel to this gateway.
    ///
    /// # Errors
    /// When the address is invalid or the gateway is unreachable.
    pub async fn channel(&self) -> anyhow::Result<Channel> {
        let config = ClientConfig::for_role(Role::Jepsen)
            .with_connect_timeout(Duration::from_secs(2))
            .with_request_timeout(CLIENT_TIMEOUT)
            .with_tls(None);
        Ok(connect(Role::Jepsen, &self.addr, &config).await?)
    }

    /// This gateway's own view of the leader (0 when none is known).
    ///
    /// # Errors
    /// When the gateway does not answer.
    pub async fn leader_id(&self) -> anyhow::Result<u64> {
        let mut admin = ClusterAdminClient::new(self.channel().await?);
        Ok(admin
            .status(StatusRequest { local: true })
            .await?
            .into_inner()
            .leader_id)
    }
}

/// Three gateways on loopback.
pub struct Gateways {
    /// The `openshell-gateway` binary.
    pub bin: PathBuf,
    /// `(node id, address)` of the three voters.
    pub voters: Vec<(u64, String)>,
    /// Index i is node i+1.
    pub nodes: Vec<GatewayProcess>,
}

impl Gateways {
    /// Starts three gateways under `dir` and waits (up to 30 s) until all
    /// agree on a leader.
    ///
    /// # Errors
    /// When the binary is missing, a process cannot start, or no leader is
    /// agreed on in time.
    pub async fn start(bin: &Path, dir: &Path) -> anyhow::Result<Gateways> {
        if !bin.is_file() {
            bail!(
                "gateway binary {} not found; build it first: cargo build --release -p gateway-plugin --bin openshell-gateway",
                bin.display()
            );
        }
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the gateways' directory {}", dir.display()))?;
        let nodes: Vec<GatewayProcess> = (1..=3u64)
            .map(|id| GatewayProcess {
                id,
                addr: format!("127.0.0.1:{}", testkit::ports::free_port()),
                data_dir: dir.join(format!("gateway-{id}")),
                log_path: dir.join(format!("gateway-{id}.log")),
                child: ChildProcess::default(),
            })
            .collect();
        let voters = nodes.iter().map(|n| (n.id, n.addr.clone())).collect();
        let gateways = Gateways {
            bin: bin.to_path_buf(),
            voters,
            nodes,
        };
        for id in 1..=3 {
            gateways.start_node(id)?;
        }
        gateways.wait_leader(Duration::from_secs(30)).await?;
        Ok(gateways)
    }

    /// Node `id` (1-based).
    ///
    /// # Errors
    /// When there is no such node.
    pub fn node(&self, id: u64) -> anyhow::Result<&GatewayProcess> {
        self.nodes
            .get((id as usize).wrapping_sub(1))
            .with_context(|| format!("no gateway {id}"))
    }

    /// Starts (or restarts after [`GatewayProcess::kill9`]) node `id` on its
    /// data directory; a no-op when it runs.
    ///
    /// # Errors
    /// When the process cannot be spawned.
    pub fn start_node(&self, id: u64) -> anyhow::Result<()> {
        let node = self.node(id)?;
        let args = GatewaySpec::new(node.id, &node.addr, &node.data_dir, "bench")
            .insecure()
            .initial_voters(self.voters.iter().map(|(id, addr)| (*id, addr.as_str())))
            .write(&node.log_path.with_extension("toml"))?;
        let mut cmd = std::process::Command::new(&self.bin);
        // `OPENSHELL_BENCH_GATEWAY_LOG` (a tracing filter) overrides the
        // gateways' `warn`, to read an election from their logs.
        let filter =
            std::env::var("OPENSHELL_BENCH_GATEWAY_LOG").unwrap_or_else(|_| "warn".to_string());
        cmd.args(args).env("RUST_LOG", filter);
        log_to(&mut cmd, &node.log_path)?;
        node.child
            .spawn(&mut cmd, &self.bin.display().to_string())?;
        Ok(())
    }

    /// The leader every running node agrees on, waiting up to `within`.
    ///
    /// # Errors
    /// When no leader is agreed on in time.
    pub async fn wait_leader(&self, within: Duration) -> anyhow::Result<u64> {
        let deadline = Instant::now() + within;
        loop {
            let mut views = Vec::new();
            for n in self.nodes.iter().filter(|n| n.pid().is_some()) {
                views.push(n.leader_id().await.unwrap_or(0));
            }
            if let Some(&first) = views.first() {
                if first != 0 && views.iter().all(|v| *v == first) {
                    return Ok(first);
                }
            }
            if Instant::now() > deadline {
                bail!("gateways: no agreed leader within {within:?}; views {views:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The workload over `keys` keys, preloaded (every key created with
    /// `must_create`, 64 at a time through all three gateways).
    ///
    /// # Errors
    /// When the preload fails.
    pub async fn system(&self, keys: usize) -> anyhow::Result<GatewaySystem> {
        let mut channels = Vec::new();
        for n in &self.nodes {
            channels.push(n.channel().await?);
        }
        let system = Arc::new(GatewaySystem {
            addrs: self.nodes.iter().map(|n| n.addr.clone()).collect(),
            versions: Versions::new(keys),
            pids: self.nodes.iter().filter_map(GatewayProcess::pid).collect(),
        });
        let clients: Vec<ObjectStoreClient<Channel>> =
            channels.into_iter().map(ObjectStoreClient::new).collect();
        let create = |system: Arc<GatewaySystem>, mut client, key| async move {
            let version = system
                .put(&mut client, key, precondition::Kind::MustCreate(true))
                .await?;
            Ok((client, version))
        };
        super::preload(&system, &clients, keys, |s| &s.versions, create).await?;
        Arc::into_inner(system).context("preload tasks still hold the system")
    }

    /// Kills every gateway.
    pub fn stop(&self) {
        for n in &self.nodes {
            n.kill9();
        }
    }
}

impl Drop for Gateways {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The gateways' workload.
pub struct GatewaySystem {
    /// Client addresses, index i is node i+1.
    pub addrs: Vec<String>,
    versions: Versions,
    pids: Vec<i32>,
}

impl GatewaySystem {
    async fn put(
        &self,
        client: &mut ObjectStoreClient<Channel>,
        key: usize,
        kind: precondition::Kind,
    ) -> Result<u64, WriteError> {
        match client.put(put_request(key, kind)).await {
            Ok(r) => r
                .into_inner()
                .object
                .map(|o| o.resource_version)
                .ok_or_else(|| WriteError::Failed("put answered without an object".into())),
            Err(s) if s.code() == tonic::Code::FailedPrecondition => {
                Err(WriteError::Conflict(s.message().to_string()))
            }
            Err(s) => Err(WriteError::Failed(format!(
                "{:?}: {}",
                s.code(),
                s.message()
            ))),
        }
    }

    async fn read_version(
        &self,
        client: &mut ObjectStoreClient<Channel>,
        key: usize,
    ) -> Result<u64, WriteError> {
        let id = object_id(key);
        let got = client
            .get(GetRequest {
                r#type: OBJECT_TYPE.into(),
                id: id.clone(),
                stale: false,
            })
            .await
            .map_err(|s| {
                WriteError::Failed(format!("get {id}: {:?}: {}", s.code(), s.message()))
            })?;
        got.into_inner()
            .object
            .map(|o| o.resource_version)
            .ok_or_else(|| WriteError::Failed(format!("{id} missing")))
    }
}

impl BenchSystem for GatewaySystem {
    type Client = ObjectStoreClient<Channel>;

    fn name(&self) -> &'static str {
        "gateways"
    }

    fn server_pids(&self) -> Vec<i32> {
        self.pids.clone()
    }

    async fn connect(&self, client: usize) -> anyhow::Result<Self::Client> {
        let addr = &self.addrs[client % self.addrs.len()];
        let config = ClientConfig::for_role(Role::Jepsen)
            .with_connect_timeout(Duration::from_secs(2))
            .with_request_timeout(CLIENT_TIMEOUT)
            .with_tls(None);
        Ok(ObjectStoreClient::new(
            connect(Role::Jepsen, addr, &config).await?,
        ))
    }

    async fn write(&self, client: &mut Self::Client, key: usize) -> Result<(), WriteError> {
        let mut expected = self.versions.get(key);
        if expected == UNKNOWN {
            expected = self.read_version(client, key).await?;
        }
        match self
            .put(
                client,
                key,
                precondition::Kind::MatchResourceVersion(expected),
            )
            .await
        {
            Ok(v) => {
                self.versions.set(key, v);
                Ok(())
            }
            Err(e) => {
                self.versions.set(key, UNKNOWN);
                Err(e)
            }
        }
    }
}

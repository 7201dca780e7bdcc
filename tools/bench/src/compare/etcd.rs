//! A 3-member etcd cluster on loopback as a [`BenchSystem`].
//!
//! [`EtcdCluster::start`] runs Debian's `etcd` (3.4) three times: plaintext
//! client and peer URLs on free loopback ports, data directories under the
//! run's directory, `--initial-cluster-state new`, every other setting
//! (heartbeat 100 ms, election 1000 ms, snapshot count, quotas) at its
//! default. Output goes to `<dir>/etcd-<i>.log`. Dropping the cluster kills
//! every member.
//!
//! The workload: `Txn(compare mod_revision(key) == last seen) then Put(key,
//! 256-byte value)`, where "last seen" is the revision of this client's last
//! write of the key (the preload's put the first time; a linearizable
//! `Range` after a failure). A Txn whose compare fails is a conflict. Client
//! `i` connects to member `i mod 3`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tonic::transport::{Channel, Endpoint};

use super::etcd_wire::KvClient;
use super::{value, BenchSystem, Versions, WriteError, UNKNOWN};
use local_cluster::process::{log_to, ChildProcess};

/// Debian's `etcd-server` binary.
pub const DEFAULT_BIN: &str = "/usr/bin/etcd";
/// Per-request timeout of the bench's etcd clients (as the gateways').
pub const CLIENT_TIMEOUT: Duration = super::gateways::CLIENT_TIMEOUT;

/// The etcd key of bench key `key`.
pub fn etcd_key(key: usize) -> Vec<u8> {
    format!("/bench/k{key:05}").into_bytes()
}

/// One etcd member process.
pub struct EtcdMember {
    /// `m<i>`, 1-based.
    pub name: String,
    /// `127.0.0.1:<port>` of the client URL.
    pub client_addr: String,
    /// `127.0.0.1:<port>` of the peer URL.
    pub peer_addr: String,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Log file.
    pub log_path: PathBuf,
    child: ChildProcess,
}

impl EtcdMember {
    /// Process id, when running.
    pub fn pid(&self) -> Option<i32> {
        self.child.pid()
    }

    /// Sends `sig` (e.g. `libc::SIGSTOP`).
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

    /// A plaintext channel to this member's client URL.
    ///
    /// # Errors
    /// When it cannot connect.
    pub async fn channel(&self) -> anyhow::Result<Channel> {
        channel(&self.client_addr).await
    }
}

/// A plaintext channel to `addr` with the bench's client settings.
async fn channel(addr: &str) -> anyhow::Result<Channel> {
    Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(2))
        .timeout(CLIENT_TIMEOUT)
        .tcp_nodelay(true)
        .connect()
        .await
        .with_context(|| format!("connecting to etcd at {addr}"))
}

/// Three etcd members.
pub struct EtcdCluster {
    /// The `etcd` binary.
    pub bin: PathBuf,
    /// `m1=http://...,m2=...,m3=...`.
    pub initial_cluster: String,
    /// Index i is member i+1.
    pub members: Vec<EtcdMember>,
}

impl EtcdCluster {
    /// Starts three members under `dir` and waits (up to 30 s) until a
    /// linearizable read succeeds on each.
    ///
    /// # Errors
    /// When the binary is missing, a process cannot start, or the cluster
    /// does not answer in time.
    pub async fn start(bin: &Path, dir: &Path) -> anyhow::Result<EtcdCluster> {
        if !bin.is_file() {
            bail!(
                "{} not found: install Debian's etcd-server (scripts/bench.sh does)",
                bin.display()
            );
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let members: Vec<EtcdMember> = (1..=3)
            .map(|i| EtcdMember {
                name: format!("m{i}"),
                client_addr: format!("127.0.0.1:{}", testkit::ports::free_port()),
                peer_addr: format!("127.0.0.1:{}", testkit::ports::free_port()),
                data_dir: dir.join(format!("etcd-{i}")),
                log_path: dir.join(format!("etcd-{i}.log")),
                child: ChildProcess::default(),
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://{}", m.name, m.peer_addr))
            .collect::<Vec<_>>()
            .join(",");
        let cluster = EtcdCluster {
            bin: bin.to_path_buf(),
            initial_cluster,
            members,
        };
        for i in 1..=3 {
            cluster.start_member(i)?;
        }
        cluster.wait_ready(Duration::from_secs(30)).await?;
        Ok(cluster)
    }

    /// Member `i` (1-based).
    ///
    /// # Errors
    /// When there is no such member.
    pub fn member(&self, i: usize) -> anyhow::Result<&EtcdMember> {
        self.members
            .get(i.wrapping_sub(1))
            .with_context(|| format!("no etcd member {i}"))
    }

    /// Starts (or restarts after [`EtcdMember::kill9`]) member `i` on its
    /// data directory; a no-op when it runs.
    ///
    /// # Errors
    /// When the process cannot be spawned.
    pub fn start_member(&self, i: usize) -> anyhow::Result<()> {
        let m = self.member(i)?;
        let client_url = format!("http://{}", m.client_addr);
        let peer_url = format!("http://{}", m.peer_addr);
        let mut cmd = std::process::Command::new(&self.bin);
        cmd.args(["--name", &m.name])
            .arg("--data-dir")
            .arg(&m.data_dir)
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "openshell-bench"]);
        log_to(&mut cmd, &m.log_path)?;
        m.child.spawn(&mut cmd, &self.bin.display().to_string())?;
        Ok(())
    }

    /// Waits until a linearizable `Range` succeeds on every running member.
    ///
    /// # Errors
    /// When one does not within `within`.
    pub async fn wait_ready(&self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        for m in self.members.iter().filter(|m| m.pid().is_some()) {
            loop {
                let ok = match m.channel().await {
                    Ok(ch) => KvClient::new(ch)
                        .range(b"/bench/ready".to_vec())
                        .await
                        .is_ok(),
                    Err(_) => false,
                };
                if ok {
                    break;
                }
                if Instant::now() > deadline {
                    bail!(
                        "etcd member {} not ready within {within:?} (see {})",
                        m.name,
                        m.log_path.display()
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// The workload over `keys` keys, preloaded (every key put once, 64 at a
    /// time through all three members).
    ///
    /// # Errors
    /// When the preload fails.
    pub async fn system(&self, keys: usize) -> anyhow::Result<EtcdSystem> {
        let mut clients = Vec::new();
        for m in &self.members {
            clients.push(KvClient::new(m.channel().await?));
        }
        let system = Arc::new(EtcdSystem {
            addrs: self.members.iter().map(|m| m.client_addr.clone()).collect(),
            versions: Versions::new(keys),
            pids: self.members.iter().filter_map(|m| m.pid()).collect(),
        });
        let create = |_: Arc<EtcdSystem>, mut client: KvClient, key| async move {
            let put = client
                .put(etcd_key(key), value(key))
                .await
                .map_err(|e| WriteError::Failed(e.to_string()))?;
            let revision = put.header.map_or(0, |h| h.revision);
            Ok((client, u64::try_from(revision).unwrap_or(UNKNOWN)))
        };
        super::preload(&system, &clients, keys, |s| &s.versions, create).await?;
        Arc::into_inner(system).context("preload tasks still hold the system")
    }

    /// Kills every member.
    pub fn stop(&self) {
        for m in &self.members {
            m.kill9();
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// etcd's workload.
pub struct EtcdSystem {
    /// Client addresses, index i is member i+1.
    pub addrs: Vec<String>,
    versions: Versions,
    pids: Vec<i32>,
}

impl BenchSystem for EtcdSystem {
    type Client = KvClient;

    fn name(&self) -> &'static str {
        "etcd"
    }

    fn server_pids(&self) -> Vec<i32> {
        self.pids.clone()
    }

    async fn connect(&self, client: usize) -> anyhow::Result<KvClient> {
        Ok(KvClient::new(
            channel(&self.addrs[client % self.addrs.len()]).await?,
        ))
    }

    async fn write(&self, client: &mut KvClient, key: usize) -> Result<(), WriteError> {
        let failed = |what: &str, s: tonic::Status| {
            WriteError::Failed(format!("{what}: {:?}: {}", s.code(), s.message()))
        };
        let mut expected = self.versions.get(key);
        if expected == UNKNOWN {
            let got = client
                .range(etcd_key(key))
                .await
                .map_err(|s| failed("range", s))?;
            let revision = got.kvs.first().map_or(0, |kv| kv.mod_revision);
            expected = u64::try_from(revision).unwrap_or(0);
        }
        let expected_i64 = i64::try_from(expected).unwrap_or(i64::MAX);
        let result = client.cas(etcd_key(key), expected_i64, value(key)).await;
        match result {
            Ok(r) if r.succeeded => {
                let revision = r.header.map_or(0, |h| h.revision);
                self.versions
                    .set(key, u64::try_from(revision).unwrap_or(UNKNOWN));
                Ok(())
            }
            Ok(_) => {
                self.versions.set(key, UNKNOWN);
                Err(WriteError::Conflict(format!(
                    "mod_revision of key {key} is not {expected}"
                )))
            }
            Err(s) => {
                self.versions.set(key, UNKNOWN);
                Err(failed("txn", s))
            }
        }
    }
}

//! A TCP proxy in front of one gateway's peer port, and a cluster whose
//! membership names it: the way the end-to-end tests give one peer link
//! the faults of a real network (issue 33).
//!
//! The membership names the proxy as one node's address (and that node
//! advertises it), so every connection another gateway opens to it goes
//! through the proxy. The proxy can
//! - [`PeerProxy::wedge`]: stop forwarding on every connection (bytes are
//!   no longer read, nothing is closed) and hold new ones the same way, as
//!   a connection in TCP retransmission backoff or a flow a middlebox lost;
//!   [`PeerProxy::heal`] lets new connections through while the wedged ones
//!   stay dead;
//! - [`PeerProxy::set_delay`]: hold every chunk of bytes, both ways, for a
//!   fixed time before forwarding it, so that every call to the node takes
//!   at least twice that long (a slow link, or a follower that answers
//!   late).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proto::cluster::TransferLeaderRequest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::gateway::{Cluster, Gateway};
use crate::TestResult;

/// A TCP proxy to one address that can wedge or delay its connections.
pub struct PeerProxy {
    /// Where it listens (the address the membership names).
    pub addr: String,
    /// New connections are held without forwarding.
    wedged: Arc<AtomicBool>,
    /// Milliseconds each chunk waits before it is forwarded.
    delay_ms: Arc<AtomicU64>,
    /// Per live connection: set when it is wedged (for good).
    flows: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
    /// The accept loop.
    task: tokio::task::JoinHandle<()>,
}

impl PeerProxy {
    /// A proxy to `target` on a free loopback port.
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub async fn start(target: SocketAddr) -> TestResult<PeerProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let wedged = Arc::new(AtomicBool::new(false));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let flows: Arc<Mutex<Vec<Arc<AtomicBool>>>> = Arc::default();
        let task = {
            let wedged = wedged.clone();
            let delay_ms = delay_ms.clone();
            let flows = flows.clone();
            tokio::spawn(async move {
                while let Ok((inbound, _)) = listener.accept().await {
                    let dead = Arc::new(AtomicBool::new(wedged.load(Ordering::SeqCst)));
                    flows
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(dead.clone());
                    let flow = Flow {
                        dead,
                        delay_ms: delay_ms.clone(),
                    };
                    tokio::spawn(forward(inbound, target, flow));
                }
            })
        };
        Ok(PeerProxy {
            addr,
            wedged,
            delay_ms,
            flows,
            task,
        })
    }

    /// Every connection stops forwarding, and stays open.
    pub fn wedge(&self) {
        self.wedged.store(true, Ordering::SeqCst);
        for dead in self.flows.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            dead.store(true, Ordering::SeqCst);
        }
    }

    /// New connections get through again; wedged ones stay wedged.
    pub fn heal(&self) {
        self.wedged.store(false, Ordering::SeqCst);
    }

    /// Every chunk, either way, on every connection waits `delay` before it
    /// is forwarded (zero: forwarded at once).
    pub fn set_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.delay_ms.store(ms, Ordering::SeqCst);
    }
}

impl Drop for PeerProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One connection's switches.
#[derive(Clone)]
struct Flow {
    /// Set when the connection is wedged (for good).
    dead: Arc<AtomicBool>,
    /// The proxy's delay, read per chunk.
    delay_ms: Arc<AtomicU64>,
}

/// Forwards `inbound` to `target` both ways until the flow is wedged; then
/// holds both sockets open, reading nothing, until the test ends.
async fn forward(inbound: TcpStream, target: SocketAddr, flow: Flow) {
    if flow.dead.load(Ordering::SeqCst) {
        // Accepted while wedged: never forwarded.
        let _held = inbound;
        std::future::pending::<()>().await;
        return;
    }
    let Ok(outbound) = TcpStream::connect(target).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    let up = tokio::spawn(pump(in_read, out_write, flow.clone()));
    let down = tokio::spawn(pump(out_read, in_write, flow));
    let _ = tokio::join!(up, down);
}

/// Copies `from` to `to`, each chunk after the flow's delay, until either
/// closes or the flow is wedged; a wedged flow keeps both halves open,
/// reading nothing more.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    flow: Flow,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let delay = flow.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if flow.dead.load(Ordering::SeqCst) {
            let _held = (from, to);
            std::future::pending::<()>().await;
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Cluster {
    /// Three secure gateways whose membership names `proxied`'s peer port
    /// through a [`PeerProxy`]; `proxied` advertises that address.
    ///
    /// # Errors
    /// When the proxy cannot start.
    pub async fn start_with_proxied_peer(proxied: u64) -> TestResult<(Cluster, PeerProxy)> {
        let (root, material, mut nodes) = Cluster::secure_nodes(3, &[]);
        let index = usize::try_from(proxied.saturating_sub(1))?;
        let peer = nodes
            .get(index)
            .and_then(|n| n.peer_addr.clone())
            .ok_or("a secure gateway has a peer port")?;
        let proxy = PeerProxy::start(peer.parse()?).await?;
        let voters: Vec<(u64, String)> = nodes
            .iter()
            .map(|g| {
                let addr = if g.id == proxied {
                    proxy.addr.clone()
                } else {
                    g.member_addr().to_string()
                };
                (g.id, addr)
            })
            .collect();
        for node in &mut nodes {
            node.initial_voters = Some(voters.clone());
            if node.id == proxied {
                node.advertise = Some(proxy.addr.clone());
            }
            node.start();
        }
        let cluster = Cluster {
            root,
            nodes,
            material: Some(material),
        };
        Ok((cluster, proxy))
    }

    /// Makes `to` the leader if it is not (a leadership transfer), and waits
    /// until every running node agrees on it.
    ///
    /// # Errors
    /// When the transfer call fails.
    pub async fn lead_with(&self, to: u64) -> TestResult<()> {
        let leader = self.wait_leader("bootstrap").await;
        if leader != to {
            let node = self.get(leader);
            node.admin()
                .await?
                .transfer_leader(node.request(TransferLeaderRequest { to }))
                .await?;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.wait_leader("after the transfer").await != to {
            if Instant::now() > deadline {
                self.dump_logs();
                return Err(format!("node {to} never led").into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// The highest commit index nodes `ids` report (0 when none answers).
    pub async fn commit_index(&self, ids: &[u64]) -> u64 {
        let mut commit = 0;
        for id in ids {
            if let Ok(s) = self.get(*id).status().await {
                commit = commit.max(s.commit_index);
            }
        }
        commit
    }
}

/// Puts one object through `node`, within `timeout`; the log index it was
/// applied at.
///
/// # Errors
/// When the write fails or `timeout` passes first.
pub async fn put_within(node: &Gateway, id: &str, timeout: Duration) -> TestResult<u64> {
    let mut client = node.objects().await?;
    let mut request = node.request(proto::objects::PutRequest {
        object: Some(crate::gateway::object(id, "v")),
        precondition: None,
        request_id: String::new(),
    });
    request.set_timeout(timeout);
    let reply = client.put(request).await?.into_inner();
    Ok(reply.log_index)
}

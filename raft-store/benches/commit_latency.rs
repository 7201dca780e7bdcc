//! Commit latency and throughput of raft-store against the local durability
//! limit of the same disk.
//!
//! Run with `cargo bench -p raft-store --bench commit_latency`.
//!
//! 1. Local limit: one sled database with raft-store's own settings
//!    (`raft_store::db::DataDir`), 256-byte records inserted into the `log`
//!    tree, each made durable with `Durability::sync()` (sled `flush` +
//!    `fdatasync` of the `db` file on the flusher thread, group commit).
//! 2. Raft: three `RaftNode<Objects>` in this process on loopback gRPC;
//!    writers call `write` on the leader with a 256-byte-payload object put.
//!
//! Both run N = 1, 8, 64 closed-loop writers (each waits for its write to be
//! durable / committed before issuing the next) for a warm-up and then a
//! measured window. Only operations that complete inside the measured window
//! count towards throughput and latency.
//!
//! Environment knobs (optional): `BENCH_WARMUP_SECS` (default 1),
//! `BENCH_SECS` (default 5), `BENCH_WRITERS` (default `1,8,64`),
//! `BENCH_ONLY` (`local` or `raft`).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message;
use raft_store::db::DataDir;
use raft_store::objects::{
    object_command, precondition, Object, ObjectCommand, Objects, Precondition, PutRequest,
};
use raft_store::{NodeConfig, RaftNode};

/// Bytes of every record (local) and of every object payload (raft).
const RECORD_BYTES: usize = 256;
/// Target: at 64 writers raft throughput / local limit throughput >= this.
const TARGET_THROUGHPUT_RATIO: f64 = 0.25;
/// Target: at 1 writer raft p50 <= this times the local limit's p50.
const TARGET_P50_RATIO: f64 = 3.0;

/// Result of one closed-loop run.
#[derive(Clone, Debug)]
struct Level {
    writers: usize,
    /// Operations completed inside the measured window.
    ops: usize,
    /// Operations that failed inside the measured window.
    errors: usize,
    /// ops / window.
    per_sec: f64,
    p50: Duration,
    p99: Duration,
    p999: Duration,
}

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn writer_levels() -> Vec<usize> {
    std::env::var("BENCH_WRITERS")
        .ok()
        .map(|v| {
            v.split(',')
                .filter_map(|s| s.trim().parse().ok())
                .filter(|n| *n > 0)
                .collect::<Vec<usize>>()
        })
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| vec![1, 8, 64])
}

fn percentile(sorted: &[u64], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // Nearest-rank percentile.
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Duration::from_nanos(sorted[rank - 1])
}

/// Runs `writers` closed-loop tasks calling `op(writer, seq)` until
/// `warmup + window` has passed; measures operations completing in the window.
async fn closed_loop<F, Fut>(writers: usize, warmup: Duration, window: Duration, op: F) -> Level
where
    F: Fn(usize, u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send,
{
    let start = Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + window;
    let mut tasks = Vec::with_capacity(writers);
    for w in 0..writers {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies: Vec<u64> = Vec::with_capacity(16 * 1024);
            let mut errors = 0usize;
            let mut seq = 0u64;
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let ok = op(w, seq).await;
                let t1 = Instant::now();
                seq += 1;
                if t1 >= measure_from && t1 <= end {
                    if ok {
                        latencies.push((t1 - t0).as_nanos() as u64);
                    } else {
                        errors += 1;
                    }
                }
            }
            (latencies, errors)
        }));
    }
    let mut all: Vec<u64> = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.expect("writer task panicked");
        all.extend(l);
        errors += e;
    }
    all.sort_unstable();
    Level {
        writers,
        ops: all.len(),
        errors,
        per_sec: all.len() as f64 / window.as_secs_f64(),
        p50: percentile(&all, 0.50),
        p99: percentile(&all, 0.99),
        p999: percentile(&all, 0.999),
    }
}

/// The local limit: sled insert + flush + fdatasync, group-committed.
async fn local_level(writers: usize, warmup: Duration, window: Duration) -> Level {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("data");
    let dir = tokio::task::spawn_blocking(move || {
        DataDir::open(&path, "bench", 1, 64 * 1024 * 1024).expect("open data dir")
    })
    .await
    .expect("open task");
    let dir = Arc::new(dir);
    let next_key = Arc::new(AtomicU64::new(1));
    let record: Arc<[u8]> = vec![0xABu8; RECORD_BYTES].into();
    let op = {
        let dir = dir.clone();
        move |_w: usize, _seq: u64| {
            let dir = dir.clone();
            let record = record.clone();
            let key = next_key.fetch_add(1, Ordering::Relaxed).to_be_bytes();
            async move {
                if dir.log.insert(key, &*record).is_err() {
                    return false;
                }
                dir.durability.sync().await.is_ok()
            }
        }
    };
    let level = closed_loop(writers, warmup, window, op).await;
    drop(dir);
    drop(tmp);
    level
}

/// A prost-encoded unconditional put of object `bench/w<writer>` with a
/// 256-byte payload.
fn put_command(writer: usize, seq: u64) -> Vec<u8> {
    let mut payload = vec![0u8; RECORD_BYTES];
    payload[..8].copy_from_slice(&seq.to_le_bytes());
    ObjectCommand {
        op: Some(object_command::Op::Put(PutRequest {
            object: Some(Object {
                id: format!("w{writer}"),
                r#type: "bench".into(),
                name: format!("writer-{writer}"),
                payload,
                ..Default::default()
            }),
            precondition: Some(Precondition {
                kind: Some(precondition::Kind::Unconditional(true)),
            }),
        })),
    }
    .encode_to_vec()
}

/// Three raft nodes on loopback.
struct Cluster {
    nodes: Vec<RaftNode<Objects>>,
    servers: Vec<tokio::task::JoinHandle<()>>,
    _dirs: Vec<tempfile::TempDir>,
}

impl Cluster {
    async fn start() -> Cluster {
        let mut listeners = Vec::new();
        for _ in 0..3 {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind loopback");
            let addr = l.local_addr().expect("local addr").to_string();
            listeners.push((l, addr));
        }
        let members: Vec<(u64, String)> = listeners
            .iter()
            .enumerate()
            .map(|(i, (_, a))| (i as u64 + 1, a.clone()))
            .collect();
        let mut nodes = Vec::new();
        let mut servers = Vec::new();
        let mut dirs = Vec::new();
        for (i, (listener, addr)) in listeners.into_iter().enumerate() {
            let tmp = tempfile::tempdir().expect("tempdir");
            let config = NodeConfig::new(i as u64 + 1, &addr, tmp.path().join("data"), "bench");
            let node: RaftNode<Objects> = RaftNode::start(config).await.expect("start node");
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            let service = node.transport_service();
            servers.push(tokio::spawn(async move {
                if let Err(e) = tonic::transport::Server::builder()
                    .add_service(service)
                    .serve_with_incoming(incoming)
                    .await
                {
                    eprintln!("server failed: {e}");
                }
            }));
            nodes.push(node);
            dirs.push(tmp);
        }
        nodes[0]
            .initialize(members)
            .await
            .expect("initialize cluster");
        for node in &nodes {
            node.raft()
                .wait(Some(Duration::from_secs(10)))
                .metrics(|m| m.current_leader.is_some(), "leader known")
                .await
                .expect("no leader within 10 s");
        }
        Cluster {
            nodes,
            servers,
            _dirs: dirs,
        }
    }

    fn leader(&self) -> RaftNode<Objects> {
        self.nodes
            .iter()
            .find(|n| n.is_leader())
            .expect("a leader")
            .clone()
    }

    async fn stop(self) {
        for n in &self.nodes {
            n.shutdown().await;
        }
        for s in &self.servers {
            s.abort();
        }
    }
}

async fn raft_level(
    leader: &RaftNode<Objects>,
    writers: usize,
    warmup: Duration,
    window: Duration,
) -> Level {
    let node = leader.clone();
    let op = move |w: usize, seq: u64| {
        let node = node.clone();
        let command = put_command(w, seq);
        async move { node.write(command).await.is_ok() }
    };
    closed_loop(writers, warmup, window, op).await
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is ignored.
    let warmup = Duration::from_secs_f64(env_f64("BENCH_WARMUP_SECS", 1.0));
    let window = Duration::from_secs_f64(env_f64("BENCH_SECS", 5.0));
    let levels = writer_levels();
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|k| k.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    println!(
        "commit_latency: {RECORD_BYTES}-byte records, writers {levels:?}, {:.1} s warm-up + {:.1} s measured per level, {cores} cores, kernel {kernel}",
        warmup.as_secs_f64(),
        window.as_secs_f64()
    );

    let (local, raft) = runtime.block_on(async {
        let mut local = Vec::new();
        if only != "raft" {
            for &n in &levels {
                let l = local_level(n, warmup, window).await;
                println!(
                    "local  writers={:>3} ops={:>6} errors={} {:>8.0} w/s p50={} p99={} p999={}",
                    l.writers, l.ops, l.errors, l.per_sec, ms(l.p50), ms(l.p99), ms(l.p999)
                );
                local.push(l);
            }
        }
        let mut raft = Vec::new();
        if only != "local" {
            let cluster = Cluster::start().await;
            let leader = cluster.leader();
            println!("raft   cluster up, leader node {}", leader.id());
            for &n in &levels {
                let before = leader.raft().metrics().borrow().last_log_index.unwrap_or(0);
                let l = raft_level(&leader, n, warmup, window).await;
                let after = leader.raft().metrics().borrow().last_log_index.unwrap_or(0);
                println!(
                    "raft   writers={:>3} ops={:>6} errors={} {:>8.0} w/s p50={} p99={} p999={} (log {} -> {})",
                    l.writers, l.ops, l.errors, l.per_sec, ms(l.p50), ms(l.p99), ms(l.p999), before, after
                );
                raft.push(l);
            }
            cluster.stop().await;
        }
        (local, raft)
    });
    runtime.shutdown_timeout(Duration::from_secs(2));

    println!();
    println!(
        "| writers | local limit w/s | local p50 | raft w/s | raft p50 | raft p99 | raft p999 | ratio raft/limit (throughput) | p50 ratio raft/limit |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut at = std::collections::BTreeMap::new();
    for &n in &levels {
        let l = local.iter().find(|l| l.writers == n);
        let r = raft.iter().find(|r| r.writers == n);
        let cell = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        let tput = l.zip(r).map(|(l, r)| ratio(r.per_sec, l.per_sec));
        let p50r = l
            .zip(r)
            .map(|(l, r)| ratio(r.p50.as_secs_f64(), l.p50.as_secs_f64()));
        println!(
            "| {n} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell(l.map(|l| format!("{:.0}", l.per_sec))),
            cell(l.map(|l| ms(l.p50))),
            cell(r.map(|r| format!("{:.0}", r.per_sec))),
            cell(r.map(|r| ms(r.p50))),
            cell(r.map(|r| ms(r.p99))),
            cell(r.map(|r| ms(r.p999))),
            cell(tput.map(|t| format!("{t:.2}"))),
            cell(p50r.map(|t| format!("{t:.2}×"))),
        );
        at.insert(n, (tput, p50r));
    }
    println!();
    let verdict = |ok: bool| if ok { "PASS" } else { "MISS" };
    match at.get(&64).and_then(|(t, _)| *t) {
        Some(t) => println!(
            "target: at 64 writers raft/limit throughput >= {TARGET_THROUGHPUT_RATIO:.2}: {:.2} -> {}",
            t,
            verdict(t >= TARGET_THROUGHPUT_RATIO)
        ),
        None => println!("target: at 64 writers raft/limit throughput >= {TARGET_THROUGHPUT_RATIO:.2}: not measured"),
    }
    match at.get(&1).and_then(|(_, p)| *p) {
        Some(p) => println!(
            "target: at 1 writer raft p50 <= {TARGET_P50_RATIO:.0}x limit p50: {:.2}x -> {}",
            p,
            verdict(p <= TARGET_P50_RATIO)
        ),
        None => println!(
            "target: at 1 writer raft p50 <= {TARGET_P50_RATIO:.0}x limit p50: not measured"
        ),
    }
    let failed: usize = local.iter().chain(raft.iter()).map(|l| l.errors).sum();
    if failed > 0 {
        println!("warning: {failed} operations failed inside the measured windows");
    }
}

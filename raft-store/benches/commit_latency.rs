//! Commit latency and throughput of raft-store against two local durability
//! limits of the same disk, all measured in the same run.
//!
//! Run with `cargo bench -p raft-store --features bench --bench commit_latency`.
//! The file limit and the raft group are `raft_store::bench` (feature
//! `bench`), which `openshell-bench compare` measures too.
//!
//! 1. `file` limit (the definition in the issue that specifies this bench):
//!    one plain file opened for append in a tempdir, 256-byte records; one
//!    dedicated writer thread takes every record queued at that moment,
//!    writes them with one `write_all`, calls `fdatasync`
//!    (`File::sync_data`) once, then completes every producer of that batch
//!    (group commit). The file is not preallocated, so it grows with every
//!    batch like a log would.
//! 2. `sled` limit: one sled database with raft-store's own settings
//!    (`raft_store::db::DataDir`), 256-byte records inserted into the `log`
//!    tree, each made durable with `Durability::sync()` (sled `flush` +
//!    `fdatasync` of the `db` file on the flusher thread, group commit). This
//!    is the storage engine the raft log actually uses.
//! 3. Raft: three `RaftNode<Objects>` in this process on loopback gRPC;
//!    writers call `write` on the leader with a 256-byte-payload object put.
//!
//! All three run N = 1, 8, 64 closed-loop writers (each waits for its write
//! to be durable / committed before issuing the next) for a warm-up and then a
//! measured window. Only operations that complete inside the measured window
//! count towards throughput and latency. The targets (at 64 writers raft
//! throughput >= 25% of the limit; at 1 writer raft p50 <= 3x the limit's
//! p50) are judged against the `file` limit and, separately, the `sled` limit.
//! A failed write or `fdatasync` in the file limit panics with a message
//! naming the call and the path; a failed sled insert or sync, or a failed
//! raft write, counts as an error and is reported after the table.
//!
//! Two more raft systems, on request (`BENCH_ONLY`, or `BENCH_NO_FLUSH=1`
//! which adds `raft-nosync` to the default three):
//!
//! 4. `raft-nosync`: the same cluster with
//!    `LogSync::UnsafeNoSyncForBenchmarks` (no sled flush, no `fdatasync`):
//!    the non-disk floor of one write at 1 writer, the CPU ceiling at 64.
//!    Printed beside the durable `raft` run with their ratio.
//! 5. `raft-spread`: the durable cluster, writer *i* calling `write` on node
//!    *i mod 3*, so two writers in three are forwarded by a follower to the
//!    leader (the end-to-end path's forwarding, without the client gRPC).
//!
//! Environment knobs (optional): `BENCH_WARMUP_SECS` (default 1),
//! `BENCH_SECS` (default 5), `BENCH_WRITERS` (default `1,8,64`),
//! `BENCH_ONLY` (comma-separated subset of `file`, `sled`, `raft`,
//! `raft-nosync`, `raft-spread`; `local` is an alias for `sled`; default
//! `file,sled,raft`), `BENCH_NO_FLUSH=1` (adds `raft-nosync`).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message;
use raft_store::bench::{FileLimit, RECORD_BYTES};
use raft_store::db::DataDir;
use raft_store::objects::{
    object_command, precondition, Object, ObjectCommand, Objects, Precondition, PutRequest,
};
use raft_store::{LogSync, NodeConfig, RaftNode};

/// Target: at 64 writers raft throughput / limit throughput >= this.
const TARGET_THROUGHPUT_RATIO: f64 = 0.25;
/// Target: at 1 writer raft p50 <= this times the limit's 1-writer p50.
const TARGET_P50_RATIO: f64 = 3.0;

/// What a run measures (`BENCH_ONLY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    File,
    Sled,
    Raft,
    /// Raft with `LogSync::UnsafeNoSyncForBenchmarks`.
    RaftNoSync,
    /// Raft with writers spread over the three nodes (followers forward).
    RaftSpread,
}

/// Parses `BENCH_ONLY`: unset or empty means all parts; an unknown name
/// stops the bench rather than silently measuring something else.
fn parts() -> Vec<Part> {
    let mut all = vec![Part::File, Part::Sled, Part::Raft];
    if std::env::var("BENCH_NO_FLUSH").is_ok_and(|v| v == "1") {
        all.push(Part::RaftNoSync);
    }
    let Ok(only) = std::env::var("BENCH_ONLY") else {
        return all;
    };
    if only.trim().is_empty() {
        return all;
    }
    let mut parts = Vec::new();
    for name in only.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let part = match name {
            "file" => Part::File,
            "sled" | "local" => Part::Sled,
            "raft" => Part::Raft,
            "raft-nosync" => Part::RaftNoSync,
            "raft-spread" => Part::RaftSpread,
            other => panic!(
                "BENCH_ONLY: unknown part {other:?} (expected a comma-separated subset of file, sled, local, raft, raft-nosync, raft-spread)"
            ),
        };
        if !parts.contains(&part) {
            parts.push(part);
        }
    }
    parts
}

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

/// The file limit (`raft_store::bench::FileLimit`, shared with
/// `openshell-bench compare`): one file opened for append, 256-byte records,
/// one `write_all` + one `fdatasync` per group-committed batch.
async fn file_level(writers: usize, warmup: Duration, window: Duration) -> (Level, f64) {
    let tmp = tempfile::tempdir().expect("tempdir for the file limit");
    let path = tmp.path().join("records");
    let limit = FileLimit::start(&path).unwrap_or_else(|e| panic!("{e}"));
    let appender = limit.appender();
    let op = move |w: usize, seq: u64| {
        let appender = appender.clone();
        async move {
            let mut record = vec![0xABu8; RECORD_BYTES].into_boxed_slice();
            record[..8].copy_from_slice(&(w as u64).to_le_bytes());
            record[8..16].copy_from_slice(&seq.to_le_bytes());
            match appender.append(record).await {
                Ok(()) => true,
                Err(e) => panic!("{e}"),
            }
        }
    };
    // `closed_loop` drops every clone of the appender when it returns, which
    // lets `finish` end the writer thread.
    let level = closed_loop(writers, warmup, window, op).await;
    let stats = tokio::task::spawn_blocking(move || limit.finish())
        .await
        .expect("join task")
        .unwrap_or_else(|e| panic!("{e}"));
    drop(tmp);
    let per_batch = stats.records as f64 / stats.batches.max(1) as f64;
    (level, per_batch)
}

/// The sled limit: sled insert + flush + fdatasync, group-committed.
async fn sled_level(writers: usize, warmup: Duration, window: Duration) -> Level {
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
            request_id: String::new(),
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
    async fn start(log_sync: LogSync) -> Cluster {
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
            let mut config = NodeConfig::new(i as u64 + 1, &addr, tmp.path().join("data"), "bench");
            config.log_sync = log_sync;
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

/// Writer `w` writes through `nodes[w % nodes.len()]` (one node: the
/// leader; all three: followers forward).
async fn raft_level(
    nodes: &[RaftNode<Objects>],
    writers: usize,
    warmup: Duration,
    window: Duration,
) -> Level {
    let nodes = Arc::new(nodes.to_vec());
    let op = move |w: usize, seq: u64| {
        let node = nodes[w % nodes.len()].clone();
        let command = put_command(w, seq);
        async move { node.write(command).await.is_ok() }
    };
    closed_loop(writers, warmup, window, op).await
}

/// One raft system at every level: `spread` writers over all nodes, or
/// all through the leader.
async fn raft_system(
    name: &str,
    log_sync: LogSync,
    spread: bool,
    levels: &[usize],
    warmup: Duration,
    window: Duration,
) -> Vec<Level> {
    let cluster = Cluster::start(log_sync).await;
    let leader = cluster.leader();
    let nodes = if spread {
        cluster.nodes.clone()
    } else {
        vec![leader.clone()]
    };
    println!("{name:<11} cluster up, leader node {}", leader.id());
    let mut out = Vec::new();
    for &n in levels {
        let before = leader.raft().metrics().borrow().last_log_index.unwrap_or(0);
        let l = raft_level(&nodes, n, warmup, window).await;
        let after = leader.raft().metrics().borrow().last_log_index.unwrap_or(0);
        println!(
            "{name:<11} writers={:>3} ops={:>6} errors={} {:>8.0} w/s p50={} p99={} p999={} (log {} -> {})",
            l.writers, l.ops, l.errors, l.per_sec, ms(l.p50), ms(l.p99), ms(l.p999), before, after
        );
        out.push(l);
    }
    cluster.stop().await;
    out
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

/// Prints the two targets judged against one limit.
fn verdicts(limit: &str, note: &str, limit_levels: &[Level], raft: &[Level]) {
    println!("targets against the {limit} limit ({note}):");
    let verdict = |ok: bool| if ok { "PASS" } else { "MISS" };
    let find = |v: &[Level], n: usize| v.iter().find(|l| l.writers == n).cloned();
    let throughput = find(limit_levels, 64)
        .zip(find(raft, 64))
        .map(|(l, r)| ratio(r.per_sec, l.per_sec));
    match throughput {
        Some(t) => println!(
            "target ({limit} limit): at 64 writers raft/{limit} throughput >= {TARGET_THROUGHPUT_RATIO:.2}: {t:.2} -> {}",
            verdict(t >= TARGET_THROUGHPUT_RATIO)
        ),
        None => println!(
            "target ({limit} limit): at 64 writers raft/{limit} throughput >= {TARGET_THROUGHPUT_RATIO:.2}: not measured"
        ),
    }
    let p50 = find(limit_levels, 1)
        .zip(find(raft, 1))
        .map(|(l, r)| ratio(r.p50.as_secs_f64(), l.p50.as_secs_f64()));
    match p50 {
        Some(p) => println!(
            "target ({limit} limit): at 1 writer raft p50 <= {TARGET_P50_RATIO:.0}x {limit} p50: {p:.2}x -> {}",
            verdict(p <= TARGET_P50_RATIO)
        ),
        None => println!(
            "target ({limit} limit): at 1 writer raft p50 <= {TARGET_P50_RATIO:.0}x {limit} p50: not measured"
        ),
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is ignored.
    let warmup = Duration::from_secs_f64(env_f64("BENCH_WARMUP_SECS", 1.0));
    let window = Duration::from_secs_f64(env_f64("BENCH_SECS", 5.0));
    let levels = writer_levels();
    let parts = parts();
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
        "commit_latency: {RECORD_BYTES}-byte records, writers {levels:?}, parts {parts:?}, {:.1} s warm-up + {:.1} s measured per level, {cores} cores, kernel {kernel}",
        warmup.as_secs_f64(),
        window.as_secs_f64()
    );

    let (file, sled, raft, nosync, spread) = runtime.block_on(async {
        let mut file = Vec::new();
        if parts.contains(&Part::File) {
            for &n in &levels {
                let (l, per_batch) = file_level(n, warmup, window).await;
                println!(
                    "file   writers={:>3} ops={:>6} errors={} {:>8.0} w/s p50={} p99={} p999={} ({per_batch:.1} records per fdatasync)",
                    l.writers, l.ops, l.errors, l.per_sec, ms(l.p50), ms(l.p99), ms(l.p999)
                );
                file.push(l);
            }
        }
        let mut sled = Vec::new();
        if parts.contains(&Part::Sled) {
            for &n in &levels {
                let l = sled_level(n, warmup, window).await;
                println!(
                    "sled   writers={:>3} ops={:>6} errors={} {:>8.0} w/s p50={} p99={} p999={}",
                    l.writers, l.ops, l.errors, l.per_sec, ms(l.p50), ms(l.p99), ms(l.p999)
                );
                sled.push(l);
            }
        }
        let mut raft = Vec::new();
        if parts.contains(&Part::Raft) {
            raft = raft_system("raft", LogSync::Durable, false, &levels, warmup, window).await;
        }
        let mut nosync = Vec::new();
        if parts.contains(&Part::RaftNoSync) {
            let sync = LogSync::UnsafeNoSyncForBenchmarks;
            nosync = raft_system("raft-nosync", sync, false, &levels, warmup, window).await;
        }
        let mut spread = Vec::new();
        if parts.contains(&Part::RaftSpread) {
            spread = raft_system("raft-spread", LogSync::Durable, true, &levels, warmup, window)
                .await;
        }
        (file, sled, raft, nosync, spread)
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    print_table(&levels, &file, &sled, &raft);
    verdicts("file", "the issue's definition", &file, &raft);
    verdicts("sled", "the engine the raft log uses", &sled, &raft);
    print_beside(
        "raft-nosync",
        "no flush, no fdatasync",
        &levels,
        &raft,
        &nosync,
    );
    print_beside(
        "raft-spread",
        "writers on all 3 nodes",
        &levels,
        &raft,
        &spread,
    );
    let failed: usize = file
        .iter()
        .chain(sled.iter())
        .chain(raft.iter())
        .chain(nosync.iter())
        .chain(spread.iter())
        .map(|l| l.errors)
        .sum();
    if failed > 0 {
        println!("warning: {failed} operations failed inside the measured windows");
    }
}

/// Prints the results as the README's markdown table.
fn print_table(levels: &[usize], file: &[Level], sled: &[Level], raft: &[Level]) {
    println!();
    println!(
        "| writers | file limit w/s | file p50 | sled limit w/s | sled p50 | raft w/s | raft p50 | raft p99 | raft p999 | raft/file throughput | raft/sled throughput | raft p50 / file p50 | raft p50 / sled p50 |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let cell = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for &n in levels {
        let f = file.iter().find(|l| l.writers == n);
        let s = sled.iter().find(|l| l.writers == n);
        let r = raft.iter().find(|r| r.writers == n);
        let tput = |limit: Option<&Level>| {
            cell(
                limit
                    .zip(r)
                    .map(|(l, r)| format!("{:.2}", ratio(r.per_sec, l.per_sec))),
            )
        };
        let p50 =
            |limit: Option<&Level>| {
                cell(limit.zip(r).map(|(l, r)| {
                    format!("{:.2}×", ratio(r.p50.as_secs_f64(), l.p50.as_secs_f64()))
                }))
            };
        println!(
            "| {n} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell(f.map(|l| format!("{:.0}", l.per_sec))),
            cell(f.map(|l| ms(l.p50))),
            cell(s.map(|l| format!("{:.0}", l.per_sec))),
            cell(s.map(|l| ms(l.p50))),
            cell(r.map(|r| format!("{:.0}", r.per_sec))),
            cell(r.map(|r| ms(r.p50))),
            cell(r.map(|r| ms(r.p99))),
            cell(r.map(|r| ms(r.p999))),
            tput(f),
            tput(s),
            p50(f),
            p50(s),
        );
    }
    println!();
}

/// Prints another raft system beside the durable leader-only `raft` run of
/// the same process (nothing when it was not measured).
fn print_beside(name: &str, what: &str, levels: &[usize], raft: &[Level], other: &[Level]) {
    if other.is_empty() {
        return;
    }
    println!("{name} ({what}) beside raft (durable, writers on the leader):");
    println!(
        "| writers | {name} w/s | {name} p50 | {name} p99 | raft w/s | raft p50 | raft/{name} throughput | raft p50 / {name} p50 |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    let cell = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for &n in levels {
        let o = other.iter().find(|l| l.writers == n);
        let r = raft.iter().find(|l| l.writers == n);
        println!(
            "| {n} | {} | {} | {} | {} | {} | {} | {} |",
            cell(o.map(|l| format!("{:.0}", l.per_sec))),
            cell(o.map(|l| ms(l.p50))),
            cell(o.map(|l| ms(l.p99))),
            cell(r.map(|l| format!("{:.0}", l.per_sec))),
            cell(r.map(|l| ms(l.p50))),
            cell(
                o.zip(r)
                    .map(|(o, r)| format!("{:.2}", ratio(r.per_sec, o.per_sec)))
            ),
            cell(
                o.zip(r).map(|(o, r)| format!(
                    "{:.2}×",
                    ratio(r.p50.as_secs_f64(), o.p50.as_secs_f64())
                ))
            ),
        );
    }
    println!();
}

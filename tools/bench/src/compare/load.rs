//! The closed-loop client driver: `clients` tasks, each with its own
//! connection and its own slice of the keys (client `i` of `n` owns every
//! key `k` with `k % n == i` and picks one uniformly at random per write),
//! each issuing its next write as soon as the last one returns. After a
//! warm-up, only operations that complete inside the measured window count;
//! successes give throughput and latency percentiles, CAS conflicts and
//! other errors are counted apart.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::{BenchSystem, WriteError};

/// Settings of one level.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Concurrent closed-loop clients.
    pub clients: usize,
    /// Keys in the key space (>= clients).
    pub keys: usize,
    /// Time before the measured window (operations not counted).
    pub warmup: Duration,
    /// The measured window.
    pub window: Duration,
    /// Keep the completion time (since the level's start) of every
    /// successful write in [`LevelResult::completions`] (failover windows).
    pub record_completions: bool,
    /// Seed of the clients' key choices (client `i` uses `seed + i`).
    pub seed: u64,
}

/// What one level measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LevelResult {
    /// Concurrent clients.
    pub clients: usize,
    /// Successful writes completed inside the window.
    pub ops: u64,
    /// Writes refused by their compare-and-set (or fence) inside the window.
    pub conflicts: u64,
    /// Other failed writes inside the window.
    pub errors: u64,
    /// The first conflict or error message, if any.
    pub first_error: Option<String>,
    /// ops / window, per second.
    pub per_sec: f64,
    /// Latency percentiles of the successful writes, microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// 99.9th percentile, microseconds.
    pub p999_us: f64,
    /// Mean, microseconds.
    pub mean_us: f64,
    /// The measured window, seconds.
    pub window_secs: f64,
    /// CPU seconds (user + system) the system's server processes used in
    /// the window (0: in-process, not measured apart from the clients).
    #[serde(default)]
    pub server_cpu_s: f64,
    /// `server_cpu_s` per 1,000 successful writes (0: not measured).
    #[serde(default)]
    pub cpu_s_per_1000: f64,
    /// Completion times of every successful write since the level's start
    /// (warm-up included), when asked for ([`LoadOptions::record_completions`]).
    #[serde(skip)]
    pub completions: Vec<Duration>,
}

impl LevelResult {
    /// One printed line.
    pub fn line(&self, system: &str) -> String {
        let mut s = format!(
            "{system:<9} clients={:>3} ops={:>7} {:>9.0} w/s p50={:>8.3} ms p99={:>8.3} ms p999={:>8.3} ms conflicts={} errors={}",
            self.clients,
            self.ops,
            self.per_sec,
            self.p50_us / 1e3,
            self.p99_us / 1e3,
            self.p999_us / 1e3,
            self.conflicts,
            self.errors
        );
        if let Some(e) = &self.first_error {
            s.push_str(&format!(" (first: {e})"));
        }
        s
    }
}

/// What one client task brings back.
#[derive(Default)]
struct ClientTally {
    latencies_ns: Vec<u64>,
    conflicts: u64,
    errors: u64,
    first_error: Option<String>,
    completions: Vec<Duration>,
}

/// Nearest-rank percentile of sorted nanoseconds, in microseconds.
fn percentile_us(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1e3
}

/// Runs one level of `system`: connects every client, then drives them for
/// `warmup + window`.
///
/// # Errors
/// When a client cannot connect, `keys < clients`, or a client task panics.
pub async fn run_level<S: BenchSystem>(
    system: Arc<S>,
    options: &LoadOptions,
) -> anyhow::Result<LevelResult> {
    let n = options.clients;
    if n == 0 || options.keys < n {
        bail!(
            "need 1 <= clients <= keys (clients {n}, keys {})",
            options.keys
        );
    }
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        conns.push(
            system
                .connect(i)
                .await
                .with_context(|| format!("connecting client {i}"))?,
        );
    }
    let start = Instant::now();
    let measure_from = start + options.warmup;
    let end = measure_from + options.window;
    let mut tasks = Vec::with_capacity(n);
    for (i, conn) in conns.into_iter().enumerate() {
        let system = system.clone();
        let owned = (options.keys - i).div_ceil(n);
        let seed = options.seed.wrapping_add(i as u64);
        let record = options.record_completions;
        tasks.push(tokio::spawn(async move {
            let mut conn = conn;
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut tally = ClientTally::default();
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let key = i + n * rng.gen_range(0..owned);
                let result = system.write(&mut conn, key).await;
                let t1 = Instant::now();
                if record && result.is_ok() {
                    tally.completions.push(t1 - start);
                }
                if t1 < measure_from || t1 > end {
                    continue;
                }
                match result {
                    Ok(()) => tally.latencies_ns.push((t1 - t0).as_nanos() as u64),
                    Err(e) => {
                        match e {
                            WriteError::Conflict(_) => tally.conflicts += 1,
                            WriteError::Failed(_) => tally.errors += 1,
                        }
                        tally.first_error.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            tally
        }));
    }
    let cpu = servers_cpu_over(system.clone(), measure_from, end);
    let mut all = Vec::new();
    let mut result = LevelResult {
        clients: n,
        window_secs: options.window.as_secs_f64(),
        ..LevelResult::default()
    };
    for t in tasks {
        let tally = t.await.context("a client task panicked")?;
        all.extend(tally.latencies_ns);
        result.conflicts += tally.conflicts;
        result.errors += tally.errors;
        if result.first_error.is_none() {
            result.first_error = tally.first_error;
        }
        result.completions.extend(tally.completions);
    }
    all.sort_unstable();
    result.completions.sort_unstable();
    result.ops = all.len() as u64;
    result.server_cpu_s = cpu.await.unwrap_or(0.0);
    if result.ops > 0 && result.server_cpu_s > 0.0 {
        result.cpu_s_per_1000 = result.server_cpu_s * 1000.0 / result.ops as f64;
    }
    result.per_sec = all.len() as f64 / options.window.as_secs_f64().max(1e-9);
    result.p50_us = percentile_us(&all, 0.50);
    result.p99_us = percentile_us(&all, 0.99);
    result.p999_us = percentile_us(&all, 0.999);
    result.mean_us = if all.is_empty() {
        0.0
    } else {
        all.iter().map(|&v| v as f64).sum::<f64>() / all.len() as f64 / 1e3
    };
    Ok(result)
}

/// The CPU seconds `system`'s server processes use from `from` to `to`
/// (sampled at both instants by a task of its own).
fn servers_cpu_over<S: BenchSystem>(
    system: Arc<S>,
    from: Instant,
    to: Instant,
) -> tokio::task::JoinHandle<f64> {
    tokio::spawn(async move {
        tokio::time::sleep_until(from.into()).await;
        let before = servers_cpu_s(&system.server_pids());
        tokio::time::sleep_until(to.into()).await;
        let after = servers_cpu_s(&system.server_pids());
        (after - before).max(0.0)
    })
}

/// CPU seconds the processes `pids` used so far, summed.
fn servers_cpu_s(pids: &[i32]) -> f64 {
    pids.iter()
        .map(|p| crate::scale::measure::cpu_seconds(*p))
        .sum()
}

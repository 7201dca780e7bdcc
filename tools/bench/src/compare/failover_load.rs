//! The failover bench's load: closed-loop clients that write until told to
//! finish and keep every acknowledgement's time ([`Load`], [`Completions`]),
//! shared by the fault phases ([`super::failover`]) and the leadership
//! transfers ([`super::transfer`]).

use super::BenchSystem;
use anyhow::{bail, Context};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The clients' acknowledgement times, since the load started.
pub struct Completions {
    /// Sorted.
    pub at: Vec<Duration>,
    /// Failed writes.
    pub failed: u64,
}

impl Completions {
    /// The longest stretch without an acknowledgement that overlaps
    /// `[from, to]`: between two consecutive acknowledgements (or from the
    /// last one before `from` to the first one after `to`).
    pub fn window(&self, from: Duration, to: Duration) -> Option<Duration> {
        let first_after = self.at.partition_point(|t| *t <= to);
        let last_before = self.at.partition_point(|t| *t < from).checked_sub(1)?;
        let end = *self.at.get(first_after)?;
        let mut longest = Duration::ZERO;
        let mut previous = self.at[last_before];
        for t in &self.at[last_before + 1..first_after] {
            longest = longest.max(*t - previous);
            previous = *t;
        }
        Some(longest.max(end - previous))
    }
}

/// The closed-loop load of [`super::load`] without a fixed end: every
/// client writes until [`Load::finish`], and every acknowledgement's time
/// is kept.
pub struct Load {
    stop: Arc<AtomicBool>,
    /// When the clients started.
    pub start: Instant,
    acked: Arc<AtomicU64>,
    /// client -> the last error it saw (named when writes do not resume).
    last_errors: Arc<std::sync::Mutex<BTreeMap<usize, String>>>,
    tasks: Vec<tokio::task::JoinHandle<(Vec<Duration>, u64)>>,
}

impl Load {
    /// Connects `clients` clients of `system` and starts them; client `i`
    /// owns the keys `k % clients == i`, as in the bench.
    ///
    /// # Errors
    /// When a client cannot connect.
    pub async fn start<S: BenchSystem>(
        system: Arc<S>,
        clients: usize,
        keys: usize,
    ) -> anyhow::Result<Load> {
        if clients == 0 || keys < clients {
            bail!("need 1 <= clients <= keys (clients {clients}, keys {keys})");
        }
        let mut conns = Vec::with_capacity(clients);
        for i in 0..clients {
            conns.push(
                system
                    .connect(i)
                    .await
                    .with_context(|| format!("client {i}"))?,
            );
        }
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let last_errors = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
        let start = Instant::now();
        let tasks = conns
            .into_iter()
            .enumerate()
            .map(|(i, mut conn)| {
                let system = system.clone();
                let stop = stop.clone();
                let acked = acked.clone();
                let last_errors = last_errors.clone();
                let owned = (keys - i).div_ceil(clients);
                tokio::spawn(async move {
                    let mut at = Vec::new();
                    let mut failed = 0u64;
                    let mut n = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        // Walk the client's keys in order: no two writes of
                        // one client race, and every key gets written.
                        let key = i + clients * (n % owned);
                        n += 1;
                        match system.write(&mut conn, key).await {
                            Ok(()) => {
                                at.push(start.elapsed());
                                acked.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => {
                                failed += 1;
                                last_errors
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .insert(i, e.to_string());
                                // A dead node refuses at once: do not spin.
                                tokio::time::sleep(Duration::from_millis(5)).await;
                            }
                        }
                    }
                    (at, failed)
                })
            })
            .collect();
        Ok(Load {
            stop,
            start,
            acked,
            last_errors,
            tasks,
        })
    }

    /// Time since the load started.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// Writes acknowledged so far.
    pub fn acked(&self) -> u64 {
        self.acked.load(Ordering::Relaxed)
    }

    /// Waits until at least one more write was acknowledged (up to `within`).
    ///
    /// # Errors
    /// When none was.
    pub async fn wait_progress(&self, within: Duration) -> anyhow::Result<()> {
        let before = self.acked();
        let deadline = Instant::now() + within;
        while self.acked() == before {
            if Instant::now() > deadline {
                let errors = self
                    .last_errors
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .map(|(client, e)| format!("client {client}: {e}"))
                    .collect::<Vec<_>>()
                    .join("; ");
                bail!("no write acknowledged within {within:?}; last errors: {errors}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// Stops the clients and collects their acknowledgements.
    ///
    /// # Errors
    /// When a client task panicked.
    pub async fn finish(self) -> anyhow::Result<Completions> {
        self.stop.store(true, Ordering::Relaxed);
        let mut at = Vec::new();
        let mut failed = 0;
        for t in self.tasks {
            let (a, f) = t.await.context("a client task panicked")?;
            at.extend(a);
            failed += f;
        }
        at.sort_unstable();
        Ok(Completions { at, failed })
    }
}

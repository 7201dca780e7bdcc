//! The spike's scenario: three real nodes from one seed, through an
//! election, writes through a follower, linearizable reads, a crash and
//! restart (with the disk's unsynced writes cut at a seeded point), a
//! partition and its healing, then the end checks.
//!
//! The workload runs as turmoil's client; it asks the driver for faults
//! through a queue the driver empties between simulation steps, so a fault
//! lands at a step the seed decides. Every choice (which follower, which
//! victim, how long, how much of the disk survives) comes from the seed.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::disk::Disk;
use crate::mem_log::SyncDelay;
use crate::node::{self, host, Answer, Call, NodeParts, Slot};
use crate::trace::Trace;

/// Nodes in the scenario.
pub const NODES: u64 = 3;
/// Writes per phase.
const WRITES: usize = 5;
/// How long the workload waits for one call.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a phase may take before the run fails as not live.
const PHASE_BOUND: Duration = Duration::from_secs(20);

/// A fault the workload asks the driver for.
#[derive(Clone, Debug)]
enum Fault {
    /// Kill the node's process; its disk keeps the synced writes and a
    /// seeded prefix of the rest.
    Crash(u64),
    /// Start the node's process again over its disk.
    Restart(u64),
    /// Hold every message between the node and the others (a partition
    /// that TCP survives: held segments arrive after the heal).
    Isolate(u64),
    /// Deliver what was held.
    Heal(u64),
}

type Faults = Arc<Mutex<VecDeque<Fault>>>;

/// What a run gives.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// The trace hash.
    pub hash: String,
    /// Events in the trace.
    pub events: u64,
    /// Simulated time the run took.
    pub elapsed: Duration,
    /// Acknowledged writes.
    pub acked: usize,
    /// Unsynced writes the crash dropped.
    pub writes_lost: u64,
    /// Every trace line, if asked for.
    pub lines: Option<Vec<String>>,
}

/// A run that failed: why, and the end of its trace.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// What failed.
    pub error: String,
    /// The last trace lines.
    pub tail: Vec<String>,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "seed {} failed: {}", self.seed, self.error)?;
        writeln!(f, "--- last {} trace lines", self.tail.len())?;
        for line in &self.tail {
            writeln!(f, "{line}")?;
        }
        write!(
            f,
            "--- replay: RUSTFLAGS=\"--cfg tokio_unstable\" CARGO_TARGET_DIR=target/sim \
             cargo run -p sim -- --seed {} --trace",
            self.seed
        )
    }
}

/// Runs the scenario for `seed` on a thread of its own.
///
/// A fresh thread, because libraries keep per-thread state that would carry
/// one run into the next: hyper caches its rendered `date` header per
/// thread until the (simulated) second it expires, so a second run in the
/// same thread sent other header bytes (found by `t20`); tokio's context
/// and std's hash keys are per thread too.
///
/// # Errors
/// [`Failure`] when a check fails or the run is not live.
pub fn run(seed: u64, keep_lines: bool) -> Result<Outcome, Failure> {
    std::thread::Builder::new()
        .name(format!("sim-seed-{seed}"))
        .spawn(move || run_here(seed, keep_lines))
        .map_err(|e| Failure {
            seed,
            error: format!("cannot start the simulation's thread: {e}"),
            tail: Vec::new(),
        })?
        .join()
        .unwrap_or_else(|panic| {
            let error = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "the simulation panicked".into());
            Err(Failure {
                seed,
                error,
                tail: Vec::new(),
            })
        })
}

/// Aligns tokio's task ids: the next task spawned gets an id that is a
/// multiple of [`TASK_ID_ALIGN`].
///
/// tokio numbers tasks from one counter per process, and a runtime keeps
/// its tasks in lists sharded by `id % shards` (4 for a current-thread
/// runtime), which it drops shard by shard when it shuts down. A crash is
/// turmoil dropping the host's runtime, and each dropped connection sends
/// its FIN then: so the order in which peers saw the crashed node's
/// connections close depended on how many tasks earlier runs in the same
/// process had spawned (found by `sim --twice`). Every run spawns the same
/// tasks in the same order, so starting each run at an aligned id gives
/// every task the same shard. One simulation at a time per process:
/// another thread spawning tokio tasks meanwhile would shift the ids.
fn align_task_ids() -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| format!("cannot build the task-id runtime: {e}"))?;
    let _entered = runtime.enter();
    for _ in 0..=TASK_ID_ALIGN {
        let id: u64 = tokio::spawn(async {})
            .id()
            .to_string()
            .parse()
            .map_err(|e| format!("tokio task id is not a number: {e}"))?;
        if id % TASK_ID_ALIGN == TASK_ID_ALIGN - 1 {
            return Ok(());
        }
    }
    Err("tokio task ids did not reach an aligned value".into())
}

/// A multiple of every shard count a current-thread runtime uses.
const TASK_ID_ALIGN: u64 = 64;

/// Runs the scenario for `seed` on this thread.
fn run_here(seed: u64, keep_lines: bool) -> Result<Outcome, Failure> {
    align_task_ids().map_err(|error| Failure {
        seed,
        error,
        tail: Vec::new(),
    })?;
    raft_store::runtime::seed_thread_rng(seed);
    let trace = if keep_lines {
        Trace::keeping_lines()
    } else {
        Trace::new()
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .tick_duration(Duration::from_millis(1))
        .simulation_duration(Duration::from_secs(300))
        .min_message_latency(Duration::from_micros(rng.gen_range(100..500)))
        .max_message_latency(Duration::from_millis(rng.gen_range(1..10)))
        .enable_random_order()
        .build();
    let mut nodes = BTreeMap::new();
    for id in 1..=NODES {
        let parts = NodeParts {
            id,
            disk: Disk::new(),
            delay: SyncDelay::new(
                rng.gen(),
                Duration::from_micros(50),
                Duration::from_millis(rng.gen_range(1..5)),
            ),
            slot: Slot::default(),
            trace: trace.clone(),
        };
        let software = parts.clone();
        sim.host(host(id).as_str(), move || node::run(software.clone()));
        nodes.insert(id, parts);
    }
    let faults = Faults::default();
    let slots: Vec<Slot> = nodes.values().map(|p| p.slot.clone()).collect();
    let workload = Workload {
        slots,
        faults: faults.clone(),
        rng: StdRng::seed_from_u64(rng.gen()),
        trace: trace.clone(),
        acked: Arc::default(),
    };
    let acked = workload.acked.clone();
    sim.client(
        "client",
        async move { workload.run().await.map_err(Into::into) },
    );
    let failure = |error: String| Failure {
        seed,
        error,
        tail: trace.tail(),
    };
    // Cleared however the run ends.
    struct WallClock;
    impl Drop for WallClock {
        fn drop(&mut self) {
            crate::wall_clock::set(None);
        }
    }
    let _wall_clock = WallClock;
    loop {
        crate::wall_clock::set(Some(sim.elapsed()));
        let done = sim.step().map_err(|e| failure(e.to_string()))?;
        loop {
            let next = faults.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
            let Some(fault) = next else { break };
            inject(&mut sim, &nodes, &mut rng, &trace, fault);
        }
        if done {
            break;
        }
    }
    let acked = acked.lock().unwrap_or_else(|p| p.into_inner()).len();
    Ok(Outcome {
        seed,
        hash: trace.hash(),
        events: trace.events(),
        elapsed: sim.elapsed(),
        acked,
        writes_lost: nodes.values().map(|p| p.disk.stats().writes_lost).sum(),
        lines: trace.lines(),
    })
}

fn inject(
    sim: &mut turmoil::Sim<'_>,
    nodes: &BTreeMap<u64, NodeParts>,
    rng: &mut StdRng,
    trace: &Trace,
    fault: Fault,
) {
    let at = sim.elapsed();
    let others = |id: u64| (1..=NODES).filter(move |o| *o != id).map(host);
    match fault {
        Fault::Crash(id) => {
            sim.crash(host(id).as_str());
            if let Some(parts) = nodes.get(&id) {
                let pending = parts.disk.pending();
                let keep = rng.gen_range(0..=pending);
                let lost = parts.disk.crash(keep);
                trace.record(
                    format!("fault crash {} kept {keep} lost {lost}", host(id)),
                    &[],
                );
            }
        }
        Fault::Restart(id) => {
            trace.record_at(at, format!("fault restart {}", host(id)), &[]);
            sim.bounce(host(id).as_str());
        }
        Fault::Isolate(id) => {
            trace.record_at(at, format!("fault isolate {}", host(id)), &[]);
            for other in others(id) {
                sim.hold(host(id).as_str(), other.as_str());
            }
        }
        Fault::Heal(id) => {
            trace.record_at(at, format!("fault heal {}", host(id)), &[]);
            for other in others(id) {
                sim.release(host(id).as_str(), other.as_str());
            }
        }
    }
}

/// The workload: the client side of the scenario.
struct Workload {
    slots: Vec<Slot>,
    faults: Faults,
    rng: StdRng,
    trace: Trace,
    /// Acknowledged writes: object id -> payload.
    acked: Arc<Mutex<BTreeMap<String, Vec<u8>>>>,
}

type Checked<T> = Result<T, String>;

impl Workload {
    async fn run(mut self) -> Checked<()> {
        let voters = (1..=NODES).map(|id| (id, node::addr(id))).collect();
        self.until("bootstrap", |w| {
            let call = Call::Init(Vec::clone(&voters));
            async move { matches!(w.call(1, call).await, Some(Answer::Done)).then_some(()) }
        })
        .await?;
        let leader = self.agreed_leader().await?;
        self.log(format!("leader n{leader}"));

        // Writes through a follower are forwarded to the leader.
        let follower = self.pick_other_than(&[leader]);
        self.writes("via-follower", follower).await?;
        // A linearizable read on the other follower sees every one of them.
        let reader = self.pick_other_than(&[leader, follower]);
        self.check_reads(reader).await?;

        // Kill a node (leader or not); write through another meanwhile.
        let victim = self.pick_other_than(&[]);
        self.fault(Fault::Crash(victim));
        let writer = self.pick_other_than(&[victim]);
        self.writes("during-crash", writer).await?;
        let down = Duration::from_millis(self.rng.gen_range(100..2_000));
        tokio::time::sleep(down).await;
        self.fault(Fault::Restart(victim));

        // Cut a node off; the other two still commit.
        let isolated = self.pick_other_than(&[]);
        self.fault(Fault::Isolate(isolated));
        let writer = self.pick_other_than(&[isolated]);
        self.writes("during-partition", writer).await?;
        let cut = Duration::from_millis(self.rng.gen_range(100..3_000));
        tokio::time::sleep(cut).await;
        self.fault(Fault::Heal(isolated));

        self.final_checks().await
    }

    fn log(&self, what: String) {
        self.trace.record(format!("client {what}"), &[]);
    }

    fn fault(&self, fault: Fault) {
        self.log(format!("asks {fault:?}"));
        self.faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(fault);
    }

    /// A node other than `not`, chosen by the seed.
    fn pick_other_than(&mut self, not: &[u64]) -> u64 {
        let choices: Vec<u64> = (1..=NODES).filter(|id| !not.contains(id)).collect();
        choices[self.rng.gen_range(0..choices.len())]
    }

    async fn call(&self, id: u64, call: Call) -> Option<Answer> {
        let slot = self.slots.get(usize::try_from(id - 1).ok()?)?;
        slot.call(call, CALL_TIMEOUT).await
    }

    /// Retries `attempt` every 50 ms until it gives a value, within
    /// [`PHASE_BOUND`] of simulated time.
    async fn until<'a, T, F, Fut>(&'a self, what: &str, mut attempt: F) -> Checked<T>
    where
        F: FnMut(&'a Self) -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + PHASE_BOUND;
        loop {
            if let Some(value) = attempt(self).await {
                return Ok(value);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "not live: {what} did not happen within {PHASE_BOUND:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The leader every node names, once they all name the same one.
    async fn agreed_leader(&self) -> Checked<u64> {
        self.until("agreed leader", |w| async move {
            let mut leaders = Vec::new();
            for id in 1..=NODES {
                match w.call(id, Call::Status).await {
                    Some(Answer::Status(status)) => leaders.push(status.leader.map(|l| l.0)),
                    _ => return None,
                }
            }
            let first = leaders.first().copied().flatten()?;
            leaders.iter().all(|l| *l == Some(first)).then_some(first)
        })
        .await
    }

    /// [`WRITES`] unconditional puts through node `via`, each retried until
    /// acknowledged (a retry writes the same payload: idempotent in value).
    async fn writes(&self, phase: &str, via: u64) -> Checked<()> {
        for i in 0..WRITES {
            let id = format!("{phase}-{i}");
            let payload = format!("{phase}-{i}-payload").into_bytes();
            let version = self
                .until(&format!("put {id} via n{via}"), |w| {
                    let call = Call::Put {
                        id: id.clone(),
                        payload: payload.clone(),
                    };
                    async move {
                        match w.call(via, call).await {
                            Some(Answer::Put(version)) => Some(version),
                            _ => None,
                        }
                    }
                })
                .await?;
            self.log(format!("put {id} via n{via} acked at version {version}"));
            self.acked
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id, payload);
        }
        Ok(())
    }

    /// Every acknowledged write, read linearizably on node `via`.
    async fn check_reads(&self, via: u64) -> Checked<()> {
        let acked = self.acked.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for (id, payload) in acked {
            let found = self
                .until(&format!("read {id} via n{via}"), |w| {
                    let call = Call::Get { id: id.clone() };
                    async move {
                        match w.call(via, call).await {
                            Some(Answer::Get(found)) => Some(found),
                            _ => None,
                        }
                    }
                })
                .await?;
            match found {
                Some((read, _)) if read == payload => {}
                other => {
                    return Err(format!(
                        "lost acknowledged write: {id} read via n{via} gives {other:?}"
                    ))
                }
            }
        }
        self.log(format!("reads via n{via} see every acknowledged write"));
        Ok(())
    }

    /// After healing: every node reads every acknowledged write, and all
    /// reach the same state at the same applied index.
    async fn final_checks(&self) -> Checked<()> {
        for id in 1..=NODES {
            self.check_reads(id).await?;
        }
        let digest = self
            .until("equal states", |w| async move {
                let mut digests = Vec::new();
                for id in 1..=NODES {
                    match w.call(id, Call::Digest).await {
                        Some(Answer::Digest(index, crc, len)) => digests.push((index, crc, len)),
                        _ => return None,
                    }
                }
                let first = digests[0];
                digests.iter().all(|d| *d == first).then_some(first)
            })
            .await?;
        self.log(format!(
            "every node applied index {} with state crc {:08x} ({} bytes)",
            digest.0, digest.1, digest.2
        ));
        Ok(())
    }
}

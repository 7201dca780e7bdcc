//! One run of the simulation: a fresh thread, turmoil built from the
//! seed's [`Swarm`], one host per node, the scenario as turmoil's client,
//! and the driver that steps the simulation and carries out the faults the
//! scenario's nemesis asks for between steps (crash and restart need the
//! simulation itself, so they cannot be done from inside a host).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use raft_store::types::typ::Entry;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use tokio::sync::watch;

use crate::autopilot::StatefulSet;
use crate::disk::Disk;
use crate::driver::SimDriver;
use crate::invariants::Violations;
use crate::mem_log::SyncDelay;
use crate::members::{self, MemberParts};
use crate::node::{self, host, NodeParts, Slot};
use crate::scenario::{Agreed, Agreement, Scenario};
use crate::swarm::{Fault, Faults, Swarm};
use crate::trace::Trace;

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
    /// Operations that completed `ok` (reads, writes, compare-and-sets).
    pub acked: usize,
    /// Unsynced writes the crashes dropped.
    pub writes_lost: u64,
    /// What the seed turned on.
    pub swarm: String,
    /// Every trace line, if asked for.
    pub lines: Option<Vec<String>>,
    /// What the members agreed on at the end, with the log of one of them
    /// up to that index, if asked for ([`run_keeping_log`]).
    pub agreed: Option<(Agreement, Vec<Entry>)>,
}

/// A run that failed: why, and the end of its trace.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// What failed.
    pub error: String,
    /// The last trace lines (every line, when the run kept them).
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
             cargo run --release -p sim{} -- --seed {}{} --trace",
            crate::fault::replay_features(),
            self.seed,
            crate::fault::replay_args()
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
    run_on_thread(seed, keep_lines, false)
}

/// [`run`], keeping in [`Outcome::agreed`] what the members agreed on and
/// the log entries that led there (so another store can apply them).
///
/// # Errors
/// As [`run`]; also when no member's disk holds the whole log up to the
/// agreed index.
pub fn run_keeping_log(seed: u64) -> Result<Outcome, Failure> {
    run_on_thread(seed, false, true)
}

fn run_on_thread(seed: u64, keep_lines: bool, keep_log: bool) -> Result<Outcome, Failure> {
    std::thread::Builder::new()
        .name(format!("sim-seed-{seed}"))
        .spawn(move || run_here(seed, keep_lines, keep_log))
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
/// Whether the seed runs launchers (and the runtime nemesis), drawn into
/// `swarm` from a generator of their own, so that a seed without launchers
/// runs as it did before they were simulated; the runtime API they share.
fn launchers(seed: u64, swarm: &mut Swarm, trace: &Trace) -> Option<SimDriver> {
    let mut launcher = StdRng::seed_from_u64(seed ^ 0x6c61_756e_6368_6572);
    swarm.pick_launcher(&mut launcher);
    swarm
        .driver_latency
        .map(|max| SimDriver::new(launcher.gen(), max, trace.clone()))
}

/// The seed's generator, its swarm (recorded in `trace`) and what the
/// swarm runs: the launchers' runtime API, the autopilot's StatefulSet.
fn draw(seed: u64, trace: &Trace) -> (StdRng, Swarm, Option<SimDriver>, Option<StatefulSet>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut swarm = Swarm::pick(&mut rng);
    let driver = launchers(seed, &mut swarm, trace);
    swarm.pick_later_faults(&mut StdRng::seed_from_u64(seed ^ 0x6c61_7465_7266_6c74));
    let statefulset = swarm.autopilot.then(|| StatefulSet::new(swarm.nodes));
    trace.record_at(Duration::ZERO, format!("swarm {swarm}"), &[]);
    (rng, swarm, driver, statefulset)
}

fn run_here(seed: u64, keep_lines: bool, keep_log: bool) -> Result<Outcome, Failure> {
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
    let (mut rng, swarm, driver, statefulset) = draw(seed, &trace);
    // Cleared however the run ends.
    struct WallClock;
    impl Drop for WallClock {
        fn drop(&mut self) {
            crate::wall_clock::set(None);
        }
    }
    let _wall_clock = WallClock;
    // The hosts' runtimes read the clocks as they are built.
    crate::wall_clock::set(Some(Duration::ZERO));
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .tick_duration(Duration::from_millis(1))
        .simulation_duration(swarm.duration + Duration::from_secs(240))
        .min_message_latency(swarm.min_latency)
        .max_message_latency(swarm.max_latency)
        .enable_random_order()
        .build();
    let violations = Violations::default();
    let nodes = add_nodes(
        &mut sim,
        &swarm,
        &mut rng,
        &trace,
        &violations,
        (driver.as_ref(), statefulset.as_ref()),
    );
    let pauses = add_members(&mut sim, &swarm, &trace);
    let faults = Faults::default();
    let scenario = Scenario::new(
        swarm.clone(),
        nodes.values().map(|p| p.slot.clone()).collect(),
        faults.clone(),
        StdRng::seed_from_u64(rng.gen()),
        trace.clone(),
    )
    .with_members(pauses)
    .with_driver(driver)
    .with_statefulset(statefulset);
    let acked = scenario.acked();
    let agreed = scenario.agreed();
    sim.client(
        "client",
        async move { scenario.run().await.map_err(Into::into) },
    );
    // With every line kept (a replay), the failure shows them all.
    let failure = |error: String| Failure {
        seed,
        error,
        tail: trace.lines().unwrap_or_else(|| trace.tail()),
    };
    // An invariant violation is the first thing that went wrong, whatever
    // failed after it.
    let fail_with = failure;
    let failure = |error: String| match violations.first() {
        Some(violation) => fail_with(format!("invariant violated: {violation} (then: {error})")),
        None => fail_with(error),
    };
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
    if let Some(violation) = violations.first() {
        return Err(fail_with(format!("invariant violated: {violation}")));
    }
    let acked = acked();
    let agreed = match keep_log {
        true => Some(agreed_log(&agreed, &nodes).map_err(failure)?),
        false => None,
    };
    Ok(Outcome {
        seed,
        hash: trace.hash(),
        events: trace.events(),
        elapsed: sim.elapsed(),
        acked,
        writes_lost: nodes.values().map(|p| p.disk.stats().writes_lost).sum(),
        swarm: swarm.to_string(),
        lines: trace.lines(),
        agreed,
    })
}

/// The agreement and the log entries `0..=applied_index` from the disk of
/// the first member that holds them all.
fn agreed_log(
    agreed: &Agreed,
    nodes: &BTreeMap<u64, NodeParts>,
) -> Result<(Agreement, Vec<Entry>), String> {
    let agreement = agreed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .ok_or("the scenario ended without an agreement")?;
    for id in &agreement.members {
        let Some(parts) = nodes.get(id) else { continue };
        let entries: Vec<Entry> = parts.disk.read(|image| {
            image
                .log
                .range(..=agreement.applied_index)
                .map(|(_, e)| e.clone())
                .collect()
        });
        if u64::try_from(entries.len()).ok() == Some(agreement.applied_index + 1) {
            return Ok((agreement, entries));
        }
    }
    Err(format!(
        "no member's disk holds the whole log up to index {}",
        agreement.applied_index
    ))
}

/// One host per node of the swarm, each over its own disk.
fn add_nodes(
    sim: &mut turmoil::Sim<'_>,
    swarm: &Swarm,
    rng: &mut StdRng,
    trace: &Trace,
    violations: &Violations,
    (driver, statefulset): (Option<&SimDriver>, Option<&StatefulSet>),
) -> BTreeMap<u64, NodeParts> {
    let mut nodes = BTreeMap::new();
    for id in 1..=swarm.hosts() {
        let parts = NodeParts {
            id,
            disk: Disk::new(),
            delay: if swarm.slow_disk == Some(id) {
                SyncDelay::new(
                    rng.gen(),
                    Duration::from_millis(10),
                    Duration::from_millis(rng.gen_range(11..100)),
                )
            } else {
                SyncDelay::new(
                    rng.gen(),
                    Duration::from_micros(50),
                    Duration::from_millis(rng.gen_range(1..5)),
                )
            },
            slot: Slot::default(),
            trace: trace.clone(),
            violations: violations.clone(),
            driver: driver.cloned(),
            statefulset: statefulset.cloned(),
        };
        let software = parts.clone();
        sim.host(host(id).as_str(), move || node::run(software.clone()));
        nodes.insert(id, parts);
    }
    nodes
}

/// One host per pool member of the swarm; returns the switches that pause
/// each member's statuses.
fn add_members(
    sim: &mut turmoil::Sim<'_>,
    swarm: &Swarm,
    trace: &Trace,
) -> Vec<watch::Sender<bool>> {
    let mut pauses = Vec::new();
    for index in 1..=swarm.members {
        let (pause, paused) = watch::channel(false);
        let parts = MemberParts {
            index,
            gateways: (1..=swarm.hosts()).collect(),
            paused,
            process_ids: Arc::new(AtomicU64::new(index as u64 * 1_000)),
            trace: trace.clone(),
            needs_runtime: swarm.driver_latency.is_some(),
        };
        sim.host(members::host(index).as_str(), move || {
            members::run(parts.clone())
        });
        pauses.push(pause);
    }
    pauses
}

/// Carries out one fault between two steps, and records it.
fn inject(
    sim: &mut turmoil::Sim<'_>,
    nodes: &BTreeMap<u64, NodeParts>,
    rng: &mut StdRng,
    trace: &Trace,
    fault: Fault,
) {
    let at = sim.elapsed();
    match fault {
        Fault::Crash(id) => {
            sim.crash(host(id).as_str());
            if let Some(parts) = nodes.get(&id) {
                let pending = parts.disk.pending();
                let keep = rng.gen_range(0..=pending);
                let lost = parts.disk.crash(keep);
                trace.record_at(
                    at,
                    format!("fault crash {} kept {keep} lost {lost}", host(id)),
                    &[],
                );
            }
        }
        Fault::Restart(id) => {
            trace.record_at(at, format!("fault restart {}", host(id)), &[]);
            sim.bounce(host(id).as_str());
        }
        Fault::CrashMember(index) => {
            trace.record_at(at, format!("fault crash {}", members::host(index)), &[]);
            sim.crash(members::host(index).as_str());
        }
        Fault::RestartMember(index) => {
            trace.record_at(at, format!("fault restart {}", members::host(index)), &[]);
            sim.bounce(members::host(index).as_str());
        }
        Fault::Hold(a, b) => on_links(sim, trace, "hold", &a, &b, |sim, x, y| sim.hold(x, y)),
        Fault::Release(a, b) => {
            on_links(sim, trace, "release", &a, &b, |sim, x, y| sim.release(x, y))
        }
        Fault::Drop(a, b) => on_links(sim, trace, "drop", &a, &b, |sim, x, y| sim.partition(x, y)),
        Fault::Repair(a, b) => on_links(sim, trace, "repair", &a, &b, |sim, x, y| sim.repair(x, y)),
        Fault::DropOneWay(from, to) => {
            on_links(sim, trace, "drop-one-way", &to, &from, |sim, x, y| {
                sim.partition_oneway(y, x)
            })
        }
        Fault::RepairOneWay(from, to) => {
            on_links(sim, trace, "repair-one-way", &to, &from, |sim, x, y| {
                sim.repair_oneway(y, x)
            })
        }
        Fault::DiskFull(id) | Fault::DiskFreed(id) => {
            let full = matches!(fault, Fault::DiskFull(_));
            trace.record_at(at, format!("fault disk-full {} {full}", host(id)), &[]);
            if let Some(parts) = nodes.get(&id) {
                parts.disk.set_full(full);
            }
        }
    }
}

/// Records the link fault `what` from the nodes `b` to the nodes `a`, and
/// carries it out on every such link with `act(sim, a, b)`.
fn on_links(
    sim: &mut turmoil::Sim<'_>,
    trace: &Trace,
    what: &str,
    a: &[u64],
    b: &[u64],
    act: impl Fn(&mut turmoil::Sim<'_>, &str, &str),
) {
    trace.record_at(sim.elapsed(), format!("fault {what} {a:?} from {b:?}"), &[]);
    for x in a {
        for y in b {
            act(sim, host(*x).as_str(), host(*y).as_str());
        }
    }
}

//! Deterministic simulation of the gateway raft group (issue 29).
//!
//! Real `raft_store::RaftNode`s (openraft 0.9, the real write forwarding,
//! read-index and tonic transport, with the gateway's `GatewayState` as the
//! state machine) run in one process, on one thread, on turmoil's simulated
//! time and network, over in-memory stores that model what a crash keeps,
//! under register clients and a nemesis drawn from the seed's swarm; the
//! history is checked for linearizability and the replicas for equal
//! states. One seed decides every choice, and the run's trace hash is the
//! same for the same seed. See `README.md`, `docs/simulation.md` and
//! `docs/design/0004-simulation.md`.
//!
//! # Layout
//! Listed from the bottom up: each module imports only modules above it.
//! - [`wall_clock`]: `clock_gettime` with the wall clock simulated on a
//!   simulation's thread (hyper's `date` header reads it).
//! - [`fault`]: the fixed bugs a fault build can turn back on.
//! - [`trace`]: the run's trace (every byte received, every entry applied)
//!   and its hash.
//! - [`invariants`]: the pool's invariants, checked on every replica after
//!   every applied command.
//! - [`disk`]: one node's simulated disk: written, synced, and what a crash
//!   keeps.
//! - [`mem_log`]: openraft's log storage over a [`disk::Disk`], acknowledging
//!   as the sled log does.
//! - [`mem_machine`]: openraft's state-machine storage, applying through
//!   the gateway's own apply function.
//! - [`net`]: turmoil's simulated TCP as the nodes' dialer and listener.
//! - [`autopilot`]: the gateways' StatefulSet, read by the real voter
//!   autopilot through a simulated Kubernetes API.
//! - [`node`]: one simulated gateway process (raft node, supervision hub,
//!   coordinator, supervisor host service) and the calls the workload
//!   makes to it.
//! - [`register`]: the register clients and their history, judged by the
//!   Jepsen harness's linearizability checker.
//! - [`swarm`]: what a seed turns on, and the nemesis that draws the faults.
//! - [`members`]: the pool's supervisors, attached over the simulated
//!   network, and their nemesis (pauses, crashes).
//! - [`scenario`]: bootstrap, the swarm, healing and the end checks.
//! - [`harness`]: one run on its own thread: turmoil built from the seed,
//!   the hosts, and the driver that steps it and injects the faults.

pub mod autopilot;
pub mod disk;
pub mod driver;
pub mod fault;
pub mod harness;
pub mod invariants;
pub mod mem_log;
pub mod mem_machine;
pub mod members;
pub mod net;
pub mod node;
pub mod register;
pub mod scenario;
pub mod swarm;
pub mod trace;
pub mod wall_clock;

pub use harness::{run, run_keeping_log, Failure, Outcome};

/// `SIM_SEEDS` is set but is not a seed count.
#[derive(Debug, thiserror::Error)]
#[error("SIM_SEEDS must be a number of seeds, not {0:?}")]
pub struct BadSeedBudget(String);

/// The number of seeds a test runs: `SIM_SEEDS`, or `default` when it is
/// unset.
///
/// # Errors
/// [`BadSeedBudget`] when `SIM_SEEDS` is set but is not a number.
pub fn seed_budget(default: u64) -> Result<u64, BadSeedBudget> {
    match std::env::var("SIM_SEEDS") {
        Ok(text) => text.trim().parse().map_err(|_| BadSeedBudget(text)),
        Err(_) => Ok(default),
    }
}

/// The first of `seeds` that fails, if any (a proof that a fault build's
/// bug is found: `tests/t40`, `tests/t60`).
pub fn first_failure(seeds: std::ops::Range<u64>) -> Option<Failure> {
    seeds.into_iter().find_map(|seed| run(seed, false).err())
}

//! Checkers: each reads the history (and the final state the run collected)
//! and answers valid / invalid / unknown with the offending operations.
//!
//! | checker | what it holds the system to |
//! | --- | --- |
//! | [`linear`] (`linearizable`) | the register workload is linearizable, per key (WGL search) |
//! | [`lost_writes`] (`acknowledged-writes`) | the final linearizable read of each key returns a value no acknowledged write superseded for certain (I7) |
//! | [`versions`] (`one-version-per-write`) | register workload: per key, each `resource_version` an `ok` op reported names one value, and no two acknowledged writes were given the same one |
//! | [`watch`] (`watch-events`) | register workload: every watcher's events (`ObjectStore.Watch` through the resuming client, recorded in [`watch_log`]) strictly increase in revision, each is a covered put of an attempted (`ok` or `info`) write with its acknowledged revision, key and value, and every acknowledged write it covers was delivered exactly once |
//! | [`convergence`] (`replicas-identical`) | after healing, every replica applied the same commit index and holds byte-identical objects |
//! | [`pool`] (`pool-i1-owner-term` … `pool-i8-delete-wins`) | the pool invariants I1–I8 of ARCHITECTURE.md over the pool workload's history and final state (see the module doc for exactly what each checks) |
//! | [`pool::DigestsIdentical`] (`replicas-identical-digest`) | pool workload: every replica's `StateDigest` crc32 agrees at every applied index sampled on two or more replicas |
//! | [`kept`] (`healthy-workloads-kept`) | pool workload with process members: no running workload was released or deleted by the control plane unless a client deleted its sandbox (from the runtimes' own logs) |
//! | [`liveness`] (`liveness`) | within 20 s of the final heal, every node names the same leader and applied the commit index of the heal |
//! | [`workload`] (`workload-continuity`) | pool workload with process members: one workload per sandbox generation, never restarted (same pid and start time in every observed status, one runtime started), no supervisor exited by itself |
//!
//! The run loop calls every checker the workload returns from its final
//! reads plus [`convergence`] and [`liveness`].

pub mod convergence;
pub mod kept;
pub mod linear;
pub mod liveness;
pub mod lost_writes;
pub mod pool;
pub mod verdict;
pub mod versions;
pub mod watch;
pub mod watch_log;
pub mod workload;

use crate::history::Event;

pub use verdict::{CheckResult, Checker, DigestSample, FinalState, ReplicaDump, Validity};

/// Linearizability of the register workload.
pub struct Linearizable {
    /// Search options.
    pub options: linear::Options,
}

impl Checker for Linearizable {
    fn name(&self) -> &'static str {
        "linearizable"
    }

    fn check(&self, history: &[Event], _state: &FinalState) -> CheckResult {
        match linear::check(history, self.options) {
            Err(e) => CheckResult::malformed_history(self.name(), e),
            Ok(keys) => {
                let invalid: Vec<&linear::KeyResult> = keys
                    .iter()
                    .filter(|k| k.verdict == linear::Verdict::Invalid)
                    .collect();
                let unknown = keys
                    .iter()
                    .filter(|k| k.verdict == linear::Verdict::Unknown)
                    .count();
                let valid = Validity::judge(!invalid.is_empty(), unknown > 0);
                let mut offending: Vec<u64> = invalid
                    .iter()
                    .flat_map(|k| k.offending.iter())
                    .flat_map(|o| std::iter::once(o.invoke_index).chain(o.complete_index))
                    .collect();
                offending.sort_unstable();
                offending.dedup();
                let ops: usize = keys.iter().map(|k| k.ops).sum();
                CheckResult {
                    checker: self.name().into(),
                    valid,
                    summary: format!(
                        "{} keys, {ops} ops: {} not linearizable, {unknown} undecided",
                        keys.len(),
                        invalid.len()
                    ),
                    offending,
                    details: serde_json::to_value(&keys).unwrap_or_default(),
                }
            }
        }
    }
}

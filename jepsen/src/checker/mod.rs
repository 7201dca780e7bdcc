//! Checkers: each reads the history (and the final state the run collected)
//! and answers valid / invalid / unknown with the offending operations.
//!
//! | checker | what it holds the system to |
//! | --- | --- |
//! | [`linear`] (`linearizable`) | the register workload is linearizable, per key (WGL search) |
//! | [`lost_writes`] (`acknowledged-writes`) | the final linearizable read of each key returns a value no acknowledged write superseded for certain (I7) |
//! | [`versions`] (`one-version-per-write`) | register workload: per key, each `resource_version` an `ok` op reported names one value, and no two acknowledged writes were given the same one |
//! | [`convergence`] (`replicas-identical`) | after healing, every replica applied the same commit index and holds byte-identical objects |
//! | [`pool`] (`pool-i1-owner-term` … `pool-i8-delete-wins`) | the pool invariants I1–I8 of ARCHITECTURE.md over the pool workload's history and final state (see the module doc for exactly what each checks) |
//! | [`pool::DigestsIdentical`] (`replicas-identical-digest`) | pool workload: every replica's `StateDigest` crc32 agrees at every applied index sampled on two or more replicas |
//! | [`workload`] (`workload-continuity`) | pool workload with process members: one workload per sandbox generation, never restarted (same pid and start time in every observed status, one runtime started), no supervisor exited by itself |
//!
//! The run loop calls every checker the workload returns from its final
//! reads plus [`convergence`].

pub mod convergence;
pub mod linear;
pub mod lost_writes;
pub mod pool;
pub mod versions;
pub mod workload;

use serde::Serialize;

use crate::history::Event;

/// A checker's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Validity {
    /// Holds.
    Valid,
    /// Violated: see the offending operations.
    Invalid,
    /// Could not decide (search budget, missing data).
    Unknown,
}

impl Validity {
    /// The rule every checker follows: any violation makes the result
    /// invalid; otherwise missing data makes it unknown; otherwise valid.
    pub fn judge(violated: bool, undecided: bool) -> Validity {
        if violated {
            Validity::Invalid
        } else if undecided {
            Validity::Unknown
        } else {
            Validity::Valid
        }
    }
}

/// One checker's result, as written to `results.json`.
#[derive(Clone, Debug, Serialize)]
pub struct CheckResult {
    /// Checker name.
    pub checker: String,
    /// Verdict.
    pub valid: Validity,
    /// One line for humans.
    pub summary: String,
    /// History indexes of the offending events (highlighted in the report).
    pub offending: Vec<u64>,
    /// Checker-specific detail.
    pub details: serde_json::Value,
}

/// What the run collected after healing, for checkers that need more than
/// the history.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FinalState {
    /// Per node: (node name, applied index, every object as
    /// `(type, id, payload as text, resource_version)`), or the error that
    /// prevented reading it.
    pub replicas: Vec<ReplicaDump>,
    /// The commit index every replica was waited on.
    pub commit_index: u64,
    /// `ClusterAdmin.StateDigest` samples of every replica after healing.
    pub digests: Vec<DigestSample>,
}

/// One replica's `StateDigest` answer.
#[derive(Clone, Debug, Serialize)]
pub struct DigestSample {
    /// Node name (`n1`).
    pub node: String,
    /// Applied index the digest is of.
    pub applied_index: u64,
    /// crc32 of the deterministic snapshot encoding at that index.
    pub crc32: u32,
}

/// One replica's state machine after healing.
#[derive(Clone, Debug, Serialize)]
pub struct ReplicaDump {
    /// Node name (`n1`).
    pub node: String,
    /// Applied index when dumped.
    pub applied_index: u64,
    /// Objects, sorted by (type, id).
    pub objects: Vec<(String, String, String, u64)>,
    /// Why the dump failed, if it did.
    pub error: Option<String>,
}

/// A checker over a finished run.
pub trait Checker: Send + Sync {
    /// Name in `results.json`.
    fn name(&self) -> &'static str;
    /// Checks the run.
    fn check(&self, history: &[Event], state: &FinalState) -> CheckResult;
}

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
            Err(e) => CheckResult {
                checker: self.name().into(),
                valid: Validity::Unknown,
                summary: format!("malformed history: {e}"),
                offending: Vec::new(),
                details: serde_json::Value::Null,
            },
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

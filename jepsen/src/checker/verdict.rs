//! What every checker shares: the [`Checker`] trait, its verdict
//! ([`Validity`], [`CheckResult`]) and the final state a run collected
//! ([`FinalState`], [`DigestSample`], [`ReplicaDump`]). A leaf the checkers
//! and the cluster import, so that neither imports the checkers' module
//! back.

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

impl CheckResult {
    /// The result of a checker that could not read the history (`e` says
    /// why): `unknown`, never valid.
    pub fn malformed_history(checker: &str, e: impl std::fmt::Display) -> CheckResult {
        CheckResult {
            checker: checker.into(),
            valid: Validity::Unknown,
            summary: format!("malformed history: {e}"),
            offending: Vec::new(),
            details: serde_json::Value::Null,
        }
    }

    /// The result of a checker that found `violations` (what, and the
    /// history indexes that show it): invalid when there is any, else
    /// unknown when `undecided`, else valid; the offending events are
    /// every violation's, sorted, once; the details list the first 100.
    pub fn of_violations(
        checker: &str,
        violations: &[(String, Vec<u64>)],
        undecided: bool,
        summary: String,
    ) -> CheckResult {
        let mut offending: Vec<u64> = violations.iter().flat_map(|v| v.1.clone()).collect();
        offending.sort_unstable();
        offending.dedup();
        CheckResult {
            checker: checker.into(),
            valid: Validity::judge(!violations.is_empty(), undecided),
            summary,
            offending,
            details: serde_json::json!({
                "violations": violations.iter().take(100).map(|(what, events)| serde_json::json!({"what": what, "events": events})).collect::<Vec<_>>(),
                "violations_total": violations.len(),
            }),
        }
    }
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

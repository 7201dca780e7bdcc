//! The pool invariants I1–I8 of ARCHITECTURE.md, checked over the pool
//! workload's history ([`crate::workload::pool`] documents its `f` names)
//! and the run's final state. One [`CheckResult`] per invariant
//! (`pool-i1-owner-term` … `pool-i8-delete-wins`), plus
//! `replicas-identical-digest` over `ClusterAdmin.StateDigest`.
//!
//! # Observations
//!
//! An *observation* is one sandbox generation's owner as some event saw it:
//! `(sandbox, generation, term, credential_epoch, member, incarnation, acknowledged,
//! phase, observed status)`. Sources: every `grant` a supervisor was
//! streamed (stamped with the snapshot's raft `log_index`; served from a
//! gateway's local state, so possibly stale in real time), and the views in
//! `launch`/`delete`/`get`/`status` `ok` results (linearizable reads; a
//! `status` read is stamped with its `applied_index`). Log positions are
//! comparable across gateways (one log); real time orders linearizable reads
//! only (a read invoked after another completed is at a later position).
//!
//! # What each check holds the history to
//!
//! * **I1** (one owner per term; terms increase with owner changes): per
//!   sandbox generation, every observation of a term names the same
//!   (member, incarnation); at increasing log positions the term never
//!   decreases; a linearizable read never shows an older term than one that
//!   completed before it was invoked.
//! * **I2** (credential epochs increase with every takeover; no older one
//!   after a newer one): every term has one credential epoch; a higher term
//!   has a strictly higher one; no `ack` is confirmed (snapshot showing the term
//!   acknowledged at log position L) when a `status` at an earlier position
//!   than L already showed a newer term.
//! * **I3** (reports count only from the current owner after it
//!   acknowledged): the observed status in every linearizable view is
//!   `pending` while the term is unacknowledged; a report status
//!   `r:<member>:<incarnation>:<term>:<seq>` is shown only with that very
//!   owner, incarnation and term, acknowledged, and it was sent (a `report`
//!   invoke) after that owner sent its `ack` of that term.
//! * **I4** (a takeover only when the owner's own record is expired,
//!   leaving, draining or superseded, at that position): for every owner
//!   change seen (an observation of `(X, i)` at term t, and a later-term
//!   observation with another owner, first completed at time T), every
//!   linearizable `status` invoked at or after T (including the final one)
//!   must not show member X still at incarnation i and `active`/`draining`
//!   — unless a `drain` of X (from its invoke to its `cancel`'s `ok`, or to
//!   the end when never certainly cancelled) overlaps the window in which the
//!   change happened. Expired and leaving are final for an incarnation (the
//!   state machine never revives one: heartbeats and joins of a retired
//!   incarnation are refused), so X at incarnation i still alive after the
//!   change means it was alive when its sandbox was taken from it.
//! * **I5** (capacity; a refused launch leaves nothing): in every `status`,
//!   every member's `used` ≤ `capacity`; a sandbox whose `launch` was
//!   refused (`RESOURCE_EXHAUSTED`) never appears in any observation or in
//!   the final state.
//! * **I6** (one operation at a time): no `status` shows more than one
//!   operation `running`.
//! * **I7** (acknowledged writes survive): every sandbox whose `launch` was
//!   `ok` is in the final state; every sandbox whose `delete` was `ok` is
//!   `deleted` there.
//! * **I8** (delete wins): no linearizable read invoked after a `delete`
//!   completed `ok` shows that sandbox in any phase but `deleted`, nor does
//!   the final state.
//!
//! `replicas-identical-digest`: the run samples every replica's
//! `(applied_index, crc32)` after healing; at every applied index two or
//! more replicas were sampled at, the crc32 must agree, and some index must
//! have been sampled on every replica.

use std::collections::BTreeMap;

use crate::checker::verdict::{CheckResult, Checker, FinalState, Validity};
use crate::history::Event;
use crate::ops::ValueError;
use observe::{final_sandboxes, parse};

mod capacity;
mod digest;
mod durability;
mod fencing;
mod observe;
mod owner_term;
mod takeover;

pub use digest::DigestsIdentical;
pub use observe::{observations, Obs};

/// What the pool checkers need beyond the history.
#[derive(Clone, Debug, Default)]
pub struct PoolFinal {
    /// Index of the final linearizable `status` `ok` event, if one succeeded.
    pub final_status: Option<u64>,
}

/// The pool checkers: I1–I8 and the digest comparison.
pub fn pool_checkers(f: PoolFinal) -> Vec<Box<dyn Checker>> {
    let mut v: Vec<Box<dyn Checker>> = Invariant::ALL
        .iter()
        .map(|i| {
            Box::new(PoolInvariant {
                invariant: *i,
                final_status: f.final_status,
            }) as Box<dyn Checker>
        })
        .collect();
    v.push(Box::new(DigestsIdentical));
    v
}

/// One of I1–I8.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Invariant {
    /// Owner per term.
    I1,
    /// Epochs.
    I2,
    /// Fenced observed status.
    I3,
    /// Takeover only of dead owners.
    I4,
    /// Capacity and refusals.
    I5,
    /// One operation at a time.
    I6,
    /// Acknowledged launches/deletes survive.
    I7,
    /// Delete wins.
    I8,
}

impl Invariant {
    /// All, in order.
    pub const ALL: [Invariant; 8] = [
        Invariant::I1,
        Invariant::I2,
        Invariant::I3,
        Invariant::I4,
        Invariant::I5,
        Invariant::I6,
        Invariant::I7,
        Invariant::I8,
    ];

    /// Checker name.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::I1 => "pool-i1-owner-term",
            Invariant::I2 => "pool-i2-credential-epoch",
            Invariant::I3 => "pool-i3-fenced-status",
            Invariant::I4 => "pool-i4-takeover-dead-owner",
            Invariant::I5 => "pool-i5-capacity",
            Invariant::I6 => "pool-i6-one-operation",
            Invariant::I7 => "pool-i7-acknowledged",
            Invariant::I8 => "pool-i8-delete-wins",
        }
    }
}

/// One violation.
#[derive(Clone, Debug)]
pub(super) struct Violation {
    what: String,
    events: Vec<u64>,
}

pub(super) fn v(what: String, events: Vec<u64>) -> Violation {
    Violation { what, events }
}

type Key = (String, u64);

/// Observations grouped by sandbox generation.
pub(super) fn by_generation(obs: &[Obs]) -> BTreeMap<Key, Vec<&Obs>> {
    let mut m: BTreeMap<Key, Vec<&Obs>> = BTreeMap::new();
    for o in obs {
        m.entry((o.sandbox.clone(), o.generation))
            .or_default()
            .push(o);
    }
    m
}

/// The result of a checker that could not read the history: `unknown`,
/// naming the event and the field.
pub(crate) fn malformed(checker: &str, e: &ValueError) -> CheckResult {
    CheckResult {
        checker: checker.into(),
        valid: Validity::Unknown,
        summary: format!("malformed history: {e}"),
        offending: vec![e.index],
        details: serde_json::Value::Null,
    }
}

/// One of the I1–I8 checkers.
pub struct PoolInvariant {
    /// Which.
    pub invariant: Invariant,
    /// The final status event.
    pub final_status: Option<u64>,
}

impl Checker for PoolInvariant {
    fn name(&self) -> &'static str {
        self.invariant.name()
    }

    fn check(&self, history: &[Event], _state: &FinalState) -> CheckResult {
        let (p, fin) = match parse(history)
            .and_then(|p| Ok((p, final_sandboxes(history, self.final_status)?)))
        {
            Ok(parsed) => parsed,
            Err(e) => return malformed(self.name(), &e),
        };
        let mut unknown = None;
        let violations = match self.invariant {
            Invariant::I1 => owner_term::check_i1(&p),
            Invariant::I2 => owner_term::check_i2(&p),
            Invariant::I3 => fencing::check_i3(&p),
            Invariant::I4 => takeover::check_i4(&p, self.final_status),
            Invariant::I5 => capacity::check_i5(&p, self.final_status),
            Invariant::I6 => capacity::check_i6(&p),
            Invariant::I7 => match &fin {
                Some(fin) => durability::check_i7(&p, fin),
                None => {
                    unknown = Some("no final status read succeeded".to_string());
                    Vec::new()
                }
            },
            Invariant::I8 => durability::check_i8(&p, fin.as_ref()),
        };
        let ops = |f: &str| p.ops.iter().filter(|o| o.done.f == f).count();
        let summary = format!(
            "{} violations over {} observations of {} sandbox generations, {} status reads, {} launches, {} deletes, {} grants, {} acks{}",
            violations.len(),
            p.obs.len(),
            by_generation(&p.obs).len(),
            p.statuses.len(),
            ops("launch"),
            ops("delete"),
            ops("grant"),
            ops("ack"),
            unknown.as_ref().map(|u| format!(" ({u})")).unwrap_or_default()
        );
        let violations: Vec<(String, Vec<u64>)> =
            violations.into_iter().map(|x| (x.what, x.events)).collect();
        CheckResult::of_violations(self.name(), &violations, unknown.is_some(), summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{OpType, Process, Recorder};
    use serde_json::json;
    use serde_json::Value;

    fn rec() -> Recorder {
        Recorder::new(None).unwrap_or_else(|e| panic!("{e}"))
    }

    fn op(r: &Recorder, p: u64, f: &str, inv: Value, ok: Value) -> u64 {
        let spec = |kind, value| crate::history::EventSpec {
            kind,
            process: Process::Client(p),
            f: f.into(),
            key: None,
            value,
            node: Some("n1".into()),
            error: None,
        };
        r.record(spec(OpType::Invoke, inv));
        r.record(spec(OpType::Ok, ok)).index
    }

    fn view(owner: &str, inc: u64, term: u64, epoch: u64) -> Value {
        json!({"sandbox": "sb1", "generation": 1, "phase": "assigned", "owner": owner,
               "incarnation": inc, "term": term, "credential_epoch": epoch, "acknowledged": false,
               "observed": "pending"})
    }

    fn status(member_state: &str, owner: &str, term: u64, epoch: u64) -> Value {
        json!({"now_tick": 1, "applied_index": 10 + term,
               "members": [{"id": "s1", "incarnation": 1, "state": member_state, "capacity": 3, "used": 1},
                           {"id": "s2", "incarnation": 1, "state": "active", "capacity": 3, "used": 1}],
               "sandboxes": [view(owner, 1, term, epoch)], "operations": []})
    }

    fn run(history: &[Event], final_status: Option<u64>) -> BTreeMap<&'static str, Validity> {
        pool_checkers(PoolFinal { final_status })
            .iter()
            .map(|c| (c.name(), c.check(history, &FinalState::default()).valid))
            .collect()
    }

    #[test]
    fn a_view_missing_a_field_makes_every_check_fail_naming_the_event() {
        let r = rec();
        let mut view = view("s1", 1, 1, 1);
        if let Some(v) = view.as_object_mut() {
            v.remove("term");
        }
        let at = op(&r, 1, "launch", json!({"sandbox": "sb1"}), view);
        let h = r.snapshot();
        for c in pool_checkers(PoolFinal { final_status: None })
            .iter()
            .take(8)
        {
            let result = c.check(&h, &FinalState::default());
            assert_eq!(result.valid, Validity::Unknown, "{result:?}");
            assert!(
                result.summary.contains(&format!("event {at} "))
                    && result.summary.contains("missing field `term`"),
                "{result:?}"
            );
            assert_eq!(result.offending, vec![at]);
        }
    }

    #[test]
    fn takeover_of_an_expired_owner_is_valid() {
        let r = rec();
        op(
            &r,
            1,
            "launch",
            json!({"sandbox": "sb1"}),
            view("s1", 1, 1, 1),
        );
        op(&r, 1, "status", Value::Null, status("expired", "s2", 2, 2));
        let fin = op(&r, 1, "status", Value::Null, status("expired", "s2", 2, 2));
        let v = run(&r.snapshot(), Some(fin));
        assert!(v.values().take(8).all(|v| *v == Validity::Valid), "{v:?}");
    }

    #[test]
    fn takeover_of_a_live_owner_is_an_i4_violation() {
        let r = rec();
        op(
            &r,
            1,
            "launch",
            json!({"sandbox": "sb1"}),
            view("s1", 1, 1, 1),
        );
        let fin = op(&r, 1, "status", Value::Null, status("active", "s2", 2, 2));
        let h = r.snapshot();
        let c = PoolInvariant {
            invariant: Invariant::I4,
            final_status: Some(fin),
        }
        .check(&h, &FinalState::default());
        assert_eq!(c.valid, Validity::Invalid, "{c:?}");
        assert!(c.offending.contains(&1) && c.offending.contains(&fin));
    }

    #[test]
    fn a_drain_excuses_the_owner_change() {
        let r = rec();
        op(
            &r,
            1,
            "launch",
            json!({"sandbox": "sb1"}),
            view("s1", 1, 1, 1),
        );
        op(
            &r,
            2,
            "drain",
            json!({"op": "d1", "member": "s1"}),
            json!({}),
        );
        op(&r, 1, "status", Value::Null, status("draining", "s2", 2, 2));
        op(
            &r,
            2,
            "cancel",
            json!({"op": "d1", "member": "s1"}),
            json!({}),
        );
        let fin = op(&r, 1, "status", Value::Null, status("active", "s2", 2, 2));
        let v = run(&r.snapshot(), Some(fin));
        assert_eq!(v["pool-i4-takeover-dead-owner"], Validity::Valid);
    }

    #[test]
    fn two_owners_in_one_term_and_a_stale_epoch_are_caught() {
        let r = rec();
        op(
            &r,
            1,
            "launch",
            json!({"sandbox": "sb1"}),
            view("s1", 1, 1, 1),
        );
        op(&r, 1, "get", json!({"sandbox": "sb1"}), view("s2", 1, 1, 1));
        op(&r, 1, "get", json!({"sandbox": "sb1"}), view("s2", 1, 2, 1));
        let v = run(&r.snapshot(), None);
        assert_eq!(v["pool-i1-owner-term"], Validity::Invalid);
        assert_eq!(v["pool-i2-credential-epoch"], Validity::Invalid);
        assert_eq!(v["pool-i7-acknowledged"], Validity::Unknown);
    }

    #[test]
    fn unacknowledged_report_and_resurrected_delete_are_caught() {
        let r = rec();
        op(
            &r,
            1,
            "launch",
            json!({"sandbox": "sb1"}),
            view("s1", 1, 1, 1),
        );
        let mut bad = view("s1", 1, 1, 1);
        bad["observed"] = json!("r:s1:1:1:0");
        op(&r, 1, "get", json!({"sandbox": "sb1"}), bad);
        let mut del = view("s1", 1, 1, 1);
        del["phase"] = json!("deleted");
        op(&r, 1, "delete", json!({"sandbox": "sb1"}), del);
        op(&r, 1, "get", json!({"sandbox": "sb1"}), view("s1", 1, 1, 1));
        let v = run(&r.snapshot(), None);
        assert_eq!(v["pool-i3-fenced-status"], Validity::Invalid);
        assert_eq!(v["pool-i8-delete-wins"], Validity::Invalid);
    }
}

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

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{json, Value};

use super::{CheckResult, Checker, FinalState, Validity};
use crate::history::{Event, OpType, Process};

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

/// One sandbox generation's owner as one event saw it.
#[derive(Clone, Debug)]
pub struct Obs {
    /// Sandbox id.
    pub sandbox: String,
    /// Generation.
    pub generation: u64,
    /// Ownership term.
    pub term: u64,
    /// Credential epoch.
    pub credential_epoch: u64,
    /// Owner member.
    pub member: String,
    /// Owner incarnation.
    pub incarnation: u64,
    /// Term acknowledged.
    pub acknowledged: bool,
    /// Phase.
    pub phase: String,
    /// Fenced observed status (linearizable views only).
    pub observed: Option<String>,
    /// Raft log position of the state (grants, status reads).
    pub log_index: Option<u64>,
    /// From a linearizable read.
    pub linear: bool,
    /// Invoke event index / time.
    pub i_inv: u64,
    /// Completion event index.
    pub i_done: u64,
    /// Invoke time.
    pub t_inv: u64,
    /// Completion time.
    pub t_done: u64,
}

/// A member as a status read showed it.
#[derive(Clone, Debug)]
struct MemberRow {
    id: String,
    incarnation: u64,
    state: String,
    capacity: u64,
    used: u64,
}

/// One `status` ok.
#[derive(Clone, Debug)]
struct StatusRead {
    i_inv: u64,
    i_done: u64,
    t_inv: u64,
    members: Vec<MemberRow>,
    running_ops: Vec<String>,
}

/// A completed op: its invoke and completion.
struct Op<'a> {
    inv: &'a Event,
    done: &'a Event,
}

/// Everything parsed from the history.
struct Parsed<'a> {
    ops: Vec<Op<'a>>,
    obs: Vec<Obs>,
    statuses: Vec<StatusRead>,
    nemesis: Vec<&'a Event>,
    end_time: u64,
}

fn s(v: &Value, k: &str) -> String {
    v.get(k)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

fn view_obs(v: &Value, op: &Op<'_>, log_index: Option<u64>) -> Option<Obs> {
    if v.get("absent").and_then(Value::as_bool) == Some(true) || v.get("term").is_none() {
        return None;
    }
    Some(Obs {
        sandbox: s(v, "sandbox"),
        generation: u(v, "generation"),
        term: u(v, "term"),
        credential_epoch: u(v, "credential_epoch"),
        member: s(v, "owner"),
        incarnation: u(v, "incarnation"),
        acknowledged: v.get("acknowledged").and_then(Value::as_bool) == Some(true),
        phase: s(v, "phase"),
        observed: v
            .get("observed")
            .and_then(Value::as_str)
            .map(str::to_string),
        log_index,
        linear: true,
        i_inv: op.inv.index,
        i_done: op.done.index,
        t_inv: op.inv.time,
        t_done: op.done.time,
    })
}

/// Every observation of a sandbox generation's owner in the history (see
/// the module doc).
pub fn observations(history: &[Event]) -> Vec<Obs> {
    parse(history).obs
}

fn parse(history: &[Event]) -> Parsed<'_> {
    let mut pending: HashMap<u64, &Event> = HashMap::new();
    let mut ops = Vec::new();
    let mut nemesis = Vec::new();
    for e in history {
        match e.process {
            Process::Nemesis => nemesis.push(e),
            Process::Client(p) => {
                if e.kind == OpType::Invoke {
                    pending.insert(p, e);
                } else if let Some(inv) = pending.remove(&p) {
                    ops.push(Op { inv, done: e });
                }
            }
        }
    }
    let mut obs = Vec::new();
    let mut statuses = Vec::new();
    for op in &ops {
        if op.done.kind != OpType::Ok {
            continue;
        }
        let v = &op.done.value;
        match op.done.f.as_str() {
            "grant" => obs.push(Obs {
                sandbox: s(v, "sandbox"),
                generation: u(v, "generation"),
                term: u(v, "term"),
                credential_epoch: u(v, "credential_epoch"),
                member: s(v, "member"),
                incarnation: u(v, "incarnation"),
                acknowledged: v.get("acknowledged").and_then(Value::as_bool) == Some(true),
                phase: s(v, "phase"),
                observed: None,
                log_index: v.get("log_index").and_then(Value::as_u64),
                linear: false,
                i_inv: op.inv.index,
                i_done: op.done.index,
                t_inv: op.inv.time,
                t_done: op.done.time,
            }),
            "launch" | "delete" | "get" => obs.extend(view_obs(v, op, None)),
            "status" => {
                let applied = v.get("applied_index").and_then(Value::as_u64);
                for sb in v
                    .get("sandboxes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    obs.extend(view_obs(sb, op, applied));
                }
                let members = v
                    .get("members")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|m| MemberRow {
                        id: s(m, "id"),
                        incarnation: u(m, "incarnation"),
                        state: s(m, "state"),
                        capacity: u(m, "capacity"),
                        used: u(m, "used"),
                    })
                    .collect();
                let running_ops = v
                    .get("operations")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|o| s(o, "phase") == "running")
                    .map(|o| s(o, "id"))
                    .collect();
                statuses.push(StatusRead {
                    i_inv: op.inv.index,
                    i_done: op.done.index,
                    t_inv: op.inv.time,
                    members,
                    running_ops,
                });
            }
            _ => {}
        }
    }
    Parsed {
        ops,
        obs,
        statuses,
        nemesis,
        end_time: history.last().map(|e| e.time).unwrap_or(0),
    }
}

/// One violation.
#[derive(Clone, Debug)]
struct Violation {
    what: String,
    events: Vec<u64>,
}

fn v(what: String, events: Vec<u64>) -> Violation {
    Violation { what, events }
}

type Key = (String, u64);

fn by_generation(obs: &[Obs]) -> BTreeMap<Key, Vec<&Obs>> {
    let mut m: BTreeMap<Key, Vec<&Obs>> = BTreeMap::new();
    for o in obs {
        m.entry((o.sandbox.clone(), o.generation))
            .or_default()
            .push(o);
    }
    m
}

fn check_i1(p: &Parsed<'_>) -> Vec<Violation> {
    let mut out = Vec::new();
    for ((sb, g), list) in by_generation(&p.obs) {
        // One owner per term.
        let mut owners: BTreeMap<u64, (&str, u64, u64)> = BTreeMap::new();
        for o in &list {
            match owners.get(&o.term) {
                None => {
                    owners.insert(o.term, (&o.member, o.incarnation, o.i_done));
                }
                Some((m, i, at)) if (*m, *i) != (o.member.as_str(), o.incarnation) => {
                    out.push(v(
                        format!(
                            "{sb} gen {g} term {}: two owners {m}#{i} (event {at}) and {}#{} (event {})",
                            o.term, o.member, o.incarnation, o.i_done
                        ),
                        vec![*at, o.i_done],
                    ));
                }
                Some(_) => {}
            }
        }
        // Terms never decrease along the log.
        let mut logged: Vec<&&Obs> = list.iter().filter(|o| o.log_index.is_some()).collect();
        logged.sort_by_key(|o| (o.log_index, o.term));
        let mut best: Option<&Obs> = None;
        for o in logged {
            if let Some(b) = best {
                if b.term > o.term && b.log_index < o.log_index {
                    out.push(v(
                        format!(
                            "{sb} gen {g}: term {} at log index {:?} (event {}) after term {} at log index {:?} (event {})",
                            o.term, o.log_index, o.i_done, b.term, b.log_index, b.i_done
                        ),
                        vec![b.i_done, o.i_done],
                    ));
                    continue;
                }
            }
            if best.is_none_or(|b| o.term > b.term) {
                best = Some(o);
            }
        }
        // Linearizable reads never go back in real time.
        let mut done_sorted: Vec<&&Obs> = list.iter().filter(|o| o.linear).collect();
        done_sorted.sort_by_key(|o| o.t_done);
        let mut inv_sorted = done_sorted.clone();
        inv_sorted.sort_by_key(|o| o.t_inv);
        let mut j = 0;
        let mut best: Option<&Obs> = None;
        for o in inv_sorted {
            while j < done_sorted.len() && done_sorted[j].t_done < o.t_inv {
                if best.is_none_or(|b| done_sorted[j].term > b.term) {
                    best = Some(done_sorted[j]);
                }
                j += 1;
            }
            if let Some(b) = best {
                if b.term > o.term {
                    out.push(v(
                        format!(
                            "{sb} gen {g}: read (event {}) shows term {} after a read that completed earlier (event {}) showed term {}",
                            o.i_done, o.term, b.i_done, b.term
                        ),
                        vec![b.i_done, o.i_inv, o.i_done],
                    ));
                }
            }
        }
    }
    out
}

fn check_i2(p: &Parsed<'_>) -> Vec<Violation> {
    let mut out = Vec::new();
    let groups = by_generation(&p.obs);
    for ((sb, g), list) in &groups {
        let mut epochs: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for o in list {
            match epochs.get(&o.term) {
                None => {
                    epochs.insert(o.term, (o.credential_epoch, o.i_done));
                }
                Some((e, at)) if *e != o.credential_epoch => out.push(v(
                    format!(
                        "{sb} gen {g} term {}: epochs {e} (event {at}) and {} (event {})",
                        o.term, o.credential_epoch, o.i_done
                    ),
                    vec![*at, o.i_done],
                )),
                Some(_) => {}
            }
        }
        let mut prev: Option<(u64, u64, u64)> = None;
        for (term, (epoch, at)) in &epochs {
            if let Some((pt, pe, pat)) = prev {
                if *epoch <= pe {
                    out.push(v(
                        format!(
                            "{sb} gen {g}: term {term} has epoch {epoch} (event {at}), not above term {pt}'s epoch {pe} (event {pat})"
                        ),
                        vec![pat, *at],
                    ));
                }
            }
            prev = Some((*term, *epoch, *at));
        }
    }
    // Acks confirmed at a log position after a newer term was read.
    for op in p
        .ops
        .iter()
        .filter(|o| o.done.f == "ack" && o.done.kind == OpType::Ok)
    {
        let val = &op.done.value;
        let (sb, g, t) = (s(val, "sandbox"), u(val, "generation"), u(val, "term"));
        let Some(l) = val.get("log_index").and_then(Value::as_u64) else {
            continue;
        };
        if let Some(list) = groups.get(&(sb.clone(), g)) {
            if let Some(newer) = list
                .iter()
                .find(|o| o.term > t && o.log_index.is_some_and(|x| x < l))
            {
                out.push(v(
                    format!(
                        "{sb} gen {g}: ack of term {t} confirmed at log index {l} (event {}) but term {} was already read at log index {:?} (event {})",
                        op.done.index, newer.term, newer.log_index, newer.i_done
                    ),
                    vec![op.inv.index, op.done.index, newer.i_done],
                ));
            }
        }
    }
    out
}

/// Parses `r:<member>:<incarnation>:<term>:<seq>`.
fn parse_report(s: &str) -> Option<(String, u64, u64)> {
    let mut it = s.strip_prefix("r:")?.split(':');
    let member = it.next()?.to_string();
    let inc = it.next()?.parse().ok()?;
    let term = it.next()?.parse().ok()?;
    Some((member, inc, term))
}

fn check_i3(p: &Parsed<'_>) -> Vec<Violation> {
    let mut out = Vec::new();
    // status text -> report invoke index; (sandbox, gen, term, member, inc) -> first ack invoke.
    let mut reports: HashMap<String, u64> = HashMap::new();
    let mut acks: HashMap<(String, u64, u64, String, u64), u64> = HashMap::new();
    for op in &p.ops {
        let val = &op.inv.value;
        match op.inv.f.as_str() {
            "report" => {
                reports.insert(s(val, "status"), op.inv.index);
            }
            "ack" => {
                acks.entry((
                    s(val, "sandbox"),
                    u(val, "generation"),
                    u(val, "term"),
                    s(val, "member"),
                    u(val, "incarnation"),
                ))
                .or_insert(op.inv.index);
            }
            _ => {}
        }
    }
    for o in p.obs.iter().filter(|o| o.linear) {
        let Some(observed) = o.observed.as_deref() else {
            continue;
        };
        let terminal = o.phase == "deleted" || o.phase == "failed";
        if !o.acknowledged && !terminal && observed != "pending" {
            out.push(v(
                format!(
                    "{} gen {} term {} unacknowledged but reads observed status {observed:?} (event {})",
                    o.sandbox, o.generation, o.term, o.i_done
                ),
                vec![o.i_done],
            ));
            continue;
        }
        let Some((m, inc, term)) = parse_report(observed) else {
            continue;
        };
        if (m.as_str(), inc, term) != (o.member.as_str(), o.incarnation, o.term) {
            out.push(v(
                format!(
                    "{} gen {}: report {observed:?} counted while the owner is {}#{} at term {} (event {})",
                    o.sandbox, o.generation, o.member, o.incarnation, o.term, o.i_done
                ),
                vec![o.i_done],
            ));
            continue;
        }
        match (
            reports.get(observed),
            acks.get(&(o.sandbox.clone(), o.generation, term, m.clone(), inc)),
        ) {
            (None, _) => out.push(v(
                format!(
                    "{} gen {}: observed status {observed:?} was never reported (event {})",
                    o.sandbox, o.generation, o.i_done
                ),
                vec![o.i_done],
            )),
            (Some(r), None) => out.push(v(
                format!(
                    "{} gen {}: report {observed:?} (event {r}) counted but {m}#{inc} never acknowledged term {term} (event {})",
                    o.sandbox, o.generation, o.i_done
                ),
                vec![*r, o.i_done],
            )),
            (Some(r), Some(a)) if a > r => out.push(v(
                format!(
                    "{} gen {}: report {observed:?} (event {r}) was sent before the ack of term {term} (event {a}) yet counted (event {})",
                    o.sandbox, o.generation, o.i_done
                ),
                vec![*a, *r, o.i_done],
            )),
            _ => {}
        }
    }
    out
}

/// Drain windows per member: (from invoke time, to cancel-ok time or end).
fn drain_windows(p: &Parsed<'_>) -> BTreeMap<String, Vec<(u64, u64)>> {
    let mut by_op: BTreeMap<String, (String, u64, Option<u64>)> = BTreeMap::new();
    for op in &p.ops {
        let val = &op.inv.value;
        let id = s(val, "op");
        match op.inv.f.as_str() {
            "drain" => {
                by_op
                    .entry(id)
                    .or_insert((s(val, "member"), op.inv.time, None));
            }
            "cancel" if op.done.kind == OpType::Ok => {
                if let Some(w) = by_op.get_mut(&id) {
                    w.2 = Some(w.2.map_or(op.done.time, |t| t.min(op.done.time)));
                }
            }
            _ => {}
        }
    }
    // Drains never certainly completed (no invoke/complete pair) still count.
    let mut out: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for (_, (member, from, to)) in by_op {
        out.entry(member)
            .or_default()
            .push((from, to.unwrap_or(u64::MAX)));
    }
    out
}

fn check_i4(p: &Parsed<'_>, final_status: Option<u64>) -> Vec<Violation> {
    let mut out = Vec::new();
    let drains = drain_windows(p);
    // Pending drains whose invoke never completed (run ended) count too.
    let mut statuses: Vec<&StatusRead> = p.statuses.iter().collect();
    statuses.sort_by_key(|r| r.t_inv);
    let _ = final_status;
    for ((sb, g), list) in by_generation(&p.obs) {
        // Every owner (X, i, t) seen.
        let mut owners: BTreeMap<(u64, String, u64), Vec<&Obs>> = BTreeMap::new();
        for o in &list {
            owners
                .entry((o.term, o.member.clone(), o.incarnation))
                .or_default()
                .push(o);
        }
        for ((t, x, i), seen) in &owners {
            // The first completed observation of a later term with another owner.
            let Some(new) = list
                .iter()
                .filter(|o| o.term > *t && (o.member.as_str(), o.incarnation) != (x.as_str(), *i))
                .min_by_key(|o| o.t_done)
            else {
                continue;
            };
            // The change happened after every linearizable read of (x, i, t).
            let lower = seen
                .iter()
                .filter(|o| o.linear)
                .map(|o| o.t_inv)
                .max()
                .unwrap_or(0);
            let excused = drains
                .get(x)
                .is_some_and(|ws| ws.iter().any(|(a, b)| *a <= new.t_done && *b >= lower));
            if excused {
                continue;
            }
            let witness = statuses.iter().find(|r| {
                (r.t_inv >= new.t_done || r.i_done == new.i_done)
                    && r.members.iter().any(|m| {
                        m.id == *x
                            && m.incarnation == *i
                            && (m.state == "active" || m.state == "draining")
                    })
            });
            let Some(r) = witness else {
                continue;
            };
            // The last sighting of the old owner before the change was seen.
            let old = seen
                .iter()
                .filter(|o| o.t_done <= new.t_done)
                .max_by_key(|o| o.t_done)
                .or_else(|| seen.first())
                .map(|o| o.i_done)
                .unwrap_or(0);
            let mut events = vec![old, new.i_done, r.i_inv, r.i_done];
            // The last fault on x before the change, for the reader.
            if let Some(n) = p.nemesis.iter().rfind(|e| {
                e.time <= new.t_done
                    && e.f.ends_with("-supervisor")
                    && e.value
                        .as_str()
                        .is_some_and(|t| t.split_whitespace().next() == Some(x.as_str()))
            }) {
                events.push(n.index);
            }
            out.push(v(
                format!(
                    "{sb} gen {g}: owner {x}#{i} (term {t}, event {old}) was replaced by {}#{} at term {} (event {}), yet status event {} still reads {x} at incarnation {i} alive (not expired, leaving or superseded) and no drain of {x} overlaps",
                    new.member, new.incarnation, new.term, new.i_done, r.i_done
                ),
                events,
            ));
        }
    }
    out
}

fn check_i5(p: &Parsed<'_>, final_status: Option<u64>) -> Vec<Violation> {
    let mut out = Vec::new();
    for r in &p.statuses {
        for m in &r.members {
            if m.used > m.capacity {
                out.push(v(
                    format!(
                        "member {}#{} uses {} of {} slots (status event {})",
                        m.id, m.incarnation, m.used, m.capacity, r.i_done
                    ),
                    vec![r.i_done],
                ));
            }
        }
    }
    let refused: BTreeMap<String, u64> = p
        .ops
        .iter()
        .filter(|o| {
            o.done.f == "launch"
                && o.done.kind == OpType::Fail
                && o.done.value.get("refused").and_then(Value::as_bool) == Some(true)
        })
        .map(|o| (s(&o.inv.value, "sandbox"), o.done.index))
        .collect();
    for o in &p.obs {
        if let Some(at) = refused.get(&o.sandbox) {
            out.push(v(
                format!(
                    "{}: its launch was refused (event {at}) but event {} shows it ({} owned by {}#{})",
                    o.sandbox, o.i_done, o.phase, o.member, o.incarnation
                ),
                vec![*at, o.i_done],
            ));
        }
    }
    let _ = final_status;
    out
}

fn check_i6(p: &Parsed<'_>) -> Vec<Violation> {
    p.statuses
        .iter()
        .filter(|r| r.running_ops.len() > 1)
        .map(|r| {
            v(
                format!(
                    "status event {} shows {} operations running: {:?}",
                    r.i_done,
                    r.running_ops.len(),
                    r.running_ops
                ),
                vec![r.i_done],
            )
        })
        .collect()
}

/// The final state's sandboxes: id -> phase.
fn final_sandboxes(
    history: &[Event],
    final_status: Option<u64>,
) -> Option<BTreeMap<String, String>> {
    let e = history.get(usize::try_from(final_status?).ok()?)?;
    Some(
        e.value
            .get("sandboxes")?
            .as_array()?
            .iter()
            .map(|sb| (s(sb, "sandbox"), s(sb, "phase")))
            .collect(),
    )
}

fn check_i7(p: &Parsed<'_>, fin: &BTreeMap<String, String>) -> Vec<Violation> {
    let mut out = Vec::new();
    for op in p.ops.iter().filter(|o| o.done.kind == OpType::Ok) {
        let sb = s(&op.inv.value, "sandbox");
        match op.done.f.as_str() {
            "launch" if !fin.contains_key(&sb) => out.push(v(
                format!(
                    "{sb}: launch acknowledged (event {}) but absent from the final state",
                    op.done.index
                ),
                vec![op.inv.index, op.done.index],
            )),
            "delete" if fin.get(&sb).map(String::as_str) != Some("deleted") => out.push(v(
                format!(
                    "{sb}: delete acknowledged (event {}) but the final state has it {:?}",
                    op.done.index,
                    fin.get(&sb)
                ),
                vec![op.inv.index, op.done.index],
            )),
            _ => {}
        }
    }
    out
}

fn check_i8(p: &Parsed<'_>, fin: Option<&BTreeMap<String, String>>) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut deleted: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for op in p
        .ops
        .iter()
        .filter(|o| o.done.f == "delete" && o.done.kind == OpType::Ok)
    {
        let e = deleted
            .entry(s(&op.inv.value, "sandbox"))
            .or_insert((op.done.time, op.done.index));
        if op.done.time < e.0 {
            *e = (op.done.time, op.done.index);
        }
    }
    for o in p.obs.iter().filter(|o| o.linear) {
        if let Some((t, at)) = deleted.get(&o.sandbox) {
            if o.t_inv > *t && o.phase != "deleted" {
                out.push(v(
                    format!(
                        "{}: deleted (event {at}) but a later read (event {}) shows it {} owned by {}#{}",
                        o.sandbox, o.i_done, o.phase, o.member, o.incarnation
                    ),
                    vec![*at, o.i_inv, o.i_done],
                ));
            }
        }
    }
    if let Some(fin) = fin {
        for (sb, (_, at)) in &deleted {
            if let Some(phase) = fin.get(sb).filter(|ph| ph.as_str() != "deleted") {
                out.push(v(
                    format!("{sb}: deleted (event {at}) but the final state has it {phase}"),
                    vec![*at],
                ));
            }
        }
    }
    out
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
        let p = parse(history);
        let fin = final_sandboxes(history, self.final_status);
        let mut unknown = None;
        let violations = match self.invariant {
            Invariant::I1 => check_i1(&p),
            Invariant::I2 => check_i2(&p),
            Invariant::I3 => check_i3(&p),
            Invariant::I4 => check_i4(&p, self.final_status),
            Invariant::I5 => check_i5(&p, self.final_status),
            Invariant::I6 => check_i6(&p),
            Invariant::I7 => match &fin {
                Some(fin) => check_i7(&p, fin),
                None => {
                    unknown = Some("no final status read succeeded".to_string());
                    Vec::new()
                }
            },
            Invariant::I8 => check_i8(&p, fin.as_ref()),
        };
        let valid = Validity::judge(!violations.is_empty(), unknown.is_some());
        let mut offending: Vec<u64> = violations.iter().flat_map(|x| x.events.clone()).collect();
        offending.sort_unstable();
        offending.dedup();
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
            unknown.map(|u| format!(" ({u})")).unwrap_or_default()
        );
        let _ = p.end_time;
        CheckResult {
            checker: self.name().into(),
            valid,
            summary,
            offending,
            details: json!({
                "violations": violations.iter().take(100).map(|x| json!({"what": x.what, "events": x.events})).collect::<Vec<_>>(),
                "violations_total": violations.len(),
            }),
        }
    }
}

/// All replicas' `StateDigest` agree at every common applied index.
pub struct DigestsIdentical;

impl Checker for DigestsIdentical {
    fn name(&self) -> &'static str {
        "replicas-identical-digest"
    }

    fn check(&self, _history: &[Event], state: &FinalState) -> CheckResult {
        let nodes: BTreeSet<&str> = state.digests.iter().map(|d| d.node.as_str()).collect();
        let mut at: BTreeMap<u64, BTreeMap<&str, u32>> = BTreeMap::new();
        let mut mismatches = Vec::new();
        for d in &state.digests {
            let m = at.entry(d.applied_index).or_default();
            if let Some(c) = m.get(d.node.as_str()) {
                if *c != d.crc32 {
                    mismatches.push(json!({"node": d.node, "applied_index": d.applied_index, "crc32": [c, d.crc32]}));
                }
            }
            m.insert(&d.node, d.crc32);
        }
        let mut compared = 0;
        let mut full = Vec::new();
        for (index, m) in &at {
            if m.len() < 2 {
                continue;
            }
            compared += 1;
            let crcs: BTreeSet<u32> = m.values().copied().collect();
            if crcs.len() > 1 {
                mismatches.push(json!({"applied_index": index, "crc32": m}));
            }
            if m.len() == nodes.len() {
                full.push(*index);
            }
        }
        let valid = Validity::judge(
            !mismatches.is_empty(),
            full.is_empty() || nodes.len() < state.replicas.len().max(1),
        );
        CheckResult {
            checker: self.name().into(),
            valid,
            summary: format!(
                "{} digests of {} replicas; {compared} applied indexes sampled on 2+ replicas, {} on all; {} mismatches",
                state.digests.len(),
                nodes.len(),
                full.len(),
                mismatches.len()
            ),
            offending: Vec::new(),
            details: json!({"mismatches": mismatches, "indexes_on_all": full, "samples": state.digests}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Recorder;

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

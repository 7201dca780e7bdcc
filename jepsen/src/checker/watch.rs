//! `watch-events`: the register workload's watchers saw the writes, once
//! each, in order.
//!
//! During a register run a few watchers (`ObjectStore.Watch` through
//! `openshell_client`'s resuming [`Watcher`](openshell_client::Watcher),
//! [`crate::workload::register`]) record every event they are delivered
//! ([`watch_log`](crate::checker::watch_log)). For each watcher, with
//! `start` the first revision it covers and `through` the revision it was
//! current up to when it stopped, the checker holds the store to:
//!
//! * **no repeat, in order**: the delivered revisions strictly increase
//!   (an event delivered twice, or one delivered after a later one, is a
//!   violation);
//! * **only covered writes that were attempted**: every event is of an
//!   object the watch covers, a put whose `resource_version` is its
//!   revision and whose payload is the value of a write or cas of that
//!   register that was attempted and not certainly refused (`ok` or
//!   `info`; an `info` write may or may not have applied), with the
//!   revision an `ok` one was acknowledged with; no value is delivered at
//!   two revisions; no delete (the workload deletes nothing);
//! * **every acknowledged write, exactly once**: every `ok` write or cas
//!   of a covered register whose acknowledged `resource_version` is in
//!   `start..=through` was delivered, at that revision, with that key and
//!   value (with the first rule: exactly once).
//!
//! Together these make every register's events follow its writes'
//! `resource_version` order. A watcher that ended with a compacted revision
//! (`openshell_client::Error::Compacted`), did not catch up within the
//! bounded wait after the final heal, never started, or whose record was
//! cut short, makes the result `unknown` (saying which and why) unless a
//! violation makes it `invalid`: the writes past where it stopped were not
//! checked.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::checker::verdict::{CheckResult, Checker, FinalState};
use crate::checker::watch_log::{Delivered, EndReason, EventKind, WatchLog};
use crate::cluster::OBJECT_TYPE;
use crate::history::{Event, OpType, Process};

/// The `watch-events` checker over the watchers' records.
pub struct WatchEvents {
    /// One record per watcher.
    pub logs: Vec<WatchLog>,
}

/// How a write or cas of the history ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Acknowledged, with the `resource_version` it was given (none: the
    /// history did not record it).
    Ok(Option<u64>),
    /// Unknown: it may or may not have applied.
    Info,
    /// Certainly not applied.
    Fail,
}

/// One write or cas of the history.
#[derive(Clone, Debug)]
struct Write {
    key: String,
    value: i64,
    /// The history index of its completion (its invocation when it never
    /// completed).
    index: u64,
    outcome: Outcome,
}

/// Every write and cas of `history`, by the value it writes (values are
/// unique across a run, so a value names its write).
///
/// # Errors
/// A completion without an invocation, or a write without a key or an
/// integer value: which event.
fn writes(history: &[Event]) -> Result<Vec<Write>, String> {
    let mut pending: HashMap<u64, &Event> = HashMap::new();
    let mut out = Vec::new();
    for e in history {
        let Process::Client(p) = e.process else {
            continue;
        };
        if !matches!(e.f.as_str(), "write" | "cas") {
            if e.kind == OpType::Invoke {
                pending.remove(&p);
            }
            continue;
        }
        if e.kind == OpType::Invoke {
            pending.insert(p, e);
            continue;
        }
        let invoke = pending
            .remove(&p)
            .ok_or_else(|| format!("event {}: a completion without its invocation", e.index))?;
        let outcome = match e.kind {
            OpType::Ok => Outcome::Ok(e.resource_version),
            OpType::Info => Outcome::Info,
            _ => Outcome::Fail,
        };
        out.push(write_of(invoke, e.index, outcome)?);
    }
    // Invocations that never completed: unknown outcome.
    for invoke in pending.into_values() {
        out.push(write_of(invoke, invoke.index, Outcome::Info)?);
    }
    Ok(out)
}

fn write_of(invoke: &Event, index: u64, outcome: Outcome) -> Result<Write, String> {
    let key = invoke
        .key
        .clone()
        .ok_or_else(|| format!("event {}: a {} without a key", invoke.index, invoke.f))?;
    let value = match invoke.f.as_str() {
        "cas" => invoke.value.get(1).and_then(serde_json::Value::as_i64),
        _ => invoke.value.as_i64(),
    }
    .ok_or_else(|| {
        format!(
            "event {}: bad value for {}: {}",
            invoke.index, invoke.f, invoke.value
        )
    })?;
    Ok(Write {
        key,
        value,
        index,
        outcome,
    })
}

/// What the checker found for one watcher (`details.watchers`).
#[derive(Clone, Debug, Default, Serialize)]
struct WatcherReport {
    name: String,
    start: Option<u64>,
    through: Option<u64>,
    end: Option<EndReason>,
    events: usize,
    /// Acknowledged writes in `start..=through` of covered registers.
    acknowledged_checked: usize,
    /// Events of `info` writes (applied after all).
    info_delivered: usize,
    resumes: u32,
    errors: u32,
    /// Why the watcher leaves the result undecided.
    undecided: Option<String>,
}

/// The history's writes, indexed.
struct Writes {
    by_value: HashMap<i64, Vec<Write>>,
    /// `ok` writes by the revision they were acknowledged with.
    by_revision: BTreeMap<u64, Vec<Write>>,
    /// `ok` writes the history gave no revision.
    unversioned: usize,
}

impl Writes {
    fn new(all: Vec<Write>) -> Writes {
        let mut w = Writes {
            by_value: HashMap::new(),
            by_revision: BTreeMap::new(),
            unversioned: 0,
        };
        for write in all {
            match write.outcome {
                Outcome::Ok(Some(rv)) => w.by_revision.entry(rv).or_default().push(write.clone()),
                Outcome::Ok(None) => w.unversioned += 1,
                _ => {}
            }
            w.by_value.entry(write.value).or_default().push(write);
        }
        w
    }
}

/// Checks one watcher; appends its violations.
fn check_watcher(
    log: &WatchLog,
    writes: &Writes,
    violations: &mut Vec<(String, Vec<u64>)>,
) -> WatcherReport {
    let name = &log.scope.name;
    let mut report = WatcherReport {
        name: name.clone(),
        start: log.start,
        through: log.end.as_ref().map(|e| e.through),
        end: log.end.as_ref().map(|e| e.reason),
        events: log.events.len(),
        resumes: log
            .end
            .as_ref()
            .map_or(0, |e| e.streams_opened.saturating_sub(1)),
        errors: log.end.as_ref().map_or(0, |e| e.errors),
        ..WatcherReport::default()
    };
    let mut violate = |what: String, events: Vec<u64>| {
        violations.push((format!("watcher {name}: {what}"), events));
    };
    // Revision -> how many events delivered it.
    let mut delivered: BTreeMap<u64, usize> = BTreeMap::new();
    // Value -> the revision it was first delivered at.
    let mut value_at: HashMap<i64, u64> = HashMap::new();
    let mut last: Option<u64> = None;
    for e in &log.events {
        let r = e.revision;
        match last {
            Some(l) if r == l || delivered.contains_key(&r) => {
                violate(format!("revision {r} delivered twice"), Vec::new());
            }
            Some(l) if r < l => violate(
                format!("revision {r} delivered after revision {l} (out of order)"),
                Vec::new(),
            ),
            _ => {}
        }
        last = Some(last.map_or(r, |l| l.max(r)));
        *delivered.entry(r).or_default() += 1;
        if log.start.is_some_and(|s| r < s) {
            violate(
                format!("revision {r} is before the watch's first revision"),
                Vec::new(),
            );
        }
        check_event(log, e, writes, &mut value_at, &mut report, &mut violate);
    }
    // Every acknowledged write the watch covers was delivered.
    if let (Some(start), Some(end)) = (log.start, log.end.as_ref()) {
        for (rv, acked) in writes.by_revision.range(start..=end.through) {
            for w in acked
                .iter()
                .filter(|w| log.scope.covers(OBJECT_TYPE, &w.key))
            {
                report.acknowledged_checked += 1;
                if !delivered.contains_key(rv) {
                    violate(
                        format!(
                            "{}={} acknowledged at revision {rv} was never delivered",
                            w.key, w.value
                        ),
                        vec![w.index],
                    );
                }
            }
        }
    }
    report.undecided = undecided(log, writes);
    report
}

/// The checks of one delivered event `e` at revision `r` against the
/// history's writes (coverage, kind, version, value, acknowledgement).
fn check_event(
    log: &WatchLog,
    e: &Delivered,
    writes: &Writes,
    value_at: &mut HashMap<i64, u64>,
    report: &mut WatcherReport,
    violate: &mut impl FnMut(String, Vec<u64>),
) {
    let r = e.revision;
    if !log.scope.covers(&e.object_type, &e.key) {
        violate(
            format!(
                "revision {r}: {} {} is not covered by the watch",
                e.object_type, e.key
            ),
            Vec::new(),
        );
        return;
    }
    if e.kind != EventKind::Put {
        violate(
            format!(
                "revision {r}: a {:?} event of {}, which no op of the workload made",
                e.kind, e.key
            ),
            Vec::new(),
        );
        return;
    }
    if e.resource_version != r {
        violate(
            format!(
                "revision {r}: the put of {} carries resource_version {}",
                e.key, e.resource_version
            ),
            Vec::new(),
        );
    }
    let Ok(value) = e.payload.trim().parse::<i64>() else {
        violate(
            format!(
                "revision {r}: {} holds {:?}, not a register value",
                e.key, e.payload
            ),
            Vec::new(),
        );
        return;
    };
    if let Some(first) = value_at.insert(value, r) {
        violate(
            format!(
                "{}={value} delivered at revision {first} and again at {r} (one write applied twice)",
                e.key
            ),
            Vec::new(),
        );
    }
    // The write acknowledged at this revision, if any, must be this one.
    if let Some(acked) = writes.by_revision.get(&r) {
        let other: Vec<&Write> = acked
            .iter()
            .filter(|w| w.key != e.key || w.value != value)
            .collect();
        if !other.is_empty() {
            violate(
                format!(
                    "revision {r}: delivered {}={value}, but revision {r} was acknowledged to {}",
                    e.key,
                    other
                        .iter()
                        .map(|w| format!("{}={}", w.key, w.value))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                other.iter().map(|w| w.index).collect(),
            );
            return;
        }
    }
    let candidates = writes.by_value.get(&value).map(Vec::as_slice);
    let Some(write) = candidates.and_then(|c| c.iter().find(|w| w.key == e.key)) else {
        let elsewhere: Vec<u64> = candidates.into_iter().flatten().map(|w| w.index).collect();
        violate(
            format!(
                "revision {r}: {}={value} was never written to {} by any op",
                e.key, e.key
            ),
            elsewhere,
        );
        return;
    };
    match write.outcome {
        Outcome::Fail => violate(
            format!(
                "revision {r}: {}={value} was written by an op that certainly failed",
                e.key
            ),
            vec![write.index],
        ),
        Outcome::Ok(Some(rv)) if rv != r => violate(
            format!(
                "revision {r}: {}={value} was acknowledged with resource_version {rv}",
                e.key
            ),
            vec![write.index],
        ),
        Outcome::Info => report.info_delivered += 1,
        Outcome::Ok(_) => {}
    }
}

/// Why `log` leaves the result undecided, if it does.
fn undecided(log: &WatchLog, writes: &Writes) -> Option<String> {
    let Some(end) = &log.end else {
        return Some("its record has no end (the run was cut short)".into());
    };
    if log.start.is_none() {
        return Some(format!("it never started: {}", end.detail));
    }
    let past = |target: Option<u64>| {
        let unchecked = writes
            .by_revision
            .range(end.through.saturating_add(1)..)
            .flat_map(|(_, w)| w)
            .filter(|w| log.scope.covers(OBJECT_TYPE, &w.key))
            .count();
        format!(
            "current only through revision {}{} ({unchecked} acknowledged writes after it unchecked)",
            end.through,
            target.map_or(String::new(), |t| format!(", not past {t}"))
        )
    };
    match end.reason {
        EndReason::Current => None,
        EndReason::Compacted => Some(format!(
            "it ended with a compacted revision ({}); {}",
            end.detail,
            past(end.target)
        )),
        EndReason::Behind => Some(format!(
            "it did not catch up within the wait after the final heal: {}",
            past(end.target)
        )),
        EndReason::Failed => Some(format!("it failed ({}); {}", end.detail, past(end.target))),
    }
}

impl Checker for WatchEvents {
    fn name(&self) -> &'static str {
        "watch-events"
    }

    fn check(&self, history: &[Event], _state: &FinalState) -> CheckResult {
        let writes = match writes(history) {
            Ok(w) => Writes::new(w),
            Err(e) => return CheckResult::malformed_history(self.name(), e),
        };
        let mut violations = Vec::new();
        let reports: Vec<WatcherReport> = self
            .logs
            .iter()
            .map(|log| check_watcher(log, &writes, &mut violations))
            .collect();
        let mut reasons: Vec<String> = reports
            .iter()
            .filter_map(|r| r.undecided.as_ref().map(|u| format!("{}: {u}", r.name)))
            .collect();
        if reports.is_empty() {
            reasons.push("no watcher ran".into());
        }
        if writes.unversioned > 0 {
            reasons.push(format!(
                "{} acknowledged writes have no resource_version in the history",
                writes.unversioned
            ));
        }
        let events: usize = reports.iter().map(|r| r.events).sum();
        let checked: usize = reports.iter().map(|r| r.acknowledged_checked).sum();
        let resumes: u32 = reports.iter().map(|r| r.resumes).sum();
        let mut summary = format!(
            "{} watchers: {events} events, {checked} acknowledged writes checked, {resumes} resumes, {} violations",
            reports.len(),
            violations.len()
        );
        if !reasons.is_empty() {
            summary = format!("{summary}; undecided: {}", reasons.join("; "));
        }
        let mut result =
            CheckResult::of_violations(self.name(), &violations, !reasons.is_empty(), summary);
        if let Some(details) = result.details.as_object_mut() {
            details.insert(
                "watchers".into(),
                serde_json::to_value(&reports).unwrap_or_default(),
            );
        }
        result
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;

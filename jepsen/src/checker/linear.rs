//! Linearizability of a read/write/cas register: the Wing & Gong search with
//! Lowe's memoisation (WGL), run per key (P-compositionality: a history is
//! linearizable iff every key's sub-history is).
//!
//! * `ok` ops must be linearized between their invoke and their completion.
//! * `info` ops (and invokes that never completed) may take effect at any
//!   point after their invoke, or never: they have no return entry, so the
//!   search may leave them out.
//! * `fail` ops certainly did not take effect and are dropped.
//!
//! The search is exponential in the worst case; [`Options::max_steps`] bounds
//! it and the answer is then [`Verdict::Unknown`].

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use crate::history::{Event, OpType, Process};

/// Register value: `None` is the absent register.
pub type Value = Option<i64>;

/// One register operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum RegOp {
    /// Read that returned this value.
    Read(Value),
    /// Unconditional write.
    Write(i64),
    /// Compare-and-set (expected, new).
    Cas(i64, i64),
}

impl RegOp {
    /// Applies the op to `state`: `None` if it cannot take effect there.
    fn step(self, state: Value) -> Option<Value> {
        match self {
            RegOp::Read(v) => (v == state).then_some(state),
            RegOp::Write(v) => Some(Some(v)),
            RegOp::Cas(e, n) => (state == Some(e)).then_some(Some(n)),
        }
    }
}

/// One completed (or possibly-completed) operation.
#[derive(Clone, Debug, Serialize)]
pub struct Op {
    /// History index of the invoke.
    pub invoke_index: u64,
    /// History index of the completion (none for an unknown outcome).
    pub complete_index: Option<u64>,
    /// Process.
    pub process: u64,
    /// What it did.
    pub op: RegOp,
    /// Invoke time, ns.
    pub call: u64,
    /// Completion time, ns; `None` for `info`.
    pub ret: Option<u64>,
}

/// The verdict for one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// A linearization exists.
    Valid,
    /// None exists.
    Invalid,
    /// The search budget ran out.
    Unknown,
}

/// The result for one key.
#[derive(Clone, Debug, Serialize)]
pub struct KeyResult {
    /// The register.
    pub key: String,
    /// Verdict.
    pub verdict: Verdict,
    /// Ops considered (ok + info).
    pub ops: usize,
    /// Search steps used.
    pub steps: u64,
    /// When invalid: the op that could not be linearized at the deepest
    /// point of the search, and the ops concurrent with it.
    pub offending: Vec<Op>,
    /// When invalid: the longest linearized prefix found (op invoke indexes)
    /// and the register value after it.
    pub best_prefix: Vec<u64>,
    /// Register value after `best_prefix`.
    pub best_state: Value,
}

/// Search options.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Stop after this many steps per key and answer Unknown.
    pub max_steps: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_steps: 20_000_000,
        }
    }
}

/// Problems turning a history into register ops.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HistoryError {
    /// A completion without an invoke.
    #[error("event {0}: completion without a pending invoke of that process")]
    Unpaired(u64),
    /// A register op without the `key` naming its register.
    #[error("event {0}: register op without a key")]
    MissingKey(u64),
    /// A value of the wrong shape.
    #[error("event {index}: bad value for {f}: {value}")]
    BadValue {
        /// Event index.
        index: u64,
        /// The op.
        f: String,
        /// The value as JSON.
        value: String,
    },
}

fn int(v: &serde_json::Value) -> Option<i64> {
    v.as_i64()
}

fn parse(f: &str, value: &serde_json::Value, index: u64) -> Result<RegOp, HistoryError> {
    let bad = || HistoryError::BadValue {
        index,
        f: f.to_string(),
        value: value.to_string(),
    };
    match f {
        "read" => match value {
            serde_json::Value::Null => Ok(RegOp::Read(None)),
            v => int(v).map(|i| RegOp::Read(Some(i))).ok_or_else(bad),
        },
        "write" => int(value).map(RegOp::Write).ok_or_else(bad),
        "cas" => match value.as_array().map(|a| a.as_slice()) {
            Some([e, n]) => match (int(e), int(n)) {
                (Some(e), Some(n)) => Ok(RegOp::Cas(e, n)),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        },
        _ => Err(bad()),
    }
}

/// Pairs invokes with completions and groups the register ops by key.
/// Nemesis events and ops of other workloads (`f` not read/write/cas) are
/// ignored. `fail` ops and reads of unknown outcome are dropped.
///
/// # Errors
/// A completion without an invoke, or a malformed value.
pub fn ops_by_key(history: &[Event]) -> Result<BTreeMap<String, Vec<Op>>, HistoryError> {
    let mut pending: HashMap<u64, &Event> = HashMap::new();
    let mut out: BTreeMap<String, Vec<Op>> = BTreeMap::new();
    for e in history {
        let Process::Client(p) = e.process else {
            continue;
        };
        if !matches!(e.f.as_str(), "read" | "write" | "cas") {
            continue;
        }
        if e.key.is_none() {
            return Err(HistoryError::MissingKey(e.index));
        }
        match e.kind {
            OpType::Invoke => {
                pending.insert(p, e);
            }
            kind => {
                let inv = pending.remove(&p).ok_or(HistoryError::Unpaired(e.index))?;
                let key = inv.key.clone().ok_or(HistoryError::MissingKey(inv.index))?;
                let op = match kind {
                    OpType::Fail => continue,
                    OpType::Info if inv.f == "read" => continue,
                    OpType::Ok => parse(&e.f, &e.value, e.index)?,
                    _ => parse(&inv.f, &inv.value, inv.index)?,
                };
                out.entry(key).or_default().push(Op {
                    invoke_index: inv.index,
                    complete_index: Some(e.index),
                    process: p,
                    op,
                    call: inv.time,
                    ret: (kind == OpType::Ok).then_some(e.time),
                });
            }
        }
    }
    // Invokes that never completed: unknown outcome.
    for (p, inv) in pending {
        if inv.f == "read" {
            continue;
        }
        let op = parse(&inv.f, &inv.value, inv.index)?;
        out.entry(inv.key.clone().ok_or(HistoryError::MissingKey(inv.index))?)
            .or_default()
            .push(Op {
                invoke_index: inv.index,
                complete_index: None,
                process: p,
                op,
                call: inv.time,
                ret: None,
            });
    }
    for ops in out.values_mut() {
        ops.sort_by_key(|o| o.invoke_index);
    }
    Ok(out)
}

#[derive(Clone, Copy)]
enum Kind {
    Call,
    Return,
}

#[derive(Clone, Copy)]
struct Entry {
    kind: Kind,
    op: usize,
    /// For a call: index of its return entry, if any.
    matching: Option<usize>,
}

/// The call and return entries of `ops` sorted by time (a call before a
/// return at the same instant, so ties count as concurrent: never a false
/// alarm), each call linked to its return; and each op's call position.
fn entry_list(ops: &[Op]) -> (Vec<Entry>, Vec<usize>) {
    let mut raw: Vec<(u64, u8, usize)> = Vec::with_capacity(ops.len() * 2);
    for (i, op) in ops.iter().enumerate() {
        raw.push((op.call, 0, i));
        if let Some(ret) = op.ret {
            raw.push((ret.max(op.call), 1, i));
        }
    }
    raw.sort();
    let mut entries: Vec<Entry> = raw
        .iter()
        .map(|(_, k, op)| Entry {
            kind: if *k == 0 { Kind::Call } else { Kind::Return },
            op: *op,
            matching: None,
        })
        .collect();
    let mut ret_pos: HashMap<usize, usize> = HashMap::new();
    for (pos, e) in entries.iter().enumerate() {
        if let Kind::Return = e.kind {
            ret_pos.insert(e.op, pos);
        }
    }
    for e in entries.iter_mut() {
        if let Kind::Call = e.kind {
            e.matching = ret_pos.get(&e.op).copied();
        }
    }
    let mut call_pos = vec![0; ops.len()];
    for (pos, e) in entries.iter().enumerate() {
        if let Kind::Call = e.kind {
            call_pos[e.op] = pos;
        }
    }
    (entries, call_pos)
}

/// A doubly linked list over positions `0..n` with head sentinel `n`:
/// (next, prev).
fn linked_list(n: usize) -> (Vec<usize>, Vec<usize>) {
    let head = n;
    let mut next: Vec<usize> = (1..=n).chain(std::iter::once(0)).collect();
    let mut prev: Vec<usize> = std::iter::once(n).chain(0..n).collect();
    // next[head] = 0 (first), prev[0] = head; next[n-1] = n (end == head).
    next[head] = if n == 0 { head } else { 0 };
    if n > 0 {
        next[n - 1] = head;
        prev[head] = n - 1;
    }
    (next, prev)
}

/// Takes `pos` out of the linked list (it keeps its own links).
fn lift(pos: usize, next: &mut [usize], prev: &mut [usize]) {
    let (p, q) = (prev[pos], next[pos]);
    next[p] = q;
    prev[q] = p;
}

/// Puts `pos` back where [`lift`] took it from.
fn unlift(pos: usize, next: &mut [usize], prev: &mut [usize]) {
    let (p, q) = (prev[pos], next[pos]);
    next[p] = pos;
    prev[q] = pos;
}

/// The op the search got stuck at and every op concurrent with it.
fn stuck_and_concurrent(ops: &[Op], stuck: usize) -> Vec<Op> {
    let s = &ops[stuck];
    let mut offending = vec![s.clone()];
    let s_ret = s.ret.unwrap_or(u64::MAX);
    for (i, o) in ops.iter().enumerate() {
        let o_ret = o.ret.unwrap_or(u64::MAX);
        if i != stuck && o.call <= s_ret && s.call <= o_ret {
            offending.push(o.clone());
        }
    }
    offending
}

/// Checks one key's ops against a register that starts absent.
pub fn check_key(key: &str, ops: &[Op], options: Options) -> KeyResult {
    let (entries, call_pos) = entry_list(ops);
    let n = entries.len();
    let head = n;
    let (mut next, mut prev) = linked_list(n);
    let words = ops.len().div_ceil(64);
    let mut bits = vec![0u64; words];
    let mut cache: HashSet<(Vec<u64>, Value)> = HashSet::new();
    let mut stack: Vec<(usize, Value)> = Vec::new();
    let mut state: Value = None;
    let mut remaining_ok = ops.iter().filter(|o| o.ret.is_some()).count();
    let mut steps: u64 = 0;
    let mut best_depth = 0usize;
    let mut best: (Vec<u64>, Value, Option<usize>) = (Vec::new(), None, None);
    let mut cur = next[head];

    let verdict = loop {
        if remaining_ok == 0 {
            break Verdict::Valid;
        }
        steps += 1;
        if steps > options.max_steps {
            break Verdict::Unknown;
        }
        let backtrack = if cur == head {
            true
        } else {
            let e = entries[cur];
            match e.kind {
                Kind::Call => {
                    let op = &ops[e.op];
                    let mut advanced = false;
                    if let Some(new_state) = op.op.step(state) {
                        let (w, b) = (e.op / 64, 1u64 << (e.op % 64));
                        bits[w] |= b;
                        if cache.insert((bits.clone(), new_state)) {
                            stack.push((e.op, state));
                            state = new_state;
                            lift(cur, &mut next, &mut prev);
                            if let Some(r) = e.matching {
                                lift(r, &mut next, &mut prev);
                                remaining_ok -= 1;
                            }
                            advanced = true;
                        } else {
                            bits[w] &= !b;
                        }
                    }
                    if advanced {
                        cur = next[head];
                    } else {
                        cur = next[cur];
                    }
                    false
                }
                Kind::Return => {
                    if stack.len() >= best_depth {
                        best_depth = stack.len();
                        best = (
                            stack.iter().map(|(o, _)| ops[*o].invoke_index).collect(),
                            state,
                            Some(e.op),
                        );
                    }
                    true
                }
            }
        };
        if backtrack {
            let Some((op, before)) = stack.pop() else {
                break Verdict::Invalid;
            };
            state = before;
            bits[op / 64] &= !(1u64 << (op % 64));
            let cp = call_pos[op];
            if let Some(r) = entries[cp].matching {
                unlift(r, &mut next, &mut prev);
                remaining_ok += 1;
            }
            unlift(cp, &mut next, &mut prev);
            cur = next[cp];
        }
    };

    let invalid = verdict == Verdict::Invalid;
    KeyResult {
        key: key.to_string(),
        verdict,
        ops: ops.len(),
        steps,
        offending: match best.2 {
            Some(stuck) if invalid => stuck_and_concurrent(ops, stuck),
            _ => Vec::new(),
        },
        best_prefix: if invalid { best.0 } else { Vec::new() },
        best_state: if invalid { best.1 } else { None },
    }
}

/// Checks every key of a history.
///
/// # Errors
/// When the history is malformed.
pub fn check(history: &[Event], options: Options) -> Result<Vec<KeyResult>, HistoryError> {
    Ok(ops_by_key(history)?
        .iter()
        .map(|(k, ops)| check_key(k, ops, options))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{EventSpec, Recorder};

    /// A hand-written history: (process, type, f, value, time).
    fn history(lines: &[(u64, OpType, &str, serde_json::Value, u64)]) -> Vec<Event> {
        lines
            .iter()
            .enumerate()
            .map(|(i, (p, t, f, v, time))| Event {
                index: i as u64,
                kind: *t,
                process: Process::Client(*p),
                f: f.to_string(),
                key: Some("r".into()),
                value: v.clone(),
                time: *time,
                node: None,
                error: None,
            })
            .collect()
    }

    fn verdict(lines: &[(u64, OpType, &str, serde_json::Value, u64)]) -> Verdict {
        let results = check(&history(lines), Options::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(results.len(), 1);
        results[0].verdict
    }

    use serde_json::json;
    use OpType::{Fail, Info, Invoke, Ok as Okk};

    #[test]
    fn sequential_write_then_read_is_valid() {
        assert_eq!(
            verdict(&[
                (0, Invoke, "write", json!(1), 1),
                (0, Okk, "write", json!(1), 2),
                (1, Invoke, "read", json!(null), 3),
                (1, Okk, "read", json!(1), 4),
            ]),
            Verdict::Valid
        );
    }

    #[test]
    fn read_of_absent_register_is_null() {
        assert_eq!(
            verdict(&[
                (1, Invoke, "read", json!(null), 1),
                (1, Okk, "read", json!(null), 2),
            ]),
            Verdict::Valid
        );
    }

    #[test]
    fn concurrent_read_may_see_old_or_new() {
        for seen in [json!(null), json!(1)] {
            assert_eq!(
                verdict(&[
                    (0, Invoke, "write", json!(1), 1),
                    (1, Invoke, "read", json!(null), 2),
                    (1, Okk, "read", seen.clone(), 3),
                    (0, Okk, "write", json!(1), 4),
                ]),
                Verdict::Valid
            );
        }
    }

    #[test]
    fn stale_read_after_acknowledged_write_is_invalid() {
        assert_eq!(
            verdict(&[
                (0, Invoke, "write", json!(1), 1),
                (0, Okk, "write", json!(1), 2),
                (0, Invoke, "write", json!(2), 3),
                (0, Okk, "write", json!(2), 4),
                (1, Invoke, "read", json!(null), 5),
                (1, Okk, "read", json!(1), 6),
            ]),
            Verdict::Invalid
        );
    }

    #[test]
    fn lost_write_is_invalid() {
        assert_eq!(
            verdict(&[
                (0, Invoke, "write", json!(1), 1),
                (0, Okk, "write", json!(1), 2),
                (1, Invoke, "read", json!(null), 3),
                (1, Okk, "read", json!(null), 4),
            ]),
            Verdict::Invalid
        );
    }

    #[test]
    fn flip_flop_reads_are_invalid() {
        // w1 and w2 overlap everything, but reads 1, 2, 1 in sequence cannot be.
        assert_eq!(
            verdict(&[
                (0, Invoke, "write", json!(1), 1),
                (1, Invoke, "write", json!(2), 2),
                (2, Invoke, "read", json!(null), 3),
                (2, Okk, "read", json!(1), 4),
                (2, Invoke, "read", json!(null), 5),
                (2, Okk, "read", json!(2), 6),
                (2, Invoke, "read", json!(null), 7),
                (2, Okk, "read", json!(1), 8),
                (0, Okk, "write", json!(1), 9),
                (1, Okk, "write", json!(2), 10),
            ]),
            Verdict::Invalid
        );
    }

    #[test]
    fn read_of_never_written_value_is_invalid() {
        assert_eq!(
            verdict(&[
                (0, Invoke, "write", json!(1), 1),
                (0, Okk, "write", json!(1), 2),
                (1, Invoke, "read", json!(null), 3),
                (1, Okk, "read", json!(7), 4),
            ]),
            Verdict::Invalid
        );
    }

    #[test]
    fn info_write_may_or_may_not_take_effect() {
        for seen in [json!(1), json!(2)] {
            assert_eq!(
                verdict(&[
                    (0, Invoke, "write", json!(1), 1),
                    (0, Okk, "write", json!(1), 2),
                    (1, Invoke, "write", json!(2), 3),
                    (1, Info, "write", json!(2), 4),
                    (2, Invoke, "read", json!(null), 10),
                    (2, Okk, "read", seen.clone(), 11),
                    (2, Invoke, "read", json!(null), 12),
                    (2, Okk, "read", seen.clone(), 13),
                ]),
                Verdict::Valid
            );
        }
        // But once 2 was seen, 1 cannot come back without a new write.
        assert_eq!(
            verdict(&[
                (0, Invoke, "write", json!(1), 1),
                (0, Okk, "write", json!(1), 2),
                (1, Invoke, "write", json!(2), 3),
                (1, Info, "write", json!(2), 4),
                (2, Invoke, "read", json!(null), 10),
                (2, Okk, "read", json!(2), 11),
                (2, Invoke, "read", json!(null), 12),
                (2, Okk, "read", json!(1), 13),
            ]),
            Verdict::Invalid
        );
    }

    #[test]
    fn info_write_takes_effect_after_its_invoke_only() {
        assert_eq!(
            verdict(&[
                (2, Invoke, "read", json!(null), 1),
                (2, Okk, "read", json!(5), 2),
                (1, Invoke, "write", json!(5), 3),
                (1, Info, "write", json!(5), 4),
            ]),
            Verdict::Invalid
        );
    }

    #[test]
    fn cas_semantics() {
        assert_eq!(
            verdict(&[
                (0, Invoke, "write", json!(1), 1),
                (0, Okk, "write", json!(1), 2),
                (0, Invoke, "cas", json!([1, 2]), 3),
                (0, Okk, "cas", json!([1, 2]), 4),
                (1, Invoke, "cas", json!([1, 3]), 5),
                (1, Fail, "cas", json!([1, 3]), 6),
                (1, Invoke, "read", json!(null), 7),
                (1, Okk, "read", json!(2), 8),
            ]),
            Verdict::Valid
        );
        // A cas that succeeded although the register held another value.
        assert_eq!(
            verdict(&[
                (0, Invoke, "write", json!(1), 1),
                (0, Okk, "write", json!(1), 2),
                (0, Invoke, "cas", json!([9, 2]), 3),
                (0, Okk, "cas", json!([9, 2]), 4),
            ]),
            Verdict::Invalid
        );
        // Two cas from the same expected value cannot both succeed.
        assert_eq!(
            verdict(&[
                (0, Invoke, "write", json!(1), 1),
                (0, Okk, "write", json!(1), 2),
                (1, Invoke, "cas", json!([1, 2]), 3),
                (2, Invoke, "cas", json!([1, 3]), 3),
                (1, Okk, "cas", json!([1, 2]), 4),
                (2, Okk, "cas", json!([1, 3]), 4),
            ]),
            Verdict::Invalid
        );
    }

    #[test]
    fn unpaired_completion_is_an_error() {
        let h = history(&[(0, Okk, "read", json!(1), 1)]);
        assert_eq!(
            check(&h, Options::default()).err(),
            Some(HistoryError::Unpaired(0))
        );
    }

    #[test]
    fn many_concurrent_ops_finish_quickly() {
        // 5 processes, 2000 ops of writes of unique values and reads of the
        // latest acknowledged value, overlapping in pairs: valid, and fast.
        let rec = Recorder::new(None).unwrap_or_else(|e| panic!("{e}"));
        let mut value = 0i64;
        for round in 0..400u64 {
            let p = round % 5;
            let spec = |kind, f: &str, v| EventSpec {
                kind,
                process: Process::Client(p),
                f: f.into(),
                key: Some("r".into()),
                value: v,
                node: None,
                error: None,
            };
            value += 1;
            rec.record(spec(Invoke, "write", json!(value)));
            rec.record(spec(Invoke, "read", json!(null)).clone_with_process(p + 100));
            rec.record(spec(Okk, "write", json!(value)));
            rec.record(spec(Okk, "read", json!(value)).clone_with_process(p + 100));
        }
        let started = std::time::Instant::now();
        let results = check(&rec.snapshot(), Options::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(results[0].verdict, Verdict::Valid);
        assert!(started.elapsed().as_secs() < 5);
    }

    trait WithProcess {
        fn clone_with_process(self, p: u64) -> Self;
    }
    impl WithProcess for EventSpec {
        fn clone_with_process(mut self, p: u64) -> Self {
            self.process = Process::Client(p);
            self
        }
    }
}

//! Write recovery per fault: how long writes through the majority side
//! stopped succeeding after each nemesis event.
//!
//! For every gateway fault in the history (a partition, an isolated node,
//! a kill, a pause, a power cut, a removed node, an island, packet loss,
//! a clock fault) this measures, from the fault's start and from its heal,
//! the time until the first write (`write`, `cas`, `launch`, `delete`,
//! `drain`, `cancel`) invoked at or after that moment through a node on the
//! **majority side** completed `ok`. The majority side is every node the
//! fault did not cut off, kill, pause, power off or remove, less the nodes
//! any other fault active at that moment affects; packet loss and clock
//! faults cut nobody off, so their majority side is every node.
//!
//! A partition's cut-off nodes are those that reach at most half of the
//! cluster (themselves included) directly: the minority of a leader
//! partition; nobody in a bridge or a majorities ring.
//!
//! It is a measure, not a checker: the target (issue 17: ≤ 2 s, an election
//! timeout plus one retry) is reported beside the figures, and nothing
//! makes a run invalid. `results.json` carries it as `recovery`, `index.html`
//! as a table.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{json, Value};

use crate::history::{Event, OpType, Process};

/// The availability target, seconds after a fault starts or heals.
pub const TARGET_S: f64 = 2.0;

/// Client ops that write.
const WRITES: [&str; 6] = ["write", "cas", "launch", "delete", "drain", "cancel"];

/// One gateway fault and its recovery times.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FaultRecovery {
    /// The fault type: the nemesis name (`leader-minority`, `isolate`,
    /// `kill`, `pause`, `power-cut`, ...).
    pub fault: String,
    /// History index of the event that started it.
    pub index: u64,
    /// The event's value.
    pub what: String,
    /// Nodes it cut off, killed, paused or removed.
    pub affected: Vec<String>,
    /// Seconds since the run started at which it started.
    pub start_s: f64,
    /// ... and was healed (`None`: never healed in the history).
    pub heal_s: Option<f64>,
    /// Majority-side nodes while it started.
    pub majority_side: Vec<String>,
    /// Seconds from the start to the first write invoked at or after it
    /// through a majority-side node that completed ok (`None`: none did).
    pub from_start_s: Option<f64>,
    /// The same from the heal (majority side: the nodes this fault and any
    /// fault still active after the heal left alone).
    pub from_heal_s: Option<f64>,
    /// The nodes other faults, still active at the heal, affect (empty
    /// while not healed): the nodes that cannot be expected to catch up.
    pub others_at_heal: Vec<String>,
}

/// Max and median of some recovery times.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Spread {
    /// Faults measured (with a write after them).
    pub count: usize,
    /// Faults after which no majority-side write succeeded in the history.
    pub unrecovered: usize,
    /// Seconds.
    pub max_s: Option<f64>,
    /// Seconds (the lower median).
    pub p50_s: Option<f64>,
    /// Measured times above [`TARGET_S`].
    pub over_target: usize,
}

impl Spread {
    fn of(values: impl Iterator<Item = Option<f64>>) -> Spread {
        let mut measured = Vec::new();
        let mut unrecovered = 0;
        for v in values {
            match v {
                Some(v) => measured.push(v),
                None => unrecovered += 1,
            }
        }
        measured.sort_by(f64::total_cmp);
        Spread {
            count: measured.len(),
            unrecovered,
            max_s: measured.last().copied(),
            p50_s: measured.get(measured.len().saturating_sub(1) / 2).copied(),
            over_target: measured.iter().filter(|v| **v > TARGET_S).count(),
        }
    }
}

/// The whole measure: every fault, and max / p50 per fault type and over
/// the run, from start and from heal.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Recovery {
    /// [`TARGET_S`].
    pub target_s: f64,
    /// Every gateway fault, in history order.
    pub faults: Vec<FaultRecovery>,
    /// Per fault type: `{"from_start": Spread, "from_heal": Spread}`.
    pub by_fault: BTreeMap<String, Value>,
    /// Over every fault: from start.
    pub from_start: Spread,
    /// Over every fault: from heal.
    pub from_heal: Spread,
}

/// What a nemesis event does to the fault set.
enum Effect {
    /// A fault starts: its type and the nodes it affects.
    Start(String, BTreeSet<usize>),
    /// Heals every network fault (`recover`).
    HealNet,
    /// Heals the faults of these kinds on this node (`resume`, `restart`,
    /// `clock-reset`, `promote`).
    HealNode(&'static [&'static str], usize),
    /// Heals everything (the run's final `recover`).
    HealAll,
    /// Nothing to measure.
    None,
}

/// Network faults, healed by `recover`.
const NET: [&str; 8] = [
    "leader-minority",
    "leader-majority",
    "bridge",
    "majorities-ring",
    "cut",
    "isolate",
    "island",
    "drop",
];

/// `n3` -> 3.
fn node_number(word: &str) -> Option<usize> {
    word.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .strip_prefix('n')?
        .parse()
        .ok()
}

/// Every `n<i>` in `text`.
fn nodes_in(text: &str) -> BTreeSet<usize> {
    text.split(|c: char| c.is_whitespace() || c == '[' || c == ']' || c == ',')
        .filter_map(node_number)
        .collect()
}

/// The nodes a `cut` leaves reaching at most half of the cluster directly.
fn cut_off(value: &str, n: usize) -> BTreeSet<usize> {
    if let Some((_, pairs)) = value.split_once("cut pairs") {
        // `[(1, 2), (3, 1)]`: links cut; count what each node still reaches.
        let numbers: Vec<usize> = pairs
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|w| w.parse().ok())
            .collect();
        let cut: BTreeSet<(usize, usize)> = numbers
            .chunks_exact(2)
            .flat_map(|p| [(p[0], p[1]), (p[1], p[0])])
            .collect();
        return (1..=n)
            .filter(|i| (1..=n).filter(|j| !cut.contains(&(*i, *j))).count() * 2 <= n)
            .collect();
    }
    // `leader-minority [n1] | [n2 n3]`: every group but a majority one.
    value
        .split('|')
        .map(nodes_in)
        .filter(|g| g.len() * 2 <= n)
        .flatten()
        .collect()
}

/// The fault type of a `cut` (its first word).
fn cut_kind(value: &str) -> String {
    value
        .split_whitespace()
        .next()
        .filter(|w| NET.contains(w))
        .unwrap_or("cut")
        .to_string()
}

fn effect(e: &Event, n: usize) -> Effect {
    let value = e.value.as_str().unwrap_or_default();
    if value.contains(" failed: ") {
        return Effect::None;
    }
    let one = || value.split_whitespace().next().and_then(node_number);
    match e.f.as_str() {
        "cut" => Effect::Start(cut_kind(value), cut_off(value, n)),
        "isolate" | "kill" | "pause" => match one() {
            Some(i) => Effect::Start(e.f.clone(), BTreeSet::from([i])),
            None => Effect::None,
        },
        "island" if value.starts_with("isolate leader") => {
            Effect::Start("island".into(), nodes_in(value))
        }
        "drop" | "clock-bump" | "clock-strobe" => Effect::Start(e.f.clone(), BTreeSet::new()),
        "power-cut" if value.contains("lost power") => {
            let group = value.split("lost power").next().unwrap_or_default();
            Effect::Start("power-cut".into(), nodes_in(group))
        }
        // The heal settled a removal whose reply left its outcome unknown
        // (nemesis/membership.rs): still a voter heals it; removed after
        // all, it already started at the unknown reply.
        "remove" if value.contains("did not take effect") => {
            one().map_or(Effect::None, |i| Effect::HealNode(&["membership"], i))
        }
        "remove" if value.contains("took effect after") => Effect::None,
        "remove" if !value.contains("refused") => match one() {
            Some(i) => Effect::Start("membership".into(), BTreeSet::from([i])),
            None => Effect::None,
        },
        "recover" if value.starts_with("all faults healed") => Effect::HealAll,
        "recover" => Effect::HealNet,
        "resume" => one().map_or(Effect::None, |i| Effect::HealNode(&["pause"], i)),
        "restart" => one().map_or(Effect::None, |i| {
            Effect::HealNode(&["kill", "power-cut"], i)
        }),
        "clock-reset" => one().map_or(Effect::None, |i| {
            Effect::HealNode(&["clock-bump", "clock-strobe"], i)
        }),
        "promote" => one().map_or(Effect::None, |i| Effect::HealNode(&["membership"], i)),
        _ => Effect::None,
    }
}

/// A fault being tracked: its record and whether it is still active.
struct Tracked {
    record: FaultRecovery,
    affected: BTreeSet<usize>,
    start_ns: u64,
    heal_ns: Option<u64>,
    /// Majority side at the heal.
    heal_side: BTreeSet<usize>,
    /// Nodes other still active faults affect at the heal.
    others_at_heal: BTreeSet<usize>,
    /// The node a clock fault skews: it cuts nobody off (not in
    /// `affected`), but only that node's `clock-reset` heals it.
    clock_of: Option<usize>,
}

fn names(nodes: &BTreeSet<usize>) -> Vec<String> {
    nodes.iter().map(|i| format!("n{i}")).collect()
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The faults of `history` on an `n`-node cluster, with start, heal and
/// majority sides (recovery times not yet measured).
fn faults(history: &[Event], n: usize) -> Vec<Tracked> {
    let all: BTreeSet<usize> = (1..=n).collect();
    let mut tracked: Vec<Tracked> = Vec::new();
    let side = |tracked: &[Tracked], except: &BTreeSet<usize>| -> BTreeSet<usize> {
        let out: BTreeSet<usize> = tracked
            .iter()
            .filter(|t| t.heal_ns.is_none())
            .flat_map(|t| t.affected.iter().copied())
            .collect();
        all.difference(&out)
            .filter(|i| !except.contains(i))
            .copied()
            .collect()
    };
    for e in history.iter().filter(|e| e.process == Process::Nemesis) {
        let healed: Vec<usize> = match effect(e, n) {
            Effect::Start(kind, affected) => {
                // Packet loss on several nodes at once is one fault.
                if kind == "drop" {
                    if let Some(open) = tracked
                        .iter_mut()
                        .find(|t| t.heal_ns.is_none() && t.record.fault == "drop")
                    {
                        open.record.what = format!("{}; {}", open.record.what, value_text(e));
                        continue;
                    }
                }
                let majority = side(&tracked, &affected);
                let kind_is_clock = kind.starts_with("clock-");
                tracked.push(Tracked {
                    record: FaultRecovery {
                        fault: kind,
                        index: e.index,
                        what: value_text(e),
                        affected: names(&affected),
                        start_s: secs(e.time),
                        heal_s: None,
                        majority_side: names(&majority),
                        from_start_s: None,
                        from_heal_s: None,
                        others_at_heal: Vec::new(),
                    },
                    affected,
                    start_ns: e.time,
                    heal_ns: None,
                    heal_side: BTreeSet::new(),
                    others_at_heal: BTreeSet::new(),
                    clock_of: if kind_is_clock {
                        value_text(e)
                            .split_whitespace()
                            .next()
                            .and_then(node_number)
                    } else {
                        None
                    },
                });
                continue;
            }
            Effect::HealNet => open(&tracked, |t| NET.contains(&t.record.fault.as_str())),
            Effect::HealNode(kinds, i) => open(&tracked, |t| {
                kinds.contains(&t.record.fault.as_str())
                    && (t.affected.contains(&i) || t.clock_of == Some(i))
            }),
            Effect::HealAll => open(&tracked, |_| true),
            Effect::None => continue,
        };
        for &k in &healed {
            tracked[k].heal_ns = Some(e.time);
        }
        for &k in &healed {
            let affected = tracked[k].affected.clone();
            tracked[k].heal_side = side(&tracked, &affected);
            let others: BTreeSet<usize> = all
                .difference(&side(&tracked, &BTreeSet::new()))
                .copied()
                .collect();
            tracked[k].others_at_heal = others;
        }
    }
    tracked
}

/// Indexes of the still active faults that `which` selects.
fn open(tracked: &[Tracked], which: impl Fn(&Tracked) -> bool) -> Vec<usize> {
    tracked
        .iter()
        .enumerate()
        .filter(|(_, t)| t.heal_ns.is_none() && which(t))
        .map(|(k, _)| k)
        .collect()
}

/// A completed write: invoke time, node, ok completion time.
struct Write {
    invoked: u64,
    node: Option<usize>,
    done: u64,
}

/// Every write that completed `ok`, by completion time.
fn ok_writes(history: &[Event]) -> Vec<Write> {
    let mut pending: BTreeMap<u64, &Event> = BTreeMap::new();
    let mut out = Vec::new();
    for e in history {
        let Process::Client(p) = e.process else {
            continue;
        };
        if e.kind == OpType::Invoke {
            pending.insert(p, e);
            continue;
        }
        let Some(invoke) = pending.remove(&p) else {
            continue;
        };
        if e.kind == OpType::Ok && WRITES.contains(&invoke.f.as_str()) {
            // The gateway that answered (a client may fail over).
            let node = e.node.as_ref().or(invoke.node.as_ref());
            out.push(Write {
                invoked: invoke.time,
                node: node.and_then(|n| node_number(n)),
                done: e.time,
            });
        }
    }
    out.sort_by_key(|w| w.done);
    out
}

/// Seconds from `at` to the first write invoked at or after it through one
/// of `side` that completed ok.
fn first_write(writes: &[Write], at: u64, side: &BTreeSet<usize>) -> Option<f64> {
    writes
        .iter()
        .find(|w| w.invoked >= at && w.node.is_some_and(|n| side.contains(&n)))
        .map(|w| secs(w.done - at))
}

/// Measures `history` of an `n`-node cluster.
pub fn measure(history: &[Event], n: usize) -> Recovery {
    let writes = ok_writes(history);
    let faults: Vec<FaultRecovery> = faults(history, n)
        .into_iter()
        .map(|t| {
            let mut r = t.record;
            r.from_start_s = first_write(&writes, t.start_ns, &r_side(&r.majority_side));
            if let Some(heal) = t.heal_ns {
                r.heal_s = Some(secs(heal));
                r.from_heal_s = first_write(&writes, heal, &t.heal_side);
                r.others_at_heal = names(&t.others_at_heal);
            }
            r
        })
        .collect();
    let mut kinds: BTreeSet<&str> = BTreeSet::new();
    kinds.extend(faults.iter().map(|f| f.fault.as_str()));
    let by_fault = kinds
        .into_iter()
        .map(|k| {
            let of = || faults.iter().filter(move |f| f.fault == k);
            let value = json!({
                "from_start": Spread::of(of().map(|f| f.from_start_s)),
                // A fault never healed in the history has no heal to time.
                "from_heal": Spread::of(of().filter(|f| f.heal_s.is_some()).map(|f| f.from_heal_s)),
            });
            (k.to_string(), value)
        })
        .collect();
    Recovery {
        target_s: TARGET_S,
        from_start: Spread::of(faults.iter().map(|f| f.from_start_s)),
        from_heal: Spread::of(
            faults
                .iter()
                .filter(|f| f.heal_s.is_some())
                .map(|f| f.from_heal_s),
        ),
        by_fault,
        faults,
    }
}

/// The cluster size a history names: its highest `n<i>` (nodes of client
/// ops and nemesis values), at least 3.
pub fn cluster_size(history: &[Event]) -> usize {
    history
        .iter()
        .flat_map(|e| {
            let from_node = e.node.as_deref().and_then(node_number);
            let from_value = match e.process {
                Process::Nemesis => nodes_in(&value_text(e)).into_iter().next_back(),
                Process::Client(_) => None,
            };
            from_node.into_iter().chain(from_value)
        })
        .max()
        .unwrap_or(0)
        .max(3)
}

fn r_side(names: &[String]) -> BTreeSet<usize> {
    names.iter().filter_map(|n| node_number(n)).collect()
}

/// An event's value as text (nemesis values are strings).
fn value_text(e: &Event) -> String {
    match &e.value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn fmt_s(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

impl Recovery {
    /// A plain-text table: per fault type, max / p50 from start and from
    /// heal, then the whole run.
    pub fn table(&self) -> String {
        let mut out = format!(
            "write recovery (s; target <= {:.0} s after a fault starts or heals)\n{:<18} {:>5} {:>9} {:>9} {:>9} {:>9} {:>6}\n",
            self.target_s, "fault", "n", "start max", "start p50", "heal max", "heal p50", "over"
        );
        let row = |name: &str, start: &Spread, heal: &Spread| {
            format!(
                "{name:<18} {:>5} {:>9} {:>9} {:>9} {:>9} {:>6}\n",
                start.count + start.unrecovered,
                fmt_s(start.max_s),
                fmt_s(start.p50_s),
                fmt_s(heal.max_s),
                fmt_s(heal.p50_s),
                start.over_target + heal.over_target + start.unrecovered + heal.unrecovered,
            )
        };
        for (k, v) in &self.by_fault {
            let spread = |key: &str| -> Spread {
                let s = &v[key];
                Spread {
                    count: s["count"].as_u64().unwrap_or(0) as usize,
                    unrecovered: s["unrecovered"].as_u64().unwrap_or(0) as usize,
                    max_s: s["max_s"].as_f64(),
                    p50_s: s["p50_s"].as_f64(),
                    over_target: s["over_target"].as_u64().unwrap_or(0) as usize,
                }
            };
            out.push_str(&row(k, &spread("from_start"), &spread("from_heal")));
        }
        out.push_str(&row("all", &self.from_start, &self.from_heal));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(index: u64, kind: OpType, process: Process, f: &str, value: Value, t_ms: u64) -> Event {
        Event {
            index,
            kind,
            process,
            f: f.into(),
            key: None,
            value,
            time: t_ms * 1_000_000,
            node: None,
            error: None,
            resource_version: None,
        }
    }

    /// A history builder: nemesis events and client writes.
    struct H(Vec<Event>);

    impl H {
        fn nemesis(&mut self, f: &str, value: &str, t_ms: u64) -> &mut Self {
            let i = self.0.len() as u64;
            self.0
                .push(ev(i, OpType::Info, Process::Nemesis, f, json!(value), t_ms));
            self
        }

        fn write(
            &mut self,
            p: u64,
            node: usize,
            from_ms: u64,
            to_ms: u64,
            kind: OpType,
        ) -> &mut Self {
            let i = self.0.len() as u64;
            let mut invoke = ev(
                i,
                OpType::Invoke,
                Process::Client(p),
                "write",
                json!(1),
                from_ms,
            );
            invoke.node = Some(format!("n{node}"));
            let mut done = invoke.clone();
            done.index = i + 1;
            done.kind = kind;
            done.time = to_ms * 1_000_000;
            self.0.push(invoke);
            self.0.push(done);
            self
        }
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-6)
    }

    #[test]
    fn a_leader_partition_is_timed_through_the_majority_only() {
        let mut h = H(Vec::new());
        h.nemesis("cut", "leader-minority [n1] | [n2 n3]", 1000)
            // A write through the cut-off leader does not count.
            .write(0, 1, 1100, 1200, OpType::Ok)
            .write(1, 2, 1100, 2500, OpType::Info)
            .write(2, 3, 1200, 2600, OpType::Ok)
            .nemesis("recover", "network healed", 5000)
            .write(3, 1, 5100, 5200, OpType::Ok)
            .write(4, 2, 5300, 5400, OpType::Ok);
        let r = measure(&h.0, 3);
        assert_eq!(r.faults.len(), 1);
        let f = &r.faults[0];
        assert_eq!(f.fault, "leader-minority");
        assert_eq!(f.affected, vec!["n1"]);
        assert_eq!(f.majority_side, vec!["n2", "n3"]);
        assert!(close(f.from_start_s, 1.6), "{f:?}");
        assert!(close(f.from_heal_s, 0.4), "{f:?}");
        assert_eq!(r.from_start.count, 1);
        assert!(r.table().contains("leader-minority"));
    }

    #[test]
    fn combined_faults_leave_both_victims_out_and_heal_in_turn() {
        let mut h = H(Vec::new());
        h.nemesis("kill", "n1", 1000)
            .nemesis("isolate", "n2", 1000)
            .write(0, 2, 1100, 1200, OpType::Ok)
            .write(1, 3, 1300, 1400, OpType::Ok)
            .nemesis("recover", "network healed", 4000)
            .nemesis("restart", "n1", 4010)
            .write(2, 2, 4100, 4200, OpType::Ok);
        let r = measure(&h.0, 3);
        assert_eq!(r.faults.len(), 2);
        let (kill, isolate) = (&r.faults[0], &r.faults[1]);
        assert_eq!(kill.majority_side, vec!["n2", "n3"]);
        assert_eq!(isolate.majority_side, vec!["n3"]);
        assert!(close(kill.from_start_s, 0.2));
        assert!(close(isolate.from_start_s, 0.4));
        assert!(close(isolate.heal_s, 4.0));
        assert!(close(kill.heal_s, 4.01));
        // The isolate healed while n1 was still down: n3 only, then nothing
        // through n3 any more.
        assert_eq!(isolate.from_heal_s, None);
        assert_eq!(isolate.others_at_heal, vec!["n1"], "n1 still down");
        assert!(kill.others_at_heal.is_empty());
        assert!(close(kill.from_heal_s, 0.19));
        assert_eq!(r.from_heal.unrecovered, 1);
    }

    /// A clock fault cuts nobody off, and its node's `clock-reset` heals
    /// it (before, only the run's final heal did, so its lag and recovery
    /// from heal were measured from there).
    #[test]
    fn a_clock_reset_heals_the_clock_fault_of_its_node() {
        let mut h = H(Vec::new());
        h.nemesis("clock-bump", "n2 +184s", 1000)
            .nemesis("clock-strobe", "n3 \u{b1}227s every 460 ms", 1000)
            .nemesis("clock-reset", "n2", 3000)
            .write(0, 1, 3100, 3200, OpType::Ok)
            .nemesis("clock-reset", "n3", 4000)
            .write(1, 1, 4100, 4300, OpType::Ok)
            .nemesis("recover", "all faults healed before final reads", 9000);
        let r = measure(&h.0, 3);
        let (bump, strobe) = (&r.faults[0], &r.faults[1]);
        assert!(bump.affected.is_empty() && strobe.affected.is_empty());
        assert_eq!(bump.majority_side, vec!["n1", "n2", "n3"]);
        assert!(close(bump.heal_s, 3.0), "{bump:?}");
        assert!(close(strobe.heal_s, 4.0), "{strobe:?}");
        assert!(close(bump.from_heal_s, 0.2), "{bump:?}");
        assert!(close(strobe.from_heal_s, 0.3), "{strobe:?}");
    }

    #[test]
    fn rings_cut_nobody_off_and_drops_merge() {
        assert!(cut_off("majorities-ring [n2 n1 n3] cut pairs [(2, 1)]", 3).is_empty());
        assert_eq!(
            cut_off("leader-majority [n1 n2 n3] | [n4 n5]", 5),
            BTreeSet::from([4, 5])
        );
        let mut h = H(Vec::new());
        h.nemesis("drop", "n1 p=0.30", 0)
            .nemesis("drop", "n3 p=0.30", 0)
            .write(0, 1, 10, 20, OpType::Ok)
            .nemesis("recover", "network healed", 100)
            .nemesis("recover", "all faults healed before final reads", 200);
        let r = measure(&h.0, 3);
        assert_eq!(r.faults.len(), 1);
        assert_eq!(r.faults[0].majority_side.len(), 3);
        assert!(close(r.faults[0].from_start_s, 0.02));
        assert_eq!(r.faults[0].from_heal_s, None);
    }

    #[test]
    fn a_removal_of_unknown_outcome_is_healed_by_its_settlement() {
        let mut h = H(Vec::new());
        h.nemesis(
            "remove",
            "n2 via n2: outcome unknown (Unavailable: no quorum)",
            0,
        )
        .nemesis(
            "remove",
            "n3 via n1: outcome unknown (Unavailable: no quorum)",
            0,
        )
        .nemesis("recover", "network healed", 100)
        .nemesis(
            "remove",
            "n2: the removal did not take effect (voters [1, 2, 3])",
            200,
        )
        .nemesis(
            "remove",
            "n3: the removal took effect after its reply (voters [1, 2]); wiping n3 to add it back",
            300,
        )
        .nemesis("add-learner", "n3 via n1", 400)
        .nemesis("promote", "n3 via n1", 500);
        let r = measure(&h.0, 3);
        assert_eq!(r.faults.len(), 2, "{:?}", r.faults);
        assert_eq!(r.faults[0].affected, vec!["n2"]);
        assert!(close(r.faults[0].heal_s, 0.2), "{:?}", r.faults[0]);
        assert_eq!(r.faults[1].affected, vec!["n3"]);
        assert!(close(r.faults[1].heal_s, 0.5), "{:?}", r.faults[1]);
        assert!(r.faults[1].others_at_heal.is_empty());
    }

    #[test]
    fn failed_faults_and_supervisor_faults_are_not_measured() {
        let mut h = H(Vec::new());
        h.nemesis("isolate", "n2 failed: no such link", 0)
            .nemesis("pause-supervisor", "m1 for 3000 ms", 0)
            .nemesis(
                "power-cut",
                "[n1 n2] lost power (unsynced data dropped)",
                10,
            )
            .nemesis("restart", "n1", 20)
            .nemesis("restart", "n2", 20);
        let r = measure(&h.0, 3);
        assert_eq!(r.faults.len(), 1);
        assert_eq!(r.faults[0].affected, vec!["n1", "n2"]);
        assert_eq!(r.faults[0].majority_side, vec!["n3"]);
        assert!(close(r.faults[0].heal_s, 0.02));
    }
}

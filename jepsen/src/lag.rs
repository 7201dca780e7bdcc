//! Follower lag per fault (issue 33): after each fault heals, how long until
//! the replicas agree again on a leader and every one of them applied what
//! was committed at the heal.
//!
//! A [`Sampler`] asks every node for its own view (`ClusterAdmin.Status`,
//! `local`) every [`SAMPLE_EVERY`] for the whole run and after the final
//! heal ([`Round`]: leader, term, commit and applied index, voters as that
//! node knows them; `None` for a node that did not answer within
//! [`ANSWER_WITHIN`]). Every round is also written to `<run>/replicas.jsonl`.
//! [`measure`] then takes each healed fault of [`crate::recovery`] and finds
//! the first round at or after its heal in which the nodes that can be
//! expected to (every node but those another still active fault affects):
//!
//! - all answered and name the same leader, which answered too and whose
//!   own view has every one of them as a voter (the leader itself may be a
//!   node another fault still affects, e.g. one whose removal is being
//!   settled), and
//! - each applied at least the highest commit index any of them reported in
//!   the first round at or after the heal,
//!
//! and from which that holds, every round, for [`STABLE`]: a node the
//! leader stopped replicating to (removed, or behind a dead connection)
//! still names the leader until its election timeout, so one round proves
//! nothing. `behind_s` is the time from the heal to that round; `None` when
//! no such round came before the next fault started (or the samples
//! ended), with `window_s` saying how long was looked at. A measure, like the write
//! recovery: the checked property is [`crate::checker::liveness`] after the
//! final heal.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proto::cluster::StatusRequest;
use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, Node};
use crate::history::Recorder;
use crate::recovery::Recovery;

/// How often every node is asked for its view.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// How long one node may take to answer before it counts as not answering
/// (a debug-build gateway on a loaded 2-core machine can take a few hundred
/// milliseconds; a paused one never answers).
pub const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// How long agreement must hold to count: longer than any election timeout
/// the harness gives its gateways (300–600 ms), so a node that stopped
/// hearing from the leader has stopped naming it.
pub const STABLE: Duration = Duration::from_secs(2);

/// One node's own view of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct View {
    /// The leader it knows (0: none).
    pub leader: u64,
    /// Its current term.
    pub term: u64,
    /// Its commit index.
    pub commit: u64,
    /// Its applied index.
    pub applied: u64,
    /// The voters of the membership it knows.
    pub voters: Vec<u64>,
}

/// Every node's view at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Round {
    /// Nanoseconds since the run started (the history's clock).
    pub t_ns: u64,
    /// Index i: node i + 1 (`None`: no answer within [`ANSWER_WITHIN`]).
    pub views: Vec<Option<View>>,
}

/// `node`'s own view, or `None` when it does not answer in time.
pub async fn view(node: &Node) -> Option<View> {
    if !node.is_running() {
        return None;
    }
    let mut request = tonic::Request::new(StatusRequest { local: true });
    request.set_timeout(ANSWER_WITHIN);
    let reply = tokio::time::timeout(ANSWER_WITHIN, node.admin().status(request))
        .await
        .ok()?
        .ok()?
        .into_inner();
    Some(View {
        leader: reply.leader_id,
        term: reply.term,
        commit: reply.commit_index,
        applied: reply.applied_index,
        voters: reply
            .nodes
            .iter()
            .filter(|n| n.voter)
            .map(|n| n.id)
            .collect(),
    })
}

/// Every node's view, asked at once.
pub async fn round(cluster: &Cluster, history: &Recorder) -> Round {
    let t_ns = history.now();
    let views = futures::future::join_all(cluster.nodes.iter().map(view)).await;
    Round { t_ns, views }
}

/// Samples every node's view until stopped. Dropped unstopped (a run that
/// ends in an error), it aborts its task, which holds the cluster.
pub struct Sampler {
    rounds: Arc<Mutex<Vec<Round>>>,
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling `cluster` every [`SAMPLE_EVERY`], appending each
    /// round to `file` (JSON Lines) when given.
    pub fn start(cluster: Arc<Cluster>, history: Recorder, file: Option<&Path>) -> Sampler {
        let rounds: Arc<Mutex<Vec<Round>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let mut out = file.and_then(|p| std::fs::File::create(p).ok());
        let task = {
            let rounds = rounds.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let next = tokio::time::Instant::now() + SAMPLE_EVERY;
                    let r = round(&cluster, &history).await;
                    if let (Some(f), Ok(line)) = (out.as_mut(), serde_json::to_string(&r)) {
                        let _ = writeln!(f, "{line}");
                    }
                    rounds.lock().unwrap_or_else(|p| p.into_inner()).push(r);
                    tokio::time::sleep_until(next).await;
                }
            })
        };
        Sampler {
            rounds,
            stop,
            task: Some(task),
        }
    }

    /// Stops sampling; every round taken.
    pub async fn stop(mut self) -> Vec<Round> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        std::mem::take(&mut *self.rounds.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Reads the rounds a run wrote (`<run>/replicas.jsonl`).
///
/// # Errors
/// When the file cannot be read, or a line is not a round (naming it).
pub fn read_rounds(path: &Path) -> anyhow::Result<Vec<Round>> {
    use anyhow::Context;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{} line {}: not a round", path.display(), i + 1))
        })
        .collect()
}

/// Whether, in `round`, nodes `expected` (1-based) all answered, name one
/// leader that answered too and whose own view has every one of them as a
/// voter, and each applied at least `target`.
pub fn in_sync(round: &Round, expected: &[usize], target: u64) -> bool {
    let mut leader = None;
    for i in expected {
        let Some(Some(v)) = round.views.get(i.wrapping_sub(1)) else {
            return false;
        };
        if v.leader == 0 || leader.is_some_and(|l| l != v.leader) || v.applied < target {
            return false;
        }
        leader = Some(v.leader);
    }
    let Some(leader) = leader.and_then(|l| usize::try_from(l).ok()) else {
        return false;
    };
    round
        .views
        .get(leader.wrapping_sub(1))
        .cloned()
        .flatten()
        .is_some_and(|v| expected.iter().all(|i| v.voters.contains(&(*i as u64))))
}

/// The first of `rounds` (in time order) from which [`in_sync`] holds in
/// every round for at least `stable`; with `window_closed` (the rounds end
/// because the next fault started), also one from which it holds to the
/// last round.
pub fn settled<'a>(
    rounds: &[&'a Round],
    expected: &[usize],
    target: u64,
    stable: Duration,
    window_closed: bool,
) -> Option<&'a Round> {
    let stable_ns = u64::try_from(stable.as_nanos()).unwrap_or(u64::MAX);
    let mut since: Option<&Round> = None;
    for r in rounds {
        if !in_sync(r, expected, target) {
            since = None;
            continue;
        }
        let start = *since.get_or_insert(r);
        if r.t_ns.saturating_sub(start.t_ns) >= stable_ns {
            return Some(start);
        }
    }
    since.filter(|_| window_closed)
}

/// The highest commit index nodes `expected` reported in `round`.
pub fn commit_of(round: &Round, expected: &[usize]) -> u64 {
    expected
        .iter()
        .filter_map(|i| round.views.get(i.wrapping_sub(1)).cloned().flatten())
        .map(|v| v.commit)
        .max()
        .unwrap_or(0)
}

/// One healed fault's follower lag.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FaultLag {
    /// The fault type (as in `recovery`).
    pub fault: String,
    /// History index of its start.
    pub index: u64,
    /// What it was.
    pub what: String,
    /// Seconds since the run started at which it healed.
    pub heal_s: f64,
    /// The nodes expected to catch up.
    pub nodes: Vec<String>,
    /// The commit index they had to apply.
    pub commit_at_heal: u64,
    /// Seconds from the heal until they all did under one leader; `None`:
    /// not within `window_s`.
    pub behind_s: Option<f64>,
    /// How long after the heal was looked at (until the next fault started
    /// or the samples ended).
    pub window_s: f64,
}

/// Max and median of some lags, per fault type.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LagSpread {
    /// Faults measured.
    pub count: usize,
    /// Faults after which the followers were still behind when the window
    /// ended.
    pub never: usize,
    /// Seconds.
    pub max_s: Option<f64>,
    /// Seconds (the lower median).
    pub p50_s: Option<f64>,
}

impl LagSpread {
    fn of<'a>(lags: impl Iterator<Item = &'a FaultLag>) -> LagSpread {
        let mut measured = Vec::new();
        let mut never = 0;
        for l in lags {
            match l.behind_s {
                Some(s) => measured.push(s),
                None => never += 1,
            }
        }
        measured.sort_by(f64::total_cmp);
        LagSpread {
            count: measured.len(),
            never,
            max_s: measured.last().copied(),
            p50_s: measured.get(measured.len().saturating_sub(1) / 2).copied(),
        }
    }
}

/// The whole measure: every healed fault, per type and over the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Lag {
    /// Rounds sampled.
    pub rounds: usize,
    /// Every healed fault, in history order.
    pub faults: Vec<FaultLag>,
    /// Per fault type.
    pub by_fault: BTreeMap<String, LagSpread>,
    /// Over every fault.
    pub all: LagSpread,
}

/// Measures the follower lag after each healed fault of `recovery` from
/// `rounds` of an `n`-node cluster.
pub fn measure(rounds: &[Round], recovery: &Recovery, n: usize) -> Lag {
    let starts: Vec<u64> = recovery
        .faults
        .iter()
        .map(|f| (f.start_s * 1e9) as u64)
        .collect();
    let last = rounds.last().map_or(0, |r| r.t_ns);
    let mut faults = Vec::new();
    for f in &recovery.faults {
        let Some(heal_s) = f.heal_s else {
            continue;
        };
        let heal = (heal_s * 1e9) as u64;
        let end = starts
            .iter()
            .copied()
            .filter(|s| *s > heal)
            .min()
            .unwrap_or(last);
        let expected: Vec<usize> = (1..=n)
            .filter(|i| !f.others_at_heal.contains(&format!("n{i}")))
            .collect();
        let window: Vec<&Round> = rounds
            .iter()
            .filter(|r| r.t_ns >= heal && r.t_ns <= end)
            .collect();
        let commit = window.first().map_or(0, |r| commit_of(r, &expected));
        // A window cut short by the next fault: agreement until its end
        // counts.
        let closed = end < last;
        let behind_s = settled(&window, &expected, commit, STABLE, closed)
            .map(|r| (r.t_ns - heal) as f64 / 1e9);
        faults.push(FaultLag {
            fault: f.fault.clone(),
            index: f.index,
            what: f.what.clone(),
            heal_s,
            nodes: expected.iter().map(|i| format!("n{i}")).collect(),
            commit_at_heal: commit,
            behind_s,
            window_s: end.saturating_sub(heal) as f64 / 1e9,
        });
    }
    let mut kinds: Vec<&str> = faults.iter().map(|f| f.fault.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    let by_fault = kinds
        .iter()
        .map(|k| {
            (
                k.to_string(),
                LagSpread::of(faults.iter().filter(|f| f.fault == *k)),
            )
        })
        .collect();
    Lag {
        rounds: rounds.len(),
        all: LagSpread::of(faults.iter()),
        by_fault,
        faults,
    }
}

fn fmt_s(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

impl Lag {
    /// A plain-text table: per fault type, how many healed, max / p50
    /// seconds a follower stayed behind, how many never caught up in their
    /// window.
    pub fn table(&self) -> String {
        let mut out = format!(
            "follower lag after each heal (s until every node agrees on a leader and applied the \
             commit index of the heal; {} samples)\n{:<18} {:>5} {:>9} {:>9} {:>6}\n",
            self.rounds, "fault", "n", "max", "p50", "never"
        );
        let row = |name: &str, s: &LagSpread| {
            format!(
                "{name:<18} {:>5} {:>9} {:>9} {:>6}\n",
                s.count + s.never,
                fmt_s(s.max_s),
                fmt_s(s.p50_s),
                s.never
            )
        };
        for (k, s) in &self.by_fault {
            out.push_str(&row(k, s));
        }
        out.push_str(&row("all", &self.all));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery::FaultRecovery;

    fn v(leader: u64, applied: u64) -> Option<View> {
        Some(View {
            leader,
            term: 1,
            commit: applied,
            applied,
            voters: vec![1, 2, 3],
        })
    }

    fn r(t_ms: u64, views: Vec<Option<View>>) -> Round {
        Round {
            t_ns: t_ms * 1_000_000,
            views,
        }
    }

    fn fault(kind: &str, start_ms: u64, heal_ms: Option<u64>, others: &[&str]) -> FaultRecovery {
        FaultRecovery {
            fault: kind.into(),
            index: 0,
            what: String::new(),
            affected: Vec::new(),
            start_s: start_ms as f64 / 1e3,
            heal_s: heal_ms.map(|h| h as f64 / 1e3),
            majority_side: Vec::new(),
            from_start_s: None,
            from_heal_s: None,
            others_at_heal: others.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_follower_is_behind_until_it_applied_the_commit_of_the_heal_under_the_leader_for_good() {
        let rounds = vec![
            r(900, vec![v(1, 50), v(1, 50), v(0, 10)]),
            // Heal at 1000: the leader has committed 50; n3 has no leader.
            r(1000, vec![v(1, 50), v(1, 51), v(0, 10)]),
            r(1200, vec![v(1, 52), v(1, 52), v(1, 40)]),
            // In sync once, then n3 loses the leader again: not yet.
            r(1400, vec![v(1, 53), v(1, 53), v(1, 51)]),
            r(1600, vec![v(1, 53), v(1, 53), v(0, 51)]),
            r(1800, vec![v(1, 54), v(1, 54), v(1, 54)]),
            r(3000, vec![v(1, 60), v(1, 60), v(1, 59)]),
            r(3800, vec![v(1, 61), v(1, 61), v(1, 61)]),
        ];
        let recovery = Recovery {
            faults: vec![fault("isolate", 500, Some(1000), &[])],
            ..Recovery::default()
        };
        let lag = measure(&rounds, &recovery, 3);
        assert_eq!(lag.faults.len(), 1);
        let f = &lag.faults[0];
        assert_eq!(f.commit_at_heal, 51);
        assert_eq!(f.behind_s, Some(0.8));
        assert_eq!(lag.all.max_s, Some(0.8));
        assert!(lag.table().contains("isolate"), "{}", lag.table());
    }

    #[test]
    fn a_follower_never_back_is_counted_and_others_faults_are_left_out() {
        let rounds = vec![
            r(1000, vec![v(3, 100), v(0, 10), v(3, 100)]),
            r(2000, vec![v(3, 200), v(0, 10), v(3, 200)]),
            r(3000, vec![v(3, 300), v(0, 10), v(3, 300)]),
        ];
        let recovery = Recovery {
            faults: vec![
                fault("drop", 0, Some(1000), &[]),
                // n2 paused by another fault at this heal: only n1, n3.
                fault("clock-bump", 0, Some(1000), &["n2"]),
                fault("kill", 0, None, &[]),
            ],
            ..Recovery::default()
        };
        let lag = measure(&rounds, &recovery, 3);
        assert_eq!(lag.faults.len(), 2, "an unhealed fault has no lag");
        assert_eq!(lag.faults[0].behind_s, None);
        assert_eq!(lag.faults[0].window_s, 2.0);
        assert_eq!(lag.faults[1].behind_s, Some(0.0));
        assert_eq!(lag.by_fault["drop"].never, 1);
        assert_eq!(lag.all.count, 1);
    }

    #[test]
    fn a_window_cut_short_by_the_next_fault_counts_agreement_to_its_end() {
        let rounds = vec![
            r(1000, vec![v(1, 5), v(1, 5), v(1, 5)]),
            r(1500, vec![v(1, 5), v(1, 5), v(1, 5)]),
            r(4000, vec![v(0, 5), v(0, 5), v(0, 5)]),
        ];
        let recovery = Recovery {
            faults: vec![
                fault("pause", 0, Some(1000), &[]),
                fault("isolate", 1500, Some(4000), &[]),
            ],
            ..Recovery::default()
        };
        let lag = measure(&rounds, &recovery, 3);
        assert_eq!(lag.faults[0].behind_s, Some(0.0));
        assert_eq!(lag.faults[1].behind_s, None, "no leader at all");
    }

    #[test]
    fn a_leader_whose_membership_lacks_a_node_is_not_in_sync() {
        let mut removed = r(0, vec![v(3, 9), v(3, 9), v(3, 9)]);
        if let Some(Some(leader)) = removed.views.get_mut(2) {
            leader.voters = vec![1, 3];
        }
        assert!(!in_sync(&removed, &[1, 2, 3], 9));
        assert!(in_sync(&removed, &[1, 3], 9));
    }

    #[test]
    fn no_answer_or_a_leader_outside_is_not_in_sync() {
        let round = r(0, vec![v(1, 5), None, v(1, 5)]);
        assert!(!in_sync(&round, &[1, 2, 3], 5));
        assert!(in_sync(&round, &[1, 3], 5));
        assert!(!in_sync(&round, &[1, 3], 6));
        // A leader outside the expected nodes counts when it answered.
        assert!(in_sync(&r(0, vec![v(2, 5), v(2, 5)]), &[1], 5));
        assert!(!in_sync(&r(0, vec![v(2, 5), None]), &[1], 5));
        assert!(!in_sync(&r(0, vec![v(4, 5), v(4, 5)]), &[1, 2], 5));
    }
}

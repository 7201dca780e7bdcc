//! The gateway's liveness and readiness, decided continuously by one task and
//! read by the probes (`/healthz`, `/readyz`) without any RPC of their own.
//!
//! **Live** while raft runs. When raft stops for good (a storage error such
//! as a full disk, or a broken invariant) the node no longer takes part in
//! the cluster and only a restart brings it back: `/healthz` answers 503 so
//! that Kubernetes restarts the pod, and the reason is logged once, with what
//! to do.
//!
//! **Ready** while this gateway knows a leader and is caught up with it: it
//! applied the log up to the commit index it found at start-up, and up to the
//! leader's commit index (asked of the leader, a read-index round) within
//! [`READY_LAG_ENTRIES`]. Once ready it stays ready until it falls more than
//! [`UNREADY_LAG_ENTRIES`] behind, or stays more than `READY_LAG_ENTRIES`
//! behind (or without a leader) for [`UNREADY_AFTER`]: the gap between the
//! two thresholds keeps a follower that is briefly behind under load from
//! flapping in and out of the Service. A leader that no majority
//! acknowledged within the election timeout is not ready at once: it can
//! commit nothing.
//!
//! **Leaving**: from the first SIGTERM or SIGINT on ([`Health::set_leaving`])
//! the gateway is not ready ("shutting down"), whatever raft says, so that
//! the Service stops sending it new clients while it stops. Liveness is not
//! affected.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use raft_store::RaftNode;

use crate::state::GatewayState;

/// How often the task re-evaluates.
pub const CHECK_INTERVAL: Duration = Duration::from_millis(500);
/// Behind the leader's commit index by at most this many entries: caught up.
pub const READY_LAG_ENTRIES: u64 = 100;
/// A ready gateway further behind than this is not ready at once.
pub const UNREADY_LAG_ENTRIES: u64 = 1000;
/// A ready gateway that stays behind (more than [`READY_LAG_ENTRIES`]) or
/// without a leader this long is not ready.
pub const UNREADY_AFTER: Duration = Duration::from_secs(5);

/// The current verdicts, shared by the task and the probes.
#[derive(Clone)]
pub struct Health {
    /// Written only by the evaluation task; a std lock because it is held
    /// for a copy, never across an await.
    state: Arc<RwLock<Verdict>>,
    /// The gateway is stopping: not ready, whatever the verdict says.
    leaving: Arc<AtomicBool>,
}

/// What the probes answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// `None` while live; the reason raft stopped otherwise.
    pub fatal: Option<String>,
    /// Whether `/readyz` answers 200.
    pub ready: bool,
    /// The probe's text: why (not) ready.
    pub reason: String,
}

/// One observation of the node, the input of [`next`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// Why raft stopped, if it did.
    pub fatal: Option<String>,
    /// The leader, if known.
    pub leader: Option<u64>,
    /// The leader's commit index, if the leader answered.
    pub leader_commit: Option<u64>,
    /// What this node applied.
    pub applied: u64,
    /// The commit index this node found at start-up.
    pub commit_at_start: u64,
    /// This node is the leader but no quorum acknowledged it within the
    /// election timeout: it cannot commit anything.
    pub leader_without_quorum: bool,
}

/// The hysteresis memory between evaluations.
#[derive(Clone, Debug, Default)]
pub struct Memory {
    /// Whether the last verdict was ready.
    pub ready: bool,
    /// Since when a ready gateway has been behind or without a leader.
    pub behind_since: Option<Instant>,
}

/// The next verdict from an observation at `now`: pure, so the hysteresis
/// is unit-tested without a cluster.
pub fn next(memory: &mut Memory, seen: &Observation, now: Instant) -> Verdict {
    if let Some(fatal) = &seen.fatal {
        memory.ready = false;
        return Verdict {
            fatal: Some(fatal.clone()),
            ready: false,
            reason: format!("not live: raft stopped: {fatal}"),
        };
    }
    if seen.leader_without_quorum {
        memory.ready = false;
        memory.behind_since = None;
        return Verdict {
            fatal: None,
            ready: false,
            reason:
                "not ready: this leader has not heard from a majority within the election timeout"
                    .into(),
        };
    }
    let lag = seen
        .leader_commit
        .map(|commit| commit.saturating_sub(seen.applied));
    let problem = match (seen.leader, lag) {
        (None, _) => Some("no leader known".to_string()),
        (Some(_), None) => Some("the leader did not confirm its commit index".to_string()),
        (Some(_), Some(_)) if seen.applied < seen.commit_at_start => Some(format!(
            "applied {} of the {} entries committed at start-up",
            seen.applied, seen.commit_at_start
        )),
        (Some(_), Some(lag)) if lag > READY_LAG_ENTRIES => Some(format!(
            "{lag} entries behind the leader's commit index (ready within {READY_LAG_ENTRIES})"
        )),
        (Some(_), Some(_)) => None,
    };
    let Some(problem) = problem else {
        memory.ready = true;
        memory.behind_since = None;
        return Verdict {
            fatal: None,
            ready: true,
            reason: format!(
                "ready: leader {}, applied {}, {} behind",
                seen.leader.unwrap_or_default(),
                seen.applied,
                lag.unwrap_or_default()
            ),
        };
    };
    if memory.ready {
        let since = *memory.behind_since.get_or_insert(now);
        let far = lag.is_some_and(|lag| lag > UNREADY_LAG_ENTRIES);
        if !far && now.duration_since(since) < UNREADY_AFTER {
            return Verdict {
                fatal: None,
                ready: true,
                reason: format!("ready (for now: {problem})"),
            };
        }
    }
    memory.ready = false;
    memory.behind_since = None;
    Verdict {
        fatal: None,
        ready: false,
        reason: format!("not ready: {problem}"),
    }
}

/// What the node shows now, the input of [`next`]: its leader, what it
/// applied, whether raft stopped, and the leader's commit index (a
/// read-index round, bounded by [`CHECK_INTERVAL`] or a second, whichever
/// is longer). `commit_at_start` is the commit index the node found at
/// start-up. The simulation observes its gateways through it too.
pub async fn observe(node: &RaftNode<GatewayState>, commit_at_start: u64) -> Observation {
    let fatal = node.fatal_error();
    let leader_commit = if fatal.is_none() {
        let wait = CHECK_INTERVAL.max(Duration::from_secs(1));
        let deadline = tokio::time::Instant::now() + wait;
        // Bounded twice over: the verdict must never stick because one
        // call did not return.
        tokio::time::timeout(wait * 2, node.leader_read_index(deadline))
            .await
            .ok()
            .and_then(Result::ok)
    } else {
        None
    };
    let status = node.status();
    let is_leader = status.leader.as_ref().map(|(id, _)| *id) == Some(status.node_id);
    let election_timeout = node.config().election_timeout_max;
    Observation {
        leader_without_quorum: is_leader && !status.leads_with_quorum(election_timeout),
        fatal,
        leader: status.leader.map(|(id, _)| id),
        leader_commit,
        applied: status.applied_index,
        commit_at_start,
    }
}

impl Health {
    /// Starts evaluating `node` every [`CHECK_INTERVAL`] in a task that the
    /// caller aborts on shutdown.
    pub fn start(
        node: RaftNode<GatewayState>,
        commit_at_start: u64,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let health = Health {
            state: Arc::new(RwLock::new(Verdict {
                fatal: None,
                ready: false,
                reason: "not ready: starting".into(),
            })),
            leaving: Arc::new(AtomicBool::new(false)),
        };
        let task = tokio::spawn(health.clone().run(node, commit_at_start));
        (health, task)
    }

    /// The current verdict.
    pub fn verdict(&self) -> Verdict {
        let verdict = match self.state.read() {
            Ok(v) => v.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        if self.leaving.load(Ordering::SeqCst) && verdict.fatal.is_none() {
            return Verdict {
                fatal: None,
                ready: false,
                reason: "not ready: shutting down".into(),
            };
        }
        verdict
    }

    /// Whether the gateway was told to stop ([`Health::set_leaving`]).
    pub fn is_leaving(&self) -> bool {
        self.leaving.load(Ordering::SeqCst)
    }

    /// The gateway is stopping: `/readyz` answers 503 "shutting down" from
    /// now on.
    pub fn set_leaving(&self) {
        self.leaving.store(true, Ordering::SeqCst);
    }

    async fn run(self, node: RaftNode<GatewayState>, commit_at_start: u64) {
        let mut memory = Memory::default();
        let mut fatal_logged = false;
        let mut ticker = tokio::time::interval(CHECK_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let seen = observe(&node, commit_at_start).await;
            let verdict = next(&mut memory, &seen, Instant::now());
            if let (Some(reason), false) = (&seen.fatal, fatal_logged) {
                fatal_logged = true;
                tracing::error!(
                    error = %reason,
                    "raft stopped for good; this gateway no longer takes part in the cluster. \
                     /healthz now fails so that it is restarted. If the disk is full, free space \
                     (or grow the volume) first; after the restart it catches up from the leader"
                );
            }
            match self.state.write() {
                Ok(mut v) => *v = verdict,
                Err(poisoned) => *poisoned.into_inner() = verdict,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(leader_commit: Option<u64>, applied: u64) -> Observation {
        Observation {
            fatal: None,
            leader: Some(1),
            leader_commit,
            applied,
            commit_at_start: 0,
            leader_without_quorum: false,
        }
    }

    #[test]
    fn ready_only_once_caught_up_with_the_start_up_commit_and_the_leader() {
        let mut m = Memory::default();
        let t = Instant::now();
        let mut start = seen(Some(10_000), 4_000);
        start.commit_at_start = 5_000;
        assert!(!next(&mut m, &start, t).ready);
        assert!(!next(&mut m, &seen(Some(10_000), 9_000), t).ready);
        assert!(next(&mut m, &seen(Some(10_000), 9_950), t).ready);
    }

    #[test]
    fn a_ready_gateway_briefly_behind_stays_ready_then_drops() {
        let mut m = Memory::default();
        let t = Instant::now();
        assert!(next(&mut m, &seen(Some(100), 100), t).ready);
        // 300 behind: within the hysteresis band, stays ready for a while.
        assert!(next(&mut m, &seen(Some(500), 200), t + Duration::from_secs(1)).ready);
        assert!(next(&mut m, &seen(Some(600), 300), t + Duration::from_secs(4)).ready);
        // Still behind after UNREADY_AFTER: not ready.
        let v = next(&mut m, &seen(Some(700), 400), t + Duration::from_secs(7));
        assert!(!v.ready, "{v:?}");
        // Back within READY_LAG_ENTRIES: ready again at once.
        assert!(next(&mut m, &seen(Some(700), 690), t + Duration::from_secs(8)).ready);
    }

    #[test]
    fn far_behind_or_fatal_is_not_ready_at_once() {
        let mut m = Memory::default();
        let t = Instant::now();
        assert!(next(&mut m, &seen(Some(100), 100), t).ready);
        let v = next(&mut m, &seen(Some(5_000), 100), t);
        assert!(
            !v.ready && v.reason.contains("4900 entries behind"),
            "{v:?}"
        );
        assert!(next(&mut m, &seen(Some(5_000), 5_000), t).ready);
        let mut broken = seen(Some(5_000), 5_000);
        broken.fatal = Some("No space left on device".into());
        let v = next(&mut m, &broken, t);
        assert!(!v.ready && v.fatal.is_some(), "{v:?}");
    }

    #[test]
    fn no_leader_keeps_a_ready_gateway_ready_only_for_the_grace() {
        let mut m = Memory::default();
        let t = Instant::now();
        assert!(next(&mut m, &seen(Some(1), 1), t).ready);
        let mut alone = seen(None, 1);
        alone.leader = None;
        assert!(next(&mut m, &alone, t + Duration::from_secs(1)).ready);
        assert!(!next(&mut m, &alone, t + Duration::from_secs(6)).ready);
    }
}

#[cfg(test)]
mod quorum_tests {
    use super::*;

    #[test]
    fn a_leader_without_quorum_is_not_ready_at_once() {
        let mut m = Memory::default();
        let t = Instant::now();
        let mut seen = Observation {
            fatal: None,
            leader: Some(1),
            leader_commit: Some(10),
            applied: 10,
            commit_at_start: 0,
            leader_without_quorum: false,
        };
        assert!(next(&mut m, &seen, t).ready);
        seen.leader_without_quorum = true;
        let v = next(&mut m, &seen, t);
        assert!(!v.ready && v.reason.contains("majority"), "{v:?}");
    }
}

#[cfg(test)]
mod leaving_tests {
    use super::*;

    #[test]
    fn a_leaving_gateway_is_not_ready_but_stays_live() {
        let health = Health {
            state: Arc::new(RwLock::new(Verdict {
                fatal: None,
                ready: true,
                reason: "ready: leader 1, applied 10, 0 behind".into(),
            })),
            leaving: Arc::new(AtomicBool::new(false)),
        };
        assert!(health.verdict().ready);
        health.set_leaving();
        let v = health.verdict();
        assert!(
            !v.ready && v.fatal.is_none() && v.reason == "not ready: shutting down",
            "{v:?}"
        );
    }
}

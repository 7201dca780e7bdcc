//! Pre-vote (Raft thesis §9.6, etcd's and raft-rs's `pre_vote`), which
//! openraft 0.9 lacks: a voter campaigns on its election timer only after a
//! majority of every configuration said it would vote for it.
//!
//! # Why
//!
//! A node that cannot hear the leader in time (its CPU throttled, a
//! connection that cannot be re-established, a one-way partition) runs
//! openraft's election timer out and campaigns at a higher term. Its peers
//! refuse the vote while they follow a live leader, but the candidate's
//! vote is now above the leader's, so the leader's next AppendEntries to it
//! answers "higher vote" and the leader steps down: a healthy pair of
//! gateways changes leader every time the slow one's timer runs out.
//! Measured on the dev cluster (three debug gateways): the leader's CPU
//! quota cut to 2 % of a core for 30 s gave 26 elections (term 1 to 27) as
//! the deposed leader kept campaigning; the healthy two led in turns.
//!
//! # The rule
//!
//! openraft's own timer is off (`enable_elect = false`); [`Campaigns`]
//! runs the same timer (`leader_lease + election_timeout` after the vote
//! was last touched while it is committed, `election_timeout` while it is
//! not, `election_timeout` drawn from `[min, max)` per round from the
//! runtime's seedable generator) and, when it runs out, first asks every
//! other voter `PreVote` with the term it would campaign at and its last
//! log id. A receiver grants exactly when openraft would grant the real
//! vote on lease and log ([`decide_grant`]): it does not lead, its
//! committed vote was not touched within `leader_lease` (it hears no
//! leader), and the candidate's last log id is at least its own. The
//! receiver changes nothing. Only with a majority of every configuration
//! (itself included; [`quorum_granted`]) does the node call
//! `trigger().elect()`.
//!
//! # Why this keeps safety and liveness
//!
//! Safety is openraft's: pre-vote only decides *whether* to start an
//! ordinary election, which is always safe. Liveness: a pre-vote is granted
//! on the same conditions as the vote itself except the term, so a
//! candidate a majority would elect gets its pre-votes; the term is left
//! out so that a voter whose term ran ahead (it campaigned while cut off)
//! never blocks a candidate with the longer log (the real vote then lifts
//! the candidate's term, and its next round wins). A refusal for a shorter
//! log by a voter that hears no leader starts the refusing voter's own
//! round at once (rule 1's reason, for pre-votes), so the node that can win
//! runs first. A receiver older than this rule answers `UNIMPLEMENTED`,
//! counted as a grant (a rolling upgrade elects as before).

use std::collections::BTreeSet;
use std::time::Duration;

use openraft::raft::VoteRequest;
use openraft::{LogId, ServerState, Vote};
use rand::Rng;
use tokio::time::Instant;

use super::Campaigns;
pub use crate::network::client::PreVoteAnswer;
use crate::types::NodeId;

/// What a receiver decided about a pre-vote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// It would vote for the candidate.
    Granted,
    /// It leads.
    Leading,
    /// It heard its leader within the lease.
    LeaderHeard,
    /// The candidate's last log id is below its own.
    ShorterLog,
}

/// What a receiver knows of itself when a pre-vote arrives.
#[derive(Clone, Copy, Debug)]
pub struct Mine {
    /// It is the leader.
    pub leading: bool,
    /// Its vote is committed (it follows, or is, an elected leader).
    pub vote_committed: bool,
    /// When its vote was last touched (every append of its leader touches it).
    pub vote_touched: Option<Instant>,
    /// Its last log id.
    pub last_log: Option<LogId<NodeId>>,
}

/// The receiver's rule, on plain values (openraft's `handle_vote_req` on
/// lease and log, without the term).
pub fn decide_grant(
    mine: &Mine,
    candidate_last_log: Option<LogId<NodeId>>,
    lease: Duration,
    now: Instant,
) -> Grant {
    if mine.leading {
        return Grant::Leading;
    }
    let within_lease = mine
        .vote_touched
        .is_some_and(|at| now.saturating_duration_since(at) <= lease);
    if mine.vote_committed && within_lease {
        return Grant::LeaderHeard;
    }
    if candidate_last_log < mine.last_log {
        return Grant::ShorterLog;
    }
    Grant::Granted
}

/// Whether `granted` holds a majority of every configuration in `configs`
/// (a joint configuration has two).
pub fn quorum_granted(configs: &[BTreeSet<NodeId>], granted: &BTreeSet<NodeId>) -> bool {
    !configs.is_empty()
        && configs
            .iter()
            .all(|config| config.intersection(granted).count() * 2 > config.len())
}

/// Whether the election timer ran out at `now`: `timeout` (plus the lease
/// while the vote is committed) since the vote was last touched and since
/// this node's last pre-vote round.
pub fn timer_due(
    now: Instant,
    vote_committed: bool,
    vote_touched: Option<Instant>,
    last_round: Option<Instant>,
    lease: Duration,
    timeout: Duration,
) -> bool {
    let wait = if vote_committed {
        lease + timeout
    } else {
        timeout
    };
    let since = vote_touched.max(last_round);
    since.is_none_or(|since| now.saturating_duration_since(since) >= wait)
}

/// Draws one round's election timeout from `[min, max)` with the runtime's
/// seedable generator (as openraft's `new_rand_election_timeout` does).
pub fn draw_timeout(min: Duration, max: Duration) -> Duration {
    let min_ms = u64::try_from(min.as_millis()).unwrap_or(u64::MAX);
    let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    if max_ms <= min_ms {
        return min;
    }
    Duration::from_millis(crate::runtime::ThreadRng.gen_range(min_ms..max_ms))
}

/// What one look of the election timer saw (read from raft's core).
pub(super) struct Look {
    pub state: ServerState,
    pub vote: Vote<NodeId>,
    pub vote_touched: Option<Instant>,
    pub voter: bool,
    pub configs: Vec<BTreeSet<NodeId>>,
}

impl Campaigns {
    /// Answers a candidate's `PreVote`; changes nothing here. A refusal for
    /// a shorter log while this node hears no leader starts this node's
    /// own round at once.
    pub async fn answer_pre_vote(&self, req: &VoteRequest<NodeId>) -> PreVoteAnswer {
        let Some(look) = self.look().await else {
            return PreVoteAnswer { granted: false };
        };
        let mine = Mine {
            leading: look.state == ServerState::Leader,
            vote_committed: look.vote.is_committed(),
            vote_touched: look.vote_touched,
            last_log: (self.inner.last_log)().await,
        };
        let grant = decide_grant(&mine, req.last_log_id, self.inner.lease, Instant::now());
        tracing::debug!(candidate = %req.vote, ?grant, "pre-vote answered");
        if grant == Grant::ShorterLog && look.voter && !self.inner.hold.is_held() {
            let this = self.clone();
            tokio::spawn(async move { this.round_now().await });
        }
        PreVoteAnswer {
            granted: grant == Grant::Granted,
        }
    }

    /// Reads what the timer needs from raft's core; None once raft stopped.
    pub(super) async fn look(&self) -> Option<Look> {
        let me = self.inner.me;
        self.inner
            .raft
            .with_raft_state(move |st| {
                let membership = st.membership_state.effective().membership();
                Look {
                    state: st.server_state,
                    vote: *st.vote_ref(),
                    vote_touched: st.vote_last_modified(),
                    voter: membership.voter_ids().any(|id| id == me),
                    configs: membership.get_joint_config().clone(),
                }
            })
            .await
            .ok()
    }

    /// The timer's look at `now`: when it ran out, runs a pre-vote round and
    /// campaigns on a majority.
    pub(super) async fn timer_look(&self, now: Instant) {
        let Some(look) = self.look().await else {
            return;
        };
        if look.state == ServerState::Leader || !look.voter || self.inner.hold.is_held() {
            return;
        }
        let alone = look
            .configs
            .iter()
            .all(|c| c.len() == 1 && c.contains(&self.inner.me));
        if alone {
            // The only voter elects at once, as openraft's timer does.
            if look.state != ServerState::Candidate {
                self.elect(1).await;
            }
            return;
        }
        let due = {
            let Ok(seen) = self.inner.seen.lock() else {
                return;
            };
            timer_due(
                now,
                look.vote.is_committed(),
                look.vote_touched,
                seen.round,
                self.inner.lease,
                seen.timeout,
            )
        };
        if due {
            self.round(look).await;
        }
    }

    /// Runs a round now (a refusal for a shorter log asked for it), unless
    /// one ran within `election_timeout_min`.
    async fn round_now(&self) {
        let recent = self.inner.seen.lock().map_or(true, |seen| {
            seen.round.is_some_and(|at| at.elapsed() < self.inner.quiet)
        });
        if recent {
            return;
        }
        if let Some(look) = self.look().await {
            if look.state != ServerState::Leader && look.voter {
                self.round(look).await;
            }
        }
    }

    /// One pre-vote round at the term after `look.vote`'s; campaigns when a
    /// majority of every configuration grants.
    async fn round(&self, look: Look) {
        if let Ok(mut seen) = self.inner.seen.lock() {
            seen.round = Some(Instant::now());
            seen.timeout = draw_timeout(self.inner.quiet, self.inner.lease);
        }
        let me = self.inner.me;
        let term = look.vote.leader_id().term + 1;
        let req = VoteRequest::new(Vote::new(term, me), (self.inner.last_log)().await);
        let mut granted: BTreeSet<NodeId> = BTreeSet::from([me]);
        let voters: BTreeSet<NodeId> = look.configs.iter().flatten().copied().collect();
        let addrs = self.addresses(&voters);
        // Dropped (every unanswered call aborted) once a majority granted.
        let mut calls = tokio::task::JoinSet::new();
        for (id, addr) in addrs {
            let channels = self.inner.channels.clone();
            let req = req.clone();
            let deadline = self.inner.lease;
            calls.spawn(async move { (id, channels.pre_vote(id, &addr, &req, deadline).await) });
        }
        let mut refused = Vec::new();
        while !quorum_granted(&look.configs, &granted) {
            let Some(Ok((id, answer))) = calls.join_next().await else {
                break;
            };
            match answer {
                Ok(true) => {
                    granted.insert(id);
                }
                Ok(false) => refused.push(id),
                Err(e) => tracing::debug!(peer = id, error = %e, "pre-vote not answered"),
            }
        }
        if quorum_granted(&look.configs, &granted) {
            tracing::info!(term, granted = ?granted, "election timer ran out and a majority granted the pre-vote: campaigning");
            self.elect(1).await;
        } else {
            tracing::info!(term, granted = ?granted, refused = ?refused, "election timer ran out, but no majority granted the pre-vote: not campaigning");
        }
    }

    /// The peer addresses of `voters` other than this node, from raft's
    /// membership.
    fn addresses(&self, voters: &BTreeSet<NodeId>) -> Vec<(NodeId, String)> {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        m.membership_config
            .membership()
            .nodes()
            .filter(|(id, _)| **id != self.inner.me && voters.contains(id))
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;

    use super::*;

    const LEASE: Duration = Duration::from_millis(300);

    fn log(term: u64, index: u64) -> Option<LogId<NodeId>> {
        Some(LogId::new(CommittedLeaderId::new(term, 1), index))
    }

    fn follower(touched_ago: Duration, last_log: Option<LogId<NodeId>>, now: Instant) -> Mine {
        Mine {
            leading: false,
            vote_committed: true,
            vote_touched: now.checked_sub(touched_ago),
            last_log,
        }
    }

    /// The throttled node's case: its peers still hear their leader, so
    /// they refuse, and it never raises its term.
    #[test]
    fn a_voter_that_hears_its_leader_or_leads_refuses() {
        let now = Instant::now();
        let hearing = follower(Duration::from_millis(50), log(3, 10), now);
        assert_eq!(
            decide_grant(&hearing, log(3, 10), LEASE, now),
            Grant::LeaderHeard
        );
        let leader = Mine {
            leading: true,
            ..hearing
        };
        assert_eq!(
            decide_grant(&leader, log(3, 99), LEASE, now),
            Grant::Leading
        );
    }

    #[test]
    fn a_voter_past_its_lease_grants_a_log_at_least_its_own_and_refuses_a_shorter_one() {
        let now = Instant::now();
        let lost = follower(Duration::from_millis(400), log(3, 10), now);
        assert_eq!(decide_grant(&lost, log(3, 10), LEASE, now), Grant::Granted);
        assert_eq!(decide_grant(&lost, log(4, 2), LEASE, now), Grant::Granted);
        assert_eq!(
            decide_grant(&lost, log(3, 9), LEASE, now),
            Grant::ShorterLog
        );
        assert_eq!(decide_grant(&lost, None, LEASE, now), Grant::ShorterLog);
    }

    /// A voter that voted for a candidate (uncommitted) has no lease: it
    /// grants, as openraft grants the real vote of a later term.
    #[test]
    fn an_uncommitted_vote_holds_no_lease() {
        let now = Instant::now();
        let voted = Mine {
            vote_committed: false,
            ..follower(Duration::ZERO, log(3, 10), now)
        };
        assert_eq!(decide_grant(&voted, log(3, 10), LEASE, now), Grant::Granted);
    }

    fn set(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    #[test]
    fn a_quorum_is_a_majority_of_every_configuration() {
        let three = vec![set(&[1, 2, 3])];
        assert!(!quorum_granted(&three, &set(&[1])));
        assert!(quorum_granted(&three, &set(&[1, 3])));
        let joint = vec![set(&[1, 2, 3]), set(&[3, 4, 5])];
        assert!(!quorum_granted(&joint, &set(&[1, 2])));
        assert!(quorum_granted(&joint, &set(&[1, 3, 4])));
        let four = vec![set(&[1, 2, 3, 4])];
        assert!(!quorum_granted(&four, &set(&[1, 2])));
        assert!(!quorum_granted(&[], &set(&[1])));
    }

    #[test]
    fn the_timer_waits_the_lease_too_while_the_vote_is_committed() {
        let now = Instant::now();
        let timeout = Duration::from_millis(200);
        let ago = |ms| now.checked_sub(Duration::from_millis(ms));
        assert!(!timer_due(now, true, ago(400), None, LEASE, timeout));
        assert!(timer_due(now, true, ago(500), None, LEASE, timeout));
        assert!(timer_due(now, false, ago(200), None, LEASE, timeout));
        // A round that just ran waits a whole timeout again.
        assert!(!timer_due(now, false, ago(900), ago(100), LEASE, timeout));
        assert!(timer_due(now, false, None, None, LEASE, timeout));
    }

    #[test]
    fn a_drawn_timeout_stays_within_its_range() {
        let (min, max) = (Duration::from_millis(150), Duration::from_millis(300));
        for _ in 0..100 {
            let t = draw_timeout(min, max);
            assert!(t >= min && t < max, "{t:?}");
        }
        assert_eq!(draw_timeout(max, min), max);
    }
}

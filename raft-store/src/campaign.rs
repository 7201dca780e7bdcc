//! Elections openraft 0.9 leaves for later: the two rules that bring a
//! dead or stopped leader's successor in one vote round.
//!
//! Measured with `openshell-bench failover` (docs/benchmarks.md
//! "Failover"): every kill -9 and SIGSTOP window over 1 s (1.1-1.8 s, the
//! others 0.5-0.65 s) was an election that needed a second or third round,
//! for one of two reasons, both read from the gateways' logs.
//!
//! 1. **The first candidate holds the shorter log.** Under load the
//!    followers' logs differ by the leader's last appends. The follower
//!    whose timer fires first is refused by the one with the longer log
//!    (Raft's election restriction), and nothing else happens until the
//!    refusing follower's own timer fires (`leader_lease +
//!    election_timeout` after it last heard the leader) and it campaigns at
//!    the *same* term the first candidate already voted for itself in,
//!    which is refused too; a third round wins. **Rule:** after the vote
//!    handler refused a candidate whose last log id is below this node's, at
//!    a term above this node's, while this node has not heard a leader for
//!    `election_timeout_min`, the node campaigns at once at one term above
//!    the candidate's (so the candidate, whose own vote is at its term, can
//!    grant it): the node with the longer log wins the election the first
//!    candidate started, one vote round trip after it ([`decide`]).
//! 2. **A stale "smaller log" flag.** A candidate refused for its shorter
//!    log sets openraft's `seen_greater_log`, which adds `2 ×
//!    election_timeout_max` to its election timer, and only that node's own
//!    timer-driven election clears it: a node that lost one election that
//!    way keeps the slower timer through every later leader. With both
//!    survivors flagged, no one campaigns for `leader_lease +
//!    election_timeout + 2 × election_timeout_max` (1.05-1.2 s at the
//!    defaults). **Rule (backstop):** a voter that is not leader, not held
//!    by a leadership transfer, and has heard no leader, changed no vote and
//!    campaigned for `2 × election_timeout_max + jitter` (jitter: a share
//!    of `election_timeout_min` by node id, [`backstop_jitter`])
//!    campaigns. openraft's unflagged timer (`leader_lease +
//!    election_timeout`, below `2 × election_timeout_max`) fires first
//!    whenever it can; the backstop only replaces the flagged one.
//!
//! Both campaign through openraft's public `trigger().elect()`. Why that is
//! safe: an election is always safe in Raft (a candidate wins only with a
//! majority's votes, each given to a log at least as long as the voter's);
//! only liveness is at stake, and the conditions keep it:
//! - a follower that heard a leader within `election_timeout_min` (three
//!   heartbeats at the defaults) never campaigns by rule 1, and within `2 ×
//!   election_timeout_max` never by rule 2, so a live leader is not deposed;
//! - a candidate more than two terms above this node (a node that was cut
//!   off and kept campaigning) does not set off rule 1;
//! - at most one campaign by these rules per `election_timeout_min`, none
//!   while a leadership transfer holds this node's elections
//!   ([`ElectionHold`]), none by a learner or the leader.
//!
//! Time this node did not run (its look, every tick, came more than two
//! ticks after the one before: a stopped process, a starved runtime, a
//! stalled machine) counts for neither rule: every instant the rules keep
//! moves that much later ([`Campaigns`]'s backstop loop), so a follower
//! that ran again after a stall of the whole machine gives the leader,
//! which stalled too, a heartbeat's chance before it campaigns.
//!
//! By rule 1 the candidate's higher term has already ended the old
//! leader's term at that candidate; the campaign only makes the node that
//! can win run now.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::RaftError;
use openraft::raft::{AppendEntriesResponse, VoteRequest, VoteResponse};
use openraft::{ServerState, Vote};
use tokio::time::Instant;

use crate::leadership::ElectionHold;
use crate::types::typ::Raft;
use crate::types::NodeId;

/// The furthest a candidate's term may be above this node's for it to set
/// off a campaign by rule 1 (a candidate one term up is the usual case).
const MAX_TERM_GAP: u64 = 2;

/// What the two rules of the module docs watch, for one node. Cloning
/// shares it.
#[derive(Clone)]
pub struct Campaigns {
    inner: Arc<Inner>,
}

struct Inner {
    raft: Raft,
    me: NodeId,
    hold: ElectionHold,
    /// `election_timeout_min`: how long without a leader's append before a
    /// refusal may set off a campaign (rule 1), and the least time between
    /// two campaigns by these rules.
    quiet: Duration,
    /// `2 × election_timeout_max + jitter` (rule 2).
    backstop: Duration,
    /// How often rule 2 looks (openraft's own tick).
    tick: Duration,
    seen: Mutex<Seen>,
}

/// What this node last saw.
#[derive(Default)]
struct Seen {
    /// When an AppendEntries from a leader it follows was last taken.
    leader_contact: Option<Instant>,
    /// When it last campaigned by these rules.
    campaigned: Option<Instant>,
    /// Its vote at the last look of rule 2, and when that vote was first
    /// seen.
    vote: Option<(Vote<NodeId>, Instant)>,
}

impl Seen {
    /// This node did not run for `lost` before `now` (its process or
    /// runtime was stopped or starved): every instant it keeps moves
    /// `lost` later, never past `now`, so that time counts neither as time
    /// without a leader nor as time since a vote or a campaign.
    fn discount(&mut self, lost: Duration, now: Instant) {
        let later = |at: &mut Instant| *at = at.checked_add(lost).unwrap_or(now).min(now);
        if let Some(at) = self.leader_contact.as_mut() {
            later(at);
        }
        if let Some(at) = self.campaigned.as_mut() {
            later(at);
        }
        if let Some((_, at)) = self.vote.as_mut() {
            later(at);
        }
    }
}

/// Why a refused vote did not set off a campaign (rule 1), or that it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Granted, or refused for another reason than a shorter log at a
    /// higher term.
    NotApplicable,
    /// The candidate's term is more than [`MAX_TERM_GAP`] above this node's.
    TermTooFar,
    /// A leader was heard within `election_timeout_min`.
    LeaderHeard,
    /// This node campaigned by these rules within `election_timeout_min`.
    CampaignedRecently,
    /// A leadership transfer holds this node's elections.
    Held,
    /// Campaign: `elections` successive elections, to reach the candidate's
    /// term plus one.
    Campaign {
        /// How many `trigger().elect()` calls.
        elections: u64,
    },
}

impl Campaigns {
    /// The rules for `raft`'s node `me`, with its timing; `hold` is the
    /// node's election hold.
    pub fn new(
        raft: Raft,
        me: NodeId,
        hold: ElectionHold,
        heartbeat_interval: Duration,
        election_timeout_min: Duration,
        election_timeout_max: Duration,
    ) -> Self {
        let jitter = backstop_jitter(me, election_timeout_min);
        Campaigns {
            inner: Arc::new(Inner {
                raft,
                me,
                hold,
                quiet: election_timeout_min,
                backstop: election_timeout_max * 2 + jitter,
                tick: heartbeat_interval * 3 / 2,
                seen: Mutex::new(Seen::default()),
            }),
        }
    }

    /// Notes an AppendEntries as it arrives, before raft answers it: one
    /// that raft takes (see [`follows`]) is contact with a leader. Noting
    /// only answers missed them whenever the leader gave up waiting:
    /// openraft 0.9 waits one heartbeat interval (50 ms) for an
    /// AppendEntries, a follower slower than that (an fsync of large
    /// entries on a loaded machine) answers none in time, the dropped
    /// request never reaches [`Campaigns::appended`], and rule 2 deposed a
    /// live leader 637 ms later while raft's own timer, reset by every one
    /// of those requests, stayed quiet (gateway-plugin `t81` under
    /// `scripts/flake-loop.sh`).
    pub fn append_arrived(&self, vote: &Vote<NodeId>) {
        let current = self.inner.raft.metrics().borrow().vote;
        if follows(vote, &current) {
            if let Ok(mut seen) = self.inner.seen.lock() {
                seen.leader_contact = Some(Instant::now());
            }
        }
    }

    /// Notes an AppendEntries answered by raft: any answer but a higher vote
    /// means this node follows the sender.
    pub fn appended(&self, result: &Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>) {
        if matches!(result, Ok(resp) if !matches!(resp, AppendEntriesResponse::HigherVote(_))) {
            if let Ok(mut seen) = self.inner.seen.lock() {
                seen.leader_contact = Some(Instant::now());
            }
        }
    }

    /// Rule 1, after raft answered `req` with `result`: campaigns when the
    /// rule says so, and tells what it decided. It only queues elections on
    /// raft's core (it does not wait for them).
    pub async fn voted(
        &self,
        req: &VoteRequest<NodeId>,
        result: &Result<VoteResponse<NodeId>, RaftError<NodeId>>,
    ) -> Verdict {
        let Ok(resp) = result else {
            return Verdict::NotApplicable;
        };
        let now = Instant::now();
        let verdict = match self.inner.seen.lock() {
            Ok(mut seen) => {
                let verdict = decide(
                    req,
                    resp,
                    self.inner.quiet,
                    now,
                    seen.leader_contact,
                    seen.campaigned,
                );
                let verdict = match verdict {
                    Verdict::Campaign { .. } if self.inner.hold.is_held() => Verdict::Held,
                    other => other,
                };
                if matches!(verdict, Verdict::Campaign { .. }) {
                    seen.campaigned = Some(now);
                }
                verdict
            }
            Err(_) => Verdict::NotApplicable,
        };
        let Verdict::Campaign { elections } = verdict else {
            return verdict;
        };
        tracing::info!(
            candidate = %req.vote,
            candidate_last_log = ?req.last_log_id,
            my_vote = %resp.vote,
            my_last_log = ?resp.last_log_id,
            elections,
            "refused a candidate with a shorter log while no leader is heard: campaigning at once"
        );
        self.elect(elections).await;
        verdict
    }

    /// Rule 2 until raft stops: looks every tick. Spawned once per node.
    pub fn start_backstop(&self) {
        let this = self.clone();
        tokio::spawn(async move {
            let mut metrics = this.inner.raft.metrics();
            let mut tick = tokio::time::interval(this.inner.tick);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut looked = Instant::now();
            loop {
                tick.tick().await;
                let now = Instant::now();
                this.not_running_since(looked, now);
                looked = now;
                // Raft stopped: its metrics channel closed.
                if metrics.has_changed().is_err() {
                    return;
                }
                let (state, vote, voter) = {
                    let m = metrics.borrow_and_update();
                    let voter = m
                        .membership_config
                        .membership()
                        .voter_ids()
                        .any(|id| id == this.inner.me);
                    (m.state, m.vote, voter)
                };
                if this.backstop_due(state, vote, voter, Instant::now()) {
                    tracing::info!(
                        after = ?this.inner.backstop,
                        vote = %vote,
                        "no leader heard, no vote changed, no campaign: campaigning (openraft's timer is held back by a stale smaller-log flag)"
                    );
                    this.elect(1).await;
                }
            }
        });
    }

    /// Rule 2's look at `now`, the one before at `looked`: a gap of more
    /// than two ticks means this node did not run (a stopped process, a
    /// starved runtime, a stalled machine), and it cannot have heard a
    /// leader that spoke meanwhile; the time past one tick is not counted
    /// ([`Seen::discount`]). Without it, a stall of the whole machine
    /// (every gateway silent for 0.5-0.8 s, docs/benchmarks.md "2026-12-07:
    /// a stalled node is not a leaderless one") set off the backstop on
    /// every follower the moment it ran again, before the leader, which
    /// had stalled too, could send a heartbeat.
    fn not_running_since(&self, looked: Instant, now: Instant) {
        let gap = now.saturating_duration_since(looked);
        if gap <= self.inner.tick * 2 {
            return;
        }
        let lost = gap.saturating_sub(self.inner.tick);
        if let Ok(mut seen) = self.inner.seen.lock() {
            seen.discount(lost, now);
        }
        tracing::info!(
            lost_ms = lost.as_millis() as u64,
            "this node did not run for a while: that time is not counted as time without a leader"
        );
    }

    /// Rule 2 at `now` for a node in `state` with `vote`; notes the vote and,
    /// when due, the campaign.
    fn backstop_due(
        &self,
        state: ServerState,
        vote: Vote<NodeId>,
        voter: bool,
        now: Instant,
    ) -> bool {
        let Ok(mut seen) = self.inner.seen.lock() else {
            return false;
        };
        if seen.vote.as_ref().map(|(v, _)| v) != Some(&vote) {
            seen.vote = Some((vote, now));
        }
        if state == ServerState::Leader {
            // A leader hears itself: after it steps down the rule waits a
            // whole backstop.
            seen.leader_contact = Some(now);
            return false;
        }
        if !voter || self.inner.hold.is_held() {
            return false;
        }
        let last = [
            seen.leader_contact,
            seen.campaigned,
            seen.vote.as_ref().map(|(_, at)| *at),
        ]
        .into_iter()
        .flatten()
        .max();
        let due =
            last.is_some_and(|last| now.saturating_duration_since(last) >= self.inner.backstop);
        if due {
            seen.campaigned = Some(now);
        }
        due
    }

    async fn elect(&self, elections: u64) {
        for _ in 0..elections {
            if let Err(e) = self.inner.raft.trigger().elect().await {
                tracing::warn!(error = %e, "campaign failed");
                break;
            }
        }
    }
}

/// The backstop's jitter for node `me`: a share of `election_timeout_min`
/// that differs for any 8 consecutive node ids (`me × 5 mod 8` eighths), so
/// two flagged survivors never fire together. Derived, not drawn: drawing
/// from the runtime's generator would shift every election timeout drawn
/// after it, and with it every simulated schedule.
pub fn backstop_jitter(me: NodeId, election_timeout_min: Duration) -> Duration {
    let eighths = u32::try_from(me.wrapping_mul(5) % 8).unwrap_or(0);
    election_timeout_min * eighths / 8
}

/// Whether raft takes an AppendEntries sent at `vote` by a node whose own
/// vote is `current`: a committed vote (a leader's) of the same leader, or
/// of a higher term. Compared by hand, not with `Vote`'s `PartialOrd`,
/// which panics on two committed votes of different leaders in one term (a
/// peer's bug must not stop this node).
pub fn follows(vote: &Vote<NodeId>, current: &Vote<NodeId>) -> bool {
    vote.is_committed()
        && (vote.leader_id().term > current.leader_id().term
            || vote.leader_id() == current.leader_id())
}

/// Rule 1 on plain values: `heard` is when a leader was last heard,
/// `campaigned` when this node last campaigned by these rules.
pub fn decide(
    req: &VoteRequest<NodeId>,
    resp: &VoteResponse<NodeId>,
    quiet: Duration,
    now: Instant,
    heard: Option<Instant>,
    campaigned: Option<Instant>,
) -> Verdict {
    let candidate_term = req.vote.leader_id().term;
    let my_term = resp.vote.leader_id().term;
    if resp.vote_granted || resp.last_log_id <= req.last_log_id || candidate_term <= my_term {
        return Verdict::NotApplicable;
    }
    if candidate_term - my_term > MAX_TERM_GAP {
        return Verdict::TermTooFar;
    }
    let within =
        |at: Option<Instant>| at.is_some_and(|at| now.saturating_duration_since(at) < quiet);
    if within(heard) {
        return Verdict::LeaderHeard;
    }
    if within(campaigned) {
        return Verdict::CampaignedRecently;
    }
    Verdict::Campaign {
        elections: candidate_term + 1 - my_term,
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, LogId, Vote};

    use super::*;

    const QUIET: Duration = Duration::from_millis(150);

    /// An append from this node's leader, or from a leader of a later term,
    /// is contact; a candidate's, an older term's, or another leader's in
    /// the same term (which only a bug could send) is not, and does not
    /// panic.
    #[test]
    fn only_an_append_raft_takes_is_contact_with_a_leader() {
        let leader_2_at_5 = Vote::new_committed(5, 2);
        assert!(follows(&Vote::new_committed(5, 2), &leader_2_at_5));
        assert!(follows(&Vote::new_committed(6, 3), &leader_2_at_5));
        assert!(follows(&Vote::new_committed(5, 2), &Vote::new(5, 2)));
        assert!(!follows(&Vote::new(6, 3), &leader_2_at_5));
        assert!(!follows(&Vote::new_committed(4, 2), &leader_2_at_5));
        assert!(!follows(&Vote::new_committed(5, 3), &leader_2_at_5));
    }

    fn log(term: u64, index: u64) -> Option<LogId<NodeId>> {
        Some(LogId::new(CommittedLeaderId::new(term, 2), index))
    }

    /// Node 3 campaigns at term 4 with its log at 3-100; this node (1)
    /// followed node 2's term 3.
    fn candidate(last: Option<LogId<NodeId>>) -> VoteRequest<NodeId> {
        VoteRequest::new(Vote::new(4, 3), last)
    }

    fn refused(my_term: u64, my_last: Option<LogId<NodeId>>) -> VoteResponse<NodeId> {
        VoteResponse::new(Vote::new_committed(my_term, 2), my_last, false)
    }

    #[test]
    fn a_longer_log_with_no_leader_heard_campaigns_one_term_above_the_candidate() {
        let now = Instant::now();
        let long_ago = now.checked_sub(Duration::from_millis(500));
        let verdict = decide(
            &candidate(log(3, 100)),
            &refused(3, log(3, 101)),
            QUIET,
            now,
            long_ago,
            None,
        );
        assert_eq!(verdict, Verdict::Campaign { elections: 2 });
        // Never heard any leader (a restarted node): the same.
        let verdict = decide(
            &candidate(log(3, 100)),
            &refused(3, log(3, 101)),
            QUIET,
            now,
            None,
            None,
        );
        assert_eq!(verdict, Verdict::Campaign { elections: 2 });
    }

    #[test]
    fn an_equal_or_shorter_log_a_granted_vote_or_no_higher_term_does_nothing() {
        let now = Instant::now();
        let equal = decide(
            &candidate(log(3, 100)),
            &refused(3, log(3, 100)),
            QUIET,
            now,
            None,
            None,
        );
        assert_eq!(equal, Verdict::NotApplicable);
        let shorter = decide(
            &candidate(log(3, 100)),
            &refused(3, log(3, 99)),
            QUIET,
            now,
            None,
            None,
        );
        assert_eq!(shorter, Verdict::NotApplicable);
        let granted = VoteResponse::new(Vote::new(4, 3), log(3, 101), true);
        assert_eq!(
            decide(&candidate(log(3, 100)), &granted, QUIET, now, None, None),
            Verdict::NotApplicable
        );
        // This node already is at the candidate's term (it campaigned too).
        let same_term = VoteResponse::new(Vote::new(4, 1), log(3, 101), false);
        assert_eq!(
            decide(&candidate(log(3, 100)), &same_term, QUIET, now, None, None),
            Verdict::NotApplicable
        );
    }

    #[test]
    fn time_this_node_did_not_run_counts_for_nothing() {
        let now = Instant::now();
        let ago = |ms| now.checked_sub(Duration::from_millis(ms));
        let mut seen = Seen {
            leader_contact: ago(700),
            campaigned: ago(100),
            vote: ago(900).map(|at| (Vote::new_committed(1, 1), at)),
        };
        // 650 ms not running: the contact 700 ms ago counts as 50 ms ago,
        // the campaign and the vote no later than now.
        seen.discount(Duration::from_millis(650), now);
        assert_eq!(seen.leader_contact, ago(50));
        assert_eq!(seen.campaigned, Some(now));
        assert_eq!(seen.vote.map(|(_, at)| at), ago(250));
        let mut nothing = Seen::default();
        nothing.discount(Duration::from_secs(1), now);
        assert!(nothing.leader_contact.is_none() && nothing.campaigned.is_none());
    }

    #[test]
    fn the_backstop_jitter_differs_for_eight_consecutive_ids_and_stays_below_the_minimum() {
        let jitters: std::collections::BTreeSet<Duration> =
            (1..=8).map(|id| backstop_jitter(id, QUIET)).collect();
        assert_eq!(jitters.len(), 8);
        assert!(jitters.iter().all(|j| *j < QUIET));
    }

    #[test]
    fn a_leader_heard_recently_a_far_term_or_a_recent_campaign_holds_it_back() {
        let now = Instant::now();
        let just_now = now.checked_sub(Duration::from_millis(40));
        let heard = decide(
            &candidate(log(3, 100)),
            &refused(3, log(3, 101)),
            QUIET,
            now,
            just_now,
            None,
        );
        assert_eq!(heard, Verdict::LeaderHeard);
        let recent = decide(
            &candidate(log(3, 100)),
            &refused(3, log(3, 101)),
            QUIET,
            now,
            None,
            just_now,
        );
        assert_eq!(recent, Verdict::CampaignedRecently);
        let far = decide(
            &candidate(log(3, 100)),
            &refused(1, log(3, 101)),
            QUIET,
            now,
            None,
            None,
        );
        assert_eq!(far, Verdict::TermTooFar);
    }
}

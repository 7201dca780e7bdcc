//! Every election this node starts on its own (a leadership transfer's
//! campaign aside): openraft 0.9's election timer is off, and the two rules
//! here bring a dead or stopped leader's successor in one vote round.
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
//! 2. **openraft's election timer counts time it did not run, and keeps a
//!    stale "smaller log" flag.** A candidate refused for its shorter log
//!    sets openraft's `seen_greater_log`, which adds `2 ×
//!    election_timeout_max` to its timer, and only that node's own
//!    timer-driven election clears it: with both survivors flagged, no one
//!    campaigned for `leader_lease + election_timeout + 2 ×
//!    election_timeout_max` (1.05-1.2 s at the defaults). And after a stall
//!    of the whole machine (every gateway silent for 0.5-1.3 s at 100,000
//!    sandboxes, docs/benchmarks.md "2026-12-07: a stalled node is not a
//!    leaderless one") the timer fired on every follower the moment it ran
//!    again, before the leader, which had stalled too, could send a
//!    heartbeat: an election storm that did not settle. **Rule (election
//!    timer):** openraft's timer is off (`Config::enable_elect = false`,
//!    [`crate::config`]) and this module's replaces it, at openraft's
//!    timing: a voter that is not leader and not held by a leadership
//!    transfer campaigns when it has heard no leader, changed no vote and
//!    campaigned for `leader_lease + election_timeout` while its vote is a
//!    leader's (committed), or for `election_timeout` after a vote it gave
//!    or a campaign of its own; `leader_lease` is `election_timeout_max`,
//!    and `election_timeout` is drawn from
//!    `election_timeout_min..election_timeout_max` by the runtime's
//!    generator ([`crate::runtime`]), so a simulated schedule still follows
//!    its seed, and drawn again after every vote change and campaign
//!    ([`Timer::redraw`]). The timer wakes at its deadline, not on a grid
//!    of ticks, and a vote this node grants is noted as the transport
//!    answers it. The only voter of a group campaigns at once, as
//!    openraft's timer does.
//!
//! Both campaign through openraft's public `trigger().elect()`. Why that is
//! safe: an election is always safe in Raft (a candidate wins only with a
//! majority's votes, each given to a log at least as long as the voter's);
//! only liveness is at stake, and the conditions keep it:
//! - a follower that heard a leader within `election_timeout_min` (three
//!   heartbeats at the defaults) never campaigns by rule 1, and within
//!   `leader_lease + election_timeout` never by rule 2, the time in which
//!   openraft's timer would not have campaigned either, so a live leader is
//!   not deposed;
//! - a candidate more than two terms above this node (a node that was cut
//!   off and kept campaigning) does not set off rule 1;
//! - at most one campaign by these rules per `election_timeout_min`, none
//!   while a leadership transfer holds this node's elections
//!   ([`ElectionHold`]), none by a learner or the leader.
//!
//! Time this node did not run (rule 2's look, due every tick or at its
//! deadline, came more than a tick late: a stopped process, a starved
//! runtime, a stalled machine) counts for neither rule: every instant the rules keep
//! moves that much later ([`Campaigns`]'s timer loop), so a follower
//! that ran again after a stall of the whole machine gives the leader,
//! which stalled too, a heartbeat's chance before it campaigns. A voter
//! still grants a candidate's vote once openraft's own lease on the leader
//! (not discounted) ran out: only the decision to campaign waits.
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
    /// How often rule 2 looks at least (openraft's own tick); it also
    /// wakes at its deadline.
    tick: Duration,
    seen: Mutex<Seen>,
}

/// Rule 2's timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timer {
    /// openraft's leader lease (`election_timeout_max`): how long a voter
    /// refuses candidates after its leader's last append.
    pub lease: Duration,
    /// `election_timeout_min`, the least timeout drawn.
    pub min: Duration,
    /// The current election timeout, in `min .. lease`, drawn again after
    /// every vote change and campaign.
    pub election_timeout: Duration,
}

impl Timer {
    /// The timing of a node with these bounds, its first timeout drawn
    /// from `draw` (see the module doc).
    pub fn drawn(
        election_timeout_min: Duration,
        election_timeout_max: Duration,
        draw: &mut impl rand::Rng,
    ) -> Self {
        let mut timer = Timer {
            lease: election_timeout_max,
            min: election_timeout_min,
            election_timeout: election_timeout_min,
        };
        timer.redraw(draw);
        timer
    }

    /// Draws the election timeout again, uniformly in `min .. lease` by
    /// the millisecond. Drawn again after every vote change and every
    /// campaign (as etcd's raft does at every term), so two voters whose
    /// timers ran out together do not run out together again (a fixed
    /// timeout per start kept two survivors campaigning in the same
    /// millisecond, each refusing the other, for 7.7 s of a failover run).
    pub fn redraw(&mut self, draw: &mut impl rand::Rng) {
        let min = u64::try_from(self.min.as_millis()).unwrap_or(u64::MAX);
        let max = u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX);
        let ms = if max > min {
            draw.gen_range(min..max)
        } else {
            min
        };
        self.election_timeout = Duration::from_millis(ms);
    }

    /// How long without a leader, a vote change or a campaign before a
    /// voter campaigns, when its vote is `vote`: a leader's vote keeps its
    /// lease first.
    pub fn wait(&self, vote: &Vote<NodeId>) -> Duration {
        if vote.is_committed() {
            self.lease + self.election_timeout
        } else {
            self.election_timeout
        }
    }
}

/// What this node last saw.
struct Seen {
    /// Rule 2's timing.
    timer: Timer,
    /// When an AppendEntries from a leader it follows was last taken.
    leader_contact: Option<Instant>,
    /// When it last campaigned by these rules.
    campaigned: Option<Instant>,
    /// Its vote at the last look of rule 2, and when that vote was first
    /// seen.
    vote: Option<(Vote<NodeId>, Instant)>,
}

impl Seen {
    fn new(timer: Timer) -> Self {
        Seen {
            timer,
            leader_contact: None,
            campaigned: None,
            vote: None,
        }
    }

    /// Notes `vote` at `now`: a vote other than the last noted one starts
    /// rule 2's wait again, with a timeout drawn again.
    fn note_vote(&mut self, vote: Vote<NodeId>, now: Instant) {
        if self.vote.as_ref().map(|(v, _)| v) != Some(&vote) {
            self.vote = Some((vote, now));
            self.timer.redraw(&mut crate::runtime::ThreadRng);
        }
    }

    /// Notes a campaign of this node's at `now`.
    fn note_campaign(&mut self, now: Instant) {
        self.campaigned = Some(now);
        self.timer.redraw(&mut crate::runtime::ThreadRng);
    }

    /// When rule 2 campaigns for a node whose vote is `vote`, if nothing
    /// changes meanwhile: a wait after the last leader contact, campaign
    /// or vote change.
    fn deadline(&self, vote: &Vote<NodeId>) -> Option<Instant> {
        let last = [
            self.leader_contact,
            self.campaigned,
            self.vote.as_ref().map(|(_, at)| *at),
        ]
        .into_iter()
        .flatten()
        .max()?;
        last.checked_add(self.timer.wait(vote))
    }

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
        let timer = Timer::drawn(
            election_timeout_min,
            election_timeout_max,
            &mut crate::runtime::ThreadRng,
        );
        Campaigns {
            inner: Arc::new(Inner {
                raft,
                me,
                hold,
                quiet: election_timeout_min,
                tick: heartbeat_interval * 3 / 2,
                seen: Mutex::new(Seen::new(timer)),
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
                if resp.vote_granted {
                    // Noted here, not only at rule 2's next look: the
                    // metrics that look reads may not show the vote yet,
                    // and a timer that ran out just then campaigned over
                    // the candidate it had just voted for.
                    seen.note_vote(resp.vote, now);
                }
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
                    seen.note_campaign(now);
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

    /// Rule 2 (the election timer) until raft stops: looks every tick, and
    /// at its deadline when that comes first (a look only every tick put
    /// every node's timer on a grid of ticks, and two nodes started
    /// together on the same grid). Spawned once per node.
    pub fn start_timer(&self) {
        let this = self.clone();
        tokio::spawn(async move {
            let mut metrics = this.inner.raft.metrics();
            let mut wake = Instant::now() + this.inner.tick;
            loop {
                tokio::time::sleep_until(wake).await;
                let now = Instant::now();
                this.not_running_since(wake, now);
                // Raft stopped: its metrics channel closed.
                if metrics.has_changed().is_err() {
                    return;
                }
                let (state, vote, voters) = {
                    let m = metrics.borrow_and_update();
                    let voters = Voters::of(m.membership_config.membership(), this.inner.me);
                    (m.state, m.vote, voters)
                };
                let look = this.look(state, vote, voters, now);
                if let Look::Campaign { waited } = look {
                    tracing::info!(
                        after = ?waited,
                        vote = %vote,
                        "no leader heard, no vote changed, no campaign: campaigning"
                    );
                    this.elect(1).await;
                }
                let now = Instant::now();
                let next_tick = now + this.inner.tick;
                wake = match look {
                    Look::Wait { until } if until > now => until.min(next_tick),
                    _ => next_tick,
                };
            }
        });
    }

    /// Rule 2's look at `now`, due at `wake`: a look more than a tick late
    /// means this node did not run (a stopped process, a starved runtime, a
    /// stalled machine), and it cannot have heard a leader that spoke
    /// meanwhile; the time past the due look is not counted
    /// ([`Seen::discount`]). Without it, a stall of the whole machine
    /// (every gateway silent for 0.5-0.8 s, docs/benchmarks.md "2026-12-07:
    /// a stalled node is not a leaderless one") set off the timer on every
    /// follower the moment it ran again, before the leader, which had
    /// stalled too, could send a heartbeat.
    fn not_running_since(&self, wake: Instant, now: Instant) {
        let lost = now.saturating_duration_since(wake);
        if lost <= self.inner.tick {
            return;
        }
        if let Ok(mut seen) = self.inner.seen.lock() {
            seen.discount(lost, now);
        }
        tracing::info!(
            lost_ms = lost.as_millis() as u64,
            "this node did not run for a while: that time is not counted as time without a leader"
        );
    }

    /// Rule 2 at `now` for a node in `state` with `vote`; notes the vote and,
    /// when it campaigns, the campaign.
    fn look(&self, state: ServerState, vote: Vote<NodeId>, voters: Voters, now: Instant) -> Look {
        let Ok(mut seen) = self.inner.seen.lock() else {
            return Look::Idle;
        };
        seen.note_vote(vote, now);
        if state == ServerState::Leader {
            // A leader hears itself: after it steps down the rule waits a
            // whole lease and timeout.
            seen.leader_contact = Some(now);
            return Look::Idle;
        }
        if voters == Voters::NotOne || self.inner.hold.is_held() {
            return Look::Idle;
        }
        if voters == Voters::OnlyOne {
            // Nobody else can lead or vote: campaign unless an election of
            // its own is under way (openraft's timer does the same).
            if state == ServerState::Candidate {
                return Look::Idle;
            }
            seen.note_campaign(now);
            return Look::Campaign {
                waited: Duration::ZERO,
            };
        }
        let Some(deadline) = seen.deadline(&vote) else {
            return Look::Idle;
        };
        if now < deadline {
            return Look::Wait { until: deadline };
        }
        let waited = seen.timer.wait(&vote);
        seen.note_campaign(now);
        Look::Campaign { waited }
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

/// What one look of rule 2 decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Look {
    /// Nothing to wait for: a leader, a learner, a held node.
    Idle,
    /// Campaign if nothing changes until then.
    Wait { until: Instant },
    /// Campaign now; the node waited this long without a leader.
    Campaign { waited: Duration },
}

/// What this node is among the voters of its effective membership.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Voters {
    /// Not a voter (a learner, or removed).
    NotOne,
    /// The only voter.
    OnlyOne,
    /// One voter of several.
    OneOfSeveral,
}

impl Voters {
    fn of(membership: &openraft::Membership<NodeId, openraft::BasicNode>, me: NodeId) -> Self {
        let mut ids = membership.voter_ids();
        let (mut mine, mut others) = (false, false);
        for id in ids.by_ref() {
            if id == me {
                mine = true;
            } else {
                others = true;
            }
        }
        match (mine, others) {
            (false, _) => Voters::NotOne,
            (true, false) => Voters::OnlyOne,
            (true, true) => Voters::OneOfSeveral,
        }
    }
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
            ..Seen::new(timer())
        };
        // 650 ms not running: the contact 700 ms ago counts as 50 ms ago,
        // the campaign and the vote no later than now.
        seen.discount(Duration::from_millis(650), now);
        assert_eq!(seen.leader_contact, ago(50));
        assert_eq!(seen.campaigned, Some(now));
        assert_eq!(seen.vote.map(|(_, at)| at), ago(250));
        let mut nothing = Seen::new(timer());
        nothing.discount(Duration::from_secs(1), now);
        assert!(nothing.leader_contact.is_none() && nothing.campaigned.is_none());
    }

    /// Openraft's defaults: 150-300 ms, a lease of 300 ms.
    fn timer() -> Timer {
        use rand::SeedableRng;
        Timer::drawn(
            Duration::from_millis(150),
            Duration::from_millis(300),
            &mut rand::rngs::StdRng::seed_from_u64(1),
        )
    }

    #[test]
    fn the_timer_waits_a_lease_and_a_drawn_timeout_after_a_leader_and_only_the_timeout_after_a_vote(
    ) {
        use rand::SeedableRng;
        let (min, max) = (Duration::from_millis(150), Duration::from_millis(300));
        let mut draws = rand::rngs::StdRng::seed_from_u64(7);
        let mut t = Timer::drawn(min, max, &mut draws);
        let mut timeouts = std::collections::BTreeSet::new();
        for _ in 0..64 {
            assert!(t.lease == max && t.election_timeout >= min && t.election_timeout < max);
            timeouts.insert(t.election_timeout);
            t.redraw(&mut draws);
        }
        // Drawn again each time, not fixed.
        assert!(timeouts.len() > 32, "{timeouts:?}");
        // The same seed draws the same timeouts (a simulated schedule).
        let mut again = rand::rngs::StdRng::seed_from_u64(7);
        assert_eq!(
            Timer::drawn(min, max, &mut again),
            Timer::drawn(min, max, &mut rand::rngs::StdRng::seed_from_u64(7))
        );
        assert_eq!(t.wait(&Vote::new_committed(3, 2)), max + t.election_timeout);
        assert_eq!(t.wait(&Vote::new(4, 3)), t.election_timeout);
        // Equal bounds: the minimum, nothing drawn.
        assert_eq!(Timer::drawn(min, min, &mut draws).election_timeout, min);
    }

    /// The deadline counts from the latest of the leader's last append,
    /// the last campaign and the last vote change; a new vote starts it
    /// again (with a new draw), the same vote seen again does not.
    #[test]
    fn the_deadline_counts_from_the_latest_contact_campaign_or_vote_change() {
        let now = Instant::now();
        let ago = |ms| now.checked_sub(Duration::from_millis(ms));
        let leader = Vote::new_committed(3, 2);
        let mut seen = Seen::new(timer());
        assert_eq!(seen.deadline(&leader), None, "nothing seen yet");
        seen.leader_contact = ago(400);
        seen.campaigned = ago(900);
        seen.vote = ago(1000).map(|at| (leader, at));
        let wait = seen.timer.wait(&leader);
        assert_eq!(seen.deadline(&leader), ago(400).map(|at| at + wait));
        // The same vote again changes nothing.
        seen.note_vote(leader, now);
        assert_eq!(seen.deadline(&leader), ago(400).map(|at| at + wait));
        // A vote given to a candidate: its own, shorter, wait from now.
        let candidate = Vote::new(4, 3);
        seen.note_vote(candidate, now);
        let wait = seen.timer.wait(&candidate);
        assert!(wait < Duration::from_millis(300));
        assert_eq!(seen.deadline(&candidate), Some(now + wait));
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

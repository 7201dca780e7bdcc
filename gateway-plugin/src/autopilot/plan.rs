//! The autopilot's decision, pure: from the leader's view of the membership
//! and the desired voter count, the one membership step to take next (or
//! why none). [`super::Autopilot`] carries it out.

use std::collections::BTreeMap;

/// One member as the leader sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its address in the membership.
    pub addr: String,
    /// Acknowledged this leader's appends recently and is at most a few
    /// entries behind (the leader itself always is).
    pub healthy: bool,
}

/// The leader's view of the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    /// This node (the leader).
    pub me: u64,
    /// Desired voters are `1..=desired` (>= 1).
    pub desired: u64,
    /// Voters by id.
    pub voters: BTreeMap<u64, Member>,
    /// Learners by id.
    pub learners: BTreeMap<u64, Member>,
    /// A joint configuration is in place (a change not finished).
    pub unfinished: bool,
}

/// What the autopilot does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do: the voters are `1..=desired`.
    Idle,
    /// A membership change is not finished: no new change on top of it.
    Unfinished,
    /// Promote this caught-up desired learner.
    Promote(u64),
    /// Remove this member beyond the desired count (`voter`: it votes now).
    Remove {
        /// The node.
        id: u64,
        /// Whether it is a voter (else a learner).
        voter: bool,
    },
    /// This leader is beyond the desired count: hand leadership to `to`
    /// (a healthy desired voter) first; the next leader removes it.
    TransferLeader {
        /// The new leader.
        to: u64,
    },
    /// Desired nodes missing from the membership, lowest first, with their
    /// templated addresses: add the first that answers as itself.
    AddLearner(Vec<u64>),
    /// A change is needed but not safe now; the reason.
    Blocked(String),
}

/// At most this many missing nodes are asked in one pass.
pub const MAX_CANDIDATES: usize = 16;

/// The next step for `view` (see the runbook's "Voter autopilot"):
/// promotions first, then removals beyond the desired count (never leaving
/// fewer than `desired` voters, nor a remaining voter set without a healthy
/// majority), then additions.
pub fn plan(view: &View) -> Step {
    if view.unfinished {
        return Step::Unfinished;
    }
    let desired = view.desired.max(1);
    if let Some((&id, _)) = view
        .learners
        .iter()
        .find(|(id, m)| **id <= desired && m.healthy)
    {
        return Step::Promote(id);
    }
    if let Some((&id, _)) = view.learners.iter().rev().find(|(id, _)| **id > desired) {
        return Step::Remove { id, voter: false };
    }
    let mut blocked = None;
    if let Some(&id) = view.voters.keys().rev().find(|id| **id > desired) {
        match remove_voter(view, id, desired) {
            Ok(step) => return step,
            Err(why) => blocked = Some(why),
        }
    }
    let missing: Vec<u64> = (1..=desired)
        .filter(|id| !view.voters.contains_key(id) && !view.learners.contains_key(id))
        .take(MAX_CANDIDATES)
        .collect();
    if !missing.is_empty() {
        return Step::AddLearner(missing);
    }
    blocked.map_or(Step::Idle, Step::Blocked)
}

/// Removing voter `id` (> desired), or why not now.
fn remove_voter(view: &View, id: u64, desired: u64) -> Result<Step, String> {
    let remaining: Vec<&Member> = view
        .voters
        .iter()
        .filter(|(v, _)| **v != id)
        .map(|(_, m)| m)
        .collect();
    if (remaining.len() as u64) < desired {
        return Err(format!(
            "node {id} is beyond the desired {desired} voters, but removing it would leave {} voters: \
             waiting for the missing desired nodes to join first",
            remaining.len()
        ));
    }
    let healthy = remaining.iter().filter(|m| m.healthy).count();
    if healthy * 2 <= remaining.len() {
        return Err(format!(
            "node {id} is beyond the desired {desired} voters, but only {healthy} of the {} voters \
             left after removing it are caught up: removing it now could cost the quorum",
            remaining.len()
        ));
    }
    if id != view.me {
        return Ok(Step::Remove { id, voter: true });
    }
    view.voters
        .iter()
        .find(|(v, m)| **v <= desired && m.healthy)
        .map(|(&to, _)| Step::TransferLeader { to })
        .ok_or_else(|| {
            format!(
                "this leader (node {id}) is beyond the desired {desired} voters, but no desired voter \
                 is caught up to take leadership"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(healthy: bool) -> Member {
        Member {
            addr: "a:1".into(),
            healthy,
        }
    }

    fn view(me: u64, desired: u64, voters: &[(u64, bool)], learners: &[(u64, bool)]) -> View {
        View {
            me,
            desired,
            voters: voters.iter().map(|(id, h)| (*id, member(*h))).collect(),
            learners: learners.iter().map(|(id, h)| (*id, member(*h))).collect(),
            unfinished: false,
        }
    }

    #[test]
    fn grows_by_adding_then_promoting() {
        let all = [(1, true), (2, true), (3, true)];
        assert_eq!(plan(&view(1, 3, &all, &[])), Step::Idle);
        assert_eq!(plan(&view(1, 5, &all, &[])), Step::AddLearner(vec![4, 5]));
        assert_eq!(
            plan(&view(1, 5, &all, &[(4, false)])),
            Step::AddLearner(vec![5])
        );
        assert_eq!(plan(&view(1, 5, &all, &[(4, true)])), Step::Promote(4));
        // A learner not caught up is never promoted.
        assert_eq!(plan(&view(1, 4, &all, &[(4, false)])), Step::Idle);
    }

    #[test]
    fn shrinks_learners_then_voters_highest_first() {
        let five = [(1, true), (2, true), (3, true), (4, true), (5, true)];
        assert_eq!(
            plan(&view(1, 3, &five, &[])),
            Step::Remove { id: 5, voter: true }
        );
        assert_eq!(
            plan(&view(1, 3, &five[..4], &[(5, false)])),
            Step::Remove {
                id: 5,
                voter: false
            }
        );
        assert_eq!(
            plan(&view(1, 3, &five[..3], &[(4, true)])),
            Step::Remove {
                id: 4,
                voter: false
            }
        );
    }

    #[test]
    fn a_leader_beyond_the_count_hands_over_first() {
        let five = [(1, false), (2, true), (3, true), (4, true), (5, true)];
        assert_eq!(
            plan(&view(5, 3, &five, &[])),
            Step::TransferLeader { to: 2 }
        );
        let none = [(1, false), (2, false), (3, false), (4, true), (5, true)];
        assert!(matches!(plan(&view(5, 3, &none, &[])), Step::Blocked(_)));
    }

    #[test]
    fn never_fewer_voters_than_desired_nor_without_a_healthy_majority() {
        // Node 3 is missing: 4 stays until 3 joins.
        let v = [(1, true), (2, true), (4, true)];
        assert_eq!(plan(&view(1, 3, &v, &[])), Step::AddLearner(vec![3]));
        // Two of the four left would be down.
        let v = [(1, true), (2, false), (3, false), (4, true), (5, true)];
        assert!(matches!(plan(&view(1, 3, &v, &[])), Step::Blocked(_)));
        // The last voter is never removed.
        assert_eq!(
            plan(&view(2, 0, &[(2, true)], &[])),
            Step::AddLearner(vec![1])
        );
    }

    #[test]
    fn an_unfinished_change_blocks_everything() {
        let mut v = view(1, 5, &[(1, true)], &[]);
        v.unfinished = true;
        assert_eq!(plan(&v), Step::Unfinished);
    }
}

//! An AppendEntries that outlives openraft's wait for it, and what its
//! answer says about the next one (issue 33).
//!
//! openraft 0.9 waits for each AppendEntries (a catch-up batch of up to 300
//! entries as much as a heartbeat) for its heartbeat interval, 50 ms by
//! default, and then drops the call. A follower whose answers take longer
//! (entries and an fsync on a loaded disk, a restarted process catching up,
//! a long link) appends what it got, but its answer never reaches the
//! leader: the leader's view of it never moves, and with the other
//! followers away nothing commits. A Jepsen register run showed 4.5 s
//! without a commit that way.
//!
//! So [`super::peer::PeerClient`] sends each append in a task of its own
//! with a deadline of at least [`APPEND_DEADLINE`], and keeps it as
//! [`Outstanding`] when openraft stops waiting. The next call first waits
//! for that answer and, through [`answer_from_earlier`], answers openraft
//! from it when it covers the new request. At most one append per target is
//! on its way, as in openraft's own replication. The answer is as true as
//! any late answer in raft: the follower held the leader's entries up to
//! that point when it answered.

use openraft::error::{RPCError, RaftError};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};
use openraft::{BasicNode, LogId, LogIdOptionExt, Vote};
use std::time::Duration;
use tokio::task::JoinHandle;

use crate::types::{NodeId, TypeConfig};

/// The shortest gRPC deadline of an append: an answer later than this is
/// a follower that cannot keep up at all. A connection that died is noticed
/// sooner, by the channel's HTTP/2 keep-alive (about a second).
pub const APPEND_DEADLINE: Duration = Duration::from_secs(5);

/// What an append call returns to openraft.
pub type AppendReply =
    Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>>;

/// Which entries an append carried: the leader's vote, the entry before
/// them and the last one (the entry before, for a heartbeat).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// The vote of the leader that sent it.
    pub vote: Vote<NodeId>,
    /// The log id just before the entries.
    pub prev: Option<LogId<NodeId>>,
    /// The last entry's log id (`prev` when it carried none).
    pub last: Option<LogId<NodeId>>,
}

impl Sent {
    /// What `rpc` carries.
    pub fn of(rpc: &AppendEntriesRequest<TypeConfig>) -> Sent {
        Sent {
            vote: rpc.vote,
            prev: rpc.prev_log_id,
            last: rpc.entries.last().map(|e| e.log_id).or(rpc.prev_log_id),
        }
    }
}

/// An append sent and not yet answered.
pub struct Outstanding {
    /// What it carries.
    pub sent: Sent,
    /// The call, answering the reply openraft would have got.
    pub task: JoinHandle<AppendReply>,
}

/// The answer to the append `now` that the reply to the earlier append
/// `earlier` gives, or `None` when it says nothing about `now` (then `now`
/// is sent):
/// - the follower matched the leader up to some entry: if that is at or
///   after `now`'s previous entry, `now` is answered as far as it reaches
///   (openraft then sends the rest at once); before it, the reply is old
///   news;
/// - a higher vote: the answer to anything this leader sends;
/// - a conflict at `now`'s previous entry too: the same conflict;
/// - an error, a reply for another leader's append: nothing.
pub fn answer_from_earlier(earlier: &Sent, reply: AppendReply, now: &Sent) -> Option<AppendReply> {
    if earlier.vote != now.vote {
        return None;
    }
    let matched = match reply {
        Ok(AppendEntriesResponse::Success) => earlier.last,
        Ok(AppendEntriesResponse::PartialSuccess(matched)) => matched,
        Ok(AppendEntriesResponse::HigherVote(vote)) => {
            return Some(Ok(AppendEntriesResponse::HigherVote(vote)))
        }
        Ok(AppendEntriesResponse::Conflict) => {
            return (earlier.prev == now.prev).then_some(Ok(AppendEntriesResponse::Conflict))
        }
        Err(_) => return None,
    };
    if matched < now.prev || matched.index() < now.prev.index() {
        return None;
    }
    if matched >= now.last && matched.index() >= now.last.index() {
        Some(Ok(AppendEntriesResponse::Success))
    } else {
        Some(Ok(AppendEntriesResponse::PartialSuccess(matched)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::error::{NetworkError, RPCError};
    use openraft::CommittedLeaderId;

    fn id(term: u64, index: u64) -> Option<LogId<NodeId>> {
        Some(LogId::new(CommittedLeaderId::new(term, 1), index))
    }

    fn sent(prev: Option<LogId<NodeId>>, last: Option<LogId<NodeId>>) -> Sent {
        Sent {
            vote: Vote::new_committed(3, 1),
            prev,
            last,
        }
    }

    fn answer(earlier: &Sent, reply: AppendEntriesResponse<NodeId>, now: &Sent) -> Option<String> {
        answer_from_earlier(earlier, Ok(reply), now).map(|r| match r {
            Ok(answer) => format!("{answer:?}"),
            Err(e) => format!("error: {e}"),
        })
    }

    #[test]
    fn a_late_success_answers_the_next_append_as_far_as_it_reaches() {
        let earlier = sent(id(3, 10), id(3, 40));
        // The same entries and more: matched up to 40, openraft sends the rest.
        let now = sent(id(3, 10), id(3, 60));
        assert_eq!(
            answer(&earlier, AppendEntriesResponse::Success, &now),
            Some(format!(
                "{:?}",
                AppendEntriesResponse::<NodeId>::PartialSuccess(id(3, 40))
            ))
        );
        // A heartbeat at the old matching point: fully answered.
        let heartbeat = sent(id(3, 10), id(3, 10));
        assert_eq!(
            answer(&earlier, AppendEntriesResponse::Success, &heartbeat),
            Some(format!("{:?}", AppendEntriesResponse::<NodeId>::Success))
        );
        // A partial success answers up to what it matched.
        assert_eq!(
            answer(
                &earlier,
                AppendEntriesResponse::PartialSuccess(id(3, 20)),
                &now
            ),
            Some(format!(
                "{:?}",
                AppendEntriesResponse::<NodeId>::PartialSuccess(id(3, 20))
            ))
        );
    }

    #[test]
    fn old_news_and_other_leaders_answer_nothing() {
        let earlier = sent(id(3, 10), id(3, 40));
        // openraft already knows more than the late answer says.
        let later = sent(id(3, 50), id(3, 60));
        assert_eq!(
            answer(&earlier, AppendEntriesResponse::Success, &later),
            None
        );
        // Another leader's append (a new session has its own client, but
        // the rule does not rest on that).
        let other = Sent {
            vote: Vote::new_committed(4, 2),
            ..sent(id(3, 10), id(3, 60))
        };
        assert_eq!(
            answer(&earlier, AppendEntriesResponse::Success, &other),
            None
        );
        // An error says nothing.
        let e = std::io::Error::other("reset");
        let failed = answer_from_earlier(
            &earlier,
            Err(RPCError::Network(NetworkError::new(&e))),
            &sent(id(3, 10), id(3, 60)),
        );
        assert!(failed.is_none());
    }

    #[test]
    fn a_conflict_answers_only_an_append_after_the_same_entry() {
        let earlier = sent(id(3, 10), id(3, 40));
        assert_eq!(
            answer(
                &earlier,
                AppendEntriesResponse::Conflict,
                &sent(id(3, 10), id(3, 60))
            ),
            Some(format!("{:?}", AppendEntriesResponse::<NodeId>::Conflict))
        );
        assert_eq!(
            answer(
                &earlier,
                AppendEntriesResponse::Conflict,
                &sent(id(3, 5), id(3, 60))
            ),
            None
        );
    }

    #[test]
    fn a_higher_vote_answers_anything() {
        let earlier = sent(id(3, 10), id(3, 40));
        let higher = Vote::new_committed(5, 2);
        assert_eq!(
            answer(
                &earlier,
                AppendEntriesResponse::HigherVote(higher),
                &sent(id(3, 50), id(3, 60))
            ),
            Some(format!(
                "{:?}",
                AppendEntriesResponse::<NodeId>::HigherVote(higher)
            ))
        );
    }
}

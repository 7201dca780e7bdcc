//! Regression tests for the three defect classes of the earlier designs.
//! Each was checked to fail on a deliberately broken variant (see README).

mod common;

use common::*;
use pool::*;

/// (a) Read-then-act across a join.
///
/// - a proposer reads membership {a, b}
/// - member c joins and a launch lands on c
/// - the proposer reads owners, sees an owner (c) missing from its earlier
///   membership read, and proposes a takeover with exact preconditions
/// - apply checks c's own record at that log position: rejected, OwnerAlive;
///   the coordinator proposes nothing of the kind either
#[test]
fn owner_that_joined_between_reads_is_never_taken_over() {
    let mut h = H::new();
    h.join("a", 1, 1);
    h.join("b", 1, 1);
    // --- step: the racing proposer's first read
    let members_read: Vec<String> = h.st.members().keys().cloned().collect();
    // Fill a and b so the launch must land on c.
    h.ok(launch("la", "sa"));
    h.ok(launch("lb", "sb"));
    h.join("c", 1, 4);
    let Effect::Admitted { assignment, .. } = h.ok(launch("lc", "sc")) else {
        panic!("not admitted")
    };
    assert_eq!(assignment.member, "c");
    h.ack("sc");
    // --- step: the racing proposer's second read and its proposals
    let stale: Vec<Command> =
        h.st.sandboxes()
            .values()
            .filter(|s| !members_read.contains(&s.owner.member))
            .map(|s| takeover_of(&h.st, &s.id))
            .collect();
    assert_eq!(stale.len(), 1);
    for c in stale {
        assert_eq!(h.rejected(c), Reason::OwnerAlive);
    }
    let o = h.owner("sc");
    assert_eq!((o.member.as_str(), o.term, o.credential_epoch), ("c", 1, 1));
    // The coordinator, reading one consistent state, proposes no takeover.
    let cmds = plan(&h.st, 0);
    assert!(
        cmds.iter().all(|c| !matches!(c, Command::Takeover(_))),
        "{cmds:?}"
    );
}

/// (b) An owner returns to the same process at a later term.
///
/// - a owns s1 at term 1, acknowledged, reports "running"
/// - a drain moves s1 to b (term 2), b acknowledges; the drain is cancelled
/// - a rebalance moves s1 back to a, same incarnation (term 3)
/// - the term-1 report must read as pending until a acknowledges term 3 and
///   reports under it; stale-term reports are rejected
#[test]
fn earlier_term_report_reads_pending_after_owner_returns() {
    let mut h = H::new();
    h.join("a", 1, 2);
    h.join("b", 1, 2);
    // Place a sandbox on a (pick one whose ring walk starts at a).
    let sb = (0..100)
        .map(|i| format!("s{i}"))
        .find(|id| h.st.preferred_member(id, 1).map(|m| m.id.as_str()) == Some("a"))
        .expect("some id hashes to a");
    h.ok(launch("l1", &sb));
    assert_eq!(h.owner(&sb).member, "a");
    h.ack(&sb);
    h.report(&sb, "running");
    let idx1 = h.idx;
    // --- step: drain a, move to b
    h.ok(Command::StartDrain(StartDrain {
        operation_id: "d1".into(),
        member: "a".into(),
        max_parallel: 1,
    }));
    let o = h.owner(&sb);
    h.ok(Command::Move(Move {
        raft_term: 0,
        operation_id: "d1".into(),
        sandbox: sb.clone(),
        generation: 1,
        expected_owner: o.member,
        expected_incarnation: o.incarnation,
        expected_term: o.term,
        to: None,
    }));
    assert_eq!(h.owner(&sb).member, "b");
    h.ack(&sb);
    h.ok(Command::CancelOperation(CancelOperation {
        operation_id: "d1".into(),
    }));
    // --- step: move back to a, same process (incarnation 1), term 3
    h.ok(Command::StartRebalance(StartRebalance {
        operation_id: "r1".into(),
        max_parallel: 1,
    }));
    let o = h.owner(&sb);
    h.ok(Command::Move(Move {
        raft_term: 0,
        operation_id: "r1".into(),
        sandbox: sb.clone(),
        generation: 1,
        expected_owner: o.member,
        expected_incarnation: o.incarnation,
        expected_term: o.term,
        to: Some("a".into()),
    }));
    let o = h.owner(&sb);
    assert_eq!(
        (o.member.as_str(), o.incarnation, o.term, o.acknowledged),
        ("a", 1, 3, false)
    );
    // The stored report is a's own, from term 1: it must not count.
    assert_eq!(h.st.observed_status(&sb), Some(ObservedStatus::Pending));
    assert_eq!(
        h.rejected(report(&sb, 1, "a", 1, 1, "exited")),
        Reason::StaleTerm {
            expected: 1,
            current: 3
        }
    );
    assert_eq!(
        h.report(&sb, "running"),
        Outcome::Rejected(Reason::NotAcknowledged)
    );
    h.ack(&sb);
    assert_eq!(h.st.observed_status(&sb), Some(ObservedStatus::Pending));
    h.report(&sb, "running");
    let Some(ObservedStatus::Reported { term, index, .. }) = h.st.observed_status(&sb) else {
        panic!("not reported")
    };
    assert_eq!(term, 3);
    assert!(index > idx1);
}

/// (c) A refused launch leaves nothing behind.
///
/// - capacity is full; a launch is refused
/// - no sandbox, no charge, no material; only the refusal tombstone
/// - capacity is freed; the same launch id is still refused
#[test]
fn refused_launch_leaves_nothing_behind() {
    let mut h = H::new();
    h.join("a", 1, 1);
    h.ok(launch("l1", "s1"));
    let before_members = h.st.members().clone();
    let e = h.ok(launch("l2", "s2"));
    assert_eq!(e, Effect::LaunchRefused(Reason::NoEligibleMember));
    assert!(h.st.sandbox("s2").is_none());
    assert_eq!(h.st.members(), &before_members);
    assert!(h.st.sandboxes().values().all(|s| s.launch_id != "l2"));
    assert!(matches!(
        h.st.launches().get("l2"),
        Some(LaunchOutcome::Refused { .. })
    ));
    // --- step: free the capacity, retry the refused launch id
    h.ok(Command::Delete(Delete {
        raft_term: 0,
        sandbox: "s1".into(),
        generation: 1,
    }));
    assert_eq!(h.st.member("a").unwrap().charged, 0);
    assert_eq!(
        h.rejected(launch("l2", "s2")),
        Reason::LaunchRefused("l2".into())
    );
    assert!(h.st.sandbox("s2").is_none());
    // A fresh launch id for the same sandbox is admitted.
    assert!(matches!(h.ok(launch("l3", "s2")), Effect::Admitted { .. }));
}

/// Delete wins over recovery (I8): nothing revives a deleted generation.
#[test]
fn delete_wins_over_recovery() {
    let mut h = H::new();
    h.join("a", 1, 2);
    h.join("b", 1, 2);
    h.ok(launch("l1", "s1"));
    h.ack("s1");
    let o = h.owner("s1");
    h.ok(Command::Leave(Leave {
        member: o.member.clone(),
        incarnation: 1,
    }));
    h.ok(takeover_of(&h.st, "s1"));
    let stale_takeover = takeover_of(&h.st, "s1");
    let n = h.owner("s1");
    assert_eq!(h.st.sandbox("s1").unwrap().phase, Phase::Recovering);
    assert_eq!(
        h.ok(Command::Delete(Delete {
            raft_term: 0,
            sandbox: "s1".into(),
            generation: 1
        })),
        Effect::Deleted { released: 1 }
    );
    assert_eq!(h.ack("s1"), Outcome::Rejected(Reason::Deleted));
    assert_eq!(h.rejected(stale_takeover), Reason::Deleted);
    assert_eq!(
        h.rejected(report("s1", 1, &n.member, n.incarnation, n.term, "running")),
        Reason::Deleted
    );
    assert_eq!(h.st.observed_status("s1"), Some(ObservedStatus::Deleted));
    assert!(h.st.members().values().all(|m| m.charged == 0));
}

/// A re-join with a higher incarnation makes the old incarnation's
/// sandboxes eligible for takeover; the new incarnation may take them back.
#[test]
fn superseded_incarnation_is_taken_over() {
    let mut h = H::new();
    h.join("a", 1, 2);
    h.ok(launch("l1", "s1"));
    h.ack("s1");
    h.report("s1", "running");
    assert_eq!(h.rejected(takeover_of(&h.st, "s1")), Reason::OwnerAlive);
    h.join("a", 2, 2);
    assert_eq!(
        h.report("s1", "late"),
        Outcome::Rejected(Reason::StaleIncarnation {
            given: 1,
            current: 2
        })
    );
    let e = h.ok(takeover_of(&h.st, "s1"));
    let Effect::OwnerChanged(a) = e else {
        panic!("{e:?}")
    };
    assert_eq!(
        (a.member.as_str(), a.incarnation, a.term, a.credential_epoch),
        ("a", 2, 2, 2)
    );
    assert_eq!(h.st.member("a").unwrap().charged, 1);
    assert_eq!(h.st.observed_status("s1"), Some(ObservedStatus::Pending));
    // Old incarnation's heartbeats, joins and reports are stale.
    assert_eq!(
        h.rejected(join("a", 1, 2)),
        Reason::StaleIncarnation {
            given: 1,
            current: 2
        }
    );
    assert_eq!(
        h.rejected(report("s1", 1, "a", 1, 1, "running")),
        Reason::StaleIncarnation {
            given: 1,
            current: 2
        }
    );
}

/// A drain completes only once every moved sandbox was acknowledged by its
/// new owner (found end to end: the drain reported success while a moved
/// session had no active supervisor yet).
///
/// - s1 owns a and b; s2 joins; a drain of s1 with max_parallel 2 moves both
/// - s2 acknowledges a only: the drain must not complete
/// - s2 acknowledges b: now it completes
#[test]
fn drain_completes_only_after_every_move_is_acknowledged() {
    let mut h = H::new();
    h.join("s1", 1, 4);
    h.ok(launch("la", "a"));
    h.ok(launch("lb", "b"));
    h.ack("a");
    h.ack("b");
    h.join("s2", 1, 4);
    h.ok(Command::StartDrain(StartDrain {
        operation_id: "d".into(),
        member: "s1".into(),
        max_parallel: 2,
    }));
    for c in plan(&h.st, 0) {
        if matches!(c, Command::Move(_)) {
            h.ok(c);
        }
    }
    assert_eq!(h.owner("a").member, "s2");
    assert_eq!(h.owner("b").member, "s2");
    h.ack("a");
    let complete = Command::CompleteOperation(CompleteOperation {
        raft_term: 0,
        operation_id: "d".into(),
    });
    assert_eq!(h.rejected(complete.clone()), Reason::OperationNotComplete);
    assert!(plan(&h.st, 0)
        .iter()
        .all(|c| !matches!(c, Command::CompleteOperation(_))));
    h.ack("b");
    h.ok(complete);
}

/// - given: a sandbox launched on `a`, its term not acknowledged yet
/// - then: its ack is not `already_acknowledged` (a gateway writes it)
/// - when: the ack applies
/// - then: the same ack is `already_acknowledged` (a gateway skips a resent
///   one without a raft write), and an ack naming another term, incarnation,
///   member or generation is not (it is written, and apply decides)
#[test]
fn a_resent_ack_of_an_acknowledged_term_is_known_without_a_write() {
    let mut h = H::new();
    h.join("a", 1, 2);
    h.ok(launch("l1", "s1"));
    let s = h.st.sandbox("s1").expect("s1").clone();
    let ack = Acknowledge {
        sandbox: "s1".into(),
        generation: s.generation,
        member: s.owner.member.clone(),
        incarnation: s.owner.incarnation,
        term: s.owner.term,
    };
    assert!(!h.st.already_acknowledged(&ack));
    assert_eq!(h.ack("s1"), Outcome::Applied(Effect::Acknowledged));
    assert!(h.st.already_acknowledged(&ack));
    let others = [
        Acknowledge {
            term: ack.term + 1,
            ..ack.clone()
        },
        Acknowledge {
            incarnation: ack.incarnation + 1,
            ..ack.clone()
        },
        Acknowledge {
            member: "b".into(),
            ..ack.clone()
        },
        Acknowledge {
            generation: ack.generation + 1,
            ..ack.clone()
        },
        Acknowledge {
            sandbox: "s2".into(),
            ..ack.clone()
        },
    ];
    for other in others {
        assert!(!h.st.already_acknowledged(&other), "{other:?}");
    }
}

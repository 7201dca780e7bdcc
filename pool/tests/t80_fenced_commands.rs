//! Scenario: a deposed leader's decisions never land (pool::fence).
//!
//! Every command a leader plans from its reads or observations carries the
//! raft term it was planned in; apply refuses it unless that is the term of
//! the last applied `LeaderChanged`, and a refused command changes nothing
//! (the harness compares snapshots).

mod common;
use common::*;
use pool::*;

/// A pool led in raft term 3: members `a` and `b`, sandbox `s1` owned by
/// one of them (acknowledged), `s2` admitting with a recorded runtime.
fn led_in_term_3() -> H {
    let mut h = H::new();
    h.ok(Command::LeaderChanged(LeaderChanged { raft_term: 3 }));
    h.join("a", 1, 4);
    h.join("b", 1, 4);
    h.launch("l1", "s1");
    h.ack("s1");
    h.launch("l2", "s2");
    h
}

/// Every fenced command the coordinator and launcher of term 3 may plan
/// for the pool of [`led_in_term_3`], stamped with `raft_term`.
fn planned_in(h: &H, raft_term: u64) -> Vec<Command> {
    let s1 = h.st.sandbox("s1").expect("s1").clone();
    let owner = h.st.member(&s1.owner.member).expect("owner").clone();
    let commands = vec![
        Command::Tick(Tick {
            expected_now_tick: h.st.now_tick(),
            raft_term: 0,
        }),
        Command::Configure(Configure {
            heartbeat_ttl_ticks: 5,
            recovery_deadline_ticks: 50,
            operation_deadline_ticks: 500,
            retention_ticks: 0,
            raft_term: 0,
        }),
        Command::Expire(Expire {
            member: owner.id.clone(),
            incarnation: owner.incarnation,
            last_heartbeat_tick: owner.last_heartbeat_tick,
            raft_term: 0,
        }),
        takeover_of(&h.st, "s1"),
        Command::FailRecovery(FailRecovery {
            sandbox: "s1".into(),
            generation: s1.generation,
            expected_term: s1.owner.term,
            raft_term: 0,
        }),
        Command::Move(Move {
            operation_id: "op".into(),
            sandbox: "s1".into(),
            generation: s1.generation,
            expected_owner: s1.owner.member.clone(),
            expected_incarnation: s1.owner.incarnation,
            expected_term: s1.owner.term,
            to: None,
            raft_term: 0,
        }),
        Command::CompleteOperation(CompleteOperation {
            operation_id: "op".into(),
            raft_term: 0,
        }),
        Command::FailOperation(FailOperation {
            operation_id: "op".into(),
            raft_term: 0,
        }),
        Command::RecordRuntime(RecordRuntime {
            sandbox: "s2".into(),
            generation: 1,
            name: "sbx-s2-g1".into(),
            address: "10.1.0.5:7400".into(),
            ca_pem: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
            driver_scope: "process:0123456789abcdef0123456789abcdef".into(),
            raft_term: 0,
        }),
        Command::FailLaunch(FailLaunch {
            sandbox: "s1".into(),
            generation: s1.generation,
            reason: "RuntimeLost: runtime sbx-s1-g1 is gone".into(),
            raft_term: 0,
        }),
        Command::Delete(Delete {
            sandbox: "s1".into(),
            generation: s1.generation,
            raft_term: 0,
        }),
    ];
    commands
        .into_iter()
        .map(|c| c.planned_in(raft_term))
        .collect()
}

/// - given: a pool led in raft term 3, and every kind of command its
///   leader's coordinator or launcher plans, planned in term 3
/// - when: the leader of term 4 takes office (its `LeaderChanged` applies)
///   and the term-3 commands arrive afterwards (in flight, forwarded)
/// - then: each is refused as `FencedRaftTerm {3, 4}` and changes nothing;
///   the state is the one term 4 started from
#[test]
fn a_deposed_leaders_planned_commands_are_refused_once_a_newer_term_is_applied() {
    let mut h = led_in_term_3();
    let stale = planned_in(&h, 3);
    h.ok(Command::LeaderChanged(LeaderChanged { raft_term: 4 }));
    let before = h.snapshot();
    for c in stale {
        let name = c.name();
        assert_eq!(
            h.rejected(c),
            Reason::FencedRaftTerm {
                planned: 3,
                current: 4
            },
            "{name}"
        );
    }
    assert!(h.snapshot() == before, "a fenced command changed the state");
    h.assert_replay_identical();
}

/// - given: a pool led in raft term 3
/// - when: commands planned by the leader of term 4 arrive before term 4's
///   `LeaderChanged` is applied (a leader that acted before taking office)
/// - then: refused too (`FencedRaftTerm {4, 3}`): a leader's decisions
///   count only from its own grace on
#[test]
fn a_command_planned_before_its_leaders_term_is_applied_is_refused() {
    let mut h = led_in_term_3();
    for c in planned_in(&h, 4) {
        let name = c.name();
        assert_eq!(
            h.rejected(c),
            Reason::FencedRaftTerm {
                planned: 4,
                current: 3
            },
            "{name}"
        );
    }
}

/// - given: a pool led in raft term 3
/// - when: the current leader's own commands (term 3), and commands with no
///   term (0: written before fencing existed, or a client's delete), apply
/// - then: they are not refused for their term (they apply, or are refused
///   only for their own preconditions)
#[test]
fn the_current_leaders_commands_and_unfenced_ones_are_not_fenced() {
    for term in [3, 0] {
        let h = led_in_term_3();
        for c in planned_in(&h, term) {
            let mut fresh = led_in_term_3();
            let name = c.name();
            if let Outcome::Rejected(reason) = fresh.apply(c) {
                assert!(
                    !matches!(reason, Reason::FencedRaftTerm { .. }),
                    "{name} in term {term}: {reason}"
                );
            }
        }
    }
    // The recorded runtime keeps the log index that recorded it.
    let mut h = led_in_term_3();
    let record = planned_in(&h, 3)
        .into_iter()
        .find(|c| matches!(c, Command::RecordRuntime(_)))
        .expect("record");
    assert_eq!(h.ok(record), Effect::RuntimeRecorded);
    let runtime = h.st.sandbox("s2").and_then(|s| s.runtime.clone());
    assert_eq!(runtime.map(|r| r.recorded_index), Some(h.idx));
}

/// - given: a coordinator of term 5 on a pool whose last `LeaderChanged`
///   is term 3, with a tick due
/// - then: it proposes only `LeaderChanged(5)` (the tick waits); once that
///   is applied, everything it plans carries term 5; once term 6 is
///   applied, it proposes nothing at all
#[test]
fn a_coordinator_plans_only_in_its_own_term() {
    let mut h = led_in_term_3();
    let mut coord = Coordinator::new(CoordinatorConfig::new(5));
    coord.tick();
    let first = coord.step(&h.st);
    assert_eq!(
        first,
        vec![Command::LeaderChanged(LeaderChanged { raft_term: 5 })]
    );
    h.ok(first[0].clone());
    // Expire the owner of s1 so that the coordinator has work to plan.
    let owner = h.owner("s1").member;
    for _ in 0..20 {
        h.tick();
        let beats: Vec<(&str, u64)> = ["a", "b"]
            .into_iter()
            .filter(|m| *m != owner)
            .map(|m| (m, 1))
            .collect();
        h.beat(&beats);
    }
    let planned = coord.step(&h.st);
    assert!(
        planned.iter().any(|c| matches!(c, Command::Tick(_))),
        "{planned:?}"
    );
    assert!(
        planned.iter().any(|c| matches!(c, Command::Expire(_))),
        "{planned:?}"
    );
    for c in &planned {
        assert_eq!(c.planned_raft_term(), Some(5), "{c:?}");
    }
    h.ok(Command::LeaderChanged(LeaderChanged { raft_term: 6 }));
    coord.tick();
    assert_eq!(coord.step(&h.st), vec![]);
}

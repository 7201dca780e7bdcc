//! Coordinator-driven scenarios: the leader loop of the gateway, in-process.

mod common;

use common::*;
use pool::*;

/// A simulated cluster: live supervisor processes heartbeat and acknowledge.
struct Sim {
    h: H,
    coord: Coordinator,
    /// (member, incarnation) of processes that are running.
    alive: Vec<(String, u64)>,
}

impl Sim {
    fn new(members: &[&str], cap: u32) -> Sim {
        let mut h = H::new();
        for m in members {
            h.join(m, 1, cap);
        }
        Sim {
            h,
            coord: Coordinator::new(CoordinatorConfig::new(1)),
            alive: members.iter().map(|m| (m.to_string(), 1)).collect(),
        }
    }

    /// One tick interval: heartbeats, coordinator proposals, acknowledgements.
    fn round(&mut self) {
        let beats = self
            .alive
            .iter()
            .map(|(m, i)| Beat {
                member: m.clone(),
                incarnation: *i,
            })
            .collect();
        self.h.ok(Command::Heartbeat(Heartbeat { beats }));
        self.coord.tick();
        for c in self.coord.step(&self.h.st) {
            self.h.apply(c);
        }
        let unacked: Vec<String> = self
            .h
            .st
            .sandboxes()
            .values()
            .filter(|s| {
                s.phase.is_movable()
                    && !s.owner.acknowledged
                    && self
                        .alive
                        .contains(&(s.owner.member.clone(), s.owner.incarnation))
            })
            .map(|s| s.id.clone())
            .collect();
        for s in unacked {
            self.h.ack(&s);
        }
    }

    fn until(&mut self, max_rounds: usize, what: &str, done: impl Fn(&PoolState) -> bool) {
        for _ in 0..max_rounds {
            if done(&self.h.st) {
                return;
            }
            self.round();
        }
        assert!(
            done(&self.h.st),
            "not reached within {max_rounds} rounds: {what}"
        );
    }
}

/// - a member stops heartbeating; after the TTL it is expired
/// - its sandboxes are taken over (term 2, epoch 2) and acknowledged
#[test]
fn expired_owner_is_taken_over() {
    let mut sim = Sim::new(&["a", "b", "c"], 10);
    for i in 0..9 {
        sim.h.ok(launch(&format!("l{i}"), &format!("s{i}")));
    }
    sim.until(3, "acknowledged", |st| {
        st.sandboxes().values().all(|s| s.owner.acknowledged)
    });
    let victims: Vec<String> = sim
        .h
        .st
        .sandboxes()
        .values()
        .filter(|s| s.owner.member == "a")
        .map(|s| s.id.clone())
        .collect();
    assert!(!victims.is_empty());
    // --- step: a's process dies
    sim.alive.retain(|(m, _)| m != "a");
    sim.until(30, "a expired and its sandboxes reassigned", |st| {
        st.member("a").unwrap().state == MemberState::Expired
            && st
                .sandboxes()
                .values()
                .all(|s| s.owner.member != "a" && s.phase == Phase::Assigned)
    });
    for v in &victims {
        let o = sim.h.owner(v);
        assert_eq!((o.term, o.credential_epoch), (2, 2));
    }
    assert_eq!(sim.h.st.member("a").unwrap().charged, 0);
    sim.h.assert_replay_identical();
}

/// - a new leader's coordinator first proposes LeaderChanged
/// - members whose heartbeats were lost during the election are not expired
///   before a full TTL under the new leader
#[test]
fn new_leader_grants_a_full_ttl_of_grace() {
    let mut h = H::new();
    h.join("a", 1, 1);
    h.join("b", 1, 1);
    // Time passes with heartbeats lost (old leader's batches never committed).
    h.ticks(9);
    let mut coord = Coordinator::new(CoordinatorConfig::new(7));
    let first = coord.step(&h.st);
    assert_eq!(
        first,
        vec![Command::LeaderChanged(LeaderChanged { raft_term: 7 })]
    );
    // Not applied yet: nothing else is proposed, the same command not twice.
    assert!(coord.step(&h.st).is_empty());
    h.ok(first[0].clone());
    for _ in 0..10 {
        h.tick();
        let cmds = coord.step(&h.st);
        assert!(
            cmds.iter().all(|c| !matches!(c, Command::Expire(_))),
            "{cmds:?}"
        );
    }
    h.tick();
    let cmds = coord.step(&h.st);
    assert_eq!(
        cmds.iter()
            .filter(|c| matches!(c, Command::Expire(_)))
            .count(),
        2
    );
    // A deposed leader's LeaderChanged is rejected.
    assert_eq!(
        h.rejected(Command::LeaderChanged(LeaderChanged { raft_term: 3 })),
        Reason::StaleRaftTerm {
            given: 3,
            current: 7
        }
    );
}

/// - a drain with max_parallel 2 moves everything off its member, never more
///   than 2 moves in flight; the member stays out of service until cancel
/// - halfway, leadership changes: a fresh coordinator continues the same
///   operation without relaunching anything or extending its deadline
#[test]
fn drain_completes_across_a_leader_change() {
    let mut sim = Sim::new(&["a", "b", "c", "d"], 20);
    for i in 0..40 {
        sim.h.ok(launch(&format!("l{i}"), &format!("s{i}")));
    }
    sim.until(3, "acknowledged", |st| {
        st.sandboxes().values().all(|s| s.owner.acknowledged)
    });
    let on_a = sim.h.st.member("a").unwrap().charged;
    assert!(on_a >= 3, "ring put {on_a} on a");
    sim.h.ok(Command::StartDrain(StartDrain {
        operation_id: "d1".into(),
        member: "a".into(),
        max_parallel: 2,
    }));
    let deadline = sim.h.st.operations()["d1"].deadline_tick;
    assert_eq!(sim.h.st.member("a").unwrap().state, MemberState::Draining);
    let launches_before = sim.h.st.launches().clone();
    sim.round();
    assert!(sim.h.st.operations()["d1"].attempts <= 2);
    // --- step: leader change
    sim.coord = Coordinator::new(CoordinatorConfig::new(2));
    sim.until(40, "drain succeeded", |st| {
        st.operations()["d1"].phase == OperationPhase::Succeeded
    });
    let op = &sim.h.st.operations()["d1"];
    assert_eq!(op.deadline_tick, deadline);
    assert_eq!(op.moves_planned, on_a);
    assert_eq!(op.moves_done, on_a);
    assert_eq!(sim.h.st.launches(), &launches_before);
    assert_eq!(sim.h.st.member("a").unwrap().charged, 0);
    assert_eq!(sim.h.st.member("a").unwrap().state, MemberState::Draining);
    // New launches avoid the drained member.
    sim.h.ok(launch("late", "late"));
    assert_ne!(sim.h.owner("late").member, "a");
    // --- step: cancel after completion returns it to service
    sim.h.ok(Command::CancelOperation(CancelOperation {
        operation_id: "d1".into(),
    }));
    assert_eq!(sim.h.st.member("a").unwrap().state, MemberState::Active);
    sim.h.assert_replay_identical();
}

/// - one operation runs at a time; the next is queued and starts when the
///   first ends; a queued drain does not exclude its member yet
/// - a drain that would leave no eligible member is refused
#[test]
fn one_operation_at_a_time() {
    let mut sim = Sim::new(&["a", "b", "c"], 4);
    sim.h.ok(Command::StartDrain(StartDrain {
        operation_id: "d1".into(),
        member: "a".into(),
        max_parallel: 1,
    }));
    assert_eq!(
        sim.h.ok(Command::StartDrain(StartDrain {
            operation_id: "d2".into(),
            member: "b".into(),
            max_parallel: 1,
        })),
        Effect::OperationQueued
    );
    assert_eq!(sim.h.st.member("b").unwrap().state, MemberState::Active);
    // c leaves; when d1 completes, d2 would leave no eligible member: fails.
    sim.h.ok(Command::Leave(Leave {
        member: "c".into(),
        incarnation: 1,
    }));
    sim.alive.retain(|(m, _)| m != "c");
    sim.until(3, "d1 done", |st| {
        st.operations()["d1"].phase == OperationPhase::Succeeded
    });
    assert_eq!(sim.h.st.operations()["d2"].phase, OperationPhase::Failed);
    assert_eq!(sim.h.st.member("b").unwrap().state, MemberState::Active);
    // Refused outright when nothing else is eligible.
    assert_eq!(
        sim.h.rejected(Command::StartDrain(StartDrain {
            operation_id: "d3".into(),
            member: "b".into(),
            max_parallel: 1,
        })),
        Reason::WouldLeaveNoEligibleMember
    );
}

/// - a sandbox whose new owner never acknowledges fails at the recovery
///   deadline with SupervisorRecoveryFailed and releases its slot
#[test]
fn recovery_deadline_fails_the_sandbox() {
    let mut sim = Sim::new(&["a", "b"], 4);
    sim.h.ok(launch("l1", "s1"));
    sim.until(2, "ack", |st| st.sandbox("s1").unwrap().owner.acknowledged);
    let first = sim.h.owner("s1").member;
    let other = if first == "a" { "b" } else { "a" };
    // The first owner leaves; the other process is alive but never acks
    // (simulate by removing it from the acking set but keeping heartbeats).
    sim.h.ok(Command::Leave(Leave {
        member: first.clone(),
        incarnation: 1,
    }));
    sim.alive.retain(|(m, _)| *m != first);
    let hb = Command::Heartbeat(Heartbeat {
        beats: vec![Beat {
            member: other.to_string(),
            incarnation: 1,
        }],
    });
    sim.alive.clear();
    for _ in 0..70 {
        sim.h.ok(hb.clone());
        sim.coord.tick();
        for c in sim.coord.step(&sim.h.st) {
            sim.h.apply(c);
        }
    }
    let s = sim.h.st.sandbox("s1").unwrap();
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(
        sim.h.st.observed_status("s1"),
        Some(ObservedStatus::Failed(SUPERVISOR_RECOVERY_FAILED.into()))
    );
    assert_eq!(sim.h.st.member(other).unwrap().charged, 0);
}

/// - a rebalance moves sandboxes to their ring-preferred members after a
///   join, and completes
#[test]
fn rebalance_after_join_completes() {
    let mut sim = Sim::new(&["a", "b"], 20);
    for i in 0..20 {
        sim.h.ok(launch(&format!("l{i}"), &format!("s{i}")));
    }
    sim.until(2, "acked", |st| {
        st.sandboxes().values().all(|s| s.owner.acknowledged)
    });
    sim.h.join("c", 1, 20);
    sim.alive.push(("c".into(), 1));
    // A join moves nothing.
    assert_eq!(sim.h.st.member("c").unwrap().charged, 0);
    sim.h.ok(Command::StartRebalance(StartRebalance {
        operation_id: "r".into(),
        max_parallel: 3,
    }));
    let planned = sim.h.st.operations()["r"].moves_planned;
    assert!(planned > 0);
    sim.until(40, "rebalanced", |st| {
        st.operations()["r"].phase == OperationPhase::Succeeded
    });
    assert!(sim.h.st.rebalance_candidates().is_empty());
    assert_eq!(sim.h.st.member("c").unwrap().charged, planned);
}

/// A pool applied straight through `PoolState::apply` (the harness above
/// checks a full scan after every command, too slow for thousands).
struct Big {
    st: PoolState,
    index: u64,
    coord: Coordinator,
}

impl Big {
    fn apply(&mut self, c: &Command) -> Outcome {
        self.index += 1;
        self.st.apply(self.index, c)
    }

    /// Heartbeats from `alive`, one tick, one coordinator step whose
    /// commands are applied: returns (sandbox records the step read, the
    /// names of its commands).
    fn round(&mut self, alive: &[String]) -> (u64, Vec<&'static str>) {
        let beats = alive
            .iter()
            .map(|m| Beat {
                member: m.clone(),
                incarnation: 1,
            })
            .collect();
        assert!(!self
            .apply(&Command::Heartbeat(Heartbeat { beats }))
            .is_rejected());
        self.coord.tick();
        let before = self.coord.sandboxes_examined();
        let commands = self.coord.step(&self.st);
        let read = self.coord.sandboxes_examined() - before;
        let names = commands.iter().map(Command::name).collect();
        for c in &commands {
            self.apply(c);
        }
        (read, names)
    }
}

/// The acknowledgement of `s`'s current term by its owner.
fn acknowledge(s: Sandbox) -> Command {
    Command::Acknowledge(Acknowledge {
        sandbox: s.id,
        generation: s.generation,
        member: s.owner.member,
        incarnation: s.owner.incarnation,
        term: s.owner.term,
    })
}

/// Issue 30: a coordinator step reads the sandboxes that may call for a
/// command (the live ones of a dead owner, the recovering ones), not the
/// pool: nothing in a quiet pool of 4,000, exactly the dead member's 200
/// when it expires, and nothing again once its sandboxes are acknowledged
/// by their new owners.
#[test]
fn a_step_reads_only_the_sandboxes_that_may_call_for_a_command() {
    let members: Vec<String> = (0..20).map(|i| format!("m{i:02}")).collect();
    let mut big = Big {
        st: PoolState::new(),
        index: 0,
        coord: Coordinator::new(CoordinatorConfig::new(1)),
    };
    for m in &members {
        assert!(!big.apply(&join(m, 1, 400)).is_rejected());
    }
    for i in 0..4_000 {
        assert!(!big
            .apply(&launch(&format!("l{i}"), &format!("s{i:04}")))
            .is_rejected());
    }
    let ids: Vec<String> = big.st.sandboxes().keys().cloned().collect();
    for id in &ids {
        let s = big.st.sandbox(id).expect("launched").clone();
        assert!(!big.apply(&acknowledge(s)).is_rejected());
    }
    // The new leader's grace, then quiet rounds.
    let (read, names) = big.round(&members);
    assert_eq!((read, names), (0, vec!["LeaderChanged"]));
    for _ in 0..5 {
        let (read, names) = big.round(&members);
        assert_eq!((read, names), (0, vec!["Tick"]), "a quiet round");
    }
    // m07 stops: the rounds past its TTL expire it, then take its
    // sandboxes over in one step that reads exactly them.
    let dead = "m07";
    let owned = big
        .st
        .sandboxes()
        .values()
        .filter(|s| s.owner.member == dead)
        .count() as u64;
    assert!(owned > 100, "m07 owns {owned}");
    let alive: Vec<String> = members.iter().filter(|m| *m != dead).cloned().collect();
    let mut rounds = Vec::new();
    while rounds.len() < 20 {
        let round = big.round(&alive);
        let took_over = round.1.contains(&"Takeover");
        rounds.push(round);
        if took_over {
            break;
        }
    }
    let (read, names) = rounds.last().expect("a round");
    assert!(
        names.iter().filter(|n| **n == "Takeover").count() as u64 == owned,
        "every sandbox of m07 taken over in one step: {rounds:?}"
    );
    assert_eq!(*read, owned, "the step read m07's sandboxes and no other");
    assert!(
        rounds[..rounds.len() - 1]
            .iter()
            .all(|(read, _)| *read == 0),
        "no sandbox read before m07 was dead: {rounds:?}"
    );
    // Recovering until acknowledged: each step reads them; then nothing.
    let (read, _) = big.round(&alive);
    assert_eq!(read, owned, "the recovering sandboxes are read");
    let recovering: Vec<Sandbox> = big.st.sandbox_table().recovering().cloned().collect();
    assert_eq!(recovering.len() as u64, owned);
    for s in recovering {
        assert!(!big.apply(&acknowledge(s)).is_rejected());
    }
    let (read, names) = big.round(&alive);
    assert_eq!((read, names), (0, vec!["Tick"]), "quiet again");
    assert_eq!(
        big.st.sandbox_table().check_index(),
        Ok(()),
        "the indexes match the records"
    );
}

//! Retention garbage collection (issue 16), as specifications: what each
//! `Tick` removes once a record finished `retention_ticks` ago, what it
//! keeps, what a removal means for later commands, how snapshots carry the
//! finish ticks (and how an older snapshot decodes), and the snapshot check
//! that refuses a state breaking an invariant.

mod common;

use common::*;
use pool::snapshot::{Record, Snapshot};
use pool::*;
use prost::Message;

const RETENTION: u64 = 5;

/// A harness whose retention is [`RETENTION`] ticks (timeouts long enough
/// that no member expires by itself).
fn harness() -> H {
    let mut h = H::new();
    h.ok(Command::Configure(Configure {
        raft_term: 0,
        heartbeat_ttl_ticks: 1000,
        recovery_deadline_ticks: 1000,
        operation_deadline_ticks: 1000,
        retention_ticks: RETENTION,
    }));
    h
}

fn delete(h: &mut H, sb: &str) {
    let generation = h.st.sandbox(sb).expect("sandbox").generation;
    h.ok(Command::Delete(Delete {
        raft_term: 0,
        sandbox: sb.into(),
        generation,
    }));
}

fn collected(e: Effect) -> Collected {
    match e {
        Effect::Ticked { collected, .. } => collected,
        other => panic!("not a tick: {other:?}"),
    }
}

fn tick(h: &mut H) -> Collected {
    let now = h.st.now_tick();
    collected(h.ok(Command::Tick(Tick {
        raft_term: 0,
        expected_now_tick: now,
    })))
}

/// - given a deleted sandbox admitted by launch `l1`
/// - when `retention - 1` ticks pass, then both records are still there
/// - when one more tick passes, then that tick removes both
/// - and a new launch of the same id starts above the generation floor
#[test]
fn deleted_sandbox_and_its_launch_go_after_retention_and_the_id_relaunches_above() {
    let mut h = harness();
    h.join("a", 1, 4);
    h.launch("l1", "s1");
    h.ack("s1");
    delete(&mut h, "s1");
    h.ticks(RETENTION - 1);
    assert!(h.st.sandbox("s1").is_some());
    assert!(h.st.launches().contains_key("l1"));
    let gone = tick(&mut h);
    assert_eq!(gone.sandboxes, vec!["s1".to_string()]);
    assert_eq!(gone.launches, vec!["l1".to_string()]);
    assert!(h.st.sandbox("s1").is_none());
    assert_eq!(h.st.generation_floor(), 1);
    // The launch id is no longer known: a retry after the retention is a
    // new launch (the runbook: retention > every client's retry horizon).
    match h.apply(launch("l1", "s1")) {
        Outcome::Applied(Effect::Admitted { assignment, replay }) => {
            assert!(!replay);
            assert_eq!(assignment.generation, 2, "never generation 1 again");
        }
        other => panic!("{other:?}"),
    }
    h.assert_replay_identical();
}

/// - given a launch refused for want of members (a tombstone)
/// - then a retry within the retention is refused again, from the tombstone
/// - and after the retention the tombstone is gone and the id is admitted
#[test]
fn refused_tombstone_answers_retries_until_collected() {
    let mut h = harness();
    assert!(matches!(
        h.ok(launch("l1", "s1")),
        Effect::LaunchRefused(Reason::NoEligibleMember)
    ));
    h.join("a", 1, 4);
    h.ticks(RETENTION - 1);
    assert_eq!(
        h.rejected(launch("l1", "s1")),
        Reason::LaunchRefused("l1".into())
    );
    assert_eq!(tick(&mut h).launches, vec!["l1".to_string()]);
    assert!(matches!(h.ok(launch("l1", "s1")), Effect::Admitted { .. }));
    h.assert_replay_identical();
}

/// - given member a that left while it still owns a stopping sandbox
/// - then a is kept however long, since a sandbox names it (I4 never acts
///   on absence), and its heartbeats are refused as retired
/// - when the sandbox is deleted and a retention passes, then the sandbox
///   and the member go in the same tick, and a's heartbeat is then that
///   of an unknown member; a may join again as a new member
#[test]
fn departed_member_stays_while_named_then_goes_and_is_unknown() {
    let mut h = harness();
    h.join("a", 1, 4);
    h.launch("l1", "s1");
    h.ack("s1");
    h.ok(Command::Stop(Stop {
        sandbox: "s1".into(),
        generation: 1,
    }));
    h.ok(Command::Leave(Leave {
        member: "a".into(),
        incarnation: 1,
    }));
    h.ticks(3 * RETENTION);
    assert!(h.st.member("a").is_some(), "named by s1");
    match h.beat(&[("a", 1)]) {
        Effect::Heartbeats {
            accepted: 0,
            skipped,
        } => {
            assert_eq!(skipped[0].reason, Reason::IncarnationRetired)
        }
        other => panic!("{other:?}"),
    }
    delete(&mut h, "s1");
    h.ticks(RETENTION - 1);
    let gone = tick(&mut h);
    assert_eq!(gone.sandboxes, vec!["s1".to_string()]);
    assert_eq!(gone.members, vec!["a".to_string()]);
    match h.beat(&[("a", 1)]) {
        Effect::Heartbeats {
            accepted: 0,
            skipped,
        } => {
            assert_eq!(skipped[0].reason, Reason::UnknownMember("a".into()))
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        h.ok(join_process("a", 9, 0, 4)),
        Effect::Joined {
            superseded: None,
            incarnation: 1
        }
    ));
    h.assert_replay_identical();
}

/// - given a drain of a that succeeded (a stays out of service, I6)
/// - then the drain is kept while it holds a draining
/// - when it is cancelled (a returns to service) and a retention passes,
///   then it goes; a finished rebalance goes a retention after it ended
#[test]
fn finished_operations_go_but_a_succeeded_drain_holds_while_its_member_drains() {
    let mut h = harness();
    h.join("a", 1, 4);
    h.join("b", 1, 4);
    h.ok(Command::StartDrain(StartDrain {
        operation_id: "op1".into(),
        member: "a".into(),
        max_parallel: 1,
    }));
    h.ok(Command::CompleteOperation(CompleteOperation {
        raft_term: 0,
        operation_id: "op1".into(),
    }));
    h.ok(Command::StartRebalance(StartRebalance {
        operation_id: "op2".into(),
        max_parallel: 1,
    }));
    h.ok(Command::CompleteOperation(CompleteOperation {
        raft_term: 0,
        operation_id: "op2".into(),
    }));
    h.ticks(RETENTION - 1);
    assert_eq!(tick(&mut h).operations, vec!["op2".to_string()]);
    h.ticks(2 * RETENTION);
    assert!(h.st.operations().contains_key("op1"), "holds a draining");
    h.ok(Command::CancelOperation(CancelOperation {
        operation_id: "op1".into(),
    }));
    h.ticks(RETENTION - 1);
    assert!(h.st.operations().contains_key("op1"));
    assert_eq!(tick(&mut h).operations, vec!["op1".to_string()]);
    assert_eq!(h.st.member("a").map(|m| m.state), Some(MemberState::Active));
    h.assert_replay_identical();
}

/// - given 300 deleted sandboxes (600 records) finished at the same tick
/// - then each tick removes at most GC_BATCH records, launches first, and
///   every intermediate state keeps the invariants (the harness checks)
#[test]
fn one_tick_removes_at_most_gc_batch_records() {
    let mut h = harness();
    h.join("a", 1, 400);
    for i in 0..300 {
        h.launch(&format!("l{i:03}"), &format!("s{i:03}"));
        delete(&mut h, &format!("s{i:03}"));
    }
    h.ticks(RETENTION - 1);
    let first = tick(&mut h);
    assert_eq!(first.len(), GC_BATCH);
    assert_eq!(first.launches.len(), GC_BATCH, "launch records go first");
    let mut total = first.len();
    while total < 600 {
        let next = tick(&mut h);
        assert!(next.len() <= GC_BATCH && !next.is_empty());
        total += next.len();
    }
    assert!(h.st.sandboxes().is_empty() && h.st.launches().is_empty());
    h.assert_replay_identical();
}

/// A `Configure` written before retention existed carries 0: it leaves the
/// retention as it was.
#[test]
fn configure_without_retention_keeps_the_current_one() {
    let mut h = harness();
    h.ok(Command::Configure(Configure {
        raft_term: 0,
        heartbeat_ttl_ticks: 7,
        recovery_deadline_ticks: 7,
        operation_deadline_ticks: 7,
        retention_ticks: 0,
    }));
    assert_eq!(h.st.config().retention_ticks, RETENTION);
    assert_eq!(
        PoolState::new().config().retention_ticks,
        DEFAULT_RETENTION_TICKS
    );
}

/// Removes every issue-16 field from a snapshot, as a gateway before issue
/// 16 wrote it.
fn strip_issue_16_fields(bytes: &[u8]) -> Vec<u8> {
    let mut snap = Snapshot::decode(bytes).expect("snapshot");
    for env in &mut snap.records {
        match env.record.as_mut() {
            Some(Record::Meta(m)) => {
                m.retention_ticks = 0;
                m.generation_floor = 0;
            }
            Some(Record::Sandbox(s)) => s.ended_tick = None,
            Some(Record::Operation(o)) => o.finished_tick = None,
            Some(Record::Launch(l)) => l.ended_tick = None,
            _ => {}
        }
    }
    snap.encode_to_vec()
}

/// - given a snapshot written before issue 16 (no finish ticks, no
///   retention) holding a deleted sandbox and a refused tombstone
/// - then it decodes with the default retention, and each finished record
///   as finished at the snapshot's tick
#[test]
fn an_old_snapshot_decodes_with_retention_counted_from_its_tick() {
    let mut h = harness();
    h.ok(launch("refused", "s0"));
    h.join("a", 1, 4);
    h.launch("l1", "s1");
    h.ticks(2);
    delete(&mut h, "s1");
    h.ticks(1);
    let old = strip_issue_16_fields(&h.snapshot());
    let st = PoolState::decode_snapshot(&old).expect("old snapshot decodes");
    assert_eq!(st.config().retention_ticks, DEFAULT_RETENTION_TICKS);
    assert_eq!(
        st.sandbox("s1").and_then(|s| s.ended_tick),
        Some(st.now_tick())
    );
    for id in ["refused", "l1"] {
        assert_eq!(st.launches()[id].ended_tick(), Some(st.now_tick()), "{id}");
    }
    // And the new fields round-trip.
    let again = PoolState::decode_snapshot(&st.encode_snapshot()).expect("decode");
    assert_eq!(again.encode_snapshot(), st.encode_snapshot());
}

fn with_member_record(bytes: &[u8], edit: impl Fn(&mut pool::snapshot::MemberRecord)) -> Vec<u8> {
    let mut snap = Snapshot::decode(bytes).expect("snapshot");
    for env in &mut snap.records {
        if let Some(Record::Member(m)) = env.record.as_mut() {
            edit(m);
        }
    }
    snap.encode_to_vec()
}

/// A snapshot that decodes but breaks an invariant (a member charged over
/// its capacity, I5; a counter at u64::MAX) is refused with a typed error,
/// never installed.
#[test]
fn a_snapshot_breaking_an_invariant_is_refused() {
    let mut h = harness();
    h.join("a", 1, 1);
    h.launch("l1", "s1");
    let good = h.snapshot();
    let over = with_member_record(&good, |m| m.charged = 2);
    match PoolState::decode_snapshot(&over) {
        Err(DecodeError::Invariant(v)) => assert_eq!(v.invariant, "I5"),
        other => panic!("{other:?}"),
    }
    assert!(PoolState::decode_snapshot_unchecked(&over).is_ok());
    let huge = with_member_record(&good, |m| m.incarnation = u64::MAX);
    assert!(matches!(
        PoolState::decode_snapshot(&huge),
        Err(DecodeError::Invariant(_))
    ));
    assert!(PoolState::decode_snapshot(&good).is_ok());
}

/// Validation names the field and the bound of every range it checks.
#[test]
fn validation_bounds_every_range() {
    let cfg = |retention_ticks, ttl| {
        Command::Configure(Configure {
            raft_term: 0,
            heartbeat_ttl_ticks: ttl,
            recovery_deadline_ticks: 1,
            operation_deadline_ticks: 1,
            retention_ticks,
        })
    };
    assert!(cfg(0, 1).validate().is_ok());
    assert!(cfg(MAX_CONFIG_TICKS, MAX_CONFIG_TICKS).validate().is_ok());
    let e = cfg(MAX_CONFIG_TICKS + 1, 1).validate().unwrap_err();
    assert!(e.to_string().contains("Configure.retention_ticks"), "{e}");
    let e = cfg(1, 0).validate().unwrap_err();
    assert!(e.to_string().contains("heartbeat_ttl_ticks"), "{e}");
    let drain = |max_parallel| {
        Command::StartDrain(StartDrain {
            operation_id: "op".into(),
            member: "a".into(),
            max_parallel,
        })
    };
    assert!(drain(0).validate().is_err() && drain(9).validate().is_err());
    assert!(drain(8).validate().is_ok());
    let big = report(
        "s",
        1,
        "a",
        1,
        1,
        &"x".repeat(pool::validate::MAX_STATUS_LEN + 1),
    );
    assert!(big
        .validate()
        .unwrap_err()
        .to_string()
        .contains("Report.status"));
    let mut legacy = join("a", MAX_COUNTER + 1, 1);
    assert!(legacy.validate().is_err());
    legacy = join("a", 1, 0);
    assert!(legacy.validate().is_err());
    assert!(join("bad/id", 1, 1).validate().is_err());
}

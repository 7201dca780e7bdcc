//! Property tests of issue 16, "apply cannot panic":
//!
//! - arbitrary sequences of arbitrary commands, with hostile values
//!   (u64::MAX, empty and oversized strings, unknown ids), next to
//!   well-formed ones that hit live records: a command that passed
//!   `Command::validate` applies without panicking and keeps I1-I8 (as far
//!   as a state and the step tracker show them), garbage collection
//!   included (tiny retentions, many ticks);
//! - the same without validation: apply never panics;
//! - arbitrary snapshot bytes, mutated real snapshots and structurally
//!   generated snapshots: decoding never panics, and a snapshot that passes
//!   the invariant check applies arbitrary commands without panicking;
//! - a replica restored from a snapshot in the middle of the log reaches
//!   the same snapshot bytes as one that applied the whole log (garbage
//!   collection depends on nothing a snapshot does not carry).

mod common;

use common::{join_process, launch};
use pool::snapshot::*;
use pool::*;
use proptest::prelude::*;
use prost::Message;

fn hostile_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(2),
        Just(3),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(MAX_COUNTER),
        Just(MAX_CONFIG_TICKS + 1),
        any::<u64>(),
    ]
}

fn small_u64() -> impl Strategy<Value = u64> {
    prop_oneof![0u64..4, hostile_u64()]
}

fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["a", "b", "c", "s1", "s2", "s3", "op1", "l1", "l2"])
            .prop_map(str::to_string),
        1 => Just(String::new()),
        1 => Just("x".repeat(2000)),
        1 => Just("zz-unknown".to_string()),
        1 => "[a-z/.]{0,6}",
    ]
}

fn raw_command() -> impl Strategy<Value = Command> {
    prop_oneof![
        small_u64().prop_map(|t| Command::Tick(Tick {
            raft_term: 0,
            expected_now_tick: t
        })),
        (hostile_u64(), hostile_u64(), hostile_u64(), hostile_u64()).prop_map(|(a, b, c, d)| {
            Command::Configure(Configure {
                raft_term: 0,
                heartbeat_ttl_ticks: a,
                recovery_deadline_ticks: b,
                operation_deadline_ticks: c,
                retention_ticks: d,
            })
        }),
        hostile_u64().prop_map(|t| Command::LeaderChanged(LeaderChanged { raft_term: t })),
        (
            id(),
            hostile_u64(),
            any::<u32>(),
            hostile_u64(),
            hostile_u64()
        )
            .prop_map(|(m, inc, cap, pid, known)| {
                Command::Join(Join {
                    member: m.clone(),
                    uid: m.clone(),
                    incarnation: inc,
                    address: m,
                    capacity: cap,
                    process_id: pid,
                    known_incarnation: known,
                })
            }),
        prop::collection::vec((id(), small_u64()), 0..4).prop_map(|b| {
            Command::Heartbeat(Heartbeat {
                beats: b
                    .into_iter()
                    .map(|(member, incarnation)| Beat {
                        member,
                        incarnation,
                    })
                    .collect(),
            })
        }),
        (id(), small_u64()).prop_map(|(member, incarnation)| {
            Command::Leave(Leave {
                member,
                incarnation,
            })
        }),
        (id(), small_u64(), small_u64()).prop_map(|(member, incarnation, t)| {
            Command::Expire(Expire {
                raft_term: 0,
                member,
                incarnation,
                last_heartbeat_tick: t,
            })
        }),
        (id(), id(), id()).prop_map(|(l, s, m)| {
            Command::Launch(Launch {
                launch_id: l,
                sandbox: s,
                material_ref: m,
            })
        }),
        (id(), small_u64(), id(), small_u64(), small_u64()).prop_map(|(s, g, o, i, t)| {
            Command::Takeover(Takeover {
                raft_term: 0,
                sandbox: s,
                generation: g,
                expected_owner: o,
                expected_incarnation: i,
                expected_term: t,
            })
        }),
        (id(), small_u64(), id(), small_u64(), small_u64(), id()).prop_map(
            |(s, g, m, i, t, status)| {
                Command::Report(Report {
                    sandbox: s,
                    generation: g,
                    member: m,
                    incarnation: i,
                    term: t,
                    status,
                })
            }
        ),
        (id(), small_u64()).prop_map(|(s, g)| Command::Stop(Stop {
            sandbox: s,
            generation: g
        })),
        (id(), small_u64()).prop_map(|(s, g)| Command::Delete(Delete {
            raft_term: 0,
            sandbox: s,
            generation: g
        })),
        (id(), small_u64(), small_u64()).prop_map(|(s, g, t)| {
            Command::FailRecovery(FailRecovery {
                raft_term: 0,
                sandbox: s,
                generation: g,
                expected_term: t,
            })
        }),
        (id(), id(), any::<u32>()).prop_map(|(o, m, p)| Command::StartDrain(StartDrain {
            operation_id: o,
            member: m,
            max_parallel: p % 10,
        })),
        (id(), any::<u32>()).prop_map(|(o, p)| Command::StartRebalance(StartRebalance {
            operation_id: o,
            max_parallel: p % 10,
        })),
        (id(), id(), small_u64(), id(), prop::option::of(id())).prop_map(|(o, s, g, m, to)| {
            Command::Move(Move {
                raft_term: 0,
                operation_id: o,
                sandbox: s,
                generation: g,
                expected_owner: m,
                expected_incarnation: 1,
                expected_term: 1,
                to,
            })
        }),
        id().prop_map(|o| Command::CompleteOperation(CompleteOperation {
            raft_term: 0,
            operation_id: o
        })),
        id().prop_map(|o| Command::FailOperation(FailOperation {
            raft_term: 0,
            operation_id: o
        })),
        id().prop_map(|o| Command::CancelOperation(CancelOperation { operation_id: o })),
        (id(), small_u64(), id()).prop_map(|(s, g, r)| Command::FailLaunch(FailLaunch {
            raft_term: 0,
            sandbox: s,
            generation: g,
            reason: format!("LaunchFailed: {r}"),
        })),
    ]
}

/// A step: a raw command, or one aimed at a live record (filled from the
/// state when applied), or a tick at the current time.
#[derive(Clone, Debug)]
enum Step {
    Raw(Command),
    Tick,
    Ack(String),
    Takeover(String),
    Delete(String),
    Report(String),
    Retention(u64),
}

fn step() -> impl Strategy<Value = Step> {
    let sb = || prop::sample::select(vec!["s1", "s2", "s3"]).prop_map(str::to_string);
    prop_oneof![
        4 => raw_command().prop_map(Step::Raw),
        4 => Just(Step::Tick),
        2 => sb().prop_map(Step::Ack),
        1 => sb().prop_map(Step::Takeover),
        1 => sb().prop_map(Step::Delete),
        1 => sb().prop_map(Step::Report),
        1 => (1u64..6).prop_map(Step::Retention),
    ]
}

/// The command a step stands for in `st`.
fn command(st: &PoolState, step: &Step) -> Command {
    let current = |sb: &str| st.sandbox(sb).cloned();
    match step {
        Step::Raw(c) => c.clone(),
        Step::Tick => Command::Tick(Tick {
            raft_term: 0,
            expected_now_tick: st.now_tick(),
        }),
        Step::Retention(r) => Command::Configure(Configure {
            raft_term: 0,
            heartbeat_ttl_ticks: 3,
            recovery_deadline_ticks: 4,
            operation_deadline_ticks: 5,
            retention_ticks: *r,
        }),
        Step::Ack(sb) | Step::Takeover(sb) | Step::Delete(sb) | Step::Report(sb) => {
            let Some(s) = current(sb) else {
                return launch(&format!("l-{sb}-{}", st.now_tick()), sb);
            };
            let o = s.owner.clone();
            match step {
                Step::Ack(_) => Command::Acknowledge(Acknowledge {
                    sandbox: s.id,
                    generation: s.generation,
                    member: o.member,
                    incarnation: o.incarnation,
                    term: o.term,
                }),
                Step::Takeover(_) => Command::Takeover(Takeover {
                    raft_term: 0,
                    sandbox: s.id,
                    generation: s.generation,
                    expected_owner: o.member,
                    expected_incarnation: o.incarnation,
                    expected_term: o.term,
                }),
                Step::Delete(_) => Command::Delete(Delete {
                    raft_term: 0,
                    sandbox: s.id,
                    generation: s.generation,
                }),
                _ => Command::Report(Report {
                    sandbox: s.id,
                    generation: s.generation,
                    member: o.member,
                    incarnation: o.incarnation,
                    term: o.term,
                    status: "running".into(),
                }),
            }
        }
    }
}

/// A pool with members a, b, c joined.
fn seeded() -> PoolState {
    let mut st = PoolState::new();
    for (i, m) in ["a", "b", "c"].iter().enumerate() {
        st.apply(i as u64 + 1, &join_process(m, i as u64 + 1, 0, 2));
    }
    st
}

/// Applies `steps` from `st`; `validated` applies only what passes
/// `Command::validate` and then checks the invariants after every step.
fn run(mut st: PoolState, steps: &[Step], validated: bool) -> (PoolState, Vec<Command>) {
    let mut tracker = InvariantTracker::from_state(&st);
    let mut applied = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let c = command(&st, s);
        if validated && c.validate().is_err() {
            continue;
        }
        let outcome = st.apply(100 + i as u64, &c);
        if validated {
            if let Err(e) = st.check_invariants() {
                panic!("after {} -> {outcome:?}: {e}", c.name());
            }
            if let Err(e) = tracker.observe(&c, &st) {
                panic!("after {} -> {outcome:?}: {e}", c.name());
            }
        }
        applied.push(c);
    }
    (st, applied)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// validate passed => apply does not panic and keeps I1-I8.
    #[test]
    fn validated_commands_never_panic_and_keep_the_invariants(
        steps in prop::collection::vec(step(), 1..120)
    ) {
        run(seeded(), &steps, true);
    }

    /// Apply never panics, validated or not.
    #[test]
    fn any_command_applies_without_panicking(
        steps in prop::collection::vec(step(), 1..80)
    ) {
        run(seeded(), &steps, false);
    }

    /// Arbitrary bytes never make the snapshot decoder panic.
    #[test]
    fn arbitrary_snapshot_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = PoolState::decode_snapshot(&bytes);
    }

    /// A real snapshot with bytes overwritten decodes or is refused, never
    /// panics; what decodes applies commands without panicking.
    #[test]
    fn mutated_snapshots_never_panic(
        steps in prop::collection::vec(step(), 1..40),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        after in prop::collection::vec(step(), 0..40),
    ) {
        let (st, _) = run(seeded(), &steps, true);
        let mut bytes = st.encode_snapshot();
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        if let Ok(st) = PoolState::decode_snapshot(&bytes) {
            run(st, &after, false);
        }
    }

    /// Structurally generated snapshots (records with hostile values):
    /// decoding never panics; one that passes the invariant check applies
    /// arbitrary commands without panicking.
    #[test]
    fn generated_snapshots_never_panic(
        snap in snapshot(),
        after in prop::collection::vec(step(), 0..60),
    ) {
        if let Ok(st) = PoolState::decode_snapshot(&snap.encode_to_vec()) {
            run(st, &after, false);
        }
    }

    /// A replica restored from a snapshot at any point of the log ends with
    /// the same bytes as one that applied every entry (GC included).
    #[test]
    fn a_restored_replica_collects_exactly_like_the_others(
        steps in prop::collection::vec(step(), 1..150),
        cut in any::<prop::sample::Index>(),
    ) {
        let (whole, log) = run(seeded(), &steps, true);
        let cut = cut.index(log.len() + 1);
        let mut replica = seeded();
        for (i, c) in log[..cut].iter().enumerate() {
            replica.apply(i as u64 + 1, c);
        }
        let mut replica = PoolState::decode_snapshot(&replica.encode_snapshot())
            .expect("a valid state's snapshot decodes");
        for (i, c) in log[cut..].iter().enumerate() {
            replica.apply((cut + i) as u64 + 1, c);
        }
        let mut reference = seeded();
        for (i, c) in log.iter().enumerate() {
            reference.apply(i as u64 + 1, c);
        }
        prop_assert_eq!(reference.encode_snapshot(), replica.encode_snapshot());
        // The run applied the same commands at other indexes: same state
        // apart from report indexes, so compare what GC decided.
        prop_assert_eq!(whole.sandboxes().len(), reference.sandboxes().len());
        prop_assert_eq!(whole.members().len(), reference.members().len());
    }
}

fn record(r: Record) -> RecordEnvelope {
    RecordEnvelope { record: Some(r) }
}

fn snapshot() -> impl Strategy<Value = Snapshot> {
    let name = || {
        prop::sample::select(vec!["a", "b", "s1", "s2", "op1", "l1", ""]).prop_map(str::to_string)
    };
    let meta = (
        small_u64(),
        small_u64(),
        small_u64(),
        small_u64(),
        small_u64(),
    )
        .prop_map(|(now, ttl, rd, od, ret)| {
            record(Record::Meta(MetaRecord {
                now_tick: now,
                raft_term: 1,
                heartbeat_ttl_ticks: ttl,
                recovery_deadline_ticks: rd,
                operation_deadline_ticks: od,
                retention_ticks: ret,
                generation_floor: 0,
            }))
        });
    let member = (
        name(),
        small_u64(),
        0u32..4,
        0u32..4,
        0i32..6,
        prop::option::of(small_u64()),
    )
        .prop_map(|(id, inc, cap, charged, state, down)| {
            record(Record::Member(MemberRecord {
                id,
                incarnation: inc,
                capacity: cap,
                charged,
                state,
                down_since_tick: down,
                ..MemberRecord::default()
            }))
        });
    let sandbox = (
        name(),
        small_u64(),
        0i32..8,
        name(),
        small_u64(),
        any::<bool>(),
        prop::option::of(small_u64()),
        name(),
    )
        .prop_map(
            |(id, generation, phase, owner, term, ack, ended, launch_id)| {
                record(Record::Sandbox(SandboxRecord {
                    id,
                    generation,
                    phase,
                    owner: Some(OwnerRecord {
                        member: owner,
                        incarnation: 1,
                        term,
                        credential_epoch: term,
                        acknowledged: ack,
                    }),
                    launch_id,
                    ended_tick: ended,
                    ..SandboxRecord::default()
                }))
            },
        );
    let operation = (
        name(),
        prop::option::of(name()),
        0i32..7,
        0u32..10,
        prop::option::of(small_u64()),
        prop::option::of(small_u64()),
    )
        .prop_map(|(id, drain, phase, p, deadline, finished)| {
            record(Record::Operation(OperationRecord {
                id,
                drain_member: drain,
                phase,
                max_parallel: p,
                deadline_tick: deadline,
                finished_tick: finished,
                ..OperationRecord::default()
            }))
        });
    let launch = (
        name(),
        name(),
        prop::option::of(small_u64()),
        prop::option::of(name()),
        prop::option::of(small_u64()),
    )
        .prop_map(|(launch_id, sandbox, generation, refused, ended)| {
            record(Record::Launch(LaunchRecord {
                launch_id,
                sandbox,
                generation,
                refused,
                ended_tick: ended,
            }))
        });
    (
        prop::collection::vec(meta, 0..2),
        prop::collection::vec(prop_oneof![member, sandbox, operation, launch], 0..12),
    )
        .prop_map(|(mut records, rest)| {
            records.extend(rest);
            Snapshot { records }
        })
}

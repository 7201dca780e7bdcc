//! Basic flows, bad input, wire round trips.

mod common;

use common::*;
use pool::snapshot::*;
use pool::*;

/// - join two members, launch, acknowledge, report
/// - observed status is pending until acknowledged, then the report
#[test]
fn launch_acknowledge_report() {
    let mut h = H::new();
    h.join("a", 1, 2);
    h.join("b", 1, 2);
    let Effect::Admitted { assignment, replay } = h.ok(launch("l1", "s1")) else {
        panic!("not admitted")
    };
    assert!(!replay);
    assert_eq!(
        (
            assignment.term,
            assignment.credential_epoch,
            assignment.generation
        ),
        (1, 1, 1)
    );
    assert_eq!(h.st.observed_status("s1"), Some(ObservedStatus::Pending));
    assert_eq!(
        h.report("s1", "running"),
        Outcome::Rejected(Reason::NotAcknowledged)
    );
    assert_eq!(h.ack("s1"), Outcome::Applied(Effect::Acknowledged));
    assert_eq!(h.ack("s1"), Outcome::Applied(Effect::AlreadyAcknowledged));
    assert_eq!(
        h.report("s1", "running"),
        Outcome::Applied(Effect::ReportAccepted)
    );
    let idx = h.idx;
    assert_eq!(
        h.st.observed_status("s1"),
        Some(ObservedStatus::Reported {
            status: "running".into(),
            term: 1,
            index: idx
        })
    );
    // Retry of the same launch id returns the same assignment.
    let Effect::Admitted {
        assignment: again,
        replay,
    } = h.ok(launch("l1", "s1"))
    else {
        panic!("not admitted")
    };
    assert!(replay);
    assert_eq!(again, assignment);
    // A different launch of the same live sandbox id is refused as a reject.
    assert_eq!(
        h.rejected(launch("l2", "s1")),
        Reason::SandboxExists("s1".into())
    );
    h.assert_replay_identical();
}

/// - bad input returns a typed reason and leaves the state byte-identical
///   (the harness compares snapshots on every rejection)
#[test]
fn bad_input_rejected_with_typed_reason() {
    let mut h = H::new();
    assert_eq!(h.rejected(join("a", 1, 0)), Reason::ZeroCapacity);
    assert_eq!(h.rejected(join("", 1, 1)), Reason::EmptyId);
    h.join("a", 2, 1);
    h.join("b", 1, 1);
    assert_eq!(
        h.rejected(join("a", 1, 1)),
        Reason::StaleIncarnation {
            given: 1,
            current: 2
        }
    );
    for n in [0, 9] {
        assert_eq!(
            h.rejected(Command::StartDrain(StartDrain {
                operation_id: "op".into(),
                member: "a".into(),
                max_parallel: n,
            })),
            Reason::InvalidMaxParallel(n)
        );
        assert_eq!(
            h.rejected(Command::StartRebalance(StartRebalance {
                operation_id: "op".into(),
                max_parallel: n,
            })),
            Reason::InvalidMaxParallel(n)
        );
    }
    assert_eq!(
        h.rejected(Command::StartDrain(StartDrain {
            operation_id: "op".into(),
            member: "zz".into(),
            max_parallel: 1,
        })),
        Reason::UnknownMember("zz".into())
    );
    assert_eq!(
        h.rejected(Command::Leave(Leave {
            member: "zz".into(),
            incarnation: 1
        })),
        Reason::UnknownMember("zz".into())
    );
    assert_eq!(
        h.rejected(Command::Delete(Delete {
            raft_term: 0,
            sandbox: "nope".into(),
            generation: 1
        })),
        Reason::UnknownSandbox("nope".into())
    );
    assert_eq!(
        h.rejected(report("nope", 1, "a", 2, 1, "x")),
        Reason::UnknownSandbox("nope".into())
    );
    assert_eq!(
        h.rejected(Command::CancelOperation(CancelOperation {
            operation_id: "nope".into()
        })),
        Reason::UnknownOperation("nope".into())
    );
    assert_eq!(
        h.rejected(Command::Tick(Tick {
            raft_term: 0,
            expected_now_tick: 7
        })),
        Reason::StaleTick {
            expected: 7,
            current: 0
        }
    );
    assert_eq!(
        h.rejected(Command::Configure(Configure {
            raft_term: 0,
            heartbeat_ttl_ticks: 0,
            recovery_deadline_ticks: 1,
            operation_deadline_ticks: 1,
            retention_ticks: 0,
        })),
        Reason::InvalidConfig("heartbeat_ttl_ticks".into())
    );
    // Stale preconditions on a live sandbox.
    h.ok(launch("l1", "s1"));
    h.ack("s1");
    let o = h.owner("s1");
    assert_eq!(
        h.rejected(Command::Takeover(Takeover {
            raft_term: 0,
            sandbox: "s1".into(),
            generation: 1,
            expected_owner: o.member.clone(),
            expected_incarnation: o.incarnation,
            expected_term: 5,
        })),
        Reason::StaleTerm {
            expected: 5,
            current: 1
        }
    );
    assert_eq!(h.rejected(takeover_of(&h.st, "s1")), Reason::OwnerAlive);
    assert_eq!(
        h.rejected(Command::Takeover(Takeover {
            raft_term: 0,
            sandbox: "s1".into(),
            generation: 2,
            expected_owner: o.member.clone(),
            expected_incarnation: o.incarnation,
            expected_term: 1,
        })),
        Reason::StaleGeneration {
            given: 2,
            current: 1
        }
    );
    assert_eq!(
        h.rejected(report("s1", 1, &o.member, o.incarnation + 1, 1, "x")),
        Reason::StaleIncarnation {
            given: o.incarnation + 1,
            current: o.incarnation
        }
    );
    assert_eq!(
        h.rejected(Command::Expire(Expire {
            raft_term: 0,
            member: "a".into(),
            incarnation: 2,
            last_heartbeat_tick: 0
        })),
        Reason::MemberAlive
    );
    assert_eq!(
        h.rejected(Command::FailRecovery(FailRecovery {
            raft_term: 0,
            sandbox: "s1".into(),
            generation: 1,
            expected_term: 1
        })),
        Reason::DeadlineNotReached
    );
}

/// - a heartbeat batch skips bad entries one by one
#[test]
fn heartbeat_batch_skips_bad_entries() {
    let mut h = H::new();
    h.join("a", 2, 1);
    h.ticks(3);
    let e = h.beat(&[("a", 2), ("a", 1), ("zz", 1)]);
    let Effect::Heartbeats { accepted, skipped } = e else {
        panic!("{e:?}")
    };
    assert_eq!(accepted, 1);
    assert_eq!(
        skipped,
        vec![
            SkippedBeat {
                member: "a".into(),
                reason: Reason::StaleIncarnation {
                    given: 1,
                    current: 2
                }
            },
            SkippedBeat {
                member: "zz".into(),
                reason: Reason::UnknownMember("zz".into())
            },
        ]
    );
    assert_eq!(h.st.member("a").unwrap().last_heartbeat_tick, 3);
}

/// - every command variant round-trips through its wire encoding
/// - garbage and empty envelopes decode to typed errors
#[test]
fn command_wire_round_trip() {
    let cmds = vec![
        Command::Tick(Tick {
            raft_term: 0,
            expected_now_tick: 3,
        }),
        Command::Configure(Configure {
            raft_term: 0,
            heartbeat_ttl_ticks: 1,
            recovery_deadline_ticks: 2,
            operation_deadline_ticks: 3,
            retention_ticks: 0,
        }),
        Command::LeaderChanged(LeaderChanged { raft_term: 9 }),
        join("a", 1, 2),
        Command::Heartbeat(Heartbeat {
            beats: vec![Beat {
                member: "a".into(),
                incarnation: 1,
            }],
        }),
        Command::Leave(Leave {
            member: "a".into(),
            incarnation: 1,
        }),
        Command::Expire(Expire {
            raft_term: 0,
            member: "a".into(),
            incarnation: 1,
            last_heartbeat_tick: 4,
        }),
        launch("l", "s"),
        Command::Takeover(Takeover::default()),
        Command::Acknowledge(Acknowledge::default()),
        report("s", 1, "a", 1, 1, "ok"),
        Command::Stop(Stop::default()),
        Command::Delete(Delete::default()),
        Command::FailRecovery(FailRecovery::default()),
        Command::StartDrain(StartDrain::default()),
        Command::StartRebalance(StartRebalance::default()),
        Command::Move(Move {
            to: Some("b".into()),
            ..Default::default()
        }),
        Command::Move(Move::default()),
        Command::CompleteOperation(CompleteOperation::default()),
        Command::FailOperation(FailOperation::default()),
        Command::CancelOperation(CancelOperation::default()),
        Command::RecordRuntime(RecordRuntime {
            raft_term: 0,
            sandbox: "s".into(),
            generation: 2,
            name: "sb-s-g2".into(),
            address: "10.0.0.7:7400".into(),
            ca_pem: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
            driver_scope: "process:0123456789abcdef0123456789abcdef".into(),
        }),
        Command::RecordRuntime(RecordRuntime::default()),
        Command::FailLaunch(FailLaunch {
            raft_term: 0,
            sandbox: "s".into(),
            generation: 2,
            reason: "LaunchFailed: Unschedulable: 0/3 nodes are available".into(),
        }),
        Command::FailLaunch(FailLaunch::default()),
    ];
    for c in cmds {
        let b = c.encode_to_vec();
        assert_eq!(Command::decode(&b), Ok(c));
    }
    assert_eq!(Command::decode(&[]), Err(DecodeError::UnknownCommand));
    // Field 99 (unknown tag from a newer version): skipped, no command.
    assert_eq!(
        Command::decode(&[0x98, 0x06, 0x01]),
        Err(DecodeError::UnknownCommand)
    );
    assert!(matches!(
        Command::decode(&[0xff, 0xff]),
        Err(DecodeError::Protobuf(_))
    ));
    // Tag 4 (Join) is the wire discriminant: first byte is field 4, wire type 2.
    assert_eq!(join("a", 1, 1).encode_to_vec()[0], (4 << 3) | 2);
    // RecordRuntime is tag 21 and FailLaunch tag 22 (two-byte keys: 21 << 3 | 2
    // = 170 = 0xaa 0x01, 22 << 3 | 2 = 178 = 0xb2 0x01).
    let tags = |c: Command| c.encode_to_vec()[..2].to_vec();
    assert_eq!(
        tags(Command::RecordRuntime(RecordRuntime::default())),
        [0xaa, 0x01]
    );
    assert_eq!(
        tags(Command::FailLaunch(FailLaunch::default())),
        [0xb2, 0x01]
    );
}

fn sample_state() -> H {
    let mut h = H::new();
    h.join("a", 1, 3);
    h.join("b", 1, 3);
    h.join("c", 1, 3);
    for i in 0..4 {
        h.ok(launch(&format!("l{i}"), &format!("s{i}")));
        h.ack(&format!("s{i}"));
        h.report(&format!("s{i}"), "running");
    }
    h.ok(Command::StartRebalance(StartRebalance {
        operation_id: "rb".into(),
        max_parallel: 2,
    }));
    h.ok(Command::Delete(Delete {
        raft_term: 0,
        sandbox: "s3".into(),
        generation: 1,
    }));
    h
}

fn round_trip_table<T: prost::Message + Default + PartialEq + std::fmt::Debug>(r: T) {
    let b = r.encode_to_vec();
    let back = T::decode(b.as_slice()).expect("decode record");
    assert_eq!(back, r);
}

#[test]
fn snapshot_round_trip_meta() {
    let h = sample_state();
    let s = PoolState::decode_snapshot(&h.snapshot()).unwrap();
    assert_eq!(s.now_tick(), h.st.now_tick());
    assert_eq!(s.config(), h.st.config());
    assert_eq!(s.raft_term(), h.st.raft_term());
    assert_eq!(s.encode_snapshot(), h.snapshot());
}

#[test]
fn snapshot_round_trip_members() {
    let h = sample_state();
    for m in h.st.members().values() {
        round_trip_table(member_to_record(m));
        assert_eq!(&member_from_record(member_to_record(m)).unwrap(), m);
    }
    let s = PoolState::decode_snapshot(&h.snapshot()).unwrap();
    assert_eq!(s.members(), h.st.members());
}

#[test]
fn snapshot_round_trip_sandboxes() {
    let h = sample_state();
    for x in h.st.sandboxes().values() {
        round_trip_table(sandbox_to_record(x));
        assert_eq!(&sandbox_from_record(sandbox_to_record(x)).unwrap(), x);
    }
    let s = PoolState::decode_snapshot(&h.snapshot()).unwrap();
    assert_eq!(s.sandboxes(), h.st.sandboxes());
}

#[test]
fn snapshot_round_trip_operations() {
    let h = sample_state();
    assert!(!h.st.operations().is_empty());
    for o in h.st.operations().values() {
        assert_eq!(&operation_from_record(operation_to_record(o)).unwrap(), o);
    }
    let s = PoolState::decode_snapshot(&h.snapshot()).unwrap();
    assert_eq!(s.operations(), h.st.operations());
}

#[test]
fn snapshot_round_trip_launches() {
    let mut h = sample_state();
    // A refusal tombstone too.
    h.ok(launch("big1", "x1"));
    h.ok(launch("big2", "x2"));
    h.ok(launch("big3", "x3"));
    h.ok(launch("big4", "x4"));
    h.ok(launch("big5", "x5"));
    h.ok(launch("big6", "x6"));
    assert!(matches!(
        h.ok(launch("big7", "x7")),
        Effect::LaunchRefused(_)
    ));
    for (id, l) in h.st.launches() {
        assert_eq!(
            launch_from_record(launch_to_record(id, l), 0).unwrap(),
            (id.clone(), l.clone())
        );
    }
    let s = PoolState::decode_snapshot(&h.snapshot()).unwrap();
    assert_eq!(s.launches(), h.st.launches());
}

#[test]
fn snapshot_decode_rejects_garbage() {
    assert_eq!(
        PoolState::decode_snapshot(&[]).err(),
        Some(DecodeError::Incomplete("meta"))
    );
    assert!(PoolState::decode_snapshot(&[0xff, 0xff, 0xff]).is_err());
    // A member record with an unknown state value.
    let bad = Snapshot {
        records: vec![
            RecordEnvelope {
                record: Some(Record::Meta(MetaRecord::default())),
            },
            RecordEnvelope {
                record: Some(Record::Member(MemberRecord {
                    id: "a".into(),
                    state: 77,
                    ..Default::default()
                })),
            },
        ],
    };
    assert_eq!(
        PoolState::decode_snapshot(&prost::Message::encode_to_vec(&bad)).err(),
        Some(DecodeError::InvalidEnum {
            field: "member.state",
            value: 77
        })
    );
}

/// - a member or sandbox id outside the identifier rule (`pool::ids`) is
///   refused before the command is proposed (`Command::check_ids`, which the
///   store's `validate` calls on the proposing node and on a leader taking
///   a forward), naming the field
/// - apply itself does not check the rule: a log written by an older
///   version, which accepted such ids, replays to the same state
#[test]
fn ids_outside_the_rule_are_refused_before_proposing_and_old_logs_replay() {
    use pool::ids::{IdRule, InvalidId};
    let invalid = |field: &str, rule| {
        Err(InvalidId {
            field: field.into(),
            rule,
        })
    };
    let long = "x".repeat(300);
    for (id, rule) in [
        ("../x", IdRule::Charset),
        ("/etc/passwd", IdRule::Charset),
        ("..", IdRule::LeadingChar),
        ("a b", IdRule::Charset),
        (long.as_str(), IdRule::TooLong),
    ] {
        assert_eq!(join(id, 1, 1).check_ids(), invalid("member_id", rule));
    }
    for (id, rule) in [
        ("../x", IdRule::Charset),
        ("x/../../y", IdRule::Charset),
        (".", IdRule::LeadingChar),
        (long.as_str(), IdRule::TooLong),
    ] {
        assert_eq!(launch("l1", id).check_ids(), invalid("sandbox_id", rule));
    }
    assert_eq!(join("a", 1, 1).check_ids(), Ok(()));
    assert_eq!(launch("l1", "sb-1").check_ids(), Ok(()));
    // What an older version wrote applies as it did then.
    let mut h = H::new();
    h.join("a b", 1, 1);
    h.assert_replay_identical();
}

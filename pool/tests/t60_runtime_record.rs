//! The runtime record (issue 14, docs/design/0003): the leader's launcher
//! records each live generation's runtime endpoint (`RecordRuntime`) and
//! fails a generation whose launch failed or whose runtime was lost
//! (`FailLaunch`). Every step goes through the harness: wire round trip,
//! a rejection changes no snapshot byte, I1–I8 and the runtime checks
//! ("a recorded runtime belongs to its generation and is never replaced")
//! after every command.

mod common;

use common::*;
use pool::visibility::SandboxView;
use pool::*;

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----\n";

fn record(sb: &str, generation: u64, name: &str, address: &str, ca_pem: &str) -> Command {
    Command::RecordRuntime(RecordRuntime {
        raft_term: 0,
        sandbox: sb.to_string(),
        generation,
        name: name.to_string(),
        address: address.to_string(),
        ca_pem: ca_pem.to_string(),
        driver_scope: "process:0123456789abcdef0123456789abcdef".into(),
    })
}

fn good(sb: &str, generation: u64) -> Command {
    record(
        sb,
        generation,
        &format!("{sb}-g{generation}"),
        "10.1.0.5:7400",
        CA,
    )
}

fn fail_launch(sb: &str, generation: u64, reason: &str) -> Command {
    Command::FailLaunch(FailLaunch {
        raft_term: 0,
        sandbox: sb.to_string(),
        generation,
        reason: reason.to_string(),
    })
}

fn runtime_of(h: &H, sb: &str) -> Option<Runtime> {
    h.st.sandbox(sb).expect("sandbox").runtime.clone()
}

/// Two members, `s1` launched (admitting) on one of them.
fn pool_with_one_sandbox() -> H {
    let mut h = H::new();
    h.join("a", 1, 2);
    h.join("b", 1, 2);
    h.ok(launch("l1", "s1"));
    h
}

/// - given: a sandbox admitting, then assigned, recovering and stopping
/// - when: the launcher records its runtime in each live phase
/// - then: the endpoint is on the record and in the owner's view; phase,
///   owner, term, epoch and charges are untouched
#[test]
fn runtime_is_recorded_on_every_live_phase_and_reaches_the_owners_view() {
    // --- step: admitting
    let mut h = pool_with_one_sandbox();
    let before = h.st.sandbox("s1").unwrap().clone();
    let charged: Vec<u32> = h.st.members().values().map(|m| m.charged).collect();
    assert_eq!(h.ok(good("s1", 1)), Effect::RuntimeRecorded);
    let after = h.st.sandbox("s1").unwrap().clone();
    let expected = Runtime {
        name: "s1-g1".into(),
        address: "10.1.0.5:7400".into(),
        ca_pem: CA.into(),
        recorded_index: h.idx,
        driver_scope: "process:0123456789abcdef0123456789abcdef".into(),
    };
    assert_eq!(after.runtime, Some(expected.clone()));
    assert_eq!(
        Sandbox {
            runtime: None,
            ..after.clone()
        },
        before,
        "only the runtime changed"
    );
    let charged_after: Vec<u32> = h.st.members().values().map(|m| m.charged).collect();
    assert_eq!(charged_after, charged);
    assert_eq!(SandboxView::of(&after).runtime, Some(expected));

    // --- step: assigned
    let mut h = pool_with_one_sandbox();
    h.ack("s1");
    assert_eq!(h.st.sandbox("s1").unwrap().phase, Phase::Assigned);
    assert_eq!(h.ok(good("s1", 1)), Effect::RuntimeRecorded);

    // --- step: recovering (the owner left, another member took over)
    let mut h = pool_with_one_sandbox();
    h.ack("s1");
    let o = h.owner("s1");
    h.ok(Command::Leave(Leave {
        member: o.member.clone(),
        incarnation: o.incarnation,
    }));
    h.ok(takeover_of(&h.st, "s1"));
    assert_eq!(h.st.sandbox("s1").unwrap().phase, Phase::Recovering);
    assert_eq!(h.ok(good("s1", 1)), Effect::RuntimeRecorded);

    // --- step: stopping
    let mut h = pool_with_one_sandbox();
    h.ok(Command::Stop(Stop {
        sandbox: "s1".into(),
        generation: 1,
    }));
    assert_eq!(h.ok(good("s1", 1)), Effect::RuntimeRecorded);
    h.assert_replay_identical();
}

/// - given: a runtime recorded for s1 generation 1
/// - when: the same record is proposed again (a new leader re-proposing)
/// - then: applied, nothing changed
/// - when: a record differing in any one field is proposed
/// - then: rejected "runtime already recorded as s1-g1"; the first stays
#[test]
fn same_record_is_idempotent_and_a_different_one_never_replaces_it() {
    let mut h = pool_with_one_sandbox();
    h.ok(good("s1", 1));
    let snapshot = h.snapshot();
    assert_eq!(h.ok(good("s1", 1)), Effect::RuntimeAlreadyRecorded);
    assert_eq!(
        h.snapshot(),
        snapshot,
        "an idempotent repeat changes nothing"
    );
    let other_ca = CA.replace("MIIB", "MIIC");
    for c in [
        record("s1", 1, "s1-g1-other", "10.1.0.5:7400", CA),
        record("s1", 1, "s1-g1", "10.1.0.6:7400", CA),
        record("s1", 1, "s1-g1", "10.1.0.5:7400", &other_ca),
    ] {
        let r = h.rejected(c);
        assert_eq!(r, Reason::RuntimeAlreadyRecorded("s1-g1".into()));
        assert_eq!(r.to_string(), "runtime already recorded as s1-g1");
    }
    assert_eq!(runtime_of(&h, "s1").unwrap().address, "10.1.0.5:7400");
}

/// - given: sandboxes deleted, failed, unknown, and one at generation 2
/// - when: a runtime is recorded for them (or for the superseded
///   generation 1)
/// - then: rejected with the typed reason; nothing changes
#[test]
fn record_on_a_terminal_unknown_or_other_generation_is_refused() {
    let mut h = pool_with_one_sandbox();
    h.ok(launch("l2", "s2"));
    h.ok(Command::Delete(Delete {
        raft_term: 0,
        sandbox: "s1".into(),
        generation: 1,
    }));
    assert_eq!(h.rejected(good("s1", 1)), Reason::Deleted);
    h.ok(fail_launch("s2", 1, "LaunchFailed: image pull failed"));
    assert_eq!(h.rejected(good("s2", 1)), Reason::Failed);
    assert_eq!(
        h.rejected(good("nope", 1)),
        Reason::UnknownSandbox("nope".into())
    );
    // s1 generation 2: the old generation's runtime cannot be recorded on it.
    h.ok(launch("l1-again", "s1"));
    assert_eq!(h.st.sandbox("s1").unwrap().generation, 2);
    assert_eq!(
        h.rejected(good("s1", 1)),
        Reason::StaleGeneration {
            given: 1,
            current: 2
        }
    );
    assert_eq!(
        h.rejected(good("s1", 3)),
        Reason::StaleGeneration {
            given: 3,
            current: 2
        }
    );
}

/// `good(sb, generation)` listed by a driver of `scope`.
fn scoped(sb: &str, generation: u64, scope: &str) -> Command {
    let Command::RecordRuntime(mut c) = good(sb, generation) else {
        unreachable!("good is a RecordRuntime")
    };
    c.driver_scope = scope.to_string();
    Command::RecordRuntime(c)
}

/// - when: a record with a malformed name, address, CA or driver scope is
///   proposed
/// - then: rejected `InvalidRuntime` naming the field; nothing recorded
#[test]
fn malformed_endpoint_is_refused_naming_the_field() {
    let mut h = pool_with_one_sandbox();
    let long_name = "a".repeat(64);
    let long_address = format!("{}:7400", "1".repeat(260));
    let long_ca = format!("{CA}{}", "A".repeat(16 * 1024));
    let cases: Vec<(Command, &str)> = vec![
        (record("s1", 1, "", "10.1.0.5:7400", CA), "name"),
        (record("s1", 1, &long_name, "10.1.0.5:7400", CA), "name"),
        (record("s1", 1, "S1-g1", "10.1.0.5:7400", CA), "name"),
        (record("s1", 1, "s1_g1", "10.1.0.5:7400", CA), "name"),
        (record("s1", 1, "s1.g1", "10.1.0.5:7400", CA), "name"),
        (record("s1", 1, "s1-g1", "", CA), "address"),
        (record("s1", 1, "s1-g1", "10.1.0.5", CA), "address"),
        (
            record("s1", 1, "s1-g1", "runtime.local:7400", CA),
            "address",
        ),
        (record("s1", 1, "s1-g1", "10.1.0.5:99999", CA), "address"),
        (record("s1", 1, "s1-g1", &long_address, CA), "address"),
        (record("s1", 1, "s1-g1", "10.1.0.5:7400", ""), "ca_pem"),
        (
            record("s1", 1, "s1-g1", "10.1.0.5:7400", "not a pem"),
            "ca_pem",
        ),
        (
            record(
                "s1",
                1,
                "s1-g1",
                "10.1.0.5:7400",
                "-----BEGIN PRIVATE KEY-----\n",
            ),
            "ca_pem",
        ),
        (
            record("s1", 1, "s1-g1", "10.1.0.5:7400", &long_ca),
            "ca_pem",
        ),
        (scoped("s1", 1, &"p".repeat(129)), "driver_scope"),
        (scoped("s1", 1, "process: with a space"), "driver_scope"),
        (scoped("s1", 1, "process:\u{e9}t\u{e9}"), "driver_scope"),
        (scoped("s1", 1, "process:\n"), "driver_scope"),
    ];
    for (c, field) in cases {
        match h.rejected(c) {
            Reason::InvalidRuntime { field: f, .. } => assert_eq!(f, field),
            other => panic!("expected InvalidRuntime {field}, got {other:?}"),
        }
    }
    assert_eq!(runtime_of(&h, "s1"), None);
    // The limits themselves are accepted: 63-char name, IPv6 address, CA of
    // exactly 16 KiB.
    let ca_16k = format!("{CA}{}", "A".repeat(16 * 1024 - CA.len()));
    assert_eq!(ca_16k.len(), 16 * 1024);
    h.ok(record("s1", 1, &"a".repeat(63), "[fd00::5]:7400", &ca_16k));
    // A 128-byte scope, and an empty one (a record from before scopes).
    let mut h = pool_with_one_sandbox();
    h.ok(scoped("s1", 1, &"p".repeat(128)));
    let mut h = pool_with_one_sandbox();
    h.ok(scoped("s1", 1, ""));
    assert_eq!(
        runtime_of(&h, "s1").map(|r| r.driver_scope),
        Some(String::new())
    );
}

/// - given: a sandbox with a runtime, owned and charged on its member
/// - when: the launcher proposes `FailLaunch` (`RuntimeLost: ...`)
/// - then: phase Failed with exactly that reason (also in the fenced
///   observed status), the owner's slot released, launch material and
///   recovery dropped, the recorded runtime kept (the launcher deletes it)
#[test]
fn fail_launch_fails_the_generation_and_releases_its_slot_and_material() {
    let mut h = pool_with_one_sandbox();
    h.ack("s1");
    h.ok(good("s1", 1));
    let owner = h.owner("s1").member;
    assert_eq!(h.st.member(&owner).unwrap().charged, 1);
    let reason = "RuntimeLost: s1-g1 is gone (Pod deleted)";
    assert_eq!(
        h.ok(fail_launch("s1", 1, reason)),
        Effect::LaunchFailed {
            reason: reason.into()
        }
    );
    let s = h.st.sandbox("s1").unwrap();
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(s.failure.as_deref(), Some(reason));
    assert_eq!(s.material_ref, "");
    assert_eq!(s.recovery, None);
    assert_eq!(s.runtime.as_ref().map(|r| r.name.as_str()), Some("s1-g1"));
    assert_eq!(h.st.member(&owner).unwrap().charged, 0, "charge released");
    assert_eq!(
        h.st.observed_status("s1"),
        Some(ObservedStatus::Failed(reason.into()))
    );
    assert_eq!(h.st.assignment("s1"), None);
    // The owner sees it among its released sandboxes, with no material.
    assert_eq!(SandboxView::of(s).material_ref, "");
    // A launch failure of a recovering generation clears its recovery too,
    // exactly as FailRecovery would.
    let mut h = pool_with_one_sandbox();
    h.ack("s1");
    let o = h.owner("s1");
    h.ok(Command::Leave(Leave {
        member: o.member.clone(),
        incarnation: o.incarnation,
    }));
    h.ok(takeover_of(&h.st, "s1"));
    let new_owner = h.owner("s1").member;
    h.ok(fail_launch(
        "s1",
        1,
        "LaunchFailed: Unschedulable: 0/3 nodes are available",
    ));
    let s = h.st.sandbox("s1").unwrap();
    assert_eq!((s.phase, &s.recovery), (Phase::Failed, &None));
    assert_eq!(h.st.member(&new_owner).unwrap().charged, 0);
    // A stopping generation (it still holds its slot) fails the same way.
    let mut h = pool_with_one_sandbox();
    h.ok(Command::Stop(Stop {
        sandbox: "s1".into(),
        generation: 1,
    }));
    h.ok(fail_launch("s1", 1, "LaunchFailed: no such image"));
    assert!(h.st.members().values().all(|m| m.charged == 0));
    h.assert_replay_identical();
}

/// - when: `FailLaunch` names a deleted, failed, unknown or superseded
///   generation
/// - then: rejected; the first failure reason is never overwritten
#[test]
fn fail_launch_on_a_terminal_or_stale_generation_is_refused() {
    let mut h = pool_with_one_sandbox();
    h.ok(launch("l2", "s2"));
    h.ok(fail_launch("s1", 1, "LaunchFailed: first"));
    assert_eq!(
        h.rejected(fail_launch("s1", 1, "RuntimeLost: second")),
        Reason::Failed
    );
    assert_eq!(
        h.st.sandbox("s1").unwrap().failure.as_deref(),
        Some("LaunchFailed: first")
    );
    h.ok(Command::Delete(Delete {
        raft_term: 0,
        sandbox: "s2".into(),
        generation: 1,
    }));
    assert_eq!(
        h.rejected(fail_launch("s2", 1, "LaunchFailed: x")),
        Reason::Deleted
    );
    assert_eq!(
        h.rejected(fail_launch("zz", 1, "LaunchFailed: x")),
        Reason::UnknownSandbox("zz".into())
    );
    h.ok(launch("l1-again", "s1"));
    assert_eq!(
        h.rejected(fail_launch("s1", 1, "LaunchFailed: late")),
        Reason::StaleGeneration {
            given: 1,
            current: 2
        }
    );
    assert_eq!(h.st.sandbox("s1").unwrap().phase, Phase::Admitting);
}

/// - when: the reason has no known prefix, or is over 1024 bytes
/// - then: rejected `InvalidFailureReason`; the sandbox stays live
#[test]
fn fail_launch_reason_must_name_launch_failed_or_runtime_lost() {
    let mut h = pool_with_one_sandbox();
    for reason in [
        "",
        "LaunchFailed",
        "LaunchFailed:no space",
        "launchfailed: x",
        "SupervisorRecoveryFailed",
        "RuntimeLost",
        "Whatever: x",
    ] {
        assert!(
            matches!(
                h.rejected(fail_launch("s1", 1, reason)),
                Reason::InvalidFailureReason(_)
            ),
            "{reason:?}"
        );
    }
    let long = format!("RuntimeLost: {}", "x".repeat(1024));
    assert!(matches!(
        h.rejected(fail_launch("s1", 1, &long)),
        Reason::InvalidFailureReason(_)
    ));
    let exactly = format!("RuntimeLost: {}", "x".repeat(1024 - "RuntimeLost: ".len()));
    assert_eq!(exactly.len(), 1024);
    assert_eq!(h.st.sandbox("s1").unwrap().phase, Phase::Admitting);
    h.ok(fail_launch("s1", 1, &exactly));
}

/// - given: generation 1 with a runtime, then deleted
/// - when: the sandbox id is launched again
/// - then: generation 2 starts without a runtime and takes its own
#[test]
fn a_new_generation_starts_without_a_runtime() {
    let mut h = pool_with_one_sandbox();
    h.ok(good("s1", 1));
    h.ok(Command::Delete(Delete {
        raft_term: 0,
        sandbox: "s1".into(),
        generation: 1,
    }));
    assert_eq!(runtime_of(&h, "s1").unwrap().name, "s1-g1");
    h.ok(launch("l1-again", "s1"));
    assert_eq!(runtime_of(&h, "s1"), None);
    h.ok(good("s1", 2));
    assert_eq!(runtime_of(&h, "s1").unwrap().name, "s1-g2");
    h.assert_replay_identical();
}

/// The sandbox record as written before issue 14 (fields 1 to 9, no
/// runtime): what an older binary's snapshot holds.
#[derive(Clone, PartialEq, prost::Message)]
struct SandboxRecordBefore14 {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(uint64, tag = "2")]
    generation: u64,
    #[prost(enumeration = "pool::snapshot::PhaseWire", tag = "3")]
    phase: i32,
    #[prost(message, optional, tag = "4")]
    owner: Option<pool::snapshot::OwnerRecord>,
    #[prost(string, tag = "7")]
    launch_id: String,
    #[prost(string, tag = "8")]
    material_ref: String,
}

/// - snapshots of a state with and without runtimes round-trip byte for byte
/// - a sandbox record written before the runtime field decodes to no runtime
#[test]
fn snapshot_round_trip_with_and_without_runtime() {
    use pool::snapshot::{sandbox_from_record, sandbox_to_record, SandboxRecord};
    use prost::Message;

    let mut h = pool_with_one_sandbox();
    h.ok(launch("l2", "s2"));
    h.ok(good("s1", 1));
    h.ok(fail_launch("s2", 1, "LaunchFailed: x"));
    let bytes = h.snapshot();
    let back = PoolState::decode_snapshot(&bytes).unwrap();
    assert_eq!(back.sandboxes(), h.st.sandboxes());
    assert_eq!(back.encode_snapshot(), bytes);
    for s in h.st.sandboxes().values() {
        let r = sandbox_to_record(s);
        assert_eq!(r.runtime.is_some(), s.runtime.is_some());
        let decoded = SandboxRecord::decode(r.encode_to_vec().as_slice()).unwrap();
        assert_eq!(&sandbox_from_record(decoded).unwrap(), s);
    }
    // An older record: no field 10.
    let s1 = h.st.sandbox("s1").unwrap();
    let old = SandboxRecordBefore14 {
        id: s1.id.clone(),
        generation: 1,
        phase: pool::snapshot::PhaseWire::Admitting as i32,
        owner: sandbox_to_record(s1).owner,
        launch_id: s1.launch_id.clone(),
        material_ref: s1.material_ref.clone(),
    };
    let decoded = SandboxRecord::decode(old.encode_to_vec().as_slice()).unwrap();
    let s = sandbox_from_record(decoded).unwrap();
    assert_eq!(s.runtime, None);
    assert_eq!(s.phase, Phase::Admitting);
}

/// - a history mixing launches, runtime records, repeats, refusals and
///   launch failures replays to byte-identical state (determinism), and
///   every touched sandbox is journaled for the supervisor views
#[test]
fn runtime_history_replays_identically_and_is_journaled() {
    use pool::visibility::{ChangeLog, Changes};

    let mut h = pool_with_one_sandbox();
    let mut journal = ChangeLog::new();
    let steps = vec![
        launch("l2", "s2"),
        good("s1", 1),
        good("s1", 1),
        record("s1", 1, "s1-other", "10.1.0.5:7400", CA),
        good("s2", 1),
        fail_launch("s2", 1, "RuntimeLost: s2-g1 exited"),
        launch("l2b", "s2"),
        good("s2", 2),
    ];
    let start = h.idx;
    for c in steps {
        let o = h.apply(c.clone());
        journal.record(h.idx, &c, &o);
    }
    h.assert_replay_identical();
    match journal.since(start) {
        Changes::Since { sandboxes, .. } => {
            assert!(sandboxes.contains("s1") && sandboxes.contains("s2"));
        }
        Changes::Unknown => panic!("journal lost the runtime commands"),
        other @ Changes::ByOwner { .. } => panic!("since() answered by owner: {other:?}"),
    }
}

/// The invariant tracker's runtime check itself: a state in which a
/// recorded runtime changed (built by editing a snapshot, since apply never
/// does it) is reported as a violation, as is a runtime appearing through
/// another command than `RecordRuntime`.
#[test]
fn tracker_reports_a_replaced_or_smuggled_runtime() {
    use pool::snapshot::{Record, Snapshot};
    use prost::Message;

    let edit = |state: &PoolState, f: &dyn Fn(&mut pool::snapshot::SandboxRecord)| {
        let mut snap = Snapshot::decode(state.encode_snapshot().as_slice()).unwrap();
        for env in &mut snap.records {
            if let Some(Record::Sandbox(r)) = &mut env.record {
                f(r);
            }
        }
        PoolState::decode_snapshot(&snap.encode_to_vec()).unwrap()
    };
    let mut h = pool_with_one_sandbox();
    let without = h.st.clone();
    h.ok(good("s1", 1));
    let replaced = edit(&h.st, &|r| {
        if let Some(rt) = &mut r.runtime {
            rt.address = "10.9.9.9:7400".into();
        }
    });
    let mut tracker = InvariantTracker::from_state(&h.st);
    let v = tracker.observe(&good("s1", 1), &replaced).unwrap_err();
    assert_eq!(v.invariant, "runtime", "{v}");
    // A runtime that appears by a command other than RecordRuntime.
    let mut tracker = InvariantTracker::from_state(&without);
    let v = tracker
        .observe(&Command::Tick(Tick::default()), &h.st)
        .unwrap_err();
    assert_eq!(v.invariant, "runtime", "{v}");
    // The same transition by RecordRuntime is fine.
    let mut tracker = InvariantTracker::from_state(&without);
    tracker.observe(&good("s1", 1), &h.st).unwrap();
}

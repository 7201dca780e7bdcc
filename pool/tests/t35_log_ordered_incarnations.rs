//! Log-ordered incarnations (docs/design/0002, issue 11 point 5): the pool
//! numbers a member's incarnations in apply; no process's clock decides
//! which process of a member id is newer.
//!
//! * A fresh process supersedes, whatever incarnation a legacy
//!   (wall-clock) join left behind.
//! * A retried hello of the same process is idempotent.
//! * A superseded process is refused, and stays refused.
//! * A retired process renews (asks again with known incarnation 0).
//! * Property: over random restarts, retries, expiries and leaves, every
//!   superseding join takes current + 1, only the current process is ever
//!   accepted, and replaying the log gives byte-identical state.

mod common;

use common::*;
use pool::*;
use proptest::prelude::*;

/// The incarnation a join granted (panics if it was rejected).
fn granted(e: Effect) -> u64 {
    match e {
        Effect::Joined { incarnation, .. } | Effect::AlreadyJoined { incarnation } => incarnation,
        other => panic!("not a join effect: {other:?}"),
    }
}

/// Ticks past the TTL and expires `m` at its current incarnation.
fn expire(h: &mut H, m: &str) {
    h.ticks(DEFAULT_HEARTBEAT_TTL_TICKS + 1);
    let rec = h.st.member(m).expect("member").clone();
    h.ok(Command::Expire(Expire {
        raft_term: 0,
        member: m.into(),
        incarnation: rec.incarnation,
        last_heartbeat_tick: rec.last_heartbeat_tick,
    }));
}

#[test]
fn fresh_process_supersedes_whatever_a_clock_said() {
    let mut h = H::new();
    // --- step: a legacy supervisor joined with its wall-clock ms.
    h.join("s1", 1_764_550_000_000, 4);
    // --- step: it restarts on a host whose clock is an hour behind: the
    // new process names no clock at all, and supersedes.
    let inc = granted(h.ok(join_process("s1", 11, 0, 4)));
    assert_eq!(inc, 1_764_550_000_001);
    // --- step: and again; each restart is current + 1.
    assert_eq!(granted(h.ok(join_process("s1", 12, 0, 4))), inc + 1);
    // A new member starts at 1.
    assert_eq!(granted(h.ok(join_process("s2", 13, 0, 4))), 1);
    h.assert_replay_identical();
}

#[test]
fn a_retried_hello_of_the_same_process_joins_once() {
    let mut h = H::new();
    let inc = granted(h.ok(join_process("s1", 7, 0, 4)));
    assert_eq!(inc, 1);
    // --- step: the reply was lost; the process retries (still knowing 0),
    // then re-attaches through another gateway knowing 1.
    assert_eq!(
        h.ok(join_process("s1", 7, 0, 4)),
        Effect::AlreadyJoined { incarnation: 1 }
    );
    assert_eq!(
        h.ok(join_process("s1", 7, 1, 4)),
        Effect::AlreadyJoined { incarnation: 1 }
    );
    assert_eq!(h.st.member("s1").map(|m| m.incarnation), Some(1));
    h.assert_replay_identical();
}

#[test]
fn a_superseded_process_is_refused_and_stays_refused() {
    let mut h = H::new();
    let old = granted(h.ok(join_process("s1", 7, 0, 4)));
    // --- step: a second process of the member id starts and supersedes.
    let new = granted(h.ok(join_process("s1", 8, 0, 4)));
    assert_eq!(new, old + 1);
    // --- step: the old one re-attaches naming what it was granted.
    assert_eq!(
        h.rejected(join_process("s1", 7, old, 4)),
        Reason::StaleIncarnation {
            given: old,
            current: new
        }
    );
    // --- step: even after the new one expired, the old one stays out
    // (only a process told "retired" asks again).
    expire(&mut h, "s1");
    assert!(matches!(
        h.rejected(join_process("s1", 7, old, 4)),
        Reason::StaleIncarnation { .. }
    ));
    // The new (retired) process is told so, and renews.
    assert_eq!(
        h.rejected(join_process("s1", 8, new, 4)),
        Reason::IncarnationRetired
    );
    assert_eq!(granted(h.ok(join_process("s1", 9, 0, 4))), new + 1);
    h.assert_replay_identical();
}

#[test]
fn a_retired_process_renews() {
    let mut h = H::new();
    let inc = granted(h.ok(join_process("s1", 7, 0, 4)));
    // --- step: paused past the TTL: expired.
    expire(&mut h, "s1");
    // --- step: it resumes and re-attaches: retired (same process id).
    assert_eq!(
        h.rejected(join_process("s1", 7, inc, 4)),
        Reason::IncarnationRetired
    );
    assert_eq!(
        h.rejected(join_process("s1", 7, 0, 4)),
        Reason::IncarnationRetired
    );
    // --- step: it renews under a new process id, knowing 0.
    assert_eq!(
        h.ok(join_process("s1", 70, 0, 4)),
        Effect::Joined {
            superseded: Some(inc),
            incarnation: inc + 1
        }
    );
    // --- step: after a leave, the same.
    h.ok(Command::Leave(Leave {
        member: "s1".into(),
        incarnation: inc + 1,
    }));
    assert_eq!(
        h.rejected(join_process("s1", 70, inc + 1, 4)),
        Reason::IncarnationRetired
    );
    assert_eq!(granted(h.ok(join_process("s1", 71, 0, 4))), inc + 2);
    h.assert_replay_identical();
}

#[derive(Clone, Debug)]
enum Step {
    /// A new process of member `m` starts (fresh process id, knows 0).
    Start { m: usize },
    /// Process `p` of member `m` (an earlier start) re-sends its hello.
    Retry { m: usize, p: usize },
    /// Member `m` expires (TTL passes without heartbeats).
    Expire { m: usize },
    /// A legacy join of `m` with a wall-clock incarnation.
    Legacy { m: usize, clock: u64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..2usize).prop_map(|m| Step::Start { m }),
        4 => (0..2usize, 0..6usize).prop_map(|(m, p)| Step::Retry { m, p }),
        1 => (0..2usize).prop_map(|m| Step::Expire { m }),
        1 => (0..2usize, 0..u64::from(u32::MAX)).prop_map(|(m, clock)| Step::Legacy { m, clock }),
    ]
}

/// A supervisor process as the model knows it.
#[derive(Clone, Debug)]
struct Process {
    pid: u64,
    /// Granted incarnation; 0 before the first grant.
    known: u64,
    /// Told superseded: it never asks again.
    superseded: bool,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn only_the_newest_process_holds_the_member(steps in prop::collection::vec(step(), 1..40)) {
        let mut h = H::new();
        let mut procs: [Vec<Process>; 2] = [Vec::new(), Vec::new()];
        let mut next_pid = 1u64;
        for s in steps {
            // A retry of a member no process started yet is a start.
            let s = match s {
                Step::Retry { m, .. } if procs[m].is_empty() => Step::Start { m },
                s => s,
            };
            match s {
                Step::Start { m } => {
                    let name = format!("m{m}");
                    let before = h.st.member(&name).map(|r| r.incarnation);
                    let inc = granted(h.ok(join_process(&name, next_pid, 0, 4)));
                    // current + 1, or 1 for a new member: never a clock.
                    prop_assert_eq!(inc, before.map_or(1, |b| b + 1));
                    for p in &mut procs[m] {
                        p.superseded = true;
                    }
                    procs[m].push(Process { pid: next_pid, known: inc, superseded: false });
                    next_pid += 1;
                }
                Step::Retry { m, p } => {
                    let name = format!("m{m}");
                    let i = p % procs[m].len();
                    let proc_ = procs[m][i].clone();
                    let rec = h.st.member(&name).expect("member").clone();
                    let outcome = h.apply(join_process(&name, proc_.pid, proc_.known, 4));
                    if proc_.superseded || rec.process_id != proc_.pid {
                        // A superseded process is refused, for good.
                        prop_assert!(
                            matches!(outcome, Outcome::Rejected(Reason::StaleIncarnation { .. })),
                            "{:?} for superseded {:?}", outcome, proc_
                        );
                        procs[m][i].superseded = true;
                    } else if matches!(rec.state, MemberState::Expired | MemberState::Leaving) {
                        prop_assert_eq!(outcome, Outcome::Rejected(Reason::IncarnationRetired));
                        // It renews: a new process id, knowing 0.
                        let inc = granted(h.ok(join_process(&name, next_pid, 0, 4)));
                        prop_assert_eq!(inc, rec.incarnation + 1);
                        procs[m][i] = Process { pid: next_pid, known: inc, superseded: false };
                        next_pid += 1;
                    } else {
                        // Idempotent: nothing changes.
                        prop_assert_eq!(outcome, Outcome::Applied(Effect::AlreadyJoined { incarnation: proc_.known }));
                    }
                }
                Step::Expire { m } => {
                    let name = format!("m{m}");
                    if h.st.member(&name).is_some_and(|r| matches!(r.state, MemberState::Active)) {
                        expire(&mut h, &name);
                    }
                }
                Step::Legacy { m, clock } => {
                    // A pre-0002 supervisor: only a higher clock supersedes.
                    let name = format!("m{m}");
                    let before = h.st.member(&name).cloned();
                    let outcome = h.join(&name, clock, 4);
                    match before {
                        Some(b) if clock < b.incarnation => prop_assert!(outcome.is_rejected()),
                        Some(b) if clock == b.incarnation => {}
                        _ => {
                            prop_assert!(!outcome.is_rejected(), "{:?}", outcome);
                            for p in &mut procs[m] {
                                p.superseded = true;
                            }
                        }
                    }
                }
            }
        }
        h.assert_replay_identical();
        let snap = h.snapshot();
        prop_assert!(PoolState::decode_snapshot(&snap).expect("decode").encode_snapshot() == snap);
    }
}

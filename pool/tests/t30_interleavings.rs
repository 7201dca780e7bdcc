//! Property test: random interleavings from several proposers that read the
//! state at different points and propose later. After every step I1–I8 hold
//! (the harness checks single-state invariants, the cross-step tracker, and
//! that rejections leave the snapshot byte-identical). At the end, replaying
//! the log on a fresh state gives byte-identical snapshots and a snapshot
//! round trip re-encodes to the same bytes.

mod common;

use common::*;
use pool::*;
use proptest::prelude::*;

const MEMBERS: usize = 5;
const SANDBOXES: usize = 12;
const READERS: usize = 3;

#[derive(Clone, Debug)]
enum Action {
    Join {
        m: usize,
        bump: bool,
        cap: u32,
    },
    Beat {
        mask: u8,
    },
    Tick,
    Launch {
        lid: usize,
        sb: usize,
    },
    Delete {
        sb: usize,
    },
    Stop {
        sb: usize,
    },
    Ack {
        sb: usize,
    },
    Report {
        sb: usize,
    },
    Leave {
        m: usize,
    },
    /// A proposer reads the state now...
    Read {
        r: usize,
    },
    /// ...and later runs the coordinator's plan on what it read.
    StaleCoordinator {
        r: usize,
    },
    /// ...or a takeover / ack / report built from its old read.
    StaleTakeover {
        r: usize,
        sb: usize,
    },
    StaleAck {
        r: usize,
        sb: usize,
    },
    StaleReport {
        r: usize,
        sb: usize,
    },
    /// The current leader's coordinator plan on the current state.
    Coordinator,
    Drain {
        m: usize,
        par: u32,
    },
    Rebalance {
        par: u32,
    },
    Cancel {
        op: usize,
    },
    LeaderChanged,
    /// The launcher records a runtime (one of two endpoints, so a second,
    /// different record is refused) for the current or a stale generation.
    RecordRuntime {
        sb: usize,
        variant: u8,
        stale: bool,
    },
    /// The launcher fails a generation (launch failed or runtime lost).
    FailLaunch {
        sb: usize,
        lost: bool,
    },
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        1 => (0..MEMBERS, any::<bool>(), 0..6u32).prop_map(|(m, bump, cap)| Action::Join { m, bump, cap }),
        4 => any::<u8>().prop_map(|mask| Action::Beat { mask: mask | 0x1f }),
        1 => any::<u8>().prop_map(|mask| Action::Beat { mask }),
        3 => Just(Action::Tick),
        3 => (0..40usize, 0..SANDBOXES).prop_map(|(lid, sb)| Action::Launch { lid, sb }),
        1 => (0..SANDBOXES).prop_map(|sb| Action::Delete { sb }),
        1 => (0..SANDBOXES).prop_map(|sb| Action::Stop { sb }),
        4 => (0..SANDBOXES).prop_map(|sb| Action::Ack { sb }),
        1 => (0..SANDBOXES).prop_map(|sb| Action::Report { sb }),
        1 => (0..MEMBERS).prop_map(|m| Action::Leave { m }),
        1 => (0..READERS).prop_map(|r| Action::Read { r }),
        1 => (0..READERS).prop_map(|r| Action::StaleCoordinator { r }),
        1 => (0..READERS, 0..SANDBOXES).prop_map(|(r, sb)| Action::StaleTakeover { r, sb }),
        1 => (0..READERS, 0..SANDBOXES).prop_map(|(r, sb)| Action::StaleAck { r, sb }),
        1 => (0..READERS, 0..SANDBOXES).prop_map(|(r, sb)| Action::StaleReport { r, sb }),
        4 => Just(Action::Coordinator),
        2 => (0..MEMBERS, 0..10u32).prop_map(|(m, par)| Action::Drain { m, par }),
        2 => (0..10u32).prop_map(|par| Action::Rebalance { par }),
        1 => (0..6usize).prop_map(|op| Action::Cancel { op }),
        1 => Just(Action::LeaderChanged),
        2 => (0..SANDBOXES, 0..2u8, any::<bool>())
            .prop_map(|(sb, variant, stale)| Action::RecordRuntime { sb, variant, stale }),
        1 => (0..SANDBOXES, any::<bool>()).prop_map(|(sb, lost)| Action::FailLaunch { sb, lost }),
    ]
}

fn m(i: usize) -> String {
    format!("m{i}")
}

fn sbid(i: usize) -> String {
    format!("s{i}")
}

fn ack_cmd(st: &PoolState, sb: &str) -> Option<Command> {
    let s = st.sandbox(sb)?;
    Some(Command::Acknowledge(Acknowledge {
        sandbox: sb.to_string(),
        generation: s.generation,
        member: s.owner.member.clone(),
        incarnation: s.owner.incarnation,
        term: s.owner.term,
    }))
}

fn report_cmd(st: &PoolState, sb: &str, n: u64) -> Option<Command> {
    let s = st.sandbox(sb)?;
    Some(report(
        sb,
        s.generation,
        &s.owner.member,
        s.owner.incarnation,
        s.owner.term,
        &format!("status-{n}"),
    ))
}

fn run(actions: Vec<Action>) {
    let mut h = H::new();
    h.ok(Command::Configure(Configure {
        raft_term: 0,
        heartbeat_ttl_ticks: 3,
        recovery_deadline_ticks: 6,
        operation_deadline_ticks: 25,
        retention_ticks: 0,
    }));
    let mut readers: Vec<PoolState> = vec![PoolState::new(); READERS];
    let mut incarnations = [0u64; MEMBERS];
    let mut op_ids: Vec<String> = Vec::new();
    let mut raft_term = 0;
    for (n, a) in actions.into_iter().enumerate() {
        match a {
            Action::Join { m: i, bump, cap } => {
                if bump || incarnations[i] == 0 {
                    incarnations[i] += 1;
                }
                h.join(&m(i), incarnations[i], cap);
            }
            Action::Beat { mask } => {
                let beats: Vec<Beat> = (0..MEMBERS)
                    .filter(|i| mask & (1 << i) != 0)
                    .map(|i| Beat {
                        member: m(i),
                        // Bit 7 sends a stale incarnation for m0.
                        incarnation: if i == 0 && mask & 0x80 != 0 {
                            incarnations[0].saturating_sub(1)
                        } else {
                            incarnations[i]
                        },
                    })
                    .collect();
                h.ok(Command::Heartbeat(Heartbeat { beats }));
            }
            Action::Tick => h.tick(),
            Action::Launch { lid, sb } => {
                h.launch(&format!("l{lid}"), &sbid(sb));
            }
            Action::Delete { sb } => {
                let g = h.st.sandbox(&sbid(sb)).map(|s| s.generation).unwrap_or(1);
                h.apply(Command::Delete(Delete {
                    raft_term: 0,
                    sandbox: sbid(sb),
                    generation: g,
                }));
            }
            Action::Stop { sb } => {
                let g = h.st.sandbox(&sbid(sb)).map(|s| s.generation).unwrap_or(1);
                h.apply(Command::Stop(Stop {
                    sandbox: sbid(sb),
                    generation: g,
                }));
            }
            Action::Ack { sb } => {
                if let Some(c) = ack_cmd(&h.st, &sbid(sb)) {
                    h.apply(c);
                }
            }
            Action::Report { sb } => {
                if let Some(c) = report_cmd(&h.st, &sbid(sb), n as u64) {
                    h.apply(c);
                }
            }
            Action::Leave { m: i } => {
                h.apply(Command::Leave(Leave {
                    member: m(i),
                    incarnation: incarnations[i],
                }));
            }
            Action::Read { r } => readers[r] = h.st.clone(),
            Action::StaleCoordinator { r } => {
                for c in plan(&readers[r], 0) {
                    h.apply(c);
                }
            }
            Action::StaleTakeover { r, sb } => {
                if readers[r].sandbox(&sbid(sb)).is_some() {
                    h.apply(takeover_of(&readers[r], &sbid(sb)));
                }
            }
            Action::StaleAck { r, sb } => {
                if let Some(c) = ack_cmd(&readers[r], &sbid(sb)) {
                    h.apply(c);
                }
            }
            Action::StaleReport { r, sb } => {
                if let Some(c) = report_cmd(&readers[r], &sbid(sb), n as u64) {
                    h.apply(c);
                }
            }
            Action::Coordinator => {
                for c in plan(&h.st, 0) {
                    h.apply(c);
                }
            }
            Action::Drain { m: i, par } => {
                let id = format!("op{}", op_ids.len());
                if let Outcome::Applied(_) = h.apply(Command::StartDrain(StartDrain {
                    operation_id: id.clone(),
                    member: m(i),
                    max_parallel: par,
                })) {
                    op_ids.push(id);
                }
            }
            Action::Rebalance { par } => {
                let id = format!("op{}", op_ids.len());
                if let Outcome::Applied(_) = h.apply(Command::StartRebalance(StartRebalance {
                    operation_id: id.clone(),
                    max_parallel: par,
                })) {
                    op_ids.push(id);
                }
            }
            Action::Cancel { op } => {
                let id = op_ids
                    .get(op)
                    .cloned()
                    .unwrap_or_else(|| "nope".to_string());
                h.apply(Command::CancelOperation(CancelOperation {
                    operation_id: id,
                }));
            }
            Action::LeaderChanged => {
                raft_term += 1;
                h.ok(Command::LeaderChanged(LeaderChanged { raft_term }));
            }
            Action::RecordRuntime { sb, variant, stale } => {
                let g = h.st.sandbox(&sbid(sb)).map(|s| s.generation).unwrap_or(1);
                let generation = if stale { g.saturating_sub(1).max(1) } else { g };
                h.apply(Command::RecordRuntime(RecordRuntime {
                    raft_term: 0,
                    sandbox: sbid(sb),
                    generation,
                    name: format!("rt-{sb}-g{generation}-v{variant}"),
                    address: format!("10.0.{variant}.{sb}:7400"),
                    ca_pem: format!("-----BEGIN CERTIFICATE-----\n{variant}\n"),
                    driver_scope: "process:0123456789abcdef0123456789abcdef".into(),
                }));
            }
            Action::FailLaunch { sb, lost } => {
                let g = h.st.sandbox(&sbid(sb)).map(|s| s.generation).unwrap_or(1);
                let reason = if lost {
                    format!("RuntimeLost: rt-{sb}-g{g} is gone")
                } else {
                    "LaunchFailed: Unschedulable".to_string()
                };
                h.apply(Command::FailLaunch(FailLaunch {
                    raft_term: 0,
                    sandbox: sbid(sb),
                    generation: g,
                    reason,
                }));
            }
        }
    }
    h.assert_replay_identical();
    let snap = h.snapshot();
    let decoded = PoolState::decode_snapshot(&snap).expect("decode snapshot");
    assert!(decoded.encode_snapshot() == snap, "snapshot round trip");
    decoded.check_invariants().expect("decoded invariants");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_under_concurrent_stale_proposers(actions in proptest::collection::vec(action(), 1..250)) {
        run(actions);
    }
}

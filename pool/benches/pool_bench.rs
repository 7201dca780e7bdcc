//! `cargo bench -p pool`: 10,000 sandboxes over 200 members.
//!
//! std::time is used here only, never in the library.

use std::time::Instant;

use pool::*;

const MEMBERS: usize = 200;
const SANDBOXES: usize = 10_000;

fn main() {
    let mut st = PoolState::new();
    let mut idx = 0u64;
    let mut apply = |st: &mut PoolState, c: &Command| {
        idx += 1;
        st.apply(idx, c)
    };

    // Joins.
    let t = Instant::now();
    for i in 0..MEMBERS {
        apply(
            &mut st,
            &Command::Join(Join {
                member: format!("member-{i}"),
                uid: format!("uid-{i}"),
                address: format!("10.0.{}.{}:7000", i / 256, i % 256),
                capacity: 100,
                process_id: i as u64 + 1,
                ..Join::default()
            }),
        );
    }
    let join_s = t.elapsed().as_secs_f64();

    // Launch + acknowledge + report: 3 commands per sandbox.
    let t = Instant::now();
    let mut n = 0u64;
    for i in 0..SANDBOXES {
        let sb = format!("sandbox-{i}");
        let o = apply(
            &mut st,
            &Command::Launch(Launch {
                launch_id: format!("launch-{i}"),
                sandbox: sb.clone(),
                material_ref: format!("obj/{i}"),
            }),
        );
        let Outcome::Applied(Effect::Admitted { assignment: a, .. }) = o else {
            panic!("not admitted: {o:?}")
        };
        apply(
            &mut st,
            &Command::Acknowledge(Acknowledge {
                sandbox: sb.clone(),
                generation: 1,
                member: a.member.clone(),
                incarnation: 1,
                term: 1,
            }),
        );
        apply(
            &mut st,
            &Command::Report(Report {
                sandbox: sb,
                generation: 1,
                member: a.member,
                incarnation: 1,
                term: 1,
                status: "running".into(),
            }),
        );
        n += 3;
    }
    let launch_s = t.elapsed().as_secs_f64();

    // Heartbeat batches (one per gateway of 67 members) and ticks.
    let t = Instant::now();
    let mut hb = 0u64;
    for round in 0..100u64 {
        for g in 0..3 {
            let beats = (0..MEMBERS)
                .filter(|i| i % 3 == g)
                .map(|i| Beat {
                    member: format!("member-{i}"),
                    incarnation: 1,
                })
                .collect();
            apply(&mut st, &Command::Heartbeat(Heartbeat { beats }));
            hb += 1;
        }
        apply(
            &mut st,
            &Command::Tick(Tick {
                raft_term: 0,
                expected_now_tick: round,
            }),
        );
        hb += 1;
    }
    let hb_s = t.elapsed().as_secs_f64();

    // Coordinator pass, steady state (nothing to do).
    let t = Instant::now();
    let reps = 20;
    for _ in 0..reps {
        let c = plan(&st, 0);
        assert!(c.is_empty(), "{} proposals at steady state", c.len());
    }
    let plan_idle_ms = t.elapsed().as_secs_f64() * 1000.0 / reps as f64;

    // Coordinator pass with a running rebalance after a member joined.
    apply(
        &mut st,
        &Command::Join(Join {
            member: "member-new".into(),
            uid: "uid-new".into(),
            address: "10.9.9.9:7000".into(),
            capacity: 100,
            process_id: u64::MAX,
            ..Join::default()
        }),
    );
    apply(
        &mut st,
        &Command::StartRebalance(StartRebalance {
            operation_id: "rb".into(),
            max_parallel: 8,
        }),
    );
    let planned = st.operations()["rb"].moves_planned;
    let t = Instant::now();
    let reps = 5;
    let mut proposals = 0;
    for _ in 0..reps {
        proposals = plan(&st, 0).len();
    }
    let plan_rb_ms = t.elapsed().as_secs_f64() * 1000.0 / reps as f64;

    // Snapshot.
    let t = Instant::now();
    let snap = st.encode_snapshot();
    let enc_ms = t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    let back = PoolState::decode_snapshot(&snap).expect("decode");
    let dec_ms = t.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(back.encode_snapshot(), snap);
    let t = Instant::now();
    st.check_invariants().expect("invariants");
    let inv_ms = t.elapsed().as_secs_f64() * 1000.0;

    println!("| measure | value |");
    println!("| --- | --- |");
    println!("| joins (200) | {:.0} cmds/s |", MEMBERS as f64 / join_s);
    println!(
        "| launch+ack+report ({n} cmds) | {:.0} cmds/s |",
        n as f64 / launch_s
    );
    println!(
        "| heartbeat batches (67 beats) + ticks ({hb} cmds) | {:.0} cmds/s |",
        hb as f64 / hb_s
    );
    println!("| coordinator pass, steady (10k sandboxes) | {plan_idle_ms:.2} ms |");
    println!(
        "| coordinator pass, rebalance running ({proposals} proposals, {planned} planned moves) | {plan_rb_ms:.2} ms |"
    );
    println!(
        "| snapshot size | {} bytes ({:.1} B/sandbox) |",
        snap.len(),
        snap.len() as f64 / SANDBOXES as f64
    );
    println!("| snapshot encode | {enc_ms:.2} ms |");
    println!("| snapshot decode (+ ring rebuild) | {dec_ms:.2} ms |");
    println!("| check_invariants | {inv_ms:.2} ms |");
    println!(
        "| placement stability: join 201st member, share moved (planned/10k) | {:.4} (expected ~{:.4}) |",
        planned as f64 / SANDBOXES as f64,
        1.0 / (MEMBERS as f64 + 1.0)
    );
}
